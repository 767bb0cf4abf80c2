"""kiln's ops as PyTorch custom ops (torch.library), each with a fake implementation that gives
the output's shape and type, so torch.compile(fullgraph=True) traces a model that calls them
without graph breaks:

    import kiln.torch  # registers torch.ops.kiln.*
    y = torch.ops.kiln.rms_norm(x, w, 1e-5)

The ops take and return CUDA tensors and launch on the current stream. kiln::attention is
differentiable (its backward is kiln::attention_backward: dq, dk, dv; the gradient of lse is not
propagated); the others have no backward yet. The 8-bit ops: kiln::gemm_fp8,
kiln::quantize_e4m3, kiln::quantize_e4m3_blocks(_t); the Mixture-of-Experts ones:
kiln::grouped_gemm (contiguous) and kiln::grouped_gemm_masked.
"""

import math
from typing import Optional, Tuple

import torch

import kiln

_TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _out_type(a: torch.Tensor, out_dtype: str) -> torch.dtype:
    return _TYPES[out_dtype] if out_dtype else a.dtype


@torch.library.custom_op("kiln::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
         residual: Optional[torch.Tensor] = None, activation: str = "",
         out_dtype: str = "") -> torch.Tensor:
    """act(a @ b + bias) + residual, a (M, K) or (..., K), b (K, N) (kiln.gemm)."""
    return kiln.gemm(a, b, bias=bias, residual=residual, activation=activation or None,
                     out_dtype=out_dtype or None)


@gemm.register_fake
def _(a, b, bias=None, residual=None, activation="", out_dtype=""):
    torch._check(a.dim() >= 1 and b.dim() == 2,
                 lambda: "kiln::gemm: a must be (..., K) and b a matrix (K, N)")
    torch._check(a.shape[-1] == b.shape[0], lambda: "kiln::gemm: a's columns must be b's rows")
    n = b.shape[1] // 2 if activation == "swiglu" else b.shape[1]  # gate and up pair
    return a.new_empty(tuple(a.shape[:-1]) + (n,), dtype=_out_type(a, out_dtype))


@torch.library.custom_op("kiln::gemm_rope", mutates_args=())
def gemm_rope(a: torch.Tensor, b: torch.Tensor, angles: torch.Tensor, rows: int,
              dim: int) -> torch.Tensor:
    """a @ b with RoPE fused into its first `rows` columns, b's columns in rope_order within each
    head of `dim` (kiln.gemm(a, b, rope=(angles, rows, dim)), angles from kiln.rope_angles)."""
    return kiln.gemm(a, b, rope=(angles, rows, dim))


