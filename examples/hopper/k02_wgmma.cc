// fast.cu kernel 2: the first tensor-core version. 64x64x64 tiles, 128 threads (one warpgroup).
// Thread 0 loads both tiles with 2D TMA (128B swizzle) and arrives with the expected bytes; the
// rest of the block arrives plainly. Four wgmma m64n64k16 per k-tile, waited at once. Scalar
// stores of the accumulator straight to C (column-major).
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 64, BN = 64, BK = 64;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k02", sm90a(), {128});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 2});
  k.Grid("M/64*N/64");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B);
  Barriers bar = k.SmemBarriers(2);  // A, B; every thread arrives
  Value tid = k.ThreadIdx();
  Value m0 = k.BlockIdx() / (g.N / BN) * BM, n0 = k.BlockIdx() % (g.N / BN) * BN;
  k.If(tid == 0, [&] {
    bar[0].Init(128), bar[1].Init(128);
    k.FenceBarrierInit();
  });
  k.SyncThreads();
  WgmmaAccumulator acc = k.WgmmaAcc(BN);

  k.For(0, g.K, BK, [&](Value k0) {
    k.If(tid == 0, [&] {
      k.TmaLoad(g.A, sA, bar[0], g.Box(m0, k0));
      bar[0].ArriveExpectTx({&g.A});
      k.TmaLoad(g.B, sB, bar[1], g.Box(n0, k0));
      bar[1].ArriveExpectTx({&g.B});
    });
    k.If(tid != 0, [&] { bar[0].Arrive(), bar[1].Arrive(); });
    Value phase = k0 / BK & 1;
    bar[0].Wait(phase), bar[1].Wait(phase);
    k.SyncThreads();
    k.WgmmaFence();
    for (int kk = 0; kk < BK; kk += 16) k.Wgmma(acc, {.a = sA, .b = sB, .k0 = kk});
    k.WgmmaCommit();
    k.WgmmaWait(0);
  });

  for (int p = 0; p < BN / 4; ++p)
    for (int j = 0; j < 2; ++j)
      k.Store(g.Cptr.At({m0 + acc.Row(p), n0 + acc.Col(p) + j}), Value(acc[2 * p + j]).To(bf16));
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k02", "fast.cu kernel 2: TMA + wgmma m64n64k16, 64x64x64", Build);
}  // namespace kiln::examples
