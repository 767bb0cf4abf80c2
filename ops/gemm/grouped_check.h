// The grouped GEMM's harness: random normal x and w rounded to bf16 (or quantized to e4m3, x per
// 1 x 128 and w per 128 x 128), the groups' sizes on the device, out poisoned with NaN, the entry
// point run, then every row checked: a group's rows against an fp64 product with its expert's
// weights (of the values the inputs hold: dequantized for e4m3; every row of small problems, a
// few spread rows of each group of large ones; NaN fails), the rows outside every group still
// poisoned. The bound: out's bf16 rounding, 2^-8 (bf16 inputs are exact and the sums f32), plus
// 2^-10 for e4m3 (the tensor core's partial sums between promotions).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/grouped_gemm.h"

namespace kiln::examples {

struct GroupedGemmProblem {
  std::vector<int64_t> tokens;  // each group's rows (masked: at most the capacity)
  int64_t n = 0, k = 0;
  rt::GroupedLayout layout = rt::GroupedLayout::kContiguous;
  // Masked: each group's block of rows (0: the largest group). Contiguous: rows after the last
  // group that no group owns.
  int64_t capacity = 0, spare_rows = 0;
  std::string in_type = "bf16";  // or "e4m3": x and w quantized, DeepGEMM's scales
  std::string kernel;            // GroupedGemmOptions::kernel
};

struct GroupedGemmResult {
  std::string kernel;
  double error = 0, bound = 0;
  bool passed = false;
  std::string failure;
  // Filled on the GPU alone: the median of single calls, each between two events; the rate counts
  // the products of the groups' rows, and the weights of the groups that hold tokens
  // (docs/perf/2026-11-29-grouped-gemm.md).
  double ms = 0, tflops = 0, weights_gbps = 0;
};

// What a launch of the problem would refuse (its groups' tokens, sizes, layout and kernel), said
// before any memory is allocated: `kiln grouped-gemm` takes it as a usage error.
absl::Status CheckGroupedGemmProblem(const GroupedGemmProblem& p);

absl::StatusOr<GroupedGemmResult> RunGroupedGemmGpu(rt::GemmRunner& runner,
                                                    const GroupedGemmProblem& p, int iters,
                                                    uint64_t seed);
// On the emulator (three SMs), the bundles from `bundle_of` (null: not found).
absl::StatusOr<GroupedGemmResult> RunGroupedGemmEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of,
    const GroupedGemmProblem& p, uint64_t seed);

}  // namespace kiln::examples
