// MN-major shared-memory operands (Kernel::WgmmaTile with mn_major), shared by wgmma and
// tcgen05.mma: the PTX ISA's MN-major canonical layouts are the same for both; only the
// descriptors' fixed bits differ (each instruction family ORs in its own).
#pragma once
#include "dsl/kernel_state.h"
#include "kiln/kernel.h"

namespace kiln::detail {

// Checks an MN-major tile: swizzled rows of exactly one span, k_rows rows of K per block of
// span/2 columns, blocks for `rows` columns of M or N from `row0` (a multiple of the span's
// columns), k0..k0+15 inside a block. `instr` names the instruction in messages.
bool CheckMnMajorTile(KernelState& s, const Kernel::WgmmaTile& w, const char* instr,
                      const char* which, int rows, const Operand& row0, int k0, const Loc& loc);

// The descriptor's start field (bits 0-13, as i64) for columns row0.. and rows k0..k0+15.
mlir::Value MnMajorStartField(KernelState& s, const Kernel::WgmmaTile& w, const Operand& row0,
                              int k0, const Loc& loc);

// Byte offsets: LBO from one block of span/2 columns to the next, SBO from 8 rows of K to the next.
struct MnMajorOffsets {
  int lbo = 0, sbo = 0;
};
MnMajorOffsets MnMajorOffsetsOf(const Kernel::WgmmaTile& w);

}  // namespace kiln::detail
