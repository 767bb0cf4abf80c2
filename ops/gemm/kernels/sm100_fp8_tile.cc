#include "ops/gemm/kernels/sm100_fp8_tile.h"

#include "kiln/memory_ops.h"

namespace kiln::ops {

Sm100Fp8Tile::Sm100Fp8Tile(Kernel& k, int stages)
    : k(k),
      g(examples::DeclareTmaGemm(k, {.bm = kBM,
                                     .bn = kBN,
                                     .bk = kBK,
                                     .rank = 2,
                                     .by_value = true,
                                     .c_row_major = true,
                                     .ragged = true,
                                     .in_type = "e4m3",
                                     .out_type = "bf16"})),
      sA(k.SmemSwizzled(e4m3, kBM, kBK, Swizzle::k128B, stages)),
      sB(k.SmemSwizzled(e4m3, kBN, kBK, Swizzle::k128B, stages)),
      ring(k, stages, /*consumers=*/1) {
  k.Grid("M/128*N/128");  // each rounded up
  warp = k.WarpId(), lane = k.LaneId();
  Value tiles_n = (g.N + (kBN - 1)) / kBN;
  m0 = k.BlockIdx() / tiles_n * kBM, n0 = k.BlockIdx() % tiles_n * kBN;
  k_tiles = (g.K + (kBK - 1)) / kBK;
}

void Sm100Fp8Tile::Elected(int w, const std::function<void()>& body) {
  k.If(warp == w, [&] { k.If(k.ElectOne(), body); });
}

void Sm100Fp8Tile::LoadAll() {
  Elected(0, [&] {
    Pipeline::Cursor at = ring.Start();
    k.For(0, k_tiles, 1, [&](Value kb) {
      ring.Produce(at, {{&g.A, sA, g.Box(m0, kb * kBK)}, {&g.B, sB, g.Box(n0, kb * kBK)}});
    });
  });
}

void Sm100Fp8Tile::StoreRow(const Value& m, int c0, const std::vector<Value>& values) {
  GlobalTensor c = g.Cptr;
  for (int j = 0; j < static_cast<int>(values.size()); ++j) {
    Value n = n0 + c0 + j;
    StoreGlobal(c.At({m, n}), values[j].To(bf16), {.mask = (m < g.M) & (n < g.N)});
  }
}

}  // namespace kiln::ops
