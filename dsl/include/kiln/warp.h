// Warp-level data exchange and reductions: shfl.sync in its four modes, butterfly reductions
// built on them, redux.sync, and a reduction over a group of warps through shared memory.
#pragma once

#include <vector>

#include "kiln/value.h"

namespace kiln {

class Kernel;

// shfl.sync.{idx,up,down,bfly}.b32 over the full warp. `src` is a lane (kIdx), a distance
// (kUp, kDown) or an XOR mask (kXor); `width` (a power of two up to 32) splits the warp into
// segments that exchange only among themselves, as CUDA's __shfl_*_sync width argument does.
// A lane whose source falls outside its segment keeps its own value. Any 32-bit value (i32,
// f32, bf16x2, f16x2).
enum class ShflMode : uint8_t { kIdx, kUp, kDown, kXor };
Value Shfl(ShflMode mode, const Value& v, const Operand& src, int width = 32,
           Loc loc = Loc::current());
inline Value ShflXor(const Value& v, const Operand& mask, int width = 32,
                     Loc loc = Loc::current()) {
  return Shfl(ShflMode::kXor, v, mask, width, loc);
}
inline Value ShflIdx(const Value& v, const Operand& lane, int width = 32,
                     Loc loc = Loc::current()) {
  return Shfl(ShflMode::kIdx, v, lane, width, loc);
}
inline Value ShflUp(const Value& v, const Operand& delta, int width = 32,
                    Loc loc = Loc::current()) {
  return Shfl(ShflMode::kUp, v, delta, width, loc);
}
inline Value ShflDown(const Value& v, const Operand& delta, int width = 32,
                      Loc loc = Loc::current()) {
  return Shfl(ShflMode::kDown, v, delta, width, loc);
}
// Lane 0's `v` in every lane (shfl.sync.idx from lane 0). For a value the lanes already share but
// ptxas cannot prove they do (a warpgroup's index, tid / 128): ptxas then keeps it, and what is
// computed from it (wgmma descriptors, barrier ids), in uniform registers, as CUTLASS's
// canonical_warp_group_idx does (docs/perf/2026-12-01-warp-uniform-warpgroup-index.md).
inline Value WarpUniform(const Value& v, Loc loc = Loc::current()) {
  return Shfl(ShflMode::kIdx, v, 0, 32, loc);
}

enum class Reduce : uint8_t { kSum, kMax, kMin };
// The reduction of `v` over each `width`-lane segment of the warp, in every lane of the segment
// (log2(width) butterfly shuffles). f32 or i32 (unsigned for max/min, as kiln's integers are).
Value WarpReduce(const Value& v, Reduce op, int width = 32, Loc loc = Loc::current());
// redux.sync.{add,max,min}.u32 over the full warp (one instruction; i32 only, sm_80 and later).
Value ReduxSync(const Value& v, Reduce op, Loc loc = Loc::current());
// The reduction of `v` over a group of `threads` consecutive threads (whole warps; 0: the whole
// block), in every thread of the group: a warp reduction, one shared-memory slot per warp and a
// barrier among the group's warps (bar.sync with a thread count and one barrier id per group,
// from ids 1..15; each group size has ids of its own, so reductions over groups of different
// sizes in a row cannot meet at one id with different counts). A group of the whole block meets
// at bar.sync 0 (SyncThreads), and a group of one warp needs no barrier (shuffles alone). Each call
// owns its slots, so several reductions in a row need no barrier between them, and a call inside a
// loop is safe (it waits for the group before reusing its slots). Ids 1..15 used by the kernel's
// own NamedBarrier calls must not overlap these: GroupReduce takes them from 1 upward.
Value GroupReduce(Kernel& k, const Value& v, Reduce op, int threads = 0, Loc loc = Loc::current());
// The same for several values of one type at once: one exchange through shared memory (a row of
// slots a value) and one pair of barriers for all of them.
std::vector<Value> GroupReduce(Kernel& k, const std::vector<Value>& vs, Reduce op, int threads = 0,
                               Loc loc = Loc::current());

}  // namespace kiln
