// fast.cu kernel 10: kernel 9 with its epilogue through shared memory: both consumers write
// their 64x256 halves of C into smem, meet at a named barrier, and one thread stores the
// 128x256 tile with one TMA store (bulk group; waited before the buffer is reused).
// fast.cu kernel 11: kernel 10 with a Hilbert-curve tile order. The host walks the curve over
// the 256x256 cluster tiles and deals them round-robin to the 64 clusters (a table of 128
// entries per cluster); each CTA copies its cluster's row into smem and follows it.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CLUSTER = 2;
constexpr int GROUPS = 128 / CLUSTER, TM = 16 / CLUSTER, TN = 8, SLOTS = 128;

absl::StatusOr<KernelDef> Build(const char* name, bool hilbert) {
  Kernel k(name, sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 3,
                                         .by_value = true,
                                         .c_box_rows = BN,
                                         .c_box_cols = BM,
                                         .divide_m = BM * CLUSTER * (hilbert ? 1 : TM),
                                         .divide_n = hilbert ? BN : BN * TN});
  Value table = hilbert
                    ? k.ScheduleTableParam("schedule", GemmTiles(BM * CLUSTER, BN, GROUPS, SLOTS))
                    : Value();
  k.Grid("128");
  k.ClusterDims({CLUSTER, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  SmemTile sC = k.Smem(bf16, CONSUMERS * BN, 64);  // [consumer][n][m % 64]: the C map's box
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  std::function<void(const TileIndexBody&)> walk;
  if (hilbert) walk = ScheduledTiles(k, table, SLOTS);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  k.If(tid == 0, [&] { ring.Init(); });
  k.ClusterSync();
  Value tiles_n = hilbert ? Value() : g.N / BN;
  auto for_each_tile = [&](const TileBody& body) {
    if (hilbert)
      return walk([&](Value mi, Value ni) { body(mi * (BM * CLUSTER) + rank * BM, ni * BN); });
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
      k.If(t == 0, [&] { k.BulkWait(0); });  // the previous tile's store has read sC
      k.NamedBarrier(10, 128 * CONSUMERS);
      // One address per thread; each pair sits at a constant offset (n rows of 64 m each).
      Value c0 = sC.At(t / 128 * BN + acc.Col(0), acc.Row(0));
      for (int p = 0; p < BN / 4; ++p)
        for (int j = 0; j < 2; ++j)
          k.Store(c0 + ((p / 2 * 8 + j) * 64 + p % 2 * 8), Value(acc[2 * p + j]).To(bf16));
      k.FenceProxyAsync();  // make the generic-proxy writes visible to the TMA store
      k.NamedBarrier(10, 128 * CONSUMERS);
      k.If(t == 0, [&] {
        k.TmaStore(g.C, sC, g.CBox(m0, n0));
        k.BulkCommit();
      });
    });
    k.If(t == 0, [&] { k.BulkWait(0); });
  });
  k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(k10, "hopper/k10", "fast.cu kernel 10: smem C tile + TMA store, named barrier",
                     [] { return Build("hopper/k10", false); });
KILN_EXAMPLE_VARIANT(k11, "hopper/k11",
                     "fast.cu kernel 11: Hilbert-curve tile order from a host table",
                     [] { return Build("hopper/k11", true); });
}  // namespace kiln::examples
