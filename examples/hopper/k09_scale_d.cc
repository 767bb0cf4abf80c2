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
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 3, .by_value = true,
                                          .divide_m = BM * CLUSTER * TM, .divide_n = BN * TN});
  k.Grid("128");
  k.ClusterDims({CLUSTER, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  k.If(tid == 0, [&] { ring.Init(); });
  k.ClusterSync();
  Value tiles_n = g.N / BN;
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    k.For(k.ClusterIdx(), g.M / (BM * CLUSTER) * tiles_n, GROUPS, [&](Value num) {
      Value super = num / (TM * TN), pos = num % (TM * TN);
      Value m = super / (tiles_n / TN) * TM + pos / TN, n = super % (tiles_n / TN) * TN + pos % TN;
      body((m * CLUSTER + rank) * BM, n * BN);
    });
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
      // C is [n][m]. One base per tile, offsets from it: per-store addresses from At() made
      // ptxas spill 88 bytes (each inline-PTX store kept its own 64-bit address).
      Value base = g.Cptr.At({m0 + row0 + acc.Row(0), n0 + acc.Col(0)});
      for (int p = 0; p < BN / 4; ++p)
        for (int j = 0; j < 2; ++j)
          k.StoreWriteThrough(base + (g.M * (p / 2 * 8 + j) + p % 2 * 8), Value(acc[2 * p + j]).To(bf16));
    });
  });
  k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k09", "fast.cu kernel 9: scale-d 0 first wgmma, write-through stores", Build);
}  // namespace kiln::examples
