"""kiln from Python: its kernels on torch CUDA tensors (launched on the caller's current stream,
no copies), or on the PTX emulator with NumPy arrays (f32 values, rounded to the kernel's 16-bit
type on the way in).

    import kiln, torch
    y = kiln.gemm(x, w.t(), bias=b, activation="gelu")      # x @ w.T + b, then GELU
    h = kiln.rms_norm(x, weight, eps=1e-5)
    k = kiln.load("build/bundles", "ops/saxpy")              # any bundle, your own kernels too
    k(x, y, 2.0, x.numel())

Every error is a kiln.Error carrying kiln's message, which names the DSL line where it can.
"""

from . import _kiln
from ._kiln import Error, bundle_dir, set_bundle_dir

__all__ = ["Error", "bundle_dir", "set_bundle_dir", "load", "gemm", "attention", "softmax",
           "rms_norm", "layer_norm"]

_TORCH_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32"}


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _stream(arrays):
    """The caller's current CUDA stream for the first torch CUDA tensor among `arrays`, else 0."""
    for x in arrays:
        if _is_torch(x) and x.is_cuda:
            import torch
            return torch.cuda.current_stream(x.device).cuda_stream
    return 0


def _empty(like, shape, dtype):
    """An uninitialised array beside `like`: a torch tensor of `dtype` ("bf16", "f16", "f32") on
    its device, or a NumPy f32 array (host arrays always hold f32)."""
    if _is_torch(like):
        import torch
        torch_type = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
        return torch.empty(shape, dtype=torch_type, device=like.device)
    import numpy
    return numpy.empty(shape, dtype=numpy.float32)


def _type_of(x):
    """A torch tensor's kiln type name; "bf16" for host arrays (what their f32 values become)."""
    if _is_torch(x):
        name = str(x.dtype)
        if name not in _TORCH_TYPES:
            raise Error(f"kiln takes bf16, f16 or f32 tensors, not {name}")
        return _TORCH_TYPES[name]
    return "bf16"


class _Loaded:
    """A bundle's kernel: called with its parameters in order (see .signature)."""

    def __init__(self, kernel):
        self._kernel = kernel

    def __call__(self, *args, grid=None, stream=None):
        if stream is None:
            stream = _stream(args)
        self._kernel(*args, grid=grid, stream=stream)

    def __getattr__(self, name):
        return getattr(self._kernel, name)

    def __repr__(self):
        return repr(self._kernel)


def load(bundle_dir, name):
    """The kernel `name` of the bundle directory `bundle_dir` (what `kiln bundle` or a build
    writes), as a callable. Its arguments are checked against the manifest's parameters; its grid
    is the kernel's rule unless grid=(x, y, z) is given."""
    return _Loaded(_kiln.Kernel(str(bundle_dir), name))


def softmax(x, *, out=None):
    """softmax over the last dimension."""
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._softmax(x, out, stream=_stream([x]))
    return out


def rms_norm(x, weight, eps=1e-6, *, out=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._rms_norm(x, weight, out, float(eps), stream=_stream([x]))
    return out


def layer_norm(x, weight, bias, eps=1e-5, *, out=None):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension."""
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._layer_norm(x, weight, bias, out, float(eps), stream=_stream([x]))
    return out


def gemm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None, bias=None,
         activation=None, residual=None):
    """out = act(alpha * a @ b + beta * c + bias) + residual, a (M, K), b (K, N).

    CUDA tensors: bf16 or f16 a and b in any row- or column-major layout (a linear layer's
    weight w (N, K) is b = w.t()); out, c, bias (N values) and residual of out_dtype (default:
    a's type; "f32" also). activation: "relu", "gelu" or "silu". Host arrays: f32, run on the
    emulator as bf16, out_dtype "bf16" (values rounded so, held in f32) or "f32".
    """
    in_type = _type_of(a)
    out_type = out_dtype or (_type_of(out) if out is not None and _is_torch(out) else in_type)
    out_type = _TORCH_TYPES.get(str(out_type), out_type)
    terms = []
    if c is not None or alpha != 1.0 or beta != 0.0:
        terms.append("scale")
    if bias is not None:
        terms.append("bias_col")
    if activation:
        terms.append(activation)
    if residual is not None:
        terms.append("residual")
    if out is None:
        out = _empty(a, (a.shape[0], b.shape[1]), out_type)
    _kiln._gemm(a, b, out, c, bias, residual, float(alpha), float(beta), ",".join(terms),
                in_type, out_type, stream=_stream([a]))
    return out


def _bhsd(x):
    """[B, S, H, D] as a contiguous [B, H, S, D] (a copy)."""
    if _is_torch(x):
        return x.transpose(1, 2).contiguous()
    import numpy
    return numpy.ascontiguousarray(x.transpose(0, 2, 1, 3))


def attention(q, k, v, *, causal=False, scale=None, layout="bhsd"):
    """FlashAttention forward: (o, lse) with o = softmax(scale * q k^T) v per head and lse the
    rows' log-sum-exp (natural log, f32, [B, Hq, S]).

    layout "bhsd": q [B, Hq, S, D], k and v [B, Hkv, Skv, D], contiguous; "bshd": [B, S, H, D]
    (copied to the other layout first; o comes back as a [B, S, Hq, D] view). Hq a multiple of Hkv
    (grouped-query heads: query head h reads KV head h // (Hq // Hkv)). D 64, 128 or 256. scale:
    1 / sqrt(D) unless given. causal: query i sees keys j <= i + Skv - S (bottom-right aligned,
    FlashAttention's convention; torch's is_causal is top-left, the same when S == Skv); a row
    that sees no key gets o = 0 and lse = -inf.
    """
    if layout not in ("bhsd", "bshd"):
        raise Error(f"kiln.attention: layout '{layout}': 'bhsd' or 'bshd'")
    if layout == "bshd":
        q, k, v = _bhsd(q), _bhsd(k), _bhsd(v)
    if len(q.shape) != 4:
        raise Error(f"kiln.attention: q must have rank 4, not {len(q.shape)}")
    o = _empty(q, tuple(q.shape), _type_of(q))
    lse = _empty(q, tuple(q.shape[:3]), "f32")
    _kiln._attention(q, k, v, o, lse, bool(causal), float(scale or 0.0), stream=_stream([q]))
    if layout == "bshd":
        o = o.transpose(1, 2) if _is_torch(o) else o.transpose(0, 2, 1, 3)
    return o, lse
