// attention/hopper's tile end, per consumer warpgroup, in two parts: the rows' lse stored and
// 1 / sum returned (from the sums and maxima as they stand), then O / sum through this
// warpgroup's rows of the tile's Q stage (its own wgmmas, the only readers, have retired) and a
// clipped TMA store; the stage is free for the next Q once the store has read it.
#include <cmath>

#include "kiln/memory_ops.h"
#include "kiln/rows.h"
#include "kiln/warp.h"
#include "ops/attention/kernels/combine.h"
#include "ops/attention/kernels/hopper_consumer.h"

namespace kiln::examples::attention_sm90 {

HopperConsumer::Inverse HopperConsumer::FinishRows(Value tile_m0, Value q_head) {
  const Value& S = rows_;  // (varlen: the sequence's; lse [Hq, T], its rows from seq0_)
  Value lse_rows = h_.a.varlen ? h_.p.T : h_.p.S;
  Inverse inv;
  const RowPair totals = WholeRows({row_sum_[0], row_sum_[1]});
  for (int half = 0; half < 2; ++half) {
    const RowEnd end = EndOfRow(k_, row_max_[half], totals[half]);  // NaN stays NaN
    inv.of[half] = end.inv;
    Value row = tile_m0 + row0_ + o_.Row(half);
    const Value& lse_value = end.lse;
    Value at = q_head.To(i64) * lse_rows.To(i64) + (seq0_ + row).To(i64);
    k_.If((c_ % 4 == 0) & (row < S), [&] { k_.Store(h_.p.lse + at, lse_value); });
  }
  return inv;
}

void HopperConsumer::StoreO(Value tile_m0, Value q_head, Value qs, const Inverse& inv) {
  ScaleRows(o_, inv.of);  // O / sum
  // A part of a split tile (one warpgroup): O_parts [P * B * Hq, S, D] at head q_head, from
  // registers, so that the merge's loads (FoldParts) need no proxy fence after them.
  if (h_.a.split && h_.W == 1)
    return StoreRows(tile_m0, qs, h_.fold.o_parts, [&](const Value& row) {
      return (q_head.To(i64) * h_.p.S.To(i64) + row.To(i64)) * h_.D;
    });
  if (!h_.a.varlen) return StoreBoxes(tile_m0, q_head, qs, tile_m0);
  // Packed sequences: a tile inside its sequence goes out in boxes at its packed rows; the
  // sequence's last tile, partial, row by row (a box would write the next sequence's rows).
  k_.If(
      tile_m0 + h_.BM <= rows_, [&] { StoreBoxes(tile_m0, q_head, qs, seq0_ + tile_m0); },
      [&] {
        StoreRows(tile_m0, qs, h_.p.o_ptr, [&](const Value& row) {  // O [T, Hq, D]
          return ((seq0_ + row).To(i64) * h_.p.Hq.To(i64) + q_head.To(i64)) * h_.D;
        });
      });
}

void HopperConsumer::StoreBoxes(Value tile_m0, Value q_head, Value qs, Value row0) {
  const int BM = h_.BM, W = h_.W;
  SmemTile out = h_.sQ.Stage(qs);
  const std::vector<Value> packed = PackPairs(o_, h_.in);
  for (int p = 0; p < h_.D / 4; ++p) {
    const int span = p / 2 * 8 / 64;  // which 64 columns of D this pair lies in
    k_.Store(out.At(span * BM + row0_ + o_.Row(p), o_.Col(p) - span * 64), packed[p]);
  }
  k_.FenceProxyAsync();
  k_.NamedBarrier(wg_ + 1 + W, 128);
  for (int x = 0; x < W; ++x)
    k_.If((c_ == 0) & (wg_ == x), [&] {
      for (int span = 0; span < h_.SPANS; ++span)
        k_.TmaStore(h_.p.to, out.Rows(span * BM + x * 64, 64),
                    h_.p.Box(row0 + x * 64, span, q_head, h_.p.Hq));
      k_.BulkCommit();
      k_.BulkWait(0, /*smem_reads_only=*/true);
      h_.q_ring.Release(qs, c_);
    });
}

// Row by row from registers: a packed sequence's last tile (a box of O would cross into the next
// sequence's rows) and a split tile's part. The Q stage is free once this warpgroup's wgmmas, its
// only readers, have retired (they have).
void HopperConsumer::StoreRows(Value tile_m0, Value qs, const Value& to,
                               const std::function<Value(const Value&)>& row_at) {
  const std::vector<Value> packed = PackPairs(o_, h_.in);
  for (int p = 0; p < h_.D / 4; ++p) {
    Value row = tile_m0 + row0_ + o_.Row(p);
    k_.If(row < rows_, [&] { k_.Store(to + (row_at(row) + o_.Col(p).To(i64)), packed[p]); });
  }
  // One thread releases the stage for the warpgroup: once all of it has passed the stage's wait
  // (a tile with no key has no wgmma or turn to hold the warps together, and a persistent walk's
  // next Q could otherwise land in the stage before a late warp has waited for this one).
  k_.NamedBarrier(wg_ + 1 + h_.W, 128);
  h_.q_ring.Release(qs, c_);
}

// Where the launcher asks (fold = 1): the parts of the tile count themselves in, and the last one
// (in any order: its merge reads the parts in part order, so the bytes do not depend on which)
// merges them into O_out and lse_out and puts the counter back for the next launch
// (threadfence-reduction's pattern: each thread's stores fenced before the count, the count's
// reader fenced before its loads).
void HopperConsumer::FoldParts(Value tile_m0, Value out_head) {
  const SplitFold& f = h_.fold;
  Value heads = h_.p.B * h_.p.Hq, head = out_head % heads;
  Value tile = head * h_.m_tiles + tile_m0 / h_.BM;  // (the launcher folds at most kFoldTiles)
  k_.If((f.on != 0) & (tile < kFoldTiles), [&] {
    const Value& P = h_.p.P;
    k_.FenceGpu();
    k_.NamedBarrier(wg_ + 1 + h_.W, 128);
    k_.If(c_ == 0, [&] { k_.Store(f.slot.At(0, 0), AtomicAdd(f.counters + tile.To(i64), 1)); });
    k_.NamedBarrier(wg_ + 1 + h_.W, 128);
    k_.If(k_.Load(f.slot.At(0, 0)) == P - 1, [&] {
      k_.FenceGpu();
      const int chunks = h_.D / 8;
      Value rows = Min(rows_ - tile_m0, k_.I32(h_.BM));
      k_.For(c_, rows * chunks, 128, [&](Value u) {
        Value row = head * h_.p.S + tile_m0 + u / chunks;
        MergePartsOfRow(k_, h_.in,
                        {f.o_parts, h_.p.lse, f.o_out, f.lse_out, heads * h_.p.S, P, k_.I32(h_.D),
                         /*written_in_this_launch=*/true},
                        row, u % chunks * 8);
      });
      k_.If(c_ == 0, [&] { k_.Store(f.counters + tile.To(i64), k_.I32(0)); });
    });
  });
}

}  // namespace kiln::examples::attention_sm90
