#!/usr/bin/env python3
"""The decoder layer of a Llama-3-8B-shaped model (hidden 4096, 32 query heads over 8 KV heads,
MLP 14336, RoPE theta 500000, bf16) built from kiln ops, checked against transformers'
LlamaDecoderLayer with the same random weights (SDPA attention), and timed against it eager and
under torch.compile in the same process.

    PYTHONPATH=build/python KILN_BUNDLE_DIR=build/bundles python3 examples/llama_layer.py

The kiln layer, per call on x [B, S, 4096]:
  h = rms_norm(x); qkv = h @ Wqkv (one GEMM over q, k and v's weights); q, k, v = rope_qkv(qkv)
  (RoPE, q, k and v [B, S, H, D] in one pass); o = attention(q, k, v, causal) in that rows
  layout, so o [B, S, Hq, D] is the output projection's rows: x = o @ Wo + x (the residual
  fused); h = rms_norm(x);
  a = swiglu(h @ Wgu) (gate and up in one GEMM, SwiGLU fused: Wgu's rows interleaved by
  kiln.swiglu_weights); y = a @ Wd + x (the residual fused).
It also times the layer with RoPE fused into the QKV GEMM's epilogue (kiln.gemm's rope: q and k
views of its output, their rows in kiln.rope_order), which measured level with it
(docs/perf/2026-11-30-rope-in-the-qkv-epilogue.md).

Timing: every contender in turn, round after round, in two ways: a stack of layers back to back
(per layer; a layer's time inside a model's forward, the figure the targets are judged on) and
one call from an idle GPU (which also pays the host's issue of the first kernels and the clock's
ramp). Then the host's time to issue one call, and kiln's GPU time per kernel (torch.profiler)
(docs/perf/2026-11-30-llama-layer-steady-state.md).
"""

import argparse
import statistics
import sys
import time

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

import kiln

HIDDEN, HEADS, KV_HEADS, MLP, THETA, EPS = 4096, 32, 8, 14336, 500000.0, 1e-5
HEAD_DIM = HIDDEN // HEADS


def llama_config():
    """The Llama-3-8B-shaped layer's config, attention through SDPA."""
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=MLP, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, rope_theta=THETA, rms_norm_eps=EPS,
                         max_position_embeddings=1 << 17)
    config._attn_implementation = "sdpa"
    return config


def hf_layer(config):
    """transformers' decoder layer in bf16 on the GPU, random weights, its norms' too (not all
    ones)."""
    layer = LlamaDecoderLayer(config, layer_idx=0).to("cuda", torch.bfloat16)
    for norm in (layer.input_layernorm, layer.post_attention_layernorm):
        norm.weight.data.normal_(1.0, 0.1)
    return layer


class KilnLlamaLayer:
    """kiln's layer, holding the Hugging Face layer's weights (no copies but the fused ones)."""

    def __init__(self, hf, fused_rope=False):
        attn, mlp = hf.self_attn, hf.mlp
        self.fused_rope = fused_rope
        self.norm_in = hf.input_layernorm.weight
        self.norm_post = hf.post_attention_layernorm.weight
        # b = W.t(): the (out, in) weights read K-major, as the GEMM entry point likes them.
        wq, wk, wv = attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight
        if fused_rope:  # q's and k's rows in each head put in the fused RoPE's order
            wq, wk = kiln.rope_weights(wq, HEAD_DIM), kiln.rope_weights(wk, HEAD_DIM)
        self.w_qkv = torch.cat([wq, wk, wv]).t()
        self.w_o = attn.o_proj.weight.t()
        self.w_gate_up = kiln.swiglu_weights(mlp.gate_proj.weight, mlp.up_proj.weight).t()
        self.w_down = mlp.down_proj.weight.t()
        inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM)
        angles = torch.arange(1 << 17, device="cuda").float()[:, None] * inv_freq[None, :]
        self.cos, self.sin = angles.cos().contiguous(), angles.sin().contiguous()
        self.rope_angles = kiln.rope_angles(self.cos, self.sin) if fused_rope else None

    def qkv_steps(self, b, s):
        """h -> (q, k, v) [B, S, H, D]: the QKV GEMM with RoPE fused and views of its output, or
        the GEMM and then rope_qkv."""
        if self.fused_rope:
            rope = (self.rope_angles[:s], (HEADS + KV_HEADS) * HEAD_DIM, HEAD_DIM)
            return [("qkv gemm + rope", lambda st: st.update(qkv3=qkv_views(
                kiln.gemm(st["h"], self.w_qkv, rope=rope), b, s)))]
        return [("qkv gemm", lambda st: st.update(qkv=kiln.gemm(st["h"], self.w_qkv))),
                ("rope_qkv", lambda st: st.update(qkv3=kiln.rope_qkv(
                    st["qkv"], self.cos[:s], self.sin[:s], b, HEADS, KV_HEADS, layout="bshd")))]

    def parts(self, x):
        """The layer as named steps, each a function of the state dict: for timing per part."""
        b, s, _ = x.shape
        t = b * s
        return [
            ("rms_norm", lambda st: st.update(h=kiln.rms_norm(st["x"], self.norm_in, EPS))),
            *self.qkv_steps(b, s),
            ("attention", lambda st: st.update(rows=kiln.attention(
                *st["qkv3"], causal=True, layout="bshd")[0].view(t, HIDDEN))),
            ("o gemm + residual", lambda st: st.update(x1=kiln.gemm(st["rows"], self.w_o,
                                                                   residual=st["x"]))),
            ("rms_norm", lambda st: st.update(h1=kiln.rms_norm(st["x1"], self.norm_post, EPS))),
            ("gate/up gemm + swiglu", lambda st: st.update(a=kiln.gemm(
                st["h1"], self.w_gate_up, activation="swiglu"))),
            ("down gemm + residual", lambda st: st.update(y=kiln.gemm(st["a"], self.w_down,
                                                                      residual=st["x1"]))),
        ]

    def __call__(self, x):
        state = {"x": x.reshape(-1, HIDDEN)}
        for _, step in self.parts(x):
            step(state)
        return state["y"].view(x.shape)


