// The GEMM entry point's plan for 8-bit inputs: the checks, the problem the tile kernel sees (a
// row-major C computed as C^T = B^T A^T, the scales swapped with their operands) and its tile.
#include "ops/gemm/gemm_fp8.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "kiln/bundle/epilogue_terms.h"
#include "kiln/ops/gemm_tiles.h"

namespace kiln::rt {

bool IsFp8Type(const std::string& type) { return type == "e4m3" || type == "e5m2"; }

namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln gemm: ", message));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The Blackwell kernels: DeepGEMM's blockwise scales (ops/gemm/kernels/fp8_sm100.cc) and MXFP8's
// (mxfp8_sm100.cc).
constexpr const char* kBlackwellKernel = "gemm/fp8_blockwise_sm100";
constexpr const char* kMxfp8Kernel = "gemm/mxfp8_sm100";

// MXFP8's scales: bytes of a row in K order, rows of whole 32-bit words (a k-tile's four), 4-byte
// aligned (the kernel reads a word per row per k-tile).
absl::Status CheckMxScales(const GemmSize& size, const GemmOperands& o) {
  const int64_t least = 4 * CeilDiv(size.k, 128);
  for (const auto& [name, row, k, ptr] : {std::tuple{"scale_a", o.sa_row, o.sa_k, o.scale_a},
                                          std::tuple{"scale_b", o.sb_row, o.sb_k, o.scale_b}})
    if (row % 4 || row < least || (k != 0 && k != 1) || ptr % 4)
      return Invalid(absl::StrCat(
          "mxfp8 scales are UE8M0 bytes, a row's in K order (", name,
          "'s k stride 1) in rows of a multiple of 4 bytes, at least 4 * ceil(K / 128) = ", least,
          ", from a 4-byte aligned pointer; ", name, " has rows of ", row, " bytes, k stride ", k,
          (ptr % 4 ? ", an unaligned pointer" : "")));
  return absl::OkStatus();
}

// The tile kernels that take 8-bit inputs (ops/gemm/kernels/tile_kernels.cc: TakesFp8): the
// rule's (ChooseFp8Tile) and the ones a caller may name (GemmOptions::fp8_tile).
constexpr const char* kFp8Tiles[] = {
    "gemm/bf16_sm90_n128c2", "gemm/bf16_sm90_n128",   "gemm/bf16_sm90_m64",  "gemm/bf16_sm90_n64",
    "gemm/bf16_sm90_m64n64", "gemm/bf16_sm90_m64n32", "gemm/bf16_sm90_m192", "gemm/bf16_sm90_n192"};

// Whether the tile takes 8-bit inputs scaled so ("tensorwise", "rowwise", "blockwise"; TakesFp8).
bool TileTakesScaling(std::string_view kernel, const std::string& scaling) {
  const Sm90Tile* t = FindSm90Tile(kernel);
  return t && TakesFp8(t->cta_m, t->cta_n, absl::StartsWith(scaling, "blockwise"));
}

// TMA reads A's and B's rows: 16 bytes apart, from 16-byte aligned pointers.
absl::Status CheckTmaRows(const GemmSize& size, const GemmOperands& o) {
  if (size.k % 16 || (o.lda && o.lda % 16) || (o.ldb && o.ldb % 16) || o.a % 16 || o.b % 16) {
    // (A leading dimension of 0 is the packed one.)
    const int64_t lda = o.lda           ? o.lda
                        : o.a_col_major ? size.m
                                        : size.k,
                  ldb = o.ldb           ? o.ldb
                        : o.b_row_major ? size.n
                                        : size.k;
    std::vector<std::string> off;  // what breaks the rule
    if (size.k % 16) off.push_back(absl::StrCat("K = ", size.k));
    if (lda % 16) off.push_back(absl::StrCat("A's leading dimension ", lda));
    if (ldb % 16) off.push_back(absl::StrCat("B's leading dimension ", ldb));
    if (o.a % 16) off.push_back("A's pointer");
    if (o.b % 16) off.push_back("B's pointer");
    return Invalid(absl::StrCat(
        "8-bit A and B are read by TMA: K (", size.k, ") and their leading dimensions (", lda, ", ",
        ldb, ") multiples of 16, pointers 16-byte aligned; not so: ", absl::StrJoin(off, ", ")));
  }
  return absl::OkStatus();
}

// sm_100: a block-scaled kernel on tcgen05 (blockwise or mxfp8 scales), a row-major bf16 C.
absl::StatusOr<GemmPlan> PlanBlackwell(const GemmSize& size, const GemmOptions& options,
                                       const std::string& terms, const GemmOperands& o) {
  const bool mx = options.scaling == "mxfp8";
  const char* kernel = mx ? kMxfp8Kernel : kBlackwellKernel;
  if (options.fp8_split != -1)
    return Invalid(absl::StrCat("fp8_split applies to the sm_90 tile kernels; sm_100 runs ", kernel,
                                " whole tiles"));
  if (!options.fp8_tile.empty())
    return Invalid(
        absl::StrCat("fp8_tile names an sm_90 tile kernel; sm_100 runs ", kernel, " alone"));
  if ((options.scaling != "blockwise" && !mx) || !o.c_row_major || options.out_type != "bf16" ||
      !terms.empty())
    return Invalid(
        absl::StrCat("8-bit inputs on sm_100 take blockwise (", kBlackwellKernel, ") or mxfp8 (",
                     kMxfp8Kernel, ") scales into a row-major bf16 C, no epilogue terms; given ",
                     options.scaling, " scales, a ", o.c_row_major ? "row" : "column", "-major ",
                     options.out_type, " C", terms.empty() ? "" : ", terms " + terms));
  if (options.in_type != "e4m3" || (!options.in_type_b.empty() && options.in_type_b != "e4m3"))
    return Invalid(absl::StrCat(kernel, " takes e4m3 A and B (", options.in_type,
                                options.in_type_b.empty() ? "" : " and ", options.in_type_b,
                                " given)"));
  if (mx) {  // with zero strides' defaults
    GemmOperands resolved = o;
    ResolveFp8Scales(size, options.scaling, resolved);
    if (absl::Status st = CheckMxScales(size, resolved); !st.ok()) return st;
  }
  if (absl::Status st = CheckTmaRows(size, o); !st.ok()) return st;
  if (o.ldc && o.ldc != size.n)
    return Invalid(
        absl::StrCat(kernel, " stores C packed: ldc must be N (", size.n, "), not ", o.ldc));
  GemmPlan plan;
  plan.size = size;
  plan.c_row = true;
  plan.choice = {
      kernel, mx ? "the MXFP8 tcgen05 kernel (sm_100)" : "the block-scaled tcgen05 kernel (sm_100)",
      1};
  return plan;
}

// The work table's tiles of `t` (a cluster's) over the problem.
int64_t TilesOf(const Sm90Tile* t, const GemmSize& s) {
  return CeilDiv(s.m, t->tile_m()) * CeilDiv(s.n, t->tile_n());
}

// A tile's split: below one wave, K split so that the parts fill the CTA groups (parts of at least
// 4 k-tiles, at most 8 of them); past it, whole tiles, or stream-K where the last wave would be
// less than three quarters full (docs/perf/2026-11-29-fp8-tile-rule.md).
GemmChoice Filled(const char* name, const GemmSize& s) {
  const Sm90Tile* t = FindSm90Tile(name);
  const int64_t tiles = TilesOf(t, s);
  const int64_t groups = t->in_flight(), waves = CeilDiv(tiles, groups);
  const std::string what = absl::StrCat(tiles, " tiles of ", t->tile_m(), "x", t->tile_n(),
                                        " over ", groups, " CTA groups");
  if (tiles >= groups) {
    if (4 * tiles >= 3 * waves * groups) return {name, what + ", whole", 1};
    return {name, what + ", streamed: the last wave less than three quarters full", 0};
  }
  const int split = static_cast<int>(
      std::min<int64_t>({8, groups / tiles, std::max<int64_t>(CeilDiv(s.k, 128) / 4, 1)}));
  return {name, what + (split > 1 ? absl::StrCat(", K split in ", split) : ", whole"), split};
}

}  // namespace

