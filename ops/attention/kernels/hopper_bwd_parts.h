// What attention/hopper_dkdv and attention/hopper_dq (FlashAttention's backward for sm_90a)
// share: their parameters and one warpgroup's gradient tile stored through shared memory.
//
// The backward pass, per head (scores s = scale * Q K^T, P = softmax(s) as the forward saw it,
// rebuilt from its lse: P = 2^(s * log2 e - lse2)):
//   dV = P^T dO,   dP = dO V^T,   dS = P * (dP - delta),   dK = scale * dS^T Q,   dQ = scale * dS K
// with delta = rowsum(dO * O) and lse2 from attention/bwd_prep. attention/hopper_dkdv walks the
// query tiles for a key tile (dK and dV whole in its registers, summed over the query heads that
// share the KV head), attention/hopper_dq the key tiles for a query tile (dQ whole in its
// registers). Neither adds into memory another CTA writes: the gradients are the same bytes run
// to run, at the cost of S and dP computed twice (docs/perf/2026-11-28-attention-backward.md).
// By default at D 64 and 128 over dense tensors (unless AttentionOptions::deterministic), the plan
// instead runs attention/hopper_dkdv.dqadd,
// which adds each key tile's part of
// dQ = scale * dS K in f32 into an accumulator by TMA reductions (FlashAttention-3's order: five
// GEMMs a step, not seven), and attention/bwd_dq_convert, which rounds it to dQ; the order of the
// adds, and so dQ's last bits, differ run to run.
//
// Tensors as the forward's (ops/attention/kernels/common.h): Q, O, dO, dQ [B, Hq, S, D]; K, V, dK,
// dV [B, Hkv, Skv, D]; causal masks bottom-right aligned. lse2 and delta [B, Hq, Sp] f32. Packed
// sequences ("varlen", self-attention): Q, O, dO, dQ [T, Hq, D], K, V, dK, dV [T, Hkv, D],
// sequence b in rows cu_seqlens[b] .. cu_seqlens[b + 1], each its own causal mask; lse2 and delta
// [Hq, Sp] (Sp > T); a CTA per tile of a sequence (a grid bound, `tiles`, of them: the rest do
// nothing), the gradients stored row by row (a tile's last rows may be the next sequence's).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/pipeline.h"
#include "ops/attention/kernels/common.h"

