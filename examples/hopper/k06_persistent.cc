// fast.cu kernel 6: kernel 5 made persistent. 128 CTAs each walk the C tiles with a stride of
// 128 over super-tiles of 16x8 tiles (neighbouring CTAs share rows of A and columns of B in
// L2); the ring keeps its stage and phase across tiles. Tensor maps are __grid_constant__.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CTAS = 128, TM = 16, TN = 8;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k06", sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 2,
                                         .by_value = true,
                                         .divide_m = BM * TM,
                                         .divide_n = BN * TN});
  k.Grid("128");
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, CONSUMERS);
  Value tid = k.ThreadIdx();
  k.If(tid == 0, [&] { ring.Init(); });
  k.SyncThreads();
  // Tile number i*128 + blockIdx -> (m0, n0) inside its super-tile of TM x TN tiles.
  Value tiles_n = g.N / BN;
  auto for_each_tile = [&](const TileBody& body) {
    SuperTiles(k, k.BlockIdx(), CTAS, g.M / BM * tiles_n, tiles_n, TM, TN,
               [&](Value m, Value n) { body(m * BM, n * BN); });
  };

  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      Pipeline::Cursor at = ring.Start();
      for_each_tile([&](Value m0, Value n0) {
        k.For(0, g.K, BK, [&](Value k0) {
          ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)}, {&g.B, sB, g.Box(n0, k0)}});
        });
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    Value row0 = t / 128 * 64;
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    Pipeline::Cursor at = ring.Start();
    for_each_tile([&](Value m0, Value n0) {
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
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
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k06", "fast.cu kernel 6: persistent 128 CTAs, 16x8 super-tile stride", Build);
}  // namespace kiln::examples
