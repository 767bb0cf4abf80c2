// fast.cu kernel 3: kernel 2 scaled to 128x128x64 tiles. Still one warpgroup and one stage; it
// covers the 128 rows as two M-slices of wgmma m64n128k16 (64 accumulator registers each).
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 64;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k03", sm90a(), {128});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 2});
  k.Grid("M/128*N/128");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B);
  Barriers bar = k.SmemBarriers(2);
  Value tid = k.ThreadIdx();
  Value m0 = k.BlockIdx() / (g.N / BN) * BM, n0 = k.BlockIdx() % (g.N / BN) * BN;
  k.If(tid == 0, [&] {
    bar[0].Init(128), bar[1].Init(128);
    k.FenceBarrierInit();
  });
  k.SyncThreads();
  WgmmaAccumulator acc[2] = {k.WgmmaAcc(BN), k.WgmmaAcc(BN)};

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
    for (int m = 0; m < 2; ++m)
      for (int kk = 0; kk < BK; kk += 16)
        k.Wgmma(acc[m], {.a = sA, .a_row0 = m * 64, .b = sB, .k0 = kk});
    k.WgmmaCommit();
    k.WgmmaWait(0);
  });

  // C is [n][m]: one base per thread and offsets from it (M * column + row) keep ptxas at 168
  // registers or fewer, so three CTAs fit on an SM (per-store At() addresses took 196: two).
  Value base = g.Cptr.At({m0 + acc[0].Row(0), n0 + acc[0].Col(0)});
  for (int m = 0; m < 2; ++m)
    for (int p = 0; p < BN / 4; ++p)
      for (int j = 0; j < 2; ++j)
        k.Store(base + (g.M * (p / 2 * 8 + j) + (m * 64 + p % 2 * 8)),
                Value(acc[m][2 * p + j]).To(bf16));
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k03", "fast.cu kernel 3: wgmma m64n128k16 x 2 M-slices, 128x128x64", Build);
}  // namespace kiln::examples
