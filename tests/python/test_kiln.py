"""The kiln Python module on the PTX emulator with NumPy arrays (no GPU, no torch): every binding
against a NumPy fp64 reference at small ragged sizes, and its error paths. The same calls on torch
CUDA tensors are checked against torch on a GPU (tools/python_gpu_check.py)."""

import os
import unittest

import numpy as np

import kiln

BUNDLES = os.environ.get("KILN_BUNDLE_DIR", kiln.bundle_dir())


def rel_error(got, want):
    """||got - want|| / ||want||; NaN anywhere in got gives inf (never passes)."""
    got = np.asarray(got, np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def bf16(x):
    """x rounded to bf16 (to nearest even), as the kernels see their f32 inputs."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


class RowOps(unittest.TestCase):
    """Host arrays are f32 and run the f32 kernels (ops/softmax.f32, ...): within f32's rounding of
    an fp64 reference, far under what a 16-bit type anywhere on the way would leave."""
    SHAPES = [(1, 1), (3, 1000), (2, 3, 257), (17, 256)]

    def test_softmax(self):
        rng = np.random.default_rng(1)
        for shape in self.SHAPES:
            x = rng.standard_normal(shape).astype(np.float32)
            xr = x.astype(np.float64)
            want = np.exp(xr - xr.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
            self.assertLess(rel_error(kiln.softmax(x), want), 1e-5, shape)

    def test_rms_norm_and_layer_norm(self):
        rng = np.random.default_rng(2)
        for shape in self.SHAPES:
            x = rng.standard_normal(shape).astype(np.float32)
            w = rng.standard_normal(shape[-1]).astype(np.float32)
            b = rng.standard_normal(shape[-1]).astype(np.float32)
            xr, wr, br = (t.astype(np.float64) for t in (x, w, b))
            want = xr / np.sqrt((xr * xr).mean(-1, keepdims=True) + 1e-5) * wr
            self.assertLess(rel_error(kiln.rms_norm(x, w, eps=1e-5), want), 1e-5, shape)
            mean = xr.mean(-1, keepdims=True)
            var = ((xr - mean) ** 2).mean(-1, keepdims=True)
            want = (xr - mean) / np.sqrt(var + 1e-5) * wr + br
            self.assertLess(rel_error(kiln.layer_norm(x, w, b, eps=1e-5), want), 1e-5, shape)

    def test_softmax_over_any_dimension(self):
        # torch's softmax(x, dim): another dimension than the last is made the last and back.
        rng = np.random.default_rng(11)
        x = rng.standard_normal((3, 70, 5)).astype(np.float32)
        xr = x.astype(np.float64)
        for dim in (0, 1, -2, 2, -1):
            want = np.exp(xr - xr.max(dim, keepdims=True))
            want /= want.sum(dim, keepdims=True)
            self.assertLess(rel_error(kiln.softmax(x, dim), want), 1e-5, dim)
            out = np.full_like(x, np.nan)
            self.assertIs(kiln.softmax(x, dim=dim, out=out), out)
            self.assertLess(rel_error(out, want), 1e-5, dim)
        for dim in (3, -4, 1.0):
            with self.assertRaisesRegex(kiln.Error, "is not a dimension of x"):
                kiln.softmax(x, dim)

    def test_norms_without_weight_or_bias(self):
        # torch's optional weight and bias: ones and zeros.
        x = np.random.default_rng(12).standard_normal((4, 300)).astype(np.float32)
        np.testing.assert_array_equal(kiln.rms_norm(x), kiln.rms_norm(x, np.ones(300, np.float32)))
        np.testing.assert_array_equal(
            kiln.layer_norm(x), kiln.layer_norm(x, np.ones(300, np.float32), np.zeros(300, np.float32)))
        w = np.random.default_rng(13).standard_normal(300).astype(np.float32)
        np.testing.assert_array_equal(kiln.layer_norm(x, w), kiln.layer_norm(x, w, np.zeros(300, np.float32)))

    def test_rms_norm_of_tiny_values_without_eps(self):
        # A row of 1e-20: its mean square (1e-40) is subnormal, and a reciprocal square root that
        # flushed it to zero made the row inf; torch's float32 rms_norm gives about +-1.
        x = np.full((2, 300), 1e-20, np.float32)
        x[1] *= -3
        y = kiln.rms_norm(x, eps=0.0)
        self.assertTrue(np.isfinite(y).all())
        np.testing.assert_allclose(y, np.sign(x), rtol=1e-5)

    def test_eps_the_kernels_f32_cannot_hold_is_refused(self):
        # An eps past f32's range (every row 0) or below its smallest (0 where eps was asked for).
        x = np.random.default_rng(15).standard_normal((2, 8)).astype(np.float32)
        for norm in (kiln.rms_norm, kiln.layer_norm):
            for eps in (1e39, 1e-50):
                with self.assertRaisesRegex(kiln.Error, "eps .*: the kernels take it as f32"):
                    norm(x, eps=eps)
            self.assertTrue(np.isfinite(norm(x, eps=0.0)).all())

    def test_layer_norm_of_values_near_the_largest(self):
        # A row of 3e38 summed plainly overflows f32 (its mean inf, the row NaN); torch's running
        # mean gives 0 + b. In the registers' layouts (300 columns) and the loop's (3001).
        for cols in (300, 3001):
            x = np.full((2, cols), 3e38, np.float32)
            x[1] = -x[1]
            x[1, ::2] = -1e38  # a mean of -2e38, deviations of 1e38: their squares overflow too
            b = np.random.default_rng(14).standard_normal(cols).astype(np.float32)
            y = kiln.layer_norm(x, None, b, eps=1e-5)
            self.assertTrue(np.isfinite(y).all(), cols)
            np.testing.assert_allclose(y, np.broadcast_to(b, y.shape), rtol=1e-6, err_msg=str(cols))

    def test_layer_norm_of_a_constant_row(self):
        # A constant row's mean taken as the sum of x * (1/n) lay an ulp off the value (1/n
        # rounded), and the row came out as that ulp over sqrt(eps) (-0.3 for 1e4 over 7); the
        # mean corrected by the mean of x - mean gives 0 + b, as torch's running mean does. In the
        # registers' layouts (7, 1000 columns) and the loop's (3001).
        for cols, value in ((7, 1e4), (1000, 1e5), (1000, 100.0), (3001, -7.77), (1000, 1.2345678)):
            x = np.full((3, cols), value, np.float32)
            b = np.random.default_rng(cols).standard_normal(cols).astype(np.float32)
            np.testing.assert_array_equal(kiln.layer_norm(x, None, b, eps=1e-5),
                                          np.broadcast_to(b, x.shape), err_msg=f"{cols} {value}")
            if abs(value) < 65504:  # (float16's largest)
                np.testing.assert_array_equal(kiln.layer_norm(x.astype(np.float16), None, b),
                                              np.broadcast_to(b.astype(np.float16), x.shape))

    def test_softmax_far_from_zero(self):
        # Logits far from 0: e^(x - max) must be exact at x = max (an fma of x * log2(e) with the
        # rounded max * log2(e) was off by up to a factor 2 here), in the registers' layouts and
        # the loop's (3001 columns).
        for row in ([1.23e7] * 4, [-3.7e8] * 4, [1e6, 0], [1e10] + [0] * 7, [1e36, 0],
                    [2e5 + i for i in range(3001)]):
            x = np.array([row], np.float32)
            xr = x.astype(np.float64)
            want = np.exp(xr - xr.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
            self.assertLess(rel_error(kiln.softmax(x), want), 1e-5, row[:2])

    def test_softmax_of_masked_entries(self):
        # -inf entries (a mask) in the loop's lengths (not a multiple of 8; past 16384) and the
        # registers' (a multiple of 8): 0 there, the rest a softmax; a row all -inf is NaN, as
        # torch's.
        for cols in (4, 129, 16392, 64):
            x = np.random.default_rng(cols).standard_normal((2, cols)).astype(np.float32)
            x[0, 0] = x[1, :cols // 2] = -np.inf
            want = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
            got = kiln.softmax(x)
            self.assertFalse(np.isnan(got).any(), cols)
            self.assertLess(rel_error(got, want), 1e-5, cols)
        self.assertTrue(np.isnan(kiln.softmax(np.full((1, 5), -np.inf, np.float32))).all())

    def test_out_is_written_in_place(self):
        x = np.random.default_rng(3).standard_normal((4, 100)).astype(np.float32)
        out = np.full_like(x, np.nan)
        self.assertIs(kiln.softmax(x, out=out), out)
        self.assertTrue(np.all(np.isfinite(out)))

    def test_any_view_of_x(self):
        # A transpose, a slice with a step, a negative step: copied packed first, as torch takes
        # any view; out comes back packed.
        rng = np.random.default_rng(4)
        x = rng.standard_normal((40, 300)).astype(np.float32)
        w, b = (rng.standard_normal(40).astype(np.float32) for _ in range(2))
        for view in (x.T, x[:, ::3], x[::-1, ::-2]):
            packed = np.ascontiguousarray(view)
            np.testing.assert_array_equal(kiln.softmax(view), kiln.softmax(packed))
            if view.shape[-1] == 40:
                np.testing.assert_array_equal(kiln.layer_norm(view, w[::-1], b[::-1]),
                                              kiln.layer_norm(packed, w[::-1].copy(), b[::-1].copy()))

    def test_errors(self):
        x = np.ones((4, 100), np.float32)
        cases = [
            (lambda: kiln.softmax(x.astype(np.float64)), "x must be f32, not f64"),
            (lambda: kiln.softmax(x[:, :50], out=np.empty((4, 100), np.float32)[:, ::2]),
             "out of shape (4, 50) must be contiguous"),
            (lambda: kiln.rms_norm(x, np.ones(99, np.float32)), "weight has shape (99,); x has 100 columns"),
            (lambda: kiln.rms_norm(x, np.ones((1, 100), np.float32)), "weight must have rank 1"),
            (lambda: kiln.softmax(x, out=np.empty((4, 101), np.float32)), "out has shape (4, 101)"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
            self.assertIsInstance(caught.exception, RuntimeError)


def epilogue_inputs(rng, m, n, k):
    """a (m, k), b (k, n), bias (n,), c and residual (m, n): random normal f32."""
    shapes = [(m, k), (k, n), (n,), (m, n), (m, n)]
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


class Gemm(unittest.TestCase):
    def test_ragged_sizes(self):
        rng = np.random.default_rng(4)
        for m, n, k in [(70, 50, 40), (1, 7, 9), (130, 3, 64), (5, 1, 24)]:
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            got = kiln.gemm(a, b)
            self.assertEqual(got.shape, (m, n))
            self.assertLess(rel_error(got, bf16(a) @ bf16(b)), 1e-2, (m, n, k))
            # Column-major host arrays (as CUDA tensors may be): the same product.
            got_f = kiln.gemm(np.asfortranarray(a), np.asfortranarray(b))
            np.testing.assert_array_equal(got_f, got)

    def test_leading_dimensions_fold_into_rows(self):
        # A linear layer's input (B, S, K), as torch.matmul takes it: the same bytes as the 2-D
        # product of its rows, with out, c and the residual folded alike; a 1-D a is one row.
        rng = np.random.default_rng(21)
        x = rng.standard_normal((2, 3, 5, 40)).astype(np.float32)
        w = rng.standard_normal((40, 24)).astype(np.float32)
        c, res = (rng.standard_normal((2, 3, 5, 24)).astype(np.float32) for _ in range(2))
        flat = kiln.gemm(x.reshape(30, 40), w, c=c.reshape(30, 24), residual=res.reshape(30, 24))
        got = kiln.gemm(x, w, c=c, residual=res)
        self.assertEqual(got.shape, (2, 3, 5, 24))
        np.testing.assert_array_equal(got.reshape(30, 24), flat)
        out = np.full((2, 3, 5, 24), np.nan, np.float32)
        self.assertIs(kiln.gemm(x, w, c=c, residual=res, out=out), out)
        np.testing.assert_array_equal(out, got)
        row = kiln.gemm(x[1, 2, 3], w)
        self.assertEqual(row.shape, (24,))
        np.testing.assert_array_equal(row, kiln.gemm(x[1, 2, 3][None], w)[0])
        with self.assertRaisesRegex(kiln.Error, "leading dimensions"):
            kiln.gemm(x, w, out=np.zeros((6, 5, 24), np.float32))
        with self.assertRaisesRegex(kiln.Error, "without a copy"):
            kiln.gemm(x, w, out=np.zeros((2, 3, 5, 48), np.float32)[..., ::2])
        with self.assertRaisesRegex(kiln.Error, "b .K, N. must have rank 2"):
            kiln.gemm(x, w[None])

    def test_random_calls(self):
        # Calls as a new user makes them (sizes, orders, out types, epilogues drawn from a seed),
        # all valid: each right against NumPy in fp64 on the bf16-rounded inputs.
        rng = np.random.default_rng(15)
        acts = {None: lambda u: u, "relu": lambda u: np.maximum(u, 0),
                "silu": lambda u: u / (1 + np.exp(-u)),
                "gelu": lambda u: 0.5 * u * (1 + np.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3)))}
        for _ in range(16):
            m, n, k = (int(x) for x in rng.integers(1, 100, 3))
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            bias = rng.standard_normal(n).astype(np.float32) if rng.random() < 0.4 else None
            res = rng.standard_normal((m, n)).astype(np.float32) if rng.random() < 0.3 else None
            act = [None, "relu", "silu", "gelu"][int(rng.integers(4))]
            f32 = rng.random() < 0.3
            want = bf16(a).astype(np.float64) @ bf16(b).astype(np.float64)
            want = acts[act](want + (0 if bias is None else bf16(bias)))
            want = want + (0 if res is None else bf16(res))
            got = kiln.gemm(a if rng.random() < 0.5 else np.asfortranarray(a),
                            b if rng.random() < 0.5 else np.asfortranarray(b), bias=bias,
                            residual=res, activation=act, out_dtype="f32" if f32 else None)
            self.assertLess(rel_error(got, want), 1e-3 if f32 else 1e-2, (m, n, k, act, f32))

    def test_float16_host_arrays_run_the_f16_kernels(self):
        rng = np.random.default_rng(5)
        for m, n, k in [(37, 33, 40), (5, 7, 9)]:
            a = rng.standard_normal((m, k)).astype(np.float16)
            b = rng.standard_normal((k, n)).astype(np.float16)
            want = a.astype(np.float64) @ b.astype(np.float64)
            got = kiln.gemm(a, b)
            self.assertEqual(got.dtype, np.float16)
            self.assertLess(rel_error(got, want), 1e-3)  # f16's rounding of the result alone
            got = kiln.gemm(a, b, out_dtype="f32", bias=np.ones(n, np.float16), activation="relu")
            self.assertEqual(got.dtype, np.float32)
            self.assertLess(rel_error(got, np.maximum(want + 1, 0)), 1e-6)
        x = rng.standard_normal((7, 33)).astype(np.float16)
        p = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        got = kiln.softmax(x)
        self.assertEqual(got.dtype, np.float16)
        self.assertLess(rel_error(got, p / p.sum(1, keepdims=True)), 1e-3)
        self.assertEqual(kiln.rms_norm(x).dtype, np.float16)
        with self.assertRaises(kiln.Error) as caught:
            kiln.gemm(a, b.astype(np.float32))
        self.assertIn("a and b must share a type", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:  # broadcastable, but not x's shape
            kiln.softmax(x[:1], out=np.empty((5, 33), np.float16))
        self.assertIn("out has shape (5, 33), not (1, 33)", str(caught.exception))

    def test_float16_host_arrays_take_outs_and_terms_of_the_float32_paths_types(self):
        # An out of another type than the result's (an int out would hold zeros) and c, bias or
        # residual of another than float16 or float32 are refused, as the float32 path refuses
        # them; float16 and float32 terms give the same result.
        rng = np.random.default_rng(15)
        x = rng.standard_normal((4, 10)).astype(np.float16)
        a = rng.standard_normal((5, 32)).astype(np.float16)
        b = rng.standard_normal((32, 8)).astype(np.float16)
        c = rng.standard_normal((5, 8)).astype(np.float16)
        for call, message in [
                (lambda: kiln.softmax(x, out=np.full((4, 10), 7, np.int32)),
                 "kiln.softmax: out must be a float16 host array (as x is), not int32"),
                (lambda: kiln.rms_norm(x, out=np.zeros((4, 10), np.int8)),
                 "kiln.rms_norm: out must be a float16 host array (as x is), not int8"),
                (lambda: kiln.layer_norm(x, out=np.zeros((4, 10), np.float32)),
                 "out must be a float16 host array (as x is), not float32"),
                (lambda: kiln.gemm(a, b, out=np.zeros((5, 8), np.float64)),
                 "kiln.gemm: out must be a float16 host array (float16 a and b; a float32 out asks for an f32 result), not float64"),
                (lambda: kiln.gemm(a, b, out=np.zeros((5, 8), np.float16), out_dtype="f32"),
                 "out must be a float32 host array (out_dtype 'f32'), not float16"),
                (lambda: kiln.gemm(a, b, c=c.astype(np.float64)),
                 "c must be a float16 or float32 host array with float16 a and b, not float64"),
                (lambda: kiln.gemm(a, b, bias=np.ones(8, np.int32)), "bias must be a float16"),
                (lambda: kiln.gemm(a, b, residual=c.astype(np.float64)), "residual must be")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        got = kiln.gemm(a, b, c=c)
        np.testing.assert_array_equal(got, kiln.gemm(a, b, c=c.astype(np.float32)))
        out = np.zeros((5, 8), np.float32)  # a float32 out: the f32 result
        self.assertIs(kiln.gemm(a, b, c=c, out=out), out)
        self.assertLess(rel_error(out, a.astype(np.float64) @ b + c), 1e-3)

    def test_host_terms_in_any_order(self):
        # As a, b, c and the residual, a bias that is a view with a step, and for 8-bit inputs a c
        # or residual in Fortran order, are copied packed (host arrays may be in any order).
        rng = np.random.default_rng(16)
        a = rng.standard_normal((8, 16)).astype(np.float32)
        b = rng.standard_normal((16, 6)).astype(np.float32)
        bias, c = rng.standard_normal(12).astype(np.float32), rng.standard_normal((8, 6))
        c = c.astype(np.float32)
        np.testing.assert_array_equal(kiln.gemm(a, b, bias=bias[::2]),
                                      kiln.gemm(a, b, bias=bias[::2].copy()))
        a8, w8 = np.full((8, 16), 0x38, np.uint8), np.full((6, 16), 0x38, np.uint8)  # e4m3 1.0
        for name in ("c", "residual"):
            got = kiln.gemm(a8, w8.T, scale_a=1.0, scale_b=1.0, **{name: np.asfortranarray(c)})
            np.testing.assert_array_equal(got, kiln.gemm(a8, w8.T, scale_a=1.0, scale_b=1.0,
                                                         **{name: c}))
            self.assertLess(rel_error(got, 16 + bf16(c)), 1e-2, name)

    def test_numbers_and_flags_as_zero_dimensional_arrays(self):
        a, b = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32)
        self.assertEqual(float(kiln.gemm(a, b, alpha=np.array(2.0), out_dtype="f32")[0, 0]), 16.0)
        q = np.ones((1, 1, 4, 64), np.float32)
        kiln.attention(q, q, q, causal=np.array(True))
        kiln.rms_norm(a, eps=np.array(1e-5))
        with self.assertRaises(kiln.Error):
            kiln.gemm(a, b, alpha=np.array("2"))

    def test_fused_epilogues(self):
        m, n, k = 66, 40, 48
        a, b, bias, c, res = epilogue_inputs(np.random.default_rng(5), m, n, k)
        prod = bf16(a) @ bf16(b)
        # The bundled bf16 epilogue: scale, bias per column, GELU (tanh form), residual.
        got = kiln.gemm(a, b, alpha=0.5, beta=2.0, c=c, bias=bias, activation="gelu", residual=res)
        u = 0.5 * prod + 2.0 * bf16(c) + bf16(bias)
        gelu = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
        self.assertLess(rel_error(got, gelu + bf16(res)), 1e-2)
        # The bundled f32 one: scale, SiLU.
        got = kiln.gemm(a, b, alpha=0.5, beta=2.0, c=c, activation="silu", out_dtype="f32")
        u = 0.5 * prod + 2.0 * c
        self.assertLess(rel_error(got, u / (1 + np.exp(-u))), 1e-3)

    def test_swiglu_fused_into_the_gate_up_projection(self):
        rng = np.random.default_rng(6)
        for t, h, f in [(37, 72, 40), (1, 24, 8)]:
            x = rng.standard_normal((t, h)).astype(np.float32)
            wg = rng.standard_normal((f, h)).astype(np.float32)
            wu = rng.standard_normal((f, h)).astype(np.float32)
            w = kiln.swiglu_weights(wg, wu)
            self.assertEqual(w.shape, (2 * f, h))
            got = kiln.gemm(x, np.ascontiguousarray(w.T), activation="swiglu")
            self.assertEqual(got.shape, (t, f))
            gate, up = bf16(x) @ bf16(wg).T, bf16(x) @ bf16(wu).T
            self.assertLess(rel_error(got, gate / (1 + np.exp(-gate)) * up), 1e-2, (t, h, f))

    def test_rope_fused_into_the_qkv_projection(self):
        # Two query heads and one key head turned, one value head not; positions repeat every
        # `period` rows (B sequences of S tokens: period S). The reference turns the plain
        # product as Llama does (rotate-half), then reads q and k in rope_order.
        rng = np.random.default_rng(9)
        for t, h, d, period in [(37, 40, 32, 20), (16, 24, 16, 16)]:
            hq, hkv = 2, 1
            x = rng.standard_normal((t, h)).astype(np.float32)
            wq = rng.standard_normal((hq * d, h)).astype(np.float32)
            wk = rng.standard_normal((hkv * d, h)).astype(np.float32)
            wv = rng.standard_normal((hkv * d, h)).astype(np.float32)
            angles = np.arange(period)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)[None, :]
            cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
            w = np.concatenate([kiln.rope_weights(np.concatenate([wq, wk]), d), wv])
            angles = kiln.rope_angles(cos, sin)
            self.assertEqual((angles.shape, angles.dtype), ((period, d // 2), np.int32))
            got = kiln.gemm(x, np.ascontiguousarray(w.T), rope=(angles, (hq + hkv) * d, d))
            self.assertEqual(got.shape, (t, (hq + 2 * hkv) * d))
            qk = bf16(x) @ np.concatenate([bf16(wq), bf16(wk)]).T
            pos = np.arange(t) % period
            c, s = np.tile(bf16(cos)[pos], (1, 2)), np.tile(bf16(sin)[pos], (1, 2))
            turned = []
            for head in range(hq + hkv):
                y = qk[:, head * d:(head + 1) * d]
                half = np.concatenate([-y[:, d // 2:], y[:, :d // 2]], axis=1)  # rotate_half
                turned.append((y * c + half * s)[:, kiln.rope_order(d)])
            want = np.concatenate(turned + [bf16(x) @ bf16(wv).T], axis=1)
            self.assertLess(rel_error(got, want), 1e-2, (t, h, d))
            # The value head is stored as it is; a turned column differs from the plain product.
            self.assertLess(rel_error(got[:, (hq + hkv) * d:], want[:, (hq + hkv) * d:]), 1e-2)

    def test_rope_errors(self):
        x, w = np.ones((8, 16), np.float32), np.ones((16, 64), np.float32)
        angles = kiln.rope_angles(np.ones((8, 16), np.float32), np.zeros((8, 16), np.float32))
        cases = [
            # rows and dim are counts: a float or a string is refused, not truncated
            (lambda: kiln.gemm(x, w, rope=(angles, 48.7, 16)),
             "rope's rows (rope=(angles, rows, dim)) must be an integer, not float 48.7"),
            (lambda: kiln.gemm(x, w, rope=(angles, 64, "32")),
             "rope's dim (rope=(angles, rows, dim)) must be an integer, not str '32'"),
            (lambda: kiln.gemm(x, w, rope=(angles, True, 32)), "must be an integer, not bool"),
            # the terms given with it by their arguments' names
            (lambda: kiln.gemm(x, w, bias=np.ones(64, np.float32), rope=(angles, 64, 32)),
             "residual with it (given: bias)"),
            (lambda: kiln.gemm(x, w, activation="gelu", alpha=2.0, rope=(angles, 64, 32)),
             "(given: c, alpha or beta, activation='gelu')"),
            (lambda: kiln.gemm(x, w, rope=(angles[:, :12].copy(), 48, 24)),
             "rope_dim (a head's columns) must be a positive multiple of 16, not 24"),
            (lambda: kiln.gemm(x, w, rope=(angles, 48, 32)),
             "must be a positive multiple of rope_dim (32) up to N (64), not 48"),
            (lambda: kiln.gemm(x, w, rope=(angles[:, :8].copy(), 64, 32)),
             "rope's angles must be [period, rope_dim / 2] = [8, 16], not (8, 8)"),
            (lambda: kiln.gemm(x, w, rope=(angles.astype(np.float32), 64, 32)), "rope's angles"),
            (lambda: kiln.gemm(x, w, residual=np.ones((8, 64), np.float32),
                               rope=(angles, 64, 32)), "kiln.gemm: rope is fused alone"),
            (lambda: kiln.gemm(x, w, rope=(angles, 64)), "rope=(angles, rows, dim)"),
            (lambda: kiln.rope_angles(np.ones((8, 16)), np.ones((8, 8))), "both be [P, dim / 2]"),
            (lambda: kiln.rope_weights(np.ones((24, 4)), 16), "F a multiple of 16"),
            (lambda: kiln.rope_order(40), "multiple of 16, not 40"),
            (lambda: kiln.rope_weights(np.ones((24, 4)), 0), "multiple of 16, not 0"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        # NumPy's integers are integers
        np.testing.assert_array_equal(kiln.gemm(x, w, rope=(angles, np.int64(64), np.int32(32))),
                                      kiln.gemm(x, w, rope=(angles, 64, 32)))

    def test_swiglu_errors(self):
        x = np.ones((8, 16), np.float32)
        cases = [
            (lambda: kiln.gemm(x, np.ones((16, 24), np.float32), activation="swiglu"),
             "swiglu takes N a multiple of 16"),
            (lambda: kiln.gemm(x, np.ones((16, 32), np.float32), bias=np.ones(32, np.float32),
                               activation="swiglu"), "activation='swiglu' is fused alone: no c, alpha, beta, bias or residual with it (given: bias)"),
            (lambda: kiln.gemm(x, np.ones((16, 32), np.float32), activation="swiglu",
                               out=np.empty((8, 32), np.float32)), "out has shape (8, 32), not (8, 16)"),
            (lambda: kiln.swiglu_weights(np.ones((12, 4)), np.ones((12, 4))), "F a multiple of 8"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))

    def test_epilogues_no_bundle_fuses_run_as_a_pass_of_their_own(self):
        # Bundles fuse a chosen few combinations; the rest (a linear layer's bias, an activation
        # alone, alpha without c, c with beta = 0, ...) run as the product in f32 and then
        # gemm/epilogue_pass, with the fused epilogues' arithmetic.
        rng = np.random.default_rng(6)
        for m, n, k in ((33, 17, 40), (64, 64, 64)):
            a, b, bias, c, res = epilogue_inputs(rng, m, n, k)
            prod = bf16(a) @ bf16(b)
            gelu = lambda u: 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
            for kw, want, bound in [
                    (dict(bias=bias), prod + bf16(bias), 1e-2),
                    (dict(activation="relu"), np.maximum(prod, 0), 1e-2),
                    (dict(alpha=2.0), 2 * prod, 1e-2),
                    (dict(c=c), prod + bf16(c), 1e-2),  # beta is 1 with c (torch.addmm's)
                    (dict(c=c, beta=0.0), prod, 1e-2),
                    (dict(bias=bias, activation="gelu", out_dtype="f32"), gelu(prod + bias), 1e-3),
                    (dict(alpha=0.5, beta=2.0, c=c, activation="silu", residual=res),
                     (lambda u: u / (1 + np.exp(-u)))(0.5 * prod + 2 * bf16(c)) + bf16(res),
                     1e-2)]:
                self.assertLess(rel_error(kiln.gemm(a, b, **kw), want), bound, (m, n, k, kw))
        # NaN stays NaN through the epilogue (relu as well: max.f32 would make it 0), and beta 0
        # does not read c (torch.addmm's), so a NaN there does not reach out.
        an = a.copy()
        an[0, 0] = np.nan
        for act in ("relu", "gelu", "silu"):
            got = kiln.gemm(an, b, activation=act, out_dtype="f32")
            self.assertTrue(np.isnan(got[0]).all() and not np.isnan(got[1:]).any(), act)
        np.testing.assert_array_equal(kiln.gemm(a, b, c=np.full_like(c, np.nan), beta=0.0),
                                      kiln.gemm(a, b))
        with self.assertRaises(kiln.Error) as caught:  # beta scales c: without one, an error
            kiln.gemm(a, b, beta=1.0)
        self.assertIn("beta=1.0 scales c, and no c was given", str(caught.exception))

    def test_errors(self):
        a = np.ones((8, 16), np.float32)
        cases = [
            (lambda: kiln.gemm(a, np.ones((15, 4), np.float32)), "do not multiply"),
            (lambda: kiln.gemm(a, np.ones((16, 4), np.float32), bias=np.ones(5, np.float32)),
             "bias has shape (5,)"),
            (lambda: kiln.gemm(a, np.ones((16, 4), np.float32), activation="tanh"),
             "activation 'tanh': 'relu', 'gelu', 'silu' or 'swiglu'"),
            (lambda: kiln.gemm(a[None], np.ones((16, 4), np.float32), out=np.empty((8, 4), np.float32)),
             "out must have a's leading dimensions (1, 8), not shape (8, 4)"),
            (lambda: kiln.gemm(a, np.ones(16, np.float32)), "must have rank 2, not shapes (8, 16) and (16,)"),
            (lambda: kiln.gemm(a, np.ones((16, 4), np.float32), out_dtype="f64"),
             "out_dtype 'f64': 'bf16', 'f16' or 'f32'"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))


def attention_reference(q, k, v, causal, scale):
    """fp64 attention over [B, H, S, D] with grouped heads and bottom-right causal masks: (o, lse);
    a row that sees no key gets o = 0 and lse = -inf."""
    b, hq, s, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if causal:
        i = np.arange(s)[:, None]
        j = np.arange(skv)[None, :]
        scores = np.where(j <= i + skv - s, scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    seen = np.isfinite(top)
    p = np.where(seen, np.exp(scores - np.where(seen, top, 0)), 0)
    total = p.sum(-1, keepdims=True)
    o = np.where(seen, np.einsum("bhij,bhjd->bhid", p, v) / np.where(seen, total, 1), 0)
    lse = np.where(seen[..., 0], (top + np.log(np.where(seen, total, 1)))[..., 0], -np.inf)
    return o, lse


def backward_reference(q, k, v, o, d_o, causal):
    """fp64 (dq, dk, dv) over [B, H, S, D] arrays (rounded to bf16 first, as kiln reads them), o
    kiln's forward's; grouped heads sum dk and dv over the query heads of a KV head."""
    b, hq, s, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    scale, g = d ** -0.5, hq // hkv
    qb, kb, vb, ob, gb = (bf16(x).astype(np.float64) for x in (q, k, v, o, d_o))
    kr, vr = np.repeat(kb, g, axis=1), np.repeat(vb, g, axis=1)
    _, lse = attention_reference(qb, kb, vb, causal, scale)
    scores = scale * np.einsum("bhid,bhjd->bhij", qb, kr)
    if causal:
        i, j = np.arange(s)[:, None], np.arange(skv)[None, :]
        scores = np.where(j <= i + skv - s, scores, -np.inf)
    p = np.exp(scores - lse[..., None])
    dp = np.einsum("bhid,bhjd->bhij", gb, vr)
    ds = p * (dp - (gb * ob).sum(-1)[..., None])
    return (scale * np.einsum("bhij,bhjd->bhid", ds, kr),
            scale * np.einsum("bhij,bhid->bhjd", ds, qb).reshape(b, hkv, g, skv, d).sum(2),
            np.einsum("bhij,bhid->bhjd", p, gb).reshape(b, hkv, g, skv, d).sum(2))


def e4m3_values():
    """e4m3's 127 finite non-negative values by code (bias 7, no infinities; 0x7f is NaN)."""
    codes = np.arange(127)
    e, m = codes >> 3, codes & 7
    return np.where(e > 0, (8 + m) * 2.0 ** (e - 10), m * 2.0 ** -9)


def quantize_e4m3(x, scale):
    """x / scale rounded to the nearest e4m3 (saturating at 448): its bytes and the values."""
    values = e4m3_values()
    y = np.clip(np.abs(x / scale), 0, 448)
    hi = np.clip(np.searchsorted(values, y), 1, 126)
    code = np.where(values[hi] - y < y - values[hi - 1], hi, hi - 1)
    signed = np.where(x < 0, -values[code], values[code])
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8), signed * scale


