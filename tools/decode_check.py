#!/usr/bin/env python3
"""Decode attention's correctness grid on a GPU: every head dimension, grouped-query heads (8
query heads over 2), Skv = 1, 100, 1000, 4095, 16384 and 131072, dense (kiln.attention) and
through a paged cache at each page size (kiln.decode_attention, pages shuffled, unused rows NaN),
and a batch of 16 sequences of their own lengths from 7 to 32768 (NaN past each length); each
against SDPA in fp32, per sequence. The error is ||o - ref|| / ||ref||; NaN fails.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 tools/decode_check.py
"""

import torch
import torch.nn.functional as F

import kiln

HQ, HKV, TOL = 8, 2, 2e-2
failures = 0


def reference(q, k, v):
    rep = q.shape[1] // k.shape[1]
    ke, ve = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.float(), ke, ve)


def rel(got, want):
    got = got.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm())


def report(name, err):
    global failures
    ok = err <= TOL
    failures += 0 if ok else 1
    print(f"{name:<48} {err:10.3e}  {'ok' if ok else 'FAIL'}", flush=True)


def paged(k, v, lens, page, g):
    """k, v [B, Hkv, Smax, D] as a shuffled paged cache (rows past each length NaN)."""
    b, hkv, _, d = k.shape
    per = (max(lens) + page - 1) // page
    pages = b * per + 3
    table = torch.randperm(pages, device="cuda", generator=g)[: b * per].view(b, per).int()
    ck = torch.full((pages, page, hkv, d), float("nan"), device="cuda").bfloat16()
    cv = torch.full((pages, page, hkv, d), float("nan"), device="cuda").bfloat16()
    for i, n in enumerate(lens):
        used = (n + page - 1) // page
        rows = torch.arange(used * page, device="cuda")
        slots = table[i, rows // page].long() * page + rows % page
        keep = rows < n
        ck.view(-1, hkv, d)[slots[keep]] = k[i, :, :n].transpose(0, 1)
        cv.view(-1, hkv, d)[slots[keep]] = v[i, :, :n].transpose(0, 1)
    return ck, cv, table


def main():
    g = torch.Generator(device="cuda").manual_seed(7)
    print(f"decode correctness on {torch.cuda.get_device_name()}: q [B, {HQ}, 1, D] over "
          f"{HKV} KV heads, bf16, against SDPA in fp32 (tolerance {TOL})")
    for d in (64, 128, 256):
        for skv in (1, 100, 1000, 4095, 16384, 131072):
            b = 2
            q = torch.randn(b, HQ, 1, d, device="cuda", generator=g).bfloat16()
            k = torch.randn(b, HKV, skv, d, device="cuda", generator=g).bfloat16()
            v = torch.randn(b, HKV, skv, d, device="cuda", generator=g).bfloat16()
            want = reference(q, k, v)
            report(f"D={d} Skv={skv} dense", rel(kiln.attention(q, k, v)[0], want))
            lens = torch.full((b,), skv, dtype=torch.int32, device="cuda")
            for page in (16, 32, 64, 256):
                ck, cv, table = paged(k, v, [skv] * b, page, g)
                o, _ = kiln.decode_attention(q, ck, cv, lens, table)
                report(f"D={d} Skv={skv} page {page}", rel(o, want))
        # 16 sequences of their own lengths, 7 to 32768, NaN past each.
        lens = [int(x) for x in torch.logspace(torch.log10(torch.tensor(7.0)),
                                               torch.log10(torch.tensor(32768.0)), 16).round()]
        b, smax = len(lens), max(lens)
        q = torch.randn(b, HQ, 1, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, HKV, smax, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, HKV, smax, d, device="cuda", generator=g).bfloat16()
        wants = [reference(q[i:i + 1], k[i:i + 1, :, :n], v[i:i + 1, :, :n]) for i, n in enumerate(lens)]
        kn, vn = k.clone(), v.clone()
        for i, n in enumerate(lens):
            kn[i, :, n:] = float("nan")
            vn[i, :, n:] = float("nan")
        seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        o, _ = kiln.decode_attention(q, kn, vn, seq_lens)
        report(f"D={d} 16 lengths 7..32768", max(rel(o[i:i + 1], w) for i, w in enumerate(wants)))
        ck, cv, table = paged(k, v, lens, 16, g)
        o, _ = kiln.decode_attention(q, ck, cv, seq_lens, table)
        report(f"D={d} 16 lengths 7..32768, page 16",
               max(rel(o[i:i + 1], w) for i, w in enumerate(wants)))
    print(f"{failures} failures")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
