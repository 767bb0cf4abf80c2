// Row-wise operations over accumulator tiles (kiln/rows.h), built from the element ops: each
// walks the tile pair by pair, column by column, in register order.
#include "kiln/rows.h"

#include "kiln/math.h"
#include "kiln/warp.h"

namespace kiln {
namespace {

// body(register index, row slot, pair, element of the pair) over a wgmma accumulator.
template <typename Body>
void EachElement(const WgmmaAccumulator& acc, const Body& body) {
  for (int p = 0; p < acc.n() / 4; ++p)
    for (int e = 0; e < 2; ++e) body(2 * p + e, WgmmaAccumulator::RowSlot(p), p, e);
}

Value Combine(const Value& a, const Value& b, bool max) { return max ? Max(a, b) : a + b; }

RowPair ReduceRows(const WgmmaAccumulator& acc, RowSpan span, bool max, const Loc& loc) {
  RowPair part;
  bool started[2] = {false, false};
  EachElement(acc, [&](int i, int slot, int, int) {
    Value x = acc[RegIndex(i, loc)].Load(loc);
    part[slot] = started[slot] ? Combine(part[slot], x, max) : x;
    started[slot] = true;
  });
  return span == RowSpan::kRow ? WholeRows(part, max, loc) : part;
}

}  // namespace

RowPair RowMax(const WgmmaAccumulator& acc, RowSpan span, Loc loc) {
  return ReduceRows(acc, span, /*max=*/true, loc);
}

RowPair RowSum(const WgmmaAccumulator& acc, RowSpan span, Loc loc) {
  return ReduceRows(acc, span, /*max=*/false, loc);
}

RowPair WholeRows(const RowPair& partial, bool max, Loc loc) {
  RowPair whole;
  for (int slot = 0; slot < 2; ++slot) {
    Value x = partial[slot];
    x = Combine(x, ShflXor(x, 1, 32, loc), max);  // the four threads of a row
    whole[slot] = Combine(x, ShflXor(x, 2, 32, loc), max);
  }
  return whole;
}

void MaskColumns(const WgmmaAccumulator& acc, const Value& col0, const RowPair& limit, double fill,
                 Loc loc) {
  EachElement(acc, [&](int i, int slot, int p, int e) {
    Value col = (col0 + acc.Col(p, loc) + e).To(Scalar::kS32, loc);
    acc[RegIndex(i, loc)] = Select(col < limit[slot], acc[RegIndex(i, loc)], fill);
  });
}

void ScaleRows(const WgmmaAccumulator& acc, const RowPair& scale, Loc loc) {
  EachElement(acc, [&](int i, int slot, int, int) {
    acc[RegIndex(i, loc)] = acc[RegIndex(i, loc)].Load(loc) * scale[slot];
  });
}

RowPair Exp2Rows(const WgmmaAccumulator& acc, const Value& scale, const RowPair& base, Loc loc) {
  RowPair sum;
  bool started[2] = {false, false};
  EachElement(acc, [&](int i, int slot, int, int) {
    Value x = Exp2(Fma(acc[RegIndex(i, loc)], scale, -base[slot]), loc);
    acc[RegIndex(i, loc)] = x;
    sum[slot] = started[slot] ? sum[slot] + x : x;
    started[slot] = true;
  });
  return sum;
}

std::vector<Value> PackPairs(const WgmmaAccumulator& acc, Scalar elem, Loc loc) {
  std::vector<Value> packed;
  for (int p = 0; p < acc.n() / 4; ++p) {
    Value lo = acc[RegIndex(2 * p, loc)].Load(loc), hi = acc[RegIndex(2 * p + 1, loc)].Load(loc);
    packed.push_back(elem == Scalar::kF16 ? PackF16x2(lo, hi, loc) : PackBf16x2(lo, hi, loc));
  }
  return packed;
}

Value RowMax(const std::vector<Value>& row, Loc loc) {
  if (row.empty()) return Value(loc);  // empty: the first op that reads it names this line
  Value m = row[0];
  for (size_t c = 1; c < row.size(); ++c) m = Max(m, row[c]);
  return m;
}

Value RowSum(const std::vector<Value>& row, Loc loc) {
  if (row.empty()) return Value(loc);
  Value sum = row[0];
  for (size_t c = 1; c < row.size(); ++c) sum = sum + row[c];
  return sum;
}

void MaskColumns(std::vector<Value>& row, const Value& col0, const Value& limit, double fill,
                 Loc loc) {
  for (size_t c = 0; c < row.size(); ++c)
    row[c] = Select((col0 + static_cast<int>(c)).To(Scalar::kS32, loc) < limit, row[c], fill);
}

void ScaleRow(std::vector<Value>& row, const Value& scale, Loc) {
  for (Value& x : row) x = x * scale;
}

Value Exp2Row(std::vector<Value>& row, const Value& scale, const Value& base, Loc loc) {
  Value sum(loc);
  for (size_t c = 0; c < row.size(); ++c) {
    row[c] = Exp2(Fma(row[c], scale, -base), loc);
    sum = c == 0 ? row[c] : sum + row[c];
  }
  return sum;
}

std::vector<Value> PackPairs(const std::vector<Value>& row, Scalar elem, Loc loc) {
  std::vector<Value> packed;
  for (size_t c = 0; c + 1 < row.size(); c += 2)
    packed.push_back(elem == Scalar::kF16 ? PackF16x2(row[c], row[c + 1], loc)
                                          : PackBf16x2(row[c], row[c + 1], loc));
  return packed;
}

}  // namespace kiln
