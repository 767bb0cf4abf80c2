// What the sm_100 8-bit GEMM kernels share (fp8_sm100.cc, mxfp8_sm100.cc): a CTA owns a 128x128
// tile of a row-major bf16 C; e4m3 A (M x K) and B (N x K), K-major, stream by TMA in k-tiles of
// 128 of K (one 128B swizzle span of 8-bit rows) into a ring; warp 0 loads, the kernel's own
// warps do the rest. TMA fills rows past M and N with zeros; C is stored masked.
#pragma once

#include <functional>
#include <vector>

#include "examples/gemm.h"
#include "kiln/pipeline.h"

namespace kiln::ops {

struct Sm100Fp8Tile {
  static constexpr int kBM = 128, kBN = 128, kBK = 128;

  // Declares the operands (DeclareTmaGemm), the grid (a CTA a tile), the ring of `stages` and
  // the tile's coordinates, in that order.
  Sm100Fp8Tile(Kernel& k, int stages);
  // `body` in one elected lane of warp `w`.
  void Elected(int w, const std::function<void()>& body);
  // Warp 0, elected: every k-tile of A and B into the ring (its Init is the caller's).
  void LoadAll();
  // This thread's row `m` of the tile, columns n0 + c0 .. (one value each), stored as bf16 where
  // inside C.
  void StoreRow(const Value& m, int c0, const std::vector<Value>& values);

  Kernel& k;
  examples::TmaGemmOperands g;
  SmemTile sA, sB;
  Pipeline ring;
  Value warp, lane, m0, n0, k_tiles;
};

}  // namespace kiln::ops
