// kiln.attention over the attention entry point: o = softmax(scale * q k^T) v per head and the
// rows' log-sum-exp, q and o [B, Hq, S, D], k and v [B, Hkv, Skv, D] contiguous, or (rows) all
// four [B, S, H, D], each position's row of heads strided (views of one fused projection's
// output), lse [B, Hq, S] f32. CUDA tensors: bf16 or f16, on the caller's stream
// (rt::AttentionRunner). Host arrays: f32, rounded to bf16 and run on the emulator
// as a chip of compute capability 9.0 (rt::RunAttention: the kernels PlanAttention names).
#include "kiln/ops/attention.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ops/attention_backward.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr const char* kCall = "kiln.attention";

// Elements from one position's row of heads to the next in a [B, S, H, D] array whose heads and
// D are packed and whose batches are S rows apart (any stride of a dimension of 1 will do).
int64_t RowStride(const Array& x, const char* what) {
  const int64_t b = x.shape(0), s = x.shape(1), h = x.shape(2), d = x.shape(3);
  const int64_t row = s > 1 ? x.stride(1) : b > 1 ? x.stride(0) : h * d;
  if ((d > 1 && x.stride(3) != 1) || (h > 1 && x.stride(2) != d) ||
      (b > 1 && x.stride(0) != s * row))
    throw Error(absl::StrCat(kCall, ": ", what, " [B, S, H, D] of shape ", ShapeText(x),
                             " has strides (", x.stride(0), ", ", x.stride(1), ", ", x.stride(2),
                             ", ", x.stride(3),
                             "); the rows layout takes (S * R, R, D, 1), R >= H * D"));
  return row;
}

rt::AttentionSize SizeOf(const char* call, const Array& q, const Array& k, const Array& v,
                         const Array& o, const Array& lse, bool rows) {
  const char* layout = rows ? "[B, S, H, D]" : "[B, H, S, D]";
  for (const auto& [what, x] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"out", &o}})
    if (x->ndim() != 4)
      throw Error(absl::StrCat(call, ": ", what, " must have rank 4 (", layout, "), not ",
                               x->ndim(), " (shape ", ShapeText(*x), ")"));
  const int h = rows ? 2 : 1, s = rows ? 1 : 2;  // the dimensions of heads and positions
  rt::AttentionSize z = {static_cast<int64_t>(q.shape(0)), static_cast<int64_t>(q.shape(h)),
                         static_cast<int64_t>(k.shape(h)), static_cast<int64_t>(q.shape(s)),
                         static_cast<int64_t>(k.shape(s)), static_cast<int64_t>(q.shape(3))};
  if (ShapeOf(k) != ShapeOf(v) || k.shape(0) != q.shape(0) || k.shape(3) != q.shape(3))
    throw Error(absl::StrCat(call, ": k ", ShapeText(k), " and v ", ShapeText(v), " must both be ",
                             rows ? "[B, Skv, Hkv, D]" : "[B, Hkv, Skv, D]", " for q ",
                             ShapeText(q)));
  if (rows) {
    z.rows = true;
    z.q_stride = RowStride(q, "q"), z.kv_stride = RowStride(k, "k"),
    z.o_stride = RowStride(o, "out");
    if (RowStride(v, "v") != z.kv_stride)
      throw Error(absl::StrCat(call, ": k and v must share one row stride (", z.kv_stride, " and ",
                               RowStride(v, "v"), " elements)"));
  }
  if (ShapeOf(o) != ShapeOf(q))
    throw Error(absl::StrCat(call, ": out has shape ", ShapeText(o), ", q ", ShapeText(q)));
  if (ShapeOf(lse) != std::vector<int64_t>{z.b, z.hq, z.s})
    throw Error(absl::StrCat(call, ": lse has shape ", ShapeText(lse), "; [B, Hq, S] is (", z.b,
                             ", ", z.hq, ", ", z.s, ")"));
  return z;
}

// The i32 arrays beside q, k and v: decode's lengths and block table, packed sequences' offsets;
// and k's and v's names in the call's messages (decode's are its cache's).
struct Extra {
  const Array *seq_lens = nullptr, *block_table = nullptr, *cu_seqlens = nullptr;
  const char *k_name = "k", *v_name = "v";
};

