#!/usr/bin/env python3
"""torch._grouped_mm (bf16) over experts of equal tokens, timed as `kiln grouped-gemm` times kiln:
single calls between CUDA events, median of --iters (attention_peers.time_ms); and the copy of the
weights' bytes (a device-to-device copy of the same size) for the memory-bound cases. Prints one
line per problem: TFLOPS, and the weights' read rate."""
import argparse

import torch
from attention_peers import time_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", required=True,
                        help="EXPERTSxTOKENSxNxK,... (tokens per expert)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for problem in args.problems.split(","):
        e, t, n, k = (int(x) for x in problem.split("x"))
        x = torch.randn(e * t, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)  # each expert's N x K
        offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * t
        ms = time_ms(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), args.iters,
                     repeats=1)
        copy = torch.empty_like(w)
        copy_ms = time_ms(lambda: copy.copy_(w), args.iters, repeats=1)
        flops = 2 * e * t * n * k
        print(f"{problem:24s} {ms:10.4f} ms {flops / ms / 1e9:9.1f} TFLOPS "
              f"{w.numel() * 2 / ms / 1e6:8.0f} GB/s of weights; "
              f"copy {2 * w.numel() * 2 / copy_ms / 1e6:8.0f} GB/s (read and write)")


if __name__ == "__main__":
    main()
