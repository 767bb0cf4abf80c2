#include "ops/attention/kernels/common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/warp.h"

namespace kiln::examples {
namespace {

rt::GridExpr Rule(Kernel& k, const std::string& text) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (!e.ok()) k.Fail(absl::StrCat("rule '", text, "': ", e.status().message()));
  return e.ok() ? *e : *rt::GridExpr::Parse("1");
}

// The slot an option sets: "d" for d64/d128/d256, "page" for pageN, "rescale" for lazy/eager,
// "index" for wgshfl/wgtid, "diagonal" for wgdiag/ctadiag, "wg", "bn", "st" for their tilings,
// else the option itself.
std::string SlotOf(absl::string_view part) {
  if (part == "d64" || part == "d128" || part == "d256") return "d";
  if (part == "lazy" || part == "eager") return "rescale";
  if (part == "wgshfl" || part == "wgtid") return "index";
  if (part == "wgdiag" || part == "ctadiag") return "diagonal";
  for (const char* prefix : {"page", "wg", "bn", "st", "kst"})
    if (absl::StartsWith(part, prefix) && part.size() > strlen(prefix) &&
        absl::ascii_isdigit(part[strlen(prefix)]))
      return prefix;
  return std::string(part);
}

absl::Status GivenOnce(std::vector<std::pair<std::string, std::string>>& given,
                       absl::string_view part) {
  const std::string slot = SlotOf(part);
  for (const auto& [s, first] : given)
    if (s == slot)
      return absl::InvalidArgumentError(
          first == part ? absl::StrCat("option '", part, "' given twice")
                        : absl::StrCat("options '", first, "' and '", part,
                                       "' both set one thing: give one of them"));
  given.emplace_back(slot, std::string(part));
  return absl::OkStatus();
}

}  // namespace

// The options that switch one flag of AttentionShape on.
constexpr std::pair<const char*, bool AttentionShape::*> kFlagOptions[] = {
    {"causal", &AttentionShape::causal},     {"persist", &AttentionShape::persistent},
    {"split", &AttentionShape::split},       {"lens", &AttentionShape::lens},
    {"varlen", &AttentionShape::varlen},     {"rows", &AttentionShape::rows},
    {"dqadd", &AttentionShape::dq_add},      {"cta2", &AttentionShape::two_ctas},
    {"gather", &AttentionShape::page_gather}};

absl::StatusOr<AttentionShape> ParseAttention(const std::string& options) {
  AttentionShape a;
  bool have_d = false;
  // Each option's slot once: a name that says two things of one slot (".lazy.eager", ".wg2.wg3",
  // ".causal.causal") is refused rather than read as its last.
  std::vector<std::pair<std::string, std::string>> given;  // slot, the option that set it
  for (absl::string_view part : absl::StrSplit(options, '.')) {
    if (absl::Status once = GivenOnce(given, part); !once.ok()) return once;
    const auto* flag = std::find_if(std::begin(kFlagOptions), std::end(kFlagOptions),
                                    [&](const auto& f) { return part == f.first; });
    if (flag != std::end(kFlagOptions)) {
      a.*(flag->second) = true;
    } else if (part == "d64" || part == "d128" || part == "d256") {
      a.d = part == "d64" ? 64 : part == "d128" ? 128 : 256;
      have_d = true;
    } else if (part == "f16") {
      a.in = f16;
    } else if (absl::StartsWith(part, "page") && absl::SimpleAtoi(part.substr(4), &a.page) &&
               a.page >= 16 && (a.page & (a.page - 1)) == 0) {
    } else if (part == "lazy" || part == "eager") {
      a.lazy_rescale = part == "lazy";
    } else if (part == "wgshfl" || part == "wgtid") {
      a.uniform_warpgroup = part == "wgshfl";
    } else if (part == "wgdiag" || part == "ctadiag") {
      a.own_diagonal = part == "wgdiag";
    } else if (absl::StartsWith(part, "kst") && absl::SimpleAtoi(part.substr(3), &a.k_stages) &&
               a.k_stages > 0) {
    } else if (int* field = absl::StartsWith(part, "wg")   ? &a.warpgroups
                            : absl::StartsWith(part, "bn") ? &a.block_n
                            : absl::StartsWith(part, "st") ? &a.stages
                                                           : nullptr;
               field && absl::SimpleAtoi(part.substr(2), field) && *field > 0) {
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option '", part,
          "' (takes d64, d128 or d256, then f16, causal, and a tiling: wgW consumer warpgroups, "
          "bnN keys per "
          "tile, stS ring stages, kstS K's ring deeper than V's, persist for a CTA per SM, lazy or "
          "eager rescaling, wgshfl or "
          "wgtid for the consumers' warpgroup index broadcast from lane 0 or not, wgdiag or "
          "ctadiag for causal GEMMs ending at each warpgroup's diagonal or the tile's, split for "
          "split-KV, lens for sequences of their own lengths, pageN for a paged cache of pages "
          "of N tokens, a power of two from 16 (gather: pages of 16 copied by threads, not TMA "
          "boxes), varlen for packed sequences, cta2 for two CTAs an "
          "SM, rows for the [B, S, H, D] layout, dqadd for the backward's dQ added by atomics)"));
    }
  }
  if (!have_d) return absl::InvalidArgumentError("names no head dimension (d64, d128 or d256)");
  return a;
}

