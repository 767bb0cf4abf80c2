#!/usr/bin/env python3
"""Medians of tools/side_by_side.sh's rounds: upstream and kiln TFLOPS per version and size, their
quotient, and each round's quotient (to show the spread). Reads the log on stdin."""
import collections
import statistics
import sys

upstream, kiln = collections.defaultdict(list), collections.defaultdict(list)
for line in sys.stdin:
    f = line.split()
    if len(f) < 6:
        continue
    if f[0] == "UPSTREAM":  # NAME MxNxK TFLOPS "TFLOPS" ...
        name = f[1].replace("learn-cuda/", "ampere/")
        upstream[(name, f[2].split("x")[0])].append(float(f[3]))
    elif f[0] == "KILN" and f[-1] == "ok":  # NAME M N K TFLOPS ...
        kiln[(f[1], f[2])].append(float(f[5]))
sizes = sorted({s for _, s in kiln}, key=int)
print("| version | " + " | ".join(f"upstream {s} | kiln {s} | kiln/upstream" for s in sizes) + " | per round |")
print("|---" * (1 + 3 * len(sizes) + 1) + "|")
for name in sorted({n for n, _ in kiln}):
    cells, spread = [], []
    for s in sizes:
        u, k = upstream.get((name, s)), kiln.get((name, s))
        if not u or not k:
            cells += ["–", "–", "–"]
            continue
        mu, mk = statistics.median(u), statistics.median(k)
        cells += [f"{mu:.1f}", f"{mk:.1f}", f"**{mk / mu:.3f}**" if mk / mu < 0.95 else f"{mk / mu:.3f}"]
        spread.append(" ".join(f"{b / a:.2f}" for a, b in zip(u, k)))
    print(f"| {name} | " + " | ".join(cells) + " | " + " / ".join(spread) + " |")
