// Seed 000: a persistent B200 kernel, one CTA per SM, 256 threads. Warpgroup 1's first thread
// loads 128x64 A and 256x64 B tiles into a 4-stage ring (48 KB stages, 3D 128B TMA); thread 0
// issues the 4 tcgen05.mma (M128 N256 K16) of each stage into 256 TMEM columns (allocated by
// warp 1); warpgroup 0 then reads the tile out of TMEM (32x32b.x8) into bf16 stores. Tiles
// walk row-major: tile = blockIdx.x + i * gridDim.x.
//   persist_sync: after each stage's MMAs, thread 0 commits to one barrier, waits for it, and
//       only then frees the stage (the MMAs of consecutive k-tiles never overlap).
//   persist_pipelined: the commit goes to the stage's own empty barrier, so the producer reuses
//       a stage as soon as its MMAs finish and thread 0 moves straight on.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;

absl::StatusOr<KernelDef> Build(const char* name, bool pipelined) {
  Kernel k(name, sm100a(), {256});
  TmaGemmOperands g = DeclareTmaGemm(
      k, {.bm = BM, .bn = BN, .bk = BK, .rank = 3, .by_value = true, .c_row_major = true});
  k.Grid("sms");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, /*consumers=*/1);
  Barriers bars = k.SmemBarriers(2);
  Barrier mma_done = bars[0], tile_done = bars[1];
  Tmem acc = k.TensorMemory(BN);
  Value tid = k.ThreadIdx(), warp = k.WarpId(), lane = k.LaneId();
  Value tiles_n = g.N / BN, tiles = g.M / BM * tiles_n;
  k.If(tid == 0, [&] {
    ring.Init();
    mma_done.Init(1);
    tile_done.Init(1);
  });
  k.If(warp == 1, [&] { k.TmemAlloc(acc); });
  k.SyncThreads();
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    k.For(k.BlockIdx(), tiles, k.GridDim(),
          [&](Value t) { body(t / tiles_n * BM, t % tiles_n * BN); });
  };

  k.If(tid == 128, [&] {  // the producer
    Pipeline::Cursor at = ring.Start();
    for_each_tile([&](Value m0, Value n0) {
      k.For(0, g.K, BK, [&](Value k0) {
        ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)}, {&g.B, sB, g.Box(n0, k0)}});
      });
    });
  });
  k.If(tid < 128, [&] {  // MMA (thread 0) and epilogue (the warpgroup)
    Pipeline::Cursor at = ring.Start();
    RingPosition mma_done_at(k, 1), tile_done_at(k, 1);
    for_each_tile([&](Value m0, Value n0) {
      k.If(tid == 0, [&] {
        k.For(0, g.K, BK, [&](Value k0) {
          Value s = ring.Acquire(at);
          k.TcgenFenceAfterSync();
          for (int kk = 0; kk < BK; kk += 16)
            k.TcgenMma(acc, {.m = BM,
                             .n = BN,
                             .a = sA.Stage(s),
                             .b = sB.Stage(s),
                             .k0 = kk,
                             .accumulate = kk == 0 ? Operand(k0 > 0) : Operand(1)});
          if (pipelined) {
            k.TcgenCommit(ring.EmptyBarrier(s));
          } else {
            k.TcgenCommit(mma_done);
            mma_done.Wait(mma_done_at.phase());
            mma_done_at.Advance();
            ring.Release(s, tid);  // thread 0 arrives
          }
        });
        k.TcgenCommit(tile_done);
      });
      tile_done.Wait(tile_done_at.phase());
      tile_done_at.Advance();
      k.TcgenFenceAfterSync();
      StoreTmemRows(k, acc, warp * 32, k.I32(0), BN, 8,  // thread t: row t (TMEM lane t)
                    [&](Value r, Value c) {
                      return g.Cptr.At({m0 + r, n0 + c});
                    });
      k.TcgenFenceBeforeSync();
      k.NamedBarrier(1, 128);  // TMEM read out: thread 0 may overwrite it with the next tile
    });
  });
  k.SyncThreads();
  k.If(warp == 1, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(sync, "blackwell/persist_sync",
                     "seed 000 (first): persistent 128x256x64, 4 stages, MMA waited every k-tile",
                     [] { return Build("blackwell/persist_sync", false); });
KILN_EXAMPLE_VARIANT(pipe, "blackwell/persist_pipelined",
                     "seed 000 (second): as persist_sync, commits free each stage",
                     [] { return Build("blackwell/persist_pipelined", true); });
}  // namespace kiln::examples
