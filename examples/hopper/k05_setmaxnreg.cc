// fast.cu kernel 5: one producer and two consumer warpgroups on 128x256x64 tiles, 3 stages.
// The producer gives registers back (setmaxnreg.dec 24) so each consumer can hold a 64x256
// accumulator (wgmma m64n256k16, 128 registers) with room to spare (setmaxnreg.inc 240).
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k05", sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 2});
  k.Grid("M/128*N/256");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, CONSUMERS);
  Value tid = k.ThreadIdx();
  Value m0 = k.BlockIdx() / (g.N / BN) * BM, n0 = k.BlockIdx() % (g.N / BN) * BN;
  k.If(tid == 0, [&] { ring.Init(); });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, g.K, BK, [&](Value k0) {
        ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)}, {&g.B, sB, g.Box(n0, k0)}});
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    Value wg = t / 128, row0 = wg * 64;  // this consumer's 64 rows of the tile
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    Pipeline::Cursor at = ring.Start();
    k.For(0, g.K, BK, [&](Value) {
      ring.Consume(at, t % 128, [&](Value s) {
        k.WgmmaFence();
        for (int kk = 0; kk < BK; kk += 16)
          k.Wgmma(acc, {.a = sA.Stage(s), .a_row0 = row0, .b = sB.Stage(s), .k0 = kk});
        k.WgmmaCommit();
        k.WgmmaWait(0);
      });
    });
    for (int p = 0; p < BN / 4; ++p)
      for (int j = 0; j < 2; ++j)
        k.Store(g.Cptr.At({m0 + row0 + acc.Row(p), n0 + acc.Col(p) + j}),
                Value(acc[2 * p + j]).To(bf16));
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k05", "fast.cu kernel 5: 1 producer + 2 consumers, setmaxnreg, m64n256k16",
             Build);
}  // namespace kiln::examples
