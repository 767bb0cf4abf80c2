// kiln.grouped_gemm: out[t] = x[t] @ w[e].T for each token t of expert e (kiln/ops/grouped_gemm.h).
// Contiguous: x (T, K), out (T, N), `sizes` the int32 ends of the experts' rows (torch's offs);
// masked: x (E, C, K), out (E, C, N), `sizes` each expert's count. w (E, N, K), row-major. CUDA
// tensors (bf16) run through rt::GemmRunner on the caller's stream; host arrays (f32, run as bf16)
// on the emulator.
#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ops/gemm.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr const char* kCall = "kiln.grouped_gemm";

void GroupedGemm(const Array& x, const Array& w, Array out, const Array& sizes, bool masked,
                 uint64_t stream) {
  const int rank = masked ? 3 : 2;
  if (x.ndim() != static_cast<size_t>(rank) || out.ndim() != static_cast<size_t>(rank) ||
      w.ndim() != 3 || sizes.ndim() != 1)
    throw Error(absl::StrCat(kCall, ": x and out must have rank ", rank,
                             masked ? " (experts, capacity, ...)" : " (tokens, ...)",
                             ", w rank 3 (experts, N, K) and the sizes rank 1, not x ",
                             ShapeText(x), ", w ", ShapeText(w), ", out ", ShapeText(out),
                             ", sizes ", ShapeText(sizes)));
  const int64_t E = w.shape(0), N = w.shape(1), K = w.shape(2);
  const int64_t rows = masked ? x.shape(0) * x.shape(1) : x.shape(0);
  const bool fits = static_cast<int64_t>(x.shape(rank - 1)) == K &&
                    static_cast<int64_t>(out.shape(rank - 1)) == N &&
                    static_cast<int64_t>(sizes.shape(0)) == E &&
                    (!masked || static_cast<int64_t>(x.shape(0)) == E) &&
                    (masked ? out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1)
                            : out.shape(0) == x.shape(0));
  if (!fits)
    throw Error(absl::StrCat(kCall, ": x ", ShapeText(x), ", w ", ShapeText(w), ", out ",
                             ShapeText(out), " and sizes ", ShapeText(sizes), " do not make ",
                             masked ? "(E, C, K) x (E, N, K) -> (E, C, N) with E counts"
                                    : "(T, K) x (E, N, K) -> (T, N) with E ends"));
  CallDevice d(kCall, {&x, &w, &out, &sizes}, stream);
  Require(sizes, kCall, masked ? "counts" : "offsets", 1, {"i32"});
  const rt::GroupedGemmSize size{.rows = rows, .n = N, .k = K, .groups = static_cast<int>(E)};
  const rt::GroupedGemmOptions options{.layout = masked ? rt::GroupedLayout::kMasked
                                                        : rt::GroupedLayout::kContiguous};
  rt::GroupedGemmOperands o;
  if (!d.emulated()) {
    Require(x, kCall, "x", rank, {"bf16"});
    Require(w, kCall, "w", 3, {"bf16"});
    Require(out, kCall, "out", rank, {"bf16"});
    o = {.x = Address(x), .w = Address(w), .out = Address(out), .sizes = Address(sizes)};
    ThrowIfError(RunnerFor<rt::GemmRunner>(BundleDir())
                     .RunGrouped(size, options, o, reinterpret_cast<cu::CUstream>(stream)));
    return;
  }
  Require(x, kCall, "x", rank, {"f32"});
  Require(w, kCall, "w", 3, {"f32"});
  Require(out, kCall, "out", rank, {"f32"});
  std::vector<uint8_t> result;
  o = {.x = d.BindNarrowed(x, "bf16"),
       .w = d.BindNarrowed(w, "bf16"),
       .out = d.BindPoisoned(out.size(), "bf16", &result),
       .sizes = d.Bind(sizes, /*read_only=*/true)};
  EmulatedOpDevice device(*d.emulator());
  ThrowIfError(rt::RunGroupedGemm(size, options, o, /*cc=*/90, device));
  d.Finish();
  Widen(result, "bf16", out, /*column_major=*/false);
}

}  // namespace

void BindGroupedGemm(nb::module_& m) {
  m.def("_grouped_gemm", &GroupedGemm, nb::arg("x"), nb::arg("w"), nb::arg("out"), nb::arg("sizes"),
        nb::arg("masked"), nb::arg("stream") = 0);
}

}  // namespace kiln::py
