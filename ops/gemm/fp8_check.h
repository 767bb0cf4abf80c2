// The 8-bit GEMM's harness: random normal A (M x K) and B (N x K, the weight), each quantized to
// e4m3 (or e5m2) with its scaling's scales (a group's largest magnitude to the type's largest), C
// poisoned
// with NaN, the entry point run, and C checked against an fp64 product of the dequantized inputs
// (every row of small problems, 64 spread rows of large ones; NaN fails). The bound: C's rounding
// (2^-8 bf16, 2^-11 f16) plus 2^-10 for the tensor core's sums of 128 products, which keep fewer
// bits than f32 until their promotion. The error against the unquantized product, which the
// scaling's granularity sets, is reported beside it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/gemm_table.h"

namespace kiln::examples {

struct Fp8GemmProblem {
  rt::GemmSize size;
  std::string scaling = "blockwise";  // tensorwise, rowwise, blockwise, mxfp8 (sm_100)
  std::string out_type = "bf16";
  bool c_row_major = true;      // as torch lays out C (the kernel computes C^T)
  std::string tile;             // the tile kernel (GemmOptions::fp8_tile; "": the plan's)
  int split = -1;               // its split (GemmOptions::fp8_split; -1: the rule's)
  int compute_capability = 90;  // the emulator's GPU (100: the Blackwell kernel)
  std::string epilogue;         // fused terms (GemmOptions::epilogue), their inputs random
  // A's and B's 8-bit types (e5m2 scaled to its largest, 57344, as e4m3 to 448).
  std::string a_type = "e4m3", b_type = "e4m3";
  const rt::GemmTuneCache* tuned = nullptr;  // its 8-bit entries win over the rule (kiln tune)
};

struct Fp8GemmResult {
  std::string kernel, why;
  int split = 1;                // the kernel's (rt::SplitName)
  double error = 0, bound = 0;  // against the dequantized inputs' fp64 product
  double quantized_error = 0;   // against the unquantized inputs' product
  bool passed = false;
  std::string failure;
  // Filled on the GPU alone: the median of single calls, each between two events
  // (docs/perf/2026-11-29-fp8-gemm.md).
  double ms = 0, tflops = 0;
};

// The entry point's plan for `p`'s calls (the harness's operands, aligned; `p.tuned`'s entries).
absl::StatusOr<rt::GemmPlan> PlanOf(const Fp8GemmProblem& p, int compute_capability);
absl::StatusOr<Fp8GemmResult> RunFp8GemmGpu(rt::GemmRunner& runner, const Fp8GemmProblem& p,
                                            int iters, uint64_t seed);
// Every tile and split the plan can run `p` with (rt::Fp8TileCandidates; p.tile and p.split
// ignored) on the same inputs, each checked and, where it passed, timed as RunFp8GemmGpu times.
absl::StatusOr<std::vector<Fp8GemmResult>> SweepFp8GemmGpu(rt::GemmRunner& runner,
                                                           const Fp8GemmProblem& p, int iters,
                                                           uint64_t seed);
// On the emulator (three SMs), the bundles from `bundle_of` (null: not found).
absl::StatusOr<Fp8GemmResult> RunFp8GemmEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of, const Fp8GemmProblem& p,
    uint64_t seed);

}  // namespace kiln::examples