def qkv_views(qkv, b, s):
    """q [B, S, Hq, D], k and v [B, S, Hkv, D]: views of a fused QKV projection's rows."""
    q_end, k_end = HEADS * HEAD_DIM, (HEADS + KV_HEADS) * HEAD_DIM
    return (qkv[:, :q_end].view(b, s, HEADS, HEAD_DIM),
            qkv[:, q_end:k_end].view(b, s, KV_HEADS, HEAD_DIM),
            qkv[:, k_end:].view(b, s, KV_HEADS, HEAD_DIM))


class KilnTorchOpsLayer(torch.nn.Module):
    """The same layer through the torch.library ops (kiln.torch), for torch.compile."""

    def __init__(self, ours):
        super().__init__()
        self.w = ours

    def forward(self, x):
        import kiln.torch  # noqa: F401  (registers torch.ops.kiln.*)
        ops, w = torch.ops.kiln, self.w
        b, s, _ = x.shape
        x2 = x.reshape(b * s, HIDDEN)
        h = ops.rms_norm(x2, w.norm_in, EPS)
        if w.fused_rope:
            q, k, v = qkv_views(ops.gemm_rope(h, w.w_qkv, w.rope_angles[:s],
                                              (HEADS + KV_HEADS) * HEAD_DIM, HEAD_DIM), b, s)
        else:
            qkv = ops.gemm(h, w.w_qkv)
            q, k, v = ops.rope_qkv(qkv, w.cos[:s], w.sin[:s], b, HEADS, KV_HEADS, "bshd")
        o, _ = ops.attention(q, k, v, True, 0.0, "bshd")
        rows = o.reshape(b * s, HIDDEN)
        x1 = ops.gemm(rows, w.w_o, residual=x2)
        a = ops.gemm(ops.rms_norm(x1, w.norm_post, EPS), w.w_gate_up, activation="swiglu")
        y = ops.gemm(a, w.w_down, residual=x1)
        return y.view(b, s, HIDDEN)


def median_ms(fn, iters, before_each=None):
    """Median of `iters` calls between CUDA events, after 3 warm-up calls; `before_each` (e.g. a
    barrier across ranks) runs before each timed call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if before_each:
            before_each()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def stack_ms(fn, depth, iters):
    """A layer's time inside a model: `depth` calls back to back between CUDA events, per call,
    the median of `iters` such stacks. The host issues ahead of the GPU there and the GPU never
    idles between layers, as in a model's forward; a single call from an idle GPU also pays the
    host's issue of its first kernels and the clock's ramp (both reported beside it)."""
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(depth):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / depth)
    return statistics.median(times)


def alternated(contenders, rounds, timer):
    """{name: [ms per round]}: every contender timed by `timer` in turn, round after round. The
    GPU's clock moves with its load and temperature over a run by more than the differences
    measured here (docs/perf/2026-11-30-llama-layer-steady-state.md), so contenders timed one after
    the other would see different clocks."""
    for fn in contenders.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            times[name].append(timer(fn))
    return times


def kernel_ms(fn, calls):
    """{kernel name: GPU ms per call} over `calls` calls back to back (torch.profiler), and the
    GPU's idle time per call between the first kernel's start and the last one's end."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per = {}
    for e in events:
        per[e.name] = per.get(e.name, 0.0) + e.device_time_total / 1e3 / calls
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy = sum(end - start for start, end in spans)
    return per, ((spans[-1][1] - spans[0][0]) - busy) / 1e3 / calls


