// Blackwell's tensor memory (sm_100a). The tcgen05 ops are Kernel methods (kiln/kernel.h:
// Blackwell), built in dsl/tcgen05.cc; their descriptors in kiln/tcgen05_desc.h.
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
  SmemTile slot_;
  int columns_ = 0, cta_group_ = 1;
  Loc loc_;
};

// One tcgen05.mma kind::f16, issued by one thread: D (f32, tensor memory columns from d_column)
//   = A[a_row0 .., k0 .. k0+15] x B[b_row0 .., k0 .. k0+15]^T (+ D where `accumulate`, an i1),
// M x N x 16 (a CTA pair's M and N: each CTA holds half of A's rows and of B's). A is K-major; B
// K-major, or MN-major (one CTA only: transpose B in the instruction descriptor) in the WgmmaTile
// form, as a row-major V lands in attention's P*V, its rows of K b_k0 .. b_k0+15 of a block read.
// Both tiles 128B-swizzled; descriptors come from the tiles.
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
};

}  // namespace kiln
