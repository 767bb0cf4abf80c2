#!/usr/bin/env python3
"""kiln.grouped_gemm against torch._grouped_mm (bf16, experts of equal tokens), timed in turns in
one process: each round times kiln, then torch, the same way (blocks of --repeats calls back to
back between CUDA events, median of --iters blocks), so that the GPU's clock, which moves with its
recent load at the power limit, moves under both. Each problem is checked first: kiln's output
against torch's (norm-relative; NaN fails). Prints each round's TFLOPS and ratio, then the median
ratio and its spread over the rounds."""
import argparse
import statistics
import sys

import torch

import kiln
from attention_peers import time_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", default="8x4096x4096x7168,32x256x4096x7168,8x1024x14336x4096",
                        help="EXPERTSxTOKENSxNxK,... (tokens per expert)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; rounds of kiln then "
          f"torch, each the median of {args.iters} blocks of {args.repeats} calls")
    failures = 0
    for problem in args.problems.split(","):
        e, t, n, k = (int(x) for x in problem.split("x"))
        torch.manual_seed(0)
        x = torch.randn(e * t, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)  # each expert's N x K
        offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * t
        out = torch.full((e * t, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        contenders = {
            "kiln": lambda: kiln.grouped_gemm(x, w, offs, out=out),
            "torch": lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
        }
        contenders["kiln"]()
        want = contenders["torch"]().float()
        err = float((out.float() - want).norm() / want.norm())
        ok = err == err and err < 1e-2
        failures += not ok
        print(f"{problem}: kiln vs torch {err:.2e} {'ok' if ok else 'FAILED'}")
        flops = 2 * e * t * n * k
        ratios = []
        for r in range(args.rounds):
            tf = {name: flops / time_ms(fn, args.iters, args.repeats) / 1e9
                  for name, fn in contenders.items()}
            ratios.append(tf["kiln"] / tf["torch"])
            print(f"  round {r + 1}: kiln {tf['kiln']:7.1f} TFLOPS, torch {tf['torch']:7.1f}, "
                  f"ratio {ratios[-1]:.3f}")
        print(f"{problem}: ratio median {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