@gemm_rope.register_fake
def _(a, b, angles, rows, dim):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "kiln::gemm_rope: a and b must be matrices")
    torch._check(a.shape[1] == b.shape[0], lambda: "kiln::gemm_rope: a's columns must be b's rows")
    torch._check(angles.dim() == 2 and 2 * angles.shape[1] == dim,
                 lambda: "kiln::gemm_rope: angles must be [P, dim / 2]")
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("kiln::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension (kiln.softmax)."""
    return kiln.softmax(x)


@softmax.register_fake
def _(x):
    return x.new_empty(x.shape)  # packed, as kiln's row ops return (any view of x is copied)


@torch.library.custom_op("kiln::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (kiln.rms_norm)."""
    return kiln.rms_norm(x, weight, eps)


@rms_norm.register_fake
def _(x, weight, eps):
    torch._check(weight.shape == (x.shape[-1],), lambda: "kiln::rms_norm: one weight a column")
    return x.new_empty(x.shape)


@torch.library.custom_op("kiln::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (kiln.layer_norm)."""
    return kiln.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    torch._check(weight.shape == (x.shape[-1],), lambda: "kiln::layer_norm: one weight a column")
    return x.new_empty(x.shape)


@torch.library.custom_op("kiln::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float = 0.0, layout: str = "bhsd") -> Tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) over q, k, v [B, H, S, D] contiguous, or (layout "bshd") [B, S, H, D] with each
    position's heads packed (kiln.attention); o packed in q's layout, lse [B, H, S]."""
    o, lse = kiln.attention(q, k, v, causal=causal, scale=scale or None, layout=layout)
    return o, lse


@attention.register_fake
def _(q, k, v, causal=False, scale=0.0, layout="bhsd"):
    torch._check(q.dim() == 4, lambda: "kiln::attention: q must have rank 4")
    torch._check(layout in ("bhsd", "bshd"), lambda: "kiln::attention: layout bhsd or bshd")
    b, h, s = (q.shape[0], q.shape[2], q.shape[1]) if layout == "bshd" else q.shape[:3]
    return q.new_empty(q.shape), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("kiln::attention_backward", mutates_args=())
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, d_o: torch.Tensor, causal: bool = False,
                       scale: float = 0.0, deterministic: bool = False
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) over [B, H, S, D] contiguous tensors (kiln.attention_backward)."""
    return kiln.attention_backward(q, k, v, o, lse, d_o.contiguous(), causal=causal,
                                   scale=scale or None, deterministic=deterministic)


@attention_backward.register_fake
def _(q, k, v, o, lse, d_o, causal=False, scale=0.0, deterministic=False):
    torch._check(d_o.shape == o.shape, lambda: "kiln::attention_backward: d_o shaped as o")
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, layout = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.layout = causal, scale, layout


def _attention_grad(ctx, d_o, d_lse):
    q, k, v, o, lse = ctx.saved_tensors
    # dq by atomics unless torch is asked for deterministic algorithms
    # (torch.use_deterministic_algorithms): then from a kernel of its own, the same bytes run to run.
    det = torch.are_deterministic_algorithms_enabled()
    if ctx.layout == "bshd":  # the backward reads [B, H, S, D]
        t = lambda x: x.transpose(1, 2).contiguous()
        dq, dk, dv = attention_backward(t(q), t(k), t(v), t(o), lse, t(d_o), ctx.causal, ctx.scale,
                                        det)
        dq, dk, dv = (x.transpose(1, 2) for x in (dq, dk, dv))
    else:
        dq, dk, dv = attention_backward(q.contiguous(), k.contiguous(), v.contiguous(), o, lse,
                                        d_o, ctx.causal, ctx.scale, det)
    return dq, dk, dv, None, None, None


attention.register_autograd(_attention_grad, setup_context=_attention_setup)


@torch.library.custom_op("kiln::rope_qkv", mutates_args=())
def rope_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: int, heads_q: int,
             heads_kv: int, layout: str = "bhsd") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v [B, H, S, D] (or, layout "bshd", [B, S, H, D]) with rotary embeddings from a fused
    QKV projection (kiln.rope_qkv)."""
    q, k, v = kiln.rope_qkv(qkv, cos, sin, batch, heads_q, heads_kv, layout=layout)
    return q, k, v


@rope_qkv.register_fake
def _(qkv, cos, sin, batch, heads_q, heads_kv, layout="bhsd"):
    s, d = cos.shape[0], 2 * cos.shape[1]
    shape = (lambda h: (batch, s, h, d)) if layout == "bshd" else (lambda h: (batch, h, s, d))
    return (qkv.new_empty(shape(heads_q)), qkv.new_empty(shape(heads_kv)),
            qkv.new_empty(shape(heads_kv)))


@torch.library.custom_op("kiln::swiglu", mutates_args=())
def swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up over rows of gate then up (kiln.swiglu)."""
    return kiln.swiglu(x)


@swiglu.register_fake
def _(x):
    return x.new_empty((x.shape[0], x.shape[1] // 2))


@torch.library.custom_op("kiln::heads_to_rows", mutates_args=())
def heads_to_rows(x: torch.Tensor) -> torch.Tensor:
    """[B, H, S, D] into [B, S, H, D] (kiln.heads_to_rows)."""
    return kiln.heads_to_rows(x)


@heads_to_rows.register_fake
def _(x):
    return x.new_empty((x.shape[0], x.shape[2], x.shape[1], x.shape[3]))


@torch.library.custom_op("kiln::gemm_fp8", mutates_args=())
def gemm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             bias: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None,
             activation: str = "", out_dtype: str = "") -> torch.Tensor:
    """act((a * scale_a) @ (b * scale_b) + bias) + residual of float8 a (M, K) and b (K, N), the
    scales tensorwise, rowwise or blockwise as kiln.gemm reads them; bf16 out by default."""
    return kiln.gemm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, residual=residual,
                     activation=activation or None, out_dtype=out_dtype or None)


@gemm_fp8.register_fake
def _(a, b, scale_a, scale_b, bias=None, residual=None, activation="", out_dtype=""):
    torch._check(a.dim() >= 1 and b.dim() == 2,
                 lambda: "kiln::gemm_fp8: a must be (..., K) and b a matrix (K, N)")
    torch._check(a.shape[-1] == b.shape[0], lambda: "kiln::gemm_fp8: a's columns must be b's rows")
    return a.new_empty(tuple(a.shape[:-1]) + (b.shape[1],), dtype=_TYPES[out_dtype or "bf16"])


def _check_quantizable(x: torch.Tensor, op: str, rows_fold: bool = False) -> None:
    if rows_fold:
        torch._check(x.dim() >= 1 and x.shape[-1] % 16 == 0,
                     lambda: f"kiln::{op}: x must be (..., K) with K a multiple of 16")
    else:
        torch._check(x.dim() == 2 and x.shape[1] % 16 == 0,
                     lambda: f"kiln::{op}: x must be (rows, K) with K a multiple of 16")
    torch._check(x.dtype == torch.bfloat16, lambda: f"kiln::{op}: x must be bf16")


@torch.library.custom_op("kiln::quantize_e4m3", mutates_args=())
def quantize_e4m3(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) bf16 to (q, scales): e4m3 with one f32 scale per 1 x 128 of a row, scales (...,
    ceil(K/128)) with the rows contiguous (kiln.quantize_e4m3)."""
    return kiln.quantize_e4m3(x)


@quantize_e4m3.register_fake
def _(x):
    _check_quantizable(x, "quantize_e4m3", rows_fold=True)
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m, kb = math.prod(lead), -(-k // 128)
    return (x.new_empty(lead + (k,), dtype=torch.float8_e4m3fn),
            x.new_empty((kb, m), dtype=torch.float32).t().reshape(lead + (kb,)))


@torch.library.custom_op("kiln::quantize_e4m3_blocks", mutates_args=())
def quantize_e4m3_blocks(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """A weight w (N, K) bf16 to (q, scales): e4m3 with one f32 scale per 128 x 128 block
    (kiln.quantize_e4m3_blocks)."""
    return kiln.quantize_e4m3_blocks(w)


@quantize_e4m3_blocks.register_fake
def _(w):
    _check_quantizable(w, "quantize_e4m3_blocks")
    n, k = w.shape
    return (w.new_empty((n, k), dtype=torch.float8_e4m3fn),
            w.new_empty((-(-n // 128), -(-k // 128)), dtype=torch.float32))


@torch.library.custom_op("kiln::quantize_e4m3_blocks_t", mutates_args=())
def quantize_e4m3_blocks_t(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                      torch.Tensor]:
    """quantize_e4m3_blocks with the transpose: (q, scales, q_t, scales_t), q_t (K, N) and
    scales_t (a copy of scales.T: a custom op's outputs may not alias); N a multiple of 16."""
    q, scales, q_t, scales_t = kiln.quantize_e4m3_blocks(w, transpose=True)
    return q, scales, q_t, scales_t.contiguous()


@quantize_e4m3_blocks_t.register_fake
def _(w):
    _check_quantizable(w, "quantize_e4m3_blocks_t")
    torch._check(w.shape[0] % 16 == 0, lambda: "kiln::quantize_e4m3_blocks_t: N must be a "
                 "multiple of 16")
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    return (w.new_empty((n, k), dtype=torch.float8_e4m3fn),
            w.new_empty((nb, kb), dtype=torch.float32),
            w.new_empty((k, n), dtype=torch.float8_e4m3fn),
            w.new_empty((kb, nb), dtype=torch.float32))


@torch.library.custom_op("kiln::grouped_gemm", mutates_args=())
def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor,
                 scale_x: Optional[torch.Tensor] = None,
                 scale_w: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Contiguous grouped GEMM: out (T, N) bf16, the rows of expert e (offsets[e-1] ..
    offsets[e]) x @ w[e].T (kiln.grouped_gemm); rows past offsets[-1] are zero. FP8 with
    scale_x and scale_w as kiln.grouped_gemm takes them."""
    out = x.new_zeros((x.shape[0], w.shape[1]), dtype=torch.bfloat16)
    return kiln.grouped_gemm(x, w, offsets, out=out, scale_x=scale_x, scale_w=scale_w)


@grouped_gemm.register_fake
def _(x, w, offsets, scale_x=None, scale_w=None):
    torch._check(x.dim() == 2 and w.dim() == 3 and x.shape[1] == w.shape[2],
                 lambda: "kiln::grouped_gemm: x must be (T, K) and w (E, N, K)")
    torch._check(offsets.dim() == 1 and offsets.shape[0] == w.shape[0],
                 lambda: "kiln::grouped_gemm: offsets must hold one end a group")
    return x.new_empty((x.shape[0], w.shape[1]), dtype=torch.bfloat16)


@torch.library.custom_op("kiln::grouped_gemm_masked", mutates_args=())
def grouped_gemm_masked(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor,
                        scale_x: Optional[torch.Tensor] = None,
                        scale_w: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Masked grouped GEMM: x (E, C, K), out (E, C, N) bf16, rows 0 .. counts[e] of block e
    x[e] @ w[e].T, the rest zero (kiln.grouped_gemm with counts)."""
    out = x.new_zeros((x.shape[0], x.shape[1], w.shape[1]), dtype=torch.bfloat16)
    return kiln.grouped_gemm(x, w, counts=counts, out=out, scale_x=scale_x, scale_w=scale_w)


@grouped_gemm_masked.register_fake
def _(x, w, counts, scale_x=None, scale_w=None):
    torch._check(x.dim() == 3 and w.dim() == 3 and x.shape[0] == w.shape[0] and
                 x.shape[2] == w.shape[2],
                 lambda: "kiln::grouped_gemm_masked: x must be (E, C, K) and w (E, N, K)")
    return x.new_empty((x.shape[0], x.shape[1], w.shape[1]), dtype=torch.bfloat16)

