// The GEMM entry point's pieces for 8-bit inputs (gemm_fp8.cc), which PlanGemm and RunGemm call
// (gemm_runner.cc).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/gemm_table.h"

namespace kiln::rt {

// The tile, and its split, for an 8-bit problem as the kernel sees it, scaled so ("tensorwise",
// "rowwise", "blockwise").
GemmChoice ChooseFp8Tile(const GemmSize& size, const std::string& scaling);
// Every tile and split the 8-bit plan can run a problem (as the kernel sees it) scaled so with:
// each tile that takes the scaling whole and stream-K, and split-K in parts of at least 4 k-tiles
// while the parts fit one wave.
std::vector<GemmChoice> Fp8TileCandidates(const GemmSize& size, const std::string& scaling);
// PlanGemm for 8-bit inputs, past its checks shared with 16-bit ones: `terms` the epilogue's,
// canonical.
absl::StatusOr<GemmPlan> PlanFp8Gemm(const GemmSize& size, const GemmOptions& options,
                                     const std::string& terms, const GemmOperands& operands,
                                     int compute_capability, const GemmTuneCache* tuned);
// The scaling as `plan`'s tile kernel takes it, the key of a tune cache's 8-bit entries
// (GemmTuneCache::FindFp8): blockwise is blockwise_t where the plan swaps the operands, and
// blockwise.c_row where the tile stores C row-major.
std::string Fp8TuneScaling(const std::string& scaling, const GemmPlan& plan);
// The scales' strides that GemmOperands leaves zero, for `scaling` ("tensorwise", ...) at `size`
// (the caller's problem, before any swap).
void ResolveFp8Scales(const GemmSize& size, const std::string& scaling, GemmOperands& operands);
// A's scales for B's, as the operands swap for a row-major C.
void SwapFp8Scales(GemmOperands& operands);

}  // namespace kiln::rt
