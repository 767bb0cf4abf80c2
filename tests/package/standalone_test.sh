#!/usr/bin/env bash
# The package works from outside the tree: install kiln to a temporary prefix, build
# examples/standalone against it with find_package(kiln), and run it twice with a fresh compile
# cache: the first run lowers the kernel, the second reads it from the cache and saves the bundle,
# which softmax_run (built against the runtime component alone) loads and launches; then it runs
# hopper_gemm (TMA ring, mbarriers, wgmma). Without a GPU they check their kernels in kiln's PTX
# emulator.
#   standalone_test.sh <kiln build dir>
set -euo pipefail
# Checks read the outputs from here-strings, not through `echo | grep -q`: grep -q exits at its
# first match, and under pipefail the echo still writing a long output then fails the pipeline.
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples/standalone" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" >/dev/null

export KILN_CACHE_DIR="$work/cache"
first=$("$work/build/softmax")
echo "$first" | grep -E '^(compiled|ptxas|no |launched|softmax|cache:|saved)'
grep -q '(lowered,' <<< "$first" || { echo "FAIL: the first run did not lower the kernel"; exit 1; }
grep -q '^\.entry standalone_softmax\|\.entry standalone_softmax' <<< "$first" ||
  { echo "FAIL: no PTX entry in the output"; exit 1; }
second=$("$work/build/softmax" --quiet --save "$work/bundle")
echo "$second"
grep -q '(from the cache,' <<< "$second" || { echo "FAIL: the second run compiled again"; exit 1; }
grep -q '^softmax correct' <<< "$second" || { echo "FAIL: the kernel was not checked"; exit 1; }
third=$("$work/build/softmax_run" --load "$work/bundle" --rows 33 --cols 1000)
echo "$third"
grep -q '^loaded standalone/softmax' <<< "$third" || { echo "FAIL: softmax_run did not load the bundle"; exit 1; }
grep -q '^softmax correct' <<< "$third" || { echo "FAIL: softmax_run did not check the kernel"; exit 1; }
if ! gemm=$("$work/build/hopper_gemm" 2>&1); then
  echo "$gemm"; echo "FAIL: hopper_gemm failed"; exit 1
fi
echo "$gemm"
grep -q '^hopper_gemm correct' <<< "$gemm" || { echo "FAIL: hopper_gemm did not find its product correct"; exit 1; }
grep -q "^kiln's own GEMM entry point would run gemm/" <<< "$gemm" ||
  { echo "FAIL: kiln::kiln did not bring the entry points (kiln::ops)"; exit 1; }
# A mistake in the user's own kernel is reported at the user's own line.
if planted=$("$work/build/hopper_gemm" --plant 2>&1); then
  echo "FAIL: hopper_gemm --plant passed"; exit 1
fi
grep -m1 'released to the producer too early' <<< "$planted"
grep -q 'standalone/hopper_gemm.cc:[0-9]*.*released to the producer too early' <<< "$planted" ||
  { echo "FAIL: the planted mistake was not reported at a line of hopper_gemm.cc"; exit 1; }
# ... and the release that came too early, at its own line (the planted Arrive).
grep -q 'released by the arrival at PTX line [0-9]*, [^ ]*standalone/hopper_gemm.cc:98,' <<< "$planted" ||
  { echo "FAIL: the early release was not named at hopper_gemm.cc:98"; exit 1; }
# The Python module as installed (where the build has one): from <prefix>/lib/python, on the
# emulator, reading the installed bundles.
if [ -n "${KILN_PYTHON:-}" ] && [ -d "$work/prefix/lib/python/kiln" ]; then
  env -u KILN_BUNDLE_DIR PYTHONPATH="$work/prefix/lib/python" "$KILN_PYTHON" -c "
import numpy as np, kiln
assert kiln.bundle_dir().startswith('$work/prefix/share/kiln/bundles'), kiln.bundle_dir()
x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
y = kiln.softmax(x)
assert abs(float(y.sum()) - 3.0) < 0.05, y.sum()
print('installed Python module: softmax on the emulator from', kiln.bundle_dir())
" || { echo "FAIL: the installed Python module"; exit 1; }
fi
if grep -qE 'libLLVM|libMLIR' <<< "$(ldd "$work/build/softmax_run")"; then
  echo "FAIL: softmax_run links LLVM"; exit 1
fi
ls "$work/prefix/bin/kiln" "$work/prefix/include/kiln/kernel.h" "$work/prefix/include/kiln/compile.h" \
   "$work/prefix/include/kiln/runtime/launch.h" >/dev/null
echo "PASS"
