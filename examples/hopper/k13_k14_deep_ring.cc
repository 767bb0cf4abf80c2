// Beyond fast.cu: kernel 12 with a deeper ring (k13), then with its epilogue hidden (k14).
// k13: a 4-stage ring, room for the fourth 48 KB stage coming from the epilogue: each consumer
// writes its 64x256 half in two 64x128 pieces through one 16 KB buffer, 128B-swizzled instead of
// padded (the swizzle spreads stmatrix's rows over the banks; the TMA store undoes it). In the
// mainloop a consumer issues stage s's wgmmas, then waits only for stage s-1's group
// (wait_group 1) and releases that stage, so the tensor cores never drain between stages.
// k14: when a tile's last group retires, each consumer packs its accumulator to bf16 in
// registers (64 of them, freeing the 128 accumulators), issues the next tile's first group, and
// only then writes the packed tile out while the tensor cores work on that group.
// The GEMM entry point's kernels grow from this one (ops/gemm/kernels/tile_sm90.cc).
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CLUSTER = 2, SLOTS = 128;
constexpr int CONSUMERS = BM / 64, GROUPS = 128 / CLUSTER, PIECE_N = 128;

absl::StatusOr<KernelDef> Build(const char* name, bool overlap_epilogue) {
  Kernel k(name, sm90a(), {128 * (1 + CONSUMERS)});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM,
                                         .bn = BN,
                                         .bk = BK,
                                         .rank = 3,
                                         .by_value = true,
                                         .c_box_rows = PIECE_N,
                                         .c_swizzle = true,
                                         .divide_m = BM * CLUSTER});
  Value table = k.ScheduleTableParam("schedule", GemmTiles(BM * CLUSTER, BN, GROUPS, SLOTS));
  k.Grid("128");
  k.ClusterDims({CLUSTER, 1, 1});
  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  SmemTile sC[CONSUMERS];  // one 64x128 piece buffer per consumer, [n][m]
  for (int x = 0; x < CONSUMERS; ++x) sC[x] = k.SmemSwizzled(bf16, PIECE_N, 64, Swizzle::k128B);
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  auto tile_walk = ScheduledTiles(k, table, SLOTS);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  // body(m0, n0): this CTA's rows of each tile the schedule deals its cluster.
  auto for_each_tile = [&](const std::function<void(Value, Value)>& body) {
    tile_walk([&](Value mi, Value ni) { body(mi * (BM * CLUSTER) + rank * BM, ni * BN); });
  };
  k.If(tid == 0, [&] { ring.Init(); });
  k.ClusterSync();

  MulticastProducer(k, ring, g, sA, sB, BK, rank, ForEachTile([&](const TileBody& body) {
                      for_each_tile([&](Value m0, Value n0) { body(m0, n0); });
                    }),
                    CLUSTER);
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    Value c = t % 128, wg = t / 128, lane = c % 32, row0 = wg * 64;
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    Pipeline::Cursor at = ring.Start();
    Regs held = k.Registers(Type::Of(i32), 1);  // the stage the newest wgmma group reads
    auto mma = [&](bool first) {
      Value s = ring.Acquire(at);
      k.WgmmaFence();
      for (int kk = 0; kk < BK; kk += 16)
        k.Wgmma(acc, {.a = sA.Stage(s),
                      .a_row0 = row0,
                      .b = sB.Stage(s),
                      .k0 = kk,
                      .accumulate = !(first && kk == 0)});
      k.WgmmaCommit();
      return s;
    };
    Regs packed = k.Registers(Type::Of(i32), BN / 4);  // the tile to write, pairs of bf16
    Regs pending = k.Registers(Type::Of(i32), 3);      // {tile to write?, its m0, its n0}
    // The packed tile out in 64x128 pieces: stmatrix (transposed) into the swizzled buffer, then
    // one TMA store, once the store before has read the buffer.
    auto write_out = [&] {
      WritePackedTile(k, g, sC, CONSUMERS, BN, PIECE_N, wg, c, lane, packed, pending);
    };
    auto pack = [&](Value m0, Value n0) {  // the accumulator to bf16 pairs, then (k13) out
      for (int p = 0; p < BN / 4; ++p) {
        Value x = acc[2 * p], y = acc[2 * p + 1];
        packed[p] = k.Vector({x.To(bf16), y.To(bf16)}).Bitcast(Type::Of(i32));
      }
      pending[0] = 1;
      pending[1] = m0;
      pending[2] = n0;
      if (!overlap_epilogue) write_out();
    };
    for_each_tile([&](Value m0, Value n0) {
      held[0] = mma(true);
      if (overlap_epilogue) k.If(pending[0] == 1, write_out);  // k14: under the group just issued
      k.For(BK, g.K, BK, [&](Value) {
        Value s = mma(false);
        k.WgmmaWait(1);  // the previous group has retired: its stage is free
        ring.Release(held[0], c);
        held[0] = s;
      });
      k.WgmmaWait(0);
      ring.Release(held[0], c);
      pack(m0, n0);
    });
    if (overlap_epilogue) k.If(pending[0] == 1, write_out);
    k.If(c == 0, [&] { k.BulkWait(0); });
  });
  k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(
    k13, "hopper/k13",
    "kiln: k12 with a 4-stage ring, wgmma groups in flight across stages, swizzled C pieces",
    [] { return Build("hopper/k13", false); });
KILN_EXAMPLE_VARIANT(
    k14, "hopper/k14",
    "kiln: k13 with the epilogue overlapped with the next tile's first wgmma group",
    [] { return Build("hopper/k14", true); });
}  // namespace kiln::examples
