// kiln.gemm with 8-bit inputs: out = (a * scale_a) @ (b * scale_b), a (M, K) e4m3 row-major, b
// (K, N) e4m3 column-major (a linear layer's (N, K) weight w as w.t(): the FP8 tensor cores read
// both K-major), their bytes passed as uint8 (the kiln package views torch's float8_e4m3fn so).
// The scales are f32 and their shapes say the scaling: one value each (tensorwise); (M,) or
// (M, 1) and (N,) or (1, N) (rowwise); (M, ceil(K/128)) and (ceil(N/128), ceil(K/128))
// (blockwise: a per 1x128, b's weight per 128x128), in any strides. The epilogue's terms follow,
// as for 16-bit inputs (c, bias and residual of out's type and, but bias, laid out as out). CUDA
// tensors run through rt::GemmRunner on the caller's stream; host arrays (packed) on the emulator.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/bundle/epilogue_terms.h"
#include "kiln/ops/gemm.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr const char* kCall = "kiln.gemm (8-bit)";

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether a host array's elements fill its bytes from its first one, in either order (the
// emulator copies those bytes; the strides then index them as on the GPU).
bool Dense(const Array& x) {
  if (IsContiguous(x)) return true;
  return x.ndim() == 2 && x.stride(0) == 1 && x.stride(1) == static_cast<int64_t>(x.shape(0));
}

// The scaling the scales' shapes say, their element strides set in `o`; else kiln.Error.
std::string ScalingOf(const Array& sa, const Array& sb, int64_t m, int64_t n, int64_t k,
                      rt::GemmOperands& o) {
  const std::vector<int64_t> a = ShapeOf(sa), b = ShapeOf(sb);
  auto count = [](const std::vector<int64_t>& s) {
    int64_t c = 1;
    for (int64_t d : s) c *= d;
    return c;
  };
  // The stride along dimension `d` of a scale (0 for a dimension of 1).
  auto stride = [](const Array& s, size_t d) -> int64_t {
    return s.shape(d) == 1 ? 0 : s.stride(d);
  };
  if (count(a) == 1 && count(b) == 1) return "tensorwise";
  const int64_t kb = CeilDiv(k, 128);
  if (a.size() == 2 && b.size() == 2 && a[0] == m && a[1] == kb && b[0] == CeilDiv(n, 128) &&
      b[1] == kb) {
    // A scale of one value has no strides: the entry point's defaults then read it.
    o.sa_row = stride(sa, 0), o.sa_k = stride(sa, 1), o.sb_row = stride(sb, 0),
    o.sb_k = stride(sb, 1);
    return "blockwise";
  }
  const bool rows_a = count(a) == m && (a.size() == 1 || (a.size() == 2 && a[1] == 1)),
             cols_b = count(b) == n && (b.size() == 1 || (b.size() == 2 && b[0] == 1));
  if (rows_a && cols_b) {
    const bool packed_a = m == 1 || sa.stride(0) == 1,
               packed_b = n == 1 || sb.stride(b.size() - 1) == 1;
    if (packed_a && packed_b) return "rowwise";
    throw Error(absl::StrCat(kCall, ": rowwise scales must be packed, one value after another: ",
                             packed_a ? "" : absl::StrCat("scale_a ", ShapeText(sa)),
                             packed_a || packed_b ? "" : " and ",
                             packed_b ? "" : absl::StrCat("scale_b ", ShapeText(sb)),
                             " has gaps (a strided view: pass a packed copy)"));
  }
  throw Error(absl::StrCat(kCall, ": scale_a ", ShapeText(sa), " and scale_b ", ShapeText(sb),
                           " name no scaling: one value each (tensorwise); (", m, ",) and (", n,
                           ",), packed (rowwise); or (", m, ", ", kb, ") and (", CeilDiv(n, 128),
                           ", ", kb, ") (blockwise: a per 1x128, b per 128x128)"));
}

// The epilogue's terms past the product (kiln.gemm's c, alpha, beta, bias, activation, residual).
struct Fp8Terms {
  std::optional<Array> c, bias, residual;
  float alpha = 1, beta = 0;
  std::string epilogue;
};

