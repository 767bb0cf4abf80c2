// GEMM operands for example kernels: A (MxK), B (KxN), C (MxN) as global tensors indexed
// (row, col) whatever their storage order, plus the sizes M, N, K.
#pragma once

#include <functional>
#include <optional>

#include "examples/gemm_spec.h"
#include "examples/registry.h"
#include "kiln/epilogue.h"
#include "kiln/kernel.h"
#include "kiln/pipeline.h"

namespace kiln::examples {

struct GemmOperands {
  GlobalTensor A, B, C;
  Value M, N, K;
};

// Records what GEMM the kernel computes (the manifest's "gemm" attribute, which the harness
// reads) and requires M, N and K to be multiples of the tile at every launch.
void DescribeGemm(Kernel& k, GemmSpec spec, Loc loc = Loc::current());

// Declares the parameters A, B, C, M, N, K (in that order) and describes the GEMM.
GemmOperands DeclareGemm(Kernel& k, const GemmSpec& spec, Loc loc = Loc::current());

// A GEMM that indexes A, B and C through element strides given at launch (the reference, the
// strided kernel): declares A, B, C (in `in`, `in`, the epilogue's output type), M, N, K, the
// strides sA0 sA1 sB0 sB1 sC0 sC1 of (row, col) of each, then the epilogue's parameters.
struct StridedGemm {
  Value M, N, K;
  GlobalTensor a, b, c;  // (m, k), (k, n), (m, n)
  Epilogue epilogue;
};
StridedGemm DeclareStridedGemm(Kernel& k, Scalar in, const EpilogueSpec& epi,
                               Loc loc = Loc::current());

// ---- mma.sync kernels (Ampere series, cuda_hgemm, blackwell/v0)

// Element (row, col) of some matrix, as a pointer.
using ElementAt = std::function<Value(const Value& row, const Value& col)>;
// A row-major view of A's rows and a K-major view of B's columns (B stored column-major).
ElementAt RowsOf(const GlobalTensor& a);     // (m, k) -> &A[m][k]
ElementAt ColumnsOf(const GlobalTensor& b);  // (n, k) -> &B[k][n]

// Fills `dst` (rows x cols) from src(r, c), 16 bytes per thread per step over `threads` threads,
// chunks in row order: plain 16-byte loads and stores, or cp.async (into the current group) when
// `async`. Rows must be whole 16-byte chunks (else a build error); when the chunks do not fill the
// last step, the threads past them skip it.
// `how` deals the chunks out in warp strips instead (warp w takes the w-th contiguous share, 32
// chunks a step: rows w * rows/warps + step * 32/chunks_per_row + lane / chunks_per_row, as
// cuda_hgemm copies) and asks L2 to prefetch around each cp.async source.
struct Chunking {
  bool warp_strips = false;
  int l2_prefetch = 0;  // bytes: 0, 64, 128, 256
};
void CopyTile(Kernel& k, const SmemTile& dst, const ElementAt& src, const Value& tid, int threads,
              bool async, Chunking how = {});
// The way back: writes the smem tile `src` to dst(r, c), chunked as CopyTile does.
void StoreTile(Kernel& k, const SmemTile& src, const ElementAt& dst, const Value& tid, int threads,
               Chunking how = {});

// One 16-wide k step (k columns kk..kk+15) of an mma.sync warp tile from [row][k] smem tiles:
// B's fragments (ldmatrix .x2) for every n, then for each m A's (.x4) and its mmas into
// acc[(m * mmas_n + n) * 4 + i] (f32 accumulate).
void MmaWarpStep(Kernel& k, Scalar ab, const SmemTile& As, const SmemTile& Bs,
                 const Kernel::WarpTile& w, const Value& lane, int kk, const Regs& acc);

// Stores an mma.sync warp tile's f32 accumulator, acc[(m * mmas_n + n) * 4 + i], as bf16 pairs:
// lane l holds rows l/4 and l/4 + 8 and columns (l%4)*2 + {0,1} of each 16x8 tile; dst gets the
// row and column within the warp tile.
void StoreAccumulator(Kernel& k, const Regs& acc, int mmas_m, int mmas_n, const ElementAt& dst);

// Blackwell epilogue for one warp: TMEM lanes lane0..lane0+31 (the warp's quarter) x columns
// col0..col0+n, read `per_load` columns at a time (tcgen05.ld 32x32b), rounded to bf16 and stored
// 16 bytes at a time to dst(lane0 + lane, column - col0); with `no_l1`, without allocating in L1.
void StoreTmemRows(Kernel& k, const Tmem& acc, const Value& lane0, const Value& col0, int n,
                   int per_load, const ElementAt& dst, bool no_l1 = false);

// A host-built tile schedule (Kernel::ScheduleTableParam, a [cluster][slot] table of m_index << 16
// | n_index entries, -1 after the last): copies this cluster's row into smem (threads below
// `slots`; the caller synchronises before walking) and returns the walk over it, which calls
// body(m_index, n_index) for each of the cluster's tiles in order.
// The schedule table of a GEMM's C tiles of tile_m x tile_n: (M/tile_m) x (N/tile_n) tiles.
ScheduleTable GemmTiles(int tile_m, int tile_n, int groups, int slots);
using TileIndexBody = std::function<void(const Value& m_index, const Value& n_index)>;
std::function<void(const TileIndexBody&)> ScheduledTiles(Kernel& k, const Value& table, int slots);

// The TMA series' operands (fast.cu, seed 002): A (MxK) and B (as NxK) both K-major, read through
// TMA tensor maps (rank 3: one box covers a whole k-tile of bk); C column-major, written through
// a pointer or (c_box_rows > 0) a tensor map, or row-major (c_row_major).
struct TmaGemmShape {
  int bm, bn, bk;
  int rank = 2;           // 2: {K, rows}; 3: {64, rows, K/64}; 5: rank 3 padded with unit dims
  bool by_value = false;  // __grid_constant__ maps, else pointers to device copies
  int c_box_rows = 0;     // C map box: {64 + c_pad, c_box_rows, c_box_cols / 64}
  int c_box_cols = 64, c_pad = 0;
  bool c_swizzle = false;          // C's box read from a 128B-swizzled smem tile (then c_pad = 0)
  int divide_m = 0, divide_n = 0;  // what M and N must divide by (default bm, bn): schedules
  // C row-major instead of column-major: through a pointer (seed 002), or in a ragged kernel
  // through a map of {N, M} whose box is c_box_rows columns (at most 64: one swizzle span) by 64
  // rows of M.
  bool c_row_major = false;
  int b_box_rows = 0;  // B's box rows when not bn (a CTA pair loads half of B each)
  // Ragged, K-major A: a second map of A in boxes of this many rows, for the tiles with at most
  // half their rows before M (TmaGemmOperands::ACopies); 0: none.
  int a_edge_rows = 0;
  bool interleaved = false;  // A/B unswizzled in 8-column slabs (SmemInterleaved) instead of 128B
  // Any M, N, K (M and K multiples of 8: TMA's 16-byte strides of A, B and column-major C):
  // rank-2 maps, whose bounds zero-fill what loads read past M, N or K and clip what stores
  // write past M or N. Schedules count tiles rounding up.
  bool ragged = false;
  // Element types and the fused epilogue's terms (the GEMM description; ragged kernels only). An
  // f32 C goes through a pointer (c_box_rows 0), column-major.
  std::string in_type = "bf16", out_type = "bf16", epilogue;
  // MN-major operands (ragged kernels): A column-major (M x K, M contiguous), B row-major (K x N,
  // N contiguous), each read as 64-wide blocks of its rows by bk of K (one 2D box each), which
  // the wgmma takes transposed (Kernel::WgmmaTile).
  bool a_mn = false, b_mn = false;
  // A grouped GEMM's (ops/gemm/kernels/tile_groups.cc): A holds the groups' M-row matrices one
  // after another ("M*groups" rows, the integer parameter "groups" declared by the caller), and the
  // kernel is described as no plain GEMM (its manifest has no "gemm" attribute).
  bool grouped_a = false;
};
struct TmaGemmOperands {
  TensorMap A, B, C;
  TensorMap A_edge;  // A in boxes of fewer rows (TmaGemmShape::a_edge_rows), if declared
  // A in boxes of half the tile's rows, declared with A_edge where half the tile holds more than
  // two edge boxes (128-row tiles).
  TensorMap A_half;
  bool a_edge = false;
  GlobalTensor Cptr;  // when C has no map
  Value M, N, K;
  int rank;
  bool a_mn = false, b_mn = false;
  int c_rank = 3;      // C's map: {64, N, M/64}, or (ragged) {M, N}
  bool c_row = false;  // C row-major: a ragged kernel's map is {N, M}
  int slab = 64;       // columns per box slice along K: 64 (128B swizzle) or 8 (interleaved)
  // TMA box coordinates of the slab-wide K slice k0 of rows row0.. (innermost first).
  std::vector<Operand> Box(const Value& row0, const Value& k0) const;
  // C map box coordinates of rows m0.. (M) and columns n0.. (N).
  std::vector<Operand> CBox(const Value& m0, const Value& n0) const;
  // The TMA copies that fill one stage of `tile` (`rows` of M or N from row0, k-tile k0 of bk):
  // one box of the whole tile K-major, or a box per 64-wide block MN-major.
  std::vector<TmaCopy> StageCopies(const TensorMap& map, bool mn_major, const SmemTile& tile,
                                   const Value& row0, const Value& k0, int bk) const;
  // A's copies for one stage of `tile`: StageCopies, except that with A_edge a tile with at most
  // half its rows before M loads only its boxes of A_edge's rows that start before M (TMA fills
  // rows past M with zeros more slowly than it reads rows: docs/perf/2026-11-25-a-rows-past-m.md),
  // and with A_half one box of half the tile where more than two of those lie before M (each box
  // issued costs too). The rows left unloaded feed only rows of C that are not stored.
  std::vector<TmaCopy> ACopies(const SmemTile& tile, const Value& row0, const Value& k0,
                               int bk) const;
  // prefetch.tensormap of every map declared (A, B, A_edge, A_half, C): for one thread at the
  // kernel's start, so that the first copies through them do not wait for their descriptors.
  void PrefetchDescriptors(Kernel& k) const;
};
// The swizzle whose span is a row of `bytes` (32, 64 or 128): a row-major C's buffer and its map
// (the TMA swizzle codes are the same numbers).
Swizzle SwizzleOfRow(int bytes);
// Declares M, N, K, then C, A, B (in that order) and the GEMM spec (A row, B col, C col).
TmaGemmOperands DeclareTmaGemm(Kernel& k, const TmaGemmShape& shape, Loc loc = Loc::current());

// The options of a GEMM entry-point kernel's variants (ExampleFamily): "<in>-<out>" element types
// (bf16, f16, e4m3 or e5m2 in, "<a>x<b>" for 8-bit A and B of two types; bf16, f16 or f32 out),
// then "any_m" for a tile kernel that stores C from registers so that M need not be a multiple of 8
// (f32 outputs always are), then "a_mn" and "b_mn" for MN-major A (column-major) and B (row-major),
// then the epilogue's terms,
// '.'-separated ("f16-f32.bias_col.gelu", "bf16-bf16.any_m.b_mn.relu"). An error names what it
// does not take.
// How an 8-bit GEMM's product is scaled back (the names of torch's scaled-mm scaling types):
// tensorwise (one f32 for A, one for B), rowwise (one per row of A, one per column of B), blockwise
// (A per 1x128 of its rows by K, B per 128x128) and blockwise_t (A per 128x128, B per 1x128: the
// problem swapped for a row-major C). Blockwise scales apply to the wgmma's partial sums every
// 128 of K, where they are promoted into the f32 accumulator (the FP8 tensor core keeps fewer
// bits); the others are applied once, after K.
enum class Fp8Scaling { kNone, kTensor, kRow, kBlock, kBlockT };
const char* Fp8ScalingName(Fp8Scaling s);  // "tensorwise", ... ("" for kNone)

struct GemmVariant {
  Scalar in = bf16;  // A's and B's: bf16, f16, or e4m3/e5m2 with a scaling
  bool any_m = false;
  bool a_mn = false, b_mn = false;  // "a_mn", "b_mn": A column-major, B row-major (tile kernels)
  bool c_row = false;  // "c_row": C (and C_in, residual) row-major (the skinny and tile kernels)
  Fp8Scaling scaling = Fp8Scaling::kNone;  // after the flags; 8-bit inputs only, and required
  EpilogueSpec epilogue;
  // B's type where it differs from A's ("<a>x<b>-<out>": e5m2xe4m3, e4m3xe5m2; 8-bit only).
  std::optional<Scalar> in_b;
  Scalar b_type() const { return in_b.value_or(in); }
};
absl::StatusOr<GemmVariant> ParseGemmVariant(const std::string& options);

std::string ScalarName(Scalar s);  // "bf16", "f16", "f32", "e4m3", "e5m2"
// The family (ExampleFamily) of an entry-point kernel: `build` gets each member's parsed options;
// "any_m" is an option of the tile kernels (`tile`) alone, and of their 16-bit outputs (f32 ones
// store C from registers anyway); "c_row" of the tile kernels and of those that store C either
// way (`c_row`). Members' bundled options: kBundledTileVariants for tiles, kBundledRowCVariants for
// `c_row`, else kBundledGemmVariants.
using GemmVariantBuild =
    std::function<absl::StatusOr<KernelDef>(const std::string& name, const GemmVariant& v)>;
// `b_mn`: a kernel that is no tile kernel but reads a row-major B (bundles kBundledWideVariants).
ExampleFamily GemmFamily(const std::string& base, const std::string& summary, bool tile,
                         GemmVariantBuild build, bool c_row = false, bool b_mn = false);

// Runs body(m0, n0) for each output tile a CTA owns, in the kernel's schedule.
using TileBody = std::function<void(Value m0, Value n0)>;
using ForEachTile = std::function<void(const TileBody&)>;
// The same for each share of a tile: rows m0.., columns n0.., K from k_begin to k_end (elements).
using SpanBody = std::function<void(Value m0, Value n0, Value k_begin, Value k_end)>;
using ForEachSpan = std::function<void(const SpanBody&)>;

// The persistent walk of fast.cu kernels 6-10 over `count` tiles, tiles_n to a row: numbered
// super-tile by super-tile (tm x tn tiles each, row-major inside and out), this CTA (or cluster)
// taking every `groups`-th from `first`; body(m index, n index).
void SuperTiles(Kernel& k, const Value& first, int groups, const Value& count, const Value& tiles_n,
                int tm, int tn, const TileBody& body);

// The producer warpgroup of the clustered kernels (fast.cu kernels 8-12, hopper/k13, k14): its
// first thread streams each tile's k-tiles into the ring, A for this CTA, B multicast to both
// CTAs of the pair by rank 0 (with `cluster` 1, both plain loads); the other threads drop their
// registers to 24 and idle.
void MulticastProducer(Kernel& k, Pipeline& ring, const TmaGemmOperands& g, const SmemTile& sA,
                       const SmemTile& sB, int bk, const Value& rank,
                       const ForEachTile& for_each_tile, int cluster = 2);
// The same over shares of tiles (split-K, stream-K): each span's k-tiles alone. With neither
// condition valid, B's copies carry `policy` (Kernel::L2Policy) where it is valid; else B's carry
// it where `b_policy_if` holds, and otherwise A's where `a_policy_if` holds (no policy elsewhere).
// With `wait_prior_grids` (a kernel launched while the one before it finishes), the producer
// waits for the grids before it (Kernel::WaitForPriorGrids) before its first copy, and once it
// has asked for its last lets the next kernel launch (Kernel::LaunchDependents).
void MulticastProducer(Kernel& k, Pipeline& ring, const TmaGemmOperands& g, const SmemTile& sA,
                       const SmemTile& sB, int bk, const Value& rank,
                       const ForEachSpan& for_each_span, int cluster, const Value& policy = {},
                       const Value& b_policy_if = {}, const Value& a_policy_if = {},
                       bool wait_prior_grids = false);

// A consumer warpgroup's packed 16-bit tile out through its swizzled C buffer (hopper/k13's
// epilogue, which the entry point's tile kernels share): for each consumer x (the thread's own,
// `wg`), per piece of `piece_n` columns, stmatrix into buffers[x] once the TMA store before has
// read it (transposed into an [n][m] buffer for a column-major C, as it is into an [m][n] one for
// a row-major C: g.c_row), then one TMA store of the piece at (m0 + 64 * x, n0 + piece * piece_n),
// where m0 and n0 are `at`[1] and [2]. `packed` holds the pairs in the wgmma accumulator's order;
// `c` is the thread in its warpgroup, `lane` in its warp; named barrier wg + 2 meets the warpgroup.
void WritePackedTile(Kernel& k, const TmaGemmOperands& g, const SmemTile* buffers, int consumers,
                     int bn, int piece_n, const Value& wg, const Value& c, const Value& lane,
                     const Regs& packed, const Regs& at);

// One tile's mainloop for a consumer warpgroup (fast.cu kernels 9-12): the first k-tile's first
// wgmma overwrites the accumulator (scale-d 0, so it needs no zeroing), and each stage is released
// once its wgmmas have retired. `thread` is the thread's index in its warpgroup.
void ConsumeTile(Kernel& k, Pipeline& ring, Pipeline::Cursor& at, const Value& thread,
                 WgmmaAccumulator& acc, const SmemTile& sA, const SmemTile& sB, const Value& row0,
                 int bk, const Value& K);

}  // namespace kiln::examples
