#!/usr/bin/env python3
"""Packed sequences (kiln.varlen_attention) on a GPU: correctness at every head dimension, causal
and not, over 16 sequences of lengths from 7 to 32768 (grouped-query heads, 16 over 4), each
sequence against SDPA in fp32; then the speed at equal tokens against the dense kernel
(kiln.attention on [B, H, S, D]), both launched back to back.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 tools/varlen_check.py
"""

import torch
import torch.nn.functional as F

import kiln
from attention_peers import time_ms  # (tools/, beside this script)

HQ, HKV, TOL = 16, 4, 2e-2


def rel(got, want):
    got = got.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm())


def main():
    failures = 0
    g = torch.Generator(device="cuda").manual_seed(8)
    print(f"packed sequences on {torch.cuda.get_device_name()}: {HQ} query heads over {HKV}, bf16")
    lens = [int(x) for x in torch.logspace(torch.log10(torch.tensor(7.0)),
                                           torch.log10(torch.tensor(32768.0)), 16).round()]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    total = int(cu[-1])
    for d in (64, 128, 256):
        for causal in (False, True):
            q = torch.randn(total, HQ, d, device="cuda", generator=g).bfloat16()
            k = torch.randn(total, HKV, d, device="cuda", generator=g).bfloat16()
            v = torch.randn(total, HKV, d, device="cuda", generator=g).bfloat16()
            o, _ = kiln.varlen_attention(q, k, v, cu, max(lens), causal=causal)
            worst = 0.0
            for b in range(len(lens)):
                rows = slice(int(cu[b]), int(cu[b + 1]))
                qs, ks, vs = (x[rows].transpose(0, 1)[None].float() for x in (q, k, v))
                ks, vs = (x.repeat_interleave(HQ // HKV, 1) for x in (ks, vs))
                want = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
                worst = max(worst, rel(o[rows].transpose(0, 1)[None], want))
            ok = worst <= TOL
            failures += 0 if ok else 1
            print(f"D={d} {'causal' if causal else 'full  '} 16 sequences 7..32768 ({total} tokens): "
                  f"worst error {worst:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    print("equal tokens, against the dense kernel (ms, kernels back to back):")
    for d, b, s, causal in [(128, 8, 2048, True), (128, 4, 4096, False), (64, 8, 4096, True)]:
        q = torch.randn(b, HQ, s, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, HKV, s, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, HKV, s, d, device="cuda", generator=g).bfloat16()
        qp, kp, vp = (x.transpose(1, 2).reshape(b * s, x.shape[1], d).contiguous() for x in (q, k, v))
        cu = torch.arange(0, b * s + 1, s, dtype=torch.int32, device="cuda")
        dense = time_ms(lambda: kiln.attention(q, k, v, causal=causal), 20)
        packed = time_ms(lambda: kiln.varlen_attention(qp, kp, vp, cu, s, causal=causal), 20)
        od, _ = kiln.attention(q, k, v, causal=causal)
        op, _ = kiln.varlen_attention(qp, kp, vp, cu, s, causal=causal)
        same = rel(op, od.transpose(1, 2).reshape(b * s, HQ, d).float())
        print(f"D={d} B={b} S={s} {'causal' if causal else 'full'}: dense {dense:.3f} ms, "
              f"packed {packed:.3f} ms ({packed / dense:.2f}x the dense time), "
              f"outputs apart {same:.1e}", flush=True)
    print(f"{failures} failures")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
