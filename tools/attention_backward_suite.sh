#!/usr/bin/env bash
# The attention backward on the GPU: dQ, dK and dV checked against the fp64 host reference at
# D = 64, 128 and 256, causal and not, grouped-query heads and ragged lengths (S = 1 to 16384, S != Skv,
# f16, dQ by atomics and by its own kernel (--deterministic), packed sequences), each run ten times for the
# same bytes (dK and dV; dQ too where deterministic); then timed on the problems of the backward's PERF
# entry, both dQ forms at D 64 and 128, next to torch's SDPA flash and cuDNN backward in the same call.
#   KILN_RT_BUILD, KILN_BUNDLES, OUT as for tools/gpu_suite.sh; ATTENTION_ITERS (default 20).
set -u
rt=${KILN_RT_BUILD:-build-rt}
bundles=${KILN_BUNDLES:-build/bundles}
out=${OUT:-/tmp/kiln-gpu}
iters=${ATTENTION_ITERS:-20}
mkdir -p "$out"
status=0
kiln() { timeout 90 "$rt/bin/kiln" --bundles "$bundles" attention --backward "$@"; }

echo "== attention backward: correctness (fp64 reference; every head of small problems, two of large)"
for d in 64 128 256; do
  for causal in --nocausal --causal; do
    for shape in "--b 2 --h 4 --hkv 2 --s 1 --skv 38" "--b 2 --h 4 --hkv 2 --s 100" \
                 "--b 1 --h 4 --hkv 2 --s 1000 --skv 1037" "--b 1 --h 2 --s 4095" "--b 2 --h 2 --s 1"; do
      kiln --d "$d" $causal $shape --iters 0 || status=1
    done
    kiln --d "$d" $causal --dtype f16 --b 1 --h 2 --s 1000 --iters 0 || status=1
    if [ "$d" != 256 ]; then  # (dQ by atomics, the default at D 64 and 128: also dQ's own kernel)
      kiln --d "$d" $causal --deterministic --b 1 --h 4 --hkv 1 --s 1000 --iters 0 || status=1
    fi
  done
done 2>&1 | tee "$out/attention_backward_check.log"
kiln --d 128 --causal --b 1 --h 2 --hkv 1 --s 16384 --iters 0 2>&1 | tee -a "$out/attention_backward_check.log"
echo "== attention backward over packed sequences (varlen): correctness, then against dense at equal tokens"
for d in 64 128 256; do
  for causal in --nocausal --causal; do
    kiln --d "$d" $causal --h 4 --hkv 2 --varlen 7,100,1000,4095,1,3000 --iters 0 || status=1
  done
done 2>&1 | tee -a "$out/attention_backward_check.log"
kiln --d 128 --causal --h 2 --hkv 1 --varlen 16384,1,777 --iters 0 2>&1 | tee -a "$out/attention_backward_check.log"
for causal in --nocausal --causal; do
  kiln --d 128 $causal --h 16 --varlen 4096,4096,4096,4096 --iters "$iters" || status=1
  kiln --d 128 $causal --h 16 --b 4 --s 4096 --iters "$iters" || status=1
done 2>&1 | tee -a "$out/attention_backward_check.log"
grep -q FAIL "$out/attention_backward_check.log" && status=1

echo "== attention backward: speed (B * S = 16384, 16 heads, bf16; median of $iters)"
for ds in 64:4096 64:16384 128:4096 128:16384 256:4096 256:16384; do
  IFS=: read -r d s <<<"$ds"
  for causal in --nocausal --causal; do
    kiln --d "$d" --s "$s" --b $((16384 / s)) --h 16 $causal --iters "$iters" || status=1
    if [ "$d" != 256 ]; then
      kiln --d "$d" --s "$s" --b $((16384 / s)) --h 16 $causal --deterministic --iters "$iters" || status=1
    fi
  done
done 2>&1 | tee "$out/attention_backward_speed.log"
timeout 240 python3 tools/attention_peers.py --backward --problems 64:4096,64:16384,128:4096,128:16384,256:4096,256:16384 \
  --iters "$iters" 2>&1 | tee "$out/attention_backward_peers.log"
exit $status
