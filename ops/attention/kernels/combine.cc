// attention/combine: merges the parts of split-KV attention (attention/hopper's "split";
// attention/combine.sm100a attention/blackwell's). For each
// of the rows (B * Hq * S) it takes the P parts' O_p, each normalized by its own sum, and lse_p:
//   lse = log sum_p exp(lse_p),  O = sum_p exp(lse_p - lse) O_p.
// A part that saw no key (lse_p = -inf) weighs 0; a row no part saw gets O = 0 and lse = -inf.
// The parts are summed in part order: the same inputs give the same bytes. Each thread takes 8
// elements of one row (16-byte loads of each part's O), D a multiple of 8. It is launched while the
// split kernel drains (programmatic dependent launch: that kernel's CTAs let it launch once their
// last loads are issued) and waits for that kernel's writes before it reads them.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256, kWidth = 8;

// For sm_90a, or (blackwell) sm_100a: "attention/combine[.f16][.sm100a]".
absl::StatusOr<KernelDef> BuildCombine(Scalar in, bool blackwell) {
  Kernel k(absl::StrCat("attention/combine", in == f16 ? ".f16" : "", blackwell ? ".sm100a" : ""),
           blackwell ? sm100a() : sm90a(), {kThreads});
  Value o_parts = k.PtrParam("O_parts", in), lse_parts = k.PtrParam("lse_parts", f32);
  Value o = k.PtrParam("O", in), lse = k.PtrParam("lse", f32);
  Value rows = k.I32Param("rows"), P = k.I32Param("P"), D = k.I32Param("D");
  Value units = k.I64Param("units");  // rows * D / 8
  k.RequireMultiple("D", kWidth);
  k.Grid("units/256");
  Value unit = k.BlockIdx(0) * kThreads + k.ThreadIdx();
  k.WaitForPriorGrids();  // the parts written
  k.If(unit.To(i64) < units, [&] {
    Value row = unit / (D / kWidth), d0 = unit % (D / kWidth) * kWidth;
    auto lse_of = [&](const Value& p) { return k.Load(lse_parts + (p * rows + row).To(i64)); };
    Regs top = k.Registers(Type::Of(f32), 1), sum = k.Registers(Type::Of(f32), 1);
    Regs acc = k.Registers(Type::Of(f32), kWidth);
    top[0] = k.F32(-INFINITY);
    sum[0] = k.F32(0);
    for (int e = 0; e < kWidth; ++e) acc[e] = k.F32(0);
    k.For(0, P, 1, [&](Value p) { top[0] = Max(top[0], lse_of(p)); });
    k.For(0, P, 1, [&](Value p) {
      Value l = lse_of(p);
      Value w = Select(l == -INFINITY, k.F32(0), Exp(l - top[0]));
      sum[0] = sum[0] + w;
      Value part = LoadGlobal(o_parts + ((p * rows + row).To(i64) * D.To(i64) + d0.To(i64)), kWidth,
                              {.cache = CacheHint::kReadOnly});
      for (int e = 0; e < kWidth; ++e) acc[e] = acc[e] + w * part.Lane(e).To(f32);
    });
    Value inv = Select(sum[0] > 0.0, Rcp(sum[0]), k.F32(0));
    std::vector<Value> out;
    for (int e = 0; e < kWidth; ++e) out.push_back((acc[e] * inv).To(in));
    StoreGlobal(o + (row.To(i64) * D.To(i64) + d0.To(i64)), k.Vector(out));
    k.If(d0 == 0, [&] {
      k.Store(lse + row.To(i64), Select(sum[0] > 0.0, top[0] + Log(sum[0]), k.F32(-INFINITY)));
    });
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(attention_combine, "attention/combine",
                     "merges split-KV attention's parts: O and lse from each part's O and lse",
                     [] { return BuildCombine(bf16, false); });
KILN_EXAMPLE_VARIANT(attention_combine_f16, "attention/combine.f16", "attention/combine, f16",
                     [] { return BuildCombine(f16, false); });
KILN_EXAMPLE_VARIANT(attention_combine_sm100a, "attention/combine.sm100a",
                     "attention/combine for sm_100a (attention/blackwell's split)",
                     [] { return BuildCombine(bf16, true); });
KILN_EXAMPLE_VARIANT(attention_combine_f16_sm100a, "attention/combine.f16.sm100a",
                     "attention/combine for sm_100a, f16", [] { return BuildCombine(f16, true); });
}  // namespace kiln::examples
