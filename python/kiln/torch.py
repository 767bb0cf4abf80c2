"""kiln's ops as PyTorch custom ops (torch.library), each with a fake implementation that gives
the output's shape and type, so torch.compile(fullgraph=True) traces a model that calls them
without graph breaks:

    import kiln.torch  # registers torch.ops.kiln.*
    y = torch.ops.kiln.rms_norm(x, w, 1e-5)

The ops take and return CUDA tensors and launch on the current stream. kiln::attention is
differentiable (its backward is kiln::attention_backward: dq, dk, dv; the gradient of lse is not
propagated); the others have no backward yet.
"""

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
    """act(a @ b + bias) + residual, a (M, K), b (K, N) (kiln.gemm)."""
    return kiln.gemm(a, b, bias=bias, residual=residual, activation=activation or None,
                     out_dtype=out_dtype or None)


@gemm.register_fake
def _(a, b, bias=None, residual=None, activation="", out_dtype=""):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "kiln::gemm: a and b must be matrices")
    torch._check(a.shape[1] == b.shape[0], lambda: "kiln::gemm: a's columns must be b's rows")
    n = b.shape[1] // 2 if activation == "swiglu" else b.shape[1]  # gate and up pair
    return a.new_empty((a.shape[0], n), dtype=_out_type(a, out_dtype))


@torch.library.custom_op("kiln::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension (kiln.softmax)."""
    return kiln.softmax(x)


@softmax.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("kiln::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (kiln.rms_norm)."""
    return kiln.rms_norm(x, weight, eps)


@rms_norm.register_fake
def _(x, weight, eps):
    torch._check(weight.shape == (x.shape[-1],), lambda: "kiln::rms_norm: one weight a column")
    return torch.empty_like(x)


@torch.library.custom_op("kiln::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (kiln.layer_norm)."""
    return kiln.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    torch._check(weight.shape == (x.shape[-1],), lambda: "kiln::layer_norm: one weight a column")
    return torch.empty_like(x)


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
                       scale: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) over [B, H, S, D] contiguous tensors (kiln.attention_backward)."""
    return kiln.attention_backward(q, k, v, o, lse, d_o.contiguous(), causal=causal,
                                   scale=scale or None)


@attention_backward.register_fake
def _(q, k, v, o, lse, d_o, causal=False, scale=0.0):
    torch._check(d_o.shape == o.shape, lambda: "kiln::attention_backward: d_o shaped as o")
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, layout = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.layout = causal, scale, layout


def _attention_grad(ctx, d_o, d_lse):
    q, k, v, o, lse = ctx.saved_tensors
    if ctx.layout == "bshd":  # the backward reads [B, H, S, D]
        t = lambda x: x.transpose(1, 2).contiguous()
        dq, dk, dv = attention_backward(t(q), t(k), t(v), t(o), lse, t(d_o), ctx.causal, ctx.scale)
        dq, dk, dv = (x.transpose(1, 2) for x in (dq, dk, dv))
    else:
        dq, dk, dv = attention_backward(q.contiguous(), k.contiguous(), v.contiguous(), o, lse,
                                        d_o, ctx.causal, ctx.scale)
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
