// The GEMM entry point's choice of kernel for a problem (f32 accumulation; A row-major, B
// column-major, C column-major, the layout of fast.cu and cuBLAS's TN; kiln/ops/gemm.h maps
// a row-major C onto it). Where K allows TMA (a multiple of 8), one of the ragged Hopper kernels:
// the one whose tiles waste least of the machine (tiles padded past M and N, a last wave that
// fills few of the in-flight slots), weighed by its measured speed per tile; for M <= 4 the
// skinny kernel; else kiln's reference kernel, which takes any size (slowly). The kernel's
// variant carries the element types and the fused epilogue. The dated entries that docs/PERF.md
// indexes, from docs/perf/2026-11-23-gemm-ragged-entry-point.md on, record the rule and how the
// choice does against cuBLAS.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/dims.h"
#include "kiln/bundle/epilogue_terms.h"

namespace kiln::rt {

struct GemmChoice {
  std::string kernel;  // a registered kernel (bundle) name
  std::string why;     // one line for the user
  // The tile kernels' work table: 1 whole tiles, S >= 2 each tile's K in S parts (split-K), 0
  // stream-K. Split tiles are summed in a fixed order (deterministic); see rt::WorkSchedule.
  int split = 1;
};
// A split's name in messages and the tune cache: "whole", "split-K 3", "stream-K".
std::string SplitName(int split);

// What else the caller asks of the GEMM: element types and a fused epilogue (its terms in the
// kernels' order, CanonicalEpilogue). The chosen kernel is the variant of the chosen tile that
// has them (GemmVariantName).
struct GemmOptions {
  std::string in_type = "bf16", out_type = "bf16", epilogue;
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
// base.<in>-<out>[.any_m][.a_mn][.b_mn][.c_row][.<epilogue>]
// (gemm/bf16_sm90_n128.f16-f32.bias_col.gelu).
std::string GemmVariantName(const std::string& base, const GemmOptions& options);

// What `kiln tune` measured: the fastest kernel (its tile: the base name, before any variant
// options) and split per GPU and problem size. A text file, one line per entry,
//   sm_<cc> <M> <N> <K> <kernel> <split> <milliseconds>
// (a line without the split means 1), later lines replacing earlier ones; '#' starts a comment.
class GemmTuneCache {
 public:
  // An absent file is an empty cache; a line that does not parse is an error naming it.
  static absl::StatusOr<GemmTuneCache> Read(const std::string& path);
  // The same for a reader of the choices (kiln gemm, GemmRunner), to whom an absent file is an
  // error: a path mistyped would otherwise drop every measured choice without a word.
  static absl::StatusOr<GemmTuneCache> ReadExisting(const std::string& path);
  absl::Status Write(const std::string& path) const;
  const GemmChoice* Find(int compute_capability, const GemmSize& size) const;  // kernel and split
  void Set(int compute_capability, const GemmSize& size, const std::string& kernel, int split,
           double ms);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    GemmChoice choice;
    double ms = 0;
  };
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, Entry> entries_;
};

// The kernels (tiles) and splits that can run a problem on this GPU and that `kiln tune` measures.
std::vector<GemmChoice> GemmCandidates(const GemmSize& size, int compute_capability);

// `compute_capability`: the GPU's (90 for an H100/H200), or the one to choose for. A tuned
// entry for the size, where `tuned` has one, wins over the rule.
GemmChoice ChooseGemm(const GemmSize& size, int compute_capability, const GemmOptions& options = {},
                      const GemmTuneCache* tuned = nullptr);

}  // namespace kiln::rt
