#include "ops/attention/kernels/hopper_bwd_parts.h"

#include <utility>
#include <vector>

#include "kiln/memory_ops.h"
#include "kiln/rows.h"

namespace kiln::examples::attention_sm90 {

namespace {

rt::GridExpr Rule(Kernel& k, const std::string& text) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (!e.ok()) k.Fail(absl::StrCat("rule '", text, "': ", e.status().message()));
  return e.ok() ? *e : *rt::GridExpr::Parse("1");
}

// [heads, Sp] f32 in boxes of kRowValuesBox rows of one head.
rt::TensorMapParam RowValuesMap(Kernel& k, const char* tensor, const char* heads) {
  rt::TensorMapParam t;
  t.tensor = tensor;
  t.dtype = rt::TmaDtype::kF32;
  t.dims = {Rule(k, "Sp"), Rule(k, heads)};
  t.strides = {Rule(k, "Sp*4")};
  t.box = {kRowValuesBox, 1};
  return t;
}

// Two consecutive values of a row of f32 from column `col` (+ off where valid: then maybe not on
// an 8-byte boundary, so two loads).
Value PairAt(Kernel& k, const SmemTile& row, const Value& col, const Value& off) {
  if (!off.valid()) return k.Load(row.At(0, col), 2);
  return k.Vector({k.Load(row.At(0, off + col)), k.Load(row.At(0, off + col + 1))});
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
  if (a.varlen) {
    p.cu_seqlens = k.PtrParam("cu_seqlens", i32);
    p.T = k.I32Param("T");
    k.I32Param("tiles");  // the grid's bound on the sequences' tiles
  }
  // Q, dO (query side) or K, V in boxes of `rows` rows and all of D.
  auto map = [&](const char* tensor, bool query_side, int rows) {
    const char* heads = query_side ? "Hq" : "Hkv";
    return a.varlen ? PackedMap(k, tensor, "T", heads, a.d, rows, spans, a.in)
                    : HeadMap(k, tensor, query_side ? "S" : "Skv", query_side ? "B*Hq" : "B*Hkv",
                              a.d, rows, spans, a.in);
  };
  p.tq = k.TmaParam("tmQ", map("Q", true, q_rows));
  p.tk = k.TmaParam("tmK", map("K", false, k_rows));
  p.tv = k.TmaParam("tmV", map("V", false, k_rows));
  p.tdo = k.TmaParam("tmdO", map("dO", true, q_rows));
  if (dkdv) {
    const char* heads = a.varlen ? "Hq" : "B*Hq";
    p.tlse2 = k.TmaParam("tmLse2", RowValuesMap(k, "lse2", heads));
    p.tdelta = k.TmaParam("tmDelta", RowValuesMap(k, "delta", heads));
    if (a.varlen) {
      p.out[0] = k.PtrParam("dK", a.in), p.out[1] = k.PtrParam("dV", a.in);
      return p;
    }
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
    if (a.varlen)
      p.out[0] = k.PtrParam("dQ", a.in);
    else
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

KeyTileWork KeyTileOf(Kernel& k, const BackwardParams& p, const AttentionShape& a, int key_rows,
                      int query_rows) {
  KeyTileWork w;
  Value t = k.BlockIdx(0);
  w.group = p.Hq / p.Hkv;
  if (a.varlen) {  // tile t / Hkv of the sequences, KV head t % Hkv
    PackedTile tile = FindPackedTile(k, p.cu_seqlens, p.T, p.B, t / p.Hkv, key_rows);
    w.n0 = tile.tile * key_rows, w.seq0 = tile.seq0, w.kv_head = t % p.Hkv;
    w.first_q_head = w.kv_head * w.group;
    w.keys = tile.len, w.q_end = tile.len, w.shift = k.I32(0).To(s32);
    w.m_tiles = (tile.len + (query_rows - 1)) / query_rows;
    w.m_first = a.causal ? w.n0 / query_rows : k.I32(0);
    return w;
  }
  // Head-major: the CTAs of one KV head run together and share its query heads' Q and dO in L2.
  // Causally the first key tiles see the most query tiles, so the KV heads go in groups whose
  // query heads' Q and dO fit in L2 together (32 MB), and within a group the longest tiles of
  // all its heads come first: the launch ends on short tiles (longest first; as attention/hopper
  // orders its query tiles; docs/perf/2026-11-28-attention-backward-causal-order.md).
  Value key_tiles = (p.Skv + (key_rows - 1)) / key_rows;
  if (a.causal) {
    // A KV head's Q and dO in units of 256 bytes (a row of both is D / 64 of them).
    Value head_units = w.group * p.S * (a.d / 64);
    Value group_heads = Min(Max(k.I32((32 << 20) / 256) / head_units, k.I32(1)), p.Hkv * p.B);
    Value g0 = t / (group_heads * key_tiles) * group_heads;  // the group's first KV head
    Value in_group = Min(group_heads, p.Hkv * p.B - g0);     // fewer in the last group
    Value i = t - g0 * key_tiles;
    w.kv_head = g0 + i % in_group, w.n0 = i / in_group * key_rows;
  } else {
    w.n0 = t % key_tiles * key_rows, w.kv_head = t / key_tiles;  // b * Hkv + h
  }
  w.first_q_head = w.kv_head / p.Hkv * p.Hq + w.kv_head % p.Hkv * w.group;
  w.keys = p.Skv, w.shift = p.Skv.To(s32) - p.S.To(s32);
  w.m_tiles = (p.S + (query_rows - 1)) / query_rows;
  w.m_first = a.causal ? Max(w.n0.To(s32) - w.shift, 0).To(i32) / query_rows : k.I32(0);
  return w;
}

void EachQueryTile(Kernel& k, const KeyTileWork& w, int query_rows,
                   const std::function<void(Value q_head, Value m0)>& body) {
  k.For(0, w.group, 1, [&](Value g) {
    k.For(w.m_first, w.m_tiles, 1, [&](Value m) { body(w.first_q_head + g, m * query_rows); });
  });
}

void ProduceDkDv(Kernel& k, const BackwardParams& p, const AttentionShape& a, const KeyTileWork& w,
                 int query_rows, const DkDvLoads& t, Pipeline& kv_ring, Pipeline& q_ring,
                 Pipeline& do_ring) {
  Pipeline::Cursor kv_at = kv_ring.Start(), q_at = q_ring.Start(), do_at = do_ring.Start();
  Value key_row = w.Row(w.n0);
  kv_ring.Produce(kv_at, {{&p.tk, t.sK, {0, key_row, 0, w.kv_head}},
                          {&p.tv, t.sV, {0, key_row, 0, w.kv_head}}});
  EachQueryTile(k, w, query_rows, [&](Value q_head, Value m0) {
    Value row = w.Row(m0), values = RowValuesStart(a, row);
    q_ring.Produce(q_at,
                   {{&p.tq, t.sQ, {0, row, 0, q_head}}, {&p.tlse2, t.sLse, {values, q_head}}});
    do_ring.Produce(
        do_at, {{&p.tdo, t.sdO, {0, row, 0, q_head}}, {&p.tdelta, t.sDelta, {values, q_head}}});
  });
}

QueryTileWork QueryTileOf(Kernel& k, const BackwardParams& p, const AttentionShape& a,
                          int query_rows, int key_rows) {
  QueryTileWork w;
  Value t = k.BlockIdx(0), n_end;
  if (a.varlen) {  // tile t / Hq of the sequences, query head t % Hq
    PackedTile tile = FindPackedTile(k, p.cu_seqlens, p.T, p.B, t / p.Hq, query_rows);
    Value last = (tile.len + (query_rows - 1)) / query_rows - 1;  // (len 0: unused)
    Value m = a.causal ? Select(tile.len > 0, last - tile.tile, k.I32(0)) : tile.tile;
    w.m0 = m * query_rows, w.seq0 = tile.seq0, w.q_head = t % p.Hq;
    w.kv_head = w.q_head / (p.Hq / p.Hkv);
    w.queries = tile.len, w.keys = tile.len, w.shift = k.I32(0).To(s32);
    n_end = a.causal ? Min(tile.len, w.m0 + query_rows) : tile.len;
  } else {  // head-major; causally the longest (last) tiles first
    Value m_tiles = (p.S + (query_rows - 1)) / query_rows;
    w.q_head = t / m_tiles;
    Value m = t % m_tiles;
    w.m0 = (a.causal ? m_tiles - 1 - m : m) * query_rows;
    w.kv_head = w.q_head / p.Hq * p.Hkv + w.q_head % p.Hq / (p.Hq / p.Hkv);
    w.queries = p.S, w.keys = p.Skv, w.shift = p.Skv.To(s32) - p.S.To(s32);
    n_end = a.causal ? Max(Min(p.Skv.To(s32), (w.m0 + query_rows).To(s32) + w.shift), 0).To(i32)
                     : Value(p.Skv);
  }
  w.n_tiles = (n_end + (key_rows - 1)) / key_rows;
  return w;
}

void StoreGradientRows(Kernel& k, const WgmmaAccumulator& acc, const Value& scale, const Value& ptr,
                       const Value& heads, int d, const Value& head, const Value& seq0,
                       const Value& row0, const Value& rows, const Value& col0, Scalar in) {
  if (scale.valid()) ScaleRows(acc, {scale, scale});
  const std::vector<Value> packed = PackPairs(acc, in);
  for (int pair = 0; pair < acc.n() / 4; ++pair) {
    Value r = row0 + acc.Row(pair);
    Value at =
        ((seq0 + r).To(i64) * heads.To(i64) + head.To(i64)) * d + (col0 + acc.Col(pair)).To(i64);
    StoreGlobal(ptr + at, packed[pair], {.mask = r < rows});
  }
}

void ProbabilitiesT(Kernel& k, const WgmmaAccumulator& st, const SmemTile& lse2_row,
                    const Value& q0, const Value& key0, const Value& m0, const Value& Skv,
                    const Value& shift, const Value& scale_log2, const Value& q_end,
                    const Value& off) {
  for (int pair = 0; pair < st.n() / 4; ++pair) {
    Value key = (key0 + st.Row(pair)).To(s32);
    Value col = q0.valid() ? q0 + st.Col(pair) : st.Col(pair);
    Value lse2 = PairAt(k, lse2_row, col, off);
    for (int e = 0; e < 2; ++e) {
      Value seen = key < Skv.To(s32);
      if (shift.valid()) seen = seen & (key <= (m0 + col + e).To(s32) + shift);
      if (q_end.valid()) seen = seen & (m0 + col + e < q_end);
      Value x = Fma(st[2 * pair + e], scale_log2, -lse2.Lane(e));
      st[2 * pair + e] = Select(seen, Exp2(x), k.F32(0));
    }
  }
}

void ScoreGradsT(Kernel& k, const WgmmaAccumulator& pt, const WgmmaAccumulator& dpt,
                 const SmemTile& delta_row, const Value& q0, const Value& off, bool masked_zero) {
  for (int pair = 0; pair < dpt.n() / 4; ++pair) {
    Value col = q0.valid() ? q0 + dpt.Col(pair) : dpt.Col(pair);
    Value delta = PairAt(k, delta_row, col, off);
    for (int e = 0; e < 2; ++e) {
      Value p = pt[2 * pair + e], ds = p * (dpt[2 * pair + e] - delta.Lane(e));
      dpt[2 * pair + e] = masked_zero ? Select(p == 0.0, k.F32(0), ds) : ds;
    }
  }
}

std::vector<std::string> BundledBackwardVariants(const std::vector<std::string>& forms) {
  std::vector<std::string> v;
  for (const char* d : {"d64", "d128", "d256"})
    for (const char* type : {"", ".f16"})
      for (const char* causal : {"", ".causal"})
        for (const std::string& form : forms)
          if (form != ".dqadd" || std::string(d) != "d256")
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