RowEnd EndOfRow(Kernel& k, const Value& row_max, const Value& total) {
  Value none = total == 0.0, lost = none & (row_max != -INFINITY);
  Value nan = k.F32(NAN);
  return {Select(none, Select(lost, nan, k.F32(0)), Rcp(total)),
          Select(none, Select(lost, nan, k.F32(-INFINITY)), (row_max + Log2(total)) * M_LN2)};
}

void RefuseForwardOptions(Kernel& k, const AttentionShape& a, absl::string_view kernel, Loc loc) {
  if (a.lazy_rescale >= 0 || a.own_diagonal >= 0 || a.k_stages)
    k.Fail(absl::StrCat(
               kernel, " takes no lazy, eager, wgdiag, ctadiag or kst option (attention/hopper's)"),
           loc);
}

bool WarpUniformIndex(const AttentionShape& a) {
  return a.uniform_warpgroup >= 0 ? a.uniform_warpgroup == 1 : a.d != 256;
}

Value ConsumerWarpgroup(const AttentionShape& a, const Value& tid) {
  return WarpUniformIndex(a) ? WarpUniform(tid / 128) : tid / 128;
}

std::vector<std::string> BundledAttentionVariants() {
  std::vector<std::string> v;
  for (const char* d : {"d64", "d128", "d256"})
    for (const char* type : {"", ".f16"})
      for (const char* causal : {"", ".causal"}) v.push_back(absl::StrCat(d, type, causal));
  return v;
}

rt::TensorMapParam HeadMap(Kernel& k, const char* tensor, const std::string& rows,
                           const std::string& heads, int d, int box_rows, int spans, Scalar in) {
  rt::TensorMapParam t;
  t.tensor = tensor;
  t.dtype = in == f16 ? rt::TmaDtype::kF16 : rt::TmaDtype::kBF16;
  t.swizzle = rt::TmaSwizzle::k128B;
  t.dims = {Rule(k, "64"), Rule(k, rows), Rule(k, std::to_string(d / 64)), Rule(k, heads)};
  t.strides = {Rule(k, std::to_string(d * 2)), Rule(k, "128"),
               Rule(k, absl::StrCat(rows, "*", d * 2))};
  t.box = {64, static_cast<uint32_t>(box_rows), static_cast<uint32_t>(spans), 1};
  return t;
}

std::pair<Value, Value> PackedSequence(Kernel& k, const Value& cu_seqlens, const Value& T,
                                       const Value& b) {
  Value first = Min(k.Load(cu_seqlens + b.To(i64)), T);
  Value end = Min(Max(k.Load(cu_seqlens + (b + 1).To(i64)), first), T);
  return {first, end - first};
}

PackedTile PackedTileOfRank(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& b,
                            const Value& rank, int tile_rows) {
  auto [seq0, len] = PackedSequence(k, cu_seqlens, T, b);
  Value found = rank * tile_rows < len;  // (unsigned: a rank past the sequence's tiles is not)
  Value last = (len + (tile_rows - 1)) / tile_rows - 1;  // (found: len >= 1)
  Value zero = k.I32(0);
  return {found, b, seq0, Select(found, len, zero), Select(found, last - rank, zero)};
}

void MostPackedTiles(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& B,
                     int tile_rows, const SmemTile& slot) {
  k.If(k.ThreadIdx() < 32, [&] {
    Regs most = k.Registers(Type::Of(i32), 1);
    most[0] = k.I32(0);
    k.For(k.ThreadIdx(), B, 32, [&](Value b) {
      Value tiles = (PackedSequence(k, cu_seqlens, T, b).second + (tile_rows - 1)) / tile_rows;
      most[0] = Max(Value(most[0]), tiles);
    });
    Value all = WarpReduce(most[0], Reduce::kMax);
    k.If(k.ThreadIdx() == 0, [&] { k.Store(slot.At(0, 0), all); });
  });
}

