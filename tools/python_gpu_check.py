#!/usr/bin/env python3
"""The kiln Python module on a GPU against torch: every binding at ragged shapes on bf16 CUDA
tensors (random normal inputs, poisoned outputs, fp32/fp64 torch references, norm-relative error;
NaN fails), on the default and on a side stream, and the error paths that need a GPU. Then the
host cost of one call (kiln vs torch) on a tiny problem. Prints a table; exits 1 on a failure.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 tools/python_gpu_check.py
"""

import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import kiln
from attention_peers import time_ms

failures = 0


def rel(got, want):
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def report(name, err, tol):
    global failures
    ok = err <= tol
    failures += 0 if ok else 1
    print(f"{name:<58} {err:10.3e}  {'ok' if ok else 'FAIL'} (tolerance {tol:.0e})")


def poisoned(shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def row_ops():
    g = torch.Generator(device="cuda").manual_seed(1)
    tol = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for shape in [(1, 1), (3, 1000), (2, 3, 257), (4096, 4096), (37, 3001)]:
            x = torch.randn(shape, device="cuda", generator=g).to(dt)
            w = torch.randn(shape[-1], device="cuda", generator=g).to(dt)
            b = torch.randn(shape[-1], device="cuda", generator=g).to(dt)
            xf, t = x.float(), str(dt)[6:]
            out = poisoned(shape, dt)
            kiln.softmax(x, out=out)
            xf = x.double()
            report(f"softmax {t} {shape}", rel(out, torch.softmax(xf, -1)), tol[dt])
            got = kiln.rms_norm(x, w, eps=1e-5)
            want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
            report(f"rms_norm {t} {shape}", rel(got, want), tol[dt])
            got = kiln.layer_norm(x, w, b, eps=1e-5)
            want = F.layer_norm(xf, (shape[-1],), w.double(), b.double(), 1e-5)
            report(f"layer_norm {t} {shape}", rel(got, want), tol[dt])
            # Rows far from 0 (logits of 1e4-1e7): e^(x - max) must not see max * log2e's rounding.
            if shape[-1] > 1:
                x = (torch.randn(shape, device="cuda", generator=g) * 4 + 1.5e4 * (1 + len(shape))
                     ).to(dt)
                want = torch.softmax(x.double(), -1)
                report(f"softmax {t} {shape} around {x.flatten()[0].item():.0e}",
                       rel(kiln.softmax(x), want), tol[dt])
        # softmax over another dimension (dim 0: a column each); norms without weight or bias.
        x = torch.randn(1000, 37, device="cuda", generator=g).to(dt)
        report(f"softmax {t} dim 0", rel(kiln.softmax(x, 0), torch.softmax(x.double(), 0)), tol[dt])
        report(f"layer_norm {t} without weight and bias",
               rel(kiln.layer_norm(x), F.layer_norm(x.double(), (37,))), tol[dt])


def gemms():
    g = torch.Generator(device="cuda").manual_seed(2)
    for m, n, k in [(1, 1, 8), (7, 4096, 4096), (1000, 777, 300), (4096, 4096, 4096),
                    (4095, 1024, 1000), (64, 14336, 4096)]:
        a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = torch.randn(n, k, device="cuda", generator=g).bfloat16()   # a linear layer's weight
        want = a.double() @ w.double().t()
        out = poisoned((m, n))
        kiln.gemm(a, w.t(), out=out)
        report(f"gemm x @ w.T {m}x{n}x{k}", rel(out, want), 1e-2)
        bt = w.t().contiguous()  # (K, N) row-major
        report(f"gemm a @ b row-major b {m}x{n}x{k}", rel(kiln.gemm(a, bt), want), 1e-2)
        at = a.t().contiguous().t()  # column-major a
        report(f"gemm column-major a {m}x{n}x{k}", rel(kiln.gemm(at, w.t()), want), 1e-2)
        got = kiln.gemm(a, w.t(), out_dtype="f32")
        report(f"gemm f32 out {m}x{n}x{k}", rel(got, want), 1e-3)
        got = kiln.gemm(a, w.t(), out_dtype="f16")  # no bf16-f16 kernel: the product, then a pass
        report(f"gemm bf16 into f16 {m}x{n}x{k}", rel(got, want) if got.dtype == torch.float16
               else float("inf"), 1e-2)
    # A linear layer's epilogues on a row-major out: a bias per column, a residual.
    for m, n, k in [(4095, 1024, 1000), (2048, 4096, 4096)]:
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
        bias = torch.randn(n, device="cuda", generator=g).bfloat16()
        res = torch.randn(m, n, device="cuda", generator=g).bfloat16()
        prod = x.double() @ w.double().t()
        report(f"gemm x @ w.T + bias {m}x{n}x{k}", rel(kiln.gemm(x, w.t(), bias=bias),
                                                       prod + bias.double()), 1e-2)
        report(f"gemm x @ w.T + residual {m}x{n}x{k}",
               rel(kiln.gemm(x, w.t(), residual=res), prod + res.double()), 1e-2)
    # A linear layer's input (B, S, K), a transposed view (B, K, S) too: rows folded as torch's
    # F.linear folds them, the residual with them.
    x = torch.randn(3, 333, 512, device="cuda", generator=g).bfloat16()
    w = torch.randn(768, 512, device="cuda", generator=g).bfloat16()
    res = torch.randn(3, 333, 768, device="cuda", generator=g).bfloat16()
    want = x.double() @ w.double().t() + res.double()
    report("gemm (B, S, K) @ w.T + residual", rel(kiln.gemm(x, w.t(), residual=res), want), 1e-2)
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)
    report("gemm a view (B, S, K) of (B, K, S)", rel(kiln.gemm(xt, w.t(), residual=res), want), 1e-2)
    # Combinations no bundled kernel fuses: the product in f32, then gemm/epilogue_pass (row- and
    # column-major out, bf16 and f32).
    for m, n, k in [(64, 64, 64), (33, 1000, 72), (4095, 1024, 1000)]:
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
        bias = torch.randn(n, device="cuda", generator=g).bfloat16()
        c = torch.randn(m, n, device="cuda", generator=g).bfloat16()
        prod = x.double() @ w.double().t()
        for name, kw, want, bound in [
                ("+ bias, relu", dict(bias=bias, activation="relu"),
                 torch.relu(prod + bias.double()), 1e-2),
                ("alpha alone", dict(alpha=0.5), 0.5 * prod, 1e-2),
                ("+ c, silu", dict(c=c, activation="silu"), F.silu(prod + c.double()), 1e-2),
                ("gelu, f32 out", dict(activation="gelu", out_dtype="f32"),
                 F.gelu(prod, approximate="tanh"), 1e-3)]:
            report(f"gemm x @ w.T {name} (epilogue pass) {m}x{n}x{k}",
                   rel(kiln.gemm(x, w.t(), **kw), want), bound)
        out = poisoned((n, m)).t()  # a column-major out
        kiln.gemm(x, w.t(), out=out, bias=bias, activation="gelu")
        report(f"gemm column-major out + bias, gelu (epilogue pass) {m}x{n}x{k}",
               rel(out, F.gelu(prod + bias.double(), approximate="tanh")), 1e-2)
    # A gate/up projection with SwiGLU fused (the weights interleaved by kiln.swiglu_weights).
    for t, f, k in [(4095, 1000, 1000), (1, 14336, 4096), (3, 512, 264), (2048, 14336, 4096)]:
        x = torch.randn(t, k, device="cuda", generator=g).bfloat16()
        gate = torch.randn(f, k, device="cuda", generator=g).bfloat16() / k ** 0.5
        up = torch.randn(f, k, device="cuda", generator=g).bfloat16() / k ** 0.5
        out = poisoned((t, f))
        kiln.gemm(x, kiln.swiglu_weights(gate, up).t(), out=out, activation="swiglu")
        want = F.silu(x.double() @ gate.double().t()) * (x.double() @ up.double().t())
        report(f"gemm x @ w.T, swiglu fused {t}x{2 * f}x{k}", rel(out, want), 1e-2)
    # A QKV projection with RoPE fused (q and k rows in kiln.rope_order), against Llama's
    # rotate-half RoPE on the plain product in fp64, read back in that order.
    for t, s_len, hq, hkv, d, k in [(4096, 2048, 32, 8, 128, 4096), (1000, 333, 4, 2, 64, 264),
                                    (64, 64, 2, 1, 128, 512)]:
        x = torch.randn(t, k, device="cuda", generator=g).bfloat16()
        w = torch.randn((hq + 2 * hkv) * d, k, device="cuda", generator=g).bfloat16() / k ** 0.5
        rows = (hq + hkv) * d
        angles = torch.arange(s_len, device="cuda").float()[:, None] * \
            (500000.0 ** (-torch.arange(0, d, 2, device="cuda").float() / d))[None, :]
        cos, sin = angles.cos().contiguous(), angles.sin().contiguous()
        w_fused = torch.cat([kiln.rope_weights(w[:rows], d), w[rows:]])
        out = poisoned((t, (hq + 2 * hkv) * d))
        kiln.gemm(x, w_fused.t(), out=out, rope=(kiln.rope_angles(cos, sin), rows, d))
        prod = x.double() @ w.double().t()
        pos = torch.arange(t, device="cuda") % s_len
        # cos and sin in bf16, as the angle words (and a bf16 Llama) hold them
        c2, s2 = (z[pos].bfloat16().double().repeat(1, 2) for z in (cos, sin))
        heads = prod[:, :rows].view(t, hq + hkv, d)
        half = torch.cat([-heads[..., d // 2:], heads[..., :d // 2]], dim=-1)
        turned = (heads * c2[:, None] + half * s2[:, None])[..., kiln.rope_order(d)]
        want = torch.cat([turned.reshape(t, rows), prod[:, rows:]], dim=1)
        report(f"gemm x @ w.T, rope fused {t}x{(hq + 2 * hkv) * d}x{k} (heads of {d})",
               rel(out, want), 1e-2)
    # The bundled fused epilogue on a column-major out (the kernel's own layout, not swapped).
    m, n, k = 1000, 512, 256
    a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    c = torch.randn(n, m, device="cuda", generator=g).bfloat16().t()
    res = torch.randn(n, m, device="cuda", generator=g).bfloat16().t()
    out = poisoned((n, m)).t()
    kiln.gemm(a, w.t(), out=out, alpha=0.5, beta=2.0, c=c, bias=bias, activation="gelu", residual=res)
    u = 0.5 * (a.double() @ w.double().t()) + 2.0 * c.double() + bias.double()
    want = F.gelu(u, approximate="tanh") + res.double()
    report("gemm scale.bias_col.gelu.residual, column-major out", rel(out, want), 1e-2)


def fp8_gemms():
    """kiln.gemm on float8_e4m3fn tensors against torch._scaled_mm on the same bytes and scales
    (tensorwise, rowwise) and against the fp32 product of the dequantized inputs (all three), at
    ragged sizes, out row-major bf16 and column-major f32; 4096 x 7168 takes 128x192 tiles
    tensorwise and rowwise."""
    for m, n, k in [(4096, 4096, 4096), (4096, 2112, 7168), (4096, 7168, 2048), (77, 1000, 528),
                    (1, 2112, 7168), (300, 136, 16)]:
        a = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda")
        kb, nb = -(-k // 128), -(-n // 128)
        # blockwise scales: a per 1x128, w per 128x128, each group's largest magnitude to 448
        pad_a = torch.nn.functional.pad(a.abs(), (0, kb * 128 - k)).view(m, kb, 128)
        sa_block = (pad_a.amax(2) / 448).clamp_min(1e-12)
        pad_w = torch.nn.functional.pad(w.abs(), (0, kb * 128 - k, 0, nb * 128 - n))
        sw_block = (pad_w.view(nb, 128, kb, 128).amax((1, 3)) / 448).clamp_min(1e-12)
        scales = {
            "tensorwise": (a.abs().max().view(1) / 448, w.abs().max().view(1) / 448),
            "rowwise": (a.abs().amax(1) / 448, w.abs().amax(1) / 448),
            "blockwise": (sa_block, sw_block),
        }
        for scaling, (sa, sw) in scales.items():
            if scaling == "blockwise":
                fa = sa.repeat_interleave(128, 1)[:, :k]
                fw = sw.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
            else:
                fa = sa.view(-1, 1).expand(m, k) if sa.numel() > 1 else sa.expand(m, k)
                fw = sw.view(-1, 1).expand(n, k) if sw.numel() > 1 else sw.expand(n, k)
            a8 = (a / fa).to(torch.float8_e4m3fn)
            w8 = (w / fw).to(torch.float8_e4m3fn)
            want = (a8.float() * fa) @ (w8.float() * fw).t()
            out = poisoned((m, n))
            got = kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, out=out)
            report(f"gemm e4m3 {scaling} {m}x{n}x{k} vs dequantized", rel(got, want), 5e-3)
            res = torch.randn(m, n, device="cuda").bfloat16()
            fused = kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, residual=res, out=poisoned((m, n)))
            report(f"gemm e4m3 {scaling} {m}x{n}x{k} + residual fused", rel(fused, want + res.float()),
                   5e-3)
            col = poisoned((n, m), torch.float32).t()
            kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, out=col)
            report(f"gemm e4m3 {scaling} {m}x{n}x{k} f32 column-major C", rel(col, want), 2e-3)
            # No variant fuses these: the product in f32, then gemm/epilogue_pass.
            bias = torch.randn(n, device="cuda").bfloat16()
            got_pass = kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, bias=bias, activation="gelu",
                                 out=poisoned((m, n)))
            report(f"gemm e4m3 {scaling} {m}x{n}x{k} + bias, gelu (pass)",
                   rel(got_pass, F.gelu(want + bias.float(), approximate="tanh")), 5e-3)
            half = kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, out=poisoned((m, n), torch.float16))
            report(f"gemm e4m3 {scaling} {m}x{n}x{k} f16 out (pass)", rel(half, want), 2e-3)
            if scaling != "blockwise" and m % 16 == 0 and n % 16 == 0:  # torch's own bounds
                peer = torch._scaled_mm(a8, w8.t(), sa.view(-1, 1) if sa.numel() > 1 else sa,
                                        sw.view(1, -1) if sw.numel() > 1 else sw,
                                        out_dtype=torch.bfloat16)
                report(f"gemm e4m3 {scaling} {m}x{n}x{k} vs torch._scaled_mm", rel(got, peer),
                       5e-3)


