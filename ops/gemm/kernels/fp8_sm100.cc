// The block-scaled FP8 GEMM on Blackwell (gemm/fp8_blockwise_sm100): DeepGEMM's recipe on tcgen05.
// C (row-major) = A (M x K, e4m3, scales per 1 x 128 of each row) x B (N x K, e4m3, scales per
// 128 x 128 block)^T, the partial sums of each 128 of K scaled and promoted into f32 registers.
//
// Algorithm (the tile, its loads and its store: sm100_fp8_tile.h): a CTA owns a 128x128 tile of C.
// Warp 0 streams A's and B's k-tiles (128 of K, one 128B swizzle span of 8-bit rows) into a ring of
// stages by TMA. Warp 1 issues each k-tile's four tcgen05.mma kind::f8f6f4 (M128 N128 K32) into one
// of two tensor-memory buffers, taken in turn, and commits twice: the stage is free, the buffer is
// full. Warps 2-5 (one row of the tile a thread, as tensor memory's lanes fall to warps) read each
// full buffer (tcgen05.ld), add it into their registers times the k-tile's two scales (A's row's,
// B's block's), and free the buffer for the k-tile after next. Unlike Hopper's FP8 wgmma, tcgen05
// accumulates in f32; the promotion is what block scales need, as their factor changes every 128 of
// K.
//
// Constraints: K a multiple of 16 (TMA's 16-byte strides); any M and N (TMA fills rows past them
// with zeros, C is stored masked from registers). Scales: A's at scale_a[row * sa_row + kb *
// sa_k], B's at scale_b[(n / 128) * sb_row + kb * sb_k], kb the k-tile.
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/sm100_fp8_tile.h"

namespace kiln::ops {
namespace {

constexpr int kStages = 4;
constexpr int kPromoters = 4;  // warps 2..5

absl::StatusOr<KernelDef> Build() {
  Kernel k("gemm/fp8_blockwise_sm100", sm100a(), {32 * (2 + kPromoters)});
  Sm100Fp8Tile t(k, kStages);
  constexpr int kBM = Sm100Fp8Tile::kBM, kBN = Sm100Fp8Tile::kBN, kBK = Sm100Fp8Tile::kBK;
  Value scale_a = k.PtrParam("scale_a", f32), scale_b = k.PtrParam("scale_b", f32);
  Value sa_row = k.I64Param("sa_row"), sa_k = k.I64Param("sa_k");
  Value sb_row = k.I64Param("sb_row"), sb_k = k.I64Param("sb_k");
  Barriers full = k.SmemBarriers(2), empty = k.SmemBarriers(2);  // the partial-sum buffers
  Tmem partial = k.TensorMemory(2 * kBN);
  const Value &warp = t.warp, &lane = t.lane, &k_tiles = t.k_tiles;
  t.Elected(0, [&] {
    t.ring.Init();
    for (int b = 0; b < 2; ++b) full[b].Init(1), empty[b].Init(kPromoters);
  });
  k.If(warp == 1, [&] { k.TmemAlloc(partial); });
  k.SyncThreads();

  t.LoadAll();
  t.Elected(1, [&] {  // the MMAs: k-tile kb into buffer kb % 2, once its k-tile two before is read
    Pipeline::Cursor at = t.ring.Start();
    k.For(0, k_tiles, 1, [&](Value kb) {
      Value buffer = kb % 2;
      k.If(kb >= 2, [&] { empty[buffer].Wait((kb / 2 - 1) % 2); });
      Value s = t.ring.Acquire(at);
      k.TcgenFenceAfterSync();
      for (int kk = 0; kk < kBK; kk += 32)
        k.TcgenMma(partial, {.m = kBM,
                             .n = kBN,
                             .d_column = buffer * kBN,
                             .a = t.sA.Stage(s),
                             .b = t.sB.Stage(s),
                             .k0 = kk,
                             .accumulate = kk != 0});
      k.TcgenCommit(t.ring.EmptyBarrier(s));  // the stage is free once these MMAs complete
      k.TcgenCommit(full[buffer]);
    });
  });
  k.If(warp >= 2, [&] {  // the promotion: row `row` of the tile, tensor memory lane `row`
    Value quarter = warp % 4 * 32, row = quarter + lane, m = t.m0 + row;
    Regs acc = k.Registers(Type::Of(f32), kBN);
    Value a_row = Min(m, t.g.M - 1).To(i64) * sa_row, b_block = (t.n0 / 128).To(i64) * sb_row;
    k.For(0, k_tiles, 1, [&](Value kb) {
      // Rows past M read the last row's scale: their results are not stored.
      Value kb64 = kb.To(i64);
      Value factor = LoadGlobal(scale_a + a_row + kb64 * sa_k, 1) *
                     LoadGlobal(scale_b + b_block + kb64 * sb_k, 1);
      Value buffer = kb % 2;
      full[buffer].Wait(kb / 2 % 2);
      k.TcgenFenceAfterSync();
      for (int c0 = 0; c0 < kBN; c0 += 16) {  // 16 columns a load: 32 spilled beside acc
        std::vector<Value> part = k.TcgenLoad(partial, quarter, buffer * kBN + c0, 16);
        for (int c = 0; c < 16; ++c) acc[c0 + c] = Fma(part[c], factor, acc[c0 + c].Load());
      }
      k.TcgenFenceBeforeSync();
      k.SyncWarp();  // the warp's reads done before its one arrival frees the buffer
      k.If(lane == 0, [&] { empty[buffer].Arrive(); });
    });
    std::vector<Value> row_values;
    for (int col = 0; col < kBN; ++col) row_values.push_back(acc[col].Load());
    t.StoreRow(m, 0, row_values);
  });
  k.SyncThreads();
  k.If(warp == 1, [&] { k.TmemFree(partial); });
  return k.Build();
}

}  // namespace

KILN_EXAMPLE_VARIANT(
    fp8_blockwise_sm100, "gemm/fp8_blockwise_sm100",
    "the block-scaled FP8 GEMM on Blackwell: tcgen05.mma kind::f8f6f4 into two tensor "
    "memory buffers in turn, each 128 of K promoted into f32 registers with A's 1x128 and "
    "B's 128x128 scales; C row-major bf16",
    [] { return Build(); });

}  // namespace kiln::ops
