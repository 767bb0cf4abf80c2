// The GEMM entry point's choice of kernel for a problem (f32 accumulation; A row-major, B
// column-major, C column-major, the layout of fast.cu and cuBLAS's TN; kiln/ops/gemm.h maps a
// row-major C onto it): a kernel taken outright where a region of the GPU's tuning table holds the
// size (the mma.sync, wide-stage and skinny kernels), else the persistent tile kernel and split
// the table's models favour; where TMA cannot read the operands, the strided kernel. The kernel's
// variant carries the element types and the fused epilogue. docs/GEMM_CHOICE.md states the rule
// and its models; ops/gemm/tables/ holds their figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/bundle/dims.h"
#include "kiln/bundle/epilogue_terms.h"
#include "kiln/ops/gemm_table.h"

namespace kiln::rt {

// A split's name in messages and the tune cache: "whole", "split-K 3", "stream-K".
std::string SplitName(int split);

// What else the caller asks of the GEMM: element types and a fused epilogue (its terms in the
// kernels' order, CanonicalEpilogue). The chosen kernel is the variant of the chosen tile that
// has them (GemmVariantName).
struct GemmOptions {
  std::string in_type = "bf16", out_type = "bf16", epilogue;
  // 8-bit inputs: B's type where it differs from A's (in_type), e4m3 by e5m2 either way (e5m2 for
  // a gradient); "" for B's type the same as A's.
  std::string in_type_b;
  // 8-bit inputs: how their scales apply (GemmOperands::scale_a says each one's layout):
  // "tensorwise", "rowwise", "blockwise" or "mxfp8" (sm_100); the kernel's variant ("blockwise_t"
  // where the problem is swapped for a row-major C; "c_row.blockwise" where the tile stores it).
  std::string scaling;
  // 8-bit inputs: the tile kernel to run ("": the plan's choice), whole tiles unless fp8_split
  // says, e.g. to time tiles; fp8_split: that kernel's (or the plan's) split instead (1 whole
  // tiles, S >= 2 split-K in S parts, 0 stream-K; -1 the rule's).
  std::string fp8_tile;
  int fp8_split = -1;
  bool any_m =
      false;  // a tile kernel storing C from registers (set by ChooseGemm where M % 8 != 0)
  // MN-major A (column-major) or B (row-major), as the kernel sees them: the tile kernels' a_mn
  // and b_mn variants, or the reference kernel (which takes any strides); never the skinny one.
  bool a_mn = false, b_mn = false;
  // C (and C_in, residual) row-major as the kernel sees it: the skinny kernel's c_row variant,
  // which PlanGemm runs for a column-major C of 2-4 columns, computed as C^T = B^T A^T.
  bool c_row = false;
  // A's and B's rows (columns, MN-major) are 16 bytes apart and their pointers 16-byte aligned
  // whatever K, M and N: leading dimensions the caller padded, or copies the entry point made
  // (gemm/restride16). The tile kernels then read them through TMA at any K, M and N. Set by
  // PlanGemm on sm_90; without it a K, M or N that packs rows off 16 bytes gets the strided kernel.
  bool tma_strides = false;
  // Whether A's and B's rows (columns, MN-major) as the kernel reads them start 128 bytes apart
  // from 128-byte aligned pointers (the tile kernels then read whole L2 lines:
  // docs/perf/2026-11-26-rows-off-128-bytes.md). Set by PlanGemm from the leading dimensions and
  // pointers; unset, packed operands are assumed (rows K elements apart, MN-major M or N).
  std::optional<bool> rows_128b;
  // Whether A and B are packed from 16-byte aligned pointers, and C column-major with columns M
  // apart, as the kernel reads and writes them: A K-major with rows K elements apart, B the same
  // or, with b_mn, row-major with rows N apart (the mma.sync kernels for up to 16 rows take
  // K-major ones only, the wide-stage kernels either B). Set by PlanGemm; unset, packed operands
  // are assumed.
  std::optional<bool> packed;
};
// Whether `kernel` (a base name or a variant's) is a wide-stage kernel (gemm/bf16_k128n32_sm90,
// _k128n64_sm90), which reads a row-major B too (b_mn) but K-major A only.
bool IsWideStageKernel(const std::string& kernel);
// A kernel's variant name: `base` itself for bf16 in and out and no epilogue, else
// base.<in>-<out>[.any_m][.a_mn][.b_mn][.c_row][.<scaling>][.<epilogue>]
// (gemm/bf16_sm90_n128.f16-f32.bias_col.gelu), <in> "<a>x<b>" where B's 8-bit type differs
// from A's (e5m2xe4m3).
std::string GemmVariantName(const std::string& base, const GemmOptions& options);

// The kernels (tiles) and splits that can run a problem on this GPU, which `kiln tune` times.
std::vector<GemmChoice> GemmCandidates(const GemmSize& size, int compute_capability);
// Whether GemmCandidates lists `kernel` at `split`, without building the list (the plan asks it
// at every call its tune table answers).
bool IsGemmCandidate(const GemmSize& size, int compute_capability, const std::string& kernel,
                     int split);

// `compute_capability`: the GPU's (90 for an H100/H200), or the one to choose for. The rule reads
// `tuned`'s records for the GPU where it has some, else the built-in table's
// (docs/GEMM_CHOICE.md); a kiln tune entry for the size, `tuned`'s or the built-in table's, wins.
GemmChoice ChooseGemm(const GemmSize& size, int compute_capability, const GemmOptions& options = {},
                      const GemmTuneCache* tuned = nullptr);

// For refitting a tile's `speed` (docs/GEMM_CHOICE.md): past the table's weight-bound rows, the
// speed at which the compute model would predict `ms`, the tile's time in whole tiles (timed),
// relative to `first_ms`, the first tile's (the widest) there. nullopt where the size is
// weight-bound or either kernel is no tile of the GPU's built-in table.
std::optional<double> FittedTileSpeed(const GemmSize& size, int compute_capability,
                                      const std::string& kernel, double ms, double first_ms);

}  // namespace kiln::rt
