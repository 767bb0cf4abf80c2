#!/usr/bin/env bash
# Builds (incrementally) and runs every test. GPU tests skip here with the reason when there is
# no GPU; tools/gpu_suite.sh runs them on a GPU machine. Then the sanitizer job, under
# AddressSanitizer and UndefinedBehaviorSanitizer: the runtime, the bundle loaders, the emulator
# and the fuzz tests (a runtime-only build in build-san/), and the DSL's and the lowering's own
# unit tests (dsl_core_test in build-san-core/; LLVM and MLIR themselves are not instrumented).
# KILN_SANITIZE=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
python_flag=()  # the venv tools/setup.sh makes, where it is
[ -x .venv/bin/python ] && python_flag=(-DPython_EXECUTABLE="$PWD/.venv/bin/python")
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "${python_flag[@]}" >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j2
# Say why the GPU tests skipped (ctest only counts them).
build/bin/runtime_test --gtest_filter='*Gpu*' 2>&1 | grep -m1 "no GPU here" | sed 's/^.*Skipped/GPU tests skipped:/' || true

if [ "${KILN_SANITIZE:-1}" != 0 ]; then
  start=$(date +%s)
  [ -f build-san/build.ninja ] ||
    cmake -S . -B build-san -G Ninja -DKILN_RUNTIME_ONLY=ON -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1" \
      >/dev/null
  cmake --build build-san --target runtime_test
  # -O0 with line tables only: a third less building than -O1 -g, and the DSL's unit tests run in
  # seconds either way (docs/perf/2026-11-29-build-and-test-time.md).
  [ -f build-san-core/build.ninja ] ||
    cmake -S . -B build-san-core -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" \
      -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O0" \
      >/dev/null
  cmake --build build-san-core --target dsl_core_test
  built=$(date +%s)
  # Every finding fails the run: a leak or an out-of-bounds access (ASan), undefined behaviour
  # (UBSan stops at the first report).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    build-san/bin/runtime_test --gtest_brief=1 2>&1 | tee build-san/runtime_test.log |
    grep -E '^fuzz |PASSED|FAILED|ERROR|runtime error|Sanitizer' || true
  status=${PIPESTATUS[0]}
  # vptr checks need RTTI, which LLVM's classes lack.
  KILN_CACHE_DIR= ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    build-san-core/bin/dsl_core_test --gtest_brief=1 2>&1 | tee build-san-core/dsl_core_test.log |
    grep -E 'PASSED|FAILED|ERROR|runtime error|Sanitizer' || true
  core_status=${PIPESTATUS[0]}
  echo "sanitizer job: build $((built - start)) s, tests $(($(date +%s) - built)) s (ASan+UBSan, runtime_test and dsl_core_test)"
  [ "$status" = 0 ] || { echo "sanitizer job failed: build-san/runtime_test.log"; exit 1; }
  [ "$core_status" = 0 ] || { echo "sanitizer job failed: build-san-core/dsl_core_test.log"; exit 1; }
fi
