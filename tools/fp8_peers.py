#!/usr/bin/env python3
"""torch._scaled_mm (e4m3, cuBLAS) at the given M x N x K sizes, timed as `kiln gemm --dtype e4m3`
times kiln: single calls between CUDA events, median of --iters (attention_peers.time_ms); tensorwise and
rowwise scales. Prints one line per size and scaling: TFLOPS."""
import argparse

import torch
from attention_peers import time_ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True, help="MxNxK,...")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for size in args.sizes.split(","):
        m, n, k = (int(x) for x in size.split("x"))
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major K x N
        one = torch.ones((), device="cuda")
        scales = {"tensorwise": (one, one),
                  "rowwise": (torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda"))}
        for name, (sa, sb) in scales.items():
            ms = time_ms(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                         args.iters, repeats=1)
            print(f"{size:20s} {name:11s} {ms:10.4f} ms {2 * m * n * k / ms / 1e9:9.1f} TFLOPS")


if __name__ == "__main__":
    main()
