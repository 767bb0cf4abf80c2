// The MXFP8 GEMM on Blackwell (gemm/mxfp8_sm100): C (row-major bf16) = A (M x K, e4m3) x B (N x K,
// e4m3)^T, each row of A and of B scaled per 32 of K by a UE8M0 factor (the OCP MX format) that
// the tensor cores apply themselves: tcgen05.mma kind::mxf8f6f4.block_scale, no promotion in
// registers (unlike gemm/fp8_blockwise_sm100, whose 128-wide f32 factors the MMA cannot take).
//
// Algorithm (the tile, its loads and its store: sm100_fp8_tile.h): a CTA owns a 128x128 tile of C.
// Warp 0 streams A's and B's k-tiles (128 of K) into a ring of stages by TMA. Warps 2-5 load each
// k-tile's scales (one 32-bit word a row: its four 32s of K) and store them with tcgen05.st into
// that stage's scale columns of tensor memory, each warp its own 32-lane quarter, so that every
// quarter holds all of them (the PTX ISA's duplicated layout): A's 128 rows in 4 columns, B's 128
// in the next 4. Warp 1 waits for a stage's data and scales and issues its four MMAs (K 32 each,
// scale byte kk / 32) into one f32 accumulator, then commits twice: the stage's smem is free, its
// scale columns are free. After the last k-tile warps 2-5 read the accumulator (tcgen05.ld) and
// store C masked.
//
// Constraints: K a multiple of 16 (TMA's strides); any M and N (TMA fills rows past them with
// zeros; C is stored masked). Scales: A's row m, k-tile kb at the 32-bit word
// scale_a[m * sa_row / 4 + kb] (bytes in K order), B's likewise with sb_row: rows of a multiple
// of 4 bytes, 4-byte aligned; the bytes past K pad the last word and must not be 0xff (NaN).
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/sm100_fp8_tile.h"

namespace kiln::ops {
namespace {

constexpr int kStages = 4;
constexpr int kScalers = 4;                   // warps 2..5: the scales, then the epilogue
constexpr int kScaleColumn = 128, kSlot = 8;  // a stage's A (4) and B (4) scale columns
constexpr int kTmemColumns = 256;             // the accumulator and 4 slots, a power of two
static_assert(kScaleColumn + kStages * kSlot <= kTmemColumns);

absl::StatusOr<KernelDef> Build() {
  Kernel k("gemm/mxfp8_sm100", sm100a(), {32 * (2 + kScalers)});
  Sm100Fp8Tile t(k, kStages);
  constexpr int kBM = Sm100Fp8Tile::kBM, kBN = Sm100Fp8Tile::kBN, kBK = Sm100Fp8Tile::kBK;
  Value scale_a = k.PtrParam("scale_a", i32), scale_b = k.PtrParam("scale_b", i32);
  Value sa_row = k.I64Param("sa_row"), sb_row = k.I64Param("sb_row");  // bytes
  // A stage's scale columns: stored (one arrival a scaling warp), read (the MMAs' commit).
  Barriers scaled = k.SmemBarriers(kStages), scales_free = k.SmemBarriers(kStages);
  Barriers done = k.SmemBarriers(1);
  Tmem tmem = k.TensorMemory(kTmemColumns);
  const Value &warp = t.warp, &lane = t.lane, &k_tiles = t.k_tiles;
  auto slot_column = [&](const Value& kb) { return kb % kStages * kSlot + kScaleColumn; };
  t.Elected(0, [&] {
    t.ring.Init();
    for (int s = 0; s < kStages; ++s) scaled[s].Init(kScalers), scales_free[s].Init(1);
    done[0].Init(1);
  });
  k.If(warp == 1, [&] { k.TmemAlloc(tmem); });
  k.SyncThreads();

  t.LoadAll();
  t.Elected(1, [&] {  // the MMAs
    Pipeline::Cursor at = t.ring.Start();
    k.For(0, k_tiles, 1, [&](Value kb) {
      scaled[kb % kStages].Wait(kb / kStages % 2);
      Value s = t.ring.Acquire(at), column = slot_column(kb);
      k.TcgenFenceAfterSync();
      for (int kk = 0; kk < kBK; kk += 32)
        k.TcgenMma(
            tmem,
            {.m = kBM,
             .n = kBN,
             .a = t.sA.Stage(s),
             .b = t.sB.Stage(s),
             .k0 = kk,
             .accumulate = kk == 0 ? Operand(kb > 0) : Operand(1),
             .scales = {
                 .tmem = &tmem, .a_column = column, .b_column = column + 4, .byte = kk / 32}});
      k.TcgenCommit(t.ring.EmptyBarrier(s));
      k.TcgenCommit(scales_free[kb % kStages]);
    });
    k.TcgenCommit(done[0]);
  });
  k.If(warp >= 2, [&] {
    Value quarter = warp % 4 * 32;
    // Row r of the tile, word kb of its scales (rows past M or N read the last row's: their
    // results are not stored).
    auto word = [&](const Value& base, const Value& row_bytes, const Value& row, const Value& last,
                    const Value& kb) {
      return LoadGlobal(base + Min(row, last).To(i64) * (row_bytes / 4) + kb.To(i64), 1);
    };
    k.For(0, k_tiles, 1, [&](Value kb) {  // the scales: lane i holds rows i, 32 + i, 64 + i, 96 + i
      k.If(kb >= kStages, [&] { scales_free[kb % kStages].Wait((kb / kStages - 1) % 2); });
      k.TcgenFenceAfterSync();  // the MMAs that read the slot before ordered before the stores
      std::vector<Value> words;
      for (int c = 0; c < 4; ++c)
        words.push_back(
            word(scale_a, sa_row, t.m0 + c * 32 + lane, t.g.M - 1, kb).Bitcast(Type::Of(f32)));
      for (int c = 0; c < 4; ++c)
        words.push_back(
            word(scale_b, sb_row, t.n0 + c * 32 + lane, t.g.N - 1, kb).Bitcast(Type::Of(f32)));
      k.TcgenStore(tmem, quarter, slot_column(kb), words);
      k.TcgenFenceBeforeSync();
      k.SyncWarp();  // the warp's stores done before its one arrival
      k.If(lane == 0, [&] { scaled[kb % kStages].Arrive(); });
    });
    done[0].Wait(0);  // the epilogue: row quarter + lane of the tile
    k.TcgenFenceAfterSync();
    for (int c0 = 0; c0 < kBN; c0 += 32)
      t.StoreRow(t.m0 + quarter + lane, c0, k.TcgenLoad(tmem, quarter, c0, 32));
  });
  k.SyncThreads();
  k.If(warp == 1, [&] { k.TmemFree(tmem); });
  return k.Build();
}

}  // namespace

KILN_EXAMPLE_VARIANT(
    mxfp8_sm100, "gemm/mxfp8_sm100",
    "the MXFP8 GEMM on Blackwell: tcgen05.mma kind::mxf8f6f4.block_scale, A's and B's UE8M0 "
    "scales per 1x32 stored into tensor memory each k-tile, one f32 accumulator; C row-major bf16",
    [] { return Build(); });

}  // namespace kiln::ops
