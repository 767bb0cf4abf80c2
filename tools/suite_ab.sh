#!/usr/bin/env bash
# Two or more builds side by side on one GPU, in one command: the worklogs' table (kiln bench), the
# GEMM entry point over the model-shape sweep (kiln gemm) and the attention suite's speed problems
# (kiln attention), each build taking its turn run after run so that the GPU's drift falls on all.
# Then one line a kernel and size: each build's median time over the first build's, and whether
# every run was correct. The exit status is non-zero where a run failed or was incorrect.
#   tools/suite_ab.sh REPS NAME=RT_BUILD:BUNDLES NAME=RT_BUILD:BUNDLES...
#   OUT            where each run's logs go (default /tmp/kiln-suite-ab)
#   AB_SIZES       bench sizes (default 4096); AB_SWEEP: kiln gemm sizes (default: the suite's sweep)
#   AB_KERNELS     the kernels kiln bench times (default: every kernel this GPU runs)
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 REPS NAME=RT_BUILD:BUNDLES NAME=RT_BUILD:BUNDLES..." >&2
  exit 2
fi
reps=$1
shift
out=${OUT:-/tmp/kiln-suite-ab}
mkdir -p "$out"
sweep=""
for m in 1 16 64 128 256 1024 4096 16384; do
  for nk in 6144x4096 4096x4096 28672x4096 4096x14336 10240x8192 8192x28672; do sweep="$sweep,${m}x${nk}"; done
done
sweep=${AB_SWEEP:-${sweep#,}}
status=0
for r in $(seq "$reps"); do
  for side in "$@"; do
    name=${side%%=*} spec=${side#*=}
    rt=${spec%%:*} bundles=${spec#*:}
    kiln=("$rt/bin/kiln" --bundles "$bundles")
    echo "== $name run $r   [${SECONDS}s]"
    timeout 300 "${kiln[@]}" bench --iters 10 --sizes "${AB_SIZES:-4096}" --shapes 32768x4096 \
      --out "$out/$name.$r.bench.tsv" ${AB_KERNELS:-} >"$out/$name.$r.bench.log" 2>&1 || status=1
    timeout 300 "${kiln[@]}" gemm --iters 10 --sizes "$sweep" --out "$out/$name.$r.gemm.tsv" \
      >"$out/$name.$r.gemm.log" 2>&1 || status=1
    : >"$out/$name.$r.attention.log"
    for ds in 64:4096 128:4096 128:16384; do
      IFS=: read -r d s <<<"$ds"
      for causal in --nocausal --causal; do
        timeout 60 "${kiln[@]}" attention --d "$d" --s "$s" --b $((16384 / s)) --h 16 $causal --iters 20 \
          >>"$out/$name.$r.attention.log" 2>&1 || status=1
      done
    done
  done
done
names=()
for side in "$@"; do names+=("${side%%=*}"); done
python3 - "$out" "$reps" "${names[@]}" <<'EOF' || status=1
import re, statistics, sys, collections
out, reps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# (what, key) -> name -> [(ms, ok)]
runs = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
def add(key, name, ms, ok):
    if key not in runs: order.append(key)
    runs[key][name].append((ms, ok))
for name in names:
    for r in range(1, reps + 1):
        for what in ("bench", "gemm"):
            try:
                lines = open(f"{out}/{name}.{r}.{what}.tsv").read().splitlines()
            except OSError:
                continue
            for line in lines:
                f = line.split("\t")
                if len(f) == 12:  # a GEMM row: name M N K ms TFLOPS cuBLAS-ms cuBLAS-TFLOPS error spot ref ok
                    kernel = "gemm (entry point)" if what == "gemm" else f[0]
                    add(f"{kernel} {f[1]}x{f[2]}x{f[3]}", name, float(f[4]), f[11] == "ok")
                elif len(f) == 10:  # a row op: name rows cols ms GB/s copy-ms copy-GB/s ratio error ok
                    add(f"{f[0]} {f[1]}x{f[2]}", name, float(f[3]), f[9] == "ok")
        try:
            text = open(f"{out}/{name}.{r}.attention.log").read()
        except OSError:
            continue
        for m in re.finditer(r"^(attention/\S+) ([^:]+): .*: (ok|FAIL[^;]*); ([0-9.]+) ms", text, re.M):
            add(f"{m.group(1)} {m.group(2)}", name, float(m.group(4)), m.group(3) == "ok")
bad = 0
print("kernel and size\t" + "\t".join(f"{n}: ms, /{names[0]}" for n in names))
ratios = collections.defaultdict(list)
for key in order:
    cells, first = [], None
    for name in names:
        x = runs[key][name]
        if not x:
            cells.append("missing"); bad += 1; continue
        bad += sum(not ok for _, ok in x)
        ms = statistics.median(m for m, _ in x)
        first = first or ms
        ratios[name].append(ms / first)
        cells.append(f"{ms:.4f}, {ms / first:.3f}")
    print(key + "\t" + "\t".join(cells))
for name in names[1:]:
    r = ratios[name]
    if r:
        print(f"{name}/{names[0]}: geomean {statistics.geometric_mean(r):.3f}, range {min(r):.3f}-{max(r):.3f} "
              f"over {len(r)} kernels and sizes")
if not order:
    print("no results: every run failed (see the logs)")
    bad += 1
print(f"incorrect or missing: {bad}")
sys.exit(1 if bad else 0)
EOF
exit $status
