// Blackwell's tensor memory (sm_100a) and the tcgen05 ops (BlackwellOps, a part of Kernel), built
// in dsl/tcgen05.cc; their descriptors in kiln/tcgen05_desc.h.
#pragma once

#include "kiln/hopper.h"
#include "kiln/memory.h"

namespace kiln {

class Kernel;

// A tensor memory allocation (Blackwell): `columns` 32-bit columns of the CTA's 128 lanes. Its
// address lives in a 4-byte smem slot that tcgen05.alloc writes; read it with Base() after the
// allocating warp's TmemAlloc and a block (or cluster) sync.
class Tmem {
 public:
  Tmem() = default;
  int columns() const { return columns_; }
  int cta_group() const { return cta_group_; }
  Value Base(Loc loc = Loc::current()) const;
  const Loc& loc() const { return loc_; }

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  SmemTile slot_;
  int columns_ = 0, cta_group_ = 1;
  Loc loc_;
};

// One tcgen05.mma, issued by one thread: D (f32, tensor memory columns from d_column)
//   = A[a_row0 .., k0 .. k0+K-1] x B[b_row0 .., k0 .. k0+K-1]^T (+ D where `accumulate`, an i1),
// M x N x K (a CTA pair's M and N: each CTA holds half of A's rows and of B's): kind::f16 of bf16
// or f16 tiles (K 16), kind::f8f6f4 of e4m3 or e5m2 ones, which may mix (K 32). A is K-major; B
// K-major, or MN-major (one CTA only: transpose B in the instruction descriptor) in the WgmmaTile
// form, as a row-major V lands in attention's P*V, its rows of K b_k0 .. b_k0+15 of a block read.
// Both tiles 128B-swizzled; descriptors come from the tiles.
// MXFP8 (tcgen05.mma kind::mxf8f6f4.block_scale, one CTA): one UE8M0 scale (2^(e-127)) per row
// of A and per row of B for the instruction's 32 of K, in tensor memory. A's row r sits in column
// a_column + r / 32, B's row n in column b_column + n / 32, each at lane r % 32 (n % 32) of every
// 32-lane quarter (the PTX ISA has them duplicated to all four), in byte `byte` of the 32-bit
// column (the instruction descriptor's scale IDs): four consecutive 32s of K fit one column.
struct TcgenBlockScales {
  const Tmem* tmem = nullptr;  // null: no block scales (kind::f16 or kind::f8f6f4)
  Operand a_column = 0, b_column = 0;
  int byte = 0;
};

struct TcgenMmaOp {
  int m = 0, n = 0;
  Operand d_column = 0;
  SmemTile a;
  Operand a_row0 = 0;
  WgmmaTile b;
  Operand b_row0 = 0;
  int k0 = 0;
  int b_k0 = 0;  // MN-major B only
  Operand accumulate = 1;
  TcgenBlockScales scales;  // 8-bit K-major tiles, M 128, one CTA
};

// Blackwell's ops (sm_100a; a part of Kernel, kiln/kernel.h): tensor memory, tcgen05.mma, its
// commits, loads and stores. Built in dsl/tcgen05.cc.
class BlackwellOps : public KernelPart<BlackwellOps> {
 public:
  // Declares an allocation of `columns` (a power of two, 32..512) for cta_group 1 or 2. Build()
  // fails if a kernel allocates it and never frees it.
  Tmem TensorMemory(int columns, int cta_group = 1, Loc loc = Loc::current());
  void TmemAlloc(const Tmem& t, Loc loc = Loc::current());  // tcgen05.alloc, one whole warp
  void TmemFree(const Tmem& t, Loc loc = Loc::current());   // tcgen05.dealloc, one whole warp
  void TmemRelinquish(int cta_group = 1, Loc loc = Loc::current());
  Value ElectOne(Loc loc = Loc::current());             // elect.sync: true in one lane of the warp
  void TcgenFenceBeforeSync(Loc loc = Loc::current());  // tcgen05.fence::before_thread_sync
  void TcgenFenceAfterSync(Loc loc = Loc::current());   // tcgen05.fence::after_thread_sync
  // One tcgen05.mma (kiln/tcgen05.h: TcgenMmaOp says which operand is where).
  void TcgenMma(const Tmem& d, const TcgenMmaOp& op, Loc loc = Loc::current());
  // tcgen05.commit: `bar` gets one arrive when this thread's prior tcgen05 ops complete; with
  // `cta_mask`, on the barrier at the same offset in each of those cluster CTAs.
  void TcgenCommit(const Barrier& bar, int cta_group = 1, const Value& cta_mask = Value(),
                   Loc loc = Loc::current());
  // tcgen05.ld.32x32b.x{num} (num 1..128, a power of two): lane `lane` + thread of the warp,
  // columns column..column+num-1, as f32. The warp may read only its quarter of the lanes. It
  // includes its tcgen05.wait::ld, so the values are ready (and no copy of them precedes it).
  std::vector<Value> TcgenLoad(const Tmem& t, const Operand& lane, const Operand& column, int num,
                               Loc loc = Loc::current());
  // tcgen05.st.32x32b.x{values.size()} (1..128, a power of two) of f32 values: lane `lane` +
  // thread of the warp, columns column.. (the warp's quarter of the lanes only). It includes its
  // tcgen05.wait::st, so the values are in tensor memory when it returns (an MMA that reads or
  // accumulates into them may follow once a fence::before_thread_sync and a barrier order it).
  void TcgenStore(const Tmem& t, const Operand& lane, const Operand& column,
                  const std::vector<Value>& values, Loc loc = Loc::current());
};

}  // namespace kiln
