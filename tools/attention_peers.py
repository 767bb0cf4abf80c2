#!/usr/bin/env python3
"""Times torch's scaled_dot_product_attention (flash and cuDNN backends) on the attention table's
problems, as `kiln attention` times kiln: bf16 [B, H, S, D] tensors of normal(0, 1), ten calls
back to back per timed sample, CUDA events, median of --iters samples. TFLOPS = 4*B*H*S*S*D,
halved when causal. With --backward, the backward pass alone (dQ, dK, dV of a kept forward,
torch.autograd.grad with a random dO; TFLOPS 2.5 times the forward's). Prints one line per problem
and backend:
  peer BACKEND d D s S causal C: MS ms, TFLOPS TFLOPS
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, iters, repeats=10):
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / repeats)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--problems", default="64:4096,64:16384,128:1024,128:4096,128:16384",
                   help="D:S pairs; B = tokens / S")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=10,
                   help="launches a timed block (as `kiln attention --repeats`); 1: single calls, "
                        "events around each")
    p.add_argument("--backward", action="store_true", help="time the backward pass alone")
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    for problem in a.problems.split(","):
        d, s = (int(x) for x in problem.split(":"))
        b = max(1, a.tokens // s)
        q, k, v = (torch.randn(b, a.heads, s, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=a.backward) for _ in range(3))
        d_o = torch.randn(b, a.heads, s, d, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            flops = 4 * b * a.heads * s * s * d / (2 if causal else 1) * (2.5 if a.backward else 1)
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        if a.backward:
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            call = lambda: torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)
                        else:
                            call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ms = time_ms(call, a.iters, a.repeats)
                    print(f"peer {name} d {d} s {s} causal {int(causal)}: {ms:.4f} ms, {flops / ms / 1e9:.1f} TFLOPS",
                          flush=True)
                except RuntimeError as e:
                    print(f"peer {name} d {d} s {s} causal {int(causal)}: not run ({str(e).splitlines()[0]})", flush=True)


if __name__ == "__main__":
    main()
