// Seed 002 v5: a CTA pair computes 256x256 with tcgen05.mma cta_group::2, BK = 64, 7 stages. Each
// CTA loads its 128 rows of A and half of B with TMA .cta_group::2 onto the leader's stage barrier
// (2 arrivals); the leader's MMA warp commits to both CTAs' empty barriers (multicast) and, at the
// end, their epilogue barriers. Each CTA's TMEM holds its 128 rows. GROUP_M = 2 tile order.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 7;

absl::StatusOr<KernelDef> Build() {
  Kernel k("blackwell/v5", sm100a(), {128});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 3,
                                         .by_value = true,
                                         .divide_m = 2 * BM,
                                         .c_row_major = true,
                                         .b_box_rows = BN / 2});
  k.Grid("M/128*N/256");
  k.ClusterDims({2, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN / 2, BK, Swizzle::k128B, STAGES);  // this CTA's half of B
  Barriers full = k.SmemBarriers(STAGES), empty = k.SmemBarriers(STAGES), done = k.SmemBarriers(1);
  Tmem acc = k.TensorMemory(BN, /*cta_group=*/2);
  Value warp = k.WarpId(), lane = k.LaneId(), rank = k.ClusterCtaRank(), bid = k.BlockIdx();
  Value grid_n = g.N / BN, m0 = (bid / (grid_n * 2) * 2 + bid % 2) * BM, n0 = bid / 2 % grid_n * BN;
  auto elected = [&](int w, const std::function<void()>& body) {
    k.If(warp == w, [&] { k.If(k.ElectOne(), body); });
  };
  elected(0, [&] {
    for (int s = 0; s < STAGES; ++s) {
      full[s].Init(2);  // the leader's: both CTAs' loaders arrive (with their bytes)
      empty[s].Init(1);
    }
    done[0].Init(1);
    k.FenceBarrierInit();
  });
  k.If(warp == 1, [&] { k.TmemAlloc(acc); });
  k.ClusterSync();
  auto ring = [&](const std::function<void(Value, Value, Value)>& step) {  // (k0, stage, phase)
    Regs at = k.Registers(Type::Of(i32), 2);
    k.For(0, g.K, BK, [&](Value k0) {
      step(k0, at[0], at[1]);
      Value next = at[0] + 1, wrap = next == STAGES;
      at[0] = Select(wrap, 0, next);
      at[1] = at[1] ^ Select(wrap, k.I32(1), 0);
    });
  };

  elected(0, [&] {  // loader, in both CTAs
    ring([&](Value k0, Value s, Value phase) {
      empty[s].Wait(phase ^ 1);
      full[s].ArriveExpectTxCluster({&g.A, &g.B}, rank & ~1);
      k.TmaLoadPair(g.A, sA.Stage(s), full[s], g.Box(m0, k0));
      k.TmaLoadPair(g.B, sB.Stage(s), full[s], g.Box(n0 + rank * (BN / 2), k0));
    });
  });
  k.If(rank == 0, [&] {
    elected(1, [&] {  // the pair's MMA issuer
      ring([&](Value k0, Value s, Value phase) {
        full[s].Wait(phase);
        k.TcgenFenceAfterSync();
        for (int kk = 0; kk < BK; kk += 16)
          k.TcgenMma(acc, {.m = 2 * BM,
                           .n = BN,
                           .a = sA.Stage(s),
                           .b = sB.Stage(s),
                           .k0 = kk,
                           .accumulate = kk == 0 ? Operand(k0 > 0) : Operand(1)});
        k.TcgenCommit(empty[s], 2, k.I32(0b11));  // frees stage s in both CTAs
      });
      k.TcgenCommit(done[0], 2, k.I32(0b11));
    });
  });
  k.SyncThreads();
  done[0].Wait(0);
  k.TcgenFenceAfterSync();
  // Thread t owns row t of this CTA's 128 rows.
  StoreTmemRows(k, acc, warp * 32, k.I32(0), BN, 8, [&](Value r, Value c) {
    return g.Cptr.At({m0 + r, n0 + c});
  });
  k.TcgenFenceBeforeSync();
  k.ClusterSync();  // the peer's MMAs and reads are done before the pair's TMEM goes
  k.If(warp == 0, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE(
    "blackwell/v5",
    "seed 002 v5: CTA pair, tcgen05.mma cta_group::2 M256 N256, 7 stages, multicast commits",
    Build);
}  // namespace kiln::examples