class GemmFp8(unittest.TestCase):
    M, N, K = 72, 136, 272  # K: two blocks of 128 and a part

    def operands(self, scaling, seed=9):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((self.M, self.K))
        w = rng.standard_normal((self.N, self.K))  # the weight, (N, K)
        kb = -(-self.K // 128)
        if scaling == "tensorwise":
            sa, sw = np.float32([np.abs(a).max() / 448]), np.float32([np.abs(w).max() / 448])
            fa, fw = np.full_like(a, sa[0]), np.full_like(w, sw[0])
        elif scaling == "rowwise":
            sa = (np.abs(a).max(1) / 448).astype(np.float32)
            sw = (np.abs(w).max(1) / 448).astype(np.float32)
            fa, fw = np.repeat(sa[:, None], self.K, 1), np.repeat(sw[:, None], self.K, 1)
        else:  # a per 1x128, the weight per 128x128
            pad = kb * 128 - self.K
            ap = np.pad(np.abs(a), ((0, 0), (0, pad))).reshape(self.M, kb, 128)
            sa = (ap.max(2) / 448).astype(np.float32)
            nb = -(-self.N // 128)
            wp = np.pad(np.abs(w), ((0, nb * 128 - self.N), (0, pad))).reshape(nb, 128, kb, 128)
            sw = (wp.max((1, 3)) / 448).astype(np.float32)
            fa = np.repeat(sa, 128, 1)[:, :self.K]
            fw = np.repeat(np.repeat(sw, 128, 0), 128, 1)[:self.N, :self.K]
        a8, ad = quantize_e4m3(a, fa)
        w8, wd = quantize_e4m3(w, fw)
        self.w_dequantized = wd
        return a8, w8, sa, sw, ad @ wd.T, a @ w.T

    def test_every_scaling_against_the_dequantized_product(self):
        for scaling in ("tensorwise", "rowwise", "blockwise"):
            a8, w8, sa, sw, want, exact = self.operands(scaling)
            got = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw)
            self.assertEqual(got.shape, (self.M, self.N))
            # bf16's rounding of C; the quantization moves the product by a few percent.
            self.assertLess(rel_error(got, want), 5e-3, scaling)
            self.assertLess(rel_error(got, exact), 0.08, scaling)
            f32 = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, out_dtype="f32")
            self.assertLess(rel_error(f32, want), 1e-5, scaling)
            if scaling == "tensorwise":  # one value each: numbers will do
                np.testing.assert_array_equal(
                    kiln.gemm(a8, w8.T, scale_a=float(sa[0]), scale_b=sw[0], out_dtype="f32"), f32)

    def test_row_and_block_scales_fold_with_a(self):
        # a (2, 36, K) with its scales (2, 36) or (2, 36, K/128): the 2-D product's bytes.
        for scaling in ("rowwise", "blockwise"):
            a8, w8, sa, sw, want, _ = self.operands(scaling)
            flat = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw)
            got = kiln.gemm(a8.reshape(2, 36, self.K), w8.T,
                            scale_a=sa.reshape((2, 36) + sa.shape[1:]), scale_b=sw)
            self.assertEqual(got.shape, (2, 36, self.N))
            np.testing.assert_array_equal(got.reshape(self.M, self.N), flat, scaling)

    def test_epilogues_no_variant_fuses_run_as_a_pass(self):
        # No 8-bit variant fuses a bias with GELU, or alpha alone: the product in f32, then
        # gemm/epilogue_pass over it.
        rng = np.random.default_rng(9)
        bias = rng.standard_normal(self.N).astype(np.float32)
        for scaling in ("tensorwise", "rowwise", "blockwise"):
            a8, w8, sa, sw, want, _ = self.operands(scaling)
            got = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, bias=bias, activation="gelu")
            u = want + bf16(bias)
            gelu = 0.5 * u * (1 + np.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3)))
            self.assertLess(rel_error(got, gelu), 5e-3, scaling)
            got = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, alpha=0.5)
            self.assertLess(rel_error(got, 0.5 * want), 5e-3, scaling)

    def test_a_residual_fused_under_every_scaling(self):
        r = np.random.default_rng(8).standard_normal((self.M, self.N)).astype(np.float32)
        for scaling in ("tensorwise", "rowwise", "blockwise"):
            a8, w8, sa, sw, want, _ = self.operands(scaling)
            got = kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, residual=r)
            self.assertLess(rel_error(got, want + r), 5e-3, scaling)

    def test_quantize_feeds_the_blockwise_gemm(self):
        x = np.random.default_rng(4).standard_normal((self.M, self.K)).astype(np.float32) * 3
        q, s = kiln.quantize_e4m3(x)
        kb = -(-self.K // 128)
        self.assertEqual((q.shape, s.shape), ((self.M, self.K), (self.M, kb)))
        xr = bf16(x)
        amax = np.pad(np.abs(xr), ((0, 0), (0, kb * 128 - self.K))).reshape(self.M, kb, 128)
        self.assertLess(np.max(np.abs(s / (amax.max(2) / 448) - 1)), 1e-6)
        factors = np.repeat(s.astype(np.float64), 128, 1)[:, :self.K]
        got = np.where(q & 0x80, -1, 1) * e4m3_values()[q & 0x7F] * factors
        _, want = quantize_e4m3(xr, factors)
        self.assertLess(np.mean(got != want), 0.01)  # the same rounding but for rare ties
        self.assertLess(rel_error(got, xr), 0.04)  # e4m3's 3 bits
        _, w8, _, sw, _, _ = self.operands("blockwise")
        product = kiln.gemm(q, w8.T, scale_a=s, scale_b=sw)
        self.assertLess(rel_error(product, got @ self.w_dequantized.T), 5e-3)
        # One row as a 1-D a: its scales as kiln.quantize_e4m3 gives them for x[None], (1, K/128),
        # or as that row's (K/128,); the result is the 2-D call's row (the scales had been read
        # as (1, 1, K/128) and refused).
        for row_scales in (s[3:4], s[3]):
            one = kiln.gemm(q[3], w8.T, scale_a=row_scales, scale_b=sw)
            self.assertEqual(one.shape, (self.N,))
            np.testing.assert_array_equal(one, product[3])
        # A linear layer's (batch, tokens, K) input: q and scales keep its leading dimensions,
        # the same bytes and factors as the 2-D call's, and kiln.gemm folds both as it folds a.
        q3, s3 = kiln.quantize_e4m3(x.reshape(2, self.M // 2, self.K))  # (M is even)
        self.assertEqual((q3.shape, s3.shape), ((2, self.M // 2, self.K), (2, self.M // 2, kb)))
        np.testing.assert_array_equal(q3.reshape(self.M, self.K), q)
        np.testing.assert_array_equal(s3.reshape(self.M, kb), s)
        np.testing.assert_array_equal(
            kiln.gemm(q3, w8.T, scale_a=s3, scale_b=sw).reshape(self.M, self.N), product)

    def test_quantize_groups_of_tiny_values(self):
        # A group whose largest magnitude is subnormal (its zeros once came out as e4m3's NaN, 0
        # times an infinite factor) or just above f32's smallest normal number (every value once
        # came out 0): zeros stay 0, the values come back, the scales are normal numbers.
        x = np.zeros((2, 256), np.float32)
        x[0, 0], x[0, 130] = 1e-40, -3e-39
        x[1, :128] = 1e-37
        for q, s in (kiln.quantize_e4m3(x), kiln.quantize_e4m3_blocks(x)[:2]):
            self.assertFalse(np.any((q & 0x7F) == 0x7F), "an e4m3 NaN")
            self.assertTrue(np.all(s >= np.finfo(np.float32).tiny), s)
            factors = np.repeat(np.broadcast_to(s, (2, 2)), 128, 1)  # (blocks: one row of scales)
            got = np.where(q & 0x80, -1, 1) * e4m3_values()[q & 0x7F] * factors
            self.assertEqual(got[x == 0].tolist(), [0.0] * int(np.sum(x == 0)))
            for row, group in ((0, 0), (0, 1), (1, 0)):  # (each its own scale of magnitudes)
                part = (row, slice(128 * group, 128 * group + 128))
                self.assertLess(rel_error(got[part], bf16(x)[part]), 0.04, (row, group))

    def test_quantize_blocks_and_transpose_feed_both_products(self):
        n, k = 144, 272  # 2 x 3 blocks, the last of each partial
        w = np.random.default_rng(5).standard_normal((n, k)).astype(np.float32) * 2
        w[:16, 128:256] = 0  # a part of a block at zero; the block's scale comes from the rest
        w[128:, 256:] = 0  # a whole (partial) block at zero: scale 1, zero bytes
        q, s, q_t, s_t = kiln.quantize_e4m3_blocks(w, transpose=True)
        self.assertEqual((q.shape, s.shape, q_t.shape, s_t.shape), ((n, k), (2, 3), (k, n), (3, 2)))
        wr = bf16(w)
        amax = np.pad(np.abs(wr), ((0, 256 - n), (0, 384 - k))).reshape(2, 128, 3, 128)
        want_s = np.where(amax.max((1, 3)) > 0, amax.max((1, 3)) / 448, 1)
        self.assertEqual(s[1, 2], 1)
        self.assertFalse(q[128:, 256:].any())
        self.assertLess(np.max(np.abs(s / want_s - 1)), 1e-6)
        self.assertTrue(np.array_equal(q_t, q.T))
        self.assertTrue(np.array_equal(s_t, s.T))
        factors = np.repeat(np.repeat(s.astype(np.float64), 128, 0), 128, 1)[:n, :k]
        got = np.where(q & 0x80, -1, 1) * e4m3_values()[q & 0x7F] * factors
        _, want = quantize_e4m3(wr, factors)
        self.assertLess(np.mean(got != want), 0.01)  # the same rounding but for rare ties
        self.assertLess(rel_error(got, wr), 0.04)
        q2, s2 = kiln.quantize_e4m3_blocks(w)
        self.assertTrue(np.array_equal(q2, q) and np.array_equal(s2, s))
        # Forward, x @ w.T (K the product's axis), and backward, dy @ w (N the product's axis).
        x = np.random.default_rng(6).standard_normal((40, k)).astype(np.float32)
        xq, sx = kiln.quantize_e4m3(x)
        xd = np.where(xq & 0x80, -1, 1) * e4m3_values()[xq & 0x7F] * np.repeat(sx, 128, 1)[:, :k]
        self.assertLess(rel_error(kiln.gemm(xq, q.T, scale_a=sx, scale_b=s), xd @ got.T), 5e-3)
        dy = np.random.default_rng(7).standard_normal((40, n)).astype(np.float32)
        dq, sdy = kiln.quantize_e4m3(dy)
        dyd = np.where(dq & 0x80, -1, 1) * e4m3_values()[dq & 0x7F] * np.repeat(sdy, 128, 1)[:, :n]
        self.assertLess(rel_error(kiln.gemm(dq, q_t.T, scale_a=sdy, scale_b=s_t), dyd @ got), 5e-3)
        with self.assertRaisesRegex(kiln.Error, "K and N a multiple of 16"):
            kiln.quantize_e4m3_blocks(w[:100], transpose=True)

    def test_an_e5m2_host_array_by_an_e4m3_one(self):
        # e5m2 (bias 15, largest 57344, codes to 0x7b): a gradient's bytes from the host.
        codes = np.arange(0x7C)
        e, m = codes >> 2, codes & 3
        values = np.where(e > 0, (4 + m) * 2.0 ** (e - 17), m * 2.0 ** -16)
        rng = np.random.default_rng(12)
        g = rng.standard_normal((self.M, self.K))
        sg = np.float32([np.abs(g).max() / 57344])
        y = np.clip(np.abs(g / sg[0]), 0, 57344)
        hi = np.clip(np.searchsorted(values, y), 1, 0x7B)
        code = np.where(values[hi] - y < y - values[hi - 1], hi, hi - 1)
        g8 = (code | np.where(g < 0, 0x80, 0)).astype(np.uint8)
        gd = np.where(g < 0, -values[code], values[code]) * sg[0]
        w = rng.standard_normal((self.N, self.K))
        sw = np.float32([np.abs(w).max() / 448])
        w8, wd = quantize_e4m3(w, np.full_like(w, sw[0]))
        got = kiln.gemm(g8, w8.T, scale_a=sg, scale_b=sw, fp8_types=("e5m2", "e4m3"))
        self.assertLess(rel_error(got, gd @ wd.T), 5e-3)
        # Read as e4m3, the same bytes are another product.
        self.assertGreater(rel_error(kiln.gemm(g8, w8.T, scale_a=sg, scale_b=sw), gd @ wd.T), 0.5)
        with self.assertRaisesRegex(kiln.Error, "fp8_types is a's and b's 8-bit types"):
            kiln.gemm(g8, w8.T, scale_a=sg, scale_b=sw, fp8_types=("e5m2", "e3m4"))

    def test_errors(self):
        a8, w8, sa, sw, _, _ = self.operands("blockwise")
        for call, says in [
            (lambda: kiln.gemm(a8, w8.T, scale_a=sa), "need scale_a and scale_b"),
            (lambda: kiln.gemm(a8, w8.T, scale_a=[1.0], scale_b=1.0),
             "kiln.gemm: scale_a must be a torch tensor or a NumPy array, not list"),
            (lambda: kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, bias=sa), "bias has shape"),
            (lambda: kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw, activation="swiglu"),
             "swiglu is fused for 16-bit inputs only"),
            (lambda: kiln.gemm(a8, w8.T, scale_a=sa, scale_b=sw,
                               residual=np.zeros((self.M, 8), np.float32)), "residual has shape"),
            (lambda: kiln.gemm(a8.astype(np.float32), w8.T, scale_a=sa, scale_b=sw),
             "must be a float8_e4m3fn or float8_e5m2 tensor, or a uint8"),
            (lambda: kiln.gemm(a8, np.ascontiguousarray(w8.T), scale_a=sa, scale_b=sw),
             "b column-major"),
            (lambda: kiln.gemm(a8, w8.T, scale_a=sa[:, :1], scale_b=sw), "name no scaling"),
            (lambda: kiln.gemm(np.ascontiguousarray(a8[:, :200]),
                               np.ascontiguousarray(w8[:, :200]).T, scale_a=sa[:, :2].copy(),
                               scale_b=sw[:, :2].copy()), "multiples of 16"),
        ]:
            with self.assertRaises(kiln.Error) as e:
                call()
            self.assertIn(says, str(e.exception))


class GroupedGemm(unittest.TestCase):
    E, N, K = 3, 72, 40

    def weights(self, rng):
        return rng.standard_normal((self.E, self.N, self.K)).astype(np.float32)

    def test_contiguous_groups_and_unowned_rows(self):
        rng = np.random.default_rng(5)
        tokens = [9, 0, 1]  # an empty expert and a one-token one; two rows after the last
        x = rng.standard_normal((sum(tokens) + 2, self.K)).astype(np.float32)
        w = self.weights(rng)
        offsets = np.cumsum(tokens).astype(np.int32)
        got = kiln.grouped_gemm(x, w, offsets)
        self.assertEqual(got.shape, (x.shape[0], self.N))
        begin = 0
        for e, t in enumerate(tokens):
            want = bf16(x[begin:begin + t]) @ bf16(w[e]).T
            if t:
                self.assertLess(rel_error(got[begin:begin + t], want), 5e-3, e)
            begin += t
        self.assertTrue(np.all(np.isnan(got[begin:])), "rows no expert owns stay unwritten")
        # an out given keeps them, as on a GPU; the owned rows are the same
        out = np.full((x.shape[0], self.N), 7.0, np.float32)
        self.assertIs(kiln.grouped_gemm(x, w, offsets, out=out), out)
        self.assertTrue(np.all(out[begin:] == 7.0))
        np.testing.assert_array_equal(out[:begin], got[:begin])

    def test_masked_counts(self):
        rng = np.random.default_rng(6)
        counts = np.int32([2, 8, -3])  # a negative count is no rows
        x = rng.standard_normal((self.E, 8, self.K)).astype(np.float32)
        w = self.weights(rng)
        got = kiln.grouped_gemm(x, w, counts=counts)
        for e, c in enumerate(np.maximum(counts, 0)):
            if c:
                self.assertLess(rel_error(got[e, :c], bf16(x[e, :c]) @ bf16(w[e]).T), 5e-3, e)
            self.assertTrue(np.all(np.isnan(got[e, c:])), e)
        out = np.full(got.shape, 7.0, np.float32)
        kiln.grouped_gemm(x, w, counts=counts, out=out)
        for e, c in enumerate(np.maximum(counts, 0)):
            self.assertTrue(np.all(out[e, c:] == 7.0), e)
            np.testing.assert_array_equal(out[e, :c], got[e, :c])

    def test_e4m3_block_scaled(self):
        rng = np.random.default_rng(7)
        tokens, n, k = [5, 0, 9], 128, 144  # k: a block of 128 and a part
        kb = -(-k // 128)
        x = rng.standard_normal((sum(tokens), k))
        w = rng.standard_normal((len(tokens), n, k))
        pad = kb * 128 - k
        sx = np.pad(np.abs(x), ((0, 0), (0, pad))).reshape(-1, kb, 128).max(2) / 448
        sw = np.pad(np.abs(w), ((0, 0), (0, 0), (0, pad))).reshape(
            len(tokens), 1, 128, kb, 128).max((2, 4)) / 448
        x8, xd = quantize_e4m3(x, np.repeat(sx, 128, 1)[:, :k])
        w8, wd = quantize_e4m3(w, np.repeat(np.repeat(sw, 128, 1), 128, 2)[:, :n, :k])
        got = kiln.grouped_gemm(x8, w8, np.cumsum(tokens).astype(np.int32),
                                scale_x=np.asfortranarray(sx, np.float32),
                                scale_w=np.ascontiguousarray(sw, np.float32))
        begin = 0
        for e, t in enumerate(tokens):
            if t:
                self.assertLess(rel_error(got[begin:begin + t], xd[begin:begin + t] @ wd[e].T),
                                5e-3, e)
            begin += t
        with self.assertRaises(kiln.Error) as err:  # scales with the rows not contiguous
            kiln.grouped_gemm(x8, w8, np.cumsum(tokens).astype(np.int32),
                              scale_x=np.ascontiguousarray(sx, np.float32),
                              scale_w=np.ascontiguousarray(sw, np.float32))
        self.assertIn("rows contiguous", str(err.exception))
        self.assertIn("scale_x (", str(err.exception))  # the one scale at fault, by name
        with self.assertRaises(kiln.Error) as err:  # scale_w of another shape: named alone
            kiln.grouped_gemm(x8, w8, np.cumsum(tokens).astype(np.int32),
                              scale_x=np.asfortranarray(sx, np.float32),
                              scale_w=np.ascontiguousarray(sw[:, :, :1], np.float32))
        self.assertIn("scale_w must be", str(err.exception))
        self.assertNotIn("scale_x", str(err.exception))

    def test_masked_e4m3_takes_the_quantizers_scales_as_they_come(self):
        # kiln.quantize_e4m3 of an (E, C, K) x gives scales (E, C, kb): a masked call takes them
        # as they are, the same as their (E * C, kb) view.
        rng = np.random.default_rng(8)
        e, c, n, k = 2, 16, 128, 128
        qx, sx = kiln.quantize_e4m3(rng.standard_normal((e, c, k)).astype(np.float32))
        self.assertEqual(sx.shape, (e, c, 1))
        blocks = [kiln.quantize_e4m3_blocks(rng.standard_normal((n, k)).astype(np.float32))
                  for _ in range(e)]
        qw = np.stack([q for q, _ in blocks])
        sw = np.ascontiguousarray(np.stack([s for _, s in blocks]))
        counts = np.int32([5, 16])
        got = kiln.grouped_gemm(qx, qw, counts=counts, scale_x=sx, scale_w=sw)
        want = kiln.grouped_gemm(qx, qw, counts=counts, scale_x=sx.reshape(e * c, 1), scale_w=sw)
        np.testing.assert_array_equal(got[0, :5], want[0, :5])
        np.testing.assert_array_equal(got[1], want[1])

    def test_errors_name_the_problem(self):
        x = np.zeros((4, self.K), np.float32)
        w = np.zeros((self.E, self.N, self.K), np.float32)
        # With no column to write, the experts' count is still 1 to 1024.
        with self.assertRaisesRegex(kiln.Error, "E = 2000 experts: 1 to 1024"):
            kiln.grouped_gemm(x, np.zeros((2000, 0, self.K), np.float32),
                              np.full(2000, 4, np.int32))
        for call, says in [
            (lambda: kiln.grouped_gemm(x, w), "either offsets"),
            (lambda: kiln.grouped_gemm(x, w, np.int32([1, 2])), "do not make"),
            (lambda: kiln.grouped_gemm(x, w, np.float32([1, 2, 4])), "offsets must"),
            (lambda: kiln.grouped_gemm(x[:, :36].copy(), w[:, :, :36].copy(), np.int32([1, 2, 4])),
             "multiples of 8"),
        ]:
            with self.assertRaises(kiln.Error) as e:
                call()
            self.assertIn(says, str(e.exception))


class Attention(unittest.TestCase):
    def test_scores_past_f32s_precision_are_nan_never_a_masked_row(self):
        # Scores times the scale past about 2^31 round the exponent's argument by more than its
        # range, so every weight of a row may underflow; that row is NaN (o and lse), never
        # o = 0 and lse = -inf, which a row that sees no key gives (and the rows here all see
        # keys). Plain scales and a causal row that sees none stay exact.
        rng = np.random.default_rng(0)
        k = rng.standard_normal((1, 1, 8, 64)).astype(np.float32)
        v = rng.standard_normal((1, 1, 8, 64)).astype(np.float32)
        q = np.ascontiguousarray(-k.mean(2, keepdims=True))
        for scale in (1e9, 3e9, 1e10, 1e11, 1e15, 1e20):
            o, lse = kiln.attention(q, k, v, scale=scale)
            self.assertTrue(np.isnan(o).all() and not np.isfinite(lse).any(), (scale, lse))
        o, lse = kiln.attention(q, k, v, scale=0.125)
        self.assertTrue(np.isfinite(o).all() and np.isfinite(lse).all())
        qs = rng.standard_normal((1, 1, 3, 64)).astype(np.float32)
        o, lse = kiln.attention(qs, k[:, :, :1], v[:, :, :1], causal=True)  # rows 0, 1 see no key
        np.testing.assert_array_equal(lse.ravel()[:2], [-np.inf, -np.inf])
        np.testing.assert_array_equal(o[0, 0, :2], 0)

    def test_ragged_grouped_and_causal(self):
        rng = np.random.default_rng(7)
        # The second and the last are decode (query heads of a KV head packed in one tile), the
        # last with its keys split in parts that attention/combine merges.
        for b, hq, hkv, s, skv, d, causal in [(1, 2, 1, 130, 130, 64, False), (2, 4, 2, 1, 70, 128, True),
                                               (1, 1, 1, 150, 20, 64, True), (1, 4, 1, 1, 517, 64, True)]:
            q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
            k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
            v = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
            o, lse = kiln.attention(q, k, v, causal=causal)
            want_o, want_lse = attention_reference(bf16(q), bf16(k), bf16(v), causal, d ** -0.5)
            case = (b, hq, hkv, s, skv, d, causal)
            self.assertLess(rel_error(o, want_o), 2e-2, case)
            finite = np.isfinite(want_lse)
            self.assertTrue(np.all(np.isneginf(lse[~finite])), case)  # rows that see no key
            self.assertLess(np.abs(lse[finite] - want_lse[finite]).max(), 1e-2, case)

    def test_other_head_dims_run_padded(self):
        # D = 32, 80, 96 (Phi's, GPT-NeoX's...): padded with zeros to 64 or 128, at their own
        # scale; forward in both layouts and the backward against fp64.
        rng = np.random.default_rng(22)
        for d, causal in ((80, True), (32, False), (96, False)):
            q = rng.standard_normal((1, 2, 70, d)).astype(np.float32)
            k, v = (rng.standard_normal((1, 1, 90, d)).astype(np.float32) for _ in range(2))
            o, lse = kiln.attention(q, k, v, causal=causal)
            self.assertEqual(o.shape, q.shape)
            want, want_lse = attention_reference(*(bf16(x) for x in (q, k, v)), causal, d ** -0.5)
            self.assertLess(rel_error(o, want), 2e-2, d)
            self.assertLess(np.abs(lse - want_lse).max(), 1e-2, d)
            t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
            ob, _ = kiln.attention(t(q), t(k), t(v), causal=causal, layout="bshd")
            self.assertLess(rel_error(t(ob), want), 2e-2, d)
            if d == 96:
                d_o = rng.standard_normal(q.shape).astype(np.float32)
                grads = kiln.attention_backward(q, k, v, o, lse, d_o, causal=causal)
                for got, ref in zip(grads, backward_reference(q, k, v, o, d_o, causal)):
                    self.assertEqual(got.shape, ref.shape)
                    self.assertLess(rel_error(got, ref), 2e-2, d)
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention(*(np.ones((1, 1, 4, 320), np.float32),) * 3)
        self.assertIn("head dimension D = 320: the kernels take 1 to 256", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention(*(np.ones((1, 1, 4, 0), np.float32),) * 3)
        self.assertIn("head dimension D = 0", str(caught.exception))

    def test_nan_inputs_give_nan(self):
        # A NaN in q makes its row's o and lse NaN; in k, every row's (lse -inf means "no keys",
        # which a NaN row is not).
        rng = np.random.default_rng(21)
        q, k, v = (rng.standard_normal((1, 2, n, 64)).astype(np.float32) for n in (4, 8, 8))
        q[0, 1, 2, 5] = np.nan
        o, lse = kiln.attention(q, k, v)
        self.assertTrue(np.isnan(lse[0, 1, 2]) and np.isnan(o[0, 1, 2]).all())
        self.assertTrue(np.isfinite(np.delete(lse.reshape(-1), 1 * 4 + 2)).all())
        k[0, 0, 3, 0] = np.nan
        o, lse = kiln.attention(q, k, v)
        self.assertTrue(np.isnan(lse[0, 0]).all() and np.isnan(o[0, 0]).all())

    def test_backward_against_fp64(self):
        # dq, dk, dv on the emulator (kiln's forward's o and lse as the backward's input) against
        # the fp64 gradients; grouped heads sum dk and dv over the query heads of a KV head.
        rng = np.random.default_rng(11)
        # dq by atomics (the default at D 64 and 128), then from its own kernel (deterministic).
        for b, hq, hkv, s, skv, d, causal, det in [(1, 2, 1, 70, 90, 64, True, False),
                                                   (1, 1, 1, 20, 20, 128, False, True)]:
            q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
            k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
            v = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
            d_o = rng.standard_normal((b, hq, s, d)).astype(np.float32)
            o, lse = kiln.attention(q, k, v, causal=causal)
            dq, dk, dv = kiln.attention_backward(q, k, v, o, lse, d_o, causal=causal,
                                                 deterministic=det)
            case = (b, hq, hkv, s, skv, d, causal)
            for got, want in zip((dq, dk, dv), backward_reference(q, k, v, o, d_o, causal)):
                self.assertLess(rel_error(got, want), 1e-2, case)
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention_backward(q, k, v, o, lse, d_o[:, :, :1])
        self.assertIn("d_out has shape", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention_backward(q, k, v, o, lse, d_o, deterministic=True, dq_atomics=True)
        self.assertIn("give one", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:  # the checks it shares name this call
            longer = np.zeros(lse.shape[:-1] + (lse.shape[-1] + 1,), np.float32)
            kiln.attention_backward(q, k, v, o, longer, d_o)
        self.assertIn("kiln.attention_backward: lse has shape", str(caught.exception))

    def test_varlen_backward_against_fp64(self):
        # Packed sequences [T, H, D]: each sequence's gradients against the fp64 reference over its
        # own rows (a sequence's last tile reads the next one's rows; they must not count).
        rng = np.random.default_rng(12)
        lengths, hq, hkv, d = [30, 1, 70], 2, 1, 64
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        t = int(cu[-1])
        q, d_o = (rng.standard_normal((t, hq, d)).astype(np.float32) for _ in range(2))
        k, v = (rng.standard_normal((t, hkv, d)).astype(np.float32) for _ in range(2))
        o, lse = kiln.varlen_attention(q, k, v, cu, max(lengths), causal=True)
        dq, dk, dv = kiln.varlen_attention_backward(q, k, v, o, lse, d_o, cu, max(lengths),
                                                    causal=True)
        heads = lambda x, b: x[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None]  # [1, H, S, D]
        for b in range(len(lengths)):
            want = backward_reference(*(heads(x, b) for x in (q, k, v, o, d_o)), True)
            for got, w in zip((dq, dk, dv), want):
                self.assertLess(rel_error(heads(got, b), w), 1e-2, (lengths, b))
        with self.assertRaises(kiln.Error) as caught:
            kiln.varlen_attention_backward(q, k, v, o, lse, d_o, cu[:1], max(lengths))
        self.assertIn("cu_seqlens", str(caught.exception))

    def test_varlen_backward_rows_of_other_sequences_do_not_leak(self):
        # inf in the second sequence's q, k, v and d_out, NaN in the rows no sequence owns: the
        # first sequence's gradients are its own (a masked 0 times those rows would be NaN).
        rng = np.random.default_rng(15)
        cu, t, d = np.array([0, 10, 30], np.int32), 40, 64
        q, d_o = (rng.standard_normal((t, 2, d)).astype(np.float32) for _ in range(2))
        k, v = (rng.standard_normal((t, 1, d)).astype(np.float32) for _ in range(2))
        o, lse = kiln.varlen_attention(q, k, v, cu, 20, causal=True)
        heads = lambda x: x[:10].transpose(1, 0, 2)[None]
        want = backward_reference(*(heads(x) for x in (q, k, v, o, d_o)), True)
        for x in (q, k, v, d_o):
            x[10] = np.float32(3.4e38)  # inf in bf16
            x[30:] = np.nan
        o[30:] = np.nan
        dq, dk, dv = kiln.varlen_attention_backward(q, k, v, o, lse, d_o, cu, 20, causal=True)
        for got, w in zip((dq, dk, dv), want):
            self.assertLess(rel_error(heads(got), w), 1e-2)

    def check_decode(self, q, k_seqs, v_seqs, o, lse, case, causal=False):
        """o and lse of each sequence b against the reference over its own keys k_seqs[b] (causal:
        its diagonal at its length); a row that sees no key has lse -inf."""
        for b in range(q.shape[0]):
            want_o, want_lse = attention_reference(bf16(q[b:b + 1]), bf16(k_seqs[b][None]),
                                                   bf16(v_seqs[b][None]), causal, q.shape[3] ** -0.5)
            self.assertLess(rel_error(o[b:b + 1], want_o), 2e-2, (case, b))
            seen = np.isfinite(want_lse)
            self.assertTrue((lse[b:b + 1][~seen] == -np.inf).all(), (case, b))
            self.assertLess(np.abs(lse[b:b + 1][seen] - want_lse[seen]).max(initial=0), 1e-2, (case, b))

    def test_prefill_over_a_kv_cache(self):
        # More query rows than a decode tile holds (a chunk of 40 new rows a sequence): a CTA per
        # query tile, each causal diagonal at its own sequence's length (sequence 0's first rows
        # see no key), NaN past the lengths; then through a paged cache, pages out of order.
        rng = np.random.default_rng(15)
        b, hq, hkv, smax, s, d = 3, 4, 2, 200, 40, 64
        lens = np.array([5, 77, 200], np.int32)
        q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
        k = rng.standard_normal((b, hkv, smax, d)).astype(np.float32)
        v = rng.standard_normal((b, hkv, smax, d)).astype(np.float32)
        for i, n in enumerate(lens):
            k[i, :, n:] = np.nan
            v[i, :, n:] = np.nan
        o, lse = kiln.decode_attention(q, k, v, lens, causal=True)
        k_seqs, v_seqs = [k[i, :, :n] for i, n in enumerate(lens)], [v[i, :, :n] for i, n in enumerate(lens)]
        self.check_decode(q, k_seqs, v_seqs, o, lse, "lens", causal=True)
        page, max_pages = 32, 7
        table = rng.permutation(b * max_pages + 2)[: b * max_pages].reshape(b, max_pages).astype(np.int32)
        cache_k = np.full((b * max_pages + 2, page, hkv, d), np.nan, np.float32)
        cache_v = np.full((b * max_pages + 2, page, hkv, d), np.nan, np.float32)
        for i, n in enumerate(lens):
            for j in range(n):
                cache_k[table[i, j // page], j % page] = k[i, :, j]
                cache_v[table[i, j // page], j % page] = v[i, :, j]
        o, lse = kiln.decode_attention(q, cache_k, cache_v, lens, table)
        self.check_decode(q, k_seqs, v_seqs, o, lse, "paged")

    def test_prefill_over_pages_of_64_streams_its_tiles_past_an_empty_sequence(self):
        # Without a mask at D = 128 over pages of 64 a CTA per SM runs its tiles as one stream of
        # steps; a sequence of length 0 takes a key tile there, all of it masked: its rows come out
        # o = 0 and lse = -inf, and the others' V rows past their lengths (NaN) are zeroed in the
        # step that starts the next tile.
        rng = np.random.default_rng(21)
        b, hq, hkv, s, d, page, max_pages = 3, 4, 2, 40, 128, 64, 5
        lens = np.array([150, 0, 300], np.int32)
        q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
        table = rng.permutation(b * max_pages + 2)[: b * max_pages].reshape(b, max_pages).astype(np.int32)
        cache_k = np.full((b * max_pages + 2, page, hkv, d), np.nan, np.float32)
        cache_v = np.full((b * max_pages + 2, page, hkv, d), np.nan, np.float32)
        k_seqs, v_seqs = [], []
        for i, n in enumerate(lens):
            k_seqs.append(rng.standard_normal((hkv, n, d)).astype(np.float32))
            v_seqs.append(rng.standard_normal((hkv, n, d)).astype(np.float32))
            for j in range(n):
                cache_k[table[i, j // page], j % page] = k_seqs[i][:, j]
                cache_v[table[i, j // page], j % page] = v_seqs[i][:, j]
        o, lse = kiln.decode_attention(q, cache_k, cache_v, lens, table)
        self.assertTrue((o[1] == 0).all() and (lse[1] == -np.inf).all())
        seen = [0, 2]
        self.check_decode(q[seen], [k_seqs[i] for i in seen], [v_seqs[i] for i in seen], o[seen],
                          lse[seen], "pages of 64")

    def test_prefill_over_a_table_sized_for_longer_sequences(self):
        # A serving engine's block table is as wide as its longest context: the emulator's bound
        # follows the lengths, not the table (the table's keys would pass the bound here). As many
        # query rows a key row as the rule's least (kLeastCopiedRows), over pages of 16: the entry
        # point copies the sequences' pages into dense K and V first (entries past the lengths
        # name no page: -1), and a 2-D seq_lens is named as such.
        rng = np.random.default_rng(23)
        b, hq, hkv, s, d, page, width = 2, 32, 1, 128, 64, 16, 700
        lens = np.array([150, 128], np.int32)
        q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
        cache_k = np.full((20, page, hkv, d), np.nan, np.float32)
        cache_v = np.full((20, page, hkv, d), np.nan, np.float32)
        table = np.full((b, width), -1, np.int32)
        order = rng.permutation(20)
        k_seqs, v_seqs = [], []
        for i, n in enumerate(lens):
            k_seqs.append(rng.standard_normal((hkv, n, d)).astype(np.float32))
            v_seqs.append(rng.standard_normal((hkv, n, d)).astype(np.float32))
            for j in range(n):
                table[i, j // page] = order[i * 10 + j // page]
                cache_k[table[i, j // page], j % page] = k_seqs[i][:, j]
                cache_v[table[i, j // page], j % page] = v_seqs[i][:, j]
        o, lse = kiln.decode_attention(q, cache_k, cache_v, lens, table)
        self.check_decode(q, k_seqs, v_seqs, o, lse, "a wide table")
        with self.assertRaisesRegex(kiln.Error, r"seq_lens has shape \(2, 1\)"):
            kiln.decode_attention(q, cache_k, cache_v, lens[:, None], table)

    def test_decode_over_sequences_of_their_own_lengths(self):
        rng = np.random.default_rng(9)
        b, hq, hkv, smax, d = 3, 4, 2, 300, 64
        lens = np.array([1, 137, 300], np.int32)
        q = rng.standard_normal((b, hq, 1, d)).astype(np.float32)
        k = rng.standard_normal((b, hkv, smax, d)).astype(np.float32)
        v = rng.standard_normal((b, hkv, smax, d)).astype(np.float32)
        for i, n in enumerate(lens):  # past a sequence's length: NaN, never read into o
            k[i, :, n:] = np.nan
            v[i, :, n:] = np.nan
        o, lse = kiln.decode_attention(q, k, v, lens)
        self.check_decode(q, [k[i, :, :n] for i, n in enumerate(lens)],
                          [v[i, :, :n] for i, n in enumerate(lens)], o, lse, "lens")

    def test_decode_over_a_paged_cache_whose_pages_are_out_of_order(self):
        rng = np.random.default_rng(10)
        for page, d in [(16, 128), (256, 64)]:
            b, hq, hkv, s = 2, 8, 2, 2  # two query rows a sequence (speculative), no mask
            lens = np.array([50, 2 * page + 13], np.int32)
            max_pages = (int(lens.max()) + page - 1) // page + 1  # one entry to spare
            pages = b * max_pages + 3
            cache_k = np.full((pages, page, hkv, d), np.nan, np.float32)  # unused slots: NaN
            cache_v = np.full((pages, page, hkv, d), np.nan, np.float32)
            order = rng.permutation(pages)
            table = np.zeros((b, max_pages), np.int32)
            k_seqs, v_seqs = [], []
            for i, n in enumerate(lens):
                kk = rng.standard_normal((hkv, n, d)).astype(np.float32)
                vv = rng.standard_normal((hkv, n, d)).astype(np.float32)
                for j in range(max_pages):
                    table[i, j] = order[i * max_pages + j]
                    rows = slice(j * page, min((j + 1) * page, n))
                    if rows.start < n:
                        cache_k[table[i, j], :rows.stop - rows.start] = kk[:, rows].transpose(1, 0, 2)
                        cache_v[table[i, j], :rows.stop - rows.start] = vv[:, rows].transpose(1, 0, 2)
                k_seqs.append(kk)
                v_seqs.append(vv)
            q = rng.standard_normal((b, hq, s, d)).astype(np.float32)
            o, lse = kiln.decode_attention(q, cache_k, cache_v, lens, table)
            self.check_decode(q, k_seqs, v_seqs, o, lse, ("paged", page, d))

    def test_paged_append_leaves_the_rest_of_the_cache_bit_for_bit(self):
        # Rows the step does not write come back as they were: values bf16 would round, and NaNs
        # with their payloads (a bf16 copy would round those too).
        rng = np.random.default_rng(17)
        caches = [rng.standard_normal((4, 16, 1, 16)).astype(np.float32) for _ in range(2)]
        for cache in caches:
            cache.view(np.uint32)[3, :2, 0, :3] = [[0x7F800001, 0x7FFFFFFF, 0xFFC00001]] * 2
        before = [c.copy() for c in caches]
        kiln.paged_append(*caches, np.ones((1, 1, 1, 16), np.float32),
                          np.ones((1, 1, 1, 16), np.float32), np.int32([[0, 1]]), np.int32([3]),
                          np.ones((32, 8), np.float32), np.zeros((32, 8), np.float32))
        for cache, old in zip(caches, before):
            written = np.zeros(cache.shape, bool)
            written[0, 3] = True  # position 3: page 0, row 3
            np.testing.assert_array_equal(cache.view(np.uint32)[~written],
                                          old.view(np.uint32)[~written])
            np.testing.assert_array_equal(cache[0, 3], 1.0)

    def test_paged_caches_of_pages_not_bundled_say_how_to_bundle_them(self):
        # Pages of 16, 32, 64 and 256 tokens are bundled; another power of two needs `kiln bundle`.
        q = np.ones((1, 2, 1, 64), np.float32)
        cache = np.ones((2, 128, 1, 64), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.decode_attention(q, cache, cache, np.int32([130]), np.int32([[1, 0]]))
        self.assertIn("page128", str(caught.exception))
        self.assertIn("kiln bundle --dir", str(caught.exception))

    def test_backward_with_dq_atomics_names_the_callers_head_dim(self):
        # D = 200 runs padded to 256, where dQ by atomics is not: the message says so, with D 200.
        x = np.ones((1, 1, 8, 200), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention_backward(x, x, x, x, np.zeros((1, 1, 8), np.float32), x,
                                    dq_atomics=True)
        self.assertIn("D = 200 runs padded to 256", str(caught.exception))

    def test_paged_append_rotates_keys_into_their_pages(self):
        rng = np.random.default_rng(11)
        b, s, hkv, d, page, pages, max_pages = 2, 3, 2, 64, 16, 9, 4
        lens = np.array([14, 30], np.int32)  # sequence 0 crosses a page, 1 fills one
        table = rng.permutation(pages)[: b * max_pages].reshape(b, max_pages).astype(np.int32)
        k_cache = rng.standard_normal((pages, page, hkv, d)).astype(np.float32)
        v_cache = rng.standard_normal((pages, page, hkv, d)).astype(np.float32)
        k_new = rng.standard_normal((b, s, hkv, d)).astype(np.float32)
        v_new = rng.standard_normal((b, s, hkv, d)).astype(np.float32)
        angles = np.arange(64)[:, None] * (1.0 / 10000 ** (np.arange(0, d, 2) / d))[None, :]
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        want_k, want_v = k_cache.astype(np.float64), v_cache.astype(np.float64)  # kept as they are
        for i in range(b):
            for t in range(s):
                pos = lens[i] + t
                slot = (table[i, pos // page], pos % page)
                x = bf16(k_new[i, t])
                x1, x2 = x[:, : d // 2], x[:, d // 2:]
                c, sn = cos[pos], sin[pos]
                want_k[slot] = np.concatenate([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)
                want_v[slot] = bf16(v_new[i, t])
        kiln.paged_append(k_cache, v_cache, k_new, v_new, table, lens, cos, sin)
        np.testing.assert_array_equal(v_cache, want_v)  # values copied, every other slot kept
        untouched = np.ones(k_cache.shape[:2], bool)
        for i in range(b):
            for t in range(s):
                untouched[table[i, (lens[i] + t) // page], (lens[i] + t) % page] = False
        np.testing.assert_array_equal(k_cache[untouched], want_k[untouched])
        # The rotated keys, rounded to bf16.
        self.assertLess(rel_error(k_cache[~untouched], want_k[~untouched]), 1e-2)

    def test_varlen_packed_sequences(self):
        rng = np.random.default_rng(12)
        for d, causal in [(64, True), (128, False)]:
            lens = [1, 130, 77]
            cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            t, hq, hkv = int(cu[-1]), 4, 2
            q = rng.standard_normal((t, hq, d)).astype(np.float32)
            k = rng.standard_normal((t, hkv, d)).astype(np.float32)
            v = rng.standard_normal((t, hkv, d)).astype(np.float32)
            o, lse = kiln.varlen_attention(q, k, v, cu, max(lens), causal=causal)
            self.assertEqual(o.shape, (t, hq, d))
            for b, n in enumerate(lens):
                rows = slice(cu[b], cu[b + 1])
                seq = [x[rows].transpose(1, 0, 2)[None] for x in (q, k, v)]  # [1, H, n, D]
                want_o, want_lse = attention_reference(*(bf16(x) for x in seq), causal, d ** -0.5)
                self.assertLess(rel_error(o[rows].transpose(1, 0, 2)[None], want_o), 2e-2, (d, b))
                self.assertLess(np.abs(lse[:, rows][None] - want_lse).max(), 1e-2, (d, b))

    def test_varlen_rows_no_sequence_owns_are_nan(self):
        # Rows past cu_seqlens[B] are not written: on the host NaN in lse, as in o (not whatever
        # the memory held before).
        rng = np.random.default_rng(18)
        q = rng.standard_normal((24, 2, 64)).astype(np.float32)
        k, v = (rng.standard_normal((24, 1, 64)).astype(np.float32) for _ in range(2))
        o, lse = kiln.varlen_attention(q, k, v, np.int32([0, 6, 16]), 10, causal=True)
        self.assertTrue(np.isnan(o[16:]).all() and np.isnan(lse[:, 16:]).all())
        self.assertTrue(np.isfinite(o[:16]).all() and np.isfinite(lse[:, :16]).all())

    def test_varlen_rows_of_other_sequences_do_not_leak(self):
        # inf in the second sequence's V and NaN in the rows no sequence owns: a sequence's last
        # key tile reads into them, and its masked scores' P = 0 times NaN would be NaN.
        rng = np.random.default_rng(14)
        cu = np.array([0, 10, 30], np.int32)
        q = rng.standard_normal((40, 2, 64)).astype(np.float32)
        k, v = (rng.standard_normal((40, 1, 64)).astype(np.float32) for _ in range(2))
        v[10] = np.float32(3.4e38)  # inf in bf16
        v[30:] = np.nan
        o, _ = kiln.varlen_attention(q, k, v, cu, 20)
        seq = [x[:10].transpose(1, 0, 2)[None] for x in (q, k, v)]
        want, _ = attention_reference(*(bf16(x) for x in seq), False, 64 ** -0.5)
        self.assertLess(rel_error(o[:10].transpose(1, 0, 2)[None], want), 2e-2)

    def test_varlen_offsets_out_of_order_read_nothing_outside(self):
        # cu_seqlens decreasing, then past T: kiln.varlen_attention refuses host arrays so. The
        # kernel (through the bindings, as on the GPU, where the offsets are the device's) takes
        # those sequences as empty or cut at T (the last one, rows 20..99, overlaps the first),
        # reads or writes nothing outside the tensors, and the rows only the well-formed first
        # sequence writes are right.
        rng = np.random.default_rng(13)
        t, h, d = 100, 2, 64
        q, k, v = (rng.standard_normal((t, h, d)).astype(np.float32) for _ in range(3))
        bad = np.array([0, 50, 20, 300], np.int32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.varlen_attention(q, k, v, bad, 100)
        self.assertIn("cu_seqlens must not fall", str(caught.exception))
        o, lse = np.empty_like(q), np.empty((h, t), np.float32)
        kiln._kiln._varlen_attention(q, k, v, bad, 100, o, lse, False, 0.0, stream=0)
        seq = [x[:50].transpose(1, 0, 2)[None] for x in (q, k, v)]
        want, _ = attention_reference(*(bf16(x) for x in seq), False, d ** -0.5)
        self.assertLess(rel_error(o[:20].transpose(1, 0, 2)[None], want[:, :, :20]), 2e-2)

    def test_host_checks_name_the_last_position_and_max_seqlens_width(self):
        # A new token past the block table is told by its own (last) position, not the exclusive
        # end; a max_seqlen past int32 by its width, not as S, Skv and B * Hq * S.
        d, page = 16, 16
        kc, vc = np.zeros((2, page, 1, d), np.float32), np.zeros((2, page, 1, d), np.float32)
        new = np.ones((1, 2, 1, d), np.float32)
        cos, sin = np.ones((64, d // 2), np.float32), np.zeros((64, d // 2), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.paged_append(kc, vc, new, new, np.array([[0, 1]], np.int32),
                              np.array([31], np.int32), cos, sin)
        self.assertIn("reach position 32, past the block table's positions 0 to 31",
                      str(caught.exception))
        q = np.zeros((8, 1, 64), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.varlen_attention(q, q, q, np.array([0, 8], np.int32), 2**31)
        self.assertIn("max_seqlen = 2147483648 is past 32 bits", str(caught.exception))

    def test_paged_append_writes_nothing_past_its_bounds(self):
        # The kernel itself (kiln.load), past the host's checks: a position past the block table,
        # one past the cos/sin tables, and a page entry past the cache leave the cache as it was.
        k = kiln.load(BUNDLES, "ops/paged_append")
        d, page, pages = 16, 16, 2
        ones = np.full((1, 1, 1, d), 0x3F80, np.uint16)  # bf16 1.0
        table = np.array([[0, 1]], np.int32)
        cos, sin = np.ones((40, d // 2), np.float32), np.zeros((40, d // 2), np.float32)
        for lens, tab, positions in [(40, table, 40), (20, table, 20), (20, np.array([[0, 7]], np.int32), 40)]:
            kc, vc = np.zeros((pages, page, 1, d), np.uint16), np.zeros((pages, page, 1, d), np.uint16)
            k(ones, ones, cos[:positions], sin[:positions], tab, np.array([lens], np.int32), kc, vc,
              1, 1, d, page, 2, pages, positions, 1)
            self.assertFalse(kc.any() or vc.any(), (lens, positions))
        kc, vc = np.zeros((pages, page, 1, d), np.uint16), np.zeros((pages, page, 1, d), np.uint16)
        k(ones, ones, cos, sin, table, np.array([20], np.int32), kc, vc, 1, 1, d, page, 2, pages, 40, 1)
        self.assertTrue((vc[1, 4] == 0x3F80).all() and (kc[1, 4] == 0x3F80).all())  # inside: written

    def test_paged_append_kernel_refuses_what_it_would_misread(self):
        # Through kiln.load, past kiln.paged_append's own checks: int64 lengths (torch.tensor's
        # default) read as int32 words, or f16 caches given to the bf16 kernel.
        k = kiln.load(BUNDLES, "ops/paged_append")
        d, page, pages = 16, 16, 2
        ones = np.full((1, 1, 1, d), 0x3F80, np.uint16)
        cos, sin = np.ones((40, d // 2), np.float32), np.zeros((40, d // 2), np.float32)
        cache = lambda t: np.zeros((pages, page, 1, d), t)
        table = np.array([[0, 1]], np.int32)
        cases = [
            (lambda: k(ones, ones, cos, sin, table, np.array([3], np.int64), cache(np.uint16),
                       cache(np.uint16), 1, 1, d, page, 2, pages, 40, 1),
             "('seq_lens') is read as i32 by the kernel, not as i64"),
            (lambda: k(ones, ones, cos, sin, table, np.array([3], np.int32), cache(np.float16),
                       cache(np.float16), 1, 1, d, page, 2, pages, 40, 1),
             "is read as bf16 by the kernel, not as f16"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))

    def test_paged_append_f16_rotates_keys_in_f16(self):
        # ops/paged_append.f16 (kiln.paged_append's kernel for f16 caches) on f16 host arrays:
        # a token at position 3 of page 1, its keys rotated (cos 0.6, sin 0.8) and rounded to f16.
        k = kiln.load(BUNDLES, "ops/paged_append.f16")
        d, page, pages = 16, 16, 2
        rng = np.random.default_rng(13)
        k_new = rng.standard_normal((1, 1, 1, d)).astype(np.float16)
        v_new = rng.standard_normal((1, 1, 1, d)).astype(np.float16)
        cos, sin = np.full((40, d // 2), 0.6, np.float32), np.full((40, d // 2), 0.8, np.float32)
        kc, vc = np.zeros((pages, page, 1, d), np.float16), np.zeros((pages, page, 1, d), np.float16)
        k(k_new, v_new, cos, sin, np.array([[1, 0]], np.int32), np.array([3], np.int32), kc, vc,
          1, 1, d, page, 2, pages, 40, 1)
        x1, x2 = (k_new[0, 0, 0, : d // 2].astype(np.float32),
                  k_new[0, 0, 0, d // 2:].astype(np.float32))
        want = np.concatenate([x1 * 0.6 - x2 * 0.8, x2 * 0.6 + x1 * 0.8]).astype(np.float16)
        np.testing.assert_allclose(kc[1, 3, 0].astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)
        np.testing.assert_array_equal(vc[1, 3, 0], v_new[0, 0, 0])
        kc[1, 3], vc[1, 3] = 0, 0
        self.assertFalse(kc.any() or vc.any())  # nothing else written

    def test_decode_errors(self):
        q = np.ones((1, 4, 1, 64), np.float32)
        cache = np.ones((4, 16, 2, 64), np.float32)
        lens = np.array([20], np.int32)
        cases = [
            (lambda: kiln.decode_attention(q, cache, cache, lens, np.zeros((2, 2), np.int32)),
             "block_table has shape (2, 2)"),
            (lambda: kiln.decode_attention(q, cache, cache, lens.astype(np.int64), np.zeros((1, 2), np.int32)),
             "seq_lens must be i32"),
            (lambda: kiln.decode_attention(q, np.ones((4, 24, 2, 64), np.float32), np.ones((4, 24, 2, 64), np.float32),
                                           lens, np.zeros((1, 2), np.int32)), "a power of two from 16"),
            # a paged cache with a q of another rank: q's rank is what is wrong
            (lambda: kiln.decode_attention(q[0], cache, cache, lens, np.zeros((1, 2), np.int32)),
             "kiln.decode_attention: q must be [B, Hq, S, D], not shape (4, 1, 64)"),
            (lambda: kiln.decode_attention(q, cache[..., :32].copy(), cache[..., :32].copy(), lens,
                                           np.zeros((1, 2), np.int32)),
             "k_cache (4, 16, 2, 32) has D = 32, q (1, 4, 1, 64) D = 64"),
            # a cache of no key: the lengths are checked all the same
            (lambda: kiln.decode_attention(q, np.zeros((1, 2, 0, 64), np.float32),
                                           np.zeros((1, 2, 0, 64), np.float32), np.array([5], np.int32)),
             "seq_lens must lie in [0, 0]"),
            (lambda: kiln.decode_attention(q, cache, cache, np.array([-3], np.int32),
                                           np.zeros((1, 0), np.int32)), "seq_lens must lie in [0, 0]"),
            # the cache's arrays by their names in the call
            (lambda: kiln.decode_attention(q, cache, cache[..., :32].copy(), lens,
                                           np.zeros((1, 2), np.int32)),
             "k_cache (4, 16, 2, 64) and v_cache (4, 16, 2, 32) must both be"),
            # a cache of no pages: a length past 0 uses a page that is not there
            (lambda: kiln.decode_attention(q, cache[:0], cache[:0], lens, np.zeros((1, 2), np.int32)),
             "block_table's pages in use must lie in [0, 0)"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        # Every sequence empty over a cache of no pages: no key, o = 0 and lse = -inf.
        o, lse = kiln.decode_attention(q, cache[:0], cache[:0], np.int32([0]),
                                       np.zeros((1, 2), np.int32))
        self.assertEqual((o.shape, lse.shape), ((1, 4, 1, 64), (1, 4, 1)))
        self.assertFalse(o.any())
        self.assertTrue(np.all(lse == -np.inf))

    def test_bshd_layout(self):
        # Read and written in place by the kernels' rows form: two batches (each box clipped at
        # its batch's last row), grouped heads, a causal mask.
        rng = np.random.default_rng(8)
        q = rng.standard_normal((2, 100, 2, 64)).astype(np.float32)
        k = rng.standard_normal((2, 100, 1, 64)).astype(np.float32)
        v = rng.standard_normal((2, 100, 1, 64)).astype(np.float32)
        o, lse = kiln.attention(q, k, v, layout="bshd", scale=0.2, causal=True)
        self.assertEqual(o.shape, (2, 100, 2, 64))
        self.assertEqual(lse.shape, (2, 2, 100))
        want_o, want_lse = attention_reference(*(bf16(x.transpose(0, 2, 1, 3)) for x in (q, k, v)),
                                               True, 0.2)
        self.assertLess(rel_error(o.transpose(0, 2, 1, 3), want_o), 2e-2)
        self.assertLess(np.abs(lse - want_lse).max(), 1e-2)
        # Decode-sized (a KV head's query rows fit a tile): through the decode kernels.
        q1 = rng.standard_normal((2, 1, 4, 64)).astype(np.float32)
        o1, lse1 = kiln.attention(q1, k, v, layout="bshd", scale=0.2)
        self.assertEqual((o1.shape, lse1.shape), ((2, 1, 4, 64), (2, 4, 1)))
        want_o1, _ = attention_reference(*(bf16(x.transpose(0, 2, 1, 3)) for x in (q1, k, v)),
                                         False, 0.2)
        self.assertLess(rel_error(o1.transpose(0, 2, 1, 3), want_o1), 2e-2)
        # A bad call on the decode path names the shapes as given, in this layout.
        with self.assertRaises(kiln.Error) as caught:
            kiln.attention(q1, k, v[:, :99], layout="bshd")
        self.assertIn("k (2, 100, 1, 64) and v (2, 99, 1, 64) must both be [B, Skv, Hkv, D]",
                      str(caught.exception))

    def test_errors(self):
        q = np.ones((1, 2, 8, 64), np.float32)
        cases = [
            (lambda: kiln.attention(q[0], q, q), "q must have rank 4"),
            (lambda: kiln.attention(q, q[:, :, :4], q), "must both be [B, Hkv, Skv, D]"),
            (lambda: kiln.attention(*(np.ones((1, 2, 8, 264), np.float32),) * 3), "D = 264"),
            (lambda: kiln.attention(q, q, q, layout="sbhd"), "layout 'sbhd'"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))


class LayerGlue(unittest.TestCase):
    def test_rope_qkv(self):
        for d in (8, 32):  # a pair a thread, and eight (D a multiple of 16)
            self.check_rope_qkv(d)

    def check_rope_qkv(self, d):
        rng = np.random.default_rng(9)
        b, s, hq, hkv = 2, 5, 4, 2
        qkv = rng.standard_normal((b * s, (hq + 2 * hkv) * d)).astype(np.float32)
        inv = 1.0 / 500000.0 ** (np.arange(0, d, 2) / d)
        angles = np.arange(s)[:, None] * inv[None, :]
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        q, k, v = kiln.rope_qkv(qkv, cos, sin, b, hq, hkv)
        x = bf16(qkv).reshape(b, s, hq + 2 * hkv, d).transpose(0, 2, 1, 3)  # [B, H, S, D]

        def rotated(t):
            x1, x2 = t[..., : d // 2], t[..., d // 2:]
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

        self.assertLess(rel_error(q, rotated(x[:, :hq])), 1e-2)
        self.assertLess(rel_error(k, rotated(x[:, hq:hq + hkv])), 1e-2)
        self.assertLess(rel_error(v, x[:, hq + hkv:]), 1e-6)
        rows = kiln.rope_qkv(qkv, cos, sin, b, hq, hkv, layout="bshd")  # [B, S, H, D]
        for got, want in zip(rows, (q, k, v)):
            np.testing.assert_array_equal(got, want.transpose(0, 2, 1, 3))
        # Tables of another type, or strided, are read as f32 (they once went in as their bytes).
        wide = kiln.rope_qkv(qkv, np.cos(angles), np.sin(angles)[:, ::1].copy(order="F"), b, hq,
                             hkv)
        for got, want in zip(wide, (q, k, v)):
            np.testing.assert_array_equal(got, want)
        with self.assertRaises(kiln.Error) as caught:
            kiln.rope_qkv(qkv[:, 1:], cos, sin, b, hq, hkv)
        self.assertIn("is not [B * S, (Hq + 2 Hkv) * D]", str(caught.exception))

    def test_swiglu_and_heads_to_rows(self):
        rng = np.random.default_rng(10)
        for f in (33, 40):  # one element a thread, and eight (F a multiple of 8)
            x = rng.standard_normal((7, 2 * f)).astype(np.float32)
            g, u = bf16(x[:, :f]), bf16(x[:, f:])
            self.assertLess(rel_error(kiln.swiglu(x), g / (1 + np.exp(-g)) * u), 1e-2, f)
        for d in (6, 16):
            h = rng.standard_normal((2, 3, 5, d)).astype(np.float32)
            self.assertLess(rel_error(kiln.heads_to_rows(h), bf16(h).transpose(0, 2, 1, 3)), 1e-6, d)
        with self.assertRaises(kiln.Error):
            kiln.swiglu(np.ones((3, 5), np.float32))

    def test_bf16_rounding_keeps_a_nan_a_nan(self):
        # NaNs of any payload go in as bf16's quiet NaN (as C++ FloatToBf16 gives it): rounded
        # as numbers, 0x7FFFFFFF would carry into 0 and 0x7F800001 round to inf.
        nans = np.uint32([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001])
        x = np.zeros((1, 1, 8, 8), np.float32)
        x.view(np.uint32)[0, 0, :5, 0] = nans
        x[0, 0, 5:, 0] = [np.inf, -np.inf, 3.0]
        got = kiln.heads_to_rows(x)[0, :, 0, 0]
        self.assertTrue(np.isnan(got[:5]).all(), got)
        np.testing.assert_array_equal(got[5:], [np.inf, -np.inf, 3.0])
        words = kiln.rope_angles(nans.view(np.float32).reshape(1, 5), np.zeros((1, 5), np.float32))
        np.testing.assert_array_equal(words.view(np.uint32) & 0xFFFF, [[0x7FC0] * 5])

    def test_float16_host_arrays_run_the_f16_kernels(self):
        # As kiln.gemm's: float16 in, float16 out (not rounded to bf16 and widened to float32).
        rng = np.random.default_rng(19)
        h = (rng.standard_normal((1, 2, 3, 8)) * 1.001).astype(np.float16)
        got = kiln.heads_to_rows(h)
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, h.transpose(0, 2, 1, 3))  # a copy, bit for bit
        x = rng.standard_normal((3, 32)).astype(np.float16)
        got = kiln.swiglu(x)
        self.assertEqual(got.dtype, np.float16)
        g, u = x[:, :16].astype(np.float64), x[:, 16:].astype(np.float64)
        self.assertLess(rel_error(got, g / (1 + np.exp(-g)) * u), 1e-3)
        qkv = rng.standard_normal((2, 4 * 16)).astype(np.float16)
        cos, sin = np.ones((2, 8), np.float32), np.zeros((2, 8), np.float32)  # no turn
        q, k, v = kiln.rope_qkv(qkv, cos, sin, 1, 2, 1)
        self.assertEqual((q.dtype, k.dtype, v.dtype), (np.float16,) * 3)
        np.testing.assert_array_equal(v, qkv[:, 48:].reshape(1, 2, 1, 16).transpose(0, 2, 1, 3))

    def test_errors(self):
        qkv, cos = np.zeros((4, 64), np.float32), np.ones((4, 8), np.float32)
        for call, message in [
                (lambda: kiln.rope_qkv(qkv, cos, cos, 1.0, 2, 1),
                 "kiln.rope_qkv: batch must be an integer, not float 1.0"),
                (lambda: kiln.rope_qkv(qkv, cos, cos, 1, 2, "1"), "heads_kv must be an integer"),
                (lambda: kiln.rope_qkv(np.zeros((4, 16), np.float32), cos, cos, 1, -2, 5),
                 "batch, heads_q and heads_kv must be 0 or more, not 1, -2 and 5")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        # A bundle directory that is not there: named by the call made, not kiln.load.
        before = kiln.bundle_dir()
        try:
            kiln.set_bundle_dir("/no/such/bundles")
            with self.assertRaises(kiln.Error) as caught:
                kiln.swiglu(np.ones((2, 16), np.float32))
            self.assertIn("kiln.swiglu: no bundle directory '/no/such/bundles' (for ops/swiglu8)",
                          str(caught.exception))
        finally:
            kiln.set_bundle_dir(before)

    def test_f16_kernels(self):
        # The ".f16" glue (kiln's glue on f16 CUDA tensors picks them) on f16 host arrays through
        # kiln.load, against f32 arithmetic on the same f16 values; a bf16 reading of their
        # bytes would be far off.
        rng = np.random.default_rng(14)
        b, s, hq, hkv = 2, 5, 4, 2
        for width, d in ((1, 8), (8, 32)):
            suffix = "8" if width == 8 else ""
            qkv = rng.standard_normal((b * s, (hq + 2 * hkv) * d)).astype(np.float16)
            angles = np.arange(s)[:, None] * (1.0 / 10000 ** (np.arange(0, d, 2) / d))[None, :]
            cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
            x = qkv.astype(np.float32).reshape(b, s, hq + 2 * hkv, d).transpose(0, 2, 1, 3)
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            turned = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
            q, k, v = (np.full((b, h, s, d), np.nan, np.float16) for h in (hq, hkv, hkv))
            pairs = b * s * (hq + 2 * hkv) * d // 2
            kiln.load(BUNDLES, f"ops/rope_qkv{suffix}.f16")(qkv, cos, sin, q, k, v, s, hq, hkv, d,
                                                             pairs // width)
            self.assertLess(rel_error(q.astype(np.float32), turned[:, :hq]), 1e-3, width)
            self.assertLess(rel_error(k.astype(np.float32), turned[:, hq:hq + hkv]), 1e-3, width)
            np.testing.assert_array_equal(v, x[:, hq + hkv:].astype(np.float16))
            rows = [np.full((b, s, h, d), np.nan, np.float16) for h in (hq, hkv, hkv)]
            kiln.load(BUNDLES, f"ops/rope_qkv_rows{suffix}.f16")(qkv, cos, sin, *rows, s, hq, hkv,
                                                                  d, pairs // width)
            for got, want in zip(rows, (q, k, v)):
                np.testing.assert_array_equal(got, want.transpose(0, 2, 1, 3))
            f = 8 * d
            gu = rng.standard_normal((7, 2 * f)).astype(np.float16)
            y = np.full((7, f), np.nan, np.float16)
            kiln.load(BUNDLES, f"ops/swiglu{suffix}.f16")(gu, y, f, 7 * f // width)
            g, u = gu[:, :f].astype(np.float32), gu[:, f:].astype(np.float32)
            self.assertLess(rel_error(y.astype(np.float32), g / (1 + np.exp(-g)) * u), 1e-3, width)
            h = rng.standard_normal((2, 3, 5, d)).astype(np.float16)
            t = np.full((2, 5, 3, d), np.nan, np.float16)
            kiln.load(BUNDLES, f"ops/heads_to_rows{suffix}.f16")(h, t, 3, 5, d, h.size // width)
            np.testing.assert_array_equal(t, h.transpose(0, 2, 1, 3))


class Load(unittest.TestCase):
    def test_load_refuses_an_array_smaller_than_its_tensor_map(self):
        # hopper/k02 reads A [M, K] through a tensor map: half the rows M says is refused before the
        # launch, naming the map's line (on a GPU the map would read past the array).
        k = kiln.load(BUNDLES, "hopper/k02")
        m = n = kk = 64
        a, b, c = (np.zeros(shape, np.uint16) for shape in ((m // 2, kk), (n, kk), (m, n)))
        with self.assertRaisesRegex(kiln.Error, r"examples/hopper/k02_wgmma\.cc:\d+: hopper/k02: "
                                    r"tensor map tmA over A: its sizes \(64 x 64 elements.*reach "
                                    r"8192 bytes from its address, but the array given holds 4096"):
            k(m, n, kk, c, a, b)

    def test_any_bundle_is_a_callable(self):
        saxpy = kiln.load(BUNDLES, "ops/saxpy")
        self.assertIn("ops/saxpy(x: ptr of f32, y: ptr of f32, a: f32, n: i64)", saxpy.signature)
        rng = np.random.default_rng(6)
        x = rng.standard_normal(1000).astype(np.float32)
        y = rng.standard_normal(1000).astype(np.float32)
        want = 2.5 * x.astype(np.float64) + y
        saxpy(x, y, 2.5, 1000)
        self.assertLess(rel_error(y, want), 1e-6)
        # NumPy's scalars are numbers too
        saxpy(x, y, np.float32(-2.5), np.int64(1000))
        self.assertLess(rel_error(y, want - 2.5 * x.astype(np.float64)), 1e-6)
        # The emulator's order of threads, as emu::Options::seed (index order at 0): a kernel
        # without a race gives the same answer under each...
        for seed in (0, 7, np.uint64(2**64 - 1)):
            z = np.zeros(1000, np.float32)
            saxpy(x, z, 2.0, 1000, seed=seed)
            self.assertEqual(z.tolist(), (2.0 * x).tolist())
        # ...and the order is the seed's: the tickets an atomic counter deals out follow it.
        atomics = kiln.load(BUNDLES, "probe/atomics")

        def tickets(seed):
            n = 512
            arrays = [np.zeros(size, np.int32) for size in (n, 6, n, n, n // 256 * 16)]
            v, words, ticket, cas, hist = arrays
            atomics(v, words, np.zeros(1, np.float32), ticket, cas, hist, n, seed=seed)
            self.assertEqual(sorted(ticket.tolist()), list(range(n)))
            return ticket.tolist()
        self.assertEqual(tickets(5), tickets(5))
        self.assertNotEqual(tickets(5), tickets(6))
        # A big-endian array: named as such (it had been "could not be taken as an array").
        with self.assertRaisesRegex(kiln.Error, r"argument 1 is in the other byte order \(>f4\)"):
            saxpy(x, y.astype(">f4"), 2.0, 1000)
        for bad in (-1, 2**64, True, 1.5, "1"):
            with self.assertRaisesRegex(kiln.Error, r"seed=.*the emulator's order of threads, an integer 0 to 2\^64 - 1"):
                saxpy(x, y, 2.0, 1000, seed=bad)

    def test_an_empty_problem_launches_nothing(self):
        # n = 0: the rule n/256 gives no block, and the call is a no-op (as Triton's launcher
        # makes it), where it was an error; grid= with a 0 likewise. Nothing is written.
        saxpy = kiln.load(BUNDLES, "ops/saxpy")
        empty = np.zeros(0, np.float32)
        self.assertEqual(saxpy(empty, empty, 2.0, 0), None)
        x, y = np.ones(8, np.float32), np.full(8, 5, np.float32)
        saxpy(x, y, 2.0, 0)
        saxpy(x, y, 2.0, 8, grid=(1, 0, 1))
        self.assertEqual(y.tolist(), [5.0] * 8)
        saxpy(x, y, 2.0, 8)  # (the same arrays do take a launch with n = 8)
        self.assertEqual(y.tolist(), [7.0] * 8)
        with self.assertRaisesRegex(kiln.Error, "does not fit its i32|must be an int"):
            saxpy(x, y, 2.0, "0")  # the arguments are held to the signature all the same
        # A GEMM's work table of no tiles (M = 0) likewise; one of no k-tiles (K = 0, whose C
        # the kernel would have to write) is refused in its rule's terms (both had read as the
        # table builder's "bad Hilbert schedule shape").
        gemm = kiln.load(BUNDLES, "gemm/bf16_sm90_m64n32")
        a, b, c = (np.zeros(shape, np.uint16) for shape in ((64, 128), (32, 128), (32, 64)))
        c[:] = 7
        self.assertEqual(gemm(0, 32, 128, c, a, b, a, 1), None)
        self.assertEqual(int(c.min()), 7)
        with self.assertRaisesRegex(kiln.Error, r"its k-tiles, K/64, come to 0"):
            gemm(64, 32, 0, c, a, b, a, 1)

    def test_a_bundle_written_again_is_read_again(self):
        # `kiln bundle` run again while the process lives: the next kiln.load reads the new files
        # (it once kept the first ones); a callable from before keeps its kernel.
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            for ext in ("manifest", "ptx"):
                shutil.copy(os.path.join(BUNDLES, "ops.saxpy." + ext), d)

            def run(k):
                x, y = np.ones(4, np.float32), np.full(4, 5, np.float32)
                k(x, y, 2.0, 4)
                return y.tolist()
            before = kiln.load(d, "ops/saxpy")
            self.assertEqual(run(before), [7.0] * 4)  # y = a x + y
            path = os.path.join(d, "ops.saxpy.ptx")
            with open(path) as f:
                text = f.read()
            fma = next(line for line in text.splitlines() if "fma.rn.f32" in line)
            regs = fma.split("fma.rn.f32")[1].strip().rstrip(";").split(",")
            with open(path, "w") as f:  # y = a x
                f.write(text.replace(fma, f"\tmul.rn.f32 {regs[0]},{regs[1]},{regs[2]};"))
            os.utime(path, (1, 1))  # (a file system's coarse clock could give the same time)
            self.assertEqual(run(kiln.load(d, "ops/saxpy")), [2.0] * 4)
            self.assertEqual(run(before), [7.0] * 4)

    def test_8bit_gemm_takes_an_out_as_16bit_inputs_do(self):
        # On the host an out holds the result's type (float16 for f16, float32 otherwise), as it
        # does for 16-bit inputs; a float16 out alone asks for f16.
        a8 = np.full((16, 32), 0x38, np.uint8)  # e4m3 1.0
        for kwargs in ({"out_dtype": "f16"}, {}):
            out = np.zeros((16, 16), np.float16)
            got = kiln.gemm(a8, a8.T, scale_a=1.0, scale_b=1.0, out=out, **kwargs)
            self.assertIs(got, out)
            self.assertTrue((out == 32).all())
        with self.assertRaisesRegex(kiln.Error, r"out must be a float16 host array \(out_dtype 'f16'\)"):
            kiln.gemm(a8, a8.T, scale_a=1.0, scale_b=1.0, out=np.zeros((16, 16), np.float32),
                      out_dtype="f16")
        for alpha, digits in ((10**400, 401), (10**5000, 5001)):  # (str() refuses 4300 digits)
            with self.assertRaisesRegex(kiln.Error, rf"alpha, an integer of about {digits} digits"):
                kiln.gemm(a8, a8.T, scale_a=1.0, scale_b=1.0, alpha=alpha)
        with self.assertRaisesRegex(kiln.Error, r"give a row-major array \(a packed copy would not"):
            kiln.gemm(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32),
                      out=np.zeros((4, 4), np.float32, order="F"))

    def test_an_array_written_in_part_is_told(self):
        import warnings
        saxpy = kiln.load(BUNDLES, "ops/saxpy")
        x = np.ones(1000, np.float32)
        y = np.zeros(1000, np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the whole of y written: no word
            saxpy(x, y, 1.0, 1000)
        # Too few CTAs (a grid rule's mistake): 256 of y's 1000 elements written.
        y[:] = 0
        with self.assertWarns(kiln.PartlyWrittenWarning) as caught:
            saxpy(x, y, 1.0, 1000, grid=(1, 1, 1))
        self.assertEqual(float(y[255]), 1.0)
        self.assertEqual(float(y[256]), 0.0)
        message = str(caught.warning)
        self.assertRegex(message, r"\.cc:\d+: ops/saxpy: the array of parameter 'y' was written in "
                                  r"part: 1024 of its 4000 bytes, the first one left as it was at "
                                  r"byte 1024\. The launch ran 1x1x1 CTAs of 256x1x1 threads")
        self.assertIn("grid rule", message)
        # kiln's own calls through bundles write parts by design (a cache's new rows): no word
        kc, vc = np.zeros((2, 16, 1, 64), np.float32), np.zeros((2, 16, 1, 64), np.float32)
        new = np.ones((1, 1, 1, 64), np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kiln.paged_append(kc, vc, new, new, np.array([[0, 1]], np.int32),
                              np.array([3], np.int32), np.ones((40, 32), np.float32),
                              np.zeros((40, 32), np.float32))
        self.assertEqual(float(kc[0, 3, 0, 0]), 1.0)

    def test_arguments_are_checked_against_the_manifest(self):
        saxpy = kiln.load(BUNDLES, "ops/saxpy")
        x = np.zeros(8, np.float32)
        cases = [
            (lambda: saxpy(x, x, 1.0), "takes 4 arguments"),
            (lambda: saxpy(x, x, "two", 8), "argument 2 ('a') must be a float, not str"),
            (lambda: saxpy(x, 3, 1.0, 8), "argument 1 ('y') must be an array"),
            (lambda: saxpy(x, x, 1.0, 1 << 20), "out-of-bounds"),
            # the kernel reads from the first element on: a strided view would be misread
            (lambda: saxpy(np.zeros(16, np.float32)[::2], x, 1.0, 8),
             "argument 0 ('x') of shape (8,) has gaps"),
            # the manifest names each pointer's element type: other types would be misread
            (lambda: saxpy(x, np.zeros(8, np.float64), 1.0, 8),
             "argument 1 ('y') is read as f32 by the kernel, not as f64 (64-bit elements)"),
            (lambda: saxpy(x.astype(np.float16), x, 1.0, 8), "is read as f32"),
            (lambda: saxpy(x, x, 1.0, True), "argument 3 ('n') must be an int, not bool"),
            (lambda: saxpy(x, x, np.bool_(True), 8), "argument 2 ('a') must be a float"),
            (lambda: saxpy(x, x, np.ones(1), 8), "argument 2 ('a') must be a float"),
            (lambda: saxpy(x, x, np.complex64(1), 8), "argument 2 ('a') must be a float"),
            (lambda: saxpy(x, x, 1.0, np.ones(1, np.int64)), "argument 3 ('n') must be an int"),
            (lambda: saxpy(x, x, 1.0, np.uint64(2**63)), "'n' = 9223372036854775808 does not fit 64"),
            # a float past f32's range would arrive as inf; past a double's it is no float
            (lambda: saxpy(x, x, 1e300, 8), "'a' = 1e+300 does not fit its f32"),
            (lambda: saxpy(x, x, 10**400, 8), "'a' is not a number an f32 holds (int too large"),
            (lambda: saxpy(x, x, 3.5e38, 8), "'a' = 3.5e+38 does not fit its f32"),
            # a grid given is held to what CUDA launches (0: nothing to launch)
            (lambda: saxpy(x, x, 1.0, 8, grid=(1, 65536, 1)), "x 0 to 2^31 - 1, y and z 0 to 65535"),
            (lambda: saxpy(x, x, 1.0, 8, grid=(True, 1, 1)), "x 0 to 2^31 - 1, y and z 0 to 65535"),
            # an empty problem still takes its arguments as the signature says
            (lambda: saxpy(x, np.zeros(8, np.float64), 1.0, 0), "is read as f32 by the kernel"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:
            saxpy(x, x, 1.0)
        self.assertRegex(str(caught.exception), r"\.cc:\d+")  # the kernel's DSL line

    def test_a_missing_bundle_directory_is_named(self):
        before = kiln.bundle_dir()
        try:
            kiln.set_bundle_dir("/no/such/bundles")
            with self.assertRaises(kiln.Error) as caught:
                kiln.softmax(np.ones((2, 8), np.float32))
            self.assertIn("no bundle directory '/no/such/bundles'", str(caught.exception))
        finally:
            kiln.set_bundle_dir(before)

    def test_a_missing_bundle_says_where_it_looked(self):
        with self.assertRaises(kiln.Error) as caught:
            kiln.load(BUNDLES, "ops/no_such_kernel")
        self.assertIn("no_such_kernel", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:  # a typo: the nearest name
            kiln.load(BUNDLES, "ops/saxpi")
        self.assertIn("did you mean 'ops/saxpy'?", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:
            kiln.load("/no/such/dir", "ops/saxpy")
        self.assertIn("kiln.load: no directory '/no/such/dir'", str(caught.exception))


class EmptyAndWrongInputs(unittest.TestCase):
    """Arrays with no elements give empty results without a launch (as torch's ops do), but K = 0;
    a list where an array belongs is a kiln.Error."""

    def test_what_the_emulator_cannot_take_is_refused_at_once(self):
        # An array past the emulator's 2^26 elements is refused before any copy or run (it ran for
        # minutes), a broadcast view before it is copied whole; an `out` that is no array, and a
        # host object with __dlpack__ where NumPy or torch is needed, are kiln.Errors, not
        # TypeErrors from the bindings.
        class Dl:
            def __init__(self, a):
                self.a, self.shape, self.dtype = a, a.shape, a.dtype

            def __dlpack__(self, *args, **kwargs):
                return self.a.__dlpack__(*args, **kwargs)

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        big = np.broadcast_to(np.float32(1), (2**14, 2**13))
        x = np.ones((2, 8), np.float32)
        cases = [(lambda: kiln.softmax(big), "the emulator takes arrays of up to 2^26"),
                 (lambda: kiln.gemm(big, np.ones((2**13, 8), np.float32)), "up to 2^26"),
                 (lambda: kiln.softmax(x, out=[1]), "out must be a torch tensor or a NumPy"),
                 (lambda: kiln.layer_norm(x, out=5), "out must be a torch tensor or a NumPy"),
                 (lambda: kiln.gemm(Dl(x), np.ones((8, 4), np.float32)), "numpy.from_dlpack(a)"),
                 (lambda: kiln.swiglu(Dl(x)), "numpy.from_dlpack(x)")]
        for call, words in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(words, str(caught.exception))
        self.assertEqual(kiln.softmax(Dl(x)).shape, (2, 8))  # the row ops take it
        # The host-side checks of sizes read any producer's (they called numpy.asarray, which
        # made a 0-d object array of it: a TypeError).
        rng = np.random.default_rng(5)
        xs, ws = rng.standard_normal((5, 16), np.float32), rng.standard_normal((2, 8, 16), np.float32)
        ends = np.int32([2, 5])
        np.testing.assert_array_equal(kiln.grouped_gemm(xs, ws, Dl(ends)),
                                      kiln.grouped_gemm(xs, ws, ends))
        # A producer that hands out one capsule twice: the second use is a kiln.Error (the
        # bindings freed its tensor twice, and the process died).

        class Same(Dl):
            def __init__(self, a):
                super().__init__(a)
                self.capsule = a.__dlpack__()

            def __dlpack__(self, *args, **kwargs):
                return self.capsule

        same = Same(x)
        np.testing.assert_allclose(kiln.softmax(same), np.full((2, 8), 0.125, np.float32))
        with self.assertRaises(kiln.Error) as caught:
            kiln.softmax(same)
        self.assertIn("not readable on the host through DLPack", str(caught.exception))
        # A read-only producer's memory is read (a copy) but never written.
        frozen = np.ones((2, 8), np.float32)
        frozen.flags.writeable = False
        np.testing.assert_allclose(kiln.softmax(Dl(frozen)), np.full((2, 8), 0.125, np.float32))
        with self.assertRaises(kiln.Error) as caught:
            kiln.softmax(x, out=Dl(frozen))
        self.assertIn("out is read-only", str(caught.exception))

    def test_arguments_that_were_python_exceptions_are_kiln_errors(self):
        f = lambda *s: np.ones(s, np.float32)
        saxpy = kiln.load(BUNDLES, "ops/saxpy")
        cache = np.zeros((4, 16, 1, 64), np.float32)
        cases = [
            (lambda: kiln.attention(f(1, 2, 3, 64), f(1, 2, 3, 64), f(1, 2, 3, 64), scale=0.0),
             "a positive number, or None"),
            (lambda: kiln.varlen_attention(f(10, 2, 64), f(10, 1, 64), f(10, 1, 64),
                                           np.int32([0, 10]), None), "max_seqlen must be"),
            (lambda: kiln.rope_order(16.0), "dim must be an integer"),
            (lambda: kiln.grouped_gemm(f(8, 64), f(2, 64, 64), np.int32([[4, 8]])),
             "offsets must have rank 1"),
            (lambda: kiln.swiglu([1, 2]), "x must be a torch tensor or a NumPy array"),
            (lambda: kiln.attention_backward(*[None] * 6), "q must be a torch tensor"),
            (lambda: saxpy(f(4), f(4), 1.0, 2**63), "does not fit 64 bits"),
            (lambda: saxpy(f(4), f(4), 1.0, 4, grid=(-1, 1, 1)), "(x, y, z), integers: x 0 to 2^31 - 1"),
            (lambda: kiln.load(BUNDLES, None), "name must be a kernel's name"),
            # (nanobind's own TypeErrors, or a message that named another cause)
            (lambda: kiln.gemm(np.zeros((4, 4), np.longdouble), f(4, 4)), "of up to 64 bits"),
            (lambda: saxpy(np.zeros(4, "datetime64[s]"), f(4), 1.0, 4), "which no kernel parameter"),
            (lambda: saxpy(np.zeros(4, np.longdouble), f(4), 1.0, 4), "which no kernel parameter"),
            (lambda: saxpy(f(4), f(4), 1.0, 4, stream="s"), "a CUDA stream (a torch.cuda.Stream"),
            # (numbers the kernels take as f32: alpha past its range was inf or 0 without a word)
            (lambda: kiln.gemm(f(4, 8), f(8, 4), alpha=1e39), "where it is inf"),
            (lambda: kiln.gemm(f(4, 8), f(8, 4), alpha=1e-50), "where it is 0"),
            (lambda: kiln.gemm(f(4, 8), f(8, 4), alpha=float("nan")), "alpha nan: must be finite"),
            # (8-bit: K = 0 named the layout; strided rowwise scales named no scaling)
            (lambda: kiln.gemm(np.zeros((3, 0), np.uint8), np.zeros((4, 0), np.uint8).T,
                               scale_a=1.0, scale_b=1.0), "kiln.gemm: K = 0"),
            (lambda: kiln.gemm(np.zeros((14, 48), np.uint8), np.zeros((128, 48), np.uint8).T,
                               scale_a=f(28)[::2], scale_b=f(128)), "packed, one value after another: scale_a (14,) has gaps"),
            # (the emulator's limit, as the CLI's: refused before the work, not run for a minute)
            (lambda: kiln.gemm(f(4096, 1024), f(1024, 4096)),
             "1.718e+10 multiply-adds; the emulator takes up to 2^33 (run it on a GPU)"),
            (lambda: kiln.paged_append(cache, cache.copy(), f(1, 1, 1, 64), f(1, 1, 1, 64),
                                       np.int32([[9]]), np.int32([0]), f(16, 32), f(16, 32)),
             "pages for the new tokens must lie in [0, 4)"),
            (lambda: kiln.paged_append(cache, cache.copy(), f(1, 1, 1, 64), f(1, 1, 1, 64),
                                       np.int32([[0]]), np.int32([-1]), f(16, 32), f(16, 32)),
             "seq_lens must be 0 or more"),
            (lambda: kiln.paged_append(cache, cache.copy(), f(1, 1, 1, 64), f(1, 1, 1, 64),
                                       np.int64([[0]]), np.int32([0]), f(16, 32), f(16, 32)),
             "block_table must be int32"),
            (lambda: kiln.paged_append(np.zeros((4, 8, 1, 64), np.float32),
                                       np.zeros((4, 8, 1, 64), np.float32), f(1, 1, 1, 64),
                                       f(1, 1, 1, 64), np.int32([[0]]), np.int32([0]), f(16, 32),
                                       f(16, 32)), "a power of two from 16"),
            (lambda: kiln.varlen_attention(f(1, 10, 2, 64), f(10, 1, 64), f(10, 1, 64),
                                           np.int32([0, 10]), 10), "q must be packed [T, H, D]"),
            (lambda: kiln.grouped_gemm(f(2, 4, 64), f(2, 64, 64), np.int32([4, 8])),
             "x must be (T, K) with offsets"),
            (lambda: kiln.grouped_gemm(f(4, 8), np.zeros((0,)), np.int32([4])),
             "w must be (E, N, K), each expert's (N, K) weight, not shape (0,)"),
            # values that Python would coerce: a string that reads as true, a float for an array
            (lambda: kiln.attention(f(1, 1, 4, 64), f(1, 1, 4, 64), f(1, 1, 4, 64),
                                    causal="no"), "causal must be True or False, not 'no'"),
            (lambda: kiln.gemm(f(4, 8), f(8, 8), bias=1.0), "bias must be a torch tensor"),
            (lambda: kiln.gemm(f(4, 8), f(8, 8), alpha="2"), "alpha must be a number, not str"),
            (lambda: kiln.gemm(f(4, 8), f(8, 8), c=f(4, 8), beta=True), "beta must be a number"),
            (lambda: kiln.rms_norm(f(3, 8), eps="1e-5"), "eps must be a number"),
            (lambda: kiln.softmax(f(8, 16).astype(">f4")), "x is in the other byte order"),
            (lambda: kiln.gemm(f(4, 8).astype(np.complex64), f(8, 8)), "a has dtype complex64"),
            (lambda: kiln.gemm(f(4, 8).astype(object), f(8, 8)), "a has dtype object"),
            (lambda: kiln.softmax(f(7, 33), dim=0, out=np.zeros((7, 33), np.int64)),
             "out must be float32 as x is, not int64"),
            (lambda: kiln.rms_norm(np.ones((), np.float32)), "at least one dimension"),
            (lambda: kiln.gemm(f(34), f(33, 24)), "a (34,) and b (33, 24) do not multiply"),
            # the head dimensions of a backward that runs padded (D not 64, 128 or 256)
            (lambda: kiln.attention_backward(f(1, 1, 4, 80), f(1, 1, 4, 96), f(1, 1, 4, 96),
                                             f(1, 1, 4, 80), f(1, 1, 4), f(1, 1, 4, 80)),
             "with q's D = 80"),
            (lambda: kiln.set_bundle_dir(None), "path must be a str or a path, not NoneType"),
            # the emulator's grid limit, before a launch of two billion blocks
            (lambda: saxpy(f(8), f(8), 1.0, 8, grid=(2**31 - 1, 1, 1)),
             "the emulator runs at most 16777216"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))

    def test_what_a_new_user_tried(self):
        f = lambda *s: np.ones(s, np.float32)
        z = lambda *s: np.zeros(s, np.float32)
        # A scale f32 cannot hold is refused, not read as 0 (the kernels' 1 / sqrt(D)).
        for scale in (1e-50, 1e39):
            with self.assertRaises(kiln.Error) as err:
                kiln.attention(f(1, 1, 8, 64), f(1, 1, 8, 64), f(1, 1, 8, 64), scale=scale)
            self.assertIn("take it as f32", str(err.exception))
        # The backward of packed sequences with no token, as the forward: empty gradients.
        cu = np.int32([0, 0])
        o, lse = kiln.varlen_attention(z(0, 2, 64), z(0, 2, 64), z(0, 2, 64), cu, 1)
        grads = kiln.varlen_attention_backward(z(0, 2, 64), z(0, 2, 64), z(0, 2, 64), o, lse,
                                               z(0, 2, 64), cu, 1)
        self.assertEqual([g.shape for g in grads], [(0, 2, 64)] * 3)
        # out_dtype "f16" of f32 host arrays: a float16 array.
        got = kiln.gemm(f(2, 16), f(16, 8), out_dtype="f16")
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, np.full((2, 8), 16, np.float16))
        # beta=0 leaves c unread but not unchecked (torch.addmm's).
        with self.assertRaises(kiln.Error) as err:
            kiln.gemm(f(48, 48), f(48, 48), c=np.zeros((3, 3)), beta=0.0)
        self.assertIn("c must be the product's shape (48, 48)", str(err.exception))
        # An 8-bit product with no row still checks K.
        with self.assertRaises(kiln.Error) as err:
            kiln.gemm(np.zeros((0, 40), np.uint8), np.zeros((40, 16), np.uint8).T.copy().T,
                      scale_a=1.0, scale_b=1.0)
        self.assertIn("K (40) a multiple of 16", str(err.exception))
        # The quantizers take f32 host arrays, as every other call: no silent conversion.
        for call in (kiln.quantize_e4m3, kiln.quantize_e4m3_blocks):
            with self.assertRaises(kiln.Error) as err:
                call(np.ones((4, 32), np.int32))
            self.assertIn("must be float32, not int32", str(err.exception))

    def test_a_signal_stops_a_long_emulated_call(self):
        """A handler's exception (Ctrl-C's KeyboardInterrupt) ends an emulated call as it runs."""
        import signal
        import time

        def interrupt(*_):
            raise KeyboardInterrupt

        before = signal.signal(signal.SIGALRM, interrupt)
        a = np.ones((2048, 2048), np.float32)
        start = time.monotonic()
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with self.assertRaises(KeyboardInterrupt):
                kiln.gemm(a, a)  # about half a minute of emulation
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
        # (the whole call takes half a minute alone: the bound leaves room for a loaded machine)
        self.assertLess(time.monotonic() - start, 15)
        self.assertEqual(kiln.gemm(a[:4, :8], a[:8, :4]).shape, (4, 4))  # the next call runs

    def test_empty_arrays(self):
        b = np.ones((24, 16), np.float32)
        self.assertEqual(kiln.gemm(np.zeros((0, 24), np.float32), b).shape, (0, 16))
        self.assertEqual(kiln.gemm(np.ones((5, 24), np.float32), np.zeros((24, 0), np.float32),
                                   bias=np.zeros(0, np.float32), activation="gelu").shape, (5, 0))
        self.assertEqual(kiln.softmax(np.zeros((0, 10), np.float32)).shape, (0, 10))
        self.assertEqual(kiln.rms_norm(np.zeros((2, 0, 10), np.float32),
                                       np.ones(10, np.float32)).shape, (2, 0, 10))
        with self.assertRaises(kiln.Error) as caught:  # shapes still checked
            kiln.gemm(np.zeros((0, 23), np.float32), b)
        self.assertIn("do not multiply", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:
            kiln.gemm(np.zeros((5, 0), np.float32), np.zeros((0, 16), np.float32))
        self.assertIn("kiln.gemm: K = 0 (a (5, 0), b (0, 16))", str(caught.exception))

    def test_empty_attention(self):
        q = np.zeros((2, 4, 0, 64), np.float32)
        kv = np.ones((2, 2, 5, 64), np.float32)
        o, lse = kiln.attention(q, kv, kv)
        self.assertEqual((o.shape, lse.shape), ((2, 4, 0, 64), (2, 4, 0)))
        o, lse = kiln.attention(np.zeros((0, 3, 4, 64), np.float32),
                                np.zeros((0, 3, 1, 64), np.float32),
                                np.zeros((0, 3, 1, 64), np.float32), layout="bshd")
        self.assertEqual((o.shape, lse.shape), ((0, 3, 4, 64), (0, 4, 3)))
        # No keys: no row sees one, so o = 0 and lse = -inf (a masked-out row's convention).
        none = np.zeros((1, 2, 0, 64), np.float32)
        o, lse = kiln.attention(np.ones((1, 4, 3, 64), np.float32), none, none)
        self.assertTrue((o == 0).all() and o.shape == (1, 4, 3, 64))
        self.assertTrue(np.isneginf(lse).all() and lse.shape == (1, 4, 3))
        # The same for the other attention calls (each once refused a dimension of 0).
        z = lambda *shape: np.zeros(shape, np.float32)
        o, lse = kiln.decode_attention(z(0, 4, 1, 64), z(0, 2, 40, 64), z(0, 2, 40, 64),
                                       np.zeros(0, np.int32))
        self.assertEqual((o.shape, lse.shape), ((0, 4, 1, 64), (0, 4, 1)))
        o, lse = kiln.decode_attention(z(1, 4, 1, 64), z(1, 2, 0, 64), z(1, 2, 0, 64),
                                       np.zeros(1, np.int32))
        self.assertTrue((o == 0).all() and np.isneginf(lse).all())
        o, lse = kiln.varlen_attention(z(0, 2, 64), z(0, 1, 64), z(0, 1, 64), np.int32([0, 0]), 1)
        self.assertEqual((o.shape, lse.shape), ((0, 2, 64), (2, 0)))
        grads = kiln.attention_backward(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64),
                                        z(1, 2, 0, 64), z(1, 2, 0), z(1, 2, 0, 64))
        self.assertEqual([g.shape for g in grads], [(1, 2, 0, 64), (1, 2, 5, 64), (1, 2, 5, 64)])
        self.assertTrue(all((g == 0).all() for g in grads))
        # The shapes and the head dimension still checked.
        for qq, kk, vv, message in [
                (np.zeros((1, 4, 0, 280), np.float32), np.zeros((1, 2, 0, 280), np.float32),
                 np.zeros((1, 2, 0, 280), np.float32), "D = 280"),
                (q, kv, kv[:, :1], "must both be"),
                (np.zeros((2, 3, 0, 64), np.float32), kv, kv, "not a multiple of Hkv"),
                (q.astype(np.float64), kv.astype(np.float64), kv.astype(np.float64), "float32")]:
            with self.assertRaises(kiln.Error) as caught:
                kiln.attention(qq, kk, vv)
            self.assertIn(message, str(caught.exception))

    def test_empty_forms_check_shapes_and_types(self):
        # What launches nothing is checked as what launches: the same call with one row more
        # would be refused so.
        z = lambda *shape: np.zeros(shape, np.float32)
        i32 = lambda *shape: np.zeros(shape, np.int32)
        e4m3 = lambda *shape: np.zeros(shape, np.uint8)
        kc = z(4, 16, 1, 16)
        for call, message in [
                (lambda: kiln.gemm(z(0, 0), z(0, 8)), "kiln.gemm: K = 0 (a (0, 0), b (0, 8))"),
                (lambda: kiln.gemm(z(0, 16), z(16, 8), activation="swiglu"),
                 "swiglu takes N a multiple of 16"),
                (lambda: kiln.gemm(z(0, 16), z(16, 8), c=np.zeros((0, 8)), beta=1.0),
                 "c must be"),
                (lambda: kiln.gemm(z(0, 16), z(16, 8), bias=i32(8)), "bias must be"),
                (lambda: kiln.gemm(e4m3(0, 16), e4m3(4, 16).T, scale_a=np.ones(7, np.float32),
                                   scale_b=np.ones(9, np.float32)), "name no scaling"),
                (lambda: kiln.gemm(e4m3(0, 16), e4m3(4, 16).T, scale_a=np.ones(0),
                                   scale_b=np.ones(4)), "scale_a must be float32, not float64"),
                (lambda: kiln.gemm(e4m3(0, 16), e4m3(16, 4), scale_a=1.0, scale_b=1.0),
                 "b column-major"),
                (lambda: kiln.gemm(e4m3(0, 16), e4m3(4, 16).T, scale_a=1.0, scale_b=1.0,
                                   bias=z(5)), "bias has shape (5,), not (4,)"),
                (lambda: kiln.grouped_gemm(np.zeros((0, 16)), z(2, 8, 32), np.zeros(5)),
                 "do not make (T, K) x (E, N, K) -> (T, N) with E ends"),
                (lambda: kiln.grouped_gemm(z(0, 32), z(2, 8, 32), np.zeros(2)),
                 "offsets must be int32, not float64"),
                (lambda: kiln.grouped_gemm(z(0, 12), z(2, 8, 12), i32(2)),
                 "K and N must be multiples of 8 (bf16 rows 16 bytes apart), K at least 1, not K 12"),
                (lambda: kiln.attention(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64), scale=-1.0),
                 "scale -1.0: a positive number"),
                (lambda: kiln.attention(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64), causal="x"),
                 "causal must be True or False"),
                (lambda: kiln.varlen_attention(z(0, 2, 64), z(0, 2, 64), z(0, 2, 64), i32(2), 1,
                                               scale=float("nan")), "scale nan: a positive number"),
                (lambda: kiln.attention_backward(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64),
                                                 z(1, 2, 0, 64), z(1, 2, 0), z(1, 2, 0, 64),
                                                 scale=-2.0), "scale -2.0: a positive number"),
                (lambda: kiln.grouped_gemm(np.zeros((0, 32)), z(2, 8, 32), i32(2)),
                 "x must be float32, not float64"),
                (lambda: kiln.attention_backward(z(1, 1, 0, 64), z(1, 3, 4, 64), z(2, 3, 5, 7),
                                                 z(9, 9, 9, 9), z(1), np.zeros((2, 2))),
                 "must have rank"),
                (lambda: kiln.attention_backward(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64),
                                                 z(1, 2, 0, 64), z(1, 2, 0),
                                                 np.zeros((1, 2, 0, 64))),
                 "d_out must be float32, not float64"),
                (lambda: kiln.attention_backward(z(1, 2, 0, 64), z(1, 2, 5, 64), z(1, 2, 5, 64),
                                                 z(1, 2, 0, 64), z(1, 2, 1), z(1, 2, 0, 64)),
                 "lse [B, Hq, S] = (1, 2, 0)"),
                (lambda: kiln.varlen_attention(z(0, 3, 64), z(0, 2, 64), z(0, 2, 64),
                                               i32(2), 1), "Hq = 3 is not a multiple of Hkv = 2"),
                (lambda: kiln.varlen_attention(z(0, 2, 80), z(0, 2, 80), z(0, 2, 80), i32(2), 1),
                 "D = 80"),
                (lambda: kiln.varlen_attention(z(0, 2, 64), z(0, 2, 64), z(0, 2, 64),
                                               np.zeros(2, np.int64), 1),
                 "cu_seqlens must be int32, not int64"),
                (lambda: kiln.decode_attention(z(0, 4, 1, 64), z(0, 2, 40, 64), z(0, 2, 40, 64),
                                               np.zeros(0, np.int64)), "seq_lens must be int32"),
                (lambda: kiln.decode_attention(z(1, 4, 1, 64), z(1, 2, 0, 64), z(1, 2, 0, 32),
                                               i32(1)), "must both be [B, Hkv, Smax, D]"),
                (lambda: kiln.decode_attention(z(0, 4, 1, 16), kc, kc, i32(0), i32(1, 2)),
                 "block_table has shape (1, 2); [B, max_pages] with B = 0"),
                (lambda: kiln.paged_append(kc, kc.copy(), z(1, 0, 1, 16), z(1, 0, 1, 16),
                                           np.zeros((1, 2), np.int64), i32(1), z(32, 8), z(32, 8)),
                 "block_table must be int32"),
                (lambda: kiln.paged_append(kc.astype(np.float64), kc.astype(np.float64),
                                           np.zeros((0, 1, 1, 16)), np.zeros((0, 1, 1, 16)),
                                           i32(0, 2), i32(0), z(32, 8), z(32, 8)),
                 "host arrays hold float32")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        # and the well-formed empty calls still run
        self.assertEqual(kiln.gemm(e4m3(0, 16), e4m3(4, 16).T, scale_a=1.0, scale_b=1.0).shape,
                         (0, 4))
        self.assertEqual(kiln.grouped_gemm(z(0, 32), z(2, 8, 32), i32(2)).shape, (0, 8))
        self.assertEqual(kiln.gemm(z(0, 16), z(16, 32), activation="swiglu").shape, (0, 16))
        self.assertEqual(kiln.gemm(z(4, 16), z(16, 0), activation="swiglu").shape, (4, 0))
        self.assertIsNone(kiln.paged_append(kc, kc.copy(), z(1, 0, 1, 16), z(1, 0, 1, 16),
                                            i32(1, 2), i32(1), z(32, 8), z(32, 8)))

    def test_numpy_subclasses_are_numpy_arrays(self):
        # A masked array's or a user subclass's view in another order is copied packed; a
        # read-only one is copied to be read; all as their plain arrays.
        class Sub(np.ndarray):
            pass
        x = np.random.default_rng(20).standard_normal((10, 4)).astype(np.float32)
        want = kiln.softmax(np.ascontiguousarray(x.T))
        np.testing.assert_array_equal(kiln.softmax(np.ma.array(x).T), want)
        np.testing.assert_array_equal(kiln.softmax(x.view(Sub).T), want)
        ro = x.T.copy().view(Sub)
        ro.flags.writeable = False
        np.testing.assert_array_equal(kiln.softmax(ro), want)
        with self.assertRaises(kiln.Error) as caught:  # written: refused, not copied
            kiln.softmax(x, out=ro.T)
        self.assertIn("kiln.softmax: out is read-only", str(caught.exception))
        with self.assertRaises(kiln.Error) as caught:  # a subclass's dtype checked too
            kiln.softmax(x.astype(np.complex64).view(Sub))
        self.assertIn("x has dtype complex64", str(caught.exception))

    def test_an_empty_bundle_directory_is_refused(self):
        before = kiln.bundle_dir()
        with self.assertRaises(kiln.Error) as caught:
            kiln.set_bundle_dir("")
        self.assertIn("kiln.set_bundle_dir: path is empty", str(caught.exception))
        self.assertEqual(kiln.bundle_dir(), before)

    def test_index_arrays_checked_on_the_host(self):
        # Lengths, pages, offsets and counts of host arrays are checked before the emulator runs
        # (on the GPU they are the device's: read there, clamped, never out of bounds).
        q = np.ones((1, 2, 1, 64), np.float32)
        dense = np.ones((1, 1, 100, 64), np.float32)
        paged = np.ones((4, 16, 1, 64), np.float32)
        x, w = np.ones((4, 16), np.float32), np.ones((2, 16, 16), np.float32)
        for call, message in [
                (lambda: kiln.decode_attention(q, dense, dense, np.int32([101])),
                 "seq_lens must lie in [0, 100]"),
                (lambda: kiln.decode_attention(q, dense, dense, np.int32([-1])),
                 "seq_lens must lie in [0, 100]"),
                (lambda: kiln.decode_attention(q, paged, paged, np.int32([20]), np.int32([[0, 7]])),
                 "block_table's pages in use must lie in [0, 4)"),
                (lambda: kiln.decode_attention(q, dense, dense, [10]),
                 "seq_lens must be a torch tensor or a NumPy array, not list"),
                (lambda: kiln.grouped_gemm(x, w, np.int32([3, 1])), "offsets must be 0 or more, not decrease"),
                (lambda: kiln.grouped_gemm(x, w, np.int32([-1, 3])), "offsets must be 0 or more"),
                (lambda: kiln.grouped_gemm(x, w, np.int32([2, 40])), "end at most at the 4 rows"),
                (lambda: kiln.grouped_gemm(x.reshape(2, 2, 16), w, counts=np.int32([9, 1])),
                 "counts must be at most the capacity C = 2, not 9")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        # Pages past a sequence's length are not read: any value there is fine.
        o, _ = kiln.decode_attention(q, paged, paged, np.int32([10]), np.int32([[0, 99]]))
        self.assertTrue(np.isfinite(o).all())

    def test_out_dtype_as_a_numpy_type(self):
        rng = np.random.default_rng(12)
        a = rng.standard_normal((4, 16)).astype(np.float32)
        b = rng.standard_normal((16, 3)).astype(np.float32)
        f32 = kiln.gemm(a, b, out_dtype=np.float32)
        np.testing.assert_array_equal(f32, kiln.gemm(a, b, out_dtype="f32"))
        self.assertFalse(np.array_equal(f32, kiln.gemm(a, b)))  # (bf16 out: rounded)

    def test_read_only_arrays(self):
        # Inputs may be read-only (memory-mapped weights, np.frombuffer); an out must not be.
        rng = np.random.default_rng(11)
        a, b = rng.standard_normal((5, 16)).astype(np.float32), rng.standard_normal((16, 3))
        b = b.astype(np.float32)
        ra, rb = a.copy(), b.copy()
        ra.setflags(write=False), rb.setflags(write=False)
        np.testing.assert_array_equal(kiln.gemm(ra, rb), kiln.gemm(a, b))
        np.testing.assert_array_equal(kiln.softmax(ra), kiln.softmax(a))
        w = np.ones(16, np.float32)
        w.setflags(write=False)
        np.testing.assert_array_equal(kiln.rms_norm(ra, w), kiln.rms_norm(a, np.ones(16, np.float32)))
        with self.assertRaises(kiln.Error) as caught:
            kiln.softmax(a, out=ra)
        self.assertIn("kiln.softmax: out is read-only", str(caught.exception))

    def test_read_only_inputs_of_the_layer_glue_and_the_append(self):
        rng = np.random.default_rng(12)
        qkv = rng.standard_normal((6, 64)).astype(np.float32)  # B 2, S 3; 2 + 2 * 1 heads of 16
        cos, sin = (rng.standard_normal((3, 8)).astype(np.float32) for _ in range(2))
        want = kiln.rope_qkv(qkv, cos, sin, 2, 2, 1)
        for x in (qkv, cos, sin):
            x.setflags(write=False)
        for got, w in zip(kiln.rope_qkv(qkv, cos, sin, 2, 2, 1), want):
            np.testing.assert_array_equal(got, w)
        x16 = rng.standard_normal((3, 16)).astype(np.float16)
        want = kiln.swiglu(x16)
        x16.setflags(write=False)
        np.testing.assert_array_equal(kiln.swiglu(x16), want)
        # the append's tables and new rows read-only; its caches written in place
        k_cache, v_cache = (np.zeros((2, 16, 1, 16), np.float32) for _ in range(2))
        new = rng.standard_normal((1, 2, 1, 16)).astype(np.float32)
        table, lens = np.array([[1, 0]], np.int32), np.array([15], np.int32)
        ones, zeros = np.ones((20, 8), np.float32), np.zeros((20, 8), np.float32)
        for x in (new, table, lens, ones, zeros):
            x.setflags(write=False)
        kiln.paged_append(k_cache, v_cache, new, new, table, lens, ones, zeros)
        # token 0 at position 15 (page 1, row 15), token 1 at 16 (page 0, row 0); V unrotated
        self.assertLess(rel_error(v_cache[1, 15, 0], new[0, 0, 0]), 1e-2)
        self.assertLess(rel_error(v_cache[0, 0, 0], new[0, 1, 0]), 1e-2)

    def test_layer_glue_converts_no_other_host_type(self):
        cases = [
            (lambda: kiln.swiglu(np.ones((2, 16))), "kiln.swiglu: x must be float32"),
            (lambda: kiln.heads_to_rows(np.ones((1, 2, 3, 8), np.int32)),
             "kiln.heads_to_rows: x must be float32"),
            (lambda: kiln.rope_qkv(np.ones((3, 64), bool), np.ones((3, 8), np.float32),
                                   np.ones((3, 8), np.float32), 1, 2, 1),
             "kiln.rope_qkv: qkv must be float32"),
            (lambda: kiln.swiglu_weights(np.ones((8, 4), np.float32), np.ones((8, 4), np.float16)),
             "gate and up must have one type"),
            (lambda: kiln.paged_append(*(np.zeros((2, 16, 1, 16), np.float32),) * 2,
                                       *(np.zeros((1, 1, 1, 16), np.float32),) * 2,
                                       np.zeros((1, 2), np.int32), np.zeros(1, np.int32),
                                       np.ones((4, 8), np.int32), np.ones((4, 8), np.int32)),
             "kiln.paged_append: host arrays hold float32 (bf16 values; cos and sin f32), cos is int32"),
        ]
        for call, message in cases:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))

    def test_an_object_with_dlpack_but_no_shape(self):
        class Half:
            def __dlpack__(self):
                return None
        with self.assertRaisesRegex(kiln.Error, "x .a Half. has __dlpack__ but no .shape"):
            kiln.softmax(Half())

    def test_a_kernel_variant_not_bundled_says_how_to_bundle_it(self):
        # RoPE fused into an f32 out: not among the bundled variants, and no pass computes it; the
        # message says how to bundle it and suggests no other kernel (the caller named none).
        x = np.ones((8, 64), np.float32)
        w = np.ones((64, 64), np.float32)
        angles = kiln.rope_angles(np.ones((8, 16), np.float32), np.zeros((8, 16), np.float32))
        with self.assertRaises(kiln.Error) as caught:
            kiln.gemm(x, w, rope=(angles, 64, 32), out_dtype="f32")
        self.assertIn("kiln bundle --dir", str(caught.exception))
        self.assertNotIn("did you mean", str(caught.exception))

    def test_bf16_inputs_into_an_f16_out_run_as_a_pass(self):
        # No bundled kernel stores bf16 by bf16 into f16: the product in f32, then the pass.
        rng = np.random.default_rng(31)
        a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 33)).astype(np.float32)
        got = kiln.gemm(a, b, out_dtype="f16")
        f16 = (bf16(a) @ bf16(b)).astype(np.float16).astype(np.float64)
        self.assertLess(rel_error(got, f16), 1e-6)

    def test_not_an_array(self):
        for call, message in [(lambda: kiln.gemm([[1.0]], np.ones((1, 1), np.float32)),
                               "kiln.gemm: a must be a torch tensor or a NumPy array, not list"),
                              (lambda: kiln.softmax(3.0), "x must be a torch tensor"),
                              (lambda: kiln.attention(None, None, None), "q must be")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))


class NamedMistakes(unittest.TestCase):
    """Inputs a new user's trial got wrong answers or unclear messages for: each a kiln.Error
    that names the argument, or (a float16 host out) the result in the type asked."""

    def test_each_names_what_is_wrong(self):
        x = np.ones((2, 8), np.float32)
        q = np.ones((1, 2, 4, 64), np.float32)
        kv = np.ones((1, 0, 4, 64), np.float32)
        u8 = np.zeros((4, 32), np.uint8)
        for call, message in [
                (lambda: kiln.rms_norm(x, eps=-1.0), "eps must be a finite number >= 0, not -1.0"),
                (lambda: kiln.layer_norm(x, eps=float("nan")), "eps must be a finite number"),
                (lambda: kiln.attention(q, kv, kv), "Hkv = 0: the KV heads must be at least 1"),
                (lambda: kiln.grouped_gemm(u8, np.zeros((2, 16, 32), np.uint8), np.int32([2, 4])),
                 "uint8 x and w are 8-bit inputs (e4m3 bytes) only with scale_x and scale_w"),
                (lambda: kiln.grouped_gemm(np.zeros((4, 128), np.float32),
                                           np.zeros((2, 16, 128), np.float32), np.int32([2, 4]),
                                           scale_x=np.ones((4, 1), np.float32),
                                           scale_w=np.ones((2, 1, 1), np.float32)),
                 "scale_x and scale_w are for e4m3 x and w (8-bit: uint8 or float8_e4m3fn); x is"),
                (lambda: kiln.rope_weights(np.zeros((16, 8), np.float32), 8),
                 "kiln.rope_weights: dim must be a positive multiple of 16"),
                (lambda: kiln.load(None, "ops/saxpy"), "bundle_dir must be a directory's path"),
                (lambda: kiln.load(".", ""), "name must be a kernel's name (a non-empty str")]:
            with self.assertRaises(kiln.Error) as caught:
                call()
            self.assertIn(message, str(caught.exception))

    def test_gemm_host_out_holds_the_type_asked(self):
        rng = np.random.default_rng(3)
        a, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 16), (16, 8)))
        out = np.full((5, 8), np.nan, np.float16)
        got = kiln.gemm(a, b, out=out, out_dtype="f16")
        self.assertIs(got, out)
        self.assertLess(rel_error(out.astype(np.float32), bf16(a) @ bf16(b)), 2e-3)
        with self.assertRaises(kiln.Error) as caught:
            kiln.gemm(a, b, out=np.empty((5, 8), np.float32), out_dtype="f16")
        self.assertIn("out must be a float16 host array", str(caught.exception))


class CudaRef(unittest.TestCase):
    """_kiln._cuda_ref, the capsules the package makes for torch CUDA tensors (their own
    __dlpack__ costs more than the rest of a small call): the bindings take them as CUDA arrays;
    one nobody consumed is freed with its capsule."""

    def test_bindings_take_capsules_as_cuda_arrays(self):
        def ref(shape):
            return kiln._kiln._cuda_ref(0x10000, shape, (shape[1], 1), 4, 16, 0)
        # No GPU: the call says there is no driver. A GPU: out's shape is refused before a launch.
        with self.assertRaises(kiln.Error) as caught:
            kiln._kiln._softmax(ref((4, 100)), ref((4, 10)), stream=0)
        self.assertRegex(str(caught.exception), "no CUDA driver|out has shape")
        ref((2, 3))  # never consumed

    def test_rank_past_eight_is_an_error(self):
        with self.assertRaises(kiln.Error) as caught:
            kiln._kiln._cuda_ref(0x10000, (1,) * 9, (1,) * 9, 4, 16, 0)
        self.assertIn("rank 9", str(caught.exception))
        with self.assertRaises(kiln.Error):
            kiln._kiln._cuda_ref(0x10000, (2, 2), (1,), 4, 16, 0)


class NewUsersEdges(unittest.TestCase):
    """What a new user's trial of the module found (2026-12-02): each once a misleading message,
    a refusal the docs did not promise, or a trap."""

    def test_a_broadcast_view_is_read_as_the_array_it_stands_for(self):
        # A zero-stride view of one row is copied packed (it had been refused as not contiguous,
        # while a broadcast scalar was taken); a huge one is refused before its copy.
        rng = np.random.default_rng(40)
        q = rng.standard_normal((1, 1, 9, 64)).astype(np.float32)
        row = rng.standard_normal((1, 1, 1, 64)).astype(np.float32)
        k = np.broadcast_to(row, (1, 1, 9, 64))
        o, lse = kiln.attention(q, k, k)
        want, _ = attention_reference(q.astype(np.float64), k.astype(np.float64),
                                      k.astype(np.float64), False, 64 ** -0.5)
        self.assertLess(rel_error(o, want), 1e-2)
        huge = np.broadcast_to(np.float32(1), (64, 64, 4096, 64))
        for layout in ("bhsd", "bshd"):
            with self.assertRaises(kiln.Error) as caught:
                kiln.attention(huge, huge, huge, layout=layout)
            self.assertIn("kiln.attention: q of shape", str(caught.exception))
        cache = np.broadcast_to(np.float32(1), (1, 1, 2**21, 64))  # (2^27 elements as a copy)
        with self.assertRaises(kiln.Error) as caught:
            kiln.decode_attention(q[:, :, :1], cache, cache, np.array([5], np.int32))
        self.assertIn("a broadcast array of shape (1, 1, 2097152, 64)", str(caught.exception))

    def test_host_norm_weights_of_either_float_type(self):
        rng = np.random.default_rng(41)
        x = rng.standard_normal((4, 37)).astype(np.float32)
        w = rng.standard_normal(37).astype(np.float16)
        self.assertEqual(rel_error(kiln.rms_norm(x, w), kiln.rms_norm(x, w.astype(np.float32))), 0)
        self.assertEqual(rel_error(kiln.layer_norm(x, w, w),
                                   kiln.layer_norm(x, w.astype(np.float32), w.astype(np.float32))),
                         0)

    def test_a_rope_table_of_more_positions_than_s(self):
        # A table of more positions than S names cos and sin as where S comes from (the message
        # had named qkv alone).
        qkv = np.zeros((14, 512), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            table = np.ones((14, 32), np.float32)
            kiln.rope_qkv(qkv, table, table, 2, 4, 2)
        self.assertIn("from cos and sin (14, 32)", str(caught.exception))

    def test_a_paged_cache_without_its_block_table_is_named(self):
        rng = np.random.default_rng(42)
        q = rng.standard_normal((1, 4, 1, 64)).astype(np.float32)
        cache = rng.standard_normal((10, 16, 2, 64)).astype(np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.decode_attention(q, cache, cache, np.array([5], np.int32))
        self.assertIn("comes with its block_table", str(caught.exception))

    def test_max_seqlen_is_a_bound_any_size_of_which_runs(self):
        # max_seqlen past the rows there are (an upper bound, as flash-attn's) plans as the rows:
        # it had been refused as a problem past 32 bits.
        rng = np.random.default_rng(21)
        q, k, v = (rng.standard_normal((9, 2, 64)).astype(np.float32) for _ in range(3))
        cu = np.array([0, 4, 9], np.int32)
        o, lse = kiln.varlen_attention(q, k, v, cu, 5)
        o2, lse2 = kiln.varlen_attention(q, k, v, cu, 10**9)
        np.testing.assert_array_equal(o, o2)
        np.testing.assert_array_equal(lse, lse2)

    def test_host_arrays_past_the_emulators_bound_are_refused_at_once(self):
        # The glue and the quantizers read their input whole, as a GEMM does: past 2^26 elements a
        # message, not minutes of emulation (broadcast views: nothing is allocated).
        big = np.broadcast_to(np.float32(0), (8193, 8192))
        for call in (lambda: kiln.quantize_e4m3(big), lambda: kiln.quantize_e4m3_blocks(big),
                     lambda: kiln.swiglu(big)):
            with self.assertRaisesRegex(kiln.Error, "the emulator takes arrays of up to 2\\^26"):
                call()
        with self.assertRaisesRegex(kiln.Error, "the emulator takes up to 2\\^19"):
            kiln.softmax(np.broadcast_to(np.float32(0), ((1 << 19) + 1, 1)))

    def test_an_empty_packed_batch_takes_max_seqlen_0(self):
        empty = np.zeros((0, 4, 64), np.float32)
        o, lse = kiln.varlen_attention(empty, empty[:, :2], empty[:, :2],
                                       np.array([0, 0], np.int32), 0)
        self.assertEqual((o.shape, lse.shape), ((0, 4, 64), (4, 0)))
        # Rows, but every sequence empty: 0 is the longest length, and no row is written.
        x = np.zeros((3, 4, 64), np.float32)
        o, lse = kiln.varlen_attention(x, x[:, :2], x[:, :2], np.array([0, 0], np.int32), 0)
        self.assertTrue(np.isnan(o).all() and np.isnan(lse).all())
        grads = kiln.varlen_attention_backward(x, x[:, :2], x[:, :2], o, lse, x,
                                               np.array([0, 0], np.int32), 0)
        self.assertTrue(all(np.isnan(g).all() for g in grads))
        with self.assertRaises(kiln.Error) as caught:  # a sequence of 3 rows is longer than 0
            kiln.varlen_attention(x, x[:, :2], x[:, :2], np.array([0, 3], np.int32), 0)
        self.assertIn("longer than max_seqlen = 0", str(caught.exception))

    def test_a_dlpack_object_without_a_shape_is_told_what_is_missing(self):
        class Bare:
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, **kw):
                return self.a.__dlpack__(**kw)

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        with self.assertRaises(kiln.Error) as caught:
            kiln.softmax(Bare(np.zeros((2, 3), np.float32)))
        self.assertIn("has __dlpack__ but no .shape", str(caught.exception))

    def test_backward_in_the_rows_layout(self):
        # S == H, where bhsd arrays of the same shape would have passed every check.
        rng = np.random.default_rng(43)
        q, k, v, d_o = (rng.standard_normal((1, 4, 4, 64)).astype(np.float32) for _ in range(4))
        o, lse = kiln.attention(q, k, v, layout="bshd")
        grads = kiln.attention_backward(q, k, v, o, lse, d_o, layout="bshd")
        t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
        want = backward_reference(t(q), t(k), t(v), t(o), t(d_o), False)
        for got, w in zip(grads, want):
            self.assertLess(rel_error(t(got), w), 1e-2)

    def test_paged_append_refuses_one_cache_for_both(self):
        cache = np.zeros((4, 16, 2, 64), np.float32)
        new = np.zeros((1, 1, 2, 64), np.float32)
        table = np.arange(4, dtype=np.int32)[None]
        cos = np.ones((64, 32), np.float32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.paged_append(cache, cache, new, new, table, np.array([3], np.int32), cos, cos)
        self.assertIn("share memory", str(caught.exception))


class SecondTrialEdges(unittest.TestCase):
    """What a second trial of the module (8-bit, grouped, paged and loaded calls) found."""

    def test_a_scale_given_as_a_number_is_a_finite_f32_and_not_a_bool(self):
        a = np.full((2, 16), 0x38, np.uint8)  # e4m3 1.0
        w = np.full((4, 16), 0x38, np.uint8)
        for scale, says in ((1e39, "where it is inf"), (float("nan"), "must be finite"),
                            (True, "not bool"), (np.bool_(True), "not bool")):
            with self.assertRaises(kiln.Error) as caught:
                kiln.gemm(a, w.T, scale_a=scale, scale_b=1.0)
            self.assertIn("kiln.gemm: scale_a", str(caught.exception))
            self.assertIn(says, str(caught.exception))
        self.assertEqual(float(kiln.gemm(a, w.T, scale_a=np.float32(2), scale_b=1)[0, 0]), 32.0)

    def test_paged_append_refuses_two_tokens_in_one_row(self):
        cache = np.zeros((4, 16, 1, 64), np.float32)
        new = np.stack([np.full((1, 1, 64), 1.0), np.full((1, 1, 64), 2.0)]).astype(np.float32)
        cos, sin = np.ones((32, 32), np.float32), np.zeros((32, 32), np.float32)
        lens = np.array([3, 3], np.int32)
        with self.assertRaises(kiln.Error) as caught:
            kiln.paged_append(cache, cache.copy(), new, new, np.array([[1, 2], [1, 3]], np.int32),
                              lens, cos, sin)
        self.assertIn("token 0 of sequence 0 and token 0 of sequence 1 land in the same row "
                      "(page 1, row 3): block_table lists that page twice", str(caught.exception))
        kc, vc = cache.copy(), cache.copy()  # two pages apart: both written
        kiln.paged_append(kc, vc, new, new, np.array([[1, 2], [3, 0]], np.int32), lens, cos, sin)
        self.assertEqual((vc[1, 3, 0, 0], vc[3, 3, 0, 0]), (1.0, 2.0))

    def test_k_of_0_is_named_as_such(self):
        # (The message had said "M, N, K must be at least 1", while an M or N of 0 is taken.)
        with self.assertRaises(kiln.Error) as caught:
            kiln.gemm(np.ones((8, 0), np.float32), np.ones((0, 8), np.float32))
        self.assertIn("kiln.gemm: K = 0", str(caught.exception))
        self.assertEqual(kiln.gemm(np.ones((0, 4), np.float32), np.ones((4, 8), np.float32)).shape,
                         (0, 8))

    def test_an_access_past_an_array_names_its_parameter(self):
        # The read past `src` was reported against `out`, the allocation below it then.
        stream_read = kiln.load(kiln.bundle_dir(), "ops/stream_read")
        with self.assertRaises(kiln.Error) as caught:
            stream_read(np.zeros(64, np.int32), np.zeros(4096, np.int32), 4096)
        self.assertIn("bytes past the end of 'src'", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
