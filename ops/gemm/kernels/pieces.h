// The GEMM entry point's kernel pieces beyond the worklogs' (examples/gemm.h): work tables of
// (tile, k range) units for split-K and stream-K and the deterministic reduction of a split tile's
// parts, the weight-streaming mma.sync steps, and the maps of packed operands.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "examples/gemm.h"

namespace kiln::examples {

// ---- split-K and stream-K: a work table (rt::WorkSchedule) deals units of (tile, k range)

// The work table of a GEMM's C tiles of tile_m x tile_n with K in k-tiles of bk, split as the
// integer parameter "split" says (1: whole tiles, S: split-K in S parts, 0: stream-K).
ScheduleTable GemmWork(int tile_m, int tile_n, int bk, int groups, int slots);
// One unit: tile (m_index, n_index), its k-tiles [k_begin, k_end), part `part` of `parts` (in k
// order), whose tile's partials start at slot `slot` (-1: a whole tile, no partials).
// A grouped GEMM's unit (ops/gemm/kernels/tile_groups.cc) also carries A's first row for its
// group (`a_row`) and the end of the group's columns of C (`n_end`); invalid elsewhere.
struct WorkUnit {
  Value m_index, n_index, k_begin, k_end, slot, part, parts;
  Value a_row, n_end;
};
using WorkUnitBody = std::function<void(const WorkUnit&)>;
// As ScheduledTiles, over a work table's units, read from global memory (L2) rather than copied
// to shared memory, so a table may be long (each entry loaded while the unit before it runs).
std::function<void(const WorkUnitBody&)> ScheduledWork(Kernel& k, const Value& table, int slots);

// The deterministic reduction of a split tile, for one group of `threads` threads (thread
// `thread`) holding `regs` f32 accumulator registers each. The parts meet in a tree of up to
// rt::kPartsSummedAtOnce children a node: a child stores its registers to its node's slots (f32
// `partials`, `regs` x `threads` per share) and counts itself in the node's counter (i32
// `counters`); the child that counts last sums the node's children in their order into `acc`
// (the same sum whichever ends last), puts the counter back to zero and goes up a level; the
// part that sums the root gets true. A slot holds `shares` groups' partials (a cluster's CTAs x
// consumer warpgroups), this one `share`.
// `flag` is a shared i32 through which thread 0 tells the group; `barrier` a named barrier id
// for this group alone. `live(r)`, where given, says whether register r matters (its element
// lies inside the problem): the others are neither stored nor read (at M = 16, 7/8 of a 128-row
// tile's partial).
Value ReducePartials(Kernel& k, const Regs& acc, int regs, const WorkUnit& u, const Value& partials,
                     const Value& counters, const Value& share, int shares, const Value& thread,
                     int threads, const Operand& barrier, const Value& flag,
                     const std::function<Value(int)>& live = nullptr);

// The weight-streaming mma.sync kernels (mma16.cc, tma16.cc) compute C^T = B^T A^T over 32-k steps
// in a permuted k order both operands share: a thread of quad index t holds k 8t .. 8t+7 of a step
// as 4 x b32 words, words 2h and 2h+1 filling the k slots (2t, 2t+1) and (2t+8, 2t+9) of the
// step's mma h. StepMmas runs one step: B's columns quad and quad + 8 (`b_lo`, `b_hi`) against
// each n8 group g of A's rows (`a[g]`, rows 8g + quad), accumulating group g in acc[4g .. 4g+3].
void StepMmas(Kernel& k, Scalar in, const Value& b_lo, const Value& b_hi,
              const std::vector<Value>& a, const Regs& acc);
// Stores a warp's accumulators of StepMmas (a.size() == groups) into partial.At(warp, n * rows +
// m): d[i] of group g is C's column quad + 8 * (i / 2) of the block, row 8g + 2t + i % 2 of the
// pass.
void StoreStepSums(Kernel& k, const SmemTile& partial, const Value& warp, const Value& lane,
                   int groups, int rows, const Regs& acc);

// One element of C from the warps' sums of a block: partial.At(w, slot) for w = 0 .. warps-1,
// added in that order (the same sum on every run), stored at (row, col) through the epilogue
// where inside M x N. After the block's barrier that makes the partials visible.
void StoreSumOfWarps(Kernel& k, const SmemTile& partial, int warps, const Value& slot,
                     const Value& row, const Value& col, const GemmOperands& g,
                     const Epilogue& epilogue);

// A rank-2 map of a packed K-major operand (`operand`, for messages: "A" or "B") of `rows` rows
// (a rule: "M" or "N") of K elements, read in boxes of box_k x box_rows, optionally swizzled.
rt::TensorMapParam PackedKMajorMap(const std::string& operand, const std::string& rows, Scalar in,
                                   int box_k, int box_rows,
                                   rt::TmaSwizzle swizzle = rt::TmaSwizzle::kNone);
// The same for an MN-major operand packed as [K][rows] (a row-major B): boxes of `box_rows` of
// `rows` (one swizzle span) by `box_k` of K.
rt::TensorMapParam PackedMnMajorMap(const std::string& operand, const std::string& rows, Scalar in,
                                    int box_k, int box_rows, rt::TmaSwizzle swizzle);

}  // namespace kiln::examples
