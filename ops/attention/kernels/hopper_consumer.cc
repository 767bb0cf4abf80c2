// attention/hopper's consumers: the warpgroups' turns at issuing their GEMMs, the steps of a tile
// (S = Q K_j with the P V before it, the softmax under the P V, O rescaled once it retires) and
// the walk over the CTA's tiles, a tile at a time or as one stream of steps.
#include "ops/attention/kernels/hopper_consumer.h"

#include <cmath>

namespace kiln::examples::attention_sm90 {

void RunConsumers(HopperAttention& h, const Value& t, bool stream_tiles) {
  HopperConsumer consumer(h, t);
  consumer.Run(stream_tiles);
}

// The warpgroups take turns to issue their GEMMs, in a ring that runs on across tiles
// (warpgroup w waits at named barrier 1 + w, then signals the next one's); warpgroup 0 issues
// first. One warpgroup (split-KV's decode tiles) takes no turns.
HopperConsumer::HopperConsumer(HopperAttention& h, const Value& t)
    : h_(h),
      k_(h.k),
      c_(t % 128),
      wg_(ConsumerWarpgroup(h.a, t)),
      row0_(wg_ * 64),
      scale_log2_(h.p.scale * M_LOG2E),
      q_at_(h.q_ring.Start()),
      k_at_(h.k_ring.Start()),
      v_at_(h.v_ring.Start()),
      v_late_(h.a.persistent),
      zeroes_v_(wg_ == 0) {
  if (h_.W > 1) k_.If(wg_ == h_.W - 1, [&] { k_.NamedBarrierArrive(1, 256); });
  n_ = k_.Registers(Type::Of(i32), 1);
  n_first_ = k_.I32(0);
  skv_ = h.p.Skv;
  shift_ = h.shift;
  seq0_ = k_.I32(0);
  rows_ = h.p.S;
  now_ = k_.Registers(Type::Of(i32), 2);
}

void HopperConsumer::Run(bool stream_tiles) {
  if (!stream_tiles)
    TileByTile();
  else
    Streamed();
  // Takes the last warpgroup's last signal: barrier 1 ends balanced.
  if (h_.W > 1) k_.If(wg_ == 0, [&] { MyTurn(); });
}

void HopperConsumer::MyTurn() {
  if (h_.W > 1) k_.NamedBarrier(wg_ + 1, 256);
}

void HopperConsumer::TheirTurn() {
  if (h_.W > 1) k_.NamedBarrierArrive((wg_ + 1) % h_.W + 1, 256);
}

// The next tile: its Q stage, then its number from the slot beside it.
void HopperConsumer::Take() {
  now_[1] = h_.q_ring.Acquire(q_at_);
  now_[0] = k_.Load(h_.tile_slots.At(0, n_[0] % 4));
}

// In the persistent kernel a stage held in a register across its tile loop is no longer known
// warp-uniform and its descriptors leave uniform registers (docs/perf/2026-11-24-attention.md,
// step 7): there V's stage is acquired in the step that reads it.
Value HopperConsumer::VStage() { return v_late_ ? h_.v_ring.Acquire(v_at_) : v_held_[0]; }

void HopperConsumer::IssueS(Value ks) {
  // K's span kk / 64 starts at row span * BN, or, in 8-row groups of every span, at the first
  // group's span * 8 (HopperAttention::k_groups).
  const WgmmaTile k_tile =
      h_.k_groups ? WgmmaTile::Grouped(h_.sK.Stage(ks), 8 * h_.SPANS) : WgmmaTile(h_.sK.Stage(ks));
  for (int kk = 0; kk < h_.D; kk += 16)
    k_.Wgmma(s_, {.a = sQs_,
                  .a_row0 = kk / 64 * h_.BM + row0_,
                  .b = k_tile,
                  .b_row0 = kk / 64 * (h_.k_groups ? 8 : h_.BN),
                  .k0 = kk % 64,
                  .accumulate = kk > 0});
  k_.WgmmaCommit();
}

void HopperConsumer::IssuePv(Value vs) {
  const int block = h_.v_block, rows = h_.SPANS * block;  // (HopperAttention::v_block)
  for (int kk = 0; kk < h_.BN; kk += 16)
    k_.Wgmma(o_, {.a_regs = {p_frag_[kk / 4], p_frag_[kk / 4 + 1], p_frag_[kk / 4 + 2],
                             p_frag_[kk / 4 + 3]},
                  .b = {h_.sV.Rows(kk / block * rows, rows).Stage(vs), /*mn_major=*/true, block},
                  .k0 = kk % block});
  k_.WgmmaCommit();
}

// The steps of one tile: in step j a warpgroup issues S = Q K_j and O += P_{j-1} V_{j-1}
// together (FA3's order), runs the softmax of S_j while P_{j-1} V_{j-1} is still on the tensor
// cores, then rescales O once that group retires. P lives in registers as the next wgmma's A
// fragments, so S's accumulator is free for the next tile. The warpgroups take turns to issue, so
// one's softmax runs under the others' GEMMs.

void HopperConsumer::FirstStep() {  // S_0 alone
  MyTurn();
  Value ks = h_.k_ring.Acquire(k_at_);
  k_.WgmmaFence();
  IssueS(ks);
  TheirTurn();
  k_.WgmmaWait(0);
  h_.k_ring.Release(ks, c_);
  SoftmaxOf(n_first_ * h_.BN);
  PackP();
}

// A step with both GEMMs: S of the key tile at n0, and the P V before it. `before_softmax` runs
// once S is in, `after_pv` once the P V has retired.
void HopperConsumer::PairedStep(Value n0, const std::function<void()>& before_softmax,
                                const std::function<void()>& after_pv,
                                const std::function<void(Value)>& before_issue) {
  MyTurn();
  Value ks = h_.k_ring.Acquire(k_at_);
  Value vs = VStage();
  if (before_issue) before_issue(vs);
  k_.WgmmaFence();
  IssueS(ks);
  IssuePv(vs);
  TheirTurn();
  k_.WgmmaWait(1);  // S is in; the P V may still run
  h_.k_ring.Release(ks, c_);
  before_softmax();
  SoftmaxOf(n0);
  k_.WgmmaWait(0);
  h_.v_ring.Release(vs, c_);
  after_pv();
  PackP();
}

void HopperConsumer::LaterSteps(Value n_tiles) {
  k_.For(1, n_tiles, 1, [&](Value j) {
    PairedStep((n_first_ + j) * h_.BN, [] {}, [&] { RescaleO(); });
    if (!v_late_) v_held_[0] = h_.v_ring.Acquire(v_at_);
  });
}

void HopperConsumer::LastPv() {  // the tile's last P V alone
  MyTurn();
  Value vs = VStage();
  ZeroLastV(vs);
  k_.WgmmaFence();
  IssuePv(vs);
  TheirTurn();
  k_.WgmmaWait(0);
  h_.v_ring.Release(vs, c_);
}

// Causally ("wgdiag"), the key tiles up to the last diagonal of the 64 rows from `row0` of the
// tile (at least the first): past it those rows' scores are all masked, so a warpgroup's GEMMs
// there would add nothing.
Value HopperConsumer::OwnTiles(const Value& row0) {
  Value end = Max(Min(skv_.To(s32), (m0_ + row0 + 64).To(s32) + shift_), 0).To(i32);
  return Max(Min((end + (h_.BN - 1)) / h_.BN - n_first_, n_tiles_), k_.I32(1));
}

// The steps of the key tiles past this warpgroup's diagonal: its turns taken (the ring of turns
// counts every warpgroup's) and each tile's K and V stages freed once they are full (freed
// before, the release could complete the stage's previous use).
void HopperConsumer::PassSteps(Value count) {
  k_.For(0, count, 1, [&](Value) {
    MyTurn();
    TheirTurn();
    Value ks = h_.k_ring.Acquire(k_at_);
    h_.k_ring.Release(ks, c_);
    Value vs = h_.v_ring.Acquire(v_at_);
    h_.v_ring.Release(vs, c_);
  });
}

// The first warpgroup in turn that reads the tile's last V stage zeroes its rows past the length;
// the others' P V follow it in the ring of turns, its writes fenced for the async proxy before it
// passes the turn on.
void HopperConsumer::ZeroLastV(Value vs) {
  if (h_.a.per_sequence() || h_.a.varlen) k_.If(zeroes_v_, [&] { ZeroVPastLength(vs); });
}

// A sequence of its own length ends inside the cache, a packed one inside the next sequence's
// rows: the V rows of its last key tile past its length hold whatever is there (NaN, in a cache
// never written, or another sequence's inf), zeroed before the P V (the masked scores' K rows
// need nothing).
void HopperConsumer::ZeroVPastLength(Value vs) {
  Value last_n0 = (n_first_ + n_tiles_ - 1) * h_.BN;
  ZeroRowsFrom(k_, h_.sV.Stage(vs), h_.BN, h_.SPANS, h_.in, skv_ - last_n0, c_, 128, wg_ + 1 + h_.W,
               h_.v_block);  // (the first warpgroup in turn alone: ZeroLastV)
}

// A tile at a time: its state fresh, its steps, its end.
void HopperConsumer::TileByTile() {
  k_.While(
      [&] {
        Value more = n_[0] == 0;
        if (h_.a.persistent)
          Take();
        else
          k_.If(more, [&] { Take(); });
        n_[0] = n_[0] + 1;
        return h_.a.persistent ? now_[0] < h_.tile_count : more;
      },
      [&] {
        QueryTile tile = h_.TileOf(now_[0]);
        Value qs = now_[1];
        m0_ = tile.m0;
        KeysOf(tile);
        RowsOf(tile);
        FreshState();  // zeroed for each tile
        sQs_ = h_.sQ.Stage(qs);
        k_.If(tile.n_tiles > 0, [&] {
          Value own = tile.n_tiles;
          zeroes_v_ = wg_ == 0;
          if (h_.a.own_diagonal == 1) {
            // The warpgroups' own tiles grow with their rows: the first that reads the last V
            // stage is the one whose own tiles reach it and whose predecessor's do not.
            own = OwnTiles(row0_);
            zeroes_v_ =
                (own == tile.n_tiles) & ((wg_ == 0) | (OwnTiles(row0_ - 64) < tile.n_tiles));
          }
          FirstStep();
          if (!v_late_) {
            v_held_ = k_.Registers(Type::Of(i32), 1);
            v_held_[0] = h_.v_ring.Acquire(v_at_);
          }
          LaterSteps(own);
          LastPv();
          if (h_.a.own_diagonal == 1) PassSteps(tile.n_tiles - own);
        });
        StoreO(m0_, tile.out_head, qs, FinishRows(m0_, tile.out_head));
        if (h_.a.split && h_.W == 1) FoldParts(m0_, tile.out_head);
      });
}

// The tile's keys, as its softmax, its own diagonal and V's zeroing read them.
void HopperConsumer::KeysOf(const QueryTile& tile) {
  n_first_ = tile.n_first;
  skv_ = tile.skv;
  shift_ = tile.shift;
  n_tiles_ = tile.n_tiles;
}

// The tile's rows, as its end reads them (packed sequences: its sequence's).
void HopperConsumer::RowsOf(const QueryTile& tile) {
  seq0_ = tile.seq0;
  rows_ = tile.rows;
}

// One stream of steps. The first tile starts alone; in each later one, step 0 issues S_0 with the
// tile before's last P V and runs that tile's epilogue under the other warpgroups' GEMMs; the
// last tile's last P V goes alone. Until then the tile before's keys and rows stand: V's rows past
// its length are zeroed in step 0's turn, before that P V, and its end reads its rows. (Only
// without a mask, where every tile sees a key tile (HopperAttention::streams): a branch per tile
// between the two kinds of step 0 would leave the rings' positions in vector registers, and the
// wgmma descriptors with them.)
void HopperConsumer::Streamed() {
  Regs prev = k_.Registers(Type::Of(i32), 2);  // the tile before: its number and Q stage
  auto start_tile = [&] {
    QueryTile tile = h_.TileOf(now_[0]);
    m0_ = tile.m0;
    sQs_ = h_.sQ.Stage(now_[1]);
    return tile;
  };
  auto end_steps = [&] {
    prev[0] = now_[0];
    prev[1] = now_[1];
  };
  Take();
  n_[0] = n_[0] + 1;
  k_.If(now_[0] < h_.tile_count, [&] {
    FreshState();
    QueryTile tile = start_tile();
    KeysOf(tile);
    RowsOf(tile);
    FirstStep();
    LaterSteps(tile.n_tiles);
    end_steps();
    k_.While(
        [&] {
          Take();
          n_[0] = n_[0] + 1;
          return now_[0] < h_.tile_count;
        },
        [&] {
          QueryTile before = h_.TileOf(prev[0]), tile = start_tile();
          KeysOf(before);
          RowsOf(before);
          Inverse inv;
          PairedStep(
              k_.I32(0),
              [&] {  // the tile before's rows finished, the new tile's started
                inv = FinishRows(before.m0, before.out_head);
                for (int half = 0; half < 2; ++half) {
                  row_max_[half] = k_.F32(-INFINITY);
                  row_sum_[half] = k_.F32(0);
                }
              },
              [&] {  // its O out, then zero for the new tile
                StoreO(before.m0, before.out_head, prev[1], inv);
                for (int i = 0; i < h_.D / 2; ++i) o_[i] = k_.F32(0);
                RowsOf(tile);
              },
              [&](Value vs) {  // the tile before's last V, then the new tile's keys
                ZeroLastV(vs);
                KeysOf(tile);
              });
          LaterSteps(tile.n_tiles);
          end_steps();
        });
    QueryTile last = h_.TileOf(prev[0]);
    KeysOf(last);
    RowsOf(last);
    LastPv();
    StoreO(last.m0, last.out_head, prev[1], FinishRows(last.m0, last.out_head));
  });
}

}  // namespace kiln::examples::attention_sm90
