#!/usr/bin/env python3
"""kiln's Python module as a new user drives it: random shapes, layouts, types and options that no
test names, drawn from a seed. Every call must either give the right answer (norm-relative error
against a torch fp32/fp64 reference; NaN fails) or raise kiln.Error; any other exception, a wrong
answer or a poisoned output left unwritten is a failure. Prints each failure, then the distinct
refusals (to read whether each is one a user should get), and exits 1 on a failure.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 tools/python_fuzz.py [--seed S]
        [--cases N] [--only gemm,attention,...]
"""

import argparse
import collections
import random
import sys
import traceback

import torch
import torch.nn.functional as F

import kiln

failures = []
refusals = collections.Counter()
passed = collections.Counter()


def rel(got, want):
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def rel_floor(got, want, floor):
    """rel, with the reference's norm taken as at least `floor` a element in RMS: a gradient that
    is zero in exact arithmetic (one key: dq = 0) is compared by its rounding noise's size."""
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / max(float(want.norm()), floor * want.numel() ** 0.5))


def case(op, what, run):
    """Runs `run` (returning a list of (name, error, tolerance)); files the outcome under `op`."""
    try:
        checks = run()
        torch.cuda.synchronize()
    except kiln.Error as e:
        first = str(e).splitlines()[0]
        refusals[(op, first[:160])] += 1
        return
    except Exception as e:  # noqa: BLE001 (anything but kiln.Error is a failure)
        failures.append(f"{op} {what}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
        return
    for name, err, tol in checks:
        if not err <= tol:
            failures.append(f"{op} {what}: {name} error {err:.3e} > {tol:.0e}")
            return
    passed[op] += 1


def pick_dim(r, small=70, large=3000):
    return r.choice([r.randint(1, small), r.randint(1, large), r.choice([64, 128, 256, 1024, 4096])])


def layout(r, x):
    """x (R, C) in a layout a user may hand over: packed, column-major, a slice of a wider
    tensor, or every other column."""
    kind = r.choice(["row", "col", "slice", "step"])
    if kind == "row":
        return x.contiguous(), kind
    if kind == "col":
        return x.t().contiguous().t(), kind
    if kind == "slice":
        wide = torch.empty(x.shape[0], x.shape[1] + r.randint(1, 40), dtype=x.dtype, device="cuda")
        wide[:, :x.shape[1]] = x
        return wide[:, :x.shape[1]], kind
    wide = torch.empty(x.shape[0], 2 * x.shape[1], dtype=x.dtype, device="cuda")
    wide[:, ::2] = x
    return wide[:, ::2], kind


def gemm(r):
    m, n, k = pick_dim(r), pick_dim(r), pick_dim(r)
    dt = r.choice([torch.bfloat16, torch.bfloat16, torch.float16])
    a0 = torch.randn(m, k, device="cuda").to(dt)
    b0 = torch.randn(k, n, device="cuda").to(dt)
    a, la = layout(r, a0)
    b, lb = layout(r, b0)
    kw, want = {}, a0.double() @ b0.double()
    out_f32 = r.random() < 0.25
    odt = torch.float32 if out_f32 else dt
    if out_f32:
        kw["out_dtype"] = "f32"
    elif r.random() < 0.15:  # the other 16-bit type out (bf16 into f16: the product, then a pass)
        odt = torch.float16 if dt == torch.bfloat16 else torch.bfloat16
        kw["out_dtype"] = "f16" if odt == torch.float16 else "bf16"
    if r.random() < 0.3:
        kw["bias"] = torch.randn(n, device="cuda").to(odt)
        want = want + kw["bias"].double()
    act = r.choice([None, None, "relu", "gelu", "silu"])
    if act:
        kw["activation"] = act
        want = {"relu": torch.relu, "silu": F.silu,
                "gelu": lambda u: F.gelu(u, approximate="tanh")}[act](want)
    if r.random() < 0.25:
        kw["residual"] = torch.randn(m, n, device="cuda").to(odt)
        want = want + kw["residual"].double()
    use_out = r.random() < 0.4
    # a linear layer's input (2, M/2, K) with its residual alike, as torch.matmul takes them
    batched = m % 2 == 0 and not use_out and r.random() < 0.2 and a.is_contiguous()
    what = (f"{m}x{n}x{k} {str(dt)[6:]} a {la} b {lb} {sorted(kw)} act={act} out={use_out}"
            f"{' batched' if batched else ''}")

    def run():
        if batched:
            kwb = dict(kw)
            if "residual" in kwb:
                kwb["residual"] = kwb["residual"].reshape(2, m // 2, n)
            got = kiln.gemm(a.reshape(2, m // 2, k), b, **kwb)
            if got.shape != (2, m // 2, n):
                return [(f"shape {tuple(got.shape)}", float("inf"), 0)]
            return [("batched product", rel(got.reshape(m, n), want), 1e-3 if out_f32 else 1e-2)]
        out = None
        if use_out:
            out = torch.full((m, n), float("nan"), dtype=odt, device="cuda")
            if r.random() < 0.5:
                out = torch.full((n, m), float("nan"), dtype=odt, device="cuda").t()
        got = kiln.gemm(a, b, out=out, **kw)
        if out is not None and got is not out:
            return [("returned out", float("inf"), 0)]
        if got.shape != (m, n) or got.dtype != odt:
            return [(f"shape {tuple(got.shape)} {got.dtype}", float("inf"), 0)]
        return [("product", rel(got, want), 1e-3 if out_f32 else 1e-2)]
    case("gemm", what, run)


def attention_ref(q, k, v, causal, scale):
    """fp32 attention with bottom-right causal alignment and GQA: (o, lse)."""
    hq, hkv = q.shape[1], k.shape[1]
    kk = k.float().repeat_interleave(hq // hkv, dim=1)
    vv = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("bhsd,bhtd->bhst", q.float(), kk) * scale
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(sk, device="cuda")[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhst,bhtd->bhsd", p, vv), lse


def attention(r):
    b = r.randint(1, 3)
    hkv = r.choice([1, 2, 4])
    hq = hkv * r.choice([1, 2, 4, 8])
    s = r.choice([r.randint(1, 70), r.randint(1, 1500)])
    skv = s if r.random() < 0.5 else r.choice([r.randint(1, 70), r.randint(1, 1500)])
    d = r.choice([64, 128, 256, 64, 128, r.choice([32, 80, 96, 160, 512])])
    causal = r.random() < 0.5
    dt = r.choice([torch.bfloat16, torch.float16])
    lay = r.choice(["bhsd", "bshd"])
    scale = None if r.random() < 0.7 else r.uniform(0.01, 0.3)
    q = torch.randn(b, hq, s, d, device="cuda").to(dt)
    k = torch.randn(b, hkv, skv, d, device="cuda").to(dt)
    v = torch.randn(b, hkv, skv, d, device="cuda").to(dt)
    what = f"b{b} hq{hq} hkv{hkv} s{s} skv{skv} d{d} {str(dt)[6:]} {lay} causal={causal} " \
           f"scale={scale}"

    def run():
        args = (q, k, v) if lay == "bhsd" else tuple(x.transpose(1, 2) for x in (q, k, v))
        o, lse = kiln.attention(*args, causal=causal, scale=scale, layout=lay)
        if lay == "bshd":
            o = o.transpose(1, 2)
        want_o, want_lse = attention_ref(q, k, v, causal, scale or d ** -0.5)
        seen = torch.isfinite(want_lse)
        lse_err = rel(lse[seen], want_lse[seen]) if seen.any() else 0.0
        if not torch.equal(torch.isneginf(lse), ~seen):
            lse_err = float("inf")
        return [("o", rel(o, want_o), 2e-2), ("lse", lse_err, 1e-3)]
    case("attention", what, run)


def decode(r):
    b = r.randint(1, 6)
    hkv = r.choice([1, 2, 8])
    hq = hkv * r.choice([1, 4, 8])
    s = r.choice([1, 1, r.randint(1, 16)])
    d = r.choice([64, 128, 256])
    paged = r.random() < 0.5
    page = r.choice([16, 32, 64, 256])
    smax = r.choice([r.randint(1, 300), r.randint(1, 5000)])
    lens = [r.randint(0, smax) for _ in range(b)]
    if max(lens) == 0:
        lens[0] = 1
    causal = r.random() < 0.5
    dt = r.choice([torch.bfloat16, torch.float16])
    q = torch.randn(b, hq, s, d, device="cuda").to(dt)
    kd = torch.randn(b, hkv, smax, d, device="cuda").to(dt)
    vd = torch.randn(b, hkv, smax, d, device="cuda").to(dt)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    what = f"b{b} hq{hq} hkv{hkv} s{s} d{d} lens {lens[:6]} {'page ' + str(page) if paged else 'dense'} " \
           f"causal={causal} {str(dt)[6:]}"

    def run():
        if paged:
            per = -(-smax // page)
            order = list(range(b * per))
            r.shuffle(order)
            table = torch.tensor(order, dtype=torch.int32, device="cuda").view(b, per)
            kc = torch.full((b * per, page, hkv, d), float("nan"), dtype=dt, device="cuda")
            vc = kc.clone()
            for i in range(b):
                for p in range(per):
                    rows = slice(p * page, min((p + 1) * page, smax))
                    n = rows.stop - rows.start
                    kc[table[i, p], :n] = kd[i, :, rows].transpose(0, 1)
                    vc[table[i, p], :n] = vd[i, :, rows].transpose(0, 1)
            o, lse = kiln.decode_attention(q, kc, vc, seq, table, causal=causal)
        else:
            kc, vc = kd.clone(), vd.clone()
            for i in range(b):  # past each length: NaN, never read
                kc[i, :, lens[i]:] = float("nan")
                vc[i, :, lens[i]:] = float("nan")
            o, lse = kiln.decode_attention(q, kc, vc, seq, causal=causal)
        checks = []
        for i in range(b):
            want_o, want_lse = attention_ref(q[i:i + 1], kd[i:i + 1, :, :lens[i]],
                                             vd[i:i + 1, :, :lens[i]], causal, d ** -0.5)
            seen = torch.isfinite(want_lse)
            if not torch.equal(torch.isneginf(lse[i:i + 1]), ~seen):
                return [(f"sequence {i}: rows with no key", float("inf"), 0)]
            if seen.any():
                checks.append((f"sequence {i} o", rel(o[i:i + 1][seen], want_o[seen]), 2e-2))
        return checks
    case("decode", what, run)


def varlen(r):
    nseq = r.randint(1, 6)
    lens = [r.choice([r.randint(1, 40), r.randint(1, 1200)]) for _ in range(nseq)]
    hkv = r.choice([1, 2, 4])
    hq = hkv * r.choice([1, 2, 4])
    d = r.choice([64, 128, 256])
    causal = r.random() < 0.5
    t = sum(lens)
    q = torch.randn(t, hq, d, device="cuda").bfloat16()
    k = torch.randn(t, hkv, d, device="cuda").bfloat16()
    v = torch.randn(t, hkv, d, device="cuda").bfloat16()
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    what = f"lens {lens} hq{hq} hkv{hkv} d{d} causal={causal}"

    def run():
        o, lse = kiln.varlen_attention(q, k, v, cu, max(lens), causal=causal)
        checks, start = [], 0
        for n in lens:
            sl = slice(start, start + n)
            want_o, _ = attention_ref(*(x[sl].transpose(0, 1)[None] for x in (q, k, v)), causal,
                                      d ** -0.5)
            checks.append((f"rows {start}..{start + n}", rel(o[sl].transpose(0, 1)[None], want_o),
                           2e-2))
            start += n
        return checks
    case("varlen", what, run)


def row_ops(r):
    shape = [r.randint(1, 50) for _ in range(r.randint(1, 3))] + [pick_dim(r, 300, 9000)]
    dt = r.choice([torch.bfloat16, torch.float16, torch.float32])
    x0 = torch.randn(*shape, device="cuda").to(dt)
    x = x0 if r.random() < 0.7 else x0.transpose(0, -1).contiguous().transpose(0, -1)
    w = torch.randn(shape[-1], device="cuda").to(dt)
    bias = torch.randn(shape[-1], device="cuda").to(dt)
    op = r.choice(["softmax", "rms_norm", "layer_norm"])
    dim = r.randrange(-len(shape), len(shape)) if r.random() < 0.2 else -1  # softmax's dim
    bare = r.random() < 0.2  # the norms without weight (and bias)
    what = (f"{op} {shape} {str(dt)[6:]} contiguous={x.is_contiguous()} dim={dim} "
            f"bare={bare}")

    def run():
        xf = x0.double()
        if op == "softmax":
            got, want = kiln.softmax(x, dim), torch.softmax(xf, dim)
        elif op == "rms_norm":
            got = kiln.rms_norm(x) if bare else kiln.rms_norm(x, w)
            want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            want = want if bare else want * w.double()
        else:
            got = kiln.layer_norm(x) if bare else kiln.layer_norm(x, w, bias)
            want = (F.layer_norm(xf, shape[-1:], None, None, 1e-5) if bare else
                    F.layer_norm(xf, shape[-1:], w.double(), bias.double(), 1e-5))
        return [(op, rel(got, want), 1e-2)]
    case("row_ops", what, run)


def fp8(r):
    m, n, k = pick_dim(r), pick_dim(r), 16 * r.randint(1, 300)
    scaling = r.choice(["tensorwise", "rowwise", "blockwise"])
    a = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda")
    act = r.choice([None, None, "relu", "gelu", "silu"])
    with_bias = r.random() < 0.3
    out_dtype = r.choice([None, None, "f16", "f32"])
    what = f"{m}x{n}x{k} {scaling} act={act} bias={with_bias} out={out_dtype}"

    def run():
        if scaling == "blockwise":
            qa, sa = kiln.quantize_e4m3(a.bfloat16())
            qw, sw = kiln.quantize_e4m3_blocks(w.bfloat16())
            da = qa.float() * sa.repeat_interleave(128, 1)[:, :k]
            dw = qw.float() * sw.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        else:
            if scaling == "tensorwise":
                sa = (a.abs().max() / 448).reshape(())
                sw = (w.abs().max() / 448).reshape(())
            else:
                sa = a.abs().amax(1) / 448
                sw = w.abs().amax(1) / 448
            qa = (a / (sa if sa.dim() == 0 else sa[:, None])).to(torch.float8_e4m3fn)
            qw = (w / (sw if sw.dim() == 0 else sw[:, None])).to(torch.float8_e4m3fn)
            da = qa.float() * (sa if sa.dim() == 0 else sa[:, None])
            dw = qw.float() * (sw if sw.dim() == 0 else sw[:, None])
        want = da.double() @ dw.double().t()
        kw = {}
        if with_bias:
            kw["bias"] = torch.randn(n, device="cuda").to(
                {None: torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[out_dtype])
            want = want + kw["bias"].double()
        if act:
            want = {"relu": torch.relu, "silu": F.silu,
                    "gelu": lambda u: F.gelu(u, approximate="tanh")}[act](want)
        got = kiln.gemm(qa, qw.t(), scale_a=sa, scale_b=sw, activation=act, out_dtype=out_dtype,
                        **kw)
        return [("product", rel(got, want), 1e-2)]
    case("fp8", what, run)


def grouped(r):
    e = r.randint(1, 12)
    n, k = 8 * r.randint(1, 300), 8 * r.randint(1, 300)
    sizes = [r.choice([0, 1, r.randint(1, 50), r.randint(1, 700)]) for _ in range(e)]
    t = sum(sizes)
    x = torch.randn(max(t, 1), k, device="cuda").bfloat16()[:t]
    w = torch.randn(e, n, k, device="cuda").bfloat16()
    offs = torch.tensor(sizes, dtype=torch.int32, device="cuda").cumsum(0).int()
    what = f"experts {sizes} n{n} k{k}"

    def run():
        out = torch.full((t, n), float("nan"), device="cuda").bfloat16()
        kiln.grouped_gemm(x, w, offs, out=out)
        checks, start = [], 0
        for i, c in enumerate(sizes):
            if c:
                want = x[start:start + c].double() @ w[i].double().t()
                checks.append((f"expert {i}", rel(out[start:start + c], want), 1e-2))
            start += c
        return checks
    case("grouped", what, run)


def backward(r):
    b = r.randint(1, 2)
    hkv = r.choice([1, 2])
    hq = hkv * r.choice([1, 2, 4])
    s = r.choice([r.randint(1, 70), r.randint(1, 700)])
    d = r.choice([64, 128, 256])
    causal = r.random() < 0.5
    q, k, v = (torch.randn(b, h, s, d, device="cuda").bfloat16() for h in (hq, hkv, hkv))
    do = torch.randn(b, hq, s, d, device="cuda").bfloat16()
    what = f"b{b} hq{hq} hkv{hkv} s{s} d{d} causal={causal}"

    def run():
        o, lse = kiln.attention(q, k, v, causal=causal)
        dq, dk, dv = kiln.attention_backward(q, k, v, o, lse, do, causal=causal)
        qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
        want, _ = attention_ref(qf, kf, vf, causal, d ** -0.5)
        want.backward(do.float())
        return [(name, rel_floor(got, ref.grad, 1e-3), 2e-2)
                for name, got, ref in (("dq", dq, qf), ("dk", dk, kf), ("dv", dv, vf))]
    case("backward", what, run)


OPS = {"gemm": gemm, "attention": attention, "decode": decode, "varlen": varlen,
       "row_ops": row_ops, "fp8": fp8, "grouped": grouped, "backward": backward}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", type=int, default=40, help="cases per op")
    p.add_argument("--only", default=",".join(OPS))
    args = p.parse_args()
    r = random.Random(args.seed)
    torch.manual_seed(args.seed)
    for name in args.only.split(","):
        for _ in range(args.cases):
            OPS[name](r)
    for f in failures:
        print("FAIL", f)
    print("\nrefused (kiln.Error), by message:")
    for (op, message), count in sorted(refusals.items()):
        print(f"  {op:<10} x{count:<3} {message}")
    print("\npassed:", dict(passed), " failures:", len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
