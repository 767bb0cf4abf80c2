#!/usr/bin/env bash
# A/B (or A/B/C...) of builds of the GEMM entry point on one GPU, in one command: `kiln gemm` at
# the same sizes from each build (a runtime-only build and its bundles), the builds taking turns
# run after run so that the GPU's drift falls on all; then one line a size: each build's kernel,
# its time (the mean over the runs of each run's median) over the first build's, and its ratio to
# cuBLAS in its own runs. An incorrect result or a failed run makes the exit status non-zero.
#   tools/gemm_ab.sh SIZES REPS NAME=RT_BUILD:BUNDLES NAME=RT_BUILD:BUNDLES... [-- kiln gemm flags]
#   OUT  where each run's TSV and log go (default /tmp/kiln-ab)
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 SIZES REPS NAME=RT_BUILD:BUNDLES NAME=RT_BUILD:BUNDLES... [-- kiln gemm flags]" >&2
  exit 2
fi
sizes=$1 reps=$2
shift 2
sides=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sides+=("$1"); shift; done
[ $# -gt 0 ] && shift
out=${OUT:-/tmp/kiln-ab}
mkdir -p "$out"
status=0
for r in $(seq "$reps"); do
  for side in "${sides[@]}"; do
    name=${side%%=*} spec=${side#*=}
    rt=${spec%%:*} bundles=${spec#*:}
    echo "== $name run $r   [${SECONDS}s]"
    timeout 300 "$rt/bin/kiln" --bundles "$bundles" gemm --iters 10 --sizes "$sizes" --out "$out/$name.$r.tsv" "$@" \
      >"$out/$name.$r.log" 2>&1 || { status=1; tail -n 5 "$out/$name.$r.log"; }
  done
done
names=()
for side in "${sides[@]}"; do names+=("${side%%=*}"); done
python3 - "$out" "$reps" "${names[@]}" <<'EOF' || status=1
import sys, collections
out, reps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = collections.defaultdict(lambda: collections.defaultdict(list))  # size -> name -> [(kernel, ms, cublas_ms, ok)]
order = []
for name in names:
    for r in range(1, reps + 1):
        try:
            lines = open(f"{out}/{name}.{r}.tsv").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split("\t")
            size = "x".join(f[1:4])
            if size not in runs: order.append(size)
            runs[size][name].append((f[0], float(f[4]), float(f[6]), f[11] == "ok"))
bad = 0
print("size\t" + "\t".join(f"{n}: kernel, us, /{names[0]}, vs cuBLAS" for n in names))
for size in order:
    cells, first = [], None
    for name in names:
        x = runs[size][name]
        if not x:
            cells.append("missing"); bad += 1; continue
        bad += sum(not ok for *_, ok in x)
        us = 1e3 * sum(ms for _, ms, _, _ in x) / len(x)
        first = first or us
        cells.append(f"{x[0][0].replace('gemm/bf16_sm90', '')}, {us:.1f}, {us / first:.3f}, "
                     f"{sum(c / ms for _, ms, c, _ in x) / len(x):.3f}")
    print(size + "\t" + "\t".join(cells))
print(f"incorrect or missing: {bad}")
sys.exit(1 if bad else 0)
EOF
exit $status
