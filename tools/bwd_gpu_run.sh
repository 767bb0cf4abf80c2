#!/bin/bash
# temporary: the backward's first GPU check and timing
tar xzf .ab/payload.tgz
K="build-rt/bin/kiln attention --bundles build/bundles --backward"
nvidia-smi --query-gpu=name --format=csv,noheader
for d in 64 128; do for c in "" "--causal"; do
  for s in 1 100 1000 4095; do timeout 60 $K --b 2 --h 4 --hkv 2 --s $s --d $d $c --iters 0 2>&1 | tail -1; done
done; done
timeout 60 $K --b 1 --h 4 --hkv 2 --s 1000 --skv 3000 --d 128 --causal --iters 0 2>&1 | tail -1
timeout 60 $K --b 1 --h 2 --hkv 2 --s 1000 --d 64 --dtype f16 --iters 0 2>&1 | tail -1
for d in 64 128; do for s in 4096 16384; do for c in "" "--causal"; do
  timeout 90 $K --b $((16384 / s)) --h 16 --s $s --d $d $c --iters 10 2>&1 | tail -1
done; done; done
timeout 200 python3 tools/attention_peers.py --backward --problems 64:4096,64:16384,128:4096,128:16384 --iters 10