// The call on its device, its sizes checked: the dense form, decode over sequences of their own
// lengths (seq_lens; paged where block_table is given), or packed sequences (cu_seqlens).
void Run(const char* call, const Array& q, const Array& k, const Array& v, Array out,
         const Array& lse, const rt::AttentionSize& z, rt::AttentionOptions options, Extra x,
         uint64_t stream) {
  const Array& o = out;
  CallDevice d(call, {&q, &k, &v, &o, &lse, x.seq_lens, x.block_table, x.cu_seqlens}, stream);
  const std::vector<std::string> types =
      d.emulated() ? std::vector<std::string>{"f32"} : std::vector<std::string>{"bf16", "f16"};
  const int rank = z.varlen ? 3 : 4;
  for (const auto& [what, a] :
       {std::pair{"q", &q}, std::pair{x.k_name, &k}, std::pair{x.v_name, &v}, std::pair{"out", &o}})
    Require(*a, call, what, rank, types, /*contiguous=*/!z.rows || d.emulated(),
            /*result=*/std::string(what) == "out");
  Require(lse, call, "lse", rank - 1, {"f32"});
  for (const auto& [what, a, r] :
       {std::tuple{"seq_lens", x.seq_lens, 1}, std::tuple{"block_table", x.block_table, 2},
        std::tuple{"cu_seqlens", x.cu_seqlens, 1}})
    if (a) Require(*a, call, what, r, {"i32"});
  if (!d.emulated()) {
    options.dtype = DtypeName(q);
    for (const Array* a : {&k, &v, &o})
      if (DtypeName(*a) != options.dtype)
        throw Error(absl::StrCat(call, ": q, ", x.k_name, ", ", x.v_name,
                                 " and out must share one type; q is ", options.dtype, ", another ",
                                 DtypeName(*a)));
    rt::AttentionOperands ops{Address(q), Address(k), Address(v), Address(o), Address(lse)};
    if (x.seq_lens) ops.seq_lens = Address(*x.seq_lens);
    if (x.block_table) ops.block_table = Address(*x.block_table);
    if (x.cu_seqlens) ops.cu_seqlens = Address(*x.cu_seqlens);
    ThrowIfError(RunnerFor<rt::AttentionRunner>(BundleDir())
                     .Run(z, options, ops, reinterpret_cast<cu::CUstream>(stream)),
                 call);
    return;
  }
  // Two products of the query rows by the keys: B sequences of up to S and Skv, of their own
  // lengths where seq_lens gives them (a cache's table or Smax sized for longer sequences is not
  // work), or packed ones of the lengths cu_seqlens gives (checked i32 and rank 1 above).
  double rows_by_keys = double(z.b) * z.s * z.skv;
  if (x.seq_lens && x.seq_lens->shape(0) == static_cast<size_t>(z.b)) {
    const auto* lens = static_cast<const int32_t*>(x.seq_lens->data());
    rows_by_keys = 0;
    for (int64_t b = 0; b < z.b; ++b)
      rows_by_keys += double(z.s) * std::clamp<double>(lens[b], 0, double(z.skv));
  }
  if (x.cu_seqlens) {
    const auto* cu = static_cast<const int32_t*>(x.cu_seqlens->data());
    rows_by_keys = 0;
    for (size_t i = 0; i + 1 < x.cu_seqlens->shape(0); ++i) {
      const double len = double(cu[i + 1]) - cu[i];
      rows_by_keys += len * len;
    }
  }
  ThrowIfError(emu::CheckProblemSize(call, {}, 2.0 * rows_by_keys * z.hq * z.d));
  std::vector<uint8_t> result;
  rt::AttentionOperands ops{d.BindNarrowed(q, "bf16"), d.BindNarrowed(k, "bf16"),
                            d.BindNarrowed(v, "bf16"), d.BindPoisoned(o.size(), "bf16", &result),
                            d.Bind(lse)};
  if (x.seq_lens) ops.seq_lens = d.Bind(*x.seq_lens, /*read_only=*/true);
  if (x.block_table) ops.block_table = d.Bind(*x.block_table, /*read_only=*/true);
  if (x.cu_seqlens) ops.cu_seqlens = d.Bind(*x.cu_seqlens, /*read_only=*/true);
  rt::EmulatedOpDevice device = EmulatorDevice(*d.emulator());
  ThrowIfError(rt::RunAttention(z, options, ops, /*compute_capability=*/90, device), call);
  d.Finish();
  Widen(result, "bf16", out);
}