// By the kernel's N (a row-major C's tokens, the problem swapped): up to 64, 64-row pairs of 64
// columns, or 128x64 tiles where those pairs would take more than two waves; up to 128, 64x128
// tiles where 128x128 ones are fewer than a wave; else 128x128 tiles. The pairs sharing B
// (n128c2) were level with 128x128 alone or slower at every tensorwise size swept, and ahead at a
// few blockwise ones only (docs/perf/2026-11-29-fp8-tile-rule.md). The 192x128 tiles run a tile's
// work at 128x128's pace to within a few percent, not faster: they take the place of whole
// 128x128 tiles where, whole too, they need at least a twentieth less time in whole waves
// (docs/perf/2026-12-03-fp8-three-consumer-warpgroups.md). Tensorwise and rowwise, 128x192 tiles
// in pairs sharing B take the 128x128 tiles' place where a CTA takes 8 or more and their waves
// weigh less (docs/perf/2026-12-03-fp8-tiles-of-192-columns.md).
GemmChoice ChooseFp8Tile(const GemmSize& s, const std::string& scaling) {
  constexpr const char *kPairs64 = "gemm/bf16_sm90_m64n64", *k128x64 = "gemm/bf16_sm90_n64",
                       *k64x128 = "gemm/bf16_sm90_m64", *k128 = "gemm/bf16_sm90_n128",
                       *k192x128 = "gemm/bf16_sm90_m192", *k128x192 = "gemm/bf16_sm90_n192";
  // Tiles per CTA group: how many waves of whole tiles the problem takes.
  auto waves = [&](const char* name) {
    const Sm90Tile* t = FindSm90Tile(name);
    return static_cast<double>(TilesOf(t, s)) / t->in_flight();
  };
  if (s.n <= 64) return Filled(waves(kPairs64) > 2 ? k128x64 : kPairs64, s);
  if (s.n <= 128 && waves(k128) < 1) return Filled(k64x128, s);
  const GemmChoice tiles128 = Filled(k128, s), tiles192 = Filled(k192x128, s);
  // A wave of 192-row tiles takes 1.5 waves of 128-row ones: 1.5 * w192 < 0.95 * w128.
  if (waves(k128) >= 1 && tiles128.split == 1 && tiles192.split == 1 &&
      30 * std::ceil(waves(k192x128)) < 19 * std::ceil(waves(k128)))
    return tiles192;
  // 128x192 tiles in pairs (tensorwise, rowwise: no blocks of B's scales) read less shared
  // memory a multiply-add than 128x128 ones and run faster where each CTA takes 8 of them or
  // more; a wave of them weighs 1.3 waves of 128x128 tiles (1.5 for its work over that gain):
  // 1.3 * w192 < w128 (docs/perf/2026-12-03-fp8-tiles-of-192-columns.md).
  if (const GemmChoice wide = Filled(k128x192, s);
      TileTakesScaling(k128x192, scaling) && waves(k128x192) >= 8 && wide.split == 1 &&
      13 * std::ceil(waves(k128x192)) < 10 * std::ceil(waves(k128)))
    return wide;
  return tiles128;
}

