// Grouped GEMMs' work walk (Mixture-of-Experts layers): the tile kernel over groups of C's columns,
// each group's tiles multiplied by its own rows of A, with no table from the host. The group sizes
// live in device memory (a router's output), so the launch needs no host sync and a CUDA graph can
// hold it: every CTA counts each group's column tiles at its start (a block-wide prefix sum into
// shared memory) and finds a unit's group by binary search in those counts.
#include "kiln/warp.h"
#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {
namespace {

// Group `grp`'s columns of C, [begin, end): a contiguous group from the end of the one before to
// its own end, a masked group from its block's start for its count (at most the capacity, N /
// groups). The sizes are signed: clamped into [0, N] (a negative count or end is 0) and never
// reversed (an end before its begin makes the group empty), so that bad sizes read and write
// nothing out of bounds.
std::pair<Value, Value> GroupColumns(Kernel& k, const TileShape& shape, const GroupedWork& w,
                                     const Value& N, const Value& grp) {
  GlobalTensor rows(w.rows, {}, {k.I32(1)});
  Value own = LoadGlobal(rows.At({grp}), 1).To(s32), zero = k.I32(0).To(s32);
  if (shape.grouping == Grouping::kMasked) {
    Value capacity = N / w.groups, begin = grp * capacity;
    return {begin, begin + Min(Max(own, zero), capacity.To(s32)).To(i32)};
  }
  Value before =
      LoadGlobal(rows.At({Select(grp > 0, grp - 1, k.I32(0))}), 1, {.mask = grp > 0, .fill = 0})
          .To(s32);
  Value begin = Min(Max(before, zero), N.To(s32));
  return {begin.To(i32), Min(Max(own, begin), N.To(s32)).To(i32)};
}

Value TilesOf(const TileShape& shape, const std::pair<Value, Value>& columns) {
  return (columns.second - columns.first + (shape.bn - 1)) / shape.bn;
}

}  // namespace

GroupedWork DeclareGroupedWork(Kernel& k, const TileShape& shape) {
  GroupedWork w;
  w.groups = k.I32Param("groups");
  w.rows = k.PtrParam(shape.grouping == Grouping::kMasked ? "group_counts" : "group_ends", i32);
  w.tiles_before = k.Smem(i32, kMaxGroups + 1, 1);
  w.sums = k.Smem(i32, 32, 1);
  return w;
}

// Thread t counts the tiles of groups [t * per, (t + 1) * per); a warp's inclusive scan and the
// warps' sums before it give the tiles before its first group, from which it writes its groups'
// entries. The last thread's inclusive sum is the total.
void CountGroupTiles(Kernel& k, const TileShape& shape, const GroupedWork& w,
                     const examples::TmaGemmOperands& g, const Value& tid, int threads) {
  k.WaitForPriorGrids();  // the sizes may come from the kernel before (a router)
  Value groups = Min(w.groups, kMaxGroups);
  Value per = (groups + (threads - 1)) / threads, lo = Min(tid * per, groups),
        hi = Min(lo + per, groups), lane = tid % 32, warp = tid / 32;
  Regs own = k.Registers(Type::Of(i32), 1);
  own[0] = k.I32(0);
  k.For(lo, hi, 1,
        [&](Value grp) { own[0] += TilesOf(shape, GroupColumns(k, shape, w, g.N, grp)); });
  Value sum = own[0];
  for (int d = 1; d < 32; d *= 2) {
    Value up = ShflUp(sum, d);
    sum = sum + Select(lane >= d, up, k.I32(0));
  }
  k.If(lane == 31, [&] { k.Store(w.sums.At(warp, 0), sum); });
  k.SyncThreads();
  Value base = k.I32(0);
  for (int x = 0; x < threads / 32; ++x)
    base = base + Select(warp > x, k.Load(w.sums.At(x, 0)), k.I32(0));
  Regs before = k.Registers(Type::Of(i32), 1);
  before[0] = base + sum - own[0];
  k.For(lo, hi, 1, [&](Value grp) {
    k.Store(w.tiles_before.At(grp, 0), Value(before[0]));
    before[0] += TilesOf(shape, GroupColumns(k, shape, w, g.N, grp));
  });
  k.If(tid == threads - 1, [&] { k.Store(w.tiles_before.At(groups, 0), base + sum); });
}

// Units go in bands of kBand column tiles, the band's m pairs in turn, its column tiles fastest:
// the clusters in flight read a few rows of A (the weights) and a few column tiles of B, so that
// each group's weights come from DRAM about once per band rather than once per column tile
// (docs/perf/2026-11-29-grouped-gemm.md).
constexpr int kBand = 8;

void ForEachGroupedUnit(Kernel& k, const TileShape& shape, const GroupedWork& w,
                        const examples::TmaGemmOperands& g, const Value& rank,
                        const std::function<void(Value, Value, const examples::WorkUnit&)>& body) {
  const int BM = shape.bm, BN = shape.bn, CLUSTER = shape.cluster;
  Value groups = Min(w.groups, kMaxGroups);
  Value m_pairs = ((g.M + (BM - 1)) / BM + (CLUSTER - 1)) / CLUSTER;
  Value column_tiles = k.Load(w.tiles_before.At(groups, 0));
  Value total = m_pairs * column_tiles;
  Value k_tiles = (g.K + (shape.bk() - 1)) / shape.bk();
  Regs unit = k.Registers(Type::Of(i32), 1), lo = k.Registers(Type::Of(i32), 2);
  unit[0] = k.ClusterIdx();
  k.While([&] { return Value(unit[0]) < total; },
          [&] {
            Value band = unit[0] / (m_pairs * kBand), at = unit[0] % (m_pairs * kBand);
            Value width = Min(column_tiles - band * kBand, kBand);  // the last band's may be less
            Value pair = at / width, column_tile = band * kBand + at % width;
            // The last group whose first tile is at or before column_tile: tiles_before[lo] <=
            // column_tile < tiles_before[hi] (empty groups skipped: their entry equals the next).
            lo[0] = k.I32(0), lo[1] = groups;
            k.While([&] { return Value(lo[1]) - lo[0] > 1; },
                    [&] {
                      Value mid = (Value(lo[0]) + lo[1]) / 2;
                      Value at_or_before = k.Load(w.tiles_before.At(mid, 0)) <= column_tile;
                      lo[0] = Select(at_or_before, mid, Value(lo[0]));
                      lo[1] = Select(at_or_before, Value(lo[1]), mid);
                    });
            Value grp = lo[0];
            auto [begin, end] = GroupColumns(k, shape, w, g.N, grp);
            Value n0 = begin + (column_tile - k.Load(w.tiles_before.At(grp, 0))) * BN;
            Value m0 = (pair * CLUSTER + rank) * BM;
            examples::WorkUnit u{.m_index = pair,
                                 .n_index = column_tile,
                                 .k_begin = k.I32(0),
                                 .k_end = k_tiles,
                                 .slot = k.I32(-1),
                                 .part = k.I32(0),
                                 .parts = k.I32(1),
                                 .a_row = grp * g.M + m0,
                                 .n_end = end};
            body(m0, n0, u);
            unit[0] += k.GridDim() / CLUSTER;
          });
}

}  // namespace kiln::ops
