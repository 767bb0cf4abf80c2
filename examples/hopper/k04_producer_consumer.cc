// fast.cu kernel 4: warp specialisation. Warpgroup 0 produces (one thread issues TMA into a ring
// of 5 stages), warpgroup 1 consumes with wgmma; full/empty barrier pairs hand stages back and
// forth. 128x128x64 tiles, two M-slices of m64n128k16, direct stores.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 5;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k04", sm90a(), {256});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 2});
  k.Grid("M/128*N/128");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, /*consumers=*/1);
  Value tid = k.ThreadIdx();
  Value m0 = k.BlockIdx() / (g.N / BN) * BM, n0 = k.BlockIdx() % (g.N / BN) * BN;
  k.If(tid == 0, [&] { ring.Init(); });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128}, [&](Value t) {  // producer
    k.If(t == 0, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, g.K, BK, [&](Value k0) {
        ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)}, {&g.B, sB, g.Box(n0, k0)}});
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128}, [&](Value t) {  // consumer
    WgmmaAccumulator acc[2] = {k.WgmmaAcc(BN), k.WgmmaAcc(BN)};
    Pipeline::Cursor at = ring.Start();
    k.For(0, g.K, BK, [&](Value) {
      ring.Consume(at, t, [&](Value s) {
        k.WgmmaFence();
        for (int m = 0; m < 2; ++m)
          for (int kk = 0; kk < BK; kk += 16)
            k.Wgmma(acc[m], {.a = sA.Stage(s), .a_row0 = m * 64, .b = sB.Stage(s), .k0 = kk});
        k.WgmmaCommit();
        k.WgmmaWait(0);
      });
    });
    for (int m = 0; m < 2; ++m)
      for (int p = 0; p < BN / 4; ++p)
        for (int j = 0; j < 2; ++j)
          k.Store(g.Cptr.At({m0 + m * 64 + acc[m].Row(p), n0 + acc[m].Col(p) + j}),
                  Value(acc[m][2 * p + j]).To(bf16));
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k04", "fast.cu kernel 4: producer/consumer warpgroups, 5-stage ring", Build);
}  // namespace kiln::examples
