#!/usr/bin/env bash
# The whole GPU suite in one command, on a GPU machine without LLVM: the runtime-only build's
# tests (driver, JIT errors, every bundle's correctness), the GPU's outputs against the CPU
# emulator's (kiln crosscheck), the GEMM entry point at ragged sizes, in its typed and epilogue
# variants and over the model-shape sweep, 8-bit inputs and grouped GEMMs against torch's, kiln
# tune on the sweep's hardest shapes, and the benchmark table.
#   KILN_RT_BUILD  runtime-only build directory   (default build-rt)
#   KILN_BUNDLES   bundle directory                (default build/bundles)
#   KILN_SIZES     bench sizes                     (default 4096,8192,6144x4096x2048)
#   OUT            where logs and bench.tsv go     (default /tmp/kiln-gpu)
#   KILN_PY_BUILD  a build with the Python module for this machine's python3 (default build-py;
#                  configure it with -DKILN_RUNTIME_ONLY=ON -DKILN_STATIC_ABSEIL=OFF
#                  -DPython_EXECUTABLE=<a python of the GPU machine's version, with nanobind>);
#                  KILN_PY_LIBS: a directory of the shared libraries it needs, if not installed
#   KILN_SUITE_SKIP  sections to leave out, by name: crosscheck reference python ragged variants
#                    layouts fp8 grouped sweep tune bench (e.g. "crosscheck tune bench" where device time is
#                    short)
set -u
rt=${KILN_RT_BUILD:-build-rt}
bundles=${KILN_BUNDLES:-build/bundles}
sizes=${KILN_SIZES:-4096,8192,6144x4096x2048}
out=${OUT:-/tmp/kiln-gpu}
mkdir -p "$out"
status=0
section() { echo "== $1   [${SECONDS}s]"; }  # each section's start, seconds into the suite
skip() { [[ " ${KILN_SUITE_SKIP:-} " == *" $1 "* ]] && echo "== $1: skipped (KILN_SUITE_SKIP)"; }
for name in ${KILN_SUITE_SKIP:-}; do
  case $name in
    crosscheck|reference|python|ragged|variants|layouts|fp8|grouped|sweep|tune|bench) ;;
    *) echo "KILN_SUITE_SKIP: no section '$name' (crosscheck reference python ragged variants layouts fp8 grouped sweep tune bench)" >&2
       exit 2 ;;
  esac
done

section "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || status=1
section "ldd $rt/bin/kiln"
ldd "$rt/bin/kiln"
section "runtime tests (bundles from $bundles)"
KILN_BUNDLE_DIR="$bundles" timeout 300 "$rt/bin/runtime_test" --gtest_brief=1 >"$out/runtime_test.log" 2>&1 || status=1
tail -n 15 "$out/runtime_test.log"
if ! skip crosscheck; then
section "the GPU's outputs against the emulator's on the same inputs, element by element"
timeout 300 "$rt/bin/kiln" --bundles "$bundles" crosscheck 2>&1 | tee "$out/crosscheck.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if ! skip reference; then
section "checked against kiln's reference kernel instead of cuBLAS (KILN_REFERENCE=kiln)"
KILN_REFERENCE=kiln timeout 120 "$rt/bin/kiln" --bundles "$bundles" bench --sizes 2048,4096x2048x1024 \
  --iters 3 "$@" || status=1
