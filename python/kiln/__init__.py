"""kiln from Python: its kernels on torch CUDA tensors (launched on the caller's current stream,
no copies), or on the PTX emulator with NumPy arrays (f32 values, rounded to the kernel's 16-bit
type on the way in; the row ops run their f32 kernels).

    import kiln, torch
    y = kiln.gemm(x, w.t(), bias=b, activation="gelu")      # x @ w.T + b, then GELU
    h = kiln.rms_norm(x, weight, eps=1e-5)
    k = kiln.load("build/bundles", "ops/saxpy")              # any bundle, your own kernels too
    k(x, y, 2.0, x.numel())

kiln's errors are kiln.Error, carrying kiln's message, which names the DSL line where it can
(a call with the wrong number or names of arguments is Python's TypeError).
"""

import math as _math
import os as _os
import sys as _sys
import warnings as _warnings

from . import _kiln
from ._kiln import Error, bundle_dir


class PartlyWrittenWarning(UserWarning):
    """A kernel of `kiln.load` run on host arrays (the emulator) wrote some of an array's bytes
    but not all: a grid rule that launches too few CTAs leaves an output so. A kernel that writes
    part of an array by design says so when it is built (`k.Attribute("writes_part", "name,..")`,
    as ops/paged_append does for its caches); a caller may also filter the warning
    (`warnings.simplefilter("ignore", kiln.PartlyWrittenWarning)`)."""


def set_bundle_dir(path):
    """The directory the ops read their kernels from (a str or a path, not empty; a relative one
    is taken from the working directory now, so that a later chdir leaves it in place)."""
    if not isinstance(path, (str, _os.PathLike)):
        raise Error(f"kiln.set_bundle_dir: path must be a str or a path, not {type(path).__name__}")
    path = _os.fspath(path)
    # (the bindings would read "" as "no directory set": $KILN_BUNDLE_DIR or the default, unasked)
    if not path:
        raise Error("kiln.set_bundle_dir: path is empty; name a bundle directory")
    _kiln.set_bundle_dir(_os.path.abspath(path))


# An installed kiln (<prefix>/lib/python/kiln) reads the bundles installed beside it
# (<prefix>/share/kiln/bundles) unless $KILN_BUNDLE_DIR names others.
_INSTALLED_BUNDLES = _os.path.join(_os.path.dirname(__file__), "..", "..", "..", "share", "kiln",
                                   "bundles")
if not _os.environ.get("KILN_BUNDLE_DIR") and _os.path.isdir(_INSTALLED_BUNDLES):
    set_bundle_dir(_os.path.normpath(_INSTALLED_BUNDLES))
elif _os.environ.get("KILN_BUNDLE_DIR") and not _os.path.isabs(_os.environ["KILN_BUNDLE_DIR"]):
    set_bundle_dir(_os.environ["KILN_BUNDLE_DIR"])  # (relative: from the directory at import)

__all__ = ["Error", "PartlyWrittenWarning", "bundle_dir", "set_bundle_dir", "load", "gemm", "grouped_gemm", "quantize_e4m3", "quantize_e4m3_blocks",
           "swiglu_weights", "rope_order", "rope_weights", "rope_angles", "attention",
           "decode_attention", "paged_append", "attention_backward", "varlen_attention",
           "varlen_attention_backward",
           "softmax", "rms_norm", "layer_norm", "rope_qkv", "swiglu", "heads_to_rows"]

_TORCH_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32"}


# The types of the torch.Tensor objects seen so far (torch.Tensor, nn.Parameter, a user's
# subclass): the checks below ask each argument what it is several times a call, and a set's
# lookup is what a small call can afford (docs/perf/2026-12-04-repeated-calls-replayed.md).
_TENSOR_TYPES = set()


def _torch_tensor(x):
    """Whether x is a torch.Tensor (a subclass too); torch not imported yet: nothing is one."""
    t = type(x)
    if t in _TENSOR_TYPES:
        return True
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        _TENSOR_TYPES.add(t)
        return True
    return False


def _is_torch(x):
    return type(x) in _TENSOR_TYPES or type(x).__module__.startswith("torch")


def _is_numpy(x):
    """A NumPy array, its subclasses too (numpy.ma.MaskedArray, a user's); NumPy not imported
    yet: no array can be one."""
    if type(x) in _TENSOR_TYPES:
        return False
    numpy = _sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.ndarray)