void Attention(const Array& q, const Array& k, const Array& v, Array out, const Array& lse,
               bool causal, float scale, bool rows, uint64_t stream) {
  Run(kCall, q, k, v, out, lse, SizeOf(kCall, q, k, v, out, lse, rows),
      {.causal = causal, .scale = scale}, {}, stream);
}

// kiln.decode_attention: q [B, Hq, S, D]; k, v [B, Hkv, Skv, D] with seq_lens, or a paged cache
// [pages, page, Hkv, D] with seq_lens and block_table [B, max_pages] (i32).
void DecodeAttention(const Array& q, const Array& k, const Array& v, const Array& seq_lens,
                     std::optional<Array> block_table, Array out, const Array& lse, bool causal,
                     float scale, uint64_t stream) {
  constexpr const char* call = "kiln.decode_attention";
  for (const auto& [what, x] :
       {std::pair{"q", &q}, std::pair{"k_cache", &k}, std::pair{"v_cache", &v},
        std::pair{"out", static_cast<const Array*>(&out)}})
    if (x->ndim() != 4)
      throw Error(absl::StrCat(call, ": ", what, " must have rank 4, not ", x->ndim()));
  rt::AttentionSize z{.b = static_cast<int64_t>(q.shape(0)),
                      .hq = static_cast<int64_t>(q.shape(1)),
                      .s = static_cast<int64_t>(q.shape(2)),
                      .d = static_cast<int64_t>(q.shape(3))};
  z.lens = true;
  const bool paged = block_table.has_value();
  z.hkv = static_cast<int64_t>(k.shape(paged ? 2 : 1));
  if (paged) {
    z.pages = static_cast<int64_t>(k.shape(0)), z.page = static_cast<int64_t>(k.shape(1));
    if (block_table->ndim() != 2 || block_table->shape(0) != q.shape(0))
      throw Error(absl::StrCat(call, ": block_table has shape ", ShapeText(*block_table),
                               "; [B, max_pages] with B = ", z.b));
    z.max_pages = static_cast<int64_t>(block_table->shape(1));
    z.skv = z.max_pages * z.page;
  } else {
    z.skv = static_cast<int64_t>(k.shape(2));
  }
  const std::vector<int64_t> cache = paged ? std::vector<int64_t>{z.pages, z.page, z.hkv, z.d}
                                           : std::vector<int64_t>{z.b, z.hkv, z.skv, z.d};
  if (ShapeOf(k) != cache || ShapeOf(v) != cache)
    throw Error(absl::StrCat(call, ": k_cache ", ShapeText(k), " and v_cache ", ShapeText(v),
                             " must both be ", paged ? "[pages, page, Hkv, D]" : "[B, Hkv, Skv, D]",
                             " for q ", ShapeText(q)));
  if (ShapeOf(out) != ShapeOf(q))
    throw Error(absl::StrCat(call, ": out has shape ", ShapeText(out), ", q ", ShapeText(q)));
  if (ShapeOf(lse) != std::vector<int64_t>{z.b, z.hq, z.s})
    throw Error(absl::StrCat(call, ": lse has shape ", ShapeText(lse), "; [B, Hq, S]"));
  if (ShapeOf(seq_lens) != std::vector<int64_t>{z.b})
    throw Error(
        absl::StrCat(call, ": seq_lens has shape ", ShapeText(seq_lens), "; [B] = (", z.b, ",)"));
  Run(call, q, k, v, out, lse, z, {.causal = causal, .scale = scale},
      {.seq_lens = &seq_lens,
       .block_table = paged ? &*block_table : nullptr,
       .k_name = "k_cache",
       .v_name = "v_cache"},
      stream);
}

