// The tile kernels' consumers for 8-bit inputs, DeepGEMM's recipe: each stage (128 of K) is one
// wgmma group into a partial accumulator, waited for, its stage freed, and the partial sums
// promoted into the f32 accumulator with FFMA, scaled by the stage's blockwise factors (the FP8
// tensor core's accumulator keeps fewer bits than f32: promoting every 128 of K bounds what it
// loses). The other consumer warpgroup's wgmmas run under a warpgroup's promotion. Tensorwise
// and rowwise factors are constant along K: the promotion adds, and the product is scaled once.
#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/tile_epilogue.h"

namespace kiln::ops {
namespace {

using examples::Fp8Scaling;

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

  bool PerStage() const { return mode_ == Fp8Scaling::kBlock || mode_ == Fp8Scaling::kBlockT; }

  // Blockwise (A per row, B per 128x128: one block of B covers the tile): a k-tile's scales, the
  // thread's two rows' of A and B's block's, go into one of two sets of three registers two
  // stages before the stage that uses them (LoadInto), which takes its factors from them (Use):
  // one stage's time does not cover a global load's latency, which each stage then waited for
  // (docs/perf/2026-11-29-fp8-gemm.md, step 5). Each set is loaded again once its stage has used
  // it, so no value moves between registers.
  bool TwoAhead() const { return mode_ == Fp8Scaling::kBlock; }
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
    if (mode_ == Fp8Scaling::kBlockT) Fetch(kb);
  }
  // k-tile `kb`'s scales to the buffer; the next k-tile's fetched (`last`'s again past it).
  void Stage(const Value& kb, const Value& last) {
    if (mode_ != Fp8Scaling::kBlockT) return;
    Value factor = ahead_[0].Load() * ahead_[1].Load();
    tk_.k.If(c_ < acc_.n(), [&] { tk_.k.Store(Slot(c_), factor); });
    Fetch(Min(kb + 1, last));
    tk_.k.NamedBarrier(wg_ + 6, 128);
  }
  void Ready() {
    if (mode_ != Fp8Scaling::kBlockT) return;
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
      case Fp8Scaling::kTensor:
        factors_.assign(acc_.n() / 2, a_at(zero) * b_at(zero));
        return;
      case Fp8Scaling::kBlock:  // LoadInto, Use
        return;
      case Fp8Scaling::kBlockT: {  // A per 128x128 (the warpgroup's rows lie in one), B per column
        Value a = a_at((a_m0_ / 128).To(i64));
        std::vector<Value> cols = PerColumn(b_at);
        for (int i = 0; i < acc_.n() / 2; ++i) factors_.push_back(a * cols[ColumnOf(i)]);
        return;
      }
      case Fp8Scaling::kRow: {
        Value rows[2] = {a_at(Row(0)), a_at(Row(1))};
        std::vector<Value> cols = PerColumn(b_at);
        for (int i = 0; i < acc_.n() / 2; ++i)
          factors_.push_back(rows[WgmmaAccumulator::RowSlot(i / 2)] * cols[ColumnOf(i)]);
        return;
      }
      case Fp8Scaling::kNone:
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
  Fp8Scaling mode_;
  std::vector<Value> factors_;
};

}  // namespace

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
