// attention/combine: merges the parts of split-KV attention (attention/hopper's "split";
// attention/combine.sm100a attention/blackwell's). For each
// of the rows (B * Hq * S) it takes the P parts' O_p, each normalized by its own sum, and lse_p:
//   lse = log sum_p exp(lse_p),  O = sum_p exp(lse_p - lse) O_p.
// A part that saw no key (lse_p = -inf) weighs 0; a row no part saw gets O = 0 and lse = -inf.
// The parts are summed in part order: the same inputs give the same bytes. Each thread takes 8
// elements of one row (16-byte loads of each part's O), D a multiple of 8, and reads the parts 16
// at a time in one pass, each group's loads issued together: a part a round trip made the merge a
// chain of 2P memory latencies (docs/perf/2026-11-28-decode-split-kv.md, "The combine's loads",
// "The merge in one pass"). It is launched while
// the split kernel drains (programmatic dependent launch: that kernel's CTAs let it launch once
// their last loads are issued) and waits for that kernel's writes before it reads them; it lets
// the kernel after it launch from its start, which then waits likewise before its memory work.
#include "ops/attention/kernels/combine.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {
constexpr int kThreads = 128, kWidth = 8, kPartsAtOnce = 16;
}  // namespace

void MergePartsOfRow(Kernel& k, Scalar in, const SplitParts& m, const Value& row, const Value& d0) {
  const Value &o_parts = m.o_parts, &lse_parts = m.lse_parts, &o = m.o, &lse = m.lse,
              &rows = m.rows, &P = m.P, &D = m.D;
  // Part p's lse, and its O's 8 elements here; parts past the last read the last one's
  // addresses and weigh 0 (lse -inf), so that a group of loads needs no branch.
  auto last = [&](const Value& p) { return (Min(p, P - 1) * rows + row).To(i64); };
  Regs top = k.Registers(Type::Of(f32), 1), sum = k.Registers(Type::Of(f32), 1);
  Regs acc = k.Registers(Type::Of(f32), kWidth);
  top[0] = k.F32(-INFINITY);
  sum[0] = k.F32(0);
  for (int e = 0; e < kWidth; ++e) acc[e] = k.F32(0);
  // One pass, a group's lse and O loaded together, the running sums rescaled to the group's
  // maximum (as the online softmax does): one memory round trip a group.
  k.For(0, P, kPartsAtOnce, [&](Value p0) {
    std::vector<Value> l, part;
    for (int u = 0; u < kPartsAtOnce; ++u) {
      Value p = p0 + u;
      l.push_back(Select(p < P, k.Load(lse_parts + last(p)), k.F32(-INFINITY)));
      part.push_back(LoadGlobal(
          o_parts + (last(p) * D.To(i64) + d0.To(i64)), kWidth,
          {.cache = m.written_in_this_launch ? CacheHint::kDefault : CacheHint::kReadOnly}));
    }
    Value group_top = top[0];
    for (const Value& x : l) group_top = Max(group_top, x);
    Value rescale = Select(top[0] == -INFINITY, k.F32(0), Exp(top[0] - group_top));
    sum[0] = sum[0] * rescale;
    for (int e = 0; e < kWidth; ++e) acc[e] = acc[e] * rescale;
    for (int u = 0; u < kPartsAtOnce; ++u) {
      Value w = Select(l[u] == -INFINITY, k.F32(0), Exp(l[u] - group_top));
      sum[0] = sum[0] + w;
      for (int e = 0; e < kWidth; ++e) acc[e] = acc[e] + w * part[u].Lane(e).To(f32);
    }
    top[0] = group_top;
  });
  Value inv = Select(sum[0] == 0.0, k.F32(0), Rcp(sum[0]));
  std::vector<Value> out;
  for (int e = 0; e < kWidth; ++e) out.push_back((acc[e] * inv).To(in));
  StoreGlobal(o + (row.To(i64) * D.To(i64) + d0.To(i64)), k.Vector(out));
  k.If(d0 == 0, [&] {
    k.Store(lse + row.To(i64), Select(sum[0] == 0.0, k.F32(-INFINITY), top[0] + Log(sum[0])));
  });
}

namespace {

// For sm_90a, or (blackwell) sm_100a: "attention/combine[.f16][.sm100a]".
absl::StatusOr<KernelDef> BuildCombine(Scalar in, bool blackwell) {
  Kernel k(absl::StrCat("attention/combine", in == f16 ? ".f16" : "", blackwell ? ".sm100a" : ""),
           blackwell ? sm100a() : sm90a(), {kThreads});
  Value o_parts = k.PtrParam("O_parts", in), lse_parts = k.PtrParam("lse_parts", f32);
  Value o = k.PtrParam("O", in), lse = k.PtrParam("lse", f32);
  Value rows = k.I32Param("rows"), P = k.I32Param("P"), D = k.I32Param("D");
  Value units = k.I64Param("units");  // rows * D / 8
  k.RequireMultiple("D", kWidth);
  k.Grid(absl::StrCat("units/", kThreads));
  Value unit = k.BlockIdx(0) * kThreads + k.ThreadIdx();
  k.LaunchDependents();   // the next kernel (a decode step's next split, say) may set up now
  k.WaitForPriorGrids();  // the parts written
  k.If(unit.To(i64) < units, [&] {
    Value row = unit / (D / kWidth), d0 = unit % (D / kWidth) * kWidth;
    MergePartsOfRow(k, in, {o_parts, lse_parts, o, lse, rows, P, D}, row, d0);
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
