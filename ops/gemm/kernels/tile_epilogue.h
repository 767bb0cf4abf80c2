// The tile kernels' epilogue, per consumer warpgroup: the fused terms (kiln/epilogue.h) over the
// wgmma accumulator, then C out, either packed to 16 bits and written through the consumer's
// swizzled C buffer by TMA stores (under the next tile's first wgmma group), or element by element
// from registers (an f32 C, or an M that is no multiple of 8).
#pragma once

#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {

class TileEpilogue {
 public:
  // Holds the packed tile and its place ({pending?, m0, n0}) in registers it declares here.
  TileEpilogue(TileKernel& tk, WgmmaAccumulator& acc, const Value& c, const Value& wg,
               const Value& lane, const Value& row0);

  // The tile (m0, n0) through the epilogue into the packed registers, to write later (WriteOut).
  void Pack(const Value& m0, const Value& n0);
  // The packed tile out: stmatrix (transposed) into the C buffer, a TMA store a piece.
  void WriteOut();
  // Each element through the epilogue, stored where inside M x N (C from registers).
  void StoreDirect(const Value& m0, const Value& n0);
  // SwiGLU (EpilogueSpec::swiglu): a thread's two rows are a gate row and its up row; each of its
  // column pairs makes two elements of C, which has half the product's rows. Pack packs those, and
  // WriteOut writes a consumer's 32 rows of C; StoreSwiglu stores them from registers.
  void StoreSwiglu(const Value& m0, const Value& n0);
  const Regs& pending() const { return pending_; }
  // Where this tile writes nothing (a split tile's earlier part, a grouped tile stored directly):
  // nothing pending, and the packed registers cleared, so that the last tile's packed values,
  // written out already, are not held through this tile's mainloop for the path that keeps them.
  void NothingPending();
  // The end of the columns stored from here on (by default N): a grouped tile's group's end.
  void SetColumnEnd(const Value& end) { col_end_ = end; }

 private:
  using BiasOfSlot = std::map<int, std::pair<Value, Value>>;
  std::tuple<Value, Value, Value> ElementAt(const Value& m0, const Value& n0, int p, int e) const;
  // The bias of a tile's pairs, loaded once for the pairs that share it.
  std::pair<Value, Value> BiasFor(BiasOfSlot& loaded, const Value& m0, const Value& n0,
                                  int p) const;
  // body(p, inputs of pair p or null) for every pair, the inputs of epi_pairs pairs loaded first.
  void InGroups(const Value& m0, const Value& n0,
                const std::function<void(int, const Epilogue::Inputs*)>& body);
  // C_in's terms and the residual, their pieces staged by TMA through the C buffer.
  void ApplyStaged(const Value& m0, const Value& n0);
  Value SwigluAt(int slot, int e) const;
  // RoPE (EpilogueSpec::rope): the tile's angle words, then its pairs turned.
  void ApplyRope(const Value& m0, const Value& n0);
  void PackSwiglu();
  void WriteOutSwiglu();

  TileKernel& tk_;
  Kernel& k_;
  WgmmaAccumulator& acc_;
  Value c_, wg_, lane_, row0_;
  Regs packed_;       // the tile to write, pairs of 16-bit elements
  Regs pending_;      // {tile to write?, its m0, its n0}
  Regs input_phase_;  // the parity input_bars[wg] completes next
  Value col_end_;
};

// A unit's end, after its mainloop: a split tile's share summed by the part that ends last, then
// the epilogue (C packed, or stored from registers) where this share completes the tile.
void FinishTileUnit(TileKernel& tk, WgmmaAccumulator& acc, TileEpilogue& epilogue, const Value& m0,
                    const Value& n0, const examples::WorkUnit& u, const Value& c, const Value& wg,
                    const Value& row0);

}  // namespace kiln::ops