namespace kiln::examples::attention_sm90 {

struct BackwardParams {
  Value B, Hq, Hkv, S, Skv, Sp, scale;
  Value lse2, delta;  // [B * Hq, Sp] f32 (attention/bwd_prep)
  // hopper_dkdv.dqadd: dQacc [B * Hq * Sp, D] f32 (zeroed by attention/bwd_prep), in boxes of
  // 64 rows x 64 columns that TMA adds into.
  TensorMap tdq_acc;
  TensorMap tq, tk, tv, tdo;
  // hopper_dkdv: boxes of kRowValuesBox rows of one head, from a row on a 16-byte boundary (a TMA
  // box's innermost coordinate must be: varlen's tiles start anywhere, so their values lie
  // RowValuesOffset rows into the box).
  TensorMap tlse2, tdelta;
  TensorMap tout[2];    // hopper_dkdv: dK, dV; hopper_dq: dQ (boxes of 64 rows x 64)
  Value cu_seqlens, T;  // varlen
  Value out[2];         // varlen: dK, dV or dQ, stored row by row
};

constexpr int kRowValuesBox = 96;  // 64 rows and the 3 before them, in whole 128-byte lines
// The row a box of lse2 or delta starts at for a query tile from `row`, and where in the box that
// tile's first row lies (dense: the row itself, an invalid offset).
inline Value RowValuesStart(const AttentionShape& a, const Value& row) {
  return a.varlen ? row - row % 4 : row;
}
inline Value RowValuesOffset(const AttentionShape& a, const Value& row) {
  return a.varlen ? row % 4 : Value();
}

// A hopper_dkdv CTA's work: its key tile and the query tiles that see it.
struct KeyTileWork {
  Value n0;                // the tile's first key, counted in its sequence
  Value seq0;              // varlen: the sequence's first row in the tensors (dense: invalid)
  Value kv_head;           // the maps' head coordinate of K and V
  Value first_q_head;      // the maps' head coordinate of its group's first query head
  Value group;             // query heads a KV head
  Value keys, shift;       // the sequence's keys; query i sees keys j <= i + shift (causal)
  Value m_first, m_tiles;  // the query tiles that see the keys: m_first .. m_tiles - 1
  Value q_end;             // varlen: queries from here on are another sequence's (dense: invalid)
  // Row r of the sequence as the maps count rows.
  Value Row(const Value& r) const { return seq0.valid() ? seq0 + r : r; }
};

// The walk both of hopper_dkdv's roles take: each query head of the group, each query tile of
// `query_rows` that sees the keys; body(q_head, m0).
void EachQueryTile(Kernel& k, const KeyTileWork& w, int query_rows,
                   const std::function<void(Value q_head, Value m0)>& body);
KeyTileWork KeyTileOf(Kernel& k, const BackwardParams& p, const AttentionShape& a, int key_rows,
                      int query_rows);

// hopper_dkdv's loads (both forms): K and V of the key tile once, then each query tile's Q (with
// its rows' lse2) and dO (with their delta), a ring each.
struct DkDvLoads {
  SmemTile sK, sV, sQ, sdO, sLse, sDelta;
};
// Its producer thread: the key tile's K and V into kv_ring, then the query tiles of `query_rows`
// that see it (EachQueryTile) into q_ring and do_ring.
void ProduceDkDv(Kernel& k, const BackwardParams& p, const AttentionShape& a, const KeyTileWork& w,
                 int query_rows, const DkDvLoads& t, Pipeline& kv_ring, Pipeline& q_ring,
                 Pipeline& do_ring);

// A hopper_dq CTA's work: its query tile (causally the longest first) and its key tiles.
struct QueryTileWork {
  Value m0, seq0, q_head, kv_head;  // seq0 as KeyTileWork's; q_head, kv_head: the maps' heads
  Value queries, keys, shift;       // the sequence's; query i sees keys j <= i + shift (causal)
  Value n_tiles;                    // key tiles of key_rows from the first
  Value Row(const Value& r) const { return seq0.valid() ? seq0 + r : r; }
};
QueryTileWork QueryTileOf(Kernel& k, const BackwardParams& p, const AttentionShape& a,
                          int query_rows, int key_rows);

// varlen: one warpgroup's accumulator, times `scale` (where valid), rounded to `in` and stored to
// `ptr` ([T, heads, d]) as rows row0 .. row0 + 63 of the sequence from row seq0, head `head`, only
// those below `rows` (its length); columns from col0.
void StoreGradientRows(Kernel& k, const WgmmaAccumulator& acc, const Value& scale, const Value& ptr,
                       const Value& heads, int d, const Value& head, const Value& seq0,
                       const Value& row0, const Value& rows, const Value& col0, Scalar in);

// Q and dO land in boxes of `q_rows` rows, K and V of `k_rows` (all D columns, 128B-swizzled
// spans); `dkdv` says which kernel's outputs and row maps to declare.
BackwardParams DeclareBackwardParams(Kernel& k, const AttentionShape& a, int q_rows, int k_rows,
                                     bool dkdv);

// acc = A B^T over D (a multiple of 64), both K-major swizzled tiles whose 64-column spans of D
// lie `a_span_rows` and `b_span_rows` rows apart: A's rows a_row0.. (64 of them), B's acc.n()
// rows from b_row0 (0 where not valid); one wgmma group, committed.
void IssueOverD(Kernel& k, const WgmmaAccumulator& acc, int d, const SmemTile& a, int a_span_rows,
                const Value& a_row0, const SmemTile& b, int b_span_rows,
                const Value& b_row0 = Value());

// S^T's registers (key rows from key0; query columns from m0 + q0, q0 0 where not valid) become
// P^T = 2^(S^T * scale_log2 - lse2[query]), 0 past Skv, past q_end where valid (varlen: the next
// sequence's rows) and, where `shift` is valid (causal), where key > query + shift; lse2_row holds
// the query tile's lse2 from its column `off` (0 where not valid). Rows past S read lse2 = +inf
// (attention/bwd_prep): 0.
void ProbabilitiesT(Kernel& k, const WgmmaAccumulator& st, const SmemTile& lse2_row,
                    const Value& q0, const Value& key0, const Value& m0, const Value& Skv,
                    const Value& shift, const Value& scale_log2, const Value& q_end = Value(),
                    const Value& off = Value());

// dP^T's registers become dS^T = P^T * (dP^T - delta[query]), query columns from q0 of the tile
// (delta_row holds the tile's delta from its column `off`, as ProbabilitiesT's lse2). With
// `masked_zero` (packed sequences: the columns past a sequence's queries hold the next sequence's
// delta, inf or NaN as it may be), dS^T is 0 wherever P^T is.
void ScoreGradsT(Kernel& k, const WgmmaAccumulator& pt, const WgmmaAccumulator& dpt,
                 const SmemTile& delta_row, const Value& q0, const Value& off,
                 bool masked_zero = false);

// attention/hopper_dkdv at D = 256 (hopper_dkdv_split.cc), its two warpgroups splitting D.
absl::StatusOr<KernelDef> BuildDkDvSplitD(const std::string& name, AttentionShape a);

// The variants the build bundles: D 64, 128 and 256, bf16 and f16, causal and not, each in
// `forms` ("" the plain one; ".dqadd" at D 64 and 128 only).
std::vector<std::string> BundledBackwardVariants(const std::vector<std::string>& forms);

// One warpgroup's m64nN accumulator, times `scale` (where valid), rounded to `in` and stored as
// rows `row` .. row + 63 of head `head` through `staging` (a swizzled tile of `tile_rows` rows a
// span) and TMA boxes of `map`, clipped at the tensor's last row. The warpgroups own rows wg * 64..
// and all of D (N = D), or with `split_d` the same 64 rows and D's columns wg * N..; their part of
// the staging tile is no longer read by any wgmma. Thread `c` of the warpgroup's 128; the
// warpgroup meets at named barrier first_barrier + wg.
void StoreGradientTile(Kernel& k, const WgmmaAccumulator& acc, const Value& scale,
                       const SmemTile& staging, int tile_rows, int warpgroups, const Value& wg,
                       const Value& c, int first_barrier, const TensorMap& map, const Value& row,
                       const Value& head, Scalar in, bool split_d = false);

}  // namespace kiln::examples::attention_sm90
