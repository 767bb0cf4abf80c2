#!/usr/bin/env bash
# Rewrites tests/golden/ptx.sha256 from the current build (the GoldenPtx test in update mode).
# Run after a change that is meant to change some kernel's PTX; the file's diff shows which.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target dsl_test
KILN_UPDATE_GOLDEN=1 build/bin/dsl_test --gtest_filter='GoldenPtx.*' | grep -m1 wrote
git diff --stat tests/golden/ptx.sha256 || true
