// attention/hopper's online softmax, per consumer warpgroup: a tile's fresh state, the softmax of
// one S tile in registers (masked only where the tile needs it), O's rescale once the P V adding
// to it has retired, and P packed as the next wgmma's A fragments.
#include <cmath>
#include <vector>

#include "kiln/rows.h"
#include "kiln/warp.h"
#include "ops/attention/kernels/hopper_consumer.h"

namespace kiln::examples::attention_sm90 {
namespace {

// How far past a row's reference maximum (in log2 units) a lazily rescaled row's scores may go
// before the reference moves: P = 2^(score - reference) <= 2^8.
constexpr double kLazySlack = 8.0;

}  // namespace

void HopperConsumer::FreshState() {
  s_ = k_.WgmmaAcc(h_.BN);
  o_ = k_.WgmmaAcc(h_.D);
  row_max_ = k_.Registers(Type::Of(f32), 2);
  row_sum_ = k_.Registers(Type::Of(f32), 2);
  row_max_[0] = k_.F32(-INFINITY);
  row_max_[1] = k_.F32(-INFINITY);
  alpha_ = k_.Registers(Type::Of(f32), 2);
  p_frag_ = k_.Registers(Type::Of(i32), h_.BN / 4);
}

// The online softmax of one S tile: mask, new row maxima, P = exp2(S * scale_log2 - max) written
// over S, the sums rescaled by alpha = exp2(old max - new max); O is rescaled by alpha later
// (RescaleO), once the wgmma group adding to it has retired.
void HopperConsumer::Softmax(Value n0, bool masked) {
  const Value& Skv = skv_;
  if (masked) {
    RowPair limit;  // keys below this column are seen, per row
    for (int half = 0; half < 2; ++half) {
      Value row = (m0_ + row0_ + s_.Row(half)).To(s32);
      limit[half] = h_.a.causal ? Min(Skv.To(s32), row + 1 + shift_) : Skv.To(s32);
    }
    MaskColumns(s_, n0, limit, -INFINITY);
  }
  const RowPair tile_max = RowMax(s_);
  RowPair base;
  for (int half = 0; half < 2; ++half) {
    Value new_max = Max(row_max_[half], tile_max[half] * scale_log2_);
    // Lazily: the row keeps its reference unless the tile's maximum passes it by more than 2^8,
    // so P <= 256 (bf16/f16 keep its relative precision as for any P) and O's rescale is mostly
    // skipped; O and the sum share the reference, so O / sum is the same.
    if (h_.a.lazy_rescale)
      new_max = Select(new_max <= row_max_[half] + kLazySlack, row_max_[half], new_max);
    // A row that saw only -inf:
    base[half] = Select(new_max == k_.F32(-INFINITY), k_.F32(0), new_max);
    alpha_[half] = Exp2(row_max_[half] - base[half]);
    row_max_[half] = new_max;
  }
  const RowPair sum = Exp2Rows(s_, scale_log2_, base);  // P; the quads' sums meet at the end
  for (int half = 0; half < 2; ++half)
    row_sum_[half] = Fma(row_sum_[half], alpha_[half], sum[half]);
}

// Masks only where a tile reaches past Skv or, causally, past its first row's diagonal.
void HopperConsumer::SoftmaxOf(Value n0) {
  const Value& Skv = skv_;
  Value needs_mask = (n0 + h_.BN).To(s32) >
                     (h_.a.causal ? Min(Skv.To(s32), (m0_ + 1).To(s32) + shift_) : Skv.To(s32));
  k_.If(
      needs_mask, [&] { Softmax(n0, true); }, [&] { Softmax(n0, false); });
}

void HopperConsumer::RescaleO() {
  auto scale_rows = [&] { ScaleRows(o_, {alpha_[0], alpha_[1]}); };
  if (!h_.a.lazy_rescale) return scale_rows();
  // Only in warps where some row's reference moved (a warp-uniform branch).
  Value moved = Select((alpha_[0] != 1.0) | (alpha_[1] != 1.0), k_.I32(1), k_.I32(0));
  k_.If(ReduxSync(moved, Reduce::kMax) != 0, scale_rows);
}

void HopperConsumer::PackP() {
  for (int f = 0; f < h_.BN / 16; ++f) {
    std::vector<Value> frag = s_.FragmentA(f, h_.in);
    for (int r = 0; r < 4; ++r) p_frag_[4 * f + r] = frag[r];
  }
}

}  // namespace kiln::examples::attention_sm90
