// The tile kernels' consumers for 8-bit inputs, DeepGEMM's recipe: each stage (128 of K) is one
// wgmma group into a partial accumulator, waited for, its stage freed, and the partial sums
// promoted into the f32 accumulator with FFMA, scaled by the stage's blockwise factors (the FP8
// tensor core's accumulator keeps fewer bits than f32: promoting every 128 of K bounds what it
// loses). The other consumer warpgroup's wgmmas run under a warpgroup's promotion. Tensorwise
// and rowwise factors are constant along K: the promotion adds, and the product is scaled once.
#include "ops/gemm/kernels/fp8_factors.h"
#include "ops/gemm/kernels/tile_epilogue.h"

namespace kiln::ops {

using examples::Fp8Scaling;

void RunFp8TileConsumer(TileKernel& tk, const Value& t) {
  Kernel& k = tk.k;
  const int BN = tk.shape.bn, BK = tk.shape.bk();
  k.WaitForPriorGrids();
  Value c = t % 128, wg = t / 128, lane = c % 32, row0 = wg * 64;
  WgmmaAccumulator acc = k.WgmmaAcc(BN), part = k.WgmmaAcc(BN);
  Regs ahead = k.Registers(Type::Of(f32), 2);   // blockwise_t: the next stage's scales
  Regs buffer = k.Registers(Type::Of(i32), 1);  // blockwise_t: this stage's buffer, 0 or 1
  Regs sets[2];                                 // blockwise: two stages' factors (TwoAhead)
  if (tk.shape.variant.scaling == Fp8Scaling::kBlock)
    sets[0] = k.Registers(Type::Of(f32), 3), sets[1] = k.Registers(Type::Of(f32), 3);
  buffer[0] = k.I32(0);
  Pipeline::Cursor at = tk.ring.Start();
  TileEpilogue epilogue(tk, acc, c, wg, lane, row0);
  tk.for_each_unit([&](Value m0, Value n0, const examples::WorkUnit& u) {
    // A's block scales are read at the warpgroup's first row, kept inside M (a pair's second tile
    // may lie past it) and inside a grouped GEMM's group: no read leaves the scales.
    Value a_base = u.a_row.valid() ? u.a_row - m0 : k.I32(0);
    Fp8Factors factors(tk, part, m0 + row0, n0, a_base + Min(m0 + row0, tk.g.M - 1), c, wg, ahead,
                       buffer);
    const Value last = (u.k_end - 1).To(i64);
    // One stage: its wgmma group into `part`, then promoted (the first stage of a unit starts acc)
    // with the factors of `set` where they come two stages ahead (TwoAhead).
    auto ahead = [&](const Value& kb) { return Min(kb.To(i64), last); };
    auto stage = [&](const Value& kb, bool first, const Regs* set = nullptr) {
      if (set) {  // the factors first, then the set loaded again for two stages on
        factors.Use(*set);
        factors.LoadInto(*set, ahead(kb + 2));
      }
      Value s = tk.ring.Acquire(at);
      k.WgmmaFence();
      for (int kk = 0; kk < BK; kk += 32)
        k.Wgmma(part, {.a = {tk.sA.Stage(s)},
                       .a_row0 = row0,
                       .b = {tk.sB.Stage(s)},
                       .k0 = kk,
                       .accumulate = kk != 0});
      k.WgmmaCommit();
      factors.Stage(kb.To(i64), last);
      if (first && !tk.shape.direct_out())  // the last tile's C out, under this group
        k.If(epilogue.pending()[0] == 1, [&] { epilogue.WriteOut(); });
      k.WgmmaWait(0);
      tk.ring.Release(s, c);
      factors.Ready();
      for (int i = 0; i < BN / 2; ++i) {
        Value p = part[i].Load();
        if (factors.PerStage())
          acc[i] = first ? p * factors[i] : Fma(p, factors[i], acc[i].Load());
        else
          acc[i] = first ? p : p + acc[i].Load();
      }
    };
    factors.Start(u.k_begin.To(i64));
    if (factors.TwoAhead()) {
      // Stages 1, 3, .. of the unit use sets[1], 0, 2, .. sets[0]; a set is loaded for the stage
      // two on (the last one's again past the end) as soon as its stage has taken its factors,
      // before that stage's wgmmas: taken after the wait, the compiler moved them above the
      // wgmmas anyway, and the load had a stage less to land
      // (docs/perf/2026-11-29-fp8-tile-rule.md, "blockwise's scale loads").
      factors.LoadInto(sets[0], u.k_begin.To(i64));
      factors.LoadInto(sets[1], ahead(u.k_begin + 1));
      stage(u.k_begin, true, &sets[0]);
      k.For(u.k_begin + 1, u.k_end - 1, 2, [&](Value kb) {
        stage(kb, false, &sets[1]);
        stage(kb + 1, false, &sets[0]);
      });
      k.If((u.k_end - u.k_begin) % 2 == 0, [&] { stage(u.k_end - 1, false, &sets[1]); });
    } else {
      stage(u.k_begin, true);
      k.For(u.k_begin + 1, u.k_end, 1, [&](Value kb) { stage(kb, false); });
    }
    if (!factors.PerStage()) {  // tensorwise, rowwise: once, before any split's parts are summed
      factors.Load(k.I32(0).To(i64));
      for (int i = 0; i < BN / 2; ++i) acc[i] = acc[i].Load() * factors[i];
    }
    FinishTileUnit(tk, acc, epilogue, m0, n0, u, c, wg, row0);
  });
  if (!tk.shape.direct_out()) k.If(epilogue.pending()[0] == 1, [&] { epilogue.WriteOut(); });
  k.If(c == 0, [&] { k.BulkWait(0); });
}

}  // namespace kiln::ops
