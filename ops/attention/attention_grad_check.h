// The attention backward's harness: random normal Q, K, V and dO, the entry point's forward for O
// and lse, its backward with dQ, dK and dV poisoned with NaN, and an independent fp64 reference of
// the gradients from Q, K, V and dO (two passes over the scores: one per query row for its lse, O,
// delta and dQ, one per key for its dK and dV); delta takes the O the backward was given, which is
// checked against the reference's O too. The errors are norm-relative over the
// checked heads (every head of small problems, the first and last KV head's groups of large ones);
// NaN or Inf fails.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/attention_backward.h"

namespace kiln::examples {

struct AttentionGradResult {
  std::string kernels;  // the plan's three, joined by " + "
  rt::AttentionSize size;
  bool causal = false;
  int64_t heads_checked = 0;                        // query heads whose dQ rows were compared
  double dq_error = 0, dk_error = 0, dv_error = 0;  // NaN where a checked element is NaN or Inf
  double o_error = 0;  // the forward's O, which the backward takes, against the reference's
  bool passed = false;
  std::string failure;
  // The backward run again this many times, each the same bytes (dK and dV; dQ too where
  // the plan takes dQ from a kernel of its own, not by atomics).
  int runs_identical = 0;
  bool dq_by_atomics = false;  // the plan adds dQ by atomics: its bytes are not compared
  // Filled on the GPU alone, by the rule RunAttentionBackwardGpu states
  // (docs/perf/2026-11-28-attention-backward.md).
  double ms = 0, tflops = 0;
};

// Packed sequences (size.varlen, as VarlenSize gives it) take their `lengths`, each sequence
// checked against the reference over its own rows.
//
// On the GPU: checked once, run `repeat_runs` more times each compared bit for bit with the
// first, then `iters` timed blocks of `repeats` backward passes back to back (1: single calls);
// TFLOPS of the sequences' own pairs.
absl::StatusOr<AttentionGradResult> RunAttentionBackwardGpu(
    rt::AttentionRunner& runner, const rt::AttentionSize& size, const rt::AttentionOptions& options,
    int iters, uint64_t seed, int repeat_runs = 1, int repeats = 10,
    const std::vector<int64_t>& lengths = {});

// On the emulator (three SMs), the kernels' bundles from `bundle_of` (null: not found), every
// head checked and the backward run twice; compute_capability 100: the sm_100a kernels the plan
// picks there (attention/blackwell_dkdv, blackwell_dq).
absl::StatusOr<AttentionGradResult> RunAttentionBackwardEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of,
    const rt::AttentionSize& size, const rt::AttentionOptions& options, uint64_t seed,
    const std::vector<int64_t>& lengths = {}, int compute_capability = 90);

}  // namespace kiln::examples
