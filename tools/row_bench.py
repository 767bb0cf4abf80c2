#!/usr/bin/env python3
"""kiln's row ops against torch's (softmax, F.rms_norm, F.layer_norm) through the Python module, in
turns in one process: each round times kiln, then torch, each the median of --iters blocks of
--repeats calls back to back between CUDA events. Each case is checked first against torch in
fp64 (norm-relative; NaN fails). Prints GB/s (bytes read and written, the weights once) and the
ratio, the median over the rounds."""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

import kiln
from attention_peers import time_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="32768x4096,8192x8192,65536x1024")
    parser.add_argument("--dtypes", default="bf16,f32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    tolerance = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}
    failures = 0
    for name in args.dtypes.split(","):
        dt = dtypes[name]
        for shape in args.shapes.split(","):
            rows, cols = (int(v) for v in shape.split("x"))
            x = torch.randn(rows, cols, device="cuda").to(dt)
            w, b = (torch.randn(cols, device="cuda").to(dt) for _ in range(2))
            ops = {
                "softmax": (lambda: kiln.softmax(x), lambda: torch.softmax(x, -1), 0),
                "rms_norm": (lambda: kiln.rms_norm(x, w, 1e-5),
                             lambda: F.rms_norm(x, (cols,), w, 1e-5), 1),
                "layer_norm": (lambda: kiln.layer_norm(x, w, b, 1e-5),
                               lambda: F.layer_norm(x, (cols,), w, b, 1e-5), 2),
            }
            for op, (ours, theirs, params) in ops.items():
                xd = x.double()
                want = {"softmax": lambda: torch.softmax(xd, -1),
                        "rms_norm": lambda: F.rms_norm(xd, (cols,), w.double(), 1e-5),
                        "layer_norm": lambda: F.layer_norm(xd, (cols,), w.double(), b.double(),
                                                           1e-5)}[op]()
                got = ours().double()
                err = float((got - want).norm() / want.norm())
                ok = err == err and err < tolerance[name]
                failures += not ok
                moved = (2 * rows * cols + params * cols) * x.element_size()
                ratios, rates = [], []
                for _ in range(args.rounds):
                    k_ms = time_ms(ours, args.iters, args.repeats)
                    t_ms = time_ms(theirs, args.iters, args.repeats)
                    ratios.append(t_ms / k_ms)
                    rates.append((moved / k_ms / 1e6, moved / t_ms / 1e6))
                med = sorted(range(len(ratios)), key=lambda i: ratios[i])[len(ratios) // 2]
                print(f"{op:10s} {name:4s} {shape:11s} kiln {rates[med][0]:6.0f} GB/s  torch "
                      f"{rates[med][1]:6.0f} GB/s  kiln/torch {statistics.median(ratios):.3f} "
                      f"(rounds {min(ratios):.3f}-{max(ratios):.3f})  error {err:.1e} "
                      f"{'ok' if ok else 'FAILED'}")
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