def graph_ms(fn, iters=20, repeats=10):
    """Median ms a call of `repeats` calls captured in one CUDA graph, replayed `iters` times:
    the device's time alone, whatever the host spends issuing a call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # loads what the first call loads, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            fn()
    return time_ms(graph.replay, iters, repeats=1) / repeats


def fp8_e5m2():
    """kiln.gemm of a float8_e5m2 gradient by a float8_e4m3fn weight (the backward pass's dx =
    dy @ w), tensorwise and rowwise, against torch._scaled_mm on the same bytes and the fp32
    product of the dequantized inputs; out row-major and column-major (the kernel's types swap).
    The bundled variants are bf16 and f32 out, tensorwise and rowwise; others run as a pass."""
    for m, n, k in [(4096, 4096, 4096), (77, 1000, 528), (256, 4096, 1024)]:
        dy = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda")
        for scaling in ("tensorwise", "rowwise"):
            if scaling == "tensorwise":
                sa, sw = dy.abs().max().view(1) / 57344, w.abs().max().view(1) / 448
                fa, fw = sa.expand(m, k), sw.expand(n, k)
            else:
                sa, sw = dy.abs().amax(1) / 57344, w.abs().amax(1) / 448
                fa, fw = sa.view(-1, 1).expand(m, k), sw.view(-1, 1).expand(n, k)
            a8 = (dy / fa).to(torch.float8_e5m2)
            w8 = (w / fw).to(torch.float8_e4m3fn)
            want = (a8.float() * fa) @ (w8.float() * fw).t()
            got = kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, out=poisoned((m, n)))
            report(f"gemm e5m2 x e4m3 {scaling} {m}x{n}x{k} vs dequantized", rel(got, want), 5e-3)
            if m % 8 == 0:  # the bundled variants of a column-major C (no any_m)
                col = poisoned((n, m)).t()
                kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw, out=col)
                report(f"gemm e5m2 x e4m3 {scaling} {m}x{n}x{k} column-major C", rel(col, want),
                       5e-3)
            if m % 16 == 0 and n % 16 == 0:
                peer = torch._scaled_mm(a8, w8.t(), sa.view(-1, 1) if sa.numel() > 1 else sa,
                                        sw.view(1, -1) if sw.numel() > 1 else sw,
                                        out_dtype=torch.bfloat16)
                report(f"gemm e5m2 x e4m3 {scaling} {m}x{n}x{k} vs torch._scaled_mm",
                       rel(got, peer), 5e-3)


def off_ties(q, want, y):
    """The fraction of q's bytes that differ from want's other than at a rounding tie (y, the
    value both rounded, within 1e-5 of the midpoint of two neighbouring e4m3 codes): kiln
    multiplies by 448 / amax where torch divides by the scale, and bf16 inputs land exactly on
    e4m3 midpoints often enough (about 0.1% of 16-wide groups' bytes) that the two break ties
    apart."""
    qb, wb = q.view(torch.uint8).int(), want.view(torch.uint8).int()
    d = qb != wb
    if not d.any():
        return 0.0
    got, ref = q.float()[d], want.float()[d]
    mid = (got + ref) / 2
    tie = ((qb[d] - wb[d]).abs() == 1) & ((y[d] - mid).abs() <= 1e-5 * mid.abs())
    return float((~tie).float().sum() / d.numel())


def fp8_quantize():
    """kiln.quantize_e4m3 and quantize_e4m3_blocks (and its transpose) against torch's own
    quantization with the same scales; and their bandwidth against a device copy (10 calls in a
    CUDA graph, median of 20 replays): bytes read and written per second, each."""
    for m, k in [(4096, 7168), (77, 528), (1, 16), (16384, 4096)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        q, s = kiln.quantize_e4m3(x)
        kb = -(-k // 128)
        amax = torch.nn.functional.pad(x.float().abs(), (0, kb * 128 - k)).view(m, kb, 128)
        report(f"quantize_e4m3 {m}x{k} scales", rel(s, amax.amax(2) / 448), 1e-6)
        f = s.repeat_interleave(128, 1)[:, :k]
        y = x.float() / f
        want = y.to(torch.float8_e4m3fn)
        print(f"quantize_e4m3 {m}x{k}: bytes differing from torch's at rounding ties: "
              f"{float((q.view(torch.uint8) != want.view(torch.uint8)).float().mean()):.2e}")
        report(f"quantize_e4m3 {m}x{k} bytes differing but at ties", off_ties(q, want, y), 0)
        if m % 7 == 0:  # x (7, M/7, K): the same bytes and scales in x's leading dimensions
            q3, s3 = kiln.quantize_e4m3(x.view(7, m // 7, k))
            report(f"quantize_e4m3 (7, {m // 7}, {k}) against the 2-D call's",
                   float((q3.reshape(m, k).view(torch.uint8) != q.view(torch.uint8)).float().mean())
                   + float((s3.reshape(m, kb) != s).float().mean()), 0)
        if m >= 4096:
            y, qb = torch.empty_like(x), q.view(torch.uint8)
            kernel = kiln.load(kiln.bundle_dir(), "ops/quantize_e4m3")
            # In a graph: the host's issue of a call can outlast a call of these sizes.
            quant_ms = graph_ms(lambda: kernel(x, qb, s, m, k))
            issued_ms = time_ms(lambda: kernel(x, qb, s, m, k), 20, repeats=10)
            print(f"quantize_e4m3 {m}x{k}: {issued_ms * 1e3:7.1f} us a call issued from Python")
            copy_ms = graph_ms(lambda: y.copy_(x))
            moved = 3 * m * k + 4 * m * kb  # bf16 in, e4m3 and the scales out
            print(f"quantize_e4m3 {m}x{k}: {quant_ms * 1e3:7.1f} us, {moved / quant_ms / 1e6:7.0f} "
                  f"GB/s; copy {copy_ms * 1e3:7.1f} us, {4 * m * k / copy_ms / 1e6:7.0f} GB/s; "
                  f"ratio {moved / quant_ms / (4 * m * k / copy_ms):.3f}")
    for n, k in [(7168, 4096), (144, 272), (16, 16), (4096, 14336)]:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        q, s, q_t, s_t = kiln.quantize_e4m3_blocks(w, transpose=True)
        kb, nb = -(-k // 128), -(-n // 128)
        pad = torch.nn.functional.pad(w.float().abs(), (0, kb * 128 - k, 0, nb * 128 - n))
        report(f"quantize_e4m3_blocks {n}x{k} scales",
               rel(s, pad.view(nb, 128, kb, 128).amax((1, 3)) / 448), 1e-6)
        f = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        y = w.float() / f
        want = y.to(torch.float8_e4m3fn)
        print(f"quantize_e4m3_blocks {n}x{k}: bytes differing from torch's at rounding ties: "
              f"{float((q.view(torch.uint8) != want.view(torch.uint8)).float().mean()):.2e}")
        report(f"quantize_e4m3_blocks {n}x{k} bytes differing but at ties", off_ties(q, want, y), 0)
        report(f"quantize_e4m3_blocks {n}x{k} q_t differing from q.t()",
               float((q_t.view(torch.uint8) != q.view(torch.uint8).t()).float().mean()), 0)
        if n >= 4096:
            kernel = kiln.load(kiln.bundle_dir(), "ops/quantize_e4m3_blocks")
            y, qb, qtb = torch.empty_like(w), q.view(torch.uint8), q_t.view(torch.uint8)
            copy_ms = graph_ms(lambda: y.copy_(w))
            for t in (0, 1):
                t_ms = graph_ms(lambda: kernel(w, qb, qtb, s, n, k, t))
                moved = (3 + t) * n * k + 4 * nb * kb
                print(f"quantize_e4m3_blocks {n}x{k} transpose={t}: {t_ms * 1e3:7.1f} us, "
                      f"{moved / t_ms / 1e6:7.0f} GB/s; copy {copy_ms * 1e3:7.1f} us; ratio "
                      f"{moved / t_ms / (4 * n * k / copy_ms):.3f}")


def grouped_gemms():
    """kiln.grouped_gemm against torch._grouped_mm on the same bf16 inputs (contiguous: unequal,
    empty and one-token experts), the rows no expert owns left as they were; masked counts inside
    a CUDA graph, replayed after the counts change on the device (no host sync, no new capture)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    for tokens, n, k in [([70, 0, 1, 300, 9], 136, 88), ([4096] * 8, 4096, 7168),
                         ([33, 0, 1, 2048, 517, 16], 1024, 512)]:
        e = len(tokens)
        x = torch.randn(sum(tokens) + 3, k, device="cuda", generator=g).bfloat16()
        w = (torch.randn(e, n, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
        offs = torch.tensor(tokens, device="cuda").cumsum(0).int()
        out = poisoned((x.shape[0], n))
        kiln.grouped_gemm(x, w, offs, out=out)
        owned = sum(tokens)
        want = torch.cat([x[b:b + t].float() @ w[i].float().T for i, (b, t) in
                          enumerate(zip([0] + offs.tolist()[:-1], tokens))])
        name = f"grouped_gemm {e} experts {min(tokens)}..{max(tokens)} tokens N {n} K {k}"
        report(name + " vs fp32", rel(out[:owned], want), 8e-3)
        report(name + " unowned rows untouched", 0.0 if out[owned:].isnan().all() else 1.0, 0)
        if all(t % 16 == 0 for t in tokens):  # torch's own condition on offs
            ref = torch._grouped_mm(x[:owned], w.transpose(-2, -1), offs=offs)
            report(name + " vs torch._grouped_mm", rel(out[:owned], ref), 8e-3)
    e, cap, n, k = 4, 64, 256, 256
    x = torch.randn(e, cap, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(e, n, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    counts = torch.tensor([3, 0, 64, 1], device="cuda", dtype=torch.int32)
    out = poisoned((e, cap, n))
    kiln.grouped_gemm(x, w, counts=counts, out=out)  # loads the kernel before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kiln.grouped_gemm(x, w, counts=counts, out=out)
    for new in ([5, 64, 0, 17], [0, 0, 0, 2]):
        out.fill_(float("nan"))
        counts.copy_(torch.tensor(new, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        err = max(rel(out[i, :c], x[i, :c].float() @ w[i].float().T) if c else 0.0
                  for i, c in enumerate(new))
        untouched = all(out[i, c:].isnan().all() for i, c in enumerate(new))
        report(f"grouped_gemm masked in a CUDA graph, counts {new}", err if untouched else 1.0,
               8e-3)


def attention():
    """kiln.attention against torch SDPA in fp32 (grouped heads expanded), both layouts."""
    g = torch.Generator(device="cuda").manual_seed(3)
    for b, hq, hkv, s, d, causal in [(1, 2, 1, 130, 64, False), (2, 32, 8, 1000, 128, True),
                                     (1, 4, 4, 4096, 256, True), (3, 8, 2, 1, 128, False),
                                     (2, 8, 2, 777, 80, True)]:  # (D = 80: padded to 128)
        q = torch.randn(b, hq, s, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, hkv, s, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, hkv, s, d, device="cuda", generator=g).bfloat16()
        o, lse = kiln.attention(q, k, v, causal=causal)
        ke, ve = (t.float().repeat_interleave(hq // hkv, dim=1) for t in (k, v))
        want = F.scaled_dot_product_attention(q.float(), ke, ve, is_causal=causal)
        report(f"attention b{b} hq{hq} hkv{hkv} s{s} d{d}{' causal' if causal else ''}",
               rel(o, want), 2e-2)
        scores = (q.float() @ ke.transpose(-1, -2)) * d ** -0.5
        if causal:
            scores = scores.masked_fill(torch.ones(s, s, device="cuda").triu(1).bool(), float("-inf"))
        report("  its lse", float((lse - torch.logsumexp(scores, -1)).abs().max()), 1e-2)
        ob, _ = kiln.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                               causal=causal, layout="bshd")
        report("  [B, S, H, D] layout", rel(ob.transpose(1, 2), want), 2e-2)
        # The rows layout read in place from one fused projection's output (strided views).
        qkv = torch.cat([t.transpose(1, 2).reshape(b, s, -1) for t in (q, k, v)], -1)
        views = [qkv[..., a * d:(a + h) * d].view(b, s, h, d)
                 for a, h in ((0, hq), (hq, hkv), (hq + hkv, hkv))]
        ov, lv = kiln.attention(*views, causal=causal, layout="bshd")
        report("  views of one fused QKV buffer", rel(ov.transpose(1, 2), want), 2e-2)
        report("  its lse", float((lv - lse).abs().max()), 1e-6)
        # A NaN in one query row: that row's o and lse NaN, the others' untouched.
        qn = q.clone()
        qn[0, 0, s // 2, 0] = float("nan")
        on, ln = kiln.attention(qn, k, v, causal=causal)
        nan_rows = (int(torch.isnan(ln).sum()), int(torch.isnan(on).any(-1).sum()))
        report(f"  a NaN in q: rows of NaN lse and o {nan_rows} (1, 1 wanted)",
               0.0 if nan_rows == (1, 1) and bool(torch.isnan(ln[0, 0, s // 2])) else 1.0, 0)


def decode():
    """kiln.decode_attention over sequences of their own lengths (NaN past them) and over paged
    caches with their pages out of order, against SDPA in fp32 per sequence: decode, and prefill
    (chunks of S new rows, causal diagonals at each sequence's length)."""
    g = torch.Generator(device="cuda").manual_seed(5)

    def want(q1, k1, v1, causal):
        rep = q1.shape[1] // k1.shape[1]
        ke, ve = (t.float().repeat_interleave(rep, dim=1) for t in (k1, v1))
        s, skv = q1.shape[2], k1.shape[2]
        mask = None
        if causal:  # bottom-right: query i sees keys j <= i + skv - s
            i = torch.arange(s, device="cuda")[:, None]
            mask = torch.arange(skv, device="cuda")[None, :] <= i + skv - s
        return F.scaled_dot_product_attention(q1.float(), ke, ve, attn_mask=mask)

    for b, hq, hkv, s, d, page, lens, causal in [
            (3, 32, 8, 1, 128, 0, [1, 1000, 5000], False), (2, 8, 2, 4, 64, 16, [77, 4099], False),
            (4, 16, 4, 1, 256, 256, [300, 9000, 256, 1], False),
            (2, 32, 8, 1, 128, 32, [33, 20000], False),
            (2, 32, 8, 1000, 128, 16, [1000, 4500], True), (2, 16, 4, 300, 64, 256, [300, 9000], True),
            (1, 8, 8, 700, 256, 64, [2000], False), (2, 8, 2, 500, 128, 0, [500, 3000], True),
            # long chunks over small pages: the pages copied into dense K and V first
            (2, 32, 8, 2000, 128, 16, [2000, 4600], True), (2, 16, 4, 1500, 64, 32, [1500, 3000], False)]:
        smax = max(lens)
        q = torch.randn(b, hq, s, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, hkv, smax, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, hkv, smax, d, device="cuda", generator=g).bfloat16()
        seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        if page:
            per = (smax + page - 1) // page
            pages = b * per + 5
            table = torch.randperm(pages, device="cuda", generator=g)[: b * per].view(b, per).int()
            ck = torch.full((pages, page, hkv, d), float("nan"), device="cuda").bfloat16()
            cv = torch.full((pages, page, hkv, d), float("nan"), device="cuda").bfloat16()
            for i, n in enumerate(lens):
                for j in range((n + page - 1) // page):
                    rows = min(page, n - j * page)
                    ck[table[i, j], :rows] = k[i, :, j * page:j * page + rows].transpose(0, 1)
                    cv[table[i, j], :rows] = v[i, :, j * page:j * page + rows].transpose(0, 1)
            o, _ = kiln.decode_attention(q, ck, cv, seq_lens, table, causal=causal)
        else:
            for i, n in enumerate(lens):  # past a sequence's length: NaN, never read into o
                k[i, :, n:] = float("nan")
                v[i, :, n:] = float("nan")
            o, _ = kiln.decode_attention(q, k, v, seq_lens, causal=causal)
        worst = max(rel(o[i:i + 1], want(q[i:i + 1], k[i:i + 1, :, :n], v[i:i + 1, :, :n], causal))
                    for i, n in enumerate(lens))
        report(f"decode_attention b{b} hq{hq} hkv{hkv} s{s} d{d} "
               f"{f'page {page}' if page else 'lens'} {lens}{' causal' if causal else ''}", worst,
               2e-2)


def append():
    """kiln.paged_append against torch: rotated keys and values in their pages, the rest kept;
    bf16 and f16 caches."""
    for dt in (torch.bfloat16, torch.float16):
        append_of(dt)


def append_of(dt):
    g = torch.Generator(device="cuda").manual_seed(6)
    b, s, hkv, d, page, max_pages = 3, 4, 8, 128, 16, 8
    pages = b * max_pages + 2
    table = torch.randperm(pages, device="cuda", generator=g)[: b * max_pages].view(b, max_pages).int()
    lens = torch.tensor([0, 13, 100], dtype=torch.int32, device="cuda")
    kc = torch.randn(pages, page, hkv, d, device="cuda", generator=g).to(dt)
    vc = torch.randn(pages, page, hkv, d, device="cuda", generator=g).to(dt)
    kn = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
    vn = torch.randn(b, s, hkv, d, device="cuda", generator=g).to(dt)
    inv = 1.0 / 500000.0 ** (torch.arange(0, d, 2, device="cuda").float() / d)
    angles = torch.arange(max_pages * page, device="cuda").float()[:, None] * inv[None, :]
    cos, sin = angles.cos().contiguous(), angles.sin().contiguous()
    want_k, want_v = kc.double().clone(), vc.double().clone()
    for i in range(b):
        for t in range(s):
            pos = int(lens[i]) + t
            p, r = int(table[i, pos // page]), pos % page
            x = kn[i, t].double()
            x1, x2 = x[:, : d // 2], x[:, d // 2:]
            c, sn = cos[pos].double(), sin[pos].double()
            want_k[p, r] = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)
            want_v[p, r] = vn[i, t].double()
    kiln.paged_append(kc, vc, kn, vn, table, lens, cos, sin)
    report(f"paged_append {str(dt)[6:]} keys b{b} s{s} hkv{hkv} d{d} page {page}",
           rel(kc, want_k), 1e-2)
    report("  values (exact)", float((vc.double() - want_v).abs().max()), 0)


def glue():
    """The layer glue, one element a thread and eight, against torch; bf16 and f16."""
    for dt in (torch.bfloat16, torch.float16):
        glue_of(dt)


def glue_of(dt):
    g = torch.Generator(device="cuda").manual_seed(4)
    t16 = str(dt)[6:]
    for b, s, hq, hkv, d in [(2, 5, 4, 2, 8), (2, 300, 32, 8, 128)]:
        qkv = torch.randn(b * s, (hq + 2 * hkv) * d, device="cuda", generator=g).to(dt)
        inv = 1.0 / 500000.0 ** (torch.arange(0, d, 2, device="cuda").float() / d)
        angles = torch.arange(s, device="cuda").float()[:, None] * inv[None, :]
        cos, sin = angles.cos().contiguous(), angles.sin().contiguous()
        q, k, v = kiln.rope_qkv(qkv, cos, sin, b, hq, hkv)
        x = qkv.double().view(b, s, hq + 2 * hkv, d).transpose(1, 2)
        c, sn = cos.double(), sin.double()

        def rotated(t):
            t1, t2 = t[..., : d // 2], t[..., d // 2:]
            return torch.cat([t1 * c - t2 * sn, t2 * c + t1 * sn], -1)

        report(f"rope_qkv {t16} q b{b} s{s} hq{hq} hkv{hkv} d{d}", rel(q, rotated(x[:, :hq])), 1e-2)
        report("  k", rel(k, rotated(x[:, hq:hq + hkv])), 1e-2)
        report("  v", rel(v, x[:, hq + hkv:]), 1e-6)
        rows = kiln.rope_qkv(qkv, cos, sin, b, hq, hkv, layout="bshd")
        report("  the bshd layout", max(rel(r, t.transpose(1, 2)) for r, t in zip(rows, (q, k, v))), 0)
    for t, f in [(7, 33), (4096, 14336)]:
        x = torch.randn(t, 2 * f, device="cuda", generator=g).to(dt)
        gate, up = x.double()[:, :f], x.double()[:, f:]
        report(f"swiglu {t16} {t}x{2 * f}", rel(kiln.swiglu(x), F.silu(gate) * up), 1e-2)
    for shape in [(2, 3, 5, 6), (2, 32, 1000, 128)]:
        x = torch.randn(shape, device="cuda", generator=g).to(dt)
        report(f"heads_to_rows {t16} {shape}", rel(kiln.heads_to_rows(x), x.transpose(1, 2)), 0)


def streams_and_load():
    x = torch.randn(512, 1000, device="cuda").bfloat16()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = kiln.softmax(x)
        z = kiln.gemm(x, x.t())
    side.synchronize()
    report("softmax on a side stream", rel(y, torch.softmax(x.float(), -1)), 1e-2)
    report("gemm on a side stream", rel(z, x.double() @ x.double().t()), 1e-2)
    saxpy = kiln.load(kiln.bundle_dir(), "ops/saxpy")
    xs = torch.randn(100_001, device="cuda")
    ys = torch.randn(100_001, device="cuda")
    want = 2.5 * xs.double() + ys.double()
    saxpy(xs, ys, 2.5, xs.numel())
    torch.cuda.synchronize()
    report("kiln.load ops/saxpy on CUDA tensors", rel(ys, want), 1e-6)
    # An empty problem launches nothing (n = 0 by the grid rule, or a grid with a 0): no error,
    # nothing written.
    before = ys.clone()
    saxpy(torch.empty(0, device="cuda"), torch.empty(0, device="cuda"), 2.5, 0)
    saxpy(xs, ys, 2.5, 0)
    saxpy(xs, ys, 2.5, xs.numel(), grid=(0, 1, 1))
    torch.cuda.synchronize()
    report("kiln.load ops/saxpy on an empty problem", 0.0 if torch.equal(ys, before) else 1.0, 0.5)


def cuda_graphs():
    """kiln's calls in a CUDA graph: a first launch on a stream being captured is an error that
    says what to do (it would allocate its schedule table and workspace), and after a warm-up call on the capture stream
    the graph replays what eager calls compute, on new inputs too."""
    global failures
    x = torch.randn(300, 512, device="cuda").bfloat16()
    w = torch.randn(1024, 512, device="cuda").bfloat16()
    norm = torch.randn(512, device="cuda").bfloat16()
    q = torch.randn(1, 256, 8, 64, device="cuda").bfloat16()

    def block():
        h = kiln.gemm(kiln.rms_norm(x, norm, 1e-5), w.t(), activation="swiglu")
        o, _ = kiln.attention(q, q, q, causal=True, layout="bshd")
        return h, o

    cold = torch.cuda.Stream()  # kiln has never launched on it
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=cold):
            block()
        print("graph capture before a warm-up call: no error raised  FAIL")
        failures += 1
    except kiln.Error as e:
        ok = "being captured into a CUDA graph" in str(e) and "warm-up call" in str(e)
        failures += 0 if ok else 1
        print(f"graph capture before a warm-up call: {'ok' if ok else 'FAIL: ' + str(e)}")
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        block()
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=warm):
        h_graph, o_graph = block()
    for name, fresh in [("same inputs", False), ("new inputs", True)]:
        if fresh:
            x.copy_(torch.randn_like(x))
            q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        h_eager, o_eager = block()
        report(f"graph replay vs eager, {name}: rms_norm, swiglu gemm",
               rel(h_graph, h_eager), 1e-6)
        report(f"graph replay vs eager, {name}: attention", rel(o_graph, o_eager), 1e-6)


def empty_inputs():
    """CUDA tensors with no elements: empty results, nothing launched (their data_ptr may be 0)."""
    global failures
    w = torch.randn(16, 24, device="cuda").bfloat16()
    cases = [
        ("gemm M = 0", lambda: kiln.gemm(torch.empty(0, 24, device="cuda").bfloat16(), w.t()),
         (0, 16)),
        ("gemm N = 0", lambda: kiln.gemm(torch.randn(5, 24, device="cuda").bfloat16(),
                                          w[:0].t()), (5, 0)),
        ("rms_norm 0 rows", lambda: kiln.rms_norm(torch.empty(0, 24, device="cuda").bfloat16(),
                                                  w[0]), (0, 24)),
        ("softmax 0 rows", lambda: kiln.softmax(torch.empty(3, 0, 24, device="cuda").bfloat16()),
         (3, 0, 24)),
        ("attention S = 0", lambda: kiln.attention(
            torch.empty(2, 4, 0, 64, device="cuda").bfloat16(),
            *[torch.randn(2, 2, 9, 64, device="cuda").bfloat16()] * 2)[0], (2, 4, 0, 64)),
    ]
    # No keys: o = 0 and lse = -inf, as a row that sees no key.
    none = torch.empty(1, 2, 0, 128, device="cuda").bfloat16()
    o, lse = kiln.attention(torch.randn(1, 4, 3, 128, device="cuda").bfloat16(), none, none)
    ok = o.shape == (1, 4, 3, 128) and bool((o == 0).all()) and bool(torch.isneginf(lse).all())
    failures += 0 if ok else 1
    print(f"empty input, attention Skv = 0: {'ok' if ok else 'FAIL'}")
    for name, call, shape in cases:
        try:
            got = tuple(call().shape)
            torch.cuda.synchronize()
            ok = got == shape
            message = f"shape {got}"
        except Exception as e:  # noqa: BLE001 (any failure is reported)
            ok, message = False, f"{type(e).__name__}: {e}"
        failures += 0 if ok else 1
        print(f"empty input, {name}: {'ok' if ok else 'FAIL: ' + message}")


def errors():
    global failures
    x = torch.randn(4, 100, device="cuda").bfloat16()
    cases = [
        (lambda: kiln.softmax(x.double()), "kiln takes bf16, f16 or f32 tensors, not torch.float64"),
        (lambda: kiln.softmax(x, out=np.empty((4, 100), np.float32)), "partly on the GPU"),
        (lambda: kiln.gemm(x, x.t().float()), "b must be bf16"),
        # (16-bit inputs run an unbundled epilogue as a pass; swiglu, bundled into bf16 and f16
        # outs, is none)
        (lambda: kiln.gemm(torch.zeros(64, 128, device="cuda").half(),
                           torch.zeros(32, 128, device="cuda").half().t(), activation="swiglu",
                           out_dtype="f32"),
         "write it with `kiln bundle"),
        (lambda: kiln.gemm(x, x.t(), bias=torch.zeros(8, device="cuda").bfloat16()[::2]),
         "bias of shape (4,) has a stride of 2; it must be packed"),
        # (torch.tensor's default integers are int64: read as int32 they would be other lengths)
        (lambda: kiln.paged_append(*[torch.zeros(4, 16, 1, 64, device="cuda").bfloat16()] * 2,
                                   *[torch.zeros(1, 1, 1, 64, device="cuda").bfloat16()] * 2,
                                   torch.zeros(1, 4, dtype=torch.int32, device="cuda"),
                                   torch.tensor([3], device="cuda"),
                                   *[torch.zeros(64, 32, device="cuda")] * 2),
         "seq_lens must be a CUDA tensor of torch.int32, not torch.int64"),
        # (kiln.load: the manifest names each pointer's element type)
        (lambda: kiln.load(kiln.bundle_dir(), "ops/saxpy")(
            torch.zeros(8, device="cuda"), torch.zeros(8, device="cuda").bfloat16(), 1.0, 8),
         "argument 1 ('y') is read as f32 by the kernel, not as bf16"),
    ]
    for call, message in cases:
        try:
            call()
            print(f"error path '{message}': no error raised  FAIL")
            failures += 1
        except kiln.Error as e:
            ok = message in str(e)
            failures += 0 if ok else 1
            print(f"error path '{message}': {'ok' if ok else 'FAIL: ' + str(e)}")


def attention_grad():
    """kiln.attention's backward through torch autograd (kiln.torch) against torch SDPA's in fp32
    (grouped heads expanded: their gradients sum back), both layouts, ragged lengths."""
    import kiln.torch  # noqa: F401
    for b, hq, hkv, s, d, causal, layout in [(2, 4, 2, 1000, 128, True, "bhsd"), (1, 2, 2, 100, 64, False, "bhsd"),
                                             (1, 8, 2, 4095, 64, True, "bhsd"), (2, 4, 1, 300, 128, False, "bshd")]:
        q = torch.randn(b, hq, s, d, device="cuda").bfloat16()
        k = torch.randn(b, hkv, s, d, device="cuda").bfloat16()
        v = torch.randn(b, hkv, s, d, device="cuda").bfloat16()
        d_o = torch.randn(b, hq, s, d, device="cuda").bfloat16()
        t = (lambda x: x.transpose(1, 2).contiguous()) if layout == "bshd" else (lambda x: x)
        leaves = [t(x).detach().requires_grad_() for x in (q, k, v)]
        o, _ = torch.ops.kiln.attention(*leaves, causal, 0.0, layout)
        o.backward(t(d_o))
        got = [t(x.grad) if layout == "bshd" else x.grad for x in leaves]
        ref = [x.detach().float().requires_grad_() for x in (q, k, v)]
        ke, ve = (x.repeat_interleave(hq // hkv, dim=1) for x in ref[1:])
        F.scaled_dot_product_attention(ref[0], ke, ve, is_causal=causal).backward(d_o.float())
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            report(f"attention backward {name} b{b} hq{hq} hkv{hkv} s{s} d{d}{' causal' if causal else ''} {layout}",
                   rel(g, r.grad), 2e-2)


def varlen_attention_grad():
    """kiln.varlen_attention_backward over packed sequences [T, H, D] against torch SDPA's
    gradients in fp32, sequence by sequence (grouped heads expanded), at D 64, 128 and 256."""
    for lengths, hq, hkv, d, causal in [([7, 1000, 1, 4095], 4, 2, 128, True),
                                        ([300, 64, 129], 2, 1, 64, False), ([513, 70], 2, 2, 256, True)]:
        cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
        t = int(cu[-1])
        q, d_o = (torch.randn(t, hq, d, device="cuda").bfloat16() for _ in range(2))
        k, v = (torch.randn(t, hkv, d, device="cuda").bfloat16() for _ in range(2))
        o, lse = kiln.varlen_attention(q, k, v, cu, max(lengths), causal=causal)
        got = kiln.varlen_attention_backward(q, k, v, o, lse, d_o, cu, max(lengths), causal=causal)
        want = [torch.empty(x.shape, device="cuda") for x in (q, k, v)]
        for b in range(len(lengths)):
            rows = slice(int(cu[b]), int(cu[b + 1]))
            ref = [x[rows].transpose(0, 1)[None].float().requires_grad_() for x in (q, k, v)]
            ke, ve = (x.repeat_interleave(hq // hkv, dim=1) for x in ref[1:])
            F.scaled_dot_product_attention(ref[0], ke, ve, is_causal=causal).backward(
                d_o[rows].transpose(0, 1)[None].float())
            for w, r in zip(want, ref):
                w[rows] = r.grad[0].transpose(0, 1)
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            report(f"varlen backward {name} {lengths} hq{hq} hkv{hkv} d{d}{' causal' if causal else ''}",
                   rel(g, w), 2e-2)


def torch_ops():
    """kiln.torch: torch.library.opcheck on each op, and torch.compile(fullgraph=True) of a small
    model calling them against the same model run eagerly."""
    global failures
    import kiln.torch  # noqa: F401  (registers torch.ops.kiln.*)
    ops = torch.ops.kiln
    x = torch.randn(300, 1000, device="cuda").bfloat16()
    w = torch.randn(1000, device="cuda").bfloat16()
    b = torch.randn(1000, device="cuda").bfloat16()
    wt = torch.randn(1000, 512, device="cuda").bfloat16()
    q = torch.randn(1, 4, 200, 128, device="cuda").bfloat16()
    kv = torch.randn(1, 2, 200, 128, device="cuda").bfloat16()
    cases = [(ops.gemm.default, (x, wt)), (ops.gemm.default, (x, wt, None, None, "", "f32")),
             (ops.gemm.default, (x, wt, None, None, "swiglu")),
             (ops.gemm.default, (x.view(3, 100, 1000), wt)),  # a (..., K): rows folded
             (ops.gemm_rope.default, (x, torch.randn(512, 1000, device="cuda").bfloat16().t(),
                                      kiln.rope_angles(torch.randn(300, 64, device="cuda"),
                                                       torch.randn(300, 64, device="cuda")),
                                      256, 128)),
             (ops.softmax.default, (x,)), (ops.rms_norm.default, (x, w, 1e-5)),
             (ops.layer_norm.default, (x, w, b, 1e-5)), (ops.attention.default, (q, kv, kv, True)),
             (ops.attention.default, (q.transpose(1, 2).contiguous(), kv.transpose(1, 2).contiguous(),
                                      kv.transpose(1, 2).contiguous(), True, 0.0, "bshd")),
             # with gradients: opcheck runs the backward (kiln::attention_backward) too
             (ops.attention.default, (q.clone().requires_grad_(), kv.clone().requires_grad_(),
                                      kv.clone().requires_grad_(), True))]
    for op, args in cases:
        try:
            torch.library.opcheck(op, args)
            print(f"opcheck {op}: ok")
        except Exception as e:
            failures += 1
            print(f"opcheck {op}: FAIL: {type(e).__name__}: {e}")

    class Block(torch.nn.Module):
        def forward(self, x, w, wt, q, kv):
            h = ops.rms_norm(x, w, 1e-5)
            y = ops.gemm(h, wt)
            o, _ = ops.attention(q, kv, kv, True)
            return ops.softmax(y), o

    # The backward under torch.compile(fullgraph=True) against eager: dq by atomics (its last
    # bits vary run to run: within a bf16 rounding), and under torch.use_deterministic_algorithms
    # from its own kernel (the same bytes).
    def loss(q, k, v):
        return ops.attention(q, k, v, True)[0].float().square().sum()
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic, warn_only=True)
        grads = []
        for fn in (loss, torch.compile(loss, fullgraph=True)):
            leaves = [x.clone().requires_grad_() for x in (q, kv, kv)]
            fn(*leaves).backward()
            grads.append([x.grad for x in leaves])
        for name, e, c in zip(("dq", "dk", "dv"), *grads):
            bound = 1e-6 if deterministic or name != "dq" else 4e-3
            report(f"torch.compile(fullgraph=True) vs eager, attention backward {name}"
                   f"{' (deterministic)' if deterministic else ''}", rel(c, e), bound)
    torch.use_deterministic_algorithms(False)

    eager = Block()(x, w, wt, q, kv)
    compiled = torch.compile(Block(), fullgraph=True)(x, w, wt, q, kv)
    for name, e, c in zip(("gemm path", "attention"), eager, compiled):
        report(f"torch.compile(fullgraph=True) vs eager, {name}", rel(c, e), 1e-6)


def torch_ops_8bit():
    """kiln.torch's 8-bit and grouped ops: opcheck on each, their results against kiln's own
    calls, and torch.compile(fullgraph=True) of an FP8 linear layer (quantize, then the block-
    scaled GEMM) and a masked MoE step against the same run eagerly."""
    global failures
    import kiln.torch  # noqa: F401  (registers torch.ops.kiln.*)
    ops = torch.ops.kiln
    a16 = torch.randn(200, 512, device="cuda").bfloat16()
    w16 = (torch.randn(384, 512, device="cuda") / 20).bfloat16()
    a8, sa = ops.quantize_e4m3(a16)
    w8, sw = ops.quantize_e4m3_blocks(w16)
    one = torch.ones(1, device="cuda")
    e, cap = 3, 64
    xg = torch.randn(200, 512, device="cuda").bfloat16()
    wg = (torch.randn(e, 256, 512, device="cuda") / 20).bfloat16()
    offs = torch.tensor([70, 70, 200], device="cuda", dtype=torch.int32)
    xm = torch.randn(e, cap, 512, device="cuda").bfloat16()
    counts = torch.tensor([5, 0, 64], device="cuda", dtype=torch.int32)
    xg8, sxg = ops.quantize_e4m3(xg)
    per_expert = [ops.quantize_e4m3_blocks(wg[g]) for g in range(e)]
    wg8, swg = torch.stack([q for q, _ in per_expert]), torch.stack([s for _, s in per_expert])
    cases = [(ops.quantize_e4m3.default, (a16,)),
             (ops.quantize_e4m3.default, (a16.view(2, 100, 512),)),  # a (batch, tokens, K) input
             (ops.quantize_e4m3_blocks.default, (w16,)),
             (ops.quantize_e4m3_blocks_t.default, (w16,)),
             (ops.gemm_fp8.default, (a8, w8.t(), sa, sw)),
             (ops.gemm_fp8.default, (a8, w8.t(), one, one)),
             (ops.gemm_fp8.default, (a8, w8.t(), sa, sw, None, torch.randn(200, 384, device="cuda").bfloat16())),
             (ops.grouped_gemm.default, (xg, wg, offs)),
             (ops.grouped_gemm_masked.default, (xm, wg, counts)),
             (ops.grouped_gemm.default, (xg8, wg8, offs, sxg, swg))]
    for op, args in cases:
        # opcheck's schema test multiplies the inputs, which float8 tensors do not support: the
        # ops that take them skip that one test (the other three of opcheck's default run).
        tests = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic") \
            if any(getattr(x, "dtype", None) == torch.float8_e4m3fn for x in args) else None
        try:
            torch.library.opcheck(op, args, **({"test_utils": tests} if tests else {}))
            print(f"opcheck {op}: ok")
        except Exception as ex:
            failures += 1
            print(f"opcheck {op}: FAIL: {type(ex).__name__}: {ex}")
    q, s, q_t, s_t = ops.quantize_e4m3_blocks_t(w16)
    report("kiln::quantize_e4m3_blocks_t q_t against q.t()",
           float((q_t.view(torch.uint8) != q.view(torch.uint8).t()).float().mean()), 0)
    report("kiln::quantize_e4m3_blocks_t scales_t against quantize_e4m3_blocks's scales.t()",
           rel(s_t, ops.quantize_e4m3_blocks(w16)[1].t()), 0)
    report("kiln::gemm_fp8 against kiln.gemm", rel(ops.gemm_fp8(a8, w8.t(), sa, sw),
                                                   kiln.gemm(a8, w8.t(), scale_a=sa, scale_b=sw)), 0)
    owned = kiln.grouped_gemm(xg, wg, offs, out=torch.zeros(200, 256, device="cuda").bfloat16())
    report("kiln::grouped_gemm against kiln.grouped_gemm", rel(ops.grouped_gemm(xg, wg, offs), owned), 0)
    owned = kiln.grouped_gemm(xg8, wg8, offs, scale_x=sxg, scale_w=swg,
                              out=torch.zeros(200, 256, device="cuda").bfloat16())
    report("kiln::grouped_gemm FP8 against kiln.grouped_gemm",
           rel(ops.grouped_gemm(xg8, wg8, offs, sxg, swg), owned), 0)
    report("kiln::grouped_gemm FP8 against the bf16 one", rel(owned, ops.grouped_gemm(xg, wg, offs)), 0.06)
    got = ops.grouped_gemm_masked(xm, wg, counts)
    want = torch.zeros_like(got)
    for g, c in enumerate(counts.tolist()):
        want[g, :c] = (xm[g, :c].float() @ wg[g].float().t()).bfloat16()
    report("kiln::grouped_gemm_masked against torch, rows past each count zero", rel(got, want), 1e-2)

    def fp8_linear(x, w):
        x8, sx = ops.quantize_e4m3(x)
        q8, sq = ops.quantize_e4m3_blocks(w)
        return ops.gemm_fp8(x8, q8.t(), sx, sq)

    def moe_step(x, w, counts):
        return ops.grouped_gemm_masked(x, w, counts)

    for name, fn, args in [("FP8 linear", fp8_linear, (a16, w16)),
                           ("masked MoE step", moe_step, (xm, wg, counts))]:
        eager = fn(*args)
        compiled = torch.compile(fn, fullgraph=True)(*args)
        report(f"torch.compile(fullgraph=True) vs eager, {name}", rel(compiled, eager), 1e-6)
    report("FP8 linear against the bf16 product", rel(fp8_linear(a16, w16), a16 @ w16.t()), 0.06)


def host_cost():
    """Seconds of host time per call on a tiny problem, kiln and torch, launches back to back."""
    x = torch.randn(8, 256, device="cuda").bfloat16()
    w = torch.ones(256, device="cuda").bfloat16()
    out = torch.empty_like(x)
    a, b = torch.randn(16, 256, device="cuda").bfloat16(), torch.randn(256, 256, device="cuda").bfloat16()
    c = torch.empty(16, 256, device="cuda").bfloat16()
    q = torch.randn(1, 32, 1, 128, device="cuda").bfloat16()
    kv = torch.randn(1, 8, 256, 128, device="cuda").bfloat16()
    lens = torch.tensor([256], dtype=torch.int32, device="cuda")
    for name, fn in [("kiln.rms_norm", lambda: kiln.rms_norm(x, w, out=out)),
                     ("torch rms_norm", lambda: F.rms_norm(x, (256,), w, 1e-6)),
                     ("kiln.softmax", lambda: kiln.softmax(x, out=out)),
                     ("torch.softmax", lambda: torch.softmax(x, -1)),
                     ("kiln.gemm", lambda: kiln.gemm(a, b.t(), out=c)),
                     ("torch.mm", lambda: torch.mm(a, b.t(), out=c)),
                     ("kiln.decode_attention", lambda: kiln.decode_attention(q, kv, kv, lens)),
                     ("torch SDPA (GQA)", lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))]:
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"host time per call, {name:<22} {(t1 - t0) / 2000 * 1e6:8.1f} us")


print(f"kiln Python module on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
      f"bundles {kiln.bundle_dir()}")
parts = [row_ops, gemms, fp8_gemms, fp8_e5m2, fp8_quantize, grouped_gemms, attention, attention_grad, varlen_attention_grad, decode, append,
         glue, streams_and_load, cuda_graphs, empty_inputs, errors, torch_ops, torch_ops_8bit, host_cost]
# Parts named on the command line run alone (python_gpu_check.py fp8_gemms).
for part in [p for p in parts if len(sys.argv) < 2 or p.__name__ in sys.argv[1:]]:
    try:
        part()
    except Exception as e:  # a part that raises fails, and the rest still run
        failures += 1
        print(f"{part.__name__}: FAIL: {type(e).__name__}: {e}")
print(f"{failures} failures")
sys.exit(1 if failures else 0)
