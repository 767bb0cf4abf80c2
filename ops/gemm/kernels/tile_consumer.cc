// The tile kernels' consumers: for each work unit, the mainloop over its k range (a wgmma group a
// stage, the group before waited for and its stage freed), a split tile's parts summed by the part
// that ends last, then the epilogue, the packed tile written under the next unit's first group.
#include "ops/gemm/kernels/tile_epilogue.h"
#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {

void FinishTileUnit(TileKernel& tk, WgmmaAccumulator& acc, TileEpilogue& epilogue, const Value& m0,
                    const Value& n0, const examples::WorkUnit& u, const Value& c, const Value& wg,
                    const Value& row0) {
  Kernel& k = tk.k;
  if (tk.shape.grouped()) {  // whole tiles: through C's map where inside the group
    epilogue.SetColumnEnd(u.n_end);
    return k.If(
        n0 + tk.shape.bn <= u.n_end, [&] { epilogue.Pack(m0, n0); },
        [&] {
          epilogue.StoreDirect(m0, n0);
          epilogue.NothingPending();
        });
  }
  auto finish = [&] {
    if (tk.shape.direct_out())
      tk.shape.epi().swiglu ? epilogue.StoreSwiglu(m0, n0) : epilogue.StoreDirect(m0, n0);
    else
      epilogue.Pack(m0, n0);
  };
  // A split tile's share: only the part that completes it writes C.
  Regs writes = k.Registers(Type::Of(i32), 1);
  writes[0] = k.I32(1);
  const int consumers = tk.shape.consumers(), cluster = tk.shape.cluster;
  k.If(u.slot != -1, [&] {
    Value last = examples::ReducePartials(
        k, acc.regs(), tk.shape.bn / 2, u, tk.partials, tk.counters, tk.rank * consumers + wg,
        cluster * consumers, c, 128, wg + tk.shape.reduce_barrier(), tk.last_flags.At(wg, 0),
        [&](int r) { return m0 + row0 + acc.Row(r / 2) < tk.g.M; });
    writes[0] = Select(last, k.I32(1), k.I32(0));
  });
  k.If(writes[0] == 1, finish, [&] { epilogue.NothingPending(); });
}

void RunTileConsumer(TileKernel& tk, const Value& t) {
  Kernel& k = tk.k;
  const int BN = tk.shape.bn, BK = tk.shape.bk();
  const examples::TmaGemmOperands& g = tk.g;
  k.WaitForPriorGrids();
  Value c = t % 128, wg = t / 128, lane = c % 32, row0 = wg * 64;
  WgmmaAccumulator acc = k.WgmmaAcc(BN);
  Pipeline::Cursor at = tk.ring.Start();
  Regs held = k.Registers(Type::Of(i32), 1);  // the stage the newest wgmma group reads
  auto mma = [&](bool first) {
    Value s = tk.ring.Acquire(at);
    k.WgmmaFence();
    for (int kk = 0; kk < BK; kk += 16)
      k.Wgmma(acc, {.a = {tk.sA.Stage(s), g.a_mn, BK},
                    .a_row0 = row0,
                    .b = {tk.sB.Stage(s), g.b_mn, BK},
                    .k0 = kk,
                    .accumulate = !(first && kk == 0)});
    k.WgmmaCommit();
    return s;
  };
  TileEpilogue epilogue(tk, acc, c, wg, lane, row0);
  auto write_out = [&] { epilogue.WriteOut(); };
  const bool under_first = tk.shape.out_under_first_group();
  tk.for_each_unit([&](Value m0, Value n0, const examples::WorkUnit& u) {
    if (!tk.shape.direct_out() && !under_first) k.If(epilogue.pending()[0] == 1, write_out);
    held[0] = mma(true);
    if (under_first) k.If(epilogue.pending()[0] == 1, write_out);  // under the group just issued
    k.For(u.k_begin * BK + BK, u.k_end * BK, BK, [&](Value) {
      Value s = mma(false);
      k.WgmmaWait(1);  // the previous group has retired: its stage is free
      tk.ring.Release(held[0], c);
      held[0] = s;
    });
    k.WgmmaWait(0);
    tk.ring.Release(held[0], c);
    FinishTileUnit(tk, acc, epilogue, m0, n0, u, c, wg, row0);
  });
  if (!tk.shape.direct_out()) k.If(epilogue.pending()[0] == 1, write_out);
  k.If(c == 0, [&] { k.BulkWait(0); });
}

}  // namespace kiln::ops