def host_ms_per_call(fn, calls=10):
    """The host's time to issue one call (Python, the ops' checks, the launches), the GPU busy
    with the calls before so that it never waits for one."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    return (issued - start) / calls * 1e3


def rel(got, want):
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="1x4096,8x2048,1x16384", help="BxS,...")
    p.add_argument("--iters", type=int, default=16, help="timed calls per contender a round")
    p.add_argument("--rounds", type=int, default=5, help="rounds, contenders in turn")
    p.add_argument("--depth", type=int, default=8, help="layers in the timed stack")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile of HF's layer")
    args = p.parse_args()
    torch.manual_seed(0)
    config = llama_config()
    hf = hf_layer(config).eval()
    rotary = LlamaRotaryEmbedding(config).to("cuda")
    ours = KilnLlamaLayer(hf)
    fused = KilnLlamaLayer(hf, fused_rope=True)  # RoPE in the QKV GEMM's epilogue, for comparison
    compiled = None if args.no_compile else torch.compile(hf, fullgraph=False)
    # kiln's layer through its torch ops, compiled whole: no graph breaks.
    ours_compiled = None if args.no_compile else torch.compile(KilnTorchOpsLayer(ours),
                                                               fullgraph=True)
    failures = 0
    print(f"Llama-3-8B-shaped decoder layer on {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}; CUDA events, the contenders timed in turn over {args.rounds} "
          f"rounds, the median round")
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.split("x"))
        x = torch.randn(b, s, HIDDEN, device="cuda").bfloat16()
        pos = torch.arange(s, device="cuda")[None].expand(b, s)
        emb = rotary(x, pos)

        def hf_call(layer=hf):
            out = layer(x, position_embeddings=emb, position_ids=pos)
            return out[0] if isinstance(out, tuple) else out

        with torch.no_grad():
            want = hf_call()
            got = ours(x)
            err = rel(got - x, want - x)  # of the layer's update, which the residual would hide
            fused_err = rel(fused(x) - x, want - x)
            ok = err <= 3e-2 and fused_err <= 3e-2
            failures += 0 if ok else 1
            line = (f"B={b} S={s}: update error vs HF {err:.2e} (RoPE fused: {fused_err:.2e}) "
                    f"{'ok' if ok else 'FAIL'}; host time to issue a layer call "
                    f"{host_ms_per_call(lambda: ours(x)):.3f} ms")
            contenders = {"kiln": lambda: ours(x), "kiln, RoPE fused": lambda: fused(x),
                          "HF eager": hf_call}
            if compiled is not None:
                same = rel(ours_compiled(x), got)
                ok = same <= 1e-6
                failures += 0 if ok else 1
                line += f"; kiln's ops compiled: output vs eager kiln {same:.1e} {'ok' if ok else 'FAIL'}"
                contenders["HF compiled"] = lambda: hf_call(compiled)
                contenders["kiln ops compiled"] = lambda: ours_compiled(x)
            print(line)
            for method, timer in [
                    (f"in a stack of {args.depth} (per layer)",
                     lambda fn: stack_ms(fn, args.depth, max(2, args.iters // args.depth))),
                    ("alone, one call from an idle GPU", lambda fn: median_ms(fn, args.iters))]:
                times = alternated(contenders, args.rounds, timer)
                kiln_ms = statistics.median(times["kiln"])
                cells = []
                for name, t in times.items():
                    ratios = [theirs / ours_ for theirs, ours_ in zip(t, times["kiln"])]
                    cell = f"{name} {statistics.median(t):.3f} ms"
                    if name.startswith("HF"):
                        cell += (f" ({statistics.median(t) / kiln_ms:.3f}x; rounds "
                                 f"{min(ratios):.3f}-{max(ratios):.3f}x)")
                    cells.append(cell)
                print(f"  {method}: " + ", ".join(cells))
            per, idle = kernel_ms(lambda: ours(x), args.depth)
            print(f"  kiln per part, GPU time per layer in a stack of {args.depth} "
                  f"(torch.profiler; GPU idle between kernels {idle:.3f} ms):")
            for name, ms in sorted(per.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.3f} ms  {name}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
