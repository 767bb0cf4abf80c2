// kiln.gemm over the GEMM entry point: out = epilogue(alpha * a @ b + beta * c) with a (M, K),
// b (K, N), out (M, N); or out = swiglu(a @ b), (M, N/2) and row-major (rt::SwigluRowOf); or
// out = rope(a @ b), row-major, its columns in rt::RopeRowOf's order within each head. CUDA
// tensors: any strides the entry point takes (each matrix row- or column-major with a leading
// dimension), launched on the caller's stream through rt::GemmRunner. Host arrays: contiguous f32,
// rounded to the input type and run through the same planner and kernels on the emulator (a chip of
// compute capability 9.0).
#include "kiln/ops/gemm.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr const char* kCall = "kiln.gemm";

struct GemmArgs {
  const Array *a, *b;
  Array* out;
  std::optional<Array> c, bias, residual;
  float alpha, beta;
  std::string epilogue, in_type, out_type;
  std::optional<Array> rope_angles;  // rope: int32 words [period, rope_dim / 2]
  int64_t rope_rows = 0, rope_dim = 0;
};

// rope's angle words: contiguous int32 [period, rope_dim / 2] (kiln.rope_angles), on the call's
// device (CallDevice checks).
void BindRope(const GemmArgs& g, CallDevice& d, rt::GemmOperands& o) {
  if (g.epilogue != "rope") return;
  if (!g.rope_angles) throw Error(absl::StrCat(kCall, ": rope needs its angle words"));
  const Array& angles = *g.rope_angles;
  Require(angles, kCall, "rope's angles", 2, {"i32"});
  if (static_cast<int64_t>(angles.shape(1)) * 2 != g.rope_dim)
    throw Error(absl::StrCat(kCall, ": rope's angles must be [period, rope_dim / 2] = [",
                             angles.shape(0), ", ", g.rope_dim / 2, "], not ", ShapeText(angles)));
  o.rope_angles = d.Bind(angles, /*read_only=*/true);
  o.rope_rows = g.rope_rows, o.rope_dim = g.rope_dim;
  o.rope_period = static_cast<int64_t>(angles.shape(0));
}

// A call whose out is empty launches nothing, but its sizes, types and epilogue are checked as a
// call with one row would be (M of 0 counted as 1): K = 0, a swiglu's N, a term alpha and beta
// need, ... With N = 0 no call has N's columns, and K alone is checked. Its pointers stand in on
// their elements' boundaries, packed.
void CheckAsWithElements(const rt::GemmSize& size, const rt::GemmOptions& options,
                         const rt::GemmOperands& o, const GemmArgs& g) {
  if (size.n == 0 && size.k >= 1) return;
  rt::GemmOperands probe = o;
  probe.lda = probe.ldb = probe.ldc = 0;
  probe.a = probe.b = probe.c = 256;
  if (g.c) probe.c_in = 256;
  if (g.bias) probe.bias = 256;
  if (g.residual) probe.residual = 256;
  if (g.rope_angles) probe.rope_angles = 256;
  absl::StatusOr<rt::GemmPlan> plan =
      rt::PlanGemm(size.k < 1 ? size  // (the sizes as given, in its message)
                              : rt::GemmSize{std::max<int64_t>(size.m, 1), size.n, size.k},
                   options, probe, /*compute_capability=*/90);
  ThrowIfError(plan.status());
}

// A matrix's layout: row-major (stride 1 along its columns) or column-major, and the stride of
// the other dimension; a dimension of 1 takes either.
struct Layout {
  bool row_major;
  int64_t ld;
};
Layout LayoutOf(const Array& x, const std::string& what) {
  const int64_t rows = static_cast<int64_t>(x.shape(0)), cols = static_cast<int64_t>(x.shape(1));
  if (x.stride(1) == 1 || cols == 1) return {true, rows == 1 ? cols : x.stride(0)};
  if (x.stride(0) == 1 || rows == 1) return {false, cols == 1 ? rows : x.stride(1)};
  throw Error(absl::StrCat(kCall, ": ", what, " of shape ", ShapeText(x), " and strides (",
                           x.stride(0), ", ", x.stride(1),
                           ") is neither row- nor column-major; call .contiguous() (torch) or "
                           "numpy.ascontiguousarray first"));
}

