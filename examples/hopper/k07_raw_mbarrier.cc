// fast.cu kernel 7: kernel 6 with the ring spelled out in raw mbarrier ops instead of a barrier
// library: init, arrive.expect_tx, try_wait.parity and arrive, the stage and phase in a
// RingPosition. Loads go through a rank-5 tensor map ({64, rows, K/64, 1, 1}).
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CTAS = 128, TM = 16, TN = 8;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k07", sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 5,
                                         .by_value = true,
                                         .divide_m = BM * TM,
                                         .divide_n = BN * TN});
  k.Grid("128");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Barriers full = k.SmemBarriers(STAGES), empty = k.SmemBarriers(STAGES);
  Value tid = k.ThreadIdx();
  k.If(tid == 0, [&] {
    for (int s = 0; s < STAGES; ++s) full[s].Init(1), empty[s].Init(CONSUMERS);
    k.FenceBarrierInit();
  });
  k.SyncThreads();
  Value tiles_n = g.N / BN;
  auto for_each_tile = [&](const TileBody& body) {
    SuperTiles(k, k.BlockIdx(), CTAS, g.M / BM * tiles_n, tiles_n, TM, TN,
               [&](Value m, Value n) { body(m * BM, n * BN); });
  };

  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      RingPosition q(k, STAGES);  // (stage, phase) of one side of the ring
      for_each_tile([&](Value m0, Value n0) {
        k.For(0, g.K, BK, [&](Value k0) {
          Value s = q.stage();
          empty[s].Wait(q.phase());
          full[s].ArriveExpectTx({&g.A, &g.B});
          k.TmaLoad(g.A, sA.Stage(s), full[s], g.Box(m0, k0));
          k.TmaLoad(g.B, sB.Stage(s), full[s], g.Box(n0, k0));
          q.Advance();
        });
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    Value row0 = t / 128 * 64;
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    RingPosition q(k, STAGES);  // (stage, phase) of one side of the ring
    k.If(t % 128 == 0, [&] {    // every stage starts free: one arrival per consumer
      for (int s = 0; s < STAGES; ++s) empty[s].Arrive();
    });
    for_each_tile([&](Value m0, Value n0) {
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      k.For(0, g.K, BK, [&](Value) {
        Value s = q.stage();
        full[s].Wait(q.phase());
        k.WgmmaFence();
        for (int kk = 0; kk < BK; kk += 16)
          k.Wgmma(acc, {.a = sA.Stage(s), .a_row0 = row0, .b = sB.Stage(s), .k0 = kk});
        k.WgmmaCommit();
        k.WgmmaWait(0);
        k.If(t % 128 == 0, [&] { empty[s].Arrive(); });
        q.Advance();
      });
      for (int p = 0; p < BN / 4; ++p)
        for (int j = 0; j < 2; ++j)
          k.Store(g.Cptr.At({m0 + row0 + acc.Row(p), n0 + acc.Col(p) + j}),
                  Value(acc[2 * p + j]).To(bf16));
    });
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k07", "fast.cu kernel 7: raw mbarrier ring, rank-5 TMA", Build);
}  // namespace kiln::examples