// Their shapes and, on the GPU, their types and layouts (as out's), set in `o`.
void CheckTerms(const Fp8Terms& t, const Array& out, int64_t n, const std::string& out_type,
                bool emulated, rt::GemmOperands& o) {
  RequireEpilogueShapes(kCall, t.c, t.bias, t.residual, out, n);
  o.alpha = t.alpha, o.beta = t.beta;
  if (emulated) return;
  if (t.bias) RequirePackedBias(kCall, *t.bias);
  for (const auto& [what, x, to] :
       {std::tuple{"c", &t.c, &o.c_in}, std::tuple{"bias", &t.bias, &o.bias},
        std::tuple{"residual", &t.residual, &o.residual}})
    if (*x) {
      if (DtypeName(**x) != out_type)
        throw Error(absl::StrCat(kCall, ": ", what, " must be ", out_type, " as out is, not ",
                                 DtypeName(**x)));
      if (what != std::string("bias") &&
          ((*x)->stride(0) != out.stride(0) || (*x)->stride(1) != out.stride(1)))
        throw Error(absl::StrCat(kCall, ": ", what, " must be laid out as out is"));
      *to = Address(**x);
    }
}

void GemmFp8(const Array& a, const Array& b, Array out, const Array& scale_a, const Array& scale_b,
             const std::string& out_type, Fp8Terms terms, const std::string& a_type,
             const std::string& b_type, uint64_t stream) {
  absl::StatusOr<std::string> epilogue = rt::CanonicalEpilogue(terms.epilogue);
  ThrowIfError(epilogue.status());
  for (const auto& [what, x] :
       {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"out", static_cast<const Array*>(&out)}})
    if (x->ndim() != 2)
      throw Error(absl::StrCat(kCall, ": ", what, " must have rank 2, not ", x->ndim()));
  const int64_t m = a.shape(0), k = a.shape(1), n = b.shape(1);
  if (static_cast<int64_t>(b.shape(0)) != k)  // (as the 16-bit call says it; out is made after)
    throw Error(absl::StrCat(kCall, ": a ", ShapeText(a), " and b ", ShapeText(b),
                             " do not multiply (a's columns must be b's rows)"));
  if (static_cast<int64_t>(out.shape(0)) != m || static_cast<int64_t>(out.shape(1)) != n)
    throw Error(
        absl::StrCat(kCall, ": out has shape ", ShapeText(out), ", not (", m, ", ", n, ")"));
  CallDevice d(kCall,
               {&a, &b, &out, &scale_a, &scale_b, terms.c ? &*terms.c : nullptr,
                terms.bias ? &*terms.bias : nullptr, terms.residual ? &*terms.residual : nullptr},
               stream);
  Require(a, kCall, "a", 2, {"u8"}, /*contiguous=*/false);
  Require(b, kCall, "b", 2, {"u8"}, /*contiguous=*/false);
  Require(scale_a, kCall, "scale_a", -1, {"f32"}, /*contiguous=*/false);
  Require(scale_b, kCall, "scale_b", -1, {"f32"}, /*contiguous=*/false);
  // K-major: a's rows and b's columns hold K (packed on the emulator, which copies their bytes).
  const bool a_k_major = a.stride(1) == 1 || k <= 1, b_k_major = b.stride(0) == 1 || k <= 1;
  const int64_t lda = m == 1 ? k : a.stride(0), ldb = n == 1 ? k : b.stride(1);
  if (!a_k_major || !b_k_major)
    throw Error(absl::StrCat(kCall,
                             ": a must be row-major and b column-major (b = w.t() of an (N, K) "
                             "weight w): the FP8 tensor cores read both along K"));
  if (d.emulated() && (lda != k || ldb != k))
    throw Error(absl::StrCat(kCall, ": on the emulator a's rows and b's columns must be packed, ",
                             "K = ", k, " elements apart, not ", lda, " and ", ldb,
                             " (numpy.ascontiguousarray(a), and b = "
                             "numpy.ascontiguousarray(w).T)"));
  rt::GemmOperands o;
  const std::string scaling = ScalingOf(scale_a, scale_b, m, n, k, o);
  const rt::GemmOptions options{.in_type = a_type,
                                .out_type = out_type,
                                .epilogue = *epilogue,
                                .in_type_b = b_type == a_type ? "" : b_type,
                                .scaling = scaling};
  const rt::GemmSize size{m, n, k};
  CheckTerms(terms, out, n, out_type, d.emulated(), o);
  if (!d.emulated()) {
    if (DtypeName(out) != out_type)
      throw Error(absl::StrCat(kCall, ": out must be ", out_type, ", not ", DtypeName(out)));
    const bool c_row = out.stride(1) == 1 || n == 1;
    if (!c_row && out.stride(0) != 1 && m != 1)
      throw Error(absl::StrCat(kCall, ": out must be row- or column-major"));
    o.a = Address(a), o.b = Address(b), o.c = Address(out), o.lda = lda, o.ldb = ldb;
    o.c_row_major = c_row, o.ldc = c_row ? (m == 1 ? n : out.stride(0)) : out.stride(1);
    o.scale_a = Address(scale_a), o.scale_b = Address(scale_b);
    ThrowIfError(RunnerFor<rt::GemmRunner>(BundleDir())
                     .Run(size, options, o, reinterpret_cast<cu::CUstream>(stream)));
    return;
  }
  // Host: the bytes as they are; the scales packed (their strides as given); out f32, row-major.
  Require(out, kCall, "out", 2, {"f32"}, true, /*result=*/true);
  if (m >= 1 && n >= 1 && k >= 1)  // (a size of 0: the entry point's own message, or nothing)
    ThrowIfError(emu::CheckProblemSize(
        kCall, {{"a (M x K)", double(m) * k}, {"b (N x K)", double(n) * k}, {"out", double(m) * n}},
        double(m) * n * k));
  if (!Dense(scale_a) || !Dense(scale_b))
    throw Error(absl::StrCat(kCall, ": host scales must be packed (row- or column-major)"));
  o.a = d.Bind(a, /*read_only=*/true), o.b = d.Bind(b, /*read_only=*/true);
  o.scale_a = d.Bind(scale_a, true), o.scale_b = d.Bind(scale_b, true);
  for (const auto& [what, x, to] :
       {std::tuple{"c", &terms.c, &o.c_in}, std::tuple{"bias", &terms.bias, &o.bias},
        std::tuple{"residual", &terms.residual, &o.residual}})
    if (*x) {  // f32 as out_type, row-major as out is
      Require(**x, kCall, what, -1, {"f32"});
      *to = d.BindNarrowed(**x, out_type);
    }
  std::vector<uint8_t> result;
  o.c = d.BindPoisoned(out.size(), out_type, &result);
  o.c_row_major = true;
  rt::EmulatedOpDevice device = EmulatorDevice(*d.emulator());
  ThrowIfError(rt::RunGemm(size, options, o, /*compute_capability=*/90, device));
  d.Finish();
  Widen(result, out_type, out, /*column_major=*/false);
}

}  // namespace

void BindGemmFp8(nb::module_& m) {
  m.def(
      "_gemm_fp8",
      [](const Array& a, const Array& b, Array out, const Array& scale_a, const Array& scale_b,
         const std::string& out_type, std::optional<Array> c, std::optional<Array> bias,
         std::optional<Array> residual, float alpha, float beta, const std::string& epilogue,
         const std::string& a_type, const std::string& b_type, uint64_t stream) {
        GemmFp8(a, b, out, scale_a, scale_b, out_type, {c, bias, residual, alpha, beta, epilogue},
                a_type, b_type, stream);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("scale_a"), nb::arg("scale_b"),
      nb::arg("out_type"), nb::arg("c").none(), nb::arg("bias").none(), nb::arg("residual").none(),
      nb::arg("alpha"), nb::arg("beta"), nb::arg("epilogue"), nb::arg("a_type"), nb::arg("b_type"),
      nb::arg("stream") = 0);
}

}  // namespace kiln::py