void CheckShapes(const GemmArgs& g) {
  for (const auto& [what, x] : {std::pair{"a", g.a}, std::pair{"b", g.b},
                                std::pair{"out", static_cast<const Array*>(g.out)}})
    if (x->ndim() != 2)
      throw Error(absl::StrCat(kCall, ": ", what, " must have rank 2, not ", x->ndim(), " (shape ",
                               ShapeText(*x), ")"));
  const size_t m = g.a->shape(0), k = g.a->shape(1), n = g.b->shape(1);
  const size_t out_n = g.epilogue == "swiglu" ? n / 2 : n;  // gate and up columns pair
  if (g.b->shape(0) != k)
    throw Error(absl::StrCat(kCall, ": a ", ShapeText(*g.a), " and b ", ShapeText(*g.b),
                             " do not multiply (a's columns must be b's rows)"));
  if (g.out->shape(0) != m || g.out->shape(1) != out_n)
    throw Error(
        absl::StrCat(kCall, ": out has shape ", ShapeText(*g.out), ", not (", m, ", ", out_n, ")"));
  RequireEpilogueShapes(kCall, g.c, g.bias, g.residual, *g.out, static_cast<int64_t>(n));
}

void Gemm(GemmArgs g, uint64_t stream) {
  absl::StatusOr<std::string> terms = rt::CanonicalEpilogue(g.epilogue);  // before out's shape
  ThrowIfError(terms.status());
  g.epilogue = *terms;
  CheckShapes(g);
  CallDevice d(kCall,
               {g.a, g.b, g.out, g.c ? &*g.c : nullptr, g.bias ? &*g.bias : nullptr,
                g.residual ? &*g.residual : nullptr, g.rope_angles ? &*g.rope_angles : nullptr},
               stream);
  const rt::GemmSize size = {static_cast<int64_t>(g.a->shape(0)),
                             static_cast<int64_t>(g.b->shape(1)),
                             static_cast<int64_t>(g.a->shape(1))};
  const rt::GemmOptions options{
      .in_type = g.in_type, .out_type = g.out_type, .epilogue = g.epilogue};
  rt::GemmOperands o{.alpha = g.alpha, .beta = g.beta};
  BindRope(g, d, o);
  if (!d.emulated()) {
    Require(*g.a, kCall, "a", 2, {g.in_type}, /*contiguous=*/false);  // any layout LayoutOf takes
    Require(*g.b, kCall, "b", 2, {g.in_type}, /*contiguous=*/false);
    const Layout a = LayoutOf(*g.a, "a"), b = LayoutOf(*g.b, "b"), c = LayoutOf(*g.out, "out");
    o.a = Address(*g.a), o.b = Address(*g.b), o.c = Address(*g.out);
    o.a_col_major = !a.row_major, o.lda = a.ld;
    o.b_row_major = b.row_major, o.ldb = b.ld;
    o.c_row_major = c.row_major, o.ldc = c.ld;
    for (const auto& [what, x, to] :
         {std::tuple{"c", &g.c, &o.c_in}, std::tuple{"residual", &g.residual, &o.residual}})
      if (*x) {
        const Layout l = LayoutOf(**x, what);
        if (l.row_major != c.row_major || l.ld != c.ld)
          throw Error(absl::StrCat(kCall, ": ", what, " must be laid out as out is"));
        *to = Address(**x);
      }
    if (g.bias) {
      RequirePackedBias(kCall, *g.bias);
      o.bias = Address(*g.bias);
    }
    for (const Array* x : {g.out, g.c ? &*g.c : nullptr, g.bias ? &*g.bias : nullptr,
                           g.residual ? &*g.residual : nullptr})
      if (x && DtypeName(*x) != g.out_type)
        throw Error(absl::StrCat(kCall, ": out, c, bias and residual must be ", g.out_type,
                                 ", not ", DtypeName(*x)));
    if (size.m == 0 || size.n == 0) return CheckAsWithElements(size, options, o, g);
    ThrowIfError(RunnerFor<rt::GemmRunner>(BundleDir())
                     .Run(size, options, o, reinterpret_cast<cu::CUstream>(stream)));
    return;
  }
  // Host: contiguous f32, narrowed and laid out as the entry point's own problem is, unswapped:
  // A row-major, B and C (with C_in and residual) column-major; a swiglu's C row-major, as it
  // must be.
  for (const auto& [what, x] : {std::pair{"a", g.a}, std::pair{"b", g.b},
                                std::pair{"out", static_cast<const Array*>(g.out)}})
    Require(*x, kCall, what, 2, {"f32"}, true, /*result=*/std::string(what) == "out");
  o.c_row_major = g.epilogue == "swiglu" || g.epilogue == "rope";
  for (const auto& [what, x] :
       {std::pair{"c", &g.c}, std::pair{"bias", &g.bias}, std::pair{"residual", &g.residual}})
    if (*x) Require(**x, kCall, what, -1, {"f32"});  // (with no element too, as out's)
  if (size.m == 0 || size.n == 0) return CheckAsWithElements(size, options, o, g);
  const double m = size.m, n = size.n, k = size.k;  // (every element of a, b and out is touched)
  if (k >= 1)                                       // (K = 0: the entry point's own message)
    ThrowIfError(emu::CheckProblemSize(
        kCall, {{"a (M x K)", m * k}, {"b (K x N)", k * n}, {"out (M x N)", m * n}}, m * n * k));
  o.a = d.BindNarrowed(*g.a, g.in_type), o.b = d.BindNarrowed(*g.b, g.in_type, true);
  for (const auto& [what, x, to] :
       {std::tuple{"c", &g.c, &o.c_in}, std::tuple{"bias", &g.bias, &o.bias},
        std::tuple{"residual", &g.residual, &o.residual}})
    if (*x) *to = d.BindNarrowed(**x, g.out_type, (*x)->ndim() == 2);
  std::vector<uint8_t> result;
  o.c = d.BindPoisoned(g.out->size(), g.out_type, &result);
  rt::EmulatedOpDevice device = EmulatorDevice(*d.emulator());
  ThrowIfError(rt::RunGemm(size, options, o, /*compute_capability=*/90, device));
  d.Finish();
  Widen(result, g.out_type, *g.out, /*column_major=*/!o.c_row_major);
}

}  // namespace

void BindGemm(nb::module_& m) {
  m.def(
      "_gemm",
      [](const Array& a, const Array& b, Array out, std::optional<Array> c,
         std::optional<Array> bias, std::optional<Array> residual, float alpha, float beta,
         const std::string& epilogue, const std::string& in_type, const std::string& out_type,
         std::optional<Array> rope_angles, int64_t rope_rows, int64_t rope_dim, uint64_t stream) {
        Gemm({&a, &b, &out, c, bias, residual, alpha, beta, epilogue, in_type, out_type,
              rope_angles, rope_rows, rope_dim},
             stream);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("c").none(), nb::arg("bias").none(),
      nb::arg("residual").none(), nb::arg("alpha"), nb::arg("beta"), nb::arg("epilogue"),
      nb::arg("in_type"), nb::arg("out_type"), nb::arg("rope_angles").none() = nb::none(),
      nb::arg("rope_rows") = 0, nb::arg("rope_dim") = 0, nb::arg("stream") = 0);
}

}  // namespace kiln::py
