// The 8-bit tile kernels' scale factors, as one consumer thread holds them
// (tile_consumer_fp8.cc): the scalings' loads and where each waits.
#pragma once

#include <vector>

#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {

// One thread's scale factors: per register of its accumulator (pair i/2, column i%2 of it), for
// one k-tile (blockwise) or for the whole of K (tensorwise, rowwise).
class Fp8Factors {
 public:
  // `m0`: the consumer warpgroup's first row, `n0`: the tile's first column, `a_m0` the row of A
  // that m0 reads (a grouped GEMM's group's, else m0); `c` the thread of consumer warpgroup `wg`;
  // `ahead` two f32 registers and `buffer` an i32 one that outlive the unit's stages.
  Fp8Factors(TileKernel& tk, const WgmmaAccumulator& acc, const Value& m0, const Value& n0,
             const Value& a_m0, const Value& c, const Value& wg, const Regs& ahead,
             const Regs& buffer)
      : tk_(tk),
        acc_(acc),
        m0_(m0),
        n0_(n0),
        a_m0_(a_m0),
        c_(c),
        wg_(wg),
        ahead_(ahead),
        buffer_(buffer),
        mode_(tk.shape.variant.scaling) {}

  bool PerStage() const {
    return mode_ == examples::Fp8Scaling::kBlock || mode_ == examples::Fp8Scaling::kBlockT;
  }

  // Blockwise (A per row, B per 128x128: one block of B covers the tile): a k-tile's scales, the
  // thread's two rows' of A and B's block's, go into one of two sets of three registers two
  // stages before the stage that uses them (LoadInto), which takes its factors from them (Use):
  // one stage's time does not cover a global load's latency, which each stage then waited for
  // (docs/perf/2026-11-29-fp8-gemm.md, step 5). Each set is loaded again once its stage has used
  // it, so no value moves between registers.
  bool TwoAhead() const { return mode_ == examples::Fp8Scaling::kBlock; }
  void LoadInto(const Regs& set, const Value& kb) {
    set[0] = Scale(tk_.scale_a, Row(0) * tk_.sa_row + kb * tk_.sa_k);
    set[1] = Scale(tk_.scale_a, Row(1) * tk_.sa_row + kb * tk_.sa_k);
    set[2] = Scale(tk_.scale_b, (n0_ / 128).To(i64) * tk_.sb_row + kb * tk_.sb_k);
  }
  void Use(const Regs& set) {
    Value b = set[2].Load();
    Value rows[2] = {set[0].Load() * b, set[1].Load() * b};
    factors_.clear();
    for (int i = 0; i < acc_.n() / 2; ++i)
      factors_.push_back(rows[WgmmaAccumulator::RowSlot(i / 2)]);
  }

  // Blockwise_t's B scales are one per column: held in registers across the stage's wgmmas with
  // the two accumulators they would spill, so they pass through the consumer's shared buffer
  // instead (two of them, k-tile by k-tile). Each thread loads one column a stage ahead (Start,
  // then Stage), with A's block scale (one for the warpgroup's rows), stores their product once
  // the stage's wgmmas are issued and meets the warpgroup at a named barrier there, where its
  // warps are together anyway (Stage), and reads its columns' factors in pairs after the wait
  // (Ready): no load's latency is waited for, and only those reads lie between the wait and the
  // promotion, its critical path (docs/perf/2026-11-29-fp8-gemm.md). Two buffers, taken in turn
  // stage after stage whatever the units (a split tile's part may start at any k-tile), suffice:
  // a thread writing one has passed the last stage's barrier, which every reader of that buffer
  // at the stage before reached after its reads.
  void Start(const Value& kb) {
    if (mode_ == examples::Fp8Scaling::kBlockT) Fetch(kb);
  }
  // k-tile `kb`'s scales to the buffer; the next k-tile's fetched (`last`'s again past it).
  void Stage(const Value& kb, const Value& last) {
    if (mode_ != examples::Fp8Scaling::kBlockT) return;
    Value factor = ahead_[0].Load() * ahead_[1].Load();
    tk_.k.If(c_ < acc_.n(), [&] { tk_.k.Store(Slot(c_), factor); });
    Fetch(Min(kb + 1, last));
    tk_.k.NamedBarrier(wg_ + tk_.shape.factors_barrier(), 128);
  }
  void Ready() {
    if (mode_ != examples::Fp8Scaling::kBlockT) return;
    factors_.clear();
    std::vector<Value> cols;  // a column slot's two columns are adjacent: one 8-byte load
    for (int slot = 0; slot < acc_.n() / 8; ++slot) {
      Value pair = tk_.k.Load(Slot(acc_.Col(2 * slot)), 2);
      cols.push_back(pair.Lane(0)), cols.push_back(pair.Lane(1));
    }
    for (int i = 0; i < acc_.n() / 2; ++i) factors_.push_back(cols[ColumnOf(i)]);
    buffer_[0] = buffer_[0].Load() ^ 1;  // the next stage's
  }

