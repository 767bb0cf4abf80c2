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
// The default plan instead runs attention/hopper_dkdv.dqadd, which adds each key tile's part of
// dQ = scale * dS K in f32 into an accumulator by TMA reductions (FlashAttention-3's order: five
// GEMMs a step, not seven), and attention/bwd_dq_convert, which rounds it to dQ; the order of the
// adds, and so dQ's last bits, differ run to run.
//
// Tensors as the forward's (ops/attention/kernels/common.h): Q, O, dO, dQ [B, Hq, S, D]; K, V, dK,
// dV [B, Hkv, Skv, D]; causal masks bottom-right aligned. lse2 and delta [B, Hq, Sp] f32.
#pragma once

#include <string>
#include <vector>

#include "ops/attention/kernels/common.h"

namespace kiln::examples::attention_sm90 {

struct BackwardParams {
  Value B, Hq, Hkv, S, Skv, Sp, scale;
  Value lse2, delta;  // [B * Hq, Sp] f32 (attention/bwd_prep)
  // hopper_dkdv.dqadd: dQacc [B * Hq * Sp, D] f32 (zeroed by attention/bwd_prep), in boxes of
  // 64 rows x 64 columns that TMA adds into.
  TensorMap tdq_acc;
  TensorMap tq, tk, tv, tdo;
  TensorMap tlse2, tdelta;  // hopper_dkdv: boxes of 64 rows of one head
  TensorMap tout[2];        // hopper_dkdv: dK, dV; hopper_dq: dQ (boxes of 64 rows x 64)
};

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
// P^T = 2^(S^T * scale_log2 - lse2[query]), 0 past Skv and, where `shift` is valid (causal), where
// key > query + shift; lse2_row holds the query tile's lse2 from its column 0. Rows past S read
// lse2 = +inf (attention/bwd_prep): 0 too.
void ProbabilitiesT(Kernel& k, const WgmmaAccumulator& st, const SmemTile& lse2_row,
                    const Value& q0, const Value& key0, const Value& m0, const Value& Skv,
                    const Value& shift, const Value& scale_log2);

// dP^T's registers become dS^T = P^T * (dP^T - delta[query]), query columns from q0 of the tile.
void ScoreGradsT(Kernel& k, const WgmmaAccumulator& pt, const WgmmaAccumulator& dpt,
                 const SmemTile& delta_row, const Value& q0);

// attention/hopper_dkdv at D = 256 (hopper_dkdv_split.cc), its two warpgroups splitting D.
absl::StatusOr<KernelDef> BuildDkDvSplitD(const std::string& name, AttentionShape a);

// The variants the build bundles: D 64, 128 and 256, bf16 and f16, causal and not, each in
// `forms` ("" the plain one; D = 256 in that one only).
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