fi
if ! skip python; then
py=${KILN_PY_BUILD:-build-py}
# A Python check against torch: its title, its script under tools/, its log.
py_check() {
  section "$1"
  LD_LIBRARY_PATH="${KILN_PY_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONPATH="$py/python" \
    KILN_BUNDLE_DIR="$bundles" timeout 300 python3 "tools/$2" 2>&1 | tee "$out/$3"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
if [ -d "$py/python/kiln" ]; then
  py_check "the Python module against torch (tools/python_gpu_check.py)" python_gpu_check.py python.log
  py_check "decode attention's correctness grid: every D, Skv 1 to 131072, dense and paged (tools/decode_check.py)" \
    decode_check.py decode_check.log
  py_check "packed sequences: correctness, and speed against dense at equal tokens (tools/varlen_check.py)" \
    varlen_check.py varlen.log
  py_check "decode attention against cuDNN, flash and a device copy (tools/decode_bench.py)" \
    decode_bench.py decode.log
  py_check "a new user's calls: random shapes, layouts, types and options (tools/python_fuzz.py)" \
    python_fuzz.py fuzz.log
else
  section "the Python module against torch (tools/python_gpu_check.py)"
  echo "no $py/python/kiln: the Python module was not built for this machine (see KILN_PY_BUILD)"
fi
fi
sweep=""
for m in 1 16 64 128 256 1024 4096 16384; do
  for nk in 6144x4096 4096x4096 28672x4096 4096x14336 10240x8192 8192x28672; do sweep="$sweep,${m}x${nk}"; done
done
# Ragged: M in {1, 7, 100, 1000, 4095} with each (N, K) of the sweep; N, then K, in that set at
# 1024 x 4096 for the other two.
ragged=""
for m in 1 7 100 1000 4095; do
  for nk in 6144x4096 4096x4096 28672x4096 4096x14336 10240x8192 8192x28672; do ragged="$ragged,${m}x${nk}"; done
  ragged="$ragged,1024x${m}x4096,1024x4096x${m}"
done
if ! skip ragged; then
section "the GEMM entry point (kiln gemm) at ragged sizes"
timeout 420 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 3 --sizes "${ragged#,}" 2>&1 \
  | grep -v '^# [0-9]*x' | tee "$out/gemm_ragged.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if ! skip variants; then
section "the bundled variants (input and output types, each epilogue term) on each kind of kernel"
for v in f16:f16: bf16:f32: bf16:bf16:scale,bias_col,gelu,residual f16:f16:bias_row,relu bf16:f32:scale,silu; do
  IFS=: read -r in outt epi <<<"$v"
  timeout 120 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 3 --dtype "$in" --out_dtype "$outt" --epilogue "$epi" \
    --sizes 1x4096x4096,13x1000x64,100x100x100,264x300x200,4096x4096x4096,1024x6144x4096,128x4096x14336,16x6144x4096,64x10240x8192,40x4096x8192,64x8192x8192 2>&1 \
    | grep -v '^# [0-9]*x' | tee -a "$out/gemm_variants.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
fi
if ! skip layouts; then
section "MN-major A and B (--layout A's order,B's order), each with the three tiles and a split"
for layout in col,row row,row col,col; do
  timeout 100 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 10 --layout "$layout" \
    --sizes 4096x4096x4096,1024x6144x4096,256x10240x8192,264x304x200,136x4096x4096,16x4096x4096,64x8192x8192 2>&1 \
    | grep -v '^# [0-9]*x' | tee -a "$out/gemm_layouts.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
fi
if ! skip fp8; then
section "8-bit inputs (kiln gemm --dtype e4m3) at the FP8 shapes, each scaling, against torch._scaled_mm (tools/fp8_peers.py)"
fp8_sizes=4096x4096x4096,8192x8192x8192,4096x7168x7168,4096x2112x7168,4096x24576x1536,128x7168x16384,64x2112x7168,77x1000x528
for scaling in tensorwise rowwise blockwise; do
  timeout 200 "$rt/bin/kiln" --bundles "$bundles" gemm --dtype e4m3 --scaling "$scaling" --iters 20 \
    --sizes "$fp8_sizes" 2>&1 | tee -a "$out/fp8.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
(cd tools && timeout 120 python3 fp8_peers.py --sizes "${fp8_sizes%,77x1000x528}") 2>&1 | tee -a "$out/fp8.log"
fi
if ! skip grouped; then
section "grouped GEMMs (kiln grouped-gemm): ragged and masked groups, then the MoE shapes against torch._grouped_mm (tools/grouped_peers.py)"
grouped_gemm() { timeout 120 "$rt/bin/kiln" --bundles "$bundles" grouped-gemm "$@" 2>&1 | tee -a "$out/grouped.log"; [ "${PIPESTATUS[0]}" = 0 ] || status=1; }
grouped_gemm --experts 6 --tokens 70,0,1,200,9,3000 --n 4104 --k 1032 --iters 3
grouped_gemm --experts 4 --tokens 3,0,72,1 --n 1000 --k 520 --masked --capacity 80 --iters 3
for p in 8x4096x4096x7168 32x256x4096x7168 256x32x2048x7168 8x1024x14336x4096; do
  IFS=x read -r e t n k <<<"$p"
  grouped_gemm --experts "$e" --tokens "$t" --n "$n" --k "$k" --iters 20
done
(cd tools && timeout 120 python3 grouped_peers.py \
  --problems 8x4096x4096x7168,32x256x4096x7168,256x32x2048x7168,8x1024x14336x4096) 2>&1 | tee -a "$out/grouped.log"
fi
if ! skip sweep; then
section "the model-shape sweep"
timeout 300 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 10 --sizes "${sweep#,}" --out "$out/gemm_sweep.tsv" \
  2>&1 | grep -v '^# [0-9]*x' | tee "$out/gemm_sweep.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if ! skip tune; then
section "kiln tune: every candidate kernel timed at the sweep's hardest shapes, the fastest to a cache kiln gemm reads"
tuned=256x10240x8192,256x6144x4096,128x4096x4096,64x4096x4096,16x28672x4096
timeout 240 "$rt/bin/kiln" --bundles "$bundles" tune --iters 5 --sizes "$tuned" --tune_cache "$out/tune.txt" \
  2>&1 | grep '^# ' | tee "$out/tune.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
timeout 120 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 10 --sizes "$tuned" --tune_cache "$out/tune.txt" \
  2>&1 | grep -v '^# [0-9]*x' | tee -a "$out/tune.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if ! skip bench; then
section "bench"
timeout 420 "$rt/bin/kiln" --bundles "$bundles" bench --iters 10 --sizes "$sizes" --out "$out/bench.tsv" "$@" \
  2>&1 | tee "$out/bench.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
section "done"
exit $status