  // Loads the factors of k-tile `kb` (PerStage), or of all of K: before the stage's wgmmas are
  // waited for, so that the loads' latency passes under them.
  void Load(const Value& kb) {
    const Value zero = tk_.k.I32(0).To(i64);
    auto a_at = [&](const Value& row_or_block) {
      return Scale(tk_.scale_a, row_or_block * tk_.sa_row + (PerStage() ? kb * tk_.sa_k : zero));
    };
    auto b_at = [&](const Value& col_or_block) {
      return Scale(tk_.scale_b, col_or_block * tk_.sb_row + (PerStage() ? kb * tk_.sb_k : zero));
    };
    factors_.clear();
    switch (mode_) {
      case examples::Fp8Scaling::kTensor:
        factors_.assign(acc_.n() / 2, a_at(zero) * b_at(zero));
        return;
      case examples::Fp8Scaling::kBlock:  // LoadInto, Use
        return;
      case examples::Fp8Scaling::kBlockT: {  // A per 128x128 (the warpgroup's rows lie in one), B
                                             // per column
        Value a = a_at((a_m0_ / 128).To(i64));
        std::vector<Value> cols = PerColumn(b_at);
        for (int i = 0; i < acc_.n() / 2; ++i) factors_.push_back(a * cols[ColumnOf(i)]);
        return;
      }
      case examples::Fp8Scaling::kRow: {
        Value rows[2] = {a_at(Row(0)), a_at(Row(1))};
        std::vector<Value> cols = PerColumn(b_at);
        for (int i = 0; i < acc_.n() / 2; ++i)
          factors_.push_back(rows[WgmmaAccumulator::RowSlot(i / 2)] * cols[ColumnOf(i)]);
        return;
      }
      case examples::Fp8Scaling::kNone:
        return;
    }
  }
  const Value& operator[](int reg) const { return factors_[reg]; }

 private:
  // Rows past M and columns past N read the last row's (column's) scale: their results are not
  // stored, and no load leaves the scales' allocation.
  Value Row(int slot) const { return Min(m0_ + acc_.Row(slot), tk_.g.M - 1).To(i64); }
  Value Col(int reg) const { return Min(n0_ + acc_.Col(reg / 2) + reg % 2, tk_.g.N - 1).To(i64); }
  // A thread's registers hold acc.n() / 4 columns: both row slots of a column slot share them.
  static int ColumnOf(int reg) { return 2 * WgmmaAccumulator::ColSlot(reg / 2) + reg % 2; }
  template <typename At>
  std::vector<Value> PerColumn(const At& at) const {
    std::vector<Value> cols;
    for (int j = 0; j < acc_.n() / 4; ++j) cols.push_back(at(Col(4 * (j / 2) + j % 2)));
    return cols;
  }
  Value Scale(const Value& base, const Value& index) const { return LoadGlobal(base + index, 1); }
  void Fetch(const Value& kb) {
    ahead_[0] =
        LoadGlobal(tk_.scale_b + Min(n0_ + c_, tk_.g.N - 1).To(i64) * tk_.sb_row + kb * tk_.sb_k, 1,
                   {.mask = c_ < acc_.n()});
    ahead_[1] = Scale(tk_.scale_a, (a_m0_ / 128).To(i64) * tk_.sa_row + kb * tk_.sa_k);
  }
  // Column `col` of this consumer's buffer of this stage's B scales (two per consumer,
  // alternating).
  Value Slot(const Value& col) const { return tk_.scale_cols.At(wg_ * 2 + buffer_[0].Load(), col); }

  TileKernel& tk_;
  const WgmmaAccumulator& acc_;
  Value m0_, n0_, a_m0_, c_, wg_;
  Regs ahead_, buffer_;
  examples::Fp8Scaling mode_;
  std::vector<Value> factors_;
};

}  // namespace kiln::ops
