// Seed 002 v1a/v1b/v2a/v2b: one CTA of 128 threads per 128x256 tile, BK = 256, one stage. The
// elected thread of warp 0 loads A and B with TMA, waits, issues 16 tcgen05.mma (M128 N256 K16)
// into 256 TMEM columns allocated by warp 1, and commits to the same mbarrier. The epilogue reads
// TMEM with tcgen05.ld 32x32b.x8 (one row per thread) into 16-byte stores.
//   Upstream every thread waits on the barrier twice per k-tile. Nothing then keeps a waiting
// thread within one phase of the leader: a thread still polling for a k-tile's loads after the
// leader has seen its MMAs complete and the next loads land waits on a parity that has come round
// again, one k-tile late, and at the end for a phase that never comes (kiln emulate finds it).
// Here the leader alone walks the k-tiles and the others wait for it at a CTA barrier;
// planted/bw_upstream_waits keeps upstream's waits for the emulator's tests.
//   v1: no swizzle, the tile in 8-column slabs (descriptor LBO = one slab, SBO = 8 rows);
//       v1a: 32 2D boxes (one slab each) per operand, v1b: one 3D box.
//   v2: 128B swizzle, 64-column slabs (SBO = 1024); v2a: four 2D boxes, v2b: one 3D box.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 256;

absl::StatusOr<KernelDef> Build(const char* name, int rank, bool swizzled,
                                bool upstream_waits = false) {
  Kernel k(name, sm100a(), {128});
  if (upstream_waits)
    k.Attribute("planted",
                "upstream's per-k-tile waits: a waiting thread can fall two phases behind");
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = rank,
                                         .by_value = true,
                                         .c_row_major = true,
                                         .interleaved = !swizzled});
  k.Grid("M/128*N/256");
  // v2: 64-column slabs of 128-byte swizzled rows, slab after slab (a tile of SLABS * rows rows).
  const int SLABS = swizzled ? BK / 64 : BK / 8;
  SmemTile sA = swizzled ? k.SmemSwizzled(bf16, BM * SLABS, 64, Swizzle::k128B)
                         : k.SmemInterleaved(bf16, BM, BK);
  SmemTile sB = swizzled ? k.SmemSwizzled(bf16, BN * SLABS, 64, Swizzle::k128B)
                         : k.SmemInterleaved(bf16, BN, BK);
  Barrier bar = k.SmemBarriers(1)[0];
  Tmem acc = k.TensorMemory(BN);
  Value warp = k.WarpId(), lane = k.LaneId();
  Value blocks_n = g.N / BN, m0 = k.BlockIdx() / blocks_n * BM, n0 = k.BlockIdx() % blocks_n * BN;
  auto leader = [&](const std::function<void()>& body) {
    k.If(warp == 0, [&] { k.If(k.ElectOne(), body); });
  };
  leader([&] {
    bar.Init(1, PhasesPerRound{2});  // loads, then MMAs, every k-tile
    k.FenceBarrierInit();
  });
  k.If(warp == 1, [&] { k.TmemAlloc(acc); });
  k.SyncThreads();
  RingPosition phase(k, 1);  // the one barrier: two phases per k-tile (loads, then MMAs)
  // Runs `body` on every thread (upstream) or on the leader alone.
  auto walker = [&](const std::function<void()>& body) { upstream_waits ? body() : leader(body); };
  auto in_leader = [&](const std::function<void()>& body) {
    upstream_waits ? leader(body) : body();
  };

  walker([&] {
    k.For(0, g.K, BK, [&](Value k0) {
      in_leader([&] {
        if (rank == 3) {
          k.TmaLoad(g.A, sA, bar, g.Box(m0, k0));
          k.TmaLoad(g.B, sB, bar, g.Box(n0, k0));
        } else {
          for (int s = 0; s < SLABS; ++s) {  // one box per slab
            k.TmaLoad(g.A, swizzled ? sA.Rows(s * BM, BM) : sA.Slab(s), bar,
                      g.Box(m0, k0 + s * g.slab));
            k.TmaLoad(g.B, swizzled ? sB.Rows(s * BN, BN) : sB.Slab(s), bar,
                      g.Box(n0, k0 + s * g.slab));
          }
        }
        std::vector<const TensorMap*> boxes;  // the bytes to expect: every box issued above
        for (int s = 0; s < (rank == 3 ? 1 : SLABS); ++s) boxes.insert(boxes.end(), {&g.A, &g.B});
        bar.ArriveExpectTx(boxes);
      });
      bar.Wait(phase.phase());
      k.TcgenFenceAfterSync();
      phase.Advance();
      in_leader([&] {
        for (int kk = 0; kk < BK; kk += 16) {  // the tile's first MMA overwrites D
          Operand accumulate = kk == 0 ? Operand(k0 > 0) : Operand(1);
          if (swizzled)
            k.TcgenMma(acc, {.m = BM,
                             .n = BN,
                             .a = sA,
                             .a_row0 = kk / 64 * BM,
                             .b = sB,
                             .b_row0 = kk / 64 * BN,
                             .k0 = kk % 64,
                             .accumulate = accumulate});
          else
            k.TcgenMma(acc,
                       {.m = BM, .n = BN, .a = sA, .b = sB, .k0 = kk, .accumulate = accumulate});
        }
        k.TcgenCommit(bar);
      });
      bar.Wait(phase.phase());
      phase.Advance();
    });
  });
  if (!upstream_waits)
    k.SyncThreads();  // the others, until the leader has seen the last MMAs complete
  k.TcgenFenceAfterSync();
  // Thread t owns row t of the tile (TMEM lane t).
  StoreTmemRows(k, acc, warp * 32, k.I32(0), BN, 8, [&](Value r, Value c) {
    return g.Cptr.At({m0 + r, n0 + c});
  });
  k.SyncThreads();
  k.If(warp == 0, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(v1a, "blackwell/v1a",
                     "seed 002 v1a: tcgen05.mma M128 N256, no swizzle, 2D TMA slabs, one stage",
                     [] { return Build("blackwell/v1a", 2, false); });
KILN_EXAMPLE_VARIANT(v1b, "blackwell/v1b", "seed 002 v1b: as v1a with one 3D TMA box per operand",
                     [] { return Build("blackwell/v1b", 3, false); });
KILN_EXAMPLE_VARIANT(v2a, "blackwell/v2a",
                     "seed 002 v2a: tcgen05.mma M128 N256, 128B swizzle, 2D TMA boxes, one stage",
                     [] { return Build("blackwell/v2a", 2, true); });
KILN_EXAMPLE_VARIANT(v2b, "blackwell/v2b", "seed 002 v2b: as v2a with one 3D TMA box per operand",
                     [] { return Build("blackwell/v2b", 3, true); });
KILN_EXAMPLE_VARIANT(
    bw_upstream_waits, "planted/bw_upstream_waits",
    "blackwell/v2b with upstream's per-k-tile waits by every thread (two phases behind, emulated)",
    [] { return Build("planted/bw_upstream_waits", 3, true, /*upstream_waits=*/true); });
}  // namespace kiln::examples
