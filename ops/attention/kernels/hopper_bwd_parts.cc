#include "ops/attention/kernels/hopper_bwd_parts.h"

#include <vector>

#include "kiln/rows.h"

namespace kiln::examples::attention_sm90 {
namespace {

rt::GridExpr Rule(Kernel& k, const std::string& text) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (!e.ok()) k.Fail(absl::StrCat("rule '", text, "': ", e.status().message()));
  return e.ok() ? *e : *rt::GridExpr::Parse("1");
}

// [B * Hq, Sp] f32 in boxes of 64 rows of one head.
rt::TensorMapParam RowValuesMap(Kernel& k, const char* tensor) {
  rt::TensorMapParam t;
  t.tensor = tensor;
  t.dtype = rt::TmaDtype::kF32;
  t.dims = {Rule(k, "Sp"), Rule(k, "B*Hq")};
  t.strides = {Rule(k, "Sp*4")};
  t.box = {64, 1};
  return t;
}

}  // namespace

BackwardParams DeclareBackwardParams(Kernel& k, const AttentionShape& a, int q_rows, int k_rows,
                                     bool dkdv) {
  const int spans = a.d / 64;
  BackwardParams p;
  p.B = k.I32Param("B"), p.Hq = k.I32Param("Hq"), p.Hkv = k.I32Param("Hkv");
  p.S = k.I32Param("S"), p.Skv = k.I32Param("Skv"), p.Sp = k.I32Param("Sp");
  p.scale = k.F32Param("scale");
  k.RequireMultiple("Sp", 64);
  p.tq = k.TmaParam("tmQ", HeadMap(k, "Q", "S", "B*Hq", a.d, q_rows, spans, a.in));
  p.tk = k.TmaParam("tmK", HeadMap(k, "K", "Skv", "B*Hkv", a.d, k_rows, spans, a.in));
  p.tv = k.TmaParam("tmV", HeadMap(k, "V", "Skv", "B*Hkv", a.d, k_rows, spans, a.in));
  p.tdo = k.TmaParam("tmdO", HeadMap(k, "dO", "S", "B*Hq", a.d, q_rows, spans, a.in));
  if (dkdv) {
    p.tlse2 = k.TmaParam("tmLse2", RowValuesMap(k, "lse2"));
    p.tdelta = k.TmaParam("tmDelta", RowValuesMap(k, "delta"));
    p.tout[0] = k.TmaParam("tmdK", HeadMap(k, "dK", "Skv", "B*Hkv", a.d, 64, 1, a.in));
    p.tout[1] = k.TmaParam("tmdV", HeadMap(k, "dV", "Skv", "B*Hkv", a.d, 64, 1, a.in));
    if (a.dq_add) {
      rt::TensorMapParam t;
      t.tensor = "dQacc";
      t.dtype = rt::TmaDtype::kF32;
      t.dims = {Rule(k, std::to_string(a.d)), Rule(k, "B*Hq*Sp")};
      t.strides = {Rule(k, std::to_string(a.d * 4))};
      t.box = {64, 64};
      p.tdq_acc = k.TmaParam("tmdQacc", t);
    }
  } else {
    p.lse2 = k.PtrParam("lse2", f32);
    p.delta = k.PtrParam("delta", f32);
    p.tout[0] = k.TmaParam("tmdQ", HeadMap(k, "dQ", "S", "B*Hq", a.d, 64, 1, a.in));
  }
  return p;
}

void IssueOverD(Kernel& k, const WgmmaAccumulator& acc, int d, const SmemTile& a, int a_span_rows,
                const Value& a_row0, const SmemTile& b, int b_span_rows, const Value& b_row0) {
  for (int kk = 0; kk < d; kk += 16)
    k.Wgmma(acc, {.a = a,
                  .a_row0 = kk / 64 * a_span_rows + a_row0,
                  .b = b,
                  .b_row0 = b_row0.valid() ? Operand(b_row0 + kk / 64 * b_span_rows)
                                           : Operand(kk / 64 * b_span_rows),
                  .k0 = kk % 64,
                  .accumulate = kk > 0});
  k.WgmmaCommit();
}

