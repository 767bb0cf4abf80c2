// The tile kernels' consumers for 8-bit inputs, DeepGEMM's recipe: each stage (128 of K) is one
// wgmma group into a partial accumulator, waited for, its stage freed, and the partial sums
// promoted into the f32 accumulator with FFMA, scaled by the stage's blockwise factors (the FP8
// tensor core's accumulator keeps fewer bits than f32: promoting every 128 of K bounds what it
// loses). The other consumer warpgroup's wgmmas run under a warpgroup's promotion. Tensorwise
// and rowwise factors are constant along K: the promotion adds, and the product is scaled once.
#include "kiln/warp.h"
#include "ops/gemm/kernels/fp8_factors.h"
#include "ops/gemm/kernels/tile_epilogue.h"

namespace kiln::ops {

// Stages whose groups accumulate into one partial accumulator before it is promoted (tensorwise
// and rowwise, 128-row tiles): two; four held too many of the ring's slots at once and summed
// more in the tensor cores' narrower accumulator (docs/perf/2026-11-29-fp8-tile-rule.md,
// "promoted every two stages").
constexpr int kGrouped = 2;

using examples::Fp8Scaling;

void RunFp8TileConsumer(TileKernel& tk, const Value& t) {
  Kernel& k = tk.k;
  const int BN = tk.shape.bn, BK = tk.shape.bk();
  k.WaitForPriorGrids();
  // The warpgroup index from lane 0 (WarpUniform) for tensorwise scaling alone
  // (docs/perf/2026-12-01-warp-uniform-warpgroup-index.md, "The backward and the 8-bit GEMM").
  const bool uniform_wg = tk.shape.variant.scaling == Fp8Scaling::kTensor;
  Value c = t % 128, wg = uniform_wg ? WarpUniform(t / 128) : t / 128, lane = c % 32,
        row0 = wg * 64;
  WgmmaAccumulator acc = k.WgmmaAcc(BN), part = k.WgmmaAcc(BN), part2;
  // Tensorwise and rowwise in tiles of at most 64x128 (the ones the rule takes for few tokens,
  // where a stage's wait and promotion, not the tensor cores, set the pace): stages in pairs, the
  // second group issued before the first is promoted, into a second partial accumulator
  // (docs/perf/2026-11-29-fp8-tile-rule.md, "stages in pairs for small tiles").
  const Fp8Scaling scaling = tk.shape.variant.scaling;
  const bool paired = (scaling == Fp8Scaling::kTensor || scaling == Fp8Scaling::kRow) &&
                      tk.shape.bm * BN <= 64 * 128;
  if (paired) part2 = k.WgmmaAcc(BN);
  Regs ahead = k.Registers(Type::Of(f32), 2);   // blockwise_t: the next stage's scales
  Regs buffer = k.Registers(Type::Of(i32), 1);  // blockwise_t: this stage's buffer, 0 or 1
  Regs sets[2];                                 // blockwise: two stages' factors (TwoAhead)
  if (tk.shape.variant.scaling == Fp8Scaling::kBlock)
    sets[0] = k.Registers(Type::Of(f32), 3), sets[1] = k.Registers(Type::Of(f32), 3);
  buffer[0] = k.I32(0);
  Pipeline::Cursor at = tk.ring.Start();
  TileEpilogue epilogue(tk, acc, c, wg, lane, row0);
  const bool under_first = tk.shape.out_under_first_group();
  tk.for_each_unit([&](Value m0, Value n0, const examples::WorkUnit& u) {
    if (!tk.shape.direct_out() && !under_first)
      k.If(epilogue.pending()[0] == 1, [&] { epilogue.WriteOut(); });
    // A's block scales are read at the warpgroup's first row, kept inside M (a pair's second tile
    // may lie past it) and inside a grouped GEMM's group: no read leaves the scales.
    Value a_base = u.a_row.valid() ? u.a_row - m0 : k.I32(0);
    Fp8Factors factors(tk, part, m0 + row0, n0, a_base + Min(m0 + row0, tk.g.M - 1), c, wg, ahead,
                       buffer);
    const Value last = (u.k_end - 1).To(i64);
    // A stage's wgmma group into `into` (a tile's first stage also writes the last tile's C out
    // under it); the scales' work before it (TwoAhead: the factors of `set`, then `set` loaded
    // again for two stages on). Returns the ring's slot.
    auto ahead = [&](const Value& kb) { return Min(kb.To(i64), last); };
    auto issue = [&](const Value& kb, bool first, WgmmaAccumulator& into, const Regs* set,
                     bool continued = false) {
      if (set) {
        factors.Use(*set);
        factors.LoadInto(*set, ahead(kb + 2));
      }
      Value s = tk.ring.Acquire(at);
      k.WgmmaFence();
      for (int kk = 0; kk < BK; kk += 32)
        k.Wgmma(into, {.a = {tk.sA.Stage(s)},
                       .a_row0 = row0,
                       .b = {tk.sB.Stage(s)},
                       .k0 = kk,
                       .accumulate = kk != 0 || continued});
      k.WgmmaCommit();
      factors.Stage(kb.To(i64), last);
      if (first && under_first) k.If(epilogue.pending()[0] == 1, [&] { epilogue.WriteOut(); });
      return s;
    };
    // The oldest group in flight waited for (`pending` newer ones may stay), its slot freed, and
    // its partial sums in `from` promoted (the unit's first stage starts acc).
    auto finish = [&](const Value& s, bool first, WgmmaAccumulator& from, int pending) {
      k.WgmmaWait(pending);
      tk.ring.Release(s, c);
      factors.Ready();
      for (int i = 0; i < BN / 2; ++i) {
        Value p = from[i].Load();
        if (factors.PerStage())
          acc[i] = first ? p * factors[i] : Fma(p, factors[i], acc[i].Load());
        else
          acc[i] = first ? p : p + acc[i].Load();
      }
    };
    auto stage = [&](const Value& kb, bool first, const Regs* set = nullptr) {
      finish(issue(kb, first, part, set), first, part, 0);
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
    } else if (paired) {
      // After the first stage, two groups at a time: the first promoted under the second.
      stage(u.k_begin, true);
      k.For(u.k_begin + 1, u.k_end - 1, 2, [&](Value kb) {
        Value s0 = issue(kb, false, part, nullptr), s1 = issue(kb + 1, false, part2, nullptr);
        finish(s0, false, part, 1);
        finish(s1, false, part2, 0);
      });
      k.If((u.k_end - u.k_begin) % 2 == 0, [&] { stage(u.k_end - 1, false); });
    } else if (!factors.PerStage()) {
      // Tensorwise and rowwise in 128-row tiles: after the first stage, kGrouped stages' groups
      // into one partial accumulator, promoted once; each slot freed as soon as its group
      // completes; the stages past the last whole group one at a time.
      stage(u.k_begin, true);
      const Value grouped_end = u.k_begin + 1 + (u.k_end - u.k_begin - 1) / kGrouped * kGrouped;
      k.For(u.k_begin + 1, grouped_end, kGrouped, [&](Value kb) {
        std::vector<Value> slots;
        for (int j = 0; j < kGrouped; ++j)
          slots.push_back(issue(kb + j, false, part, nullptr, /*continued=*/j > 0));
        for (int j = 0; j + 1 < kGrouped; ++j) {
          k.WgmmaWait(kGrouped - 1 - j);
          tk.ring.Release(slots[j], c);
        }
        finish(slots.back(), false, part, 0);
      });
      k.For(grouped_end, u.k_end, 1, [&](Value kb) { stage(kb, false); });
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
