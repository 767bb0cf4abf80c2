// Seed 002 v3 and v4: the tcgen05 kernel pipelined.
//   v3: 128x256 tile, BK = 128, a 2-stage TMA ring (one barrier per stage) prefetched S-1 ahead;
//       one thread still loads and issues the 8 MMAs of a k-tile and commits to one MMA barrier.
//       Upstream every thread walks the ring and waits on that barrier each k-tile, which lets a
//       waiting thread fall two phases behind (as in v1, v1_v2.cc); here that thread alone walks
//       it, waiting for each k-tile's MMAs before it frees the stage, and the others wait for it
//       at a CTA barrier.
//   v4: 128x128 tile, BK = 64, 7 stages, warp specialisation: warp 0's elected thread loads,
//       warp 1's issues the 4 MMAs of a stage and commits to that stage's empty barrier (the
//       stage is free when its MMAs complete); a final commit releases the epilogue.
// Both: 3D 128B-swizzled TMA, M128 tcgen05.mma into TMEM, tcgen05.ld 32x32b.x8 epilogue.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

struct Version {
  const char* name;
  int bn, bk, stages;
  bool specialised;
};

absl::StatusOr<KernelDef> Build(const Version& v) {
  constexpr int BM = 128;
  const int slabs = v.bk / 64;
  Kernel k(v.name, sm100a(), {128});
  TmaGemmOperands g = DeclareTmaGemm(
      k, {.bm = BM, .bn = v.bn, .bk = v.bk, .rank = 3, .by_value = true, .c_row_major = true});
  k.Grid(absl::StrCat("M/128*N/", v.bn));
  SmemTile sA = k.SmemSwizzled(bf16, BM * slabs, 64, Swizzle::k128B, v.stages);
  SmemTile sB = k.SmemSwizzled(bf16, v.bn * slabs, 64, Swizzle::k128B, v.stages);
  Pipeline ring(k, v.stages, /*consumers=*/1);
  Barrier done = k.SmemBarriers(1)[0];  // MMAs of a k-tile (v3) or of the whole tile (v4)
  Tmem acc = k.TensorMemory(v.bn);
  Value warp = k.WarpId(), lane = k.LaneId();
  Value blocks_n = g.N / v.bn, m0 = k.BlockIdx() / blocks_n * BM,
        n0 = k.BlockIdx() % blocks_n * v.bn;
  auto elected = [&](int w, const std::function<void()>& body) {
    k.If(warp == w, [&] { k.If(k.ElectOne(), body); });
  };
  elected(0, [&] {
    ring.Init();
    done.Init(1);
  });
  k.If(warp == 1, [&] { k.TmemAlloc(acc); });
  k.SyncThreads();
  auto load = [&](Pipeline::Cursor& at, Value k0) {
    ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)}, {&g.B, sB, g.Box(n0, k0)}});
  };
  auto mma = [&](Value s, Value k0) {
    for (int slab = 0; slab < slabs; ++slab)
      for (int kk = 0; kk < 64; kk += 16)
        k.TcgenMma(acc, {.m = BM,
                         .n = v.bn,
                         .a = sA.Stage(s),
                         .a_row0 = slab * BM,
                         .b = sB.Stage(s),
                         .b_row0 = slab * v.bn,
                         .k0 = kk,
                         .accumulate = slab + kk == 0 ? Operand(k0 > 0) : Operand(1)});
  };

  if (!v.specialised) {  // v3: one thread walks the ring, loads and multiplies
    k.If(k.ThreadIdx() == 0, [&] {
      Pipeline::Cursor load_at = ring.Start(), use_at = ring.Start();
      RingPosition done_at(k, 1);
      for (int s = 0; s < v.stages - 1; ++s)
        k.If(k.I32(s * v.bk) < g.K, [&] { load(load_at, k.I32(s * v.bk)); });
      k.For(0, g.K, v.bk, [&](Value k0) {
        Value next = k0 + (v.stages - 1) * v.bk;
        k.If(next < g.K, [&] { load(load_at, next); });
        Value s = ring.Acquire(use_at);
        k.TcgenFenceAfterSync();
        mma(s, k0);
        k.TcgenCommit(done);
        done.Wait(done_at.phase());
        done_at.Advance();
        ring.EmptyBarrier(s).Arrive();  // MMAs done: stage free
      });
    });
    k.SyncThreads();  // the others, until that thread has seen the last k-tile's MMAs complete
  } else {            // v4: a loading warp and an MMA warp
    elected(0, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, g.K, v.bk, [&](Value k0) { load(at, k0); });
    });
    elected(1, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, g.K, v.bk, [&](Value k0) {
        Value s = ring.Acquire(at);
        k.TcgenFenceAfterSync();
        mma(s, k0);
        k.TcgenCommit(ring.EmptyBarrier(s));  // the stage is free once these MMAs complete
      });
      k.TcgenCommit(done);
    });
    k.SyncThreads();
    done.Wait(0);
  }
  k.TcgenFenceAfterSync();
  // Thread t owns row t of the tile (TMEM lane t).
  StoreTmemRows(k, acc, warp * 32, k.I32(0), v.bn, 8, [&](Value r, Value c) {
    return g.Cptr.At({m0 + r, n0 + c});
  });
  k.SyncThreads();
  k.If(warp == 0, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(v3, "blackwell/v3",
                     "seed 002 v3: 128x256x128, 2-stage TMA ring, one thread loads and multiplies",
                     [] {
                       return Build({"blackwell/v3", 256, 128, 2, false});
                     });
KILN_EXAMPLE_VARIANT(v4, "blackwell/v4",
                     "seed 002 v4: 128x128x64, 7 stages, TMA warp + MMA warp, commit frees stages",
                     [] {
                       return Build({"blackwell/v4", 128, 64, 7, true});
                     });
}  // namespace kiln::examples