void ZeroRowsFrom(Kernel& k, const SmemTile& stage, int rows, int spans, Scalar in,
                  const Value& valid, const Value& thread, int threads, const Operand& barrier,
                  int block) {
  if (!block) block = rows;
  k.If(valid < rows, [&] {
    Value zero = k.F32(0).To(in), zeros = k.Vector({zero, zero});
    const int words = spans * rows * 32;  // 4-byte words: 32 a row of 64 columns
    // Whole rows (the swizzle only permutes a row's chunks), split over the threads; stage row r
    // holds key r / (spans * block) * block + r % block. A run-time loop: unrolled, its addresses
    // were hoisted before the kernel's main loop and spilled there
    // (docs/perf/2026-12-03-rows-zeroed-in-a-loop.md).
    k.For(thread, words, threads, [&](Value w) {
      Value at = w / 32;
      Value row = block == rows ? at % rows : at / (spans * block) * block + at % block;
      k.If(row >= valid, [&] { k.Store(stage.At(at, w % 32 * 2), zeros); });
    });
    k.FenceProxyAsync();  // before the wgmmas read the stage
    k.NamedBarrier(barrier, threads);
  });
}

PackedTile FindPackedTile(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& B,
                          const Value& g, int tile_rows) {
  // {tiles before sequence b, the tile's sequence (B: none), its tile in it}
  Regs at = k.Registers(Type::Of(i32), 3);
  at[0] = k.I32(0), at[1] = B, at[2] = k.I32(0);
  k.For(0, B, 1, [&](Value b) {
    Value tiles = (PackedSequence(k, cu_seqlens, T, b).second + (tile_rows - 1)) / tile_rows;
    k.If((at[1] == B) & (g < at[0] + tiles), [&] {
      at[1] = b;
      at[2] = g - at[0];
    });
    at[0] = at[0] + tiles;
  });
  Value found = at[1] < B, b = Select(found, at[1], k.I32(0));
  auto [seq0, len] = PackedSequence(k, cu_seqlens, T, b);
  return {found, b, seq0, Select(found, len, k.I32(0)), Select(found, at[2], k.I32(0))};
}

// Rows of all heads side by side, [rows, heads, D] (packed sequences [T, Hq, D], a paged cache
// [slots, Hkv, D]), seen as {64 columns, rows, D/64 spans, heads}: boxes of `box_rows` rows and
// `spans` spans (rows past the tensor read as zeros).
rt::TensorMapParam PackedMap(Kernel& k, const char* tensor, const char* rows, const char* heads,
                             int d, int box_rows, int spans, Scalar in) {
  rt::TensorMapParam t = HeadMap(k, tensor, rows, heads, d, box_rows, spans, in);
  t.strides = {Rule(k, absl::StrCat(heads, "*", d * 2)), Rule(k, "128"),
               Rule(k, std::to_string(d * 2))};
  return t;
}

rt::TensorMapParam GroupedPagesMap(Kernel& k, const char* tensor, int d, int page, Scalar in) {
  rt::TensorMapParam t = HeadMap(k, tensor, "slots", "Hkv", d, 8, d / 64, in);
  t.dims = {Rule(k, "64"), Rule(k, "8"), Rule(k, std::to_string(d / 64)), Rule(k, "slots/8"),
            Rule(k, "Hkv")};
  t.strides = {Rule(k, absl::StrCat("Hkv*", d * 2)), Rule(k, "128"),
               Rule(k, absl::StrCat("Hkv*", d * 2 * 8)), Rule(k, std::to_string(d * 2))};
  t.box = {64, 8, static_cast<uint32_t>(d / 64), static_cast<uint32_t>(page / 8), 1};
  return t;
}

// The rows layout [B, rows, heads, D], a position's row of heads `stride` elements long, seen as
// {64 columns, rows, D/64 spans, heads, B}: boxes of `box_rows` rows and `spans` spans, clipped
// at each batch's last row.
rt::TensorMapParam RowsMap(Kernel& k, const char* tensor, const char* rows, const char* heads,
                           const char* stride, int d, int box_rows, int spans, Scalar in) {
  rt::TensorMapParam t = HeadMap(k, tensor, rows, heads, d, box_rows, spans, in);
  t.dims.push_back(Rule(k, "B"));
  t.strides = {Rule(k, absl::StrCat(stride, "*2")), Rule(k, "128"), Rule(k, std::to_string(d * 2)),
               Rule(k, absl::StrCat(rows, "*", stride, "*2"))};
  t.box.push_back(1);
  return t;
}

std::vector<Operand> AttentionParams::Box(const Value& row, int span, const Value& head,
                                          const Value& heads) const {
  if (rows) return {0, row, span, head % heads, head / heads};
  return {0, row, span, head};
}

