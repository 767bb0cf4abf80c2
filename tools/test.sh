#!/usr/bin/env bash
# Builds (incrementally) and runs every test. GPU tests skip here with the reason when there is
# no GPU; tools/gpu_suite.sh runs them on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j2
# Say why the GPU tests skipped (ctest only counts them).
build/bin/runtime_test --gtest_filter='*Gpu*' 2>&1 | grep -m1 "no GPU here" | sed 's/^.*Skipped/GPU tests skipped:/' || true
