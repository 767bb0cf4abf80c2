// Seed 002 v6: v5 made persistent. One CTA per SM (pairs: sms/2*2 CTAs), 192 threads: warp 0
// loads, warp 1 of the leader issues the pair's MMAs, warps 2-5 run the epilogue. TMEM holds two
// 256-column accumulators (512 columns): the MMA warp fills one while the epilogue drains the
// other. Per accumulator, a "mainloop" barrier (the MMA warp's multicast commit: full) and an
// "epilogue" barrier in the leader (8 arrivals, one per epilogue warp of either CTA: empty).
// Tiles: t = blockIdx.x + i * gridDim.x, paired rows of tiles (GROUP_M = 2) as in v5.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 7, ACCS = 2;

absl::StatusOr<KernelDef> Build() {
  Kernel k("blackwell/v6", sm100a(), {192});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = 3, .by_value = true,
                                          .divide_m = 2 * BM, .c_row_major = true, .b_box_rows = BN / 2});
  k.Grid("sms/2*2");
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
  elected(0, [&] {
    for (int s = 0; s < STAGES; ++s) {
      full[s].Init(2);
      empty[s].Init(1);
    }
    for (int a = 0; a < ACCS; ++a) {
      mainloop[a].Init(1);
      drained[a].Init(8);  // 4 epilogue warps x 2 CTAs
    }
    k.FenceBarrierInit();
  });
  k.If(warp == 1, [&] { k.TmemAlloc(acc); });
  k.ClusterSync();
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    k.For(k.BlockIdx(), tiles, k.GridDim(), [&](Value t) {
      body((t / (grid_n * 2) * 2 + t % 2) * BM, t / 2 % grid_n * BN);
    });
  };
  // A ring position (index, phase) that advances by one and flips the phase on wrapping.
  auto step = [&](Regs& at, int size) {
    Value next = at[0] + 1, wrap = next == size;
    at[0] = Select(wrap, 0, next);
    at[1] = at[1] ^ Select(wrap, k.I32(1), 0);
  };

  elected(0, [&] {  // loader, in both CTAs
    Regs at = k.Registers(Type::Of(i32), 2);
    for_each_tile([&](Value m0, Value n0) {
      k.For(0, g.K, BK, [&](Value k0) {
        Value s = at[0];
        empty[s].Wait(at[1] ^ 1);
        full[s].ArriveExpectTxCluster({&g.A, &g.B}, rank & ~1);
        k.TmaLoadPair(g.A, sA.Stage(s), full[s], g.Box(m0, k0));
        k.TmaLoadPair(g.B, sB.Stage(s), full[s], g.Box(n0 + rank * (BN / 2), k0));
        step(at, STAGES);
      });
    });
  });
  k.If(rank == 0, [&] {
    elected(1, [&] {  // the pair's MMA issuer
      Regs at = k.Registers(Type::Of(i32), 2), use = k.Registers(Type::Of(i32), 2);  // stage, accumulator
      for_each_tile([&](Value, Value) {
        Value a = use[0];
        drained[a].Wait(use[1] ^ 1);  // the epilogue has read this accumulator out
        k.TcgenFenceAfterSync();
        k.For(0, g.K, BK, [&](Value k0) {
          Value s = at[0];
          full[s].Wait(at[1]);
          k.TcgenFenceAfterSync();
          for (int kk = 0; kk < BK; kk += 16)
            k.TcgenMma(acc, a * BN, sA.Stage(s), 0, sB.Stage(s), 0, kk, kk == 0 ? Operand(k0 > 0) : Operand(1),
                       2 * BM, BN);
          k.TcgenCommit(empty[s], 2, k.I32(0b11));
          step(at, STAGES);
        });
        k.TcgenCommit(mainloop[a], 2, k.I32(0b11));
        step(use, ACCS);
      });
    });
  });
  k.If(warp >= 2, [&] {  // epilogue: warp w reads TMEM lanes 32 * (w % 4)..
    Regs use = k.Registers(Type::Of(i32), 2);
    Value quarter = warp % 4;
    for_each_tile([&](Value m0, Value n0) {
      Value a = use[0];
      mainloop[a].Wait(use[1]);
      k.TcgenFenceAfterSync();
      for (int n = 0; n < BN; n += 8) {
        std::vector<Value> x = k.TcgenLoad(acc, quarter * 32, a * BN + n, 8);
        k.TcgenWaitLoad();
        std::vector<Value> row;
        for (const Value& e : x) row.push_back(e.To(bf16));
        k.Store(g.Cptr.At({m0 + quarter * 32 + lane, n0 + n}), k.Vector(row));
      }
      k.TcgenFenceBeforeSync();
      k.If(k.ElectOne(), [&] { drained[a].ArriveCluster(0); });  // on the leader's barrier
      step(use, ACCS);
    });
  });
  k.ClusterSync();  // both CTAs are done with the pair's TMEM and barriers
  k.If(warp == 0, [&] { k.TmemFree(acc); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("blackwell/v6", "seed 002 v6: persistent CTA pairs, 192 threads, two TMEM accumulators, epilogue warps", Build);
}  // namespace kiln::examples