// kiln.varlen_attention: q, out [T, Hq, D]; k, v [T, Hkv, D]; cu_seqlens [B + 1] (i32);
// lse [Hq, T].
// Packed sequences' sizes: q and out [T, Hq, D], k and v [T, Hkv, D], lse [Hq, T], cu_seqlens
// [B + 1].
rt::AttentionSize VarlenSizeOf(const char* call, const Array& q, const Array& k, const Array& v,
                               const Array& out, const Array& lse, const Array& cu_seqlens,
                               int64_t max_seqlen) {
  for (const auto& [what, x] :
       {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"out", &out}})
    if (x->ndim() != 3)
      throw Error(absl::StrCat(call, ": ", what, " must have rank 3 ([T, H, D]), not ", x->ndim()));
  if (cu_seqlens.ndim() != 1 || cu_seqlens.shape(0) < 2)
    throw Error(absl::StrCat(call, ": cu_seqlens has shape ", ShapeText(cu_seqlens),
                             "; [B + 1] offsets, B >= 1"));
  rt::AttentionSize z{.b = static_cast<int64_t>(cu_seqlens.shape(0)) - 1,
                      .hq = static_cast<int64_t>(q.shape(1)),
                      .hkv = static_cast<int64_t>(k.shape(1)),
                      .s = max_seqlen,
                      .skv = max_seqlen,
                      .d = static_cast<int64_t>(q.shape(2))};
  z.varlen = true, z.total = static_cast<int64_t>(q.shape(0));
  if (ShapeOf(k) != ShapeOf(v) || k.shape(0) != q.shape(0) || k.shape(2) != q.shape(2))
    throw Error(absl::StrCat(call, ": k ", ShapeText(k), " and v ", ShapeText(v),
                             " must both be [T, Hkv, D] for q ", ShapeText(q)));
  if (ShapeOf(out) != ShapeOf(q))
    throw Error(absl::StrCat(call, ": out has shape ", ShapeText(out), ", q ", ShapeText(q)));
  if (ShapeOf(lse) != std::vector<int64_t>{z.hq, z.total})
    throw Error(absl::StrCat(call, ": lse has shape ", ShapeText(lse), "; [Hq, T]"));
  return z;
}

void VarlenAttention(const Array& q, const Array& k, const Array& v, const Array& cu_seqlens,
                     int64_t max_seqlen, Array out, const Array& lse, bool causal, float scale,
                     uint64_t stream) {
  constexpr const char* call = "kiln.varlen_attention";
  Run(call, q, k, v, out, lse, VarlenSizeOf(call, q, k, v, out, lse, cu_seqlens, max_seqlen),
      {.causal = causal, .scale = scale}, {.cu_seqlens = &cu_seqlens}, stream);
}

