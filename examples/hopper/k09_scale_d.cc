// fast.cu kernel 9: kernel 8 without zeroing the accumulator per tile: the first wgmma of each
// tile runs with scale-d = 0 (D = A*B), so the first k-tile is peeled. C is written with
// write-through (streaming) stores that bypass L1.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CLUSTER = 2;
constexpr int GROUPS = 128 / CLUSTER, TM = 16 / CLUSTER, TN = 8;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k09", sm90a(), {128 * (1 + CONSUMERS)});
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
      ConsumeTile(k, ring, at, t % 128, acc, sA, sB, row0, BK, g.K);
      // C is [n][m]. One base per tile, offsets from it: per-store addresses from At() made
      // ptxas spill 88 bytes (each inline-PTX store kept its own 64-bit address).
      Value base = g.Cptr.At({m0 + row0 + acc.Row(0), n0 + acc.Col(0)});
      for (int p = 0; p < BN / 4; ++p)
        for (int j = 0; j < 2; ++j)
          k.StoreWriteThrough(base + (g.M * (p / 2 * 8 + j) + p % 2 * 8),
                              Value(acc[2 * p + j]).To(bf16));
    });
  });
  k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k09", "fast.cu kernel 9: scale-d 0 first wgmma, write-through stores", Build);
}  // namespace kiln::examples
