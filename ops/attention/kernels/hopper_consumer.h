// attention/hopper's consumer warpgroups (hopper.cc says the algorithm), as one object per thread
// of 128 * W: the warpgroups' turns, the tile walk (a tile at a time, or the persistent kernel's
// one stream of steps), the steps of a tile (hopper_consumer.cc), the online softmax
// (hopper_softmax.cc) and a tile's end (hopper_epilogue.cc).
#pragma once

#include <functional>

#include "kiln/rows.h"
#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples::attention_sm90 {

class HopperConsumer {
 public:
  // Thread `t`'s place: its warpgroup's rows, the three rings' cursors, and the registers of the
  // tile walk; the last warpgroup signals the first one's turn.
  HopperConsumer(HopperAttention& h, const Value& t);
  // The CTA's tiles, each on its own or (stream_tiles) as one stream of steps.
  void Run(bool stream_tiles);

 private:
  // 1 / sum of a thread's two rows.
  struct Inverse {
    RowPair of;
  };

  // hopper_consumer.cc: the turns, the steps of a tile, the tile walks.
  void MyTurn();
  void TheirTurn();
  void Take();
  Value VStage();
  void IssueS(Value ks);
  void IssuePv(Value vs);
  void FirstStep();
  // (before_issue: in the turn, with the P V's V stage, before the GEMMs go out.)
  void PairedStep(Value n0, const std::function<void()>& before_softmax,
                  const std::function<void()>& after_pv,
                  const std::function<void(Value)>& before_issue = {});
  void LaterSteps(Value n_tiles);
  void LastPv();
  Value OwnTiles(const Value& row0);
  void PassSteps(Value count);
  void ZeroLastV(Value vs);
  void ZeroVPastLength(Value vs);
  void KeysOf(const QueryTile& tile);
  void RowsOf(const QueryTile& tile);
  void TileByTile();
  void Streamed();

  // hopper_softmax.cc: the tile's state and the online softmax.
  void FreshState();
  void Softmax(Value n0, bool masked);
  void SoftmaxOf(Value n0);
  void RescaleO();
  void PackP();

  // hopper_epilogue.cc: a tile's end.
  Inverse FinishRows(Value tile_m0, Value q_head);
  void StoreO(Value tile_m0, Value q_head, Value qs, const Inverse& inv);
  // O / sum out through the tile's Q stage and TMA boxes whose first row is `row0` in O's map.
  void StoreBoxes(Value tile_m0, Value q_head, Value qs, Value row0);
  // This thread's pairs of the tile's rows inside its sequence, from registers, to `to` at
  // row_at(row) + column (varlen's last tile, a split tile's part); the Q stage then freed.
  void StoreRows(Value tile_m0, Value qs, const Value& to,
                 const std::function<Value(const Value&)>& row_at);
  void FoldParts(Value tile_m0, Value out_head);  // split

  HopperAttention& h_;
  Kernel& k_;
  Value c_, wg_, row0_;  // the thread in its warpgroup, the warpgroup, its first row of the tile
  Value scale_log2_;
  Pipeline::Cursor q_at_, k_at_, v_at_;
  Regs n_, now_;  // {tiles taken}, {tile, Q stage}
  // V_{j-1}'s stage: acquired at the end of step j - 1 (a CTA per tile; v_held_), or at the start
  // of step j in the persistent kernel (hopper_consumer.cc).
  bool v_late_;
  Regs v_held_;

  // The tile's state: its first query row (for the masks) and Q stage; the S and O accumulators;
  // per thread its two rows' running max (in scaled log2 units), its share of their sums, the
  // last rescale factor; P as the next wgmma's A fragments (bf16/f16 pairs, BN / 16 fragments).
  Value m0_, n_first_;           // (n_first_: its first key tile, 0 but in a part of a split tile)
  Value skv_, n_tiles_, shift_;  // its sequence's keys, its key tiles, its causal diagonal
  Value zeroes_v_;     // this warpgroup zeroes the last V stage's rows past the length (ZeroLastV)
  Value seq0_, rows_;  // its sequence's first row in packed tensors, its query rows
  SmemTile sQs_;
  WgmmaAccumulator s_, o_;
  Regs row_max_, row_sum_, alpha_, p_frag_;
};

}  // namespace kiln::examples::attention_sm90
