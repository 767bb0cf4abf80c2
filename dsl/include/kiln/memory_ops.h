// Global-memory accesses with cache hints and masks, and atomics on global or shared memory.
// Plain loads and stores are Kernel::Load/Store; these say how the access uses the caches, skip
// lanes past a ragged edge without a branch, and update memory atomically.
#pragma once

#include "kiln/value.h"

namespace kiln {

// How a global access uses the caches (PTX ISA, ld/st cache operators and eviction priorities).
enum class CacheHint : uint8_t {
  kDefault,       // ld / st with no qualifier
  kReadOnly,      // ld.global.nc: through the read-only (texture) path; the data must not change
                  // while the kernel runs (loads only)
  kStreaming,     // .cs: accessed once, evicted first
  kNoL1,          // .L1::no_allocate: not kept in L1
  kL2EvictFirst,  // .L2::cache_hint with a createpolicy evict_first policy
  kL2EvictLast,   // .L2::cache_hint with a createpolicy evict_last policy
};

// A global load or store of one vector (2, 4, 8 or 16 bytes, aligned to its size).
struct GlobalAccess {
  CacheHint cache = CacheHint::kDefault;
  // When valid (an i1), the access happens only where it is true: a masked load yields `fill` in
  // every lane instead, a masked store writes nothing. The mask guards the instruction itself
  // (a predicate), so an address past the end is never touched.
  Value mask;
  double fill = 0;
};

// `lanes` elements of the pointer's type from global memory (a scalar for 1 lane).
Value LoadGlobal(const Value& ptr, int lanes, const GlobalAccess& how = {},
                 Loc loc = Loc::current());
void StoreGlobal(const Value& ptr, const Value& value, const GlobalAccess& how = {},
                 Loc loc = Loc::current());

// prefetch.global.L2: asks L2 for the line holding `ptr`'s bytes. It gives no thread a value, so
// it may run before griddepcontrol.wait (L2 is where the kernel before writes).
void PrefetchL2(const Value& ptr, Loc loc = Loc::current());

// ld.acquire.gpu of one 32- or 64-bit word of global memory (i32, s32, i64, f32): a flag that
// another block sets. A plain Load of it in a loop may be made once, before the loop (the
// compiler sees no store in the loop), and the loop then spins on a stale value forever; this
// load stays in the loop, and what the setter wrote before its release (a st.release, or a
// gpu-scope fence then the store) is visible after it.
Value LoadAcquire(const Value& ptr, Loc loc = Loc::current());

// Atomic read-modify-write on global or shared memory, returning the old value (atom): add on
// f32, i32 and i64; max and min on i32 (unsigned, as kiln's integers are); compare-and-swap on
// i32 and i64 (writes `value` where the old value equals `compare`).
Value AtomicAdd(const Value& ptr, const Operand& value, Loc loc = Loc::current());
Value AtomicMax(const Value& ptr, const Operand& value, Loc loc = Loc::current());
Value AtomicMin(const Value& ptr, const Operand& value, Loc loc = Loc::current());
Value AtomicCas(const Value& ptr, const Operand& compare, const Operand& value,
                Loc loc = Loc::current());
// The same reductions without a result (red): cheaper when the old value is not needed.
void RedAdd(const Value& ptr, const Operand& value, Loc loc = Loc::current());
void RedMax(const Value& ptr, const Operand& value, Loc loc = Loc::current());

}  // namespace kiln
