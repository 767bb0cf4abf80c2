// kiln.attention over the attention entry point: o = softmax(scale * q k^T) v per head and the
// rows' log-sum-exp, q and o [B, Hq, S, D], k and v [B, Hkv, Skv, D] contiguous, lse [B, Hq, S]
// f32 (the kiln package turns [B, S, H, D] into this layout). CUDA tensors: bf16 or f16, on the
// caller's stream (rt::AttentionRunner). Host arrays: f32, rounded to bf16 and run on the emulator
// as a chip of compute capability 9.0 (rt::RunAttention: the kernels PlanAttention names).
#include "kiln/ops/attention.h"

#include <nanobind/nanobind.h>

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

constexpr const char* kCall = "kiln.attention";

rt::AttentionSize SizeOf(const Array& q, const Array& k, const Array& v, const Array& o,
                         const Array& lse) {
  for (const auto& [what, x] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"out", &o}})
    if (x->ndim() != 4)
      throw Error(absl::StrCat(kCall, ": ", what, " must have rank 4 ([B, H, S, D]), not ",
                               x->ndim(), " (shape ", ShapeText(*x), ")"));
  const rt::AttentionSize z = {static_cast<int64_t>(q.shape(0)), static_cast<int64_t>(q.shape(1)),
                               static_cast<int64_t>(k.shape(1)), static_cast<int64_t>(q.shape(2)),
                               static_cast<int64_t>(k.shape(2)), static_cast<int64_t>(q.shape(3))};
  if (ShapeOf(k) != ShapeOf(v) || k.shape(0) != q.shape(0) || k.shape(3) != q.shape(3))
    throw Error(absl::StrCat(kCall, ": k ", ShapeText(k), " and v ", ShapeText(v),
                             " must both be [B, Hkv, Skv, D] for q ", ShapeText(q)));
  if (ShapeOf(o) != ShapeOf(q))
    throw Error(absl::StrCat(kCall, ": out has shape ", ShapeText(o), ", q ", ShapeText(q)));
  if (ShapeOf(lse) != std::vector<int64_t>{z.b, z.hq, z.s})
    throw Error(absl::StrCat(kCall, ": lse has shape ", ShapeText(lse), "; [B, Hq, S] is (", z.b,
                             ", ", z.hq, ", ", z.s, ")"));
  return z;
}

void Attention(const Array& q, const Array& k, const Array& v, Array out, const Array& lse,
               bool causal, float scale, uint64_t stream) {
  const Array& o = out;
  const rt::AttentionSize z = SizeOf(q, k, v, o, lse);
  CallDevice d(kCall, {&q, &k, &v, &o, &lse}, stream);
  const std::vector<std::string> types =
      d.emulated() ? std::vector<std::string>{"f32"} : std::vector<std::string>{"bf16", "f16"};
  for (const auto& [what, x] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"out", &o}})
    Require(*x, kCall, what, 4, types);
  Require(lse, kCall, "lse", 3, {"f32"});
  rt::AttentionOptions options{.causal = causal, .scale = scale};
  if (!d.emulated()) {
    options.dtype = DtypeName(q);
    for (const Array* x : {&k, &v, &o})
      if (DtypeName(*x) != options.dtype)
        throw Error(absl::StrCat(kCall, ": q, k, v and out must share one type; q is ",
                                 options.dtype, ", another ", DtypeName(*x)));
    ThrowIfError(RunnerFor<rt::AttentionRunner>(BundleDir())
                     .Run(z, options,
                          {Address(q), Address(k), Address(v), Address(o), Address(lse)},
                          reinterpret_cast<cu::CUstream>(stream)));
    return;
  }
  std::vector<uint8_t> result;
  const rt::AttentionOperands ops{d.BindNarrowed(q, "bf16"), d.BindNarrowed(k, "bf16"),
                                  d.BindNarrowed(v, "bf16"),
                                  d.BindPoisoned(o.size(), "bf16", &result), d.Bind(lse)};
  EmulatedOpDevice device(*d.emulator());
  ThrowIfError(rt::RunAttention(z, options, ops, /*compute_capability=*/90, device));
  d.Finish();
  Widen(result, "bf16", out);
}

}  // namespace

void BindAttention(nb::module_& m) {
  m.def("_attention", &Attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("lse"), nb::arg("causal"), nb::arg("scale"), nb::arg("stream") = 0);
}

}  // namespace kiln::py
