// The tensor-core ops of Ampere and later (sm_80+): ldmatrix, cp.async and mma.sync, with the
// warp tiling of a block tile. A part of Kernel (kiln/kernel.h); built in dsl/ampere.cc and
// dsl/tensor_core.cc.
#pragma once

#include <vector>

#include "kiln/memory.h"

namespace kiln {

class Kernel;

class AmpereOps : public KernelPart<AmpereOps> {
 public:
  // ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16: each lane passes one row address.
  std::vector<Value> LdMatrix(const Value& smem_row, int num, bool trans = false,
                              Loc loc = Loc::current());
  // The same with the row address taken from a tile, whose layout is checked to keep each
  // lane's 16-byte row whole and aligned.
  std::vector<Value> LdMatrix(const SmemTile& tile, const Operand& row, const Operand& col, int num,
                              bool trans = false, Loc loc = Loc::current());
  // cp.async of `bytes` (4, 8 or 16; .cg needs 16) from global `src` into tile(row, col).
  // `l2_prefetch` (0, 64, 128 or 256: .L2::64B etc.) asks L2 to fetch that aligned span around
  // the source, so the next k-tile's bytes of a short row are already on chip. `src_bytes`, where
  // given (an i32 of 0 .. bytes), copies only that many bytes and fills the rest with zeros: 0
  // reads nothing (an edge past the operand), though `src` should still point inside it.
  enum class CacheAt { kL1, kL2 };  // .ca, .cg
  void CpAsync(const SmemTile& tile, const Operand& row, const Operand& col, const Value& src,
               int bytes = 16, CacheAt cache = CacheAt::kL2, int l2_prefetch = 0,
               const Value& src_bytes = {}, Loc loc = Loc::current());
  void CpAsyncCommit(Loc loc = Loc::current());             // cp.async.commit_group
  void CpAsyncWait(int pending, Loc loc = Loc::current());  // cp.async.wait_group
  void CpAsyncWaitAll(Loc loc = Loc::current());            // cp.async.wait_all
  // A block tile split among warps for mma.sync: this warp's origin in the tile and how many
  // mma tiles it holds. Fails at the call when the tile does not divide by the warp grid (and
  // the mma shape) or the warp grid does not match the block's warps.
  struct WarpTiling {
    int tile_m, tile_n, warps_m, warps_n, mma_m = 16, mma_n = 8;
  };
  struct WarpTile {
    Value m0, n0;  // the warp's first row and column in the block tile
    int rows, cols, mmas_m, mmas_n;
  };
  WarpTile Warps(const WarpTiling& tiling, Loc loc = Loc::current());
  // mma.sync.aligned.m16n8k16.row.col: a = 4 x b32, b = 2 x b32, c = accumulators
  // (4 f32, or 2 x f16x2 for an f16 accumulator); returns d.
  std::vector<Value> MmaM16N8K16(Scalar ab, const std::vector<Value>& a,
                                 const std::vector<Value>& b, const std::vector<Value>& c,
                                 Loc loc = Loc::current());
};

}  // namespace kiln
