// fast.cu kernel 8: clusters of 2 CTAs stacked along M share their B tile: CTA rank 0 multicasts
// it to both, and each consumer releases a stage in both CTAs (remote arrive through mapa).
// The schedule strides over cluster tiles of 256x256; tensor maps are rank 3 {64, rows, K/64}.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CLUSTER = 2;
constexpr int GROUPS = 128 / CLUSTER, TM = 16 / CLUSTER, TN = 8;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k08", sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 3,
                                         .by_value = true,
                                         .divide_m = BM * CLUSTER * TM,
                                         .divide_n = BN * TN});
  k.Grid("128");
  k.ClusterDims({CLUSTER, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  k.If(tid == 0, [&] { ring.Init(); });
  k.ClusterSync();
  Value tiles_n = g.N / BN;
  auto for_each_tile = [&](const TileBody& body) {
    SuperTiles(k, k.ClusterIdx(), GROUPS, g.M / (BM * CLUSTER) * tiles_n, tiles_n, TM, TN,
               [&](Value m, Value n) { body((m * CLUSTER + rank) * BM, n * BN); });
  };

  MulticastProducer(k, ring, g, sA, sB, BK, rank, for_each_tile);
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
  k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k08", "fast.cu kernel 8: clusters of 2, B multicast, remote arrives", Build);
}  // namespace kiln::examples
