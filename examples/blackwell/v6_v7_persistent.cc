// Seed 002 v6: v5 made persistent. One CTA per SM (pairs: sms/2*2 CTAs), 192 threads: warp 0
// loads, warp 1 of the leader issues the pair's MMAs, warps 2-5 run the epilogue. TMEM holds two
// 256-column accumulators (512 columns): the MMA warp fills one while the epilogue drains the
// other. Per accumulator, a "mainloop" barrier (the MMA warp's multicast commit: full) and an
// "epilogue" barrier in the leader (8 arrivals, one per epilogue warp of either CTA: empty).
// Tiles: t = blockIdx.x + i * gridDim.x, paired rows of tiles (GROUP_M = 2) as in v5.
// Seed 002 v7 rearranges it: warps 0-3 are the epilogue (warp 0 waits, a named barrier releases
// the other three), warp 4 loads, warp 5 allocates TMEM and issues; the epilogue reads 16 columns
// at a time and every epilogue thread frees the accumulator (256 arrivals). v7a runs on every SM
// pair, v7b on 128 CTAs, v7c also stores without allocating in L1.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 7, ACCS = 2;

struct Version {
  const char* name;
  bool v7;             // warp roles, x16 loads, named barrier, every thread frees
  const char* grid;    // "sms/2*2" or "128"
  bool no_l1 = false;  // v7c: st.global.L1::no_allocate
};

absl::StatusOr<KernelDef> Build(const Version& v) {
  Kernel k(v.name, sm100a(), {192});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 3,
                                         .by_value = true,
                                         .divide_m = 2 * BM,
                                         .c_row_major = true,
                                         .b_box_rows = BN / 2});
  k.Grid(v.grid);
  const int loader = v.v7 ? 4 : 0, issuer = v.v7 ? 5 : 1, first_epilogue = v.v7 ? 0 : 2,
            cols = v.v7 ? 16 : 8;
  k.ClusterDims({2, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN / 2, BK, Swizzle::k128B, STAGES);
  Barriers full = k.SmemBarriers(STAGES), empty = k.SmemBarriers(STAGES);
  Barriers mainloop = k.SmemBarriers(ACCS), drained = k.SmemBarriers(ACCS);
  Tmem acc = k.TensorMemory(ACCS * BN, /*cta_group=*/2);
  Value warp = k.WarpId(), lane = k.LaneId(), rank = k.ClusterCtaRank();
  Value grid_n = g.N / BN, tiles = g.M / BM * grid_n;
  auto elected = [&](int w, const std::function<void()>& body) {
    k.If(warp == w, [&] { k.If(k.ElectOne(), body); });
  };
  elected(loader, [&] {
    for (int s = 0; s < STAGES; ++s) {
      full[s].Init(2);
      empty[s].Init(1);
    }
    for (int a = 0; a < ACCS; ++a) {
      mainloop[a].Init(1);
      drained[a].Init(v.v7 ? 256 : 8);  // per epilogue thread (v7) or warp (v6), 2 CTAs
    }
    k.FenceBarrierInit();
  });
  k.If(warp == issuer, [&] { k.TmemAlloc(acc); });
  k.ClusterSync();
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    k.For(k.BlockIdx(), tiles, k.GridDim(),
          [&](Value t) { body((t / (grid_n * 2) * 2 + t % 2) * BM, t / 2 % grid_n * BN); });
  };

  elected(loader, [&] {  // loader, in both CTAs
    RingPosition at(k, STAGES);
    for_each_tile([&](Value m0, Value n0) {
      k.For(0, g.K, BK, [&](Value k0) {
        Value s = at.stage();
        empty[s].Wait(at.phase() ^ 1);
        full[s].ArriveExpectTxCluster({&g.A, &g.B}, rank & ~1);
        k.TmaLoadPair(g.A, sA.Stage(s), full[s], g.Box(m0, k0));
        k.TmaLoadPair(g.B, sB.Stage(s), full[s], g.Box(n0 + rank * (BN / 2), k0));
        at.Advance();
      });
    });
  });
  k.If(rank == 0, [&] {
    elected(issuer, [&] {                        // the pair's MMA issuer
      RingPosition at(k, STAGES), use(k, ACCS);  // smem stage, TMEM accumulator
      for_each_tile([&](Value, Value) {
        Value a = use.stage();
        drained[a].Wait(use.phase() ^ 1);  // the epilogue has read this accumulator out
        k.TcgenFenceAfterSync();
        k.For(0, g.K, BK, [&](Value k0) {
          Value s = at.stage();
          full[s].Wait(at.phase());
          k.TcgenFenceAfterSync();
          for (int kk = 0; kk < BK; kk += 16)
            k.TcgenMma(acc, {.m = 2 * BM,
                             .n = BN,
                             .d_column = a * BN,
                             .a = sA.Stage(s),
                             .b = sB.Stage(s),
                             .k0 = kk,
                             .accumulate = kk == 0 ? Operand(k0 > 0) : Operand(1)});
          k.TcgenCommit(empty[s], 2, k.I32(0b11));
          at.Advance();
        });
        k.TcgenCommit(mainloop[a], 2, k.I32(0b11));
        use.Advance();
      });
    });
  });
  k.If((warp >= first_epilogue) & (warp < first_epilogue + 4),
       [&] {  // warp w: TMEM lanes 32 * (w % 4)..
         RingPosition use(k, ACCS);
         Value quarter = warp % 4;
         for_each_tile([&](Value m0, Value n0) {
           Value a = use.stage();
           if (v.v7) {
             k.If(warp == 0, [&] { mainloop[a].Wait(use.phase()); });
             k.NamedBarrier(1, 128);
           } else {
             mainloop[a].Wait(use.phase());
           }
           k.TcgenFenceAfterSync();
           StoreTmemRows(
               k, acc, quarter * 32, a * BN, BN, cols,
               [&](Value r, Value c) {
                 return g.Cptr.At({m0 + r, n0 + c});
               },
               v.no_l1);
           k.TcgenFenceBeforeSync();
           if (v.v7)
             drained[a].ArriveCluster(0);  // on the leader's barrier
           else
             k.If(k.ElectOne(), [&] { drained[a].ArriveCluster(0); });
           use.Advance();
         });
       });
  k.ClusterSync();  // both CTAs are done with the pair's TMEM and barriers
  k.If(warp == 0, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(
    v6, "blackwell/v6",
    "seed 002 v6: persistent CTA pairs, 192 threads, two TMEM accumulators, epilogue warps", [] {
      return Build({"blackwell/v6", false, "sms/2*2"});
    });
KILN_EXAMPLE_VARIANT(
    v7a, "blackwell/v7a",
    "seed 002 v7a: v6 with epilogue warps 0-3, x16 loads, named barrier, every SM pair", [] {
      return Build({"blackwell/v7a", true, "sms/2*2"});
    });
KILN_EXAMPLE_VARIANT(v7b, "blackwell/v7b", "seed 002 v7b: v7a on 128 CTAs", [] {
  return Build({"blackwell/v7b", true, "128"});
});
KILN_EXAMPLE_VARIANT(v7c, "blackwell/v7c", "seed 002 v7c: v7b with L1::no_allocate stores", [] {
  return Build({"blackwell/v7c", true, "128", true});
});
}  // namespace kiln::examples
