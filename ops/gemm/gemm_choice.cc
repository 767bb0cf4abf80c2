// The GEMM entry point's choice rule (kiln/ops/gemm_choice.h) in the order it asks: a kiln tune
// entry of a tuning table; a special kernel whose region holds the size; the strided kernel where
// TMA cannot read the operands; the bandwidth model up to weight_bound_rows; a C of few columns;
// few tiles over a long K; the compute model. The figures come from the tables (ops/gemm/tables/,
// docs/GEMM_CHOICE.md).
#include "kiln/ops/gemm_choice.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/ops/gemm_tiles.h"
#include "ops/gemm/gemm_model.h"

namespace kiln::rt {
namespace {

constexpr const char* kMma16Kernel = "gemm/bf16_mma16_sm90";
constexpr const char* kTma16Kernel = "gemm/bf16_tma16_sm90";
constexpr const char* kTma8Kernel = "gemm/bf16_tma8_sm90";
constexpr const char* kWide32Kernel = "gemm/bf16_k128n32_sm90";
constexpr const char* kWide64Kernel = "gemm/bf16_k128n64_sm90";
bool IsSkinny(std::string_view kernel) { return kernel.rfind("gemm/bf16_skinny", 0) == 0; }

// This GPU's rules: the given table's where it has some for it, else the built-in table's, else
// (sm_80 and later) the built-in sm_80 table's.
const GemmRules* RulesFor(int cc, const GemmTuneCache* tuned) {
  if (tuned && tuned->Rules(cc)) return tuned->Rules(cc);
  if (const GemmRules* r = GemmTuneCache::BuiltIn().Rules(cc)) return r;
  return cc >= 80 ? GemmTuneCache::BuiltIn().Rules(80) : nullptr;
}

// What a kernel can read and write: the mma.sync kernels packed K-major operands and a
// column-major C; the wide-stage kernels a packed K-major A, either B, a column-major C; the
// skinny kernel K-major operands and either C; the tile kernels MN-major operands only in tiles of
// whole 64-wide blocks. For a region's kernel and a kiln tune entry alike.
bool CanRead(std::string_view kernel, const GemmOptions& o) {
  const bool mn_major = o.a_mn || o.b_mn, packed = o.packed.value_or(true);
  if (IsSkinny(kernel)) return !mn_major;
  if (kernel == kMma16Kernel || kernel == kTma16Kernel || kernel == kTma8Kernel)
    return !mn_major && packed && !o.c_row;
  if (kernel == kWide32Kernel || kernel == kWide64Kernel) return !o.a_mn && packed && !o.c_row;
  if (!mn_major) return true;
  const Sm90Tile* tile = FindSm90Tile(kernel);
  return tile && ReadsMnMajor(*tile);
}

// Whether a region's kernel is taken for the operands as given: it can read them (CanRead), K is a
// multiple of 8, and the TMA-fed ones read rows 128 bytes apart (elsewhere they are slow:
// docs/perf/2026-11-27-weights-by-tma-boxes-mma-sync.md).
bool ReadsAsGiven(std::string_view kernel, const GemmSize& s, const GemmOptions& o) {
  if (s.k % 8 || !CanRead(kernel, o)) return false;
  if (kernel == kTma16Kernel || kernel == kTma8Kernel) return o.rows_128b.value_or(s.k % 64 == 0);
  if (kernel == kWide32Kernel || kernel == kWide64Kernel)
    return o.rows_128b.value_or(s.k % 64 == 0 && (!o.b_mn || s.n % 64 == 0));
  return true;
}

// The region's kernel, said for the user.
std::string RegionWhy(std::string_view kernel, const GemmSize& s) {
  const std::string mnk = absl::StrCat("M = ", s.m, ", N = ", s.n, ", K = ", s.k);
  if (IsSkinny(kernel))
    return absl::StrCat("M = ", s.m, ": the weights streamed once on CUDA cores, 16-byte chunks");
  if (kernel == kMma16Kernel)
    return absl::StrCat("M = ", s.m, ", N = ", s.n,
                        ": the weights read in 16-byte chunks into mma.sync fragments, "
                        "a block per 16 columns");
  if (kernel == kTma8Kernel)
    return mnk + ": the weights by TMA boxes of 256 k into mma.sync, A's box of 8 rows";
  if (kernel == kTma16Kernel)
    return mnk + ": the weights by TMA boxes of 256 k into mma.sync, a block per 16 columns";
  return absl::StrCat(mnk, ": 64-row blocks of ", kernel == kWide32Kernel ? "32" : "64",
                      " columns in stages of 128 k, one wave, A's box of the rows before M");
}

const GemmRegion* RegionOf(const GemmRules& rules, const GemmSize& s, const GemmOptions& o) {
  for (const GemmRegion& r : rules.regions)
    if (r.m.Holds(s.m) && r.n.Holds(s.n) && r.k.Holds(s.k) &&
        (r.only.empty() || (r.only == "b_mn" ? o.b_mn : o.c_row)) && ReadsAsGiven(r.kernel, s, o))
      return &r;
  return nullptr;
}

// A packed MN-major operand strides its columns by M (A) or N (B) elements: TMA needs those at
// 16 bytes, a multiple of 8 elements.
bool TmaStrides(const GemmSize& s, bool a_mn, bool b_mn) {
  return !(a_mn && s.m % 8) && !(b_mn && s.n % 8);
}

// Where TMA cannot read the operands, or no tile kernel is tuned for the GPU: the strided
// mma.sync kernel (any size and strides; a fraction of the tile kernels' speed), or before sm_80
// the reference kernel.
std::optional<GemmChoice> Strided(const GemmSize& s, int cc, const GemmOptions& o, bool has_tiles) {
  constexpr const char* kStrided = "gemm/bf16_strided";
  if (!has_tiles)
    return GemmChoice{cc >= 80 ? kStrided : "reference/bf16",
                      absl::StrCat("no tuned kernel for sm_", cc,
                                   cc >= 80 ? " yet: the strided mma.sync kernel (any size)"
                                            : ": the reference kernel (any size, not fast)")};
  if (s.k % 8 != 0 && !(o.a_mn && o.b_mn) && !o.tma_strides)  // K strides K-major rows
    return GemmChoice{
        kStrided,
        absl::StrCat("K = ", s.k,
                     ": TMA needs K a multiple of 8 (16-byte rows of K-major A and B), so "
                     "the strided mma.sync kernel (any size, elements loaded one by one)")};
  if (!TmaStrides(s, o.a_mn, o.b_mn) && !o.tma_strides)
    return GemmChoice{
        kStrided,
        absl::StrCat(o.a_mn && s.m % 8 ? absl::StrCat("A column-major with M = ", s.m)
                                       : absl::StrCat("B row-major with N = ", s.n),
                     ": TMA needs its columns 16 bytes apart (a multiple of 8 elements), so the "
                     "strided mma.sync kernel (any size, elements loaded one by one)")};
  return std::nullopt;
}

// The tile of kiln/ops/gemm_tiles.h by name (the rules below name the ones they are about).
const Sm90Tile& Tile(std::string_view kernel) { return *FindSm90Tile(kernel); }
static_assert(HasSm90Tile("gemm/bf16_sm90_n64") && HasSm90Tile("gemm/bf16_sm90_m64n16") &&
                  HasSm90Tile("gemm/bf16_sm90_m64n32") && HasSm90Tile("gemm/bf16_sm90_m64n64") &&
                  HasSm90Tile("gemm/bf16_sm90_n128"),
              "the rules below name these tiles");

// Among the weight-bound rows, M a multiple of 8 (the kernel with C's map), K of 8192 or more and
// at most half as many 128x64 tiles as its CTAs: those tiles streamed, each cut along K, so that
// every CTA streams B and A is read once per 64 columns; the bandwidth model weighs B's bytes
// alone (docs/perf/2026-11-26-long-k-over-few-tiles.md).
bool LongKOverFewTiles(const GemmSize& s) {
  const Sm90Tile& n64 = Tile("gemm/bf16_sm90_n64");
  return s.m % 8 == 0 && s.k >= 8192 && 2 * TilesOf(n64, s) <= n64.in_flight();
}

// Few tiles over a long K past the weight-bound rows: K of 32768 or more over at most 8 pairs of
// 128x128 tiles (256 rows by 128 columns; in 4 parts of each, half the GPU's 64 clusters or more
// would idle) whose columns lie nine tenths inside N or more, for a plain bf16 C stored by TMA (M a
// multiple of 8; the pairs' other variants are 8-bit ones): those pairs, sharing B so that each
// CTA pulls a quarter less from L2 a k-tile, split so that the parts about fill one wave: 16 up to
// 4 pairs; over one row of 5 or 6 pairs 12 or 10; else 8 (more over several rows of pairs ran
// slower). Their partials are summed in a tree. Measured against the compute model's choice in
// docs/perf/2026-12-03-split-partials-in-a-tree.md.
constexpr const char* kPairsSharingB = "gemm/bf16_sm90_n128c2";
static_assert(HasSm90Tile(kPairsSharingB));
std::optional<GemmChoice> FewTilesLongK(const GemmSize& s, const GemmOptions& o,
                                        bool aligned_rows) {
  const int64_t columns = (s.n + 127) / 128, pairs = (s.m + 255) / 256 * columns;
  const bool full_columns = 10 * s.n >= 9 * 128 * columns;
  if (s.k < 32768 || pairs > 8 || !full_columns || !aligned_rows || s.m % 8 ||
      GemmVariantName(kPairsSharingB, o) != kPairsSharingB)
    return std::nullopt;
  const int parts = pairs <= 4 ? 16 : s.m <= 256 && pairs <= 6 ? static_cast<int>(64 / pairs) : 8;
  return GemmChoice{kPairsSharingB,
                    absl::StrFormat("K = %d over %d pairs of 128x128 tiles sharing B: split-K %d, "
                                    "so that the parts about fill one wave",
                                    static_cast<int>(s.k), static_cast<int>(pairs), parts),
                    parts};
}

// Up to weight_bound_rows the time is the weight read's: the tile and split (4 parts at most, the
// model's fit) that stream B in the least time (StreamUs); none where the table weighs no tile
// there.
std::optional<GemmChoice> WeightBound(const GemmModel& model, const std::vector<Candidate>& tiles,
                                      const GemmSize& s, bool mn_major, bool aligned_rows) {
  if (LongKOverFewTiles(s) && !mn_major && aligned_rows) {
    const Sm90Tile& n64 = Tile("gemm/bf16_sm90_n64");
    return GemmChoice{
        n64.kernel,
        absl::StrFormat("M = %d, K = %d over %d 128x64 tiles: those tiles streamed "
                        "(stream-K), each cut along K, "
                        "so that every CTA streams B and A is read once per 64 columns",
                        static_cast<int>(s.m), static_cast<int>(s.k),
                        static_cast<int>(TilesOf(n64, s))),
        0};
  }
  const Candidate* best = nullptr;
  int best_split = 1;
  for (const Candidate& c : tiles)
    for (int split : kSplits)  // a tie keeps the earlier: whole tiles before splits
      if (split != 0 && split <= 4 && c.weights->weight_bound && Weighed(c, s, split) &&
          (!mn_major || ReadsMnMajor(*c.tile)) &&
          (!best || StreamUs(model, c, s, split) < StreamUs(model, *best, s, best_split) - 1e-9))
        best = &c, best_split = split;
  if (!best) return std::nullopt;
  return GemmChoice{
      best->kernel(),
      absl::StrFormat("M = %d: the weight read bounds the time; %dx%d tiles, %s: %.0f us "
                      "predicted streaming B",
                      static_cast<int>(s.m), best->tile_m(), best->tile_n(), SplitName(best_split),
                      StreamUs(model, *best, s, best_split)),
      best_split};
}

// A C of few columns (N <= 64, M >= 512): A is the weights, and 64-row tiles stream it 64 rows a
// CTA (docs/perf/2026-11-26-c-of-few-columns.md): 64x32 tiles, past 32 columns two columns of them
// up to one wave, else 64x64 pairs; in 2 parts where A has 32 blocks of 64 rows or fewer, or the
// tiles are 64 or fewer and K >= 8192. With 16 blocks or fewer over a long K: the 128x64 tiles
// streamed, or for 16 columns or fewer 64x16 tiles in parts making about 64 CTAs
// (docs/perf/2026-11-27-few-row-blocks-long-k.md). Where two columns of 64x32 tiles would read a
// long A twice from memory, and between K = 8192 and 16383 over few blocks, the compute model.
bool FewColumns(const GemmSize& s) {
  if (s.m < 512 || s.n > 64) return false;
  if ((s.m + 63) / 64 <= 16) return s.k < 8192 || s.k >= 16384 || s.n <= 16;
  return s.n <= 32 || s.k <= 16384;
}
GemmChoice FewColumnsChoice(const GemmSize& s) {
  const int64_t rows = (s.m + 63) / 64;  // 64-row tiles along M
  const bool pairs = s.n > 32 && 2 * rows > 128;
  const Sm90Tile& c = Tile(pairs ? "gemm/bf16_sm90_m64n64" : "gemm/bf16_sm90_m64n32");
  const int64_t ctas = pairs ? rows : rows * ((s.n + 31) / 32);
  if (s.n <= 16 && rows <= 16 && s.k >= 8192) {
    const int parts = rows <= 8 ? 8 : 4;
    return {
        Tile("gemm/bf16_sm90_m64n16").kernel,
        absl::StrFormat(
            "N = %d: A is the weights, K = %d over %d blocks of 64 rows: 64x16 tiles in %d parts, "
            "their deep ring streaming A",
            static_cast<int>(s.n), static_cast<int>(s.k), static_cast<int>(rows), parts),
        parts};
  }
  if (rows <= 16 && s.k >= 16384)
    return {Tile("gemm/bf16_sm90_n64").kernel,
            absl::StrFormat(
                "N = %d: A is the weights, K = %d over %d blocks of 64 rows: 128x64 tiles streamed "
                "(stream-K), each cut along K",
                static_cast<int>(s.n), static_cast<int>(s.k), static_cast<int>(rows)),
            0};
  const int split = rows <= 32 || (ctas <= 64 && s.k >= 8192) ? 2 : 1;
  return {c.kernel,
          absl::StrFormat(
              "N = %d: A is the weights; 64x%d tiles%s, %s, so that a CTA streams 64 rows of A",
              static_cast<int>(s.n), pairs ? 64 : 32, pairs ? " in pairs" : "", SplitName(split)),
          split};
}

// Past weight_bound_rows: the tile and split wasting least of the machine (Efficiency).
GemmChoice ComputeBound(const GemmModel& model, const std::vector<Candidate>& tiles,
                        const GemmSize& s, bool mn_major, bool aligned_rows) {
  auto efficiency = [&](const Candidate& c, int split) {
    return Efficiency(model, c, s, split, aligned_rows);
  };
  const Candidate* best = &tiles[0];
  int best_split = 1;
  for (const Candidate& c : tiles)
    for (int split : kSplits)  // a tie keeps the earlier: whole tiles before splits
      if (Weighed(c, s, split) && (!mn_major || ReadsMnMajor(*c.tile)) &&
          (split == 1 || c.weights->splits) &&
          (split != 0 || (c.weights->streams && StreamsWell(c, s))) &&
          efficiency(c, split) > efficiency(*best, best_split) + 1e-9)
        best = &c, best_split = split;
  return {best->kernel(),
          absl::StrFormat("%dx%d tiles, %d in flight, %s: %.*f%% of the machine's time useful by "
                          "the tile, wave and partial counts%s",
                          best->tile_m(), best->tile_n(), best->in_flight(), SplitName(best_split),
                          // a problem of a few tiles: two decimals, not "0%"
                          efficiency(*best, best_split) < 0.01 ? 2 : 0,
                          100 * efficiency(*best, best_split),
                          aligned_rows ? "" : " (rows off 128 bytes: the tiles' speeds there)"),
          best_split};
}

// Whether a tile record serves these options (plain_c: a 16-bit C without fused terms only).
bool Serves(const TileWeights& w, const GemmOptions& o) {
  return !w.plain_c || (o.epilogue.empty() && o.out_type != "f32");
}

GemmChoice ChooseByRules(const GemmSize& s, int cc, const GemmOptions& o, const GemmRules* rules) {
  const bool mn_major = o.a_mn || o.b_mn;
  if (rules)
    if (const GemmRegion* r = RegionOf(*rules, s, o)) return {r->kernel, RegionWhy(r->kernel, s)};
  const bool has_tiles = rules && rules->model && !rules->tiles.empty();
  if (std::optional<GemmChoice> strided = Strided(s, cc, o, has_tiles)) return *strided;
  std::vector<Candidate> tiles = CandidatesOf(*rules);
  std::erase_if(tiles, [&](const Candidate& c) { return !Serves(*c.weights, o); });
  // Unless the planner says: packed operands, K-major rows K elements apart, MN-major ones M (A) or
  // N (B).
  const bool aligned_rows =
      o.rows_128b.value_or((o.a_mn ? s.m : s.k) % 64 == 0 && (o.b_mn ? s.n : s.k) % 64 == 0);
  if (s.m <= rules->model->weight_bound_rows)
    if (std::optional<GemmChoice> c = WeightBound(*rules->model, tiles, s, mn_major, aligned_rows))
      return *c;
  if (FewColumns(s) && !mn_major && aligned_rows) return FewColumnsChoice(s);
  if (cc == 90)  // (the pairs are sm_90a's)
    if (std::optional<GemmChoice> c = FewTilesLongK(s, o, aligned_rows)) return *c;
  return ComputeBound(*rules->model, tiles, s, mn_major, aligned_rows);
}

}  // namespace

std::string SplitName(int split) {
  return split == 1 ? "whole tiles" : split == 0 ? "stream-K" : absl::StrCat("split-K ", split);
}

bool IsWideStageKernel(const std::string& kernel) {
  for (const std::string base : {kWide32Kernel, kWide64Kernel})
    if (kernel == base || kernel.rfind(base + ".", 0) == 0) return true;
  return false;
}

std::string GemmVariantName(const std::string& base, const GemmOptions& o) {
  if (o.in_type == "bf16" && o.out_type == "bf16" && o.epilogue.empty() && !o.any_m && !o.a_mn &&
      !o.b_mn && !o.c_row)
    return base;
  const bool mixed = !o.in_type_b.empty() && o.in_type_b != o.in_type;
  return absl::StrCat(base, ".", o.in_type, mixed ? "x" : "", mixed ? o.in_type_b : "", "-",
                      o.out_type, o.any_m ? ".any_m" : "", o.a_mn ? ".a_mn" : "",
                      o.b_mn ? ".b_mn" : "", o.c_row ? ".c_row" : "", o.scaling.empty() ? "" : ".",
                      o.scaling, o.epilogue.empty() ? "" : ".", o.epilogue);
}

namespace {

// GemmCandidates' entries in its order, each given to `visit` (kernel, split, why) until it
// returns true; whether one did. GemmCandidates lists them, IsGemmCandidate looks for one.
template <typename Visit>
bool VisitGemmCandidates(const GemmSize& s, int cc, Visit visit) {
  bool any = false;
  auto see = [&](const char* kernel, int split = 1, const std::string& why = "") {
    any = true;
    return visit(kernel, split, why);
  };
  if (s.k % 8 == 0) {
    if (const GemmRules* rules = RulesFor(cc, nullptr))
      for (const Candidate& t : CandidatesOf(*rules))
        for (int split : kSplits)
          if (Weighed(t, s, split) && (t.weights->max_n == 0 || s.n <= t.weights->max_n) &&
              see(t.kernel(), split))
            return true;
    if (cc == 90)
      if (std::optional<GemmChoice> pairs = FewTilesLongK(s, GemmOptions{}, s.k % 64 == 0))
        if (see(pairs->kernel.c_str(), pairs->split, pairs->why)) return true;
    if (cc >= 80 && s.m <= 64 && see(cc == 90 ? "gemm/bf16_skinny_sm90" : "gemm/bf16_skinny"))
      return true;
    if (cc == 90 && s.m <= 16)
      for (const char* k : {kMma16Kernel, kTma16Kernel, kTma8Kernel})
        if (see(k)) return true;
    if (cc == 90 && s.m >= 3 && s.m <= 64)
      for (const char* k : {kWide32Kernel, kWide64Kernel})
        if (see(k)) return true;
  }
  return !any && visit("gemm/bf16_strided", 1, "");
}

}  // namespace

std::vector<GemmChoice> GemmCandidates(const GemmSize& s, int compute_capability) {
  std::vector<GemmChoice> c;
  VisitGemmCandidates(s, compute_capability,
                      [&](const char* kernel, int split, const std::string& why) {
                        c.push_back({kernel, why, split});
                        return false;
                      });
  return c;
}

bool IsGemmCandidate(const GemmSize& s, int compute_capability, const std::string& kernel,
                     int split) {
  return VisitGemmCandidates(s, compute_capability, [&](const char* k, int x, const std::string&) {
    return kernel == k && split == x;
  });
}

GemmChoice ChooseGemm(const GemmSize& s, int compute_capability, const GemmOptions& options,
                      const GemmTuneCache* tuned) {
  GemmChoice c = ChooseByRules(s, compute_capability, options, RulesFor(compute_capability, tuned));
  // kiln tune times packed operands: where those pack rows off 16 bytes it timed the strided
  // kernel alone, which the tile kernels on aligned strides outrun. The given table's entry, else
  // the built-in one's.
  const GemmChoice* best = nullptr;
  const GemmChoice* given = nullptr;  // the caller's own table's entry, if it has one here
  if (TmaStrides(s, options.a_mn, options.b_mn) && s.k % 8 == 0) {
    if (tuned) best = given = tuned->Find(compute_capability, s);
    if (!best) best = GemmTuneCache::BuiltIn().Find(compute_capability, s);
  }
  // Its pick (a base name) stands only where that kernel can read the operands as given, and where
  // its tile record serves the options.
  if (best && !CanRead(best->kernel, options)) best = nullptr;
  // The pairs sharing B run a plain bf16 C alone (FewTilesLongK).
  if (best && best->kernel == kPairsSharingB &&
      GemmVariantName(kPairsSharingB, options) != kPairsSharingB)
    best = nullptr;
  if (const GemmRules* rules = best ? RulesFor(compute_capability, tuned) : nullptr)
    if (std::any_of(rules->tiles.begin(), rules->tiles.end(), [&](const TileWeights& w) {
          return w.kernel == best->kernel && !Serves(w, options);
        }))
      best = nullptr;
  if (best) {
    if (IsGemmCandidate(s, compute_capability, best->kernel, best->split))
      c = {best->kernel,
           absl::StrCat("the fastest kiln tune measured at this size (", SplitName(best->split),
                        ")"),
           best->split};
  }
  if (given && (c.kernel != given->kernel || c.split != given->split)) {
    // The kernel among this size's candidates at other splits: the entry's split is what is off.
    std::vector<std::string> splits;
    VisitGemmCandidates(s, compute_capability, [&](const char* k, int x, const std::string&) {
      if (given->kernel == k) splits.push_back(SplitName(x));
      return false;
    });
    c.why += absl::StrCat("; the tune cache's entry here (", given->kernel, ", ",
                          SplitName(given->split), ") is ",
                          splits.empty() || best == nullptr
                              ? "not one that can run this call"
                              : absl::StrCat("not among the splits kiln tune times for it here (",
                                             absl::StrJoin(splits, ", "), ")"),
                          ": the rule's choice instead");
  }
  GemmOptions o = options;
  // A tile kernel at an M its C map cannot take stores C from registers (f32 ones always do).
  const bool tiles = c.kernel.rfind("gemm/bf16_sm90", 0) == 0;
  o.any_m = tiles && s.m % 8 != 0 && options.out_type != "f32";
  if (o.any_m) c.why += "; C stored from registers (M is no multiple of 8: no TMA store)";
  // There an epilogue reading C_in or a residual loads them element by element, a few pairs at a
  // time, fewer in the 256-row tiles, whose accumulator fills the registers: whole tiles then take
  // the 128x128 tiles (docs/perf/2026-11-26-c-from-registers-with-c-in.md).
  if (o.any_m && EpilogueReadsMatrices(options.epilogue) && !best && c.split == 1 &&
      (c.kernel == "gemm/bf16_sm90" || c.kernel == "gemm/bf16_sm90_n160")) {
    c.kernel = "gemm/bf16_sm90_n128";
    c.why += "; 128x128 tiles instead, whose registers hold more of the epilogue's loads in flight";
  }
  // The reference reads through strides; the wide-stage kernels take a row-major B as b_mn.
  o.a_mn = tiles && options.a_mn, o.b_mn = (tiles || IsWideStageKernel(c.kernel)) && options.b_mn;
  c.kernel = GemmVariantName(c.kernel, o);
  return c;
}

std::optional<double> FittedTileSpeed(const GemmSize& s, int compute_capability,
                                      const std::string& kernel, double ms, double first_ms) {
  const GemmRules* rules = RulesFor(compute_capability, nullptr);
  if (!rules || !rules->model || rules->tiles.empty() || s.m <= rules->model->weight_bound_rows ||
      ms <= 0 || first_ms <= 0)
    return std::nullopt;
  const std::vector<Candidate> tiles = CandidatesOf(*rules);
  const bool aligned_rows = s.k % 64 == 0;  // kiln tune's packed K-major operands
  // Each tile's efficiency at speed 1 (its own figures otherwise).
  auto at_speed_1 = [&](const Candidate& c) {
    TileWeights one = *c.weights;
    one.speed = one.speed_unaligned = 1;
    return Efficiency(*rules->model, {c.tile, &one}, s, 1, aligned_rows);
  };
  const Candidate& first = tiles[0];
  for (const Candidate& c : tiles)
    if (kernel == c.kernel()) {
      const double first_speed =
          aligned_rows ? first.weights->speed : first.weights->speed_unaligned;
      return first_speed * (first_ms / ms) * (at_speed_1(first) / at_speed_1(c));
    }
  return std::nullopt;
}

}  // namespace kiln::rt