void ProbabilitiesT(Kernel& k, const WgmmaAccumulator& st, const SmemTile& lse2_row,
                    const Value& q0, const Value& key0, const Value& m0, const Value& Skv,
                    const Value& shift, const Value& scale_log2) {
  for (int pair = 0; pair < st.n() / 4; ++pair) {
    Value key = (key0 + st.Row(pair)).To(s32);
    Value col = q0.valid() ? q0 + st.Col(pair) : st.Col(pair);
    Value lse2 = k.Load(lse2_row.At(0, col), 2);
    for (int e = 0; e < 2; ++e) {
      Value seen = key < Skv.To(s32);
      if (shift.valid()) seen = seen & (key <= (m0 + col + e).To(s32) + shift);
      Value x = Fma(st[2 * pair + e], scale_log2, -lse2.Lane(e));
      st[2 * pair + e] = Select(seen, Exp2(x), k.F32(0));
    }
  }
}

void ScoreGradsT(Kernel& k, const WgmmaAccumulator& pt, const WgmmaAccumulator& dpt,
                 const SmemTile& delta_row, const Value& q0) {
  for (int pair = 0; pair < dpt.n() / 4; ++pair) {
    Value col = q0.valid() ? q0 + dpt.Col(pair) : dpt.Col(pair);
    Value delta = k.Load(delta_row.At(0, col), 2);
    for (int e = 0; e < 2; ++e)
      dpt[2 * pair + e] = pt[2 * pair + e] * (dpt[2 * pair + e] - delta.Lane(e));
  }
}

std::vector<std::string> BundledBackwardVariants(const std::vector<std::string>& forms) {
  std::vector<std::string> v;
  for (const char* d : {"d64", "d128", "d256"})
    for (const char* type : {"", ".f16"})
      for (const char* causal : {"", ".causal"})
        for (const std::string& form : forms)
          if (form.empty() || std::string(d) != "d256")
            v.push_back(absl::StrCat(d, type, causal, form));
  return v;
}

void StoreGradientTile(Kernel& k, const WgmmaAccumulator& acc, const Value& scale,
                       const SmemTile& staging, int tile_rows, int warpgroups, const Value& wg,
                       const Value& c, int first_barrier, const TensorMap& map, const Value& row,
                       const Value& head, Scalar in, bool split_d) {
  if (scale.valid()) ScaleRows(acc, {scale, scale});
  const std::vector<Value> packed = PackPairs(acc, in);
  const int n = acc.n(), spans = n / 64;
  for (int p = 0; p < n / 4; ++p) {
    const int span = p / 2 * 8 / 64;  // which 64 columns of the accumulator the pair lies in
    // The pair's row in the staging tile: this warpgroup's rows of the span, or its spans' rows.
    Value at = split_d ? (wg * spans + span) * tile_rows + acc.Row(p)
                       : span * tile_rows + wg * 64 + acc.Row(p);
    k.Store(staging.At(at, acc.Col(p) - span * 64), packed[p]);
  }
  k.FenceProxyAsync();  // the writes, before the TMA store reads them
  k.NamedBarrier(wg + first_barrier, 128);
  for (int x = 0; x < warpgroups; ++x)
    k.If((c == 0) & (wg == x), [&] {
      const int x_row0 = split_d ? 0 : x * 64, x_span0 = split_d ? x * spans : 0;
      for (int span = x_span0; span < x_span0 + spans; ++span)
        k.TmaStore(map, staging.Rows(span * tile_rows + x_row0, 64), {0, row, span, head});
      k.BulkCommit();
      k.BulkWait(0);
    });
}

}  // namespace kiln::examples::attention_sm90