// kiln.attention_backward: dq, dk, dv from q, k, v, out and lse as the forward wrote them and the
// gradient d_out, all [B, H, S, D] contiguous, or (with cu_seqlens, kiln.varlen_attention_backward)
// packed sequences [T, H, D] (rt::RunAttentionBackward); CUDA tensors on the caller's stream, host
// arrays (f32, rounded to bf16) on the emulator.
void AttentionBackward(const Array& q, const Array& k, const Array& v, const Array& out,
                       const Array& lse, const Array& d_out, Array dq, Array dk, Array dv,
                       bool causal, float scale, bool dq_atomics, bool deterministic,
                       std::optional<Array> cu_seqlens, int64_t max_seqlen, uint64_t stream) {
  const char* call = cu_seqlens ? "kiln.varlen_attention_backward" : "kiln.attention_backward";
  const Array &gq = dq, &gk = dk, &gv = dv;  // (read-only views, for the checks' lists)
  const Array* cu = cu_seqlens ? &*cu_seqlens : nullptr;
  rt::AttentionSize z = cu ? VarlenSizeOf(call, q, k, v, out, lse, *cu, max_seqlen)
                           : SizeOf(call, q, k, v, out, lse, /*rows=*/false);
  for (const auto& [what, x, like] : {std::tuple{"d_out", &d_out, &q}, std::tuple{"dq", &gq, &q},
                                      std::tuple{"dk", &gk, &k}, std::tuple{"dv", &gv, &v}})
    if (ShapeOf(*x) != ShapeOf(*like))
      throw Error(
          absl::StrCat(call, ": ", what, " has shape ", ShapeText(*x), ", not ", ShapeText(*like)));
  CallDevice d(call, {&q, &k, &v, &out, &lse, &d_out, &gq, &gk, &gv, cu}, stream);
  const std::vector<std::string> types =
      d.emulated() ? std::vector<std::string>{"f32"} : std::vector<std::string>{"bf16", "f16"};
  const int rank = cu ? 3 : 4;
  for (const auto& [what, a] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v},
                                std::pair{"out", &out}, std::pair{"d_out", &d_out},
                                std::pair{"dq", &gq}, std::pair{"dk", &gk}, std::pair{"dv", &gv}})
    Require(*a, call, what, rank, types, /*contiguous=*/true);
  Require(lse, call, "lse", rank - 1, {"f32"});
  if (cu) Require(*cu, call, "cu_seqlens", 1, {"i32"});
  rt::AttentionOptions options{
      .causal = causal, .scale = scale, .dq_atomics = dq_atomics, .deterministic = deterministic};
  if (!d.emulated()) {
    options.dtype = DtypeName(q);
    for (const Array* x : {&k, &v, &out, &d_out, &gq, &gk, &gv})
      if (DtypeName(*x) != options.dtype)
        throw Error(absl::StrCat(call, ": every tensor but lse must be ", options.dtype,
                                 " as q is, not ", DtypeName(*x)));
    rt::AttentionGradOperands ops{Address(q),   Address(k),   Address(v),
                                  Address(out), Address(lse), Address(d_out),
                                  Address(dq),  Address(dk),  Address(dv)};
    if (cu) ops.cu_seqlens = Address(*cu);
    ThrowIfError(RunnerFor<rt::AttentionRunner>(BundleDir())
                     .Backward(z, options, ops, reinterpret_cast<cu::CUstream>(stream)),
                 call);
    return;
  }
  // Five products of the query rows by the keys.
  ThrowIfError(emu::CheckProblemSize(call, {}, 5.0 * z.b * z.hq * z.s * z.skv * z.d));
  std::vector<uint8_t> dq_bytes, dk_bytes, dv_bytes;
  rt::AttentionGradOperands ops{d.BindNarrowed(q, "bf16"),
                                d.BindNarrowed(k, "bf16"),
                                d.BindNarrowed(v, "bf16"),
                                d.BindNarrowed(out, "bf16"),
                                d.Bind(lse, /*read_only=*/true),
                                d.BindNarrowed(d_out, "bf16"),
                                d.BindPoisoned(dq.size(), "bf16", &dq_bytes),
                                d.BindPoisoned(dk.size(), "bf16", &dk_bytes),
                                d.BindPoisoned(dv.size(), "bf16", &dv_bytes)};
  if (cu) ops.cu_seqlens = d.Bind(*cu, /*read_only=*/true);
  rt::EmulatedOpDevice device = EmulatorDevice(*d.emulator());
  ThrowIfError(rt::RunAttentionBackward(z, options, ops, /*compute_capability=*/90, device), call);
  d.Finish();
  Widen(dq_bytes, "bf16", dq);
  Widen(dk_bytes, "bf16", dk);
  Widen(dv_bytes, "bf16", dv);
}

}  // namespace

void BindAttention(nb::module_& m) {
  m.def("_attention_backward", &AttentionBackward, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse"), nb::arg("d_out"), nb::arg("dq"), nb::arg("dk"),
        nb::arg("dv"), nb::arg("causal"), nb::arg("scale"), nb::arg("dq_atomics") = false,
        nb::arg("deterministic") = false, nb::arg("cu_seqlens").none() = nb::none(),
        nb::arg("max_seqlen") = 0, nb::arg("stream") = 0);
  m.def("_attention", &Attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("lse"), nb::arg("causal"), nb::arg("scale"), nb::arg("rows") = false,
        nb::arg("stream") = 0);
  m.def("_decode_attention", &DecodeAttention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("seq_lens"), nb::arg("block_table").none(), nb::arg("out"), nb::arg("lse"),
        nb::arg("causal"), nb::arg("scale"), nb::arg("stream") = 0);
  m.def("_varlen_attention", &VarlenAttention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("cu_seqlens"), nb::arg("max_seqlen"), nb::arg("out"), nb::arg("lse"),
        nb::arg("causal"), nb::arg("scale"), nb::arg("stream") = 0);
}

}  // namespace kiln::py
