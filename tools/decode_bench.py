#!/usr/bin/env python3
"""Decode attention (one or a few query rows per sequence over a long KV cache): kiln against
torch SDPA's cuDNN and flash backends and against a device copy of the same K and V bytes (the
physical limit: its rate counts the bytes it reads and writes; kiln's rate is given as a share of
the copy's better rate of the two timing methods), in one process. Each case is
checked against an fp32 reference first.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 tools/decode_bench.py

Two timing methods, both reported: single calls between CUDA events (median of --iters; a call's
host time shows where it exceeds the kernel's), and a CUDA graph of --block calls replayed (the
kernels back to back, no host time).

Consecutive calls read different K and V (--sets copies, by default enough to fill four times the
device's L2), as a model's layers read their own caches: a cache that fits in L2, read again and
again, would be timed at L2's rate. --sets 1 times the same bytes every call.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln
from attention_peers import time_ms  # (tools/, beside this script)

CASES = [(1, 8192), (1, 131072), (8, 8192), (32, 4096), (64, 8192), (16, 32768)]  # (B, Skv)


def single_us(fn, iters):
    return time_ms(fn, iters, repeats=1) * 1e3  # one call between events, the host's time in it


def graph_us(fn, block, reps=5):
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm on the capture stream (loads, scratch)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):  # kiln loads its kernels per stream: this one
        for _ in range(block):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / block)
    return statistics.median(times)


def reference(q, k, v):
    g = q.shape[1] // k.shape[1]
    kf, vf = (x.float().repeat_interleave(g, 1) for x in (k, v))
    return F.scaled_dot_product_attention(q.float(), kf, vf)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--block", type=int, default=20)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--hq", type=int, default=32)
    p.add_argument("--hkv", type=int, default=8)
    p.add_argument("--rows", type=int, default=1, help="query rows per sequence")
    p.add_argument("--cases", default="", help="B:Skv,... (default: the issue's six)")
    p.add_argument("--sets", type=int, default=0,
                   help="K/V copies the calls cycle through (0: enough for 4x the L2)")
    p.add_argument("--page", type=int, default=0,
                   help="also kiln over a paged cache of these pages, out of order (vs dense)")
    p.add_argument("--in-order", action="store_true", help="the paged cache's pages in order")
    args = p.parse_args()
    torch.manual_seed(0)
    print(f"decode on {torch.cuda.get_device_name()}, q [B, {args.hq}, {args.rows}, {args.d}], "
          f"K/V [B, {args.hkv}, Skv, {args.d}] bf16; GB/s of K+V read; us per call")
    failures = 0
    cases = [tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")] if args.cases else CASES
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for b, skv in cases:
        q = torch.randn(b, args.hq, args.rows, args.d, device="cuda").bfloat16()
        k = torch.randn(b, args.hkv, skv, args.d, device="cuda").bfloat16()
        v = torch.randn(b, args.hkv, skv, args.d, device="cuda").bfloat16()
        kv_bytes = 2 * k.numel() * 2
        o, _ = kiln.attention(q, k, v)
        err = float((o.float() - reference(q, k, v)).norm() / reference(q, k, v).norm())
        ok = err < 2e-2 and torch.isfinite(o).all()
        failures += 0 if ok else 1
        n_sets = args.sets or max(1, -(-4 * l2 // kv_bytes))
        sets = [(k, v)] + [(k.clone(), v.clone()) for _ in range(n_sets - 1)]
        outs = [(torch.empty_like(k), torch.empty_like(v)) for _ in sets]
        turn = Turns(len(sets))
        runs = {
            "kiln": lambda: kiln.attention(q, *sets[turn()]),
            "cudnn": lambda: sdpa(q, *sets[turn()], SDPBackend.CUDNN_ATTENTION),
            "flash": lambda: sdpa(q, *sets[turn()], SDPBackend.FLASH_ATTENTION),
            "copy": lambda: copy_set(sets, outs, turn()),
        }
        if args.page:
            paged_sets = [paged(*kv, args.page, args.in_order) for kv in sets]
            ck, cv, table, lens = paged_sets[0]
            op, _ = kiln.decode_attention(q, ck, cv, lens, table)
            perr = float((op.float() - o.float()).norm() / o.float().norm())
            line_paged = f"; paged vs dense kiln {perr:.1e}"
            failures += 0 if perr < 1e-2 else 1
            runs[f"paged{args.page}"] = lambda: paged_call(q, paged_sets[turn()])
        line = (f"B={b:<3} Skv={skv:<7} {kv_bytes / 1e6:8.1f} MB x {len(sets)} sets  error {err:.1e} "
                f"{'ok' if ok else 'FAIL'}")
        if args.page:
            line += line_paged
        results = {}
        for name, fn in runs.items():
            try:
                results[name] = (single_us(fn, args.iters), graph_us(fn, args.block))
            except Exception as e:  # a backend that does not take this shape
                results[name] = None
                line += f"\n    {name}: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
        if results["kiln"] is None or results["copy"] is None:
            print(line, flush=True)
            failures += 1
            continue
        # The copy's best rate of the two methods: single calls of a short copy are bound by the
        # host, and a graph runs a long copy as a memcpy node, slower than the same copy launched.
        copy_us = min(results["copy"]) / 2  # the time to move kiln's bytes
        for method, i in (("single", 0), ("graph", 1)):
            parts = []
            for name in runs:
                if results[name] is None:
                    continue
                us = results[name][i]
                moved = 2 * kv_bytes if name == "copy" else kv_bytes  # a copy reads and writes
                parts.append(f"{name} {us:8.1f} us {moved / us / 1e3:6.0f} GB/s")
            kiln_us = results["kiln"][i]
            ratios = "; ".join(f"{results[n][i] / kiln_us:.2f}x {n}"
                               for n in runs if n not in ("kiln", "copy") and results[n] is not None)
            line += (f"\n    {method:<6}: " + " | ".join(parts) +
                     f" | kiln at {copy_us / kiln_us:.0%} of the copy's best rate; {ratios}")
        print(line, flush=True)
    raise SystemExit(1 if failures else 0)


class Turns:
    """The next K/V set's index, call after call."""

    def __init__(self, n):
        self.n, self.i = n, -1

    def __call__(self):
        self.i = (self.i + 1) % self.n
        return self.i


def copy_set(sets, outs, i):
    outs[i][0].copy_(sets[i][0])
    outs[i][1].copy_(sets[i][1])


def paged_call(q, cache):
    ck, cv, table, lens = cache
    return kiln.decode_attention(q, ck, cv, lens, table)


def paged(k, v, page, in_order=False):
    """k and v [B, Hkv, Skv, D] as a paged cache [pages, page, Hkv, D] whose pages are shuffled
    (or in order), with its block table and the sequences' lengths."""
    b, hkv, skv, d = k.shape
    per = (skv + page - 1) // page
    order = torch.arange(b * per, device=k.device) if in_order else torch.randperm(b * per, device=k.device)
    table = order.view(b, per).int()

    def cache(x):
        x = torch.nn.functional.pad(x, (0, 0, 0, per * page - skv))
        out = torch.empty(b * per, page, hkv, d, dtype=x.dtype, device=x.device)
        out[order] = x.view(b, hkv, per, page, d).permute(0, 2, 3, 1, 4).reshape(b * per, page, hkv, d)
        return out

    lens = torch.full((b,), skv, dtype=torch.int32, device=k.device)
    return cache(k), cache(v), table, lens


def sdpa(q, k, v, backend):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


if __name__ == "__main__":
    main()