AttentionParams DeclareAttentionParams(Kernel& k, const AttentionShape& a, int block_m, int block_n,
                                       int o_rows) {
  const int spans = a.d / 64;
  AttentionParams p;
  p.B = k.I32Param("B"), p.Hq = k.I32Param("Hq"), p.Hkv = k.I32Param("Hkv");
  p.S = k.I32Param("S"), p.Skv = k.I32Param("Skv");
  p.scale = k.F32Param("scale");
  if (a.split) p.P = k.I32Param("P");
  if (a.per_sequence()) p.seq_lens = k.PtrParam("seq_lens", i32);
  if (a.page) {
    p.block_table = k.PtrParam("block_table", i32);
    p.max_pages = k.I32Param("max_pages");
    k.I32Param("slots");  // pages * N: the cache's rows, the maps' bound
  }
  if (a.rows) {  // [B, S, H, D], each position's heads a row of its stride
    p.rows = true;
    k.I32Param("q_stride"), k.I32Param("kv_stride"), k.I32Param("o_stride");
    p.tq = k.TmaParam("tmQ", RowsMap(k, "Q", "S", "Hq", "q_stride", a.d, block_m, spans, a.in));
    p.tk = k.TmaParam("tmK", RowsMap(k, "K", "Skv", "Hkv", "kv_stride", a.d, block_n, spans, a.in));
    p.tv = k.TmaParam("tmV", RowsMap(k, "V", "Skv", "Hkv", "kv_stride", a.d, block_n, spans, a.in));
    p.to = k.TmaParam("tmO", RowsMap(k, "O", "S", "Hq", "o_stride", a.d, o_rows, 1, a.in));
    p.lse = k.PtrParam("lse", f32);
    return p;
  }
  if (a.varlen) {  // packed [T, heads, D]; O in boxes but a sequence's last, partial tile
    p.cu_seqlens = k.PtrParam("cu_seqlens", i32);
    p.T = k.I32Param("T");
    p.query_tiles = k.I32Param("tiles");  // the grid's bound on the sequences' query tiles
    p.tq = k.TmaParam("tmQ", PackedMap(k, "Q", "T", "Hq", a.d, block_m, spans, a.in));
    p.tk = k.TmaParam("tmK", PackedMap(k, "K", "T", "Hkv", a.d, block_n, spans, a.in));
    p.tv = k.TmaParam("tmV", PackedMap(k, "V", "T", "Hkv", a.d, block_n, spans, a.in));
    p.o_ptr = k.PtrParam("O", a.in);  // (the last, partial tile of a sequence, row by row)
    p.to = k.TmaParam("tmO", PackedMap(k, "O", "T", "Hq", a.d, o_rows, 1, a.in));
    p.lse = k.PtrParam("lse", f32);
    return p;
  }
  p.tq = k.TmaParam("tmQ", HeadMap(k, "Q", "S", "B*Hq", a.d, block_m, spans, a.in));
  if (a.page) {  // a box a page (or key tile) and 64 columns, the producer placing each; K's
    // and V's boxes bring a page's every span where pages are shorter than the key tile (S reads
    // K in 8-row groups: PagedKInGroups; P V reads V page by page: HopperAttention::v_block)
    const int rows = std::min(a.page, block_n);
    p.tk = k.TmaParam("tmK", PagedKInGroups(a, block_n)
                                 ? GroupedPagesMap(k, "K", a.d, rows, a.in)
                                 : PackedMap(k, "K", "slots", "Hkv", a.d, rows, 1, a.in));
    p.tv = k.TmaParam(
        "tmV", PackedMap(k, "V", "slots", "Hkv", a.d, rows, rows < block_n ? spans : 1, a.in));
    if (GathersPages(a, block_n)) p.k_ptr = k.PtrParam("K", a.in), p.v_ptr = k.PtrParam("V", a.in);
  } else {
    p.tk = k.TmaParam("tmK", HeadMap(k, "K", "Skv", "B*Hkv", a.d, block_n, spans, a.in));
    p.tv = k.TmaParam("tmV", HeadMap(k, "V", "Skv", "B*Hkv", a.d, block_n, spans, a.in));
  }
  p.to = k.TmaParam("tmO", HeadMap(k, "O", "S", a.split ? "B*Hq*P" : "B*Hq", a.d, o_rows, 1, a.in));
  p.lse = k.PtrParam("lse", f32);
  return p;
}

ExampleFamily AttentionFamilyOf(const std::string& base, const std::string& summary,
                                BuildAttentionFn build) {
  ExampleFamily f{
      base, summary,
      [build](const std::string& name, const std::string& options) -> absl::StatusOr<KernelDef> {
        absl::StatusOr<AttentionShape> a = ParseAttention(options);
        if (!a.ok())
          return absl::InvalidArgumentError(absl::StrCat(name, ": ", a.status().message()));
        return build(name, *a);
      },
      BundledAttentionVariants()};
  return f;
}

}  // namespace kiln::examples
