// Row-wise operations over accumulator tiles in registers, so that an online softmax or an
// epilogue is written per row and tile rather than per register (dsl/rows.cc). Two layouts:
//
// - a wgmma accumulator (WgmmaAccumulator, m64nN): each thread holds two rows (RowSlot 0 and 1),
//   N/4 columns of each, and the four threads of a quad hold a row between them, so a whole-row
//   reduction reduces in the thread, then across the quad (shuffles);
// - a thread's row (std::vector<Value> of f32, as tcgen05.ld 32x32b loads one TMEM lane): the
//   thread holds the row's columns alone.
//
// The element-wise ops replace the tile's registers (the vector's elements) in place. A reduction
// over an empty row returns an empty value, which the first op reading it reports.
#pragma once

#include <array>
#include <vector>

#include "kiln/hopper.h"
#include "kiln/value.h"

namespace kiln {

// A value for each of a thread's two accumulator rows, indexed by RowSlot.
using RowPair = std::array<Value, 2>;

// How far a reduction reaches: this thread's elements only (a partial, finished later with
// WholeRows), or the whole row.
enum class RowSpan : uint8_t { kThread, kRow };

// ---- a wgmma accumulator
RowPair RowMax(const WgmmaAccumulator& acc, RowSpan span = RowSpan::kRow, Loc loc = Loc::current());
RowPair RowSum(const WgmmaAccumulator& acc, RowSpan span = RowSpan::kRow, Loc loc = Loc::current());
// Per-thread partials of rows (RowSpan::kThread) reduced across each row's quad: sums, or maxima
// with `max`.
RowPair WholeRows(const RowPair& partial, bool max = false, Loc loc = Loc::current());
// Keeps the elements of columns col0 + c (c the column within the tile) below limit[row] and sets
// the others to `fill`; column and limit compare as s32.
void MaskColumns(const WgmmaAccumulator& acc, const Value& col0, const RowPair& limit, double fill,
                 Loc loc = Loc::current());
// x * scale[row].
void ScaleRows(const WgmmaAccumulator& acc, const RowPair& scale, Loc loc = Loc::current());
// 2^(x * scale - base[row]), as one fma and ex2.approx (kiln/math.h: Exp2); returns this
// thread's part of each row's sum of the new values (WholeRows finishes it), added as each one
// is made, as an online softmax needs both.
RowPair Exp2Rows(const WgmmaAccumulator& acc, const Value& scale, const RowPair& base,
                 Loc loc = Loc::current());
// Each pair of adjacent columns (registers 2p, 2p+1: row Row(p), columns Col(p), Col(p)+1) rounded
// to `elem` (bf16 or f16) and packed into a b32, pair p at index p.
std::vector<Value> PackPairs(const WgmmaAccumulator& acc, Scalar elem, Loc loc = Loc::current());

// ---- a thread's row
Value RowMax(const std::vector<Value>& row, Loc loc = Loc::current());
Value RowSum(const std::vector<Value>& row, Loc loc = Loc::current());
void MaskColumns(std::vector<Value>& row, const Value& col0, const Value& limit, double fill,
                 Loc loc = Loc::current());
void ScaleRow(std::vector<Value>& row, const Value& scale, Loc loc = Loc::current());
// Returns the row's sum of the new values.
Value Exp2Row(std::vector<Value>& row, const Value& scale, const Value& base,
              Loc loc = Loc::current());
// Elements 2p and 2p+1 rounded to `elem` and packed into a b32, at index p (an even count).
std::vector<Value> PackPairs(const std::vector<Value>& row, Scalar elem, Loc loc = Loc::current());

}  // namespace kiln
