// What attention/hopper and attention/blackwell share: the variant a name asks for, and the
// tensor maps over [B * heads, rows, D] tensors that land Q, K, V and O as the MMAs read them.
//
// Tensors (rows of D contiguous): Q, O [B, Hq, S, D]; K, V [B, Hkv, Skv, D]; lse [B, Hq, S] f32
// (natural log). Grouped-query heads: head h reads KV head h / (Hq / Hkv). Causal masks are
// bottom-right aligned (query i sees keys j <= i + Skv - S, FlashAttention's convention; the same
// as top-left when S = Skv); a row that sees no key gets O = 0 and lse = -inf.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "examples/registry.h"
#include "kiln/kernel.h"

namespace kiln::examples {

struct AttentionShape {
  int d = 128;
  bool causal = false;
  Scalar in = bf16;
  // Tiling, 0 for the kernel's default: consumer warpgroups (64 query rows each), keys per tile,
  // and the depth of the K and V rings.
  int warpgroups = 0, block_n = 0, stages = 0;
  // ("kstN") K's ring deeper than V's, 0 for the same depth: S = Q K^T waits on K first, and a
  // key tile's K boxes must land a step ahead of it. Hopper only.
  int k_stages = 0;
  // ("cta2") Two CTAs an SM: registers for two (MinBlocksPerSm); the tiling's shared memory must
  // fit twice. Hopper only; no plan picks it (docs/perf/2026-11-28-decode-split-kv.md).
  bool two_ctas = false;
  // A CTA per query tile, or ("persist") a CTA per SM taking query tiles from a counter (the next
  // tile's loads under this one's epilogue). Hopper only.
  bool persistent = false;
  // The online softmax's O rescale: every step (0, "eager"), or only where a row's maximum has
  // grown by more than 2^8 since its reference was set (1, "lazy"); -1 for the kernel's default.
  // Hopper only.
  int lazy_rescale = -1;
  // The consumers' warpgroup index: broadcast from lane 0 (1, "wgshfl"), which ptxas then knows
  // warp-uniform, or the thread index over 128 (0, "wgtid"); -1 for the kernel's default.
  // Hopper only.
  int uniform_warpgroup = -1;
  // Causally, with several consumer warpgroups (no split): each warpgroup's GEMMs end at
  // its own rows' diagonal (1, "wgdiag"), taking its turns and freeing the stages of the key tiles
  // past it without a wgmma, or at the CTA tile's last row's (0, "ctadiag"); -1 for the kernel's
  // default. Hopper only.
  int own_diagonal = -1;
  // ("split") The keys of each query tile split in P parts (the parameter P), a CTA each: a part
  // writes its rows' O (normalized by its own sum) and lse as heads p * B * Hq + head of O and
  // lse, which attention/combine merges (split-KV, FlashDecoding's). P = 1 writes O itself.
  // A CTA per tile (Hopper and Blackwell).
  bool split = false;
  // ("lens") Sequences of their own lengths: the parameter seq_lens (i32 [B]) gives each its keys,
  // the first seq_lens[b] (at most Skv) of its rows of K and V. ("pageN", lens implied) K and V in
  // a paged cache [pages, N, Hkv, D] (vLLM's layout), sequence b's key j in page
  // block_table[b * max_pages + j / N] (i32), row j % N. Both: a CTA per tile (decode: split,
  // without a mask), each sequence's causal diagonal its own: query i sees keys
  // j <= i + seq_lens[b] - S.
  bool lens = false;
  int page = 0;
  // ("gather") Pages of 16 copied by the producer warpgroup's threads with cp.async instead of a
  // TMA box a page (GathersPages). An option the plan does not pick: the boxes stay its choice
  // (docs/perf/2026-11-28-decode-split-kv.md, "Pages of 16 gathered by threads").
  bool page_gather = false;
  bool per_sequence() const { return lens || page; }
  // ("varlen") Packed sequences of their own lengths, self-attention: Q and O [T, Hq, D], K and V
  // [T, Hkv, D] (T tokens in all, no padding), sequence b in rows cu_seqlens[b] .. cu_seqlens[b+1]
  // (the parameter cu_seqlens, i32 [B + 1]), its causal mask its own; lse [Hq, T]. A CTA per tile,
  // the tiles of all sequences numbered in order (the parameter tiles bounds them).
  bool varlen = false;
  // ("rows") The rows layout: Q and O [B, S, Hq, D], K and V [B, Skv, Hkv, D] (a position's heads
  // side by side, torch's [B, S, H, D] and FlashAttention's), a position's row of heads
  // q_stride, kv_stride and o_stride elements after the previous one (the I32 parameters; more
  // than H * D where Q, K and V are views of one fused projection's output). A CTA per tile or
  // persist; no split, lens, pages or varlen. Hopper only.
  bool rows = false;
  // ("dqadd", attention/hopper_dkdv only) dQ too, each key tile's part added in f32 into the
  // parameter dQacc by atomics (hopper_bwd_parts.h).
  bool dq_add = false;
};

// The forward's own options (lazy/eager, wgdiag/ctadiag) refused by another attention kernel:
// a name that says them would build a kernel that ignores them.
void RefuseForwardOptions(Kernel& k, const AttentionShape& a, absl::string_view kernel,
                          Loc loc = Loc::current());

// Variant names: d64, d128 or d256, then optionally f16 and causal ("d128.f16.causal"), and a
// tiling other than the default (".wg3.bn176.st3", ".persist"), and the rescale (".lazy",
// ".eager"), the warpgroup index (".wgshfl", ".wgtid"), causal warpgroups' ends (".wgdiag",
// ".ctadiag"), "split" (split-KV) and "rows" (the [B, S, H, D] layout).
absl::StatusOr<AttentionShape> ParseAttention(const std::string& options);

// The variants the build bundles: every head dimension, type and mask.
std::vector<std::string> BundledAttentionVariants();

// A row's end from its running maximum (scaled, log2 units) and its sum of weights: 1 / sum and
// lse (natural log). A row that saw no key (maximum -inf) has O = 0 and lse -inf. A row that saw
// keys but whose every weight underflowed (scores times the scale past f32's precision, where
// the exponent's argument is rounded before it is taken) is NaN in both: it must not look masked.
struct RowEnd {
  Value inv, lse;
};
RowEnd EndOfRow(Kernel& k, const Value& row_max, const Value& total);

// A Hopper consumer thread's warpgroup (`tid` counted from its role's first thread): lane 0's
// (WarpUniform) as `a.uniform_warpgroup` says, by default at D = 64 and 128; else the thread
// index's (docs/perf/2026-12-01-warp-uniform-warpgroup-index.md).
Value ConsumerWarpgroup(const AttentionShape& a, const Value& tid);
bool WarpUniformIndex(const AttentionShape& a);  // ConsumerWarpgroup's choice

// A rank-4 map over [heads, rows, D] seen as {64 columns, rows, D/64 spans, heads}: one box of
// `box_rows` x `spans` lands as `spans` 128B-swizzled blocks of box_rows x 64, one per 64
// columns of D (the K-major layout S = Q K^T reads, and the MN-major one P V reads V in); rows
// past `rows` read as zeros and are not written.
rt::TensorMapParam HeadMap(Kernel& k, const char* tensor, const std::string& rows,
                           const std::string& heads, int d, int box_rows, int spans, Scalar in);

// Tile `g` of B packed sequences (numbered sequence by sequence, ceil(length / tile_rows) tiles
// each, from the offsets cu_seqlens [B + 1] into T rows): its sequence b, the sequence's first row
// and length, and the tile's index in it. Unsigned throughout, every row clamped to T (decreasing
// or negative offsets give empty sequences, one past T a shorter one): no access outside the
// tensors and no walk longer than T. A tile past them all is not `found`: b, len and tile 0.
struct PackedTile {
  Value found, b, seq0, len, tile;
};
PackedTile FindPackedTile(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& B,
                          const Value& g, int tile_rows);
// Sequence b's first row and length, clamped as FindPackedTile clamps them.
std::pair<Value, Value> PackedSequence(Kernel& k, const Value& cu_seqlens, const Value& T,
                                       const Value& b);
// Rank `rank` of sequence b (b < B) of the same tiles numbered by rank, the longest of every
// sequence first: rank 0 is the sequence's last tile (which sees the most keys under a causal
// mask), not `found` past the sequence's tiles. The ranks go up to MostPackedTiles.
PackedTile PackedTileOfRank(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& b,
                            const Value& rank, int tile_rows);
// The most tiles of any of the B sequences, by warp 0 into `slot` (an i32 of shared memory): read
// it after the block's next barrier.
void MostPackedTiles(Kernel& k, const Value& cu_seqlens, const Value& T, const Value& B,
                     int tile_rows, const SmemTile& slot);

// Rows from `valid` on of a 128B-swizzled stage of 16-bit (`in`) `rows` x 64 columns a span,
// `spans` spans: another sequence's rows in a packed tile, or a cache's past its length. A masked P
// or dS of 0 times their inf or NaN in a GEMM would be NaN, so `threads` threads (`thread` each
// one's index among them: every thread whose wgmmas read the stage) zero them between them, fence
// them for the async proxy and meet at named barrier `barrier` before those wgmmas. Nothing where
// `valid` covers the stage. With `block` (a divisor of `rows`), the stage holds its rows in blocks
// of `block`, each block's spans one after the other (HopperAttention::v_block).
void ZeroRowsFrom(Kernel& k, const SmemTile& stage, int rows, int spans, Scalar in,
                  const Value& valid, const Value& thread, int threads, const Operand& barrier,
                  int block = 0);

// A paged cache's K, [slots, Hkv, D], seen as {64 columns, 8 rows, D/64 spans, slots/8 groups,
// Hkv}: a box of a page's groups and every span lands [group][span][8 rows][64]
// (PagedKInGroups).
rt::TensorMapParam GroupedPagesMap(Kernel& k, const char* tensor, int d, int page, Scalar in);

// Rows of all heads side by side, [rows, heads, D] (packed sequences [T, Hq, D]), seen as HeadMap
// sees its tensor: boxes of `box_rows` rows and `spans` spans (rows past the tensor read as zeros).
rt::TensorMapParam PackedMap(Kernel& k, const char* tensor, const char* rows, const char* heads,
                             int d, int box_rows, int spans, Scalar in);

// The parameters of every attention kernel (the entry point passes them by name): the sizes, the
// softmax scale, maps that land Q in boxes of `block_m` rows, K and V of `block_n` rows (all D
// columns), O's map (boxes of `o_rows` rows by 64 columns) and lse.
struct AttentionParams {
  Value B, Hq, Hkv, S, Skv, scale, lse;
  Value P;                                 // split: the parts the keys split in
  Value seq_lens, block_table, max_pages;  // lens, page (AttentionShape)
  Value cu_seqlens, T, o_ptr;  // varlen: a sequence's last, partial tile of O goes through o_ptr
  Value query_tiles;           // varlen: a bound on the sequences' query tiles
  Value k_ptr, v_ptr;          // the paged cache's K and V, where GathersPages
  TensorMap tq, tk, tv, to;
  // The coordinates of a box of `map` (tq, tk, tv or to): its first row, its 64-column span of D
  // and head `head` of `heads` in all (b * Hq + h for Q and O, b * Hkv + h for K and V), as the
  // layout places them: {0, row, span, head}, or in rows {0, row, span, h, b}.
  std::vector<Operand> Box(const Value& row, int span, const Value& head, const Value& heads) const;
  bool rows = false;
};
AttentionParams DeclareAttentionParams(Kernel& k, const AttentionShape& a, int block_m, int block_n,
                                       int o_rows);
// "gather" over pages of 16 tokens, fewer than a key tile: the producer's threads copy the rows
// by cp.async rather than one TMA box a page (hopper_producer.cc), so K and V come as pointers
// as well.
inline bool GathersPages(const AttentionShape& a, int block_n) {
  return a.page_gather && a.page == 16 && a.page < block_n;
}
// K's stage of a paged key tile in 8-row groups, each group's spans one after the other
// ([group][span][8 rows][64]), where TMA boxes bring pages shorter than the key tile and D has
// more than one span: one box then brings a page's every span, and S = Q K^T reads the groups
// 8 * spans rows apart (WgmmaTile::group_rows; docs/perf/2026-11-28-paged-prefill.md, "K a box
// a page").
inline bool PagedKInGroups(const AttentionShape& a, int block_n) {
  return a.page && a.page < block_n && a.d > 64 && !GathersPages(a, block_n);
}

// A family of attention kernels named "<base>.<options>" (ParseAttention), every head dimension,
// type and mask bundled.
using BuildAttentionFn = absl::StatusOr<KernelDef> (*)(const std::string& name, AttentionShape a);
ExampleFamily AttentionFamilyOf(const std::string& base, const std::string& summary,
                                BuildAttentionFn build);

}  // namespace kiln::examples
