// fast.cu kernel 11: kernel 10 with a Hilbert-curve tile order. The host walks the curve over
// the 256x256 cluster tiles and deals them round-robin to the 64 clusters (a table of 128
// entries per cluster); each CTA copies its cluster's row into smem and follows it.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CONSUMERS = 2, CLUSTER = 2;
constexpr int GROUPS = 128 / CLUSTER, SLOTS = 128;

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k11", sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 3, .by_value = true,
                                          .c_box_rows = BN, .c_box_cols = BM,
                                          .divide_m = BM * CLUSTER});
  Value table = k.ScheduleTableParam("schedule", {.tile_m = BM * CLUSTER, .tile_n = BN,
                                                  .groups = GROUPS, .slots = SLOTS});
  k.Grid("128");
  k.ClusterDims({CLUSTER, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  SmemTile sC = k.Smem(bf16, CONSUMERS * BN, 64);  // [consumer][n][m % 64]: the C map's box
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  auto walk = ScheduledTiles(k, table, SLOTS);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  k.If(tid == 0, [&] { ring.Init(); });
  k.ClusterSync();
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    walk([&](Value mi, Value ni) { body(mi * (BM * CLUSTER) + rank * BM, ni * BN); });
  };

  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      Pipeline::Cursor at = ring.Start();
      for_each_tile([&](Value m0, Value n0) {
        k.For(0, g.K, BK, [&](Value k0) {
          ring.Produce(at, {{&g.A, sA, g.Box(m0, k0)},
                            {&g.B, sB, g.Box(n0, k0), k.I32(0b11), rank == 0}});
        });
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    Value row0 = t / 128 * 64;
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    Pipeline::Cursor at = ring.Start();
    for_each_tile([&](Value m0, Value n0) {
      auto mma = [&](bool first) {
        return [&, first](Value s) {
          k.WgmmaFence();
          for (int kk = 0; kk < BK; kk += 16)
            k.Wgmma(acc, sA.Stage(s), row0, sB.Stage(s), 0, kk, /*scale_d=*/!(first && kk == 0));
          k.WgmmaCommit();
          k.WgmmaWait(0);
        };
      };
      ring.Consume(at, t % 128, mma(true));
      k.For(BK, g.K, BK, [&](Value) { ring.Consume(at, t % 128, mma(false)); });
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
KILN_EXAMPLE("hopper/k11", "fast.cu kernel 11: Hilbert-curve tile order from a host table", Build);
}  // namespace kiln::examples
