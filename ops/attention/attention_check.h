// The attention harness: random normal Q, K, V, the entry point's kernel run on the GPU or the
// emulator with O and lse poisoned with NaN, and an independent fp64 reference on the host (two
// passes over each checked row: the scores, their maximum, then exp and the weighted sum; no
// online rescaling, no rounding of P) for every row of small problems and a spread of rows of
// large ones. The error is ||O - ref|| / ||ref|| over the checked rows; NaN or Inf fails.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/attention.h"

namespace kiln::examples {

struct AttentionResult {
  std::string kernel;
  rt::AttentionSize size;
  bool causal = false;
  int64_t rows_checked = 0;
  double rel_error = 0;  // of O, NaN when any checked element is NaN or Inf
  double lse_error = 0;  // largest absolute error of the checked rows' lse
  bool passed = false;
  std::string failure;
  double ms = 0, tflops = 0;  // GPU runs only: median of the timed runs
};

// The problem as one line: "b2 hq16 hkv4 s4096 skv4096 d128 causal".
std::string AttentionShapeName(const rt::AttentionSize& size, bool causal);

// `page` > 0: K and V as a paged cache of `page`-token pages, the pages shuffled, each sequence
// Skv long (its length in seq_lens): `size` with that cache's pages, as the planner takes it.
rt::AttentionSize PagedSize(const rt::AttentionSize& size, int64_t page);
// The plan's kernels as a result names them: "attention/dense_from_pages.d128 +
// attention/hopper..." where it copies the pages first.
std::string PlannedKernels(const rt::AttentionPlan& plan);

// Packed sequences of `lengths` tokens each (varlen) with `size`'s heads and D: B, S = Skv (the
// longest) and the total from the lengths; an error for no length or one under 1.
absl::StatusOr<rt::AttentionSize> VarlenSize(const rt::AttentionSize& size,
                                             const std::vector<int64_t>& lengths);

// `size` with the rows layout's strides the harness uses where it names none: each position's row
// of heads followed by 64 elements of NaN (a read past the heads shows in O, a write in the pad).
rt::AttentionSize RowsSize(const rt::AttentionSize& size);

// O's norm-relative tolerance in the forward's checks: bf16 keeps 8 bits (P and O are rounded to
// it), f16 11.
double ForwardTolerance(bool half);

// The median time of `call`, in ms, over `iters` timed blocks of `repeats` calls back to back (ten
// by default, so that the host's work per launch, the maps' encoding, overlaps the kernels before
// it; one: single calls, as a model makes them).
absl::StatusOr<double> MedianCallMs(const std::function<absl::Status()>& call, int iters,
                                    int repeats);

// On the GPU with the runner's kernel: checked once, then `iters` timed runs (0: none), each a
// block of `repeats` launches back to back between two events (1: single calls); `page`: K and V
// through a paged cache (PagedSize), checked against the same dense reference.
absl::StatusOr<AttentionResult> RunAttentionGpu(rt::AttentionRunner& runner,
                                                const rt::AttentionSize& size,
                                                const rt::AttentionOptions& options, int iters,
                                                uint64_t seed, int64_t page = 0, int repeats = 10);

// On the emulator with `bundle` (the kernel PlanAttention names) as a GPU of three SMs, every
// row checked; `combine`: the plan's attention/combine, where it splits the keys; `copy_pages`:
// the plan's attention/dense_from_pages, where it copies a paged cache into dense K and V first.
// Whether the emulator takes this problem (emu::CheckProblemSize): q and k's elements, and
// `passes` multiply-adds a (query, key) pair and feature; `lengths`, where given, packed
// sequences' own, which size the problem whatever `size` says.
absl::Status EmulatorTakes(const rt::AttentionSize& size, const std::vector<int64_t>& lengths,
                           double passes);

absl::StatusOr<AttentionResult> RunAttentionEmulated(
    const rt::Bundle& bundle, const rt::AttentionSize& size, const rt::AttentionOptions& options,
    uint64_t seed, const rt::Bundle* combine = nullptr, int64_t page = 0,
    const rt::Bundle* copy_pages = nullptr);

// Packed sequences (varlen, self-attention) of `lengths` tokens each, with `size`'s heads, D and
// nothing else of it (B, S and Skv come from the lengths): random normal Q, K, V [T, H, D], the
// entry point's kernel with O and lse poisoned, each checked row against the fp64 reference over
// its own sequence (its causal mask its own). On the GPU timed as RunAttentionGpu (TFLOPS of the
// sequences' own pairs); on the emulator with `bundle`, the kernel PlanAttention names.
absl::StatusOr<AttentionResult> RunVarlenAttentionGpu(rt::AttentionRunner& runner,
                                                      const rt::AttentionSize& size,
                                                      const std::vector<int64_t>& lengths,
                                                      const rt::AttentionOptions& options,
                                                      int iters, uint64_t seed, int repeats = 10);
absl::StatusOr<AttentionResult> RunVarlenAttentionEmulated(const rt::Bundle& bundle,
                                                           const rt::AttentionSize& size,
                                                           const std::vector<int64_t>& lengths,
                                                           const rt::AttentionOptions& options,
                                                           uint64_t seed);

}  // namespace kiln::examples
