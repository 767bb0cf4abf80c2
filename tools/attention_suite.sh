#!/usr/bin/env bash
# Attention on the GPU: attention/hopper checked against the fp64 host reference at every head
# dimension, causal and not, grouped-query heads and ragged lengths, then timed on the problems of
# docs/PERF.md's attention table next to torch's SDPA flash and cuDNN backends in the same call.
#   KILN_RT_BUILD, KILN_BUNDLES, OUT as for tools/gpu_suite.sh; ATTENTION_ITERS (default 20);
#   ATTENTION_TILINGS: variants of attention/hopper to time besides (kiln bundle writes them).
set -u
rt=${KILN_RT_BUILD:-build-rt}
bundles=${KILN_BUNDLES:-build/bundles}
out=${OUT:-/tmp/kiln-gpu}
iters=${ATTENTION_ITERS:-20}
mkdir -p "$out"
status=0
kiln() { timeout 60 "$rt/bin/kiln" --bundles "$bundles" attention "$@"; }

echo "== attention: correctness (fp64 reference; every row of small problems, 384 rows of large ones)"
for d in 64 128 256; do
  for causal in --nocausal --causal; do
    for shape in "--b 1 --h 4 --hkv 1 --s 1000" "--b 2 --h 2 --s 4095" "--b 1 --h 2 --s 100 --skv 1000" \
                 "--b 1 --h 2 --s 1000 --skv 100" "--b 3 --h 2 --s 1" "--b 1 --h 4 --hkv 2 --s 16384"; do
      kiln --d "$d" $causal $shape --iters 0 || status=1
    done
    kiln --d "$d" $causal --dtype f16 --b 1 --h 6 --hkv 3 --s 1000 --skv 4095 --iters 0 || status=1
  done
done 2>&1 | tee "$out/attention_check.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
grep -q FAIL "$out/attention_check.log" && status=1

echo "== attention: speed (B * S = 16384, 16 heads, bf16; median of $iters)"
for ds in 64:4096 64:16384 128:1024 128:4096 128:16384; do
  IFS=: read -r d s <<<"$ds"
  for causal in --nocausal --causal; do
    kiln --d "$d" --s "$s" --b $((16384 / s)) --h 16 $causal --iters "$iters" || status=1
  done
done 2>&1 | tee "$out/attention_speed.log"
# Other tilings of the Hopper kernel (ATTENTION_TILINGS="d64.wg3 d128.bn176 ..."), each at the
# speed problems of its head dimension, causal variants where the name says causal.
for tiling in ${ATTENTION_TILINGS:-}; do
  d=${tiling%%.*}; d=${d#d}
  causal=--nocausal; [[ $tiling == *causal* ]] && causal=--causal
  for s in 1024 4096 16384; do
    [ "$d" = 64 ] && [ "$s" = 1024 ] && continue
    kiln --kernel "attention/hopper.$tiling" --d "$d" --s "$s" --b $((16384 / s)) --h 16 $causal --iters "$iters" \
      || status=1
  done
done 2>&1 | tee "$out/attention_tilings.log"
timeout 240 python3 tools/attention_peers.py --iters "$iters" 2>&1 | tee "$out/attention_peers.log"
exit $status