std::vector<GemmChoice> Fp8TileCandidates(const GemmSize& s, const std::string& scaling) {
  std::vector<GemmChoice> candidates;
  const int64_t k_tiles = CeilDiv(s.k, 128);
  for (const char* name : kFp8Tiles) {
    if (!TileTakesScaling(name, scaling)) continue;
    const Sm90Tile* t = FindSm90Tile(name);
    const int64_t tiles = TilesOf(t, s);
    candidates.push_back({name, "whole tiles", 1});
    for (int split = 2; split <= 8 && k_tiles / split >= 4 && tiles * split <= t->in_flight();
         ++split)
      candidates.push_back({name, absl::StrCat("split-K ", split), split});
    candidates.push_back({name, "stream-K", 0});
  }
  return candidates;
}

absl::StatusOr<GemmPlan> PlanFp8Gemm(const GemmSize& size, const GemmOptions& options,
                                     const std::string& terms, const GemmOperands& o,
                                     int compute_capability, const GemmTuneCache* tuned) {
  if (compute_capability == 100) return PlanBlackwell(size, options, terms, o);
  if (compute_capability != 90)
    return Invalid(absl::StrCat(
        "8-bit inputs run on the sm_90 tile kernels (H100, H200) and, blockwise, on sm_100 "
        "(B200); this GPU is sm_",
        compute_capability));
  if (options.scaling == "mxfp8")
    return Invalid(
        "mxfp8 scales (UE8M0 per 1 x 32 of A and of B) are applied by sm_100's block-scaled "
        "tcgen05.mma; on sm_90 take blockwise scales (per 1 x 128 of A, 128 x 128 of B)");
  if (options.scaling != "tensorwise" && options.scaling != "rowwise" &&
      options.scaling != "blockwise")
    return Invalid(
        absl::StrCat("8-bit inputs need a scaling: tensorwise, rowwise, blockwise or mxfp8 (",
                     options.scaling.empty() ? "none" : options.scaling, " given)"));
  if (!o.scale_a || !o.scale_b) return Invalid("8-bit inputs need scale_a and scale_b");
  if (o.a_col_major || o.b_row_major)
    return Invalid(
        "8-bit A and B are read K-major only (the FP8 wgmma takes no transpose): A row-major "
        "(M x K), B column-major (the N x K weight)");
  for (absl::string_view term : absl::StrSplit(terms, '.'))
    if (term == "swiglu" || term == "rope")
      return Invalid(absl::StrCat(term, " is fused for 16-bit inputs only (8-bit ones given)"));
  // The epilogue's C_in and residual are laid out as C, packed; the tile kernels may read them
  // through TMA (16-byte aligned).
  if (EpilogueReadsMatrices(terms)) {
    const int64_t packed = o.c_row_major ? size.n : size.m;
    if (o.ldc && o.ldc != packed)
      return Invalid(
          absl::StrCat("the epilogue's C_in and residual are read as C, packed: ldc must "
                       "be ",
                       o.c_row_major ? "N (" : "M (", packed, "), not ", o.ldc));
    if (o.c_in % 16 || o.residual % 16)
      return Invalid("the epilogue's C_in and residual need 16-byte aligned pointers");
  }
  if (absl::Status st = CheckTmaRows(size, o); !st.ok()) return st;
  if (const int64_t c_rows = o.c_row_major ? size.n : size.m; o.ldc && o.ldc < c_rows)
    return Invalid(
        absl::StrCat("ldc = ", o.ldc, " is less than ", o.c_row_major ? "N = " : "M = ", c_rows));
  GemmPlan plan;
  // A row-major C with blockwise scales is stored row-major by the tile (c_row), as DeepGEMM does,
  // rather than computed as C^T: A's scales stay per row, two factors a thread a stage, where
  // C^T's (blockwise_t) are one per column. Not for M <= 128, whose few rows the swapped problem
  // spreads over more CTAs (docs/perf/2026-11-29-fp8-gemm.md, steps 4 and 5).
  plan.c_row = o.c_row_major && options.scaling == "blockwise" && size.m > 128;
  plan.swapped = o.c_row_major && !plan.c_row;
  plan.size = plan.swapped ? GemmSize{size.n, size.m, size.k} : size;
  GemmOptions kernel = options;
  kernel.c_row = plan.c_row;
  // Swapped, C^T's rows are C's columns: the bias's axis swaps with them.
  kernel.epilogue = terms;
  if (plan.swapped) {
    absl::StatusOr<std::string> swapped = CanonicalEpilogue(
        absl::StrReplaceAll(terms, {{"bias_row", "bias_col"}, {"bias_col", "bias_row"}}));
    if (!swapped.ok()) return swapped.status();
    kernel.epilogue = *swapped;
  }
  if (plan.swapped && options.scaling == "blockwise") kernel.scaling = "blockwise_t";
  // The kernel's A is the caller's B where swapped; one type for both needs no B type.
  const std::string a_type = options.in_type,
                    b_type = options.in_type_b.empty() ? a_type : options.in_type_b;
  kernel.in_type = plan.swapped ? b_type : a_type;
  kernel.in_type_b = a_type == b_type ? "" : plan.swapped ? a_type : b_type;
  // C through its map takes rows 16 bytes apart from a 16-byte aligned pointer: else from
  // registers (any_m).
  const int64_t c_extent = plan.c_row ? plan.size.n : plan.size.m;  // C's contiguous one
  kernel.any_m = options.out_type != "f32" &&
                 (c_extent % 8 != 0 || (o.ldc && o.ldc % 8 != 0) || o.c % 16 != 0);
  plan.choice = ChooseFp8Tile(plan.size, options.scaling);
  if (const GemmChoice* measured =
          tuned ? tuned->FindFp8(90, Fp8TuneScaling(options.scaling, plan), plan.size) : nullptr) {
    if (std::find(std::begin(kFp8Tiles), std::end(kFp8Tiles), measured->kernel) ==
            std::end(kFp8Tiles) ||
        !TileTakesScaling(measured->kernel, options.scaling))
      return Invalid(absl::StrCat("the tune cache's 8-bit entry for this size names ",
                                  measured->kernel, ", which takes no 8-bit inputs scaled ",
                                  options.scaling));
    if (measured->split < 0 || measured->split > 16)
      return Invalid(absl::StrCat("the tune cache's 8-bit entry for this size has split ",
                                  measured->split,
                                  ": 1 whole tiles, 2-16 split-K parts, 0 stream-K (kiln tune "
                                  "writes one of those)"));
    plan.choice = {measured->kernel, "measured by kiln tune", measured->split};
  }
  if (!options.fp8_tile.empty()) {
    if (std::find(std::begin(kFp8Tiles), std::end(kFp8Tiles), options.fp8_tile) ==
        std::end(kFp8Tiles))
      return Invalid(absl::StrCat("the tile ", options.fp8_tile,
                                  " (GemmOptions::fp8_tile, kiln gemm --kernel) is none of the "
                                  "8-bit tile kernels: gemm/bf16_sm90_n128c2, _n128, _m64, _n64, "
                                  "_m64n64, _m64n32, _m192, _n192"));
    if (!TileTakesScaling(options.fp8_tile, options.scaling))
      return Invalid(absl::StrCat("the tile ", options.fp8_tile,
                                  " (GemmOptions::fp8_tile, kiln gemm --kernel) takes tensorwise "
                                  "and rowwise scales only: its ",
                                  FindSm90Tile(options.fp8_tile)->cta_n,
                                  " columns hold no whole blocks of B's 128-column scales (",
                                  options.scaling, " given)"));
    plan.choice = {options.fp8_tile, "the caller's tile", 1};
  }
  if (options.fp8_split < -1 || options.fp8_split > 16)
    return Invalid(absl::StrCat("fp8_split (kiln gemm --split) ", options.fp8_split,
                                ": 1 whole tiles, 2-16 split-K parts, 0 stream-K, -1 the rule's"));
  if (options.fp8_split >= 0) {
    plan.choice.split = options.fp8_split;
    plan.choice.why += absl::StrCat("; then ", SplitName(options.fp8_split),
                                    " as the caller asked, in place of the split above");
  }
  plan.choice.kernel = GemmVariantName(plan.choice.kernel, kernel);
  return plan;
}