def _stream(arrays):
    """The caller's current CUDA stream for the first torch CUDA tensor among `arrays`, else 0
    (torch's raw stream handle: building a torch.cuda.Stream costs more than a small kiln call's
    own work, docs/perf/2026-11-30-python-call-host-cost-2.md)."""
    for x in arrays:
        if _torch_tensor(x) and x.is_cuda:
            raw = getattr(_sys.modules["torch"]._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:
                return raw(x.get_device())
            return _sys.modules["torch"].cuda.current_stream(x.device).cuda_stream
    return 0


_DL_TYPES = None  # {torch dtype: (DLPack type code, bits)}, made at the first torch CUDA tensor


def _on_host(x):
    """Whether a DLPack producer's memory is the host's (kDLCPU, or no device said)."""
    device = getattr(x, "__dlpack_device__", None)
    return device is None or device()[0] == 1


def _capsule_of(x):
    """The capsule a DLPack producer hands out, checked unused. The bindings mark a capsule they
    are given as used, as the protocol asks; one they got by calling __dlpack__ themselves they
    take as their own alone, so a producer that hands out one capsule twice had its tensor
    freed twice (the process died)."""
    import ctypes
    try:
        try:  # a versioned capsule first (it carries the read-only flag), as the bindings ask
            capsule = x.__dlpack__(max_version=(1, 1))
        except TypeError:  # a producer of DLPack before 1.0
            capsule = x.__dlpack__()
    except (BufferError, ValueError, RuntimeError) as e:
        raise Error(f"a {type(x).__name__} could not be taken through DLPack: {e}") from None
    valid = ctypes.pythonapi.PyCapsule_IsValid
    valid.argtypes, valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
    if not (valid(capsule, b"dltensor") or valid(capsule, b"dltensor_versioned")):
        raise Error(f"a {type(x).__name__}'s __dlpack__ handed out a capsule that is already used "
                    "(DLPack asks for a new one each call)")
    return capsule


def _r(x, writes=False):
    """A torch CUDA tensor of a type kiln reads as a DLPack capsule made from its fields
    (_kiln._cuda_ref): torch's own __dlpack__ costs several times more. A read-only NumPy array
    an op only reads (not `writes`) as a copy: the bindings take writable arrays alone. Anything
    else (NumPy arrays, CPU tensors, other types, None) as it is, for the bindings' checks; another
    DLPack producer's host memory as NumPy takes it, its device memory as the capsule it hands out
    (_capsule_of)."""
    global _DL_TYPES
    if not (_torch_tensor(x) and x.is_cuda):
        if not writes and _is_numpy(x) and not x.flags.writeable:
            import numpy
            if any(st == 0 and n > 1 for st, n in zip(x.strides, x.shape)):  # a broadcast view:
                # copied row-major (order "K" keeps its zero strides' order, not packed), and
                # refused before its copy where the copy alone would pass the emulator's bound
                _require(x.size <= 2**26,
                         lambda: f"kiln: a broadcast array of shape {tuple(x.shape)} has "
                                 f"{x.size:.4g} elements as a copy; the emulator takes arrays of "
                                 "up to 2^26 (run it on a GPU)")
                return numpy.array(x, order="C")
            return numpy.array(x)  # (a base ndarray: a subclass's copy may be read-only too)
        if not _is_numpy(x) and not _is_torch(x) and hasattr(x, "__dlpack__"):
            if _on_host(x):  # as NumPy takes it (the protocol's checks), then as a NumPy array
                x = _host_numpy("kiln", f"a {type(x).__name__}", x)
                if writes:
                    _require(x.flags.writeable,
                             "kiln: an array given through DLPack is read-only; kiln writes it")
                    return x
                return _r(x)
            return _capsule_of(x)
        return x
    if _DL_TYPES is None:
        import torch
        _DL_TYPES = {torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.float32: (2, 32),
                     torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
                     torch.uint8: (1, 8)}
    code = _DL_TYPES.get(x.dtype)
    if code is None:
        return x
    return _kiln._cuda_ref(x.data_ptr(), x.shape, x.stride(), code[0], code[1], x.get_device())


def _empty(like, shape, dtype):
    """An uninitialised array beside `like`: a torch tensor of `dtype` ("bf16", "f16", "f32") on
    its device, or a NumPy f32 array (host arrays always hold f32)."""
    if _is_torch(like):
        import torch
        torch_type = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
        return torch.empty(shape, dtype=torch_type, device=like.device)
    import numpy
    return numpy.empty(shape, dtype=numpy.float32)


def _out_type(dtype):
    """kiln.gemm's out_dtype as a kiln type name ("bf16", "f16", "f32"): those names, or torch's or
    NumPy's dtypes of them; None for None."""
    if dtype is None:
        return None
    name = _TORCH_TYPES.get(str(dtype))
    if name is None and not isinstance(dtype, str):
        try:
            import numpy
            name = {"float16": "f16", "float32": "f32"}.get(numpy.dtype(dtype).name)
        except TypeError:
            name = None
    name = name or dtype
    if name not in ("bf16", "f16", "f32"):
        raise Error(f"kiln.gemm: out_dtype {dtype!r}: 'bf16', 'f16' or 'f32' (or torch's dtypes)")
    return name


def _writable_out(call, out):
    """kiln.Error where an `out` given by the caller is no array, or a read-only host one (kiln
    writes it)."""
    _optional_arrays(call, out=out)
    host = out if out is None or _is_numpy(out) or _is_torch(out) or not _on_host(out) else \
        _host_numpy(call, "out", out)  # (another DLPack producer's host memory, as NumPy sees it)
    if host is not None and _is_numpy(host) and not host.flags.writeable:
        raise Error(f"{call}: out is read-only; give a writable array (or none: kiln makes one)")


def _numbers_kiln_reads(dtype, complex_ok=False):
    """Whether a NumPy dtype holds what a kernel parameter can read: real numbers (booleans,
    integers, floats) of up to 64 bits, and (complex_ok) complex ones of up to 128, which the
    bindings then name better than this check could."""
    return (dtype.kind in "biuf" and dtype.itemsize <= 8 or
            complex_ok and dtype.kind == "c" and dtype.itemsize <= 16)


def _require_arrays(call, *, numpy_or_torch=False, **arrays):
    """kiln.Error unless each of `arrays` is an array (anything with __dlpack__: a torch tensor,
    a NumPy array); with numpy_or_torch, one of those two alone (the calls that read an array's
    strides and type through NumPy or torch)."""
    for name, x in arrays.items():
        if _torch_tensor(x):  # (an array, with a shape; neither NumPy's types nor its byte order)
            continue
        if hasattr(x, "__dlpack__") and not hasattr(x, "shape"):
            raise Error(f"{call}: {name} (a {type(x).__name__}) has __dlpack__ but no .shape, "
                        f"which kiln reads: numpy.from_dlpack({name}) or "
                        f"torch.from_dlpack({name}) first")
        if not hasattr(x, "__dlpack__"):
            raise Error(f"{call}: {name} must be a torch tensor or a NumPy array, not "
                        f"{type(x).__name__}")
        if numpy_or_torch and not _is_numpy(x) and not _is_torch(x):
            raise Error(f"{call}: {name} is a {type(x).__name__}; this call takes NumPy arrays or "
                        f"torch tensors (numpy.from_dlpack({name}) first)")
        dtype = getattr(x, "dtype", None)
        if _is_numpy(x) and dtype is not None:
            if not _numbers_kiln_reads(dtype):
                raise Error(f"{call}: {name} has dtype {dtype}; kiln takes arrays of real "
                            "numbers (integers, floats) of up to 64 bits (float32 on the host)")
            if not dtype.isnative:
                raise Error(f"{call}: {name} is in the other byte order ({dtype.str}); "
                            f"{name}.astype({name}.dtype.newbyteorder('=')) is native")


def _emulator_sized(call, **arrays):
    """kiln.Error for a host array past the emulator's 2^26 elements, where the call's kernels
    read every element (a GEMM's operands, a row op's rows): refused before any copy (a broadcast
    view would be copied whole first), as the bindings would refuse it after."""
    for name, x in arrays.items():
        if _is_numpy(x) and x.size > 2**26:
            raise Error(f"{call}: {name} of shape {tuple(x.shape)} has {x.size:.4g} elements; "
                        f"the emulator takes arrays of up to 2^26 (run it on a GPU)")


def _optional_arrays(call, *, numpy_or_torch=False, **arrays):
    """_require_arrays for those of `arrays` that are not None."""
    _require_arrays(call, numpy_or_torch=numpy_or_torch,
                    **{name: x for name, x in arrays.items() if x is not None})


def _scalar_array(value, kinds):
    """A 0-d NumPy array or torch tensor whose dtype is one of `kinds` ("b" bool, "i" integer,
    "f" floating): taken as the number it holds."""
    if getattr(value, "ndim", None) != 0 or isinstance(value, (str, bytes)):
        return False
    dtype = getattr(value, "dtype", None)
    if _is_numpy(value) or type(value).__module__ == "numpy":  # (an array, or a NumPy scalar)
        return dtype is not None and dtype.kind in kinds.replace("i", "iu")
    name = str(dtype)  # torch: torch.bool, torch.int64, torch.float32, ...
    return ("b" in kinds and name == "torch.bool") or (
        "i" in kinds and "int" in name) or ("f" in kinds and ("float" in name or "half" in name))


def _number(call, name, value):
    """value as a float: a Python or NumPy real number (or a 0-d array of one), not a bool or a
    string."""
    import numbers
    _require(isinstance(value, numbers.Real) and not isinstance(value, bool) or
             _scalar_array(value, "if"),
             lambda: f"{call}: {name} must be a number, not {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # (an int past a double's range: 10**400)
        digits = int(abs(int(value)).bit_length() * 0.30103) + 1  # (str() refuses 4300 digits)
        raise Error(f"{call}: {name}, an integer of about {digits} digits, is past a double's "
                    "range (and f32's)") from None


def _integer(call, name, value):
    """value as an int: a Python or NumPy integer (or a 0-d array of one), not a bool, a float
    (48.7 is no count of columns) or a string."""
    import numbers
    _require(isinstance(value, numbers.Integral) and not isinstance(value, bool) or
             _scalar_array(value, "i"),
             lambda: f"{call}: {name} must be an integer, not {type(value).__name__} {value!r}")
    return int(value)


def _flag(call, name, value):
    """value as a bool: True, False (or NumPy's, a 0-d bool array, or 0 and 1), not a string that
    reads as true."""
    import numbers
    _require(isinstance(value, numbers.Integral) and value in (0, 1) or
             type(value).__name__ in ("bool", "bool_") or _scalar_array(value, "b"),
             lambda: f"{call}: {name} must be True or False, not {value!r}")
    return bool(value)


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

    def __call__(self, *args, grid=None, stream=None, seed=None):
        name = self._kernel.name if hasattr(self._kernel, "name") else "kiln.load"
        if seed is not None:
            import numbers
            _require(isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and
                     0 <= seed < 2**64,
                     lambda: f"{name}: seed={seed!r}: the emulator's order of threads, an integer "
                             "0 to 2^64 - 1 (0: threads in index order; 1 when not given)")
            seed = int(seed)
        if grid is not None:
            import numbers
            _require(isinstance(grid, (tuple, list)) and len(grid) == 3 and
                     all(isinstance(g, numbers.Integral) and not isinstance(g, bool) and
                         0 <= g < (2**31 if i == 0 else 65536) for i, g in enumerate(grid)),
                     lambda: f"{name}: grid={grid!r}: (x, y, z), integers: x 0 to 2^31 - 1, y and "
                             "z 0 to 65535 (a 0: nothing to launch)")
            grid = tuple(int(g) for g in grid)
        if stream is None:
            stream = _stream(args)
        else:  # a raw CUstream handle, or a stream object that holds one (torch.cuda.Stream)
            import numbers
            stream = getattr(stream, "cuda_stream", stream)
            _require(isinstance(stream, numbers.Integral) and not isinstance(stream, bool) and
                     0 <= stream < 2**64,
                     lambda: f"{name}: stream={stream!r}: a CUDA stream (a torch.cuda.Stream, or "
                             "its raw handle as an int), or None for the arrays' current one")
        for i, x in enumerate(args):  # types DLPack cannot carry: the bindings could not say why
            dtype = getattr(x, "dtype", None) if _is_numpy(x) else None
            _require(dtype is None or _numbers_kiln_reads(dtype, complex_ok=True),
                     lambda: f"{name}: argument {i} has dtype {dtype}, which no kernel parameter "
                             "reads (arrays of numbers of up to 64 bits)")
            _require(dtype is None or dtype.isnative,
                     lambda: f"{name}: argument {i} is in the other byte order ({dtype.str}); "
                             f"x.astype(x.dtype.newbyteorder('=')) is native")
        partly_written = self._kernel(*[_r(x, writes=True) for x in args], grid=grid,
                                      stream=stream, seed=seed)  # (any may be written)
        for message in partly_written:  # (host arrays: the emulator's word)
            _warnings.warn(message, PartlyWrittenWarning, stacklevel=2)

    def __getattr__(self, name):
        return getattr(self._kernel, name)

    def __repr__(self):
        return repr(self._kernel)


def load(bundle_dir, name):
    """The kernel `name` of the bundle directory `bundle_dir` (what `kiln bundle` or a build
    writes), as a callable. Its arguments are checked against the manifest's parameters; its grid
    is the kernel's rule unless grid=(x, y, z) is given. On the emulator (host arrays), seed=N
    runs its threads in seed N's order (1 when not given): a kernel that races or reads what no
    one wrote may pass under one order and fail under another, so try several."""
    _require(isinstance(name, str) and name != "",
             lambda: "kiln.load: name must be a kernel's name (a non-empty str such as "
                     f"'ops/saxpy'), not {type(name).__name__} {name!r}")
    _require(isinstance(bundle_dir, (str, bytes, _os.PathLike)),
             lambda: "kiln.load: bundle_dir must be a directory's path (a str or a path), not "
                     f"{type(bundle_dir).__name__} {bundle_dir!r}")
    bundle_dir = _os.fsdecode(bundle_dir)
    _require(_os.path.isdir(str(bundle_dir)),
             f"kiln.load: no directory {str(bundle_dir)!r} (a bundle directory: for a kernel of "
             f"kiln's own, `kiln bundle --dir DIR {name}` writes one; for your own kernel, "
             f"rt::WriteBundle from the program that builds it: docs/BUNDLES.md)")
    return _Loaded(_kiln.Kernel(str(bundle_dir), name))


def _laid_out_as(x, out):
    """A CUDA tensor x of out's shape with out's strides: itself, or a copy laid out so."""
    if x is None or not _is_torch(x) or not _is_torch(out) or tuple(x.shape) != tuple(out.shape):
        return x  # (shapes and the rest: the bindings' checks)
    if x.stride() == out.stride():
        return x
    import torch
    y = torch.empty_strided(tuple(out.shape), out.stride(), dtype=x.dtype, device=x.device)
    return y.copy_(x)


def _row_or_column_major(x):
    """A 2-D torch tensor as it is where its rows or its columns are packed, else a packed copy;
    anything else as it is (host arrays are packed by the callers)."""
    if not _is_torch(x) or x.dim() != 2:
        return x
    rows, cols = x.shape
    if x.stride(1) == 1 or x.stride(0) == 1 or rows == 1 or cols == 1:
        return x
    return x.contiguous()


def _packed(x):
    """x row-major and packed: itself, or a copy (the row ops read rows of packed elements; a
    view in another order, a transpose or a slice with a step, is copied first, as torch's ops
    take any view). Anything not an array as it is, for the bindings' checks."""
    if _is_torch(x):
        return x if x.is_contiguous() else x.contiguous()
    if _is_numpy(x) and not x.flags.c_contiguous:
        import numpy
        return numpy.ascontiguousarray(x)
    return x


def _host_numpy(call, name, x):
    """A host array as NumPy sees it: NumPy's own, or another `__dlpack__` producer's through
    numpy.from_dlpack (which refuses device memory)."""
    import numpy
    if _is_numpy(x):
        return x
    try:
        return numpy.from_dlpack(x)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        raise Error(f"{call}: {name} is not readable on the host through DLPack ({e})") from None


def _host_f16(x):
    """A NumPy float16 array: run as the f16 kernels would take it (GEMMs), or in f32 (rows)."""
    return _is_numpy(x) and str(x.dtype) == "float16"


def _as_f32(x):
    """A host array as float32 (float16 values are exact there); None stays None."""
    if x is None or not _host_f16(x):
        return x
    import numpy
    return numpy.asarray(x, numpy.float32)


def _host_out(call, out, dtype, why):
    """kiln.Error unless `out` is None or a writable NumPy array of `dtype` (`why`: what says
    so)."""
    if out is None:
        return
    _writable_out(call, out)
    _require_arrays(call, out=out)
    _require(_is_numpy(out) and str(out.dtype) == dtype,
             lambda: f"{call}: out must be a {dtype} host array ({why}), not {out.dtype}")


def _f16_result(call, result, out, dtype="float16", why="as x is"):
    """A float32 host result of float16 inputs, back as `dtype` (into `out` where given: a
    writable array of that type and the result's shape, as the float32 path requires its out to
    be float32: any other type would take the values cast, an int out zeros)."""
    if out is None:
        return result.astype(dtype, copy=False)
    _host_out(call, out, dtype, why)
    _require(tuple(out.shape) == tuple(result.shape),
             lambda: f"{call}: out has shape {tuple(out.shape)}, not {tuple(result.shape)}")
    out[...] = result
    return out


def _filled(like, n, value):
    """n copies of value beside `like` (an omitted norm weight or bias), of like's type."""
    out = _empty(like, (n,), _type_of(like))
    if _is_torch(out):
        return out.fill_(value)
    out.fill(value)
    return out


def softmax(x, dim=-1, *, out=None):
    """softmax over dimension `dim` (the last by default). x of any strides (copied packed first
    if it is not); out, where given, of x's shape (row-major and packed where dim is the last)."""
    _require_arrays("kiln.softmax", x=x)
    _emulator_sized("kiln.softmax", x=x)
    _writable_out("kiln.softmax", out)
    if _host_f16(x):  # computed in f32 on the emulator, returned as float16
        _host_out("kiln.softmax", out, "float16", "as x is")
        return _f16_result("kiln.softmax", softmax(_as_f32(x), dim), out)
    rank = len(x.shape)
    import numbers
    _require(isinstance(dim, numbers.Integral) and not isinstance(dim, bool) and
             -max(rank, 1) <= dim < max(rank, 1),
             lambda: f"kiln.softmax: dim {dim!r} is not a dimension of x {tuple(x.shape)}")
    if rank > 1 and dim % rank != rank - 1:  # another dimension: made the last, and back
        dim = int(dim)
        _optional_arrays("kiln.softmax", out=out)
        _require(out is None or tuple(out.shape) == tuple(x.shape),
                 lambda: f"kiln.softmax: out has shape {tuple(out.shape)}, x {tuple(x.shape)}")
        _require(out is None or str(out.dtype) == str(x.dtype),
                 lambda: f"kiln.softmax: out must be {x.dtype} as x is, not {out.dtype}")
        if _is_torch(x):
            y = softmax(x.movedim(dim, -1)).movedim(-1, dim)
        else:
            import numpy
            y = numpy.moveaxis(softmax(numpy.moveaxis(x, dim, -1)), -1, dim)
        if out is None:
            return y
        if _is_torch(out):
            return out.copy_(y)
        out[...] = y
        return out
    x = _packed(x)
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._softmax(_r(x), _r(out), stream=_stream([x]))
    return out


def _eps(call, eps):
    """eps as a number: finite and at least 0 (a negative one makes a row's root NaN), and one the
    kernels' f32 holds (past 3.4e38 it is inf, every row 0; a tiny one is 0, not what was given)."""
    eps = _number(call, "eps", eps)
    _require(_math.isfinite(eps) and eps >= 0,
             lambda: f"{call}: eps must be a finite number >= 0, not {eps}")
    return _in_f32(call, "eps", eps)


def rms_norm(x, weight=None, eps=1e-6, *, out=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (strides as softmax's; no
    weight: ones)."""
    _require_arrays("kiln.rms_norm", x=x)
    _emulator_sized("kiln.rms_norm", x=x)
    _require(len(x.shape) >= 1, "kiln.rms_norm: x must have at least one dimension")
    eps = _eps("kiln.rms_norm", eps)
    if _host_f16(x):  # computed in f32 on the emulator, returned as float16
        _host_out("kiln.rms_norm", out, "float16", "as x is")
        return _f16_result("kiln.rms_norm", rms_norm(_as_f32(x), _as_f32(weight), eps), out)
    if weight is None:
        weight = _filled(x, x.shape[-1], 1.0)
    _require_arrays("kiln.rms_norm", weight=weight)
    _writable_out("kiln.rms_norm", out)
    weight = _as_f32(weight)  # (host weights of either float type read as f32)
    x, weight = _packed(x), _packed(weight)
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._rms_norm(_r(x), _r(weight), _r(out), float(eps), stream=_stream([x]))
    return out


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, out=None):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (strides as
    softmax's; no weight: ones, no bias: zeros)."""
    _require_arrays("kiln.layer_norm", x=x)
    _emulator_sized("kiln.layer_norm", x=x)
    _require(len(x.shape) >= 1, "kiln.layer_norm: x must have at least one dimension")
    eps = _eps("kiln.layer_norm", eps)
    if _host_f16(x):  # computed in f32 on the emulator, returned as float16
        _host_out("kiln.layer_norm", out, "float16", "as x is")
        return _f16_result("kiln.layer_norm",
                           layer_norm(_as_f32(x), _as_f32(weight), _as_f32(bias), eps), out)
    weight = _filled(x, x.shape[-1], 1.0) if weight is None else weight
    bias = _filled(x, x.shape[-1], 0.0) if bias is None else bias
    _require_arrays("kiln.layer_norm", weight=weight, bias=bias)
    _writable_out("kiln.layer_norm", out)
    weight, bias = _as_f32(weight), _as_f32(bias)  # (host weights of either float type as f32)
    x, weight, bias = _packed(x), _packed(weight), _packed(bias)
    out = _empty(x, tuple(x.shape), _type_of(x)) if out is None else out
    _kiln._layer_norm(_r(x), _r(weight), _r(bias), _r(out), float(eps), stream=_stream([x]))
    return out


def gemm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=None, c=None, bias=None,
         activation=None, residual=None, scale_a=None, scale_b=None, fp8_types=None, rope=None):
    """out = act(alpha * a @ b + beta * c + bias) + residual, a (M, K), b (K, N). beta is 1 where
    c is given (torch.addmm's default), else 0; a beta other than 0 needs c; with beta 0, c is not
    read. a may also be (..., K), a linear layer's input as torch.matmul takes it: its leading
    dimensions fold into M (with out's, c's, the residual's and a's row scales'), out is (..., N).

    8-bit inputs: float8_e4m3fn (or float8_e5m2, e.g. a gradient; either or both) tensors a
    (row-major) and b (column-major: b = w.t() of an (N, K)
    weight), or uint8 host arrays of their bytes (run on the emulator; e4m3 unless fp8_types, a
    pair such as ("e5m2", "e4m3"), says a's and b's types), with f32 scales; out =
    (a * scale_a) @ (b * scale_b) through the same epilogue (but swiglu), bf16 by default
    (out_dtype "f16", "f32"); fused terms need their kernel variant bundled (16-bit inputs
    run others as a pass after the product, docs/PYTHON.md). Bundled: e4m3 by e4m3 under every
    scaling, e5m2 by e4m3 (either way round) tensorwise or rowwise; e5m2 by e5m2, or e5m2
    blockwise, needs its kernel written with `kiln bundle` (the error names the command). The
    scales' shapes say how they apply: one value each (tensorwise); (M,) or (M, 1) and (N,) or
    (1, N) (rowwise); (M, ceil(K/128)) and (ceil(N/128), ceil(K/128)) (blockwise: a per 1x128, the
    weight per 128x128, as DeepGEMM scales them), in any strides on the GPU.

    CUDA tensors: bf16 or f16 a and b in any row- or column-major layout (a linear layer's
    weight w (N, K) is b = w.t()); out, c, bias (N values) and residual of out_dtype (default:
    a's type; "f32" also). activation: "relu", "gelu" (the tanh form, torch's
    gelu(approximate="tanh")) or "silu". Host arrays: f32 in any order
    (out packed), run on the emulator as bf16, out_dtype "bf16" (values rounded so, held in f32),
    "f16" (a float16 array) or "f32"; or float16 ones, run as f16, out float16 (float32 for
    out_dtype "bf16" or "f32"; an out given of that type, c, bias and residual float16 or
    float32).

    activation="swiglu" (alone) fuses a gate/up projection: out = silu(gate) * up, (M, N/2)
    row-major, where b's columns hold gate and up interleaved as swiglu_weights puts them. It and
    rope store the inputs' type alone (out_dtype "f32" is not bundled: `kiln bundle` writes it).

    rope=(angles, rows, dim) (alone; rows and dim integers) fuses RoPE into a QKV projection: out
    (M, N) row-major, its first `rows` columns (the query and key heads, `dim` columns each)
    turned as Llama's rotate-half RoPE turns them at position m % P for row m, by the angles of
    rope_angles(cos, sin) [P, dim / 2] (cos and sin as rope_qkv takes them, rounded to bf16 as a
    bf16 model rounds them); the columns from `rows` on are stored as they are. b's columns (the
    weight's rows) must hold each head's features in rope_order(dim), as rope_weights puts them;
    out's q and k columns are then in that order too. Attention is the same in any order that q
    and k share; out[:, h * dim + r] holds feature rope_order(dim)[r] of head h.
    """
    _require_arrays("kiln.gemm", numpy_or_torch=True, a=a, b=b)
    _emulator_sized("kiln.gemm", a=a, b=b)
    _optional_arrays("kiln.gemm", numpy_or_torch=True, out=out, c=c, bias=bias,
                     residual=residual)
    _writable_out("kiln.gemm", out)
    alpha = _in_f32("kiln.gemm", "alpha", _number("kiln.gemm", "alpha", alpha))
    beta = beta if beta is None else _in_f32("kiln.gemm", "beta", _number("kiln.gemm", "beta", beta))
    if len(a.shape) == 1 or len(a.shape) > 2:
        _require(len(b.shape) == 2,
                 lambda: f"kiln.gemm: b (K, N) must have rank 2, not shape {tuple(b.shape)}")
        _require(len(a.shape) == 0 or a.shape[-1] == b.shape[0],
                 lambda: f"kiln.gemm: a {tuple(a.shape)} and b {tuple(b.shape)} do not multiply "
                         "(a's last dimension must be b's rows)")
        return _gemm_folded(a, b, out, dict(
            out_dtype=out_dtype, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation,
            residual=residual, scale_a=scale_a, scale_b=scale_b, fp8_types=fp8_types, rope=rope))
    _require(len(a.shape) == 2 and len(b.shape) == 2,
             lambda: f"kiln.gemm: a (M, K) and b (K, N) must have rank 2, not shapes "
                     f"{tuple(a.shape)} and {tuple(b.shape)}")
    _require(not (a.shape[1] == 0 and b.shape[0] == 0),
             lambda: f"kiln.gemm: K = 0 (a {tuple(a.shape)}, b {tuple(b.shape)}): the kernels "
                     "take K >= 1 (with K >= 1, an M or N of 0 returns an empty result)")
    _require(activation is None or activation in ("relu", "gelu", "silu", "swiglu"),
             lambda: f"kiln.gemm: activation {activation!r}: 'relu', 'gelu', 'silu' or 'swiglu'")
    if beta is None:
        beta = 0.0 if c is None else 1.0
    _require(c is not None or beta == 0.0,
             lambda: f"kiln.gemm: beta={beta} scales c, and no c was given (pass c=, or leave "
                     "beta out)")
    if beta == 0.0 and c is not None:
        # Not read at all (torch.addmm's beta=0: a NaN or inf in c does not reach out), but its
        # shape checked as where it is read.
        _require(tuple(c.shape) == (a.shape[0], b.shape[1]),
                 lambda: f"kiln.gemm: c must be the product's shape {(a.shape[0], b.shape[1])}, "
                         f"not {tuple(c.shape)} (beta=0 leaves it unread, not unchecked)")
        c = None
    terms = []
    if c is not None or alpha != 1.0 or beta != 0.0:
        terms.append("scale")
    if bias is not None:
        terms.append("bias_col")
    if activation:
        terms.append(activation)
    if residual is not None:
        terms.append("residual")
    _require(activation != "swiglu" or terms == ["swiglu"],
             lambda: "kiln.gemm: activation='swiglu' is fused alone: no c, alpha, beta, bias or "
                     f"residual with it (given: {_given(terms, activation, 'swiglu')})")
    rope_args = {}
    if rope is not None:
        _require(isinstance(rope, (tuple, list)) and len(rope) == 3,
                 "kiln.gemm: rope=(angles, rows, dim): kiln.rope_angles(cos, sin), the heads' "
                 "columns turned, a head's columns")
        terms.append("rope")
        rope_args = dict(rope_angles=rope[0],
                         rope_rows=_integer("kiln.gemm", "rope's rows (rope=(angles, rows, dim))",
                                            rope[1]),
                         rope_dim=_integer("kiln.gemm", "rope's dim (rope=(angles, rows, dim))",
                                           rope[2]))
        _require(terms == ["rope"], lambda: "kiln.gemm: rope is fused alone: no c, alpha, beta, "
                 f"bias, activation or residual with it (given: "
                 f"{_given(terms, activation, 'rope')})")
    _require(not (str(getattr(a, "dtype", "")) == "uint8" and scale_a is None and scale_b is None),
             "kiln.gemm: uint8 a and b are 8-bit inputs (e4m3 bytes) only with scale_a and scale_b")
    if scale_a is not None or scale_b is not None or _FP8_TYPES.get(str(getattr(a, "dtype", ""))):
        _require(rope is None, "kiln.gemm: rope is fused for 16-bit inputs")
        return _gemm_fp8(a, b, out, out_dtype, scale_a, scale_b, c, bias, residual, alpha, beta,
                         terms, fp8_types)
    _require(fp8_types is None, lambda: "kiln.gemm: fp8_types names the types of 8-bit inputs; "
             f"a and b are {getattr(a, 'dtype', type(a).__name__)}")
    if _host_f16(a) or _host_f16(b):
        return _gemm_host_f16(a, b, out, out_dtype, alpha, beta, c, bias, residual, terms,
                              rope_args)
    # A CUDA operand in neither row- nor column-major order (a slice with a step in both
    # dimensions, say) is copied packed; the kernels read either order with a leading dimension.
    a, b = (_row_or_column_major(x) for x in (a, b))
    in_type = _type_of(a)
    host = not _is_torch(a)
    out_type = _out_type(out_dtype) or (
        _type_of(out) if out is not None and _is_torch(out) else
        "f16" if host and _host_f16(out) else in_type)
    given = None
    if host and out is not None:
        # Host results of f16 come back float16, of bf16 and f32 float32 (NumPy has no bf16):
        # an out given holds that type; float16 ones take the f32 result rounded.
        want = "float16" if out_type == "f16" else "float32"
        _host_out("kiln.gemm", out, want,
                  f"out_dtype {out_type!r}" if out_dtype is not None else "float32 a and b")
        if want == "float16":
            given, out = out, None
    made = out is None
    if out is None:
        n = b.shape[1] // 2 if activation == "swiglu" else b.shape[1]
        out = _empty(a, (a.shape[0], n), out_type)
    # c and the residual are read as out is laid out (its order and leading dimension): CUDA
    # ones laid out otherwise are copied so.
    c, residual = (_laid_out_as(x, out) for x in (c, residual))
    if rope_args:
        rope_args["rope_angles"] = _r(rope_args["rope_angles"])
    if not _is_torch(a):  # host arrays in any order, as CUDA tensors: the emulator's copies packed
        import numpy
        a, b, c, bias, residual = (x if x is None else numpy.ascontiguousarray(x)
                                   for x in (a, b, c, bias, residual))
    _kiln._gemm(_r(a), _r(b), _r(out), _r(c), _r(bias), _r(residual), float(alpha), float(beta),
                ",".join(terms), in_type, out_type, stream=_stream([a]), **rope_args)
    if given is not None:
        return _f16_result("kiln.gemm", out, given, "float16", f"out_dtype {out_type!r}")
    return _as_asked(out, out_type, made)


def _given(terms, activation, alone):
    """The epilogue's terms but `alone`, by the arguments that asked for them (a message's)."""
    names = {"scale": "c, alpha or beta", "bias_col": "bias",
             activation: f"activation={activation!r}"}
    return ", ".join(names.get(t, t) for t in terms if t != alone)


def _gemm_host_f16(a, b, out, out_dtype, alpha, beta, c, bias, residual, terms, rope_args):
    """kiln.gemm of float16 host arrays: the f16 kernels on the emulator (the bindings take the
    values as float32, exact for float16), out float16 unless out_dtype says otherwise."""
    import numpy
    _require(_host_f16(a) and _host_f16(b),
             lambda: f"kiln.gemm: a and b must share a type: {a.dtype} and {b.dtype} (host "
                     "arrays: float32, run as bf16, or float16, run as f16)")
    out_type = _out_type(out_dtype) or (
        {"float16": "f16", "float32": "f32"}.get(str(out.dtype), "f16") if out is not None
        else "f16")
    shape = (a.shape[0], b.shape[1] // 2 if "swiglu" in terms else b.shape[1])
    # The types the float32 path requires of its own (checked before the run): out of the
    # result's type (f16 values in float16, bf16 and f32 ones in float32), c, bias and residual
    # float16 or float32; any other would be cast silently.
    want = "float16" if out_type == "f16" else "float32"
    why = (f"out_dtype {out_type!r}" if out_dtype is not None else
           "float16 a and b; a float32 out asks for an f32 result")
    _host_out("kiln.gemm", out, want, why)
    for name, x in (("c", c), ("bias", bias), ("residual", residual)):
        _require(x is None or _is_numpy(x) and str(x.dtype) in ("float16", "float32"),
                 lambda: f"kiln.gemm: {name} must be a float16 or float32 host array with float16 "
                         f"a and b, not {x.dtype}")
    result = numpy.empty(shape, numpy.float32)
    a, b, c, bias, residual = (None if x is None else numpy.ascontiguousarray(x, numpy.float32)
                               for x in (a, b, c, bias, residual))
    if rope_args:
        rope_args["rope_angles"] = _r(rope_args["rope_angles"])
    _kiln._gemm(a, b, result, c, bias, residual, float(alpha), float(beta), ",".join(terms),
                "f16", out_type, stream=0, **rope_args)
    return _f16_result("kiln.gemm", result, out, want, why)


def _gemm_folded(a, b, out, kw):
    """kiln.gemm of a (..., K) (a linear layer's input, as torch.matmul takes it): a's leading
    dimensions fold into M, and so do those of out, c, the residual and a's row scales; out
    (..., N) comes back. A 1-D a is one row, and out is 1-D."""
    lead = tuple(a.shape[:-1])
    rows = 1
    for d in lead:
        rows *= d

    def fold(x):  # an array led by a's leading dimensions, those folded into rows; else as is
        shape = tuple(getattr(x, "shape", ()))
        if (not hasattr(x, "reshape") or len(shape) < len(lead) or shape[:len(lead)] != lead
                or not shape):
            return x
        return x.reshape((rows,) + shape[len(lead):])

    a2 = a.reshape(rows, a.shape[-1])
    out2 = None
    if out is not None:
        n = tuple(out.shape)[-1:] if len(out.shape) >= 1 else ()
        _require(tuple(out.shape[:-1]) == lead,
                 lambda: f"kiln.gemm: out must have a's leading dimensions {lead}, not shape "
                         f"{tuple(out.shape)}")
        if _is_torch(out):
            try:
                out2 = out.view((rows,) + n)
            except RuntimeError:
                out2 = None
        elif out.flags.c_contiguous:
            out2 = out.reshape((rows,) + n)
        _require(out2 is not None, lambda: f"kiln.gemm: out {tuple(out.shape)} must fold its "
                 "leading dimensions into rows without a copy (packed rows)")
    # c, the residual and a's row or block scales ((...), (..., 1), (..., K/128)) fold as a does;
    # a 1-D a's scales are one row's already in the 2-D forms ((1,), (1, 1), (1, K/128): a row
    # of kiln.quantize_e4m3's, whose column-major blocks lie apart, packed here), and a 1-D
    # (K/128,) is that row's blocks.
    sa = kw["scale_a"]
    if lead:
        sa = fold(sa)
    elif (hasattr(sa, "reshape") and 1 <= len(sa.shape) <= 2 and sa.shape[0] * sa.shape[-1] > 1
          and (len(sa.shape) == 1 or sa.shape[0] == 1)):
        sa = sa.reshape(1, sa.shape[-1])
        if _is_torch(sa):
            sa = sa.contiguous()
        else:
            import numpy as np
            sa = np.ascontiguousarray(sa)
    kw = dict(kw, c=fold(kw["c"]), residual=fold(kw["residual"]), scale_a=sa)
    r = gemm(a2, b, out=out2, **kw)
    return out if out is not None else r.reshape(lead + tuple(r.shape[1:]))


def rope_order(dim):
    """The feature of its head that each of a head's `dim` rows holds in RoPE's fused order
    (kiln.gemm's rope, rt::RopeRowOf): in blocks of 16 rows, features 8b..8b+7 and their partners
    dim/2 + 8b.., so that each pair lies in one accumulator thread. dim: a multiple of 16."""
    return _rope_order("kiln.rope_order", dim)


def _rope_order(call, dim):
    """rope_order(dim), its errors naming `call`."""
    import numbers
    _require(isinstance(dim, numbers.Integral),
             lambda: f"{call}: dim must be an integer, not {type(dim).__name__}")
    _require(dim > 0 and dim % 16 == 0, f"{call}: dim must be a positive multiple of 16, not {dim}")
    return [(0 if r % 16 < 8 else dim // 2) + 8 * (r // 16) + r % 8 for r in range(dim)]


def rope_angles(cos, sin):
    """kiln.gemm's RoPE angles from cos and sin tables [P, dim / 2] (as rope_qkv takes them; any
    float type, rounded to bf16 here):
    int32 words [P, dim / 2], each the bf16 cos (low half) and sin (high half) of one position
    and frequency, rounded to nearest even. Torch tensors (on their device) or NumPy arrays."""
    _require_arrays("kiln.rope_angles", cos=cos, sin=sin)
    _require(len(cos.shape) == 2 and tuple(cos.shape) == tuple(sin.shape),
             "kiln.rope_angles: cos and sin must both be [P, dim / 2]")
    if _is_torch(cos):
        import torch
        bits = [t.contiguous().to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
                for t in (cos, sin)]
        return (bits[0] | (bits[1] << 16)).contiguous()
    import numpy as np
    low, high = (_bf16_bits(t).astype(np.uint32) for t in (cos, sin))
    return (low | (high << 16)).view(np.int32)


def rope_weights(w, dim):
    """A projection's weight w (F, K), F a multiple of `dim` (heads of `dim` rows: the query and
    key heads of a QKV weight), with each head's rows put in rope_order(dim), for kiln.gemm's
    rope. Every row of w is reordered: give it the q and k weights (the rows kiln.gemm's rope
    turns) and concatenate the v weight after, as it is; a whole fused QKV weight would have its
    v rows reordered too. A torch tensor or a NumPy array, as given; a new one."""
    _require_arrays("kiln.rope_weights", w=w)
    order = _rope_order("kiln.rope_weights", dim)  # (dim checked first)
    _require(len(w.shape) == 2 and w.shape[0] % dim == 0,
             f"kiln.rope_weights: w must be (F, K) with F a multiple of {dim}, not {tuple(w.shape)}")
    rows = [h * dim + r for h in range(w.shape[0] // dim) for r in order]
    if _is_torch(w):
        import torch
        return w[torch.tensor(rows, device=w.device)].contiguous()
    return w[rows].copy()


def grouped_gemm(x, w, offsets=None, *, counts=None, out=None, scale_x=None, scale_w=None):
    """A grouped GEMM (Mixture-of-Experts): out[t] = x[t] @ w[e].T for each token t of expert e,
    w (E, N, K) holding each expert's (N, K) linear weight; one launch, the group sizes read on the
    device (no host sync; a CUDA graph can hold it).

    Contiguous (offsets): x (T, K), out (T, N), the experts' tokens one after another; offsets
    (E,) int32 the end of each expert's rows (cumulative, as torch._grouped_mm's offs), expert e
    owning rows offsets[e-1] .. offsets[e]. Masked (counts): x (E, C, K), out (E, C, N), expert e
    owning rows 0 .. counts[e] of its block of C (decode's fixed capacity).

    Rows no expert owns are not written (a given out keeps them; one made for host arrays holds
    NaN there). CUDA tensors: bf16, row-major and packed, on the caller's stream. Host arrays: f32,
    run on the emulator as bf16.

    FP8 (DeepGEMM's scales): float8_e4m3fn x and w (uint8 host arrays of e4m3 bytes on the
    emulator) with f32 scale_x per 1 x 128 of each of x's rows, (rows, ceil(K/128)) with the rows
    contiguous (as kiln.quantize_e4m3 gives them; rows = E * C when masked, where the (E, C,
    ceil(K/128)) that kiln.quantize_e4m3 gives for an (E, C, K) x is taken too), and scale_w per
    128 x 128 of each expert's weights, (E, N/128, ceil(K/128)) packed; N a multiple of 128, K of
    16; out bf16.
    """
    _require((offsets is None) != (counts is None),
             "kiln.grouped_gemm: give either offsets (contiguous) or counts (masked)")
    masked = counts is not None
    _writable_out("kiln.grouped_gemm", out)
    _require_arrays("kiln.grouped_gemm", x=x, w=w, **({"counts": counts} if masked else
                                                       {"offsets": offsets}))
    _optional_arrays("kiln.grouped_gemm", out=out, scale_x=scale_x, scale_w=scale_w)
    sizes_arg = counts if masked else offsets
    _require(len(x.shape) == (3 if masked else 2),
             lambda: "kiln.grouped_gemm: x must be " +
                     ("(E, C, K) with counts" if masked else "(T, K) with offsets") +
                     f", not shape {tuple(x.shape)}")
    _require(len(sizes_arg.shape) == 1,
             lambda: f"kiln.grouped_gemm: {'counts' if masked else 'offsets'} must have rank 1 "
                     f"(one entry an expert), not shape {tuple(sizes_arg.shape)}")
    _require(len(w.shape) == 3, lambda: "kiln.grouped_gemm: w must be (E, N, K), each expert's "
             f"(N, K) weight, not shape {tuple(w.shape)}")
    _require((scale_x is None) == (scale_w is None),
             "kiln.grouped_gemm: e4m3 inputs need both scale_x and scale_w")
    _require(not (str(getattr(x, "dtype", "")) == "uint8" and scale_x is None),
             "kiln.grouped_gemm: uint8 x and w are 8-bit inputs (e4m3 bytes) only with scale_x "
             "and scale_w")
    if not _is_torch(x) and len(x.shape) >= 2:  # host arrays: the sizes checked (GPU: read there)
        import numpy
        sizes = _host_numpy("kiln.grouped_gemm", "counts" if masked else "offsets",
                            sizes_arg).astype(numpy.int64)
        if masked:
            # (A negative count is no rows, as the kernel reads it on a GPU.)
            _require(sizes.size == 0 or sizes.max() <= x.shape[1],
                     lambda: f"kiln.grouped_gemm: counts must be at most the capacity C = "
                             f"{x.shape[1]}, not {sizes.max()} (a negative count is no rows)")
        else:
            _require(sizes.size == 0 or ((sizes >= 0).all() and (numpy.diff(sizes) >= 0).all() and
                                         sizes[-1] <= x.shape[0]),
                     f"kiln.grouped_gemm: offsets must be 0 or more, not decrease, and end at "
                     f"most at the {x.shape[0]} rows of x; got {sizes.tolist()[:8]}")
    if masked and scale_x is not None and len(scale_x.shape) == 3 and len(x.shape) == 3 and \
            tuple(scale_x.shape[:2]) == tuple(x.shape[:2]):
        # kiln.quantize_e4m3's scales of an (E, C, K) x, (E, C, kb): the (E * C, kb) the kernel
        # reads, as a view where their rows are contiguous (as it returns them)
        scale_x = scale_x.reshape(x.shape[0] * x.shape[1], scale_x.shape[2])
    shape = tuple(x.shape[:-1]) + (w.shape[1],)
    if out is None:
        out = _empty(x, shape, "bf16")
        if not _is_torch(out):  # (rows no expert owns: NaN, as the emulator's poison shows them)
            out.fill(float("nan"))
    if 0 in shape:  # no token or no column: nothing to write or launch, the rest checked here
        _check_empty_grouped(x, w, sizes_arg, out, shape, scale_x, scale_w, masked)
        return out
    stream = _stream([x])
    if _is_torch(x) and (_is_fp8(x) or _is_fp8(w)):  # DLPack carries the bytes
        import torch
        x, w = x.view(torch.uint8), w.view(torch.uint8)
    _kiln._grouped_gemm(_r(x), _r(w), _r(out), _r(counts if masked else offsets), _r(scale_x),
                        _r(scale_w), masked, stream=stream)
    return out


def _check_empty_grouped(x, w, sizes, out, shape, scale_x, scale_w, masked):
    """kiln.grouped_gemm with no element of out: the shapes and types the bindings check."""
    call = "kiln.grouped_gemm"
    e, n, k = w.shape
    _require(x.shape[-1] == k and sizes.shape[0] == e and (not masked or x.shape[0] == e),
             lambda: f"{call}: x {tuple(x.shape)}, w {tuple(w.shape)} and "
                     f"{'counts' if masked else 'offsets'} {tuple(sizes.shape)} do not make " +
                     ("(E, C, K) x (E, N, K) -> (E, C, N) with E counts" if masked else
                      "(T, K) x (E, N, K) -> (T, N) with E ends"))
    _require(tuple(out.shape) == shape,
             lambda: f"{call}: out must have shape {shape}, not {tuple(out.shape)}")
    _require(1 <= e <= 1024, lambda: f"{call}: E = {e} experts: 1 to 1024")
    fp8 = scale_x is not None
    # The sizes' rules, as with tokens (rt::RunGroupedGemm's); with N = 0 no call has N's columns.
    _require(k >= 1 and k % (16 if fp8 else 8) == 0 and
             (n == 0 or n % (128 if fp8 else 8) == 0),
             lambda: f"{call}: K and N must be multiples of " +
                     ("16 and 128 (e4m3)" if fp8 else "8 (bf16 rows 16 bytes apart)") +
                     f", K at least 1, not K {k}, N {n}")
    data = ("uint8",) if fp8 else ("float32",)
    _require_dtypes(call, [("x", x), ("w", w)], data,
                    ("float8_e4m3fn", "uint8") if fp8 else ("bfloat16",))
    _require_dtypes(call, [("offsets" if not masked else "counts", sizes)], ("int32",), ("int32",))
    _require_dtypes(call, [("out", out)], ("float32",), ("bfloat16",))
    if fp8:
        _require_dtypes(call, [("scale_x", scale_x), ("scale_w", scale_w)], ("float32",),
                        ("float32",))
        rows, kb = (x.shape[0] * x.shape[1] if masked else x.shape[0]), -(-k // 128)
        _require(tuple(scale_x.shape) == (rows, kb) and n % 128 == 0 and
                 tuple(scale_w.shape) == (e, n // 128, kb),
                 lambda: f"{call}: scale_x {tuple(scale_x.shape)} and scale_w "
                         f"{tuple(scale_w.shape)} must be ({rows}, {kb}) and "
                         f"({e}, {n // 128}, {kb}); N a multiple of 128")


def _is_fp8(x):
    return _is_torch(x) and str(x.dtype) == "torch.float8_e4m3fn"


# kiln.gemm's 8-bit tensor types (a host array of uint8 holds e4m3 bytes).
_FP8_TYPES = {"torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2"}


def _gemm_fp8(a, b, out, out_dtype, scale_a, scale_b, c, bias, residual, alpha, beta, terms,
              fp8_types=None):
    """kiln.gemm of 8-bit inputs (its docstring says how)."""
    _require(scale_a is not None and scale_b is not None,
             "kiln.gemm: 8-bit inputs need scale_a and scale_b (f32)")
    _require(fp8_types is None or (len(fp8_types) == 2 and
                                   all(t in ("e4m3", "e5m2") for t in fp8_types)),
             lambda: f"kiln.gemm: fp8_types is a's and b's 8-bit types, each 'e4m3' or 'e5m2', "
                     f"not {fp8_types!r}")
    types = []
    for i, (name, x) in enumerate((("a", a), ("b", b))):
        dtype = str(getattr(x, "dtype", ""))
        _require(dtype in _FP8_TYPES or (not _is_torch(x) and dtype == "uint8"),
                 f"kiln.gemm: 8-bit {name} must be a float8_e4m3fn or float8_e5m2 tensor, or a "
                 f"uint8 host array of e4m3 (or fp8_types') bytes, not "
                 f"{getattr(x, 'dtype', type(x).__name__)}")
        given = fp8_types[i] if fp8_types else None
        if dtype in _FP8_TYPES:  # a tensor's dtype says its type
            _require(given in (None, _FP8_TYPES[dtype]),
                     f"kiln.gemm: fp8_types says {name} is {given}, but it is a {dtype} tensor")
            types.append(_FP8_TYPES[dtype])
        else:
            types.append(given or "e4m3")
    host = not _is_torch(a)
    out_type = _out_type(out_dtype) or (
        _type_of(out) if out is not None and _is_torch(out) else
        "f16" if host and _host_f16(out) else "bf16")
    given_out, why = None, f"out_dtype {out_type!r}" if out_dtype is not None else "8-bit a and b"
    if host and out is not None:  # as for 16-bit inputs: an out of the host result's type
        want = "float16" if out_type == "f16" else "float32"
        _host_out("kiln.gemm", out, want, why)
        if want == "float16":  # (the float32 result rounded into it at the end)
            given_out, out = out, None
    made = out is None
    if out is None:
        out = _empty(a, (a.shape[0], b.shape[1]), out_type)
    # Tensorwise scales given as numbers: one f32 value each, where a and b live.
    scale_a, scale_b = (_scale_array("kiln.gemm", n, s, a)
                        for n, s in (("scale_a", scale_a), ("scale_b", scale_b)))
    _require_arrays("kiln.gemm", scale_a=scale_a, scale_b=scale_b)
    if a.shape[0] * b.shape[1] == 0:  # no element of out: nothing to launch (as for 16-bit inputs)
        _check_empty_fp8(a, b, out, out_type, scale_a, scale_b, c, bias, residual)
        return _as_asked_fp8(out, out_type, made, given_out, why)
    if _is_torch(a):  # DLPack carries the bytes
        import torch
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    else:  # host terms in any order, as for 16-bit inputs: the emulator's copies packed
        import numpy
        c, bias, residual = (x if x is None else numpy.ascontiguousarray(x)
                             for x in (c, bias, residual))
    _kiln._gemm_fp8(_r(a), _r(b), _r(out), _r(scale_a), _r(scale_b), out_type, _r(c), _r(bias),
                    _r(residual), float(alpha), float(beta), ",".join(terms), types[0], types[1],
                    stream=_stream([a]))
    return _as_asked_fp8(out, out_type, made, given_out, why)


def _as_asked_fp8(out, out_type, made, given_out, why):
    """_as_asked, or the host result copied into the float16 out the caller gave."""
    if given_out is not None:
        return _f16_result("kiln.gemm", out, given_out, "float16", why)
    return _as_asked(out, out_type, made)


def _as_asked(out, out_type, made):
    """A host result kiln made (host arrays hold f32) as out_dtype asked: float16 for "f16", whose
    values the kernel rounded so (NumPy has no bf16: "bf16" stays f32 holding bf16 values)."""
    if made and out_type == "f16" and not _is_torch(out) and str(out.dtype) != "float16":
        return out.astype("float16")
    return out


def _check_empty_fp8(a, b, out, out_type, scale_a, scale_b, c, bias, residual):
    """kiln.gemm of 8-bit inputs with no element of out: the shapes, types and layouts the
    bindings check."""
    call = "kiln.gemm (8-bit)"
    (m, k), n = a.shape, b.shape[1]
    _require(b.shape[0] == k,
             lambda: f"kiln.gemm: a {tuple(a.shape)} and b {tuple(b.shape)} do not multiply")
    _require(tuple(out.shape) == (m, n),
             lambda: f"{call}: out has shape {tuple(out.shape)}, not {(m, n)}")
    _require(k % 16 == 0, lambda: f"{call}: 8-bit A and B are read by TMA: K ({k}) a multiple "
             "of 16")
    _require_arrays(call, scale_a=scale_a, scale_b=scale_b)
    terms = [(name, x) for name, x in (("c", c), ("bias", bias), ("residual", residual))
             if x is not None]
    cuda = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[out_type]
    _require_dtypes(call, [("out", out)] + terms, ("float32",), (cuda,))
    _require_dtypes(call, [("scale_a", scale_a), ("scale_b", scale_b)], ("float32",), ("float32",))
    for name, x in terms:
        want = (n,) if name == "bias" else (m, n)
        _require(tuple(x.shape) == want,
                 lambda: f"{call}: {name} has shape {tuple(x.shape)}, not {want}")

    def along(x, dim):  # elements from one to the next along dimension dim
        return x.stride(dim) if _is_torch(x) else x.strides[dim] // x.itemsize

    _require((m == 0 or k <= 1 or along(a, 1) == 1) and (n == 0 or k <= 1 or along(b, 0) == 1),
             f"{call}: a must be row-major and b column-major (b = w.t() of an (N, K) weight w): "
             "the FP8 tensor cores read both along K")
    # The scaling the scales' shapes say, as the bindings read them.
    import math
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    kb = -(-k // 128)
    _require(math.prod(sa) == 1 and math.prod(sb) == 1 or
             sa == (m, kb) and sb == (-(-n // 128), kb) or
             math.prod(sa) == m and (len(sa) == 1 or len(sa) == 2 and sa[1] == 1) and
             math.prod(sb) == n and (len(sb) == 1 or len(sb) == 2 and sb[0] == 1),
             lambda: f"{call}: scale_a {sa} and scale_b {sb} name no scaling: one value each "
                     f"(tensorwise); ({m},) and ({n},) (rowwise); or ({m}, {kb}) and "
                     f"({-(-n // 128)}, {kb}) (blockwise: a per 1x128, b per 128x128)")


def _scale_array(call, name, scale, like):
    """A scale given as a number (a Python or NumPy scalar, not a bool; finite in f32) as a
    one-value f32 array on `like`'s device; arrays as they are."""
    import numbers
    if not isinstance(scale, numbers.Real) and not (
            hasattr(scale, "shape") and scale.shape == () and not hasattr(scale, "__dlpack__")):
        return scale
    value = _in_f32(call, name, _number(call, name, scale))
    if _is_torch(like):
        import torch
        return torch.full((1,), value, dtype=torch.float32, device=like.device)
    import numpy
    return numpy.full((1,), value, numpy.float32)


def quantize_e4m3(x):
    """x (..., K) to e4m3 with one f32 scale per 1 x 128 of each row (the group's largest magnitude
    to 448), as kiln.gemm's blockwise a takes it: (q, scales), q (..., K) float8_e4m3fn and scales
    (..., ceil(K/128)), the rows contiguous (for a 2-D x: (M, ceil(K/128)) with M contiguous; a
    3-D x's fold into M as kiln.gemm folds a). CUDA: x bf16 (ops/quantize_e4m3). Host: f32 rounded
    to bf16, run on the emulator; q is then a uint8 array of e4m3 bytes. K a multiple of 16."""
    _require_arrays("kiln.quantize_e4m3", numpy_or_torch=True, x=x)
    _require(len(x.shape) >= 1 and x.shape[-1] % 16 == 0,
             f"kiln.quantize_e4m3: x must be (..., K) with K a multiple of 16, not {tuple(x.shape)}")
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m, kb = _math.prod(lead), -(-k // 128)

    def unfold(q, scales):  # (M, K) and (M, kb) back to x's leading dimensions (views)
        return q.reshape(lead + (k,)), scales.reshape(lead + (kb,))

    if _is_torch(x):
        import torch
        _require(x.dtype == torch.bfloat16 and x.is_cuda and x.is_contiguous(),
                 f"kiln.quantize_e4m3: x must be a contiguous bf16 CUDA tensor, not {x.dtype}")
        q = torch.empty((m, k), dtype=torch.uint8, device=x.device)
        scales = torch.empty((kb, m), dtype=torch.float32, device=x.device).t()
        if m * k:  # (no element: no launch)
            _loaded("kiln.quantize_e4m3", "ops/quantize_e4m3")(x.view(m, k), q, scales, m, k)
        return unfold(q.view(torch.float8_e4m3fn), scales)
    import numpy
    _require_dtypes("kiln.quantize_e4m3", [("x", x)], ("float32",), ("bfloat16",))
    _host_bound("kiln.quantize_e4m3", [("x", x)])
    x16 = _bf16_bits(numpy.reshape(x, (m, k)))
    q = numpy.zeros((m, k), numpy.uint8)
    scales = numpy.zeros((kb, m), numpy.float32)
    if m * k:
        _loaded("kiln.quantize_e4m3", "ops/quantize_e4m3")(x16, q, scales, m, k)
    return unfold(q, scales.T)


def quantize_e4m3_blocks(w, *, transpose=False):
    """A weight w (N, K) to e4m3 with one f32 scale per 128 x 128 block (the block's largest
    magnitude to 448), as kiln.gemm's blockwise b takes it: (q, scales), q (N, K) float8_e4m3fn
    (kiln.gemm(x, q.t(), scale_a=sx, scale_b=scales)) and scales (ceil(N/128), ceil(K/128)).
    With transpose=True also (q_t, scales_t): q_t = q's transpose (K, N), packed, and scales_t =
    scales.T, the weight for the product along N (the backward pass's dx = dy @ w:
    kiln.gemm(dy_q, q_t.t(), scale_a=s_dy, scale_b=scales_t)). K a multiple of 16; with
    transpose, N too. CUDA: w bf16 (ops/quantize_e4m3_blocks). Host: f32 rounded to bf16, run on
    the emulator; q and q_t are then uint8 arrays of e4m3 bytes."""
    _require_arrays("kiln.quantize_e4m3_blocks", numpy_or_torch=True, w=w)
    transpose = _flag("kiln.quantize_e4m3_blocks", "transpose", transpose)
    _require(len(w.shape) == 2 and w.shape[1] % 16 == 0 and (not transpose or w.shape[0] % 16 == 0),
             f"kiln.quantize_e4m3_blocks: w must be (N, K) with K{' and N' if transpose else ''} "
             f"a multiple of 16, not {tuple(w.shape)}")
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    if _is_torch(w):
        import torch
        _require(w.dtype == torch.bfloat16 and w.is_cuda and w.is_contiguous(),
                 f"kiln.quantize_e4m3_blocks: w must be a contiguous bf16 CUDA tensor, not {w.dtype}")
        q = torch.empty((n, k), dtype=torch.uint8, device=w.device)
        # Not transposing, the kernel writes no qt: q stands in for it.
        q_t = torch.empty((k, n), dtype=torch.uint8, device=w.device) if transpose else q
        scales = torch.empty((nb, kb), dtype=torch.float32, device=w.device)
        if n * k:  # (no element: no launch)
            _loaded("kiln.quantize_e4m3_blocks", "ops/quantize_e4m3_blocks")(
                w, q, q_t, scales, n, k, int(transpose))
        q, q_t = q.view(torch.float8_e4m3fn), q_t.view(torch.float8_e4m3fn)
    else:
        import numpy
        _require_dtypes("kiln.quantize_e4m3_blocks", [("w", w)], ("float32",), ("bfloat16",))
        _host_bound("kiln.quantize_e4m3_blocks", [("w", w)])
        q = numpy.zeros((n, k), numpy.uint8)
        # The emulator copies each array back: q_t needs its own, a word when unwritten.
        q_t = numpy.zeros((k, n) if transpose else (1, 8), numpy.uint8)
        scales = numpy.zeros((nb, kb), numpy.float32)
        if n * k:
            _loaded("kiln.quantize_e4m3_blocks", "ops/quantize_e4m3_blocks")(
                _bf16_bits(w), q, q_t, scales, n, k, int(transpose))
    return (q, scales, q_t, scales.T) if transpose else (q, scales)


def swiglu_weights(gate, up):
    """A gate/up projection's weights ([F, H] each, F a multiple of 8) as one [2F, H] weight w for
    kiln.gemm(x, w.t(), activation="swiglu"): gate and up rows interleaved in blocks of 8, so that
    one thread of the GEMM holds both of a pair. Done once, when the weights load."""
    _require_arrays("kiln.swiglu_weights", gate=gate, up=up)
    _require(len(gate.shape) == 2 and tuple(gate.shape) == tuple(up.shape) and
             gate.shape[0] % 8 == 0,
             f"kiln.swiglu_weights: gate and up must be [F, H] alike, F a multiple of 8, not "
             f"{tuple(gate.shape)} and {tuple(up.shape)}")
    _require(gate.dtype == up.dtype,
             lambda: f"kiln.swiglu_weights: gate and up must have one type, not {gate.dtype} and "
                     f"{up.dtype}")
    f, h = gate.shape
    pair = [gate.reshape(f // 8, 8, h), up.reshape(f // 8, 8, h)]
    if _is_torch(gate):
        import torch
        return torch.stack(pair, 1).reshape(2 * f, h)
    import numpy
    return numpy.stack(pair, 1).reshape(2 * f, h)


def _rows(x):
    """x [B, S, H, D] as the rows layout takes it: itself where its heads and D are packed and its
    batches S rows apart (a view of a fused projection's output, say), else a packed copy."""
    if not _is_torch(x):
        import numpy
        return numpy.ascontiguousarray(x)
    b, s, h, d = x.shape
    row = x.stride(1) if s > 1 else x.stride(0) if b > 1 else h * d
    packed = ((d == 1 or x.stride(3) == 1) and (h == 1 or x.stride(2) == d) and
              (b == 1 or x.stride(0) == s * row) and row >= h * d and row % 8 == 0)
    return x if packed else x.contiguous()


def attention(q, k, v, *, causal=False, scale=None, layout="bhsd"):
    """FlashAttention forward: (o, lse) with o = softmax(scale * q k^T) v per head and lse the
    rows' log-sum-exp (natural log, f32, [B, Hq, S]).

    layout "bhsd": q [B, Hq, S, D], k and v [B, Hkv, Skv, D], contiguous; "bshd": [B, S, H, D]
    (torch's; o comes back so), read in place where each position's heads are packed (views of one
    fused QKV projection's output are: q = qkv[..., :Hq * D].view(B, S, Hq, D), ...), else copied
    first; decode-sized problems (a KV head's query rows, Hq / Hkv * S, fit 64) are copied to
    [B, H, S, D] for the decode kernels (o copied back). Hq a multiple of Hkv
    (grouped-query heads: query head h reads KV head h // (Hq // Hkv)). D 64, 128 or 256; any
    other D up to 256 runs padded with zero columns to the next of them (a copy of q, k and v,
    and the time of the larger D). scale:
    1 / sqrt(D) unless given (a positive number; None for that default, in every attention call).
    causal: query i sees keys j <= i + Skv - S (bottom-right aligned,
    FlashAttention's convention; torch's is_causal is top-left, the same when S == Skv); a row
    that sees no key gets o = 0 and lse = -inf. A dimension of 0 launches nothing: B, H or S of 0
    give empty o and lse, Skv of 0 (no keys) o = 0 and lse = -inf. Scores (scale * q.k) past
    about 1e9 in magnitude are off (e^(s - max) is one fma from the rounded max, FlashAttention's
    form); a NaN in a row gives that row NaN o and lse.
    """
    if layout not in ("bhsd", "bshd"):
        raise Error(f"kiln.attention: layout '{layout}': 'bhsd' or 'bshd'")
    _require_arrays("kiln.attention", q=q, k=k, v=v)
    _emulator_sized("kiln.attention", q=q, k=k, v=v)  # (before any copy or output is made)
    rows = layout == "bshd"
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != 4:
            raise Error(f"kiln.attention: {name} must have rank 4, not {len(x.shape)}")
    # (here: the empty and decode paths below hand on no arrays or [B, H, S, D] views)
    _require(tuple(k.shape) == tuple(v.shape) and k.shape[0] == q.shape[0] and
             k.shape[3] == q.shape[3],
             lambda: f"kiln.attention: k {tuple(k.shape)} and v {tuple(v.shape)} must both be "
                     f"{'[B, Skv, Hkv, D]' if rows else '[B, Hkv, Skv, D]'} for q {tuple(q.shape)}")
    if 0 in tuple(q.shape) + tuple(k.shape):
        _flag("kiln.attention", "causal", causal), _scale("kiln.attention", scale)  # (as launched)
        return _empty_attention(q, k, v, rows)
    d = q.shape[3]
    if d not in _HEAD_DIMS:  # run padded to the next head dimension, at the original D's scale
        kd = _kernel_head_dim("kiln.attention", d)
        o, lse = attention(*(_pad_head_dim(x, kd) for x in (q, k, v)), causal=causal,
                           scale=d ** -0.5 if scale is None else scale, layout=layout)
        return _packed(o[..., :d]), lse
    if rows and q.shape[2] // k.shape[2] * q.shape[1] <= 64 and (not causal or q.shape[1] == 1):
        # Decode-sized (a KV head's query rows fit one tile): the decode kernels, which pack
        # heads and split the keys, read [B, H, S, D]; the prefill kernels' rows form would run a
        # CTA per head over all of its keys.
        t = (lambda x: x.transpose(1, 2).contiguous()) if _is_torch(q) else (
            lambda x: __import__("numpy").ascontiguousarray(x.transpose(0, 2, 1, 3)))
        o, lse = attention(t(q), t(k), t(v), causal=causal, scale=scale)  # (o: a few rows a head)
        return (o.transpose(1, 2).contiguous() if _is_torch(o) else
                __import__("numpy").ascontiguousarray(o.transpose(0, 2, 1, 3))), lse
    if rows:
        q, k, v = _rows(q), _rows(k), _rows(v)
        if _is_torch(k) and k.stride(1) != v.stride(1):  # one row stride for both
            k, v = k.contiguous(), v.contiguous()
    o = _empty(q, tuple(q.shape), _type_of(q))
    b, h, s = (q.shape[0], q.shape[2], q.shape[1]) if rows else tuple(q.shape[:3])
    lse = _empty(q, (b, h, s), "f32")
    _kiln._attention(_r(q), _r(k), _r(v), _r(o), _r(lse),
                     _flag("kiln.attention", "causal", causal),
                     _scale("kiln.attention", scale), rows,
                     stream=_stream([q]))
    return o, lse


_HEAD_DIMS = (64, 128, 256)  # the attention kernels' head dimensions


def _kernel_head_dim(call, d):
    """The kernels' head dimension that holds D: D itself, or the next one up (q, k and v are
    then padded with zero columns, which change no score, and o's are dropped)."""
    for kd in _HEAD_DIMS:
        if 1 <= d <= kd:
            return kd
    raise Error(f"{call}: head dimension D = {d}: the kernels take 1 to 256")


def _pad_head_dim(x, d):
    """x [..., D] as [..., d], the new columns zero (a copy)."""
    if _is_torch(x):
        import torch
        return torch.nn.functional.pad(x, (0, d - x.shape[-1]))
    import numpy
    return numpy.pad(x, [(0, 0)] * (len(x.shape) - 1) + [(0, d - x.shape[-1])])


def _require_heads(call, hq, hkv):
    """kiln.Error unless Hq query heads group over Hkv KV heads (or there is no query head)."""
    _require(hkv > 0 and hq % hkv == 0 or hq == 0,
             lambda: f"{call}: Hkv = 0: the KV heads must be at least 1 where Hq = {hq}" if hkv == 0
             else f"{call}: Hq = {hq} is not a multiple of Hkv = {hkv} (grouped-query heads)")


def _check_attention_shapes(call, q, k, v, layout="[B, Hkv, Skv, D]"):
    """k and v of one shape (`layout`), of q's rank, batch (or tokens) and head dimension, and
    Hq (dimension 1) a multiple of Hkv: the bindings' checks, for the empty forms."""
    _require(tuple(k.shape) == tuple(v.shape) and len(k.shape) == len(q.shape) and
             k.shape[0] == q.shape[0] and k.shape[-1] == q.shape[-1],
             lambda: f"{call}: k {tuple(k.shape)} and v {tuple(v.shape)} must both be {layout} "
                     f"for q {tuple(q.shape)}")
    hq, hkv = q.shape[1], k.shape[1]
    _require_heads(call, hq, hkv)


def _require_attention_types(call, data, lse=None, index=()):
    """The types the bindings take, for the empty forms: the (name, array) pairs of `data` all
    float32 on the host, all bf16 or all f16 on the GPU, as the first; lse float32; the
    (name, array) pairs of `index` int32."""
    first = str(data[0][1].dtype).replace("torch.", "")
    _require_dtypes(call, data[:1], ("float32",), ("bfloat16", "float16"))
    _require_dtypes(call, data[1:], ("float32",), (first,))
    if lse is not None:
        _require_dtypes(call, [("lse", lse)], ("float32",), ("float32",))
    _require_dtypes(call, index, ("int32",), ("int32",))


def _empty_attention(q, k, v, rows):
    """kiln.attention where a dimension is 0 (k and v checked against q already), as torch
    answers it, without a launch: empty o and lse where B, H or S is 0; o = 0 and lse = -inf where
    only Skv is (no row sees a key)."""
    h, s = (2, 1) if rows else (1, 2)
    b, hq, hkv, d = q.shape[0], q.shape[h], k.shape[h], q.shape[3]
    _kernel_head_dim("kiln.attention", d)
    _require_heads("kiln.attention", hq, hkv)
    _require(q.dtype == k.dtype == v.dtype,
             f"kiln.attention: q, k and v must share one type ({q.dtype}, {k.dtype}, {v.dtype})")
    if not _is_torch(q):
        import numpy
        _require(q.dtype == numpy.float32,
                 f"kiln.attention: host arrays must be float32, not {q.dtype}")
    o = _empty(q, tuple(q.shape), _type_of(q))
    lse = _empty(q, (b, q.shape[h], q.shape[s]), "f32")
    o[...] = 0
    lse[...] = float("-inf")
    return o, lse


def attention_backward(q, k, v, out, lse, d_out, *, causal=False, scale=None, deterministic=False,
                       dq_atomics=False, layout="bhsd"):
    """FlashAttention backward: (dq, dk, dv) from the forward's q, k, v, out and lse
    (kiln.attention) and the gradient d_out of out, all [B, H, S, D] contiguous (layout "bhsd"),
    or all [B, S, H, D] (layout "bshd", as kiln.attention's of that layout: copied to
    [B, H, S, D] for the kernels, the gradients back as [B, S, H, D]), lse [B, Hq, S] f32 in
    either. Grouped-query heads: dk and dv of a KV head sum over the query heads that
    read it. D 64, 128 or 256 on sm_90a (64 or 128 on sm_100a); other D up to 256 padded, as
    kiln.attention pads them. Where it can (sm_90a, a kernel D of 64 or 128), dq is added by
    atomics, its last bits varying run to run (dk and dv never); deterministic=True takes it from
    a kernel of its own instead, the same inputs giving the same bytes run to run. dq_atomics=True
    asks for the atomics, an error where they cannot run.
    """
    call = "kiln.attention_backward"
    _require(layout in ("bhsd", "bshd"), lambda: f"{call}: layout '{layout}': 'bhsd' or 'bshd'")
    _require_arrays(call, q=q, k=k, v=v, out=out, lse=lse, d_out=d_out)
    _emulator_sized(call, q=q, k=k, v=v, out=out, d_out=d_out)  # (before any copy)
    if layout == "bshd":
        for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("d_out", d_out)):
            _require(len(x.shape) == 4,
                     lambda: f"{call}: {name} must have rank 4 ([B, S, H, D]), not {len(x.shape)}")
        t = (lambda x: x.transpose(1, 2).contiguous()) if _is_torch(q) else (
            lambda x: __import__("numpy").ascontiguousarray(x.transpose(0, 2, 1, 3)))
        grads = attention_backward(t(q), t(k), t(v), t(out), lse, t(d_out), causal=causal,
                                   scale=scale, deterministic=deterministic,
                                   dq_atomics=dq_atomics)
        return tuple(t(g) for g in grads)
    _require(not (_flag(call, "deterministic", deterministic) and
                  _flag(call, "dq_atomics", dq_atomics)),
             lambda: f"{call}: dq_atomics adds dq by atomics, whose last bits vary run to run, "
                     "and deterministic asks for the same bytes run to run: give one")
    _require_arrays(call, q=q, k=k, v=v, out=out, lse=lse, d_out=d_out)
    if len(q.shape) == 4 and len(k.shape) == 4 and 0 in tuple(q.shape) + tuple(k.shape):
        # Nothing to launch (as kiln.attention's empty forms): no query or no key, no gradient;
        # the shapes and types checked as the bindings check them.
        for name, x in (("v", v), ("out", out), ("d_out", d_out), ("lse", lse)):
            _require(len(x.shape) == (3 if name == "lse" else 4),
                     lambda: f"{call}: {name} must have rank {3 if name == 'lse' else 4}, not "
                             f"shape {tuple(x.shape)}")
        _check_attention_shapes(call, q, k, v)
        b, hq, s = q.shape[:3]
        _require(tuple(out.shape) == tuple(d_out.shape) == tuple(q.shape) and
                 tuple(lse.shape) == (b, hq, s),
                 lambda: f"{call}: out and d_out must have q's shape {tuple(q.shape)} and lse "
                         f"[B, Hq, S] = {(b, hq, s)}; got out {tuple(out.shape)}, d_out "
                         f"{tuple(d_out.shape)}, lse {tuple(lse.shape)}")
        _kernel_head_dim(call, q.shape[3])
        _require_attention_types(call, [("q", q), ("k", k), ("v", v), ("out", out),
                                        ("d_out", d_out)], lse=lse)
        _flag(call, "causal", causal), _scale(call, scale)
        grads = [_empty(x, tuple(x.shape), _type_of(x)) for x in (q, k, v)]
        for g in grads:
            g[...] = 0
        return tuple(grads)
    d = q.shape[-1]
    if len(q.shape) == 4 and d not in _HEAD_DIMS:  # padded as kiln.attention pads the forward
        _require(tuple(out.shape) == tuple(d_out.shape) == tuple(q.shape) and
                 tuple(k.shape) == tuple(v.shape) and len(k.shape) == 4 and k.shape[3] == d,
                 lambda: "kiln.attention_backward: out and d_out must have q's shape "
                         f"{tuple(q.shape)}, and k and v [B, Hkv, Skv, D] with q's D = {d}; got "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}, out {tuple(out.shape)}, d_out "
                         f"{tuple(d_out.shape)}")
        kd = _kernel_head_dim("kiln.attention_backward", d)
        # (the kernels' message would name the padded D, not the caller's)
        _require(kd in (64, 128) or not _flag(call, "dq_atomics", dq_atomics),
                 lambda: f"{call}: dQ by atomics (dq_atomics) takes D = 64 or 128; D = {d} runs "
                         f"padded to {kd}, which runs deterministic (dq_atomics=False)")
        grads = attention_backward(*(_pad_head_dim(x, kd) for x in (q, k, v, out)), lse,
                                   _pad_head_dim(d_out, kd), causal=causal,
                                   scale=d ** -0.5 if scale is None else scale,
                                   deterministic=deterministic, dq_atomics=dq_atomics)
        return tuple(_packed(g[..., :d]) for g in grads)
    dq = _empty(q, tuple(q.shape), _type_of(q))
    dk = _empty(k, tuple(k.shape), _type_of(k))
    dv = _empty(v, tuple(v.shape), _type_of(v))
    _kiln._attention_backward(*map(_r, (q, k, v, out, lse, d_out, dq, dk, dv)),
                              _flag("kiln.attention_backward", "causal", causal),
                              _scale("kiln.attention_backward", scale),
                              _flag(call, "dq_atomics", dq_atomics),
                              _flag(call, "deterministic", deterministic), stream=_stream([q]))
    return dq, dk, dv


def decode_attention(q, k_cache, v_cache, seq_lens, block_table=None, *, causal=False,
                     scale=None):
    """Attention over a KV cache, sequences of their own lengths: (o, lse) for q [B, Hq, S, D].
    Decode (S = 1, or a few query rows) where a KV head's query rows (Hq / Hkv * S) fit 64;
    prefill (a chunk of S new rows a sequence, whose keys were appended to the cache) beyond. With
    causal, query i of sequence b sees keys j <= i + seq_lens[b] - S (its own diagonal); without,
    every key of its sequence.

    Without block_table, k_cache and v_cache are [B, Hkv, Smax, D] and sequence b uses its first
    seq_lens[b] keys. With one, they are a paged cache [pages, page, Hkv, D] (vLLM's layout)
    and sequence b's key j lies in page block_table[b, j // page], row j % page. Pages of 16,
    32, 64 or 256 tokens run out of the box; another power of two from 16 needs its kernels
    written first with `kiln bundle` (the error names the command). seq_lens [B] and
    block_table [B, max_pages] are int32. Keys past a sequence's length may hold anything (NaN
    included): they are never read into the result. Host arrays' lengths (0 to the cache's keys
    a sequence) and pages in use are checked; on the GPU the kernels read them as they are, with
    no host sync: a length past the cache counts as the cache's and a page outside it reads as
    zeros (never out of bounds; the result is then undefined).
    """
    call = "kiln.decode_attention"
    _require_arrays(call, numpy_or_torch=True, q=q, k_cache=k_cache, v_cache=v_cache,
                    seq_lens=seq_lens)
    _require(len(q.shape) == 4,
             lambda: f"{call}: q must be [B, Hq, S, D], not shape {tuple(q.shape)}")
    if block_table is not None:
        _require_arrays(call, numpy_or_torch=True, block_table=block_table)
        page = k_cache.shape[1] if len(k_cache.shape) == 4 else 0
        _require(page >= 16 and page & (page - 1) == 0,
                 lambda: f"{call}: with a block_table, k_cache and v_cache are a paged cache "
                         "[pages, page, Hkv, D] (page a power of two from 16); k_cache "
                         f"{tuple(k_cache.shape)} is not one (a dense cache [B, Hkv, Smax, D] "
                         "takes no block_table)")
        _require(k_cache.shape[3] == q.shape[3],
                 lambda: f"{call}: k_cache {tuple(k_cache.shape)} has D = {k_cache.shape[3]}, "
                         f"q {tuple(q.shape)} D = {q.shape[3]}")
    else:  # a dense cache, checked against q before its lengths are
        _require(len(k_cache.shape) == 4 and tuple(k_cache.shape) == tuple(v_cache.shape) and
                 k_cache.shape[0] == q.shape[0] and k_cache.shape[3] == q.shape[3],
                 lambda: f"{call}: k_cache {tuple(k_cache.shape)} and v_cache "
                         f"{tuple(v_cache.shape)} must both be [B, Hkv, Smax, D] for q "
                         f"{tuple(q.shape)} (a paged cache [pages, page, Hkv, D] comes with its "
                         "block_table)")
    # (A paged cache of no pages holds no key: every length reads as 0 there.)
    keys = (block_table.shape[1] * k_cache.shape[1] * min(k_cache.shape[0], 1)
            if block_table is not None and len(block_table.shape) == 2 and
            len(k_cache.shape) == 4 else k_cache.shape[2] if len(k_cache.shape) == 4 else 1)
    host_checked = not _is_torch(q) and len(k_cache.shape) == 4 and (block_table is None or
                                                                     len(block_table.shape) == 2)
    if 0 in tuple(q.shape) or keys == 0:
        # As kiln.attention's empty forms: no row, empty results; no key, o = 0 and lse = -inf.
        _check_empty_decode(q, k_cache, v_cache, seq_lens, block_table)
        _flag(call, "causal", causal), _scale(call, scale)
        if host_checked:
            _check_host_decode_lengths(call, k_cache, seq_lens, block_table)
        o, lse = _empty(q, tuple(q.shape), _type_of(q)), _empty(q, tuple(q.shape[:3]), "f32")
        o[...] = 0
        lse[...] = float("-inf")
        return o, lse
    if host_checked:
        _check_host_decode_lengths(call, k_cache, seq_lens, block_table)
    o = _empty(q, tuple(q.shape), _type_of(q))
    lse = _empty(q, tuple(q.shape[:3]), "f32")
    _kiln._decode_attention(_r(q), _r(k_cache), _r(v_cache), _r(seq_lens), _r(block_table), _r(o),
                            _r(lse), _flag("kiln.decode_attention", "causal", causal),
                            _scale("kiln.decode_attention", scale),
                            stream=_stream([q]))
    return o, lse


def _check_host_decode_lengths(call, k_cache, seq_lens, block_table):
    """Host arrays: the lengths and pages checked here. (On the GPU they are the device's: read
    there, where a length past the cache is taken as the cache's and a page past it reads zeros;
    never out of bounds.)"""
    import numpy
    lens = _host_numpy(call, "seq_lens", seq_lens)
    paged = block_table is not None
    cap = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[2]
    _require(lens.size == 0 or (lens.min() >= 0 and lens.max() <= cap),
             lambda: f"{call}: seq_lens must lie in [0, {cap}] (the cache's keys a sequence" +
                     (f": block_table's {block_table.shape[1]} pages of {k_cache.shape[1]}"
                      if paged else "") + f"), not {lens.min()} .. {lens.max()}")
    if paged and lens.ndim == 1 and lens.size and block_table.shape[0] == lens.size:  # (else the
        # bindings name the shape)
        table, page = _host_numpy(call, "block_table", block_table), k_cache.shape[1]
        used = numpy.arange(table.shape[1])[None, :] * page < lens[:, None]
        pages = table[used]
        _require(pages.size == 0 or (pages.min() >= 0 and pages.max() < k_cache.shape[0]),
                 lambda: f"{call}: block_table's pages in use must lie in "
                         f"[0, {k_cache.shape[0]}), not {pages.min()} .. {pages.max()}")


def _check_empty_decode(q, k_cache, v_cache, seq_lens, block_table):
    """kiln.decode_attention with no row or no key: the shapes and types the bindings check."""
    call = "kiln.decode_attention"
    b, hq, _, d = q.shape
    _require(len(k_cache.shape) == 4 and tuple(k_cache.shape) == tuple(v_cache.shape),
             lambda: f"{call}: k_cache {tuple(k_cache.shape)} and v_cache "
                     f"{tuple(v_cache.shape)} must both be " +
                     ("[pages, page, Hkv, D]" if block_table is not None else "[B, Hkv, Smax, D]")
                     + f" for q {tuple(q.shape)}")
    index = [("seq_lens", seq_lens)]
    if block_table is not None:  # (the cache's page and D checked already)
        _require(len(block_table.shape) == 2 and block_table.shape[0] == b,
                 lambda: f"{call}: block_table has shape {tuple(block_table.shape)}; "
                         f"[B, max_pages] with B = {b}")
        index.append(("block_table", block_table))
        hkv = k_cache.shape[2]
        _require_heads(call, hq, hkv)
    else:
        _check_attention_shapes(call, q, k_cache, v_cache, "[B, Hkv, Smax, D]")
    _require(tuple(seq_lens.shape) == (b,),
             lambda: f"{call}: seq_lens has shape {tuple(seq_lens.shape)}; [B] = ({b},)")
    _require(d in _HEAD_DIMS, f"{call}: head dimension D = {d}: the kernels take 64, 128 or 256")
    _require_attention_types(call, [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)],
                             index=index)


def varlen_attention(q, k, v, cu_seqlens, max_seqlen, *, causal=False, scale=None):
    """Attention over packed sequences of their own lengths (self-attention, no padding): (o, lse)
    for q [T, Hq, D], k and v [T, Hkv, D] (T tokens in all), sequence b in rows cu_seqlens[b] ..
    cu_seqlens[b + 1] (int32 [B + 1]); max_seqlen the longest sequence's length; a causal mask is
    each sequence's own. o [T, Hq, D], lse [Hq, T] f32. Rows past cu_seqlens[B] (no sequence's)
    are not written: on a GPU they hold what torch.empty left; host arrays come back NaN there, in
    o and lse alike.
    """
    call = "kiln.varlen_attention"
    _require_arrays(call, numpy_or_torch=True, q=q, k=k, v=v, cu_seqlens=cu_seqlens)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require(len(x.shape) == 3,
                 lambda: f"{call}: {name} must be packed [T, H, D], not shape {tuple(x.shape)}")
    _check_host_offsets(call, q, cu_seqlens, q.shape[0], max_seqlen)
    o = _empty(q, tuple(q.shape), _type_of(q))
    lse = _empty(q, (q.shape[1], q.shape[0]), "f32")
    if not _is_torch(lse):  # the kernels write the rows sequences own; the rest NaN, as o's
        lse.fill(float("nan"))
    if q.shape[0] * q.shape[1] == 0 or max_seqlen == 0:  # no token, head or sequence's row:
        # nothing to do (host rows no sequence owns come back NaN), the rest checked here
        _flag(call, "causal", causal), _scale(call, scale)
        _check_attention_shapes(call, q, k, v, "[T, Hkv, D]")
        _require(q.shape[2] in _HEAD_DIMS,
                 f"{call}: head dimension D = {q.shape[2]}: the kernels take 64, 128 or 256")
        _require_attention_types(call, [("q", q), ("k", k), ("v", v)],
                                 index=[("cu_seqlens", cu_seqlens)])
        if not _is_torch(o):
            o.fill(float("nan"))
        return o, lse
    # No sequence is longer than the T rows there are: a looser bound plans no larger grid.
    _kiln._varlen_attention(_r(q), _r(k), _r(v), _r(cu_seqlens), int(min(max_seqlen, q.shape[0])),
                            _r(o), _r(lse),
                            _flag("kiln.varlen_attention", "causal", causal),
                            _scale("kiln.varlen_attention", scale),
                            stream=_stream([q]))
    return o, lse


def _check_host_offsets(call, x, cu_seqlens, total, max_seqlen):
    """Host arrays: cu_seqlens from 0, non-decreasing, to at most `total` rows, no sequence longer
    than max_seqlen. (On the GPU they are the device's, read there.)"""
    import numbers
    _require(isinstance(max_seqlen, numbers.Integral) and not isinstance(max_seqlen, bool) and
             max_seqlen >= (0 if total == 0 or not _is_torch(x) else 1),
             lambda: f"{call}: max_seqlen must be an integer of at least "
                     f"{1 if _is_torch(x) else 0} (the longest sequence's length), not "
                     f"{max_seqlen!r}")
    _require(max_seqlen <= 2**31 - 1,
             lambda: f"{call}: max_seqlen = {max_seqlen} is past 32 bits (at most 2^31 - 1: the "
                     f"kernels count a sequence's rows in int32)")
    if _is_torch(x):
        return
    import numpy
    cu = _host_numpy(call, "cu_seqlens", cu_seqlens).astype(numpy.int64)
    got = f"; got {cu.tolist()[:8]}{' ...' if cu.size > 8 else ''}"
    _require(cu.ndim == 1 and cu.size >= 2,
             lambda: f"{call}: cu_seqlens must be [B + 1] offsets, B at least 1{got}")
    _require(cu[0] == 0, lambda: f"{call}: cu_seqlens must start at 0{got}")
    _require((numpy.diff(cu) >= 0).all(), lambda: f"{call}: cu_seqlens must not fall{got}")
    _require(cu[-1] <= total,
             lambda: f"{call}: cu_seqlens must end at most at the {total} rows there are{got}")
    _require(numpy.diff(cu).max() <= max_seqlen,
             lambda: f"{call}: a sequence of {numpy.diff(cu).max()} rows is longer than "
                     f"max_seqlen = {max_seqlen}{got}")


def varlen_attention_backward(q, k, v, out, lse, d_out, cu_seqlens, max_seqlen, *, causal=False,
                              scale=None):
    """The backward of varlen_attention: (dq, dk, dv) from its q, k, v, out and lse and the
    gradient d_out of out, all packed [T, H, D] as it took them (lse [Hq, T]). Each sequence's
    gradients come from its own rows only; deterministic (the same bytes run to run).
    """
    _require_arrays("kiln.varlen_attention_backward", numpy_or_torch=True, q=q, k=k, v=v,
                    out=out, lse=lse, d_out=d_out, cu_seqlens=cu_seqlens)
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out), ("d_out", d_out)):
        _require(len(x.shape) == 3,
                 lambda: f"kiln.varlen_attention_backward: {name} must be packed [T, H, D], not "
                         f"shape {tuple(x.shape)}")
    _check_host_offsets("kiln.varlen_attention_backward", q, cu_seqlens, q.shape[0], max_seqlen)
    dq = _empty(q, tuple(q.shape), _type_of(q))
    dk = _empty(k, tuple(k.shape), _type_of(k))
    dv = _empty(v, tuple(v.shape), _type_of(v))
    if q.shape[0] * q.shape[1] == 0 or max_seqlen == 0:  # no token, head or sequence's row (as
        # the forward): no gradient (host rows no sequence owns come back NaN)
        call = "kiln.varlen_attention_backward"
        _flag(call, "causal", causal), _scale(call, scale)
        _check_attention_shapes(call, q, k, v, "[T, Hkv, D]")
        _require(q.shape[2] in _HEAD_DIMS,
                 f"{call}: head dimension D = {q.shape[2]}: the kernels take 64, 128 or 256")
        for name, x in (("out", out), ("d_out", d_out)):
            _require(tuple(x.shape) == tuple(q.shape),
                     lambda: f"{call}: {name} must be q's shape {tuple(q.shape)}, not "
                             f"{tuple(x.shape)}")
        _require_attention_types(call, [("q", q), ("k", k), ("v", v), ("out", out),
                                        ("d_out", d_out)], lse=lse,
                                 index=[("cu_seqlens", cu_seqlens)])
        for g in (dk, dv):  # (no query row reaches them)
            g.zero_() if _is_torch(g) else g.fill(0)
        if max_seqlen == 0 and q.shape[0] and not _is_torch(dq):  # rows, none a sequence's
            for g in (dq, dk, dv):
                g.fill(float("nan"))
        return dq, dk, dv
    _kiln._attention_backward(*map(_r, (q, k, v, out, lse, d_out, dq, dk, dv)),
                              _flag("kiln.varlen_attention_backward", "causal", causal),
                              _scale("kiln.varlen_attention_backward", scale), False, True,
                              cu_seqlens=_r(cu_seqlens),
                              max_seqlen=int(min(max_seqlen, q.shape[0])), stream=_stream([q]))
    return dq, dk, dv


def paged_append(k_cache, v_cache, k_new, v_new, block_table, seq_lens, cos, sin):
    """Writes a decode step's new keys and values into their pages of a paged cache, in place.
    CUDA tensors: the caches and the new rows all bf16 or all f16.

    k_new, v_new [B, S, Hkv, D] (S new tokens a sequence, D a multiple of 16); k_cache, v_cache
    [pages, page, Hkv, D]; block_table [B, max_pages] and seq_lens [B] int32, the lengths before
    the step: token s of sequence b goes to position seq_lens[b] + s, page
    block_table[b, pos // page], row pos % page. The keys are rotated at their positions by cos,
    sin [positions, D / 2] f32 (Llama's rotate-half, as rope_qkv). On the host, a negative length,
    a position past the block table or the tables, a new token's page outside the cache, two new
    tokens in the same row, index arrays other than int32 and read-only caches are errors; on a
    GPU (where checking would need the tables on the host) a token past the table, or whose page
    entry lies past the cache, is not written, and of two tokens in one row either may be the
    one kept. Nothing else in the caches changes (on the host too: the rows the step does not
    write come back bit for bit). The caller adds S to seq_lens afterwards. Pages of any power of
    two from 16 (kiln.decode_attention reads 16, 32, 64 and 256 out of the box).
    """
    call = "kiln.paged_append"
    _require_arrays(call, k_cache=k_cache, v_cache=v_cache, k_new=k_new, v_new=v_new,
                    block_table=block_table, seq_lens=seq_lens, cos=cos, sin=sin)
    _require(len(k_new.shape) == 4 and tuple(k_new.shape) == tuple(v_new.shape),
             lambda: f"kiln.paged_append: k_new and v_new must both be [B, S, Hkv, D], not "
                     f"{tuple(k_new.shape)} and {tuple(v_new.shape)}")
    b, s, h, d = k_new.shape
    _require(len(k_cache.shape) == 4 and tuple(k_cache.shape) == tuple(v_cache.shape) and
             tuple(k_cache.shape[2:]) == (h, d),
             f"kiln.paged_append: the caches must both be [pages, page, {h}, {d}], not "
             f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    _require(d % 16 == 0, f"kiln.paged_append: D = {d}: a multiple of 16")
    _require(tuple(block_table.shape[:1]) == (b,) and len(block_table.shape) == 2 and
             tuple(seq_lens.shape) == (b,),
             f"kiln.paged_append: block_table [B, max_pages] and seq_lens [B] for B = {b}")
    _require(len(cos.shape) == 2 and tuple(cos.shape) == tuple(sin.shape) and
             cos.shape[1] == d // 2, "kiln.paged_append: cos and sin must both be [positions, D / 2]")
    page, max_pages = k_cache.shape[1], block_table.shape[1]
    _require(page >= 16 and page & (page - 1) == 0,
             lambda: f"{call}: pages of {page} tokens: a power of two from 16 (as "
                     f"kiln.decode_attention reads them)")
    empty = b * s * h * d == 0  # no token to write: no launch, all else checked as for one
    scalars = [s, h, d, page, max_pages, k_cache.shape[0], cos.shape[0], b * s * h * d // 16]
    if _is_torch(k_cache):
        # The kernel reads its arrays' bytes as these types: any other would be misread, not
        # converted.
        import torch
        half = k_cache.dtype if k_cache.dtype == torch.float16 else torch.bfloat16
        f32, i32 = torch.float32, torch.int32
        for name, x, want in (("k_cache", k_cache, half), ("v_cache", v_cache, half),
                              ("k_new", k_new, half), ("v_new", v_new, half), ("cos", cos, f32),
                              ("sin", sin, f32), ("block_table", block_table, i32),
                              ("seq_lens", seq_lens, i32)):
            _require(_is_torch(x) and x.is_cuda and x.dtype == want,
                     lambda: f"{call}: {name} must be a CUDA tensor of {want}, not "
                             f"{getattr(x, 'dtype', type(x).__name__)}"
                             f"{'' if not _is_torch(x) or x.is_cuda else ' on the host'}")
        _require(not _overlap(k_cache, v_cache),
                 f"{call}: k_cache and v_cache overlap in memory (one buffer's byte range holds "
                 "both); give two caches")
        if not empty:
            _loaded(call, "ops/paged_append" + (".f16" if half == torch.float16 else ""))(
                k_new, v_new, cos, sin, block_table, seq_lens, k_cache, v_cache, *scalars)
        return
    import numpy
    # Host arrays: the lengths, the pages the new tokens land in and the index types checked here
    # (decode_attention checks its own so); the caches written in place, so writable.
    for name, x in (("block_table", block_table), ("seq_lens", seq_lens)):
        _require(x.dtype == numpy.int32, lambda: f"{call}: {name} must be int32, not {x.dtype}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache), ("k_new", k_new), ("v_new", v_new),
                    ("cos", cos), ("sin", sin)):
        _require(x.dtype == numpy.float32,
                 lambda: f"{call}: host arrays hold float32 (bf16 values; cos and sin f32), {name} "
                         f"is {x.dtype}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        _require(x.flags.writeable,
                 f"{call}: {name} is read-only; the new rows are written into it")
    _require(not numpy.shares_memory(k_cache, v_cache),
             f"{call}: k_cache and v_cache share memory; the values would be written over the "
             "keys")
    lens = _host_numpy(call, "seq_lens", seq_lens)
    _require((lens >= 0).all(), lambda: f"{call}: seq_lens must be 0 or more, not {lens.min()}")
    end = lens + s
    _require(end.max(initial=0) <= min(max_pages * page, cos.shape[0]),
             lambda: f"{call}: the new tokens reach position {end.max() - 1}, past the block "
                     f"table's positions 0 to {max_pages * page - 1} or cos and sin's 0 to "
                     f"{cos.shape[0] - 1}")
    pos = lens[:, None] + numpy.arange(s)[None, :]  # [B, S]: each new token's position
    pages = numpy.take_along_axis(_host_numpy(call, "block_table", block_table), pos // page,
                                  axis=1)
    _require(((pages >= 0) & (pages < k_cache.shape[0])).all(),
             lambda: f"{call}: block_table's pages for the new tokens must lie in "
                     f"[0, {k_cache.shape[0]}), not {pages.min()} .. {pages.max()}")
    slots = (pages * page + pos % page).ravel()  # each new token's row of the cache
    _, first, count = numpy.unique(slots, return_index=True, return_counts=True)
    if (count > 1).any():
        twice = numpy.sort(numpy.flatnonzero(slots == slots[first[count > 1][0]]))[:2]
        (b0, s0), (b1, s1) = (divmod(int(i), s) for i in twice)
        raise Error(f"{call}: token {s0} of sequence {b0} and token {s1} of sequence {b1} land in "
                    f"the same row (page {int(pages.ravel()[twice[0]])}, row "
                    f"{int(pos.ravel()[twice[0]] % page)}): block_table lists that page twice")
    if empty:
        return
    kc, vc = _bf16_bits(k_cache), _bf16_bits(v_cache)
    _loaded(call, "ops/paged_append")(_bf16_bits(k_new), _bf16_bits(v_new), _host_input(cos),
                                    _host_input(sin), _host_input(block_table),
                                    _host_input(seq_lens), kc, vc, *scalars)
    # Back only the rows the step wrote: the rest of the cache stays as it was, bit for bit (its
    # bf16 copy would round it).
    rows = pos % page
    k_cache[pages, rows] = _widened(kc[pages, rows])
    v_cache[pages, rows] = _widened(vc[pages, rows])


def _overlap(a, b):
    """Whether two torch tensors' byte ranges overlap (any element of one within the other's
    first to last byte)."""
    def span(t):
        if t.numel() == 0:
            return 0, 0
        last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


# The layer glue (examples/ops/layer_glue.cc), through load(). CUDA tensors: bf16, or f16 (the
# ".f16" kernels). Host arrays of f32 go in as bf16 bits (uint16) and come back widened; float16
# ones run the ".f16" kernels as they are.
_LOADED = {}


def _loaded(call, name):
    """Bundled kernel `name` of the current bundle directory, loaded once (for `call`: what a
    missing directory's error names)."""
    key = (bundle_dir(), name)
    if key not in _LOADED:
        _require(_os.path.isdir(key[0]),
                 lambda: f"{call}: no bundle directory {key[0]!r} (for {name}): set one with "
                         "kiln.set_bundle_dir or $KILN_BUNDLE_DIR, or write the bundles there "
                         f"with `kiln bundle --dir {key[0]}` where kiln has its compiler")
        _LOADED[key] = load(key[0], name)
    return _LOADED[key]


def _bf16_bits(x):
    """A host f32 array's values as bf16 bits (round to nearest even), uint16; a NaN as the quiet
    NaN 0x7FC0, as FloatToBf16 (C++) gives it (its payload rounded would carry into inf or 0)."""
    import numpy
    f32 = numpy.ascontiguousarray(x, numpy.float32)
    bits = f32.view(numpy.uint32).astype(numpy.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(numpy.uint16)
    bits[numpy.isnan(f32)] = 0x7FC0
    return bits


def _host_input(x):
    """A host array a kernel only reads, as load()'s callables take it: contiguous and writable (a
    read-only one, such as a memory-mapped table, copied; load() refuses those, as a kernel may
    write any array it is given)."""
    import numpy
    a = numpy.ascontiguousarray(x)
    return a if a.flags.writeable else a.copy()


def _widened(bits):
    import numpy
    return (bits.astype(numpy.uint32) << 16).view(numpy.float32)


def _host_bound(call, arrays):
    """The emulator's bound on a host call's arrays (as the bindings' calls have it): past 2^26
    elements, a kiln.Error before anything is copied, not minutes of emulation."""
    for what, x in arrays:
        size = _math.prod(x.shape)
        _require(size <= 1 << 26,
                 lambda: f"{call}: {what} has {size} elements; the emulator takes arrays of up to "
                         "2^26 (run it on a GPU)")


def _glue_call(call, name, inputs, outputs, scalars):
    """Runs glue kernel `name` for `call` on inputs + outputs + scalars: inputs (name, array)
    pairs, the first the 16-bit data and any others f32 tables. Host arrays: float16 data runs the
    ".f16" kernels, as f16 CUDA tensors do, and the outputs come back float16 (as kiln.gemm's);
    other data goes in as bf16 bits and the outputs come back widened to float32."""
    data = inputs[0][1]
    host = not _is_torch(data)
    host_f16 = host and _host_f16(data)
    if host_f16:
        import numpy
        outputs = [numpy.full(o.shape, numpy.nan, numpy.float16) for o in outputs]
    # no element to write: no launch (a grid of none is no grid), the types checked all the same
    empty = all(o.size == 0 if host else o.numel() == 0 for o in outputs)
    if not host:
        import torch
        # The kernels read packed 16-bit data (bf16, or f16 for the ".f16" kernels: the first
        # input's type) and f32 tables.
        half = torch.float16 if data.dtype == torch.float16 else torch.bfloat16
        for i, (what, x) in enumerate(inputs):
            _require(x.dtype == (half if i == 0 else torch.float32),
                     lambda: f"{call}: {what} must be {half if i == 0 else torch.float32}, not "
                             f"{x.dtype}")
        if empty:
            return outputs
        _loaded(call, name + (".f16" if half == torch.float16 else ""))(
            *[x.contiguous() for _, x in inputs], *outputs, *scalars)
        return outputs
    import numpy
    # Host arrays: 16-bit data float32 (bf16 values) or float16, tables float32; no other type is
    # converted, as kiln.gemm converts none.
    for i, (what, x) in enumerate(inputs):
        want = (numpy.float16 if host_f16 else numpy.float32) if i == 0 else numpy.float32
        _require(x.dtype == want,
                 lambda: f"{call}: {what} must be {numpy.dtype(want).name}"
                         f"{' (bf16 values) or float16' if i == 0 else ''} on the host, not "
                         f"{x.dtype}")
    if empty:
        return outputs
    _host_bound(call, inputs)
    if host_f16:
        _loaded(call, name + ".f16")(*[_host_input(x) for _, x in inputs], *outputs, *scalars)
        return outputs
    args = [_bf16_bits(x) if i == 0 else _host_input(x) for i, (_, x) in enumerate(inputs)]
    bits = [numpy.full(o.shape, 0xFFFF, numpy.uint16) for o in outputs]  # NaN until written
    _loaded(call, name)(*args, *bits, *scalars)
    for o, b in zip(outputs, bits):
        o[...] = _widened(b)
    return outputs


def _scale(call, scale):
    """An attention call's scale as the bindings take it: None is 0.0 there, the kernels'
    1 / sqrt(D); an explicit scale must be a positive finite number (0 would read as that
    default)."""
    if scale is None:
        return 0.0
    import math
    value = _number(call, "scale", scale)
    _require(math.isfinite(value) and value > 0,
             lambda: f"{call}: scale {scale!r}: a positive number, or None for 1 / sqrt(D)")
    return _in_f32(call, "scale", value)


def _in_f32(call, name, value):
    """A finite number the kernels take as f32: kiln.Error where f32 makes it inf (past 3.4e38)
    or 0 (below about 1.4e-45, but 0 itself)."""
    import math
    import struct
    _require(math.isfinite(value), lambda: f"{call}: {name} {value!r}: must be finite")
    try:
        as_f32 = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        as_f32 = math.inf
    _require(math.isfinite(as_f32) and (as_f32 != 0 or value == 0),
             lambda: f"{call}: {name} {value!r}: the kernels take it as f32, where it is "
                     f"{'0' if as_f32 == 0 else 'inf'}: a magnitude from about 1.4e-45 to 3.4e38")
    return value


def _require_dtypes(call, arrays, host, cuda):
    """kiln.Error unless each (name, array) of `arrays` is of a type of `host` (NumPy's names) on
    the host, of `cuda` (torch's, less "torch.") on the GPU: the bindings' checks, for the calls
    with no element to compute, which reach no binding."""
    for name, x in arrays:
        got = str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")
        want = cuda if _is_torch(x) else host
        _require(got in want, lambda: f"{call}: {name} must be {' or '.join(want)}, not {got}")


def _require(cond, message):
    """kiln.Error(message) unless cond; message may be a function that makes it (an f-string of
    shapes costs microseconds that a call that passes need not spend)."""
    if not cond:
        raise Error(message() if callable(message) else message)


def rope_qkv(qkv, cos, sin, batch, heads_q, heads_kv, *, layout="bhsd"):
    """A fused QKV projection's output [B * S, (Hq + 2 Hkv) * D] into q [B, Hq, S, D] and k, v
    [B, Hkv, S, D] (contiguous), with rotary embeddings applied to q and k: cos and sin are
    tables [S, D / 2] (position s, frequency i; Llama's rotate-half convention), read as f32
    (float64 ones, as NumPy computes angles, converted). layout "bshd":
    q [B, S, Hq, D], k and v [B, S, Hkv, D] instead (kiln.attention's rows layout, whose o is
    then the output projection's rows). Host arrays: float32 qkv runs as bf16 and q, k, v come
    back float32; float16 qkv runs the f16 kernels and they come back float16."""
    _require_arrays("kiln.rope_qkv", numpy_or_torch=True, qkv=qkv, cos=cos, sin=sin)
    batch, heads_q, heads_kv = (_integer("kiln.rope_qkv", name, n) for name, n in
                                (("batch", batch), ("heads_q", heads_q), ("heads_kv", heads_kv)))
    _require(min(batch, heads_q, heads_kv) >= 0,
             f"kiln.rope_qkv: batch, heads_q and heads_kv must be 0 or more, not {batch}, "
             f"{heads_q} and {heads_kv}")
    _require(layout in ("bhsd", "bshd"), f"kiln.rope_qkv: layout '{layout}': 'bhsd' or 'bshd'")
    _require(len(qkv.shape) == 2, f"kiln.rope_qkv: qkv must have rank 2, not {len(qkv.shape)}")
    _require(len(cos.shape) == 2 and tuple(cos.shape) == tuple(sin.shape),
             "kiln.rope_qkv: cos and sin must both be [S, D / 2]")
    cos, sin = _f32_table(cos), _f32_table(sin)
    s, half = cos.shape
    d = 2 * half
    tokens, width = qkv.shape
    _require(tokens == batch * s and width == (heads_q + 2 * heads_kv) * d,
             f"kiln.rope_qkv: qkv {tuple(qkv.shape)} is not [B * S, (Hq + 2 Hkv) * D] = "
             f"[{batch * s}, {(heads_q + 2 * heads_kv) * d}] (S = {s} and D = {d} from cos and "
             f"sin {tuple(cos.shape)}: one row a position of the S, no more)")
    rows = layout == "bshd"
    shape = (lambda h: (batch, s, h, d)) if rows else (lambda h: (batch, h, s, d))
    q = _empty(qkv, shape(heads_q), _type_of(qkv))
    k = _empty(qkv, shape(heads_kv), _type_of(qkv))
    v = _empty(qkv, shape(heads_kv), _type_of(qkv))
    pairs = tokens * (heads_q + 2 * heads_kv) * half
    name = "ops/rope_qkv_rows" if rows else "ops/rope_qkv"
    tables = [("qkv", qkv), ("cos", cos), ("sin", sin)]
    if d % 16 == 0:  # 8 pairs a thread
        return tuple(_glue_call("kiln.rope_qkv", name + "8", tables, [q, k, v],
                                [s, heads_q, heads_kv, d, pairs // 8]))
    return tuple(_glue_call("kiln.rope_qkv", name, tables, [q, k, v],
                            [s, heads_q, heads_kv, d, pairs]))


def _f32_table(x):
    """A table the kernels read as packed f32 (cos, sin), converted where it is not (float64
    angles, as NumPy computes them, included)."""
    if _is_torch(x):
        return x.float().contiguous()
    import numpy
    return numpy.ascontiguousarray(x, numpy.float32)


def swiglu(x):
    """silu(gate) * up over rows [T, 2F] holding gate then up: [T, F]. Host arrays: float32 x
    runs as bf16, float16 x as f16 (the result float16)."""
    _require_arrays("kiln.swiglu", numpy_or_torch=True, x=x)
    _require(len(x.shape) == 2 and x.shape[1] % 2 == 0,
             f"kiln.swiglu: x must be [T, 2F], not {tuple(x.shape)}")
    f = x.shape[1] // 2
    y = _empty(x, (x.shape[0], f), _type_of(x))
    if f % 8 == 0:  # 8 elements a thread
        return _glue_call("kiln.swiglu", "ops/swiglu8", [("x", x)], [y],
                          [f, x.shape[0] * f // 8])[0]
    return _glue_call("kiln.swiglu", "ops/swiglu", [("x", x)], [y], [f, x.shape[0] * f])[0]


def heads_to_rows(x):
    """[B, H, S, D] into [B, S, H, D] (contiguous). Host arrays: float32 x runs as bf16 (its
    values rounded so), float16 x as f16 (the result float16, bit for bit)."""
    _require_arrays("kiln.heads_to_rows", numpy_or_torch=True, x=x)
    _require(len(x.shape) == 4, f"kiln.heads_to_rows: x must have rank 4, not {len(x.shape)}")
    b, h, s, d = x.shape
    y = _empty(x, (b, s, h, d), _type_of(x))
    if d % 8 == 0:  # 8 elements a thread
        return _glue_call("kiln.heads_to_rows", "ops/heads_to_rows8", [("x", x)], [y],
                          [h, s, d, b * h * s * d // 8])[0]
    return _glue_call("kiln.heads_to_rows", "ops/heads_to_rows", [("x", x)], [y],
                      [h, s, d, b * h * s * d])[0]
