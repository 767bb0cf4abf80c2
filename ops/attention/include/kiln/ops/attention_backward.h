// The attention backward entry point of the host API: dQ, dK and dV of FlashAttention from the
// forward's Q, K, V, O and lse and the gradient dO of O, with three kernels (attention/bwd_prep,
// attention/hopper_dkdv, attention/hopper_dq; ops/attention/kernels/hopper_bwd_parts.h says the
// algorithm), sm_90a; on sm_100a attention/blackwell_dkdv and blackwell_dq (D 64 and 128, dense
// tensors). On sm_90a at D 64 and 128 over dense tensors, attention/hopper_dkdv.dqadd adds dQ in
// f32 by atomics and attention/bwd_dq_convert rounds it: dQ's last bits differ run to run, dK's
// and dV's never. AttentionOptions::deterministic takes attention/hopper_dq instead, a kernel of
// its own that adds into no memory another CTA writes: the same inputs give the same bytes, run
// to run, at the cost of S and dP computed twice. The atomics are the default where they run, being
// the faster form (docs/perf/2026-12-01-backward-dq-by-atomics-by-default.md); elsewhere
// (D = 256, packed sequences, sm_100a) every form is deterministic.
//
//   kiln::rt::AttentionRunner attention("build/bundles");
//   absl::Status s = attention.Backward({.b = 2, .hq = 16, .hkv = 4, .s = 4096, .skv = 4096,
//                                        .d = 128}, {.causal = true},
//                                       {.q = q, .k = k, .v = v, .o = o, .lse = lse, .d_o = d_o,
//                                        .dq = dq, .dk = dk, .dv = dv});
//
// Layouts as the forward's (kiln/ops/attention.h): Q, O, dO, dQ [B, Hq, S, D]; K, V, dK, dV
// [B, Hkv, Skv, D]; lse [B, Hq, S] f32, as the forward wrote it. Grouped-query heads: dK and dV
// of a KV head sum over the query heads that read it. D 64, 128 or 256. Dense tensors, or packed
// sequences (AttentionSize::varlen: Q, O, dO, dQ [total, Hq, D], K, V, dK, dV [total, Hkv, D], lse
// [Hq, total], cu_seqlens as the forward took them); no lens, pages or rows layout, so far.
#pragma once
#include <string>

#include "absl/status/statusor.h"
#include "kiln/ops/attention.h"

namespace kiln::rt {

struct AttentionGradOperands {
  cu::CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0, d_o = 0;  // the forward's, and dO
  cu::CUdeviceptr dq = 0, dk = 0, dv = 0;                        // written
  cu::CUdeviceptr cu_seqlens = 0;  // i32 [B + 1] (AttentionSize::varlen)
};

struct AttentionBackwardPlan {
  std::string prep, dkdv, dq;  // the kernels, launched in this order (dq: hopper_dq or the convert)
  bool dq_add = false;         // dkdv adds dQ into an f32 accumulator, which dq converts
  float scale = 0;
  // Sp: the workspace's rows a head. S rounded up to whole 64-row tiles; varlen: total + 1 so
  // rounded (a CTA with no tile of its own reads row 0 of its sequence: inside even at total).
  int64_t padded_rows = 0;
  // lse2 and delta [B, Hq, Sp] f32 (varlen: [Hq, Sp]), then (dq_add) the accumulator
  // [B, Hq, Sp, D] f32.
  int64_t WorkspaceBytes(const AttentionSize& z) const {
    return (z.varlen ? 1 : z.b) * z.hq * padded_rows * 4 * (2 + (dq_add ? z.d : 0));
  }
};

// The kernels for a call, or an error naming what is wrong with it. Needs no GPU.
absl::StatusOr<AttentionBackwardPlan> PlanAttentionBackward(const AttentionSize& size,
                                                            const AttentionOptions& options,
                                                            const AttentionGradOperands& operands,
                                                            int compute_capability);

// Plans the call and launches its kernels on `device` in order (scratch 2: the workspace).
absl::Status RunAttentionBackward(const AttentionSize& size, const AttentionOptions& options,
                                  const AttentionGradOperands& operands, int compute_capability,
                                  OpDevice& device);

// FLOPs of the backward pass as FlashAttention counts them: 2.5 times the forward's (five GEMMs
// of the forward's two's size).
double AttentionBackwardFlops(const AttentionSize& size, bool causal);

}  // namespace kiln::rt