std::string Fp8TuneScaling(const std::string& scaling, const GemmPlan& plan) {
  if (scaling != "blockwise") return scaling;
  return plan.c_row ? "blockwise.c_row" : plan.swapped ? "blockwise_t" : "blockwise";
}

void ResolveFp8Scales(const GemmSize& size, const std::string& scaling, GemmOperands& o) {
  if (scaling == "rowwise") {
    o.sa_row = 1, o.sa_k = 0, o.sb_row = 1, o.sb_k = 0;
  } else if (scaling == "mxfp8") {  // rows of whole k-tiles' words, bytes in K order
    if (!o.sa_row) o.sa_row = 4 * CeilDiv(size.k, 128), o.sa_k = 1;
    if (!o.sb_row) o.sb_row = 4 * CeilDiv(size.k, 128), o.sb_k = 1;
  } else if (scaling == "blockwise") {
    if (!o.sa_row && !o.sa_k) o.sa_row = 1, o.sa_k = size.m;
    if (!o.sb_row && !o.sb_k) o.sb_row = CeilDiv(size.k, 128), o.sb_k = 1;
  } else {
    o.sa_row = o.sa_k = o.sb_row = o.sb_k = 0;
  }
}

void SwapFp8Scales(GemmOperands& o) {
  std::swap(o.scale_a, o.scale_b);
  std::swap(o.sa_row, o.sb_row);
  std::swap(o.sa_k, o.sb_k);
}

}  // namespace kiln::rt
