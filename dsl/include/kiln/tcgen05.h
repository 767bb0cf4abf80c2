// Blackwell's tensor memory (sm_100a). The tcgen05 ops are Kernel methods (kiln/kernel.h:
// Blackwell), built in dsl/tcgen05.cc; their descriptors in kiln/tcgen05_desc.h.
#pragma once

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

}  // namespace kiln
