#!/usr/bin/env bash
# kiln beside the CUDA originals of the mma.sync worklogs, on a GPU machine: ROUNDS rounds, each
# running the side-by-side harness for the upstream kernels (built outside this repository, see
# docs/PERF.md) and then `kiln bench` for the matching kiln versions, so that both see the same
# clock and power drift; tools/side_by_side.py prints the medians over the rounds.
#   side_by_side.sh UPSTREAM_HARNESS [SIZES...]      (default sizes: 4096 8192)
#   ROUNDS (default 3), ITERS (default 20), KILN_RT_BUILD (build-rt), KILN_BUNDLES (build/bundles)
set -euo pipefail
harness=$1; shift
sizes=${*:-4096 8192}
rt=${KILN_RT_BUILD:-build-rt}
bundles=${KILN_BUNDLES:-build/bundles}
kernels=$("$rt/bin/kiln" --bundles "$bundles" list | grep -E '^(hgemm|ampere)/')
for round in $(seq "${ROUNDS:-3}"); do
  for s in $sizes; do
    timeout 300 "$harness" "$s" "$s" "$s" "${ITERS:-20}" 2>&1 | grep -E '^(hgemm|learn-cuda)/' | sed 's/^/UPSTREAM /'
  done
  timeout 300 "$rt/bin/kiln" --bundles "$bundles" bench --sizes "$(echo $sizes | tr ' ' ',')" \
    --iters "${ITERS:-20}" $kernels 2>&1 | grep -E '^(hgemm|ampere)/' | sed 's/^/KILN /'
done
