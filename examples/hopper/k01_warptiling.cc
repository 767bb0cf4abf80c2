// fast.cu kernel 1: CUDA-core warptiling, no tensor cores. 128x128x16 block tile, 4 warps of
// 64x64, each thread 8x16 outputs (one 8-row x 4-col sub-tile in each of 4 column strips).
// Both operands are staged transposed in shared memory (k-major rows) so that a thread's fragment
// is a contiguous vector. Layouts as in the rest of the Hopper series: A row-major, B
// column-major (both K-major), C column-major.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 16, WM = 64, WN = 64, TM = 8, TN = 4, WNITER = 4;
constexpr int WSUBN = WN / WNITER;  // 16 columns per strip; WMITER is 1 for this shape

absl::StatusOr<KernelDef> Build() {
  Kernel k("hopper/k01", sm90a(), {128});
  auto g = DeclareGemm(k, {.c_order = "col", .tile_m = BM, .tile_n = BN, .tile_k = BK});
  k.Grid("N/128", "M/128");
  SmemTile As = k.Smem(bf16, BK, BM), Bs = k.Smem(bf16, BK, BN);  // [k][m], [k][n]

  Value tid = k.ThreadIdx(), warp = k.WarpId(), lane = k.LaneId();
  Value row0 = k.BlockIdx(1) * BM, col0 = k.BlockIdx(0) * BN;
  Value warp_row = warp / (BN / WN) * WM, warp_col = warp % (BN / WN) * WN;
  Value t_row = lane / (WSUBN / TN) * TM, t_col = lane % (WSUBN / TN) * TN;
  Regs acc = k.Registers(Type::Of(f32), TM * WNITER * TN);

  k.For(0, g.K, BK, [&](Value k0) {
    // Each thread loads 4 k-consecutive elements of 4 rows of A and of B, stored transposed.
    Value r = tid / (BK / 4), c = tid % (BK / 4) * 4;
    for (int off = 0; off < BM; off += 128 * 4 / BK) {
      Value a = k.Load(g.A.At({row0 + r + off, k0 + c}), 4);
      Value b = k.Load(g.B.At({k0 + c, col0 + r + off}), 4);
      for (int i = 0; i < 4; ++i) {
        k.Store(As.At(c + i, r + off), a.Lane(i));
        k.Store(Bs.At(c + i, r + off), b.Lane(i));
      }
    }
    k.SyncThreads();
    for (int kk = 0; kk < BK; ++kk) {
      Value a = k.Load(As.At(kk, warp_row + t_row), TM);
      Value b[WNITER];
      for (int s = 0; s < WNITER; ++s) b[s] = k.Load(Bs.At(kk, warp_col + s * WSUBN + t_col), TN);
      for (int m = 0; m < TM; ++m)
        for (int s = 0; s < WNITER; ++s)
          for (int n = 0; n < TN; ++n) {
            RegRef out = acc[m * WNITER * TN + s * TN + n];
            out = Fma(a.Lane(m).To(f32), b[s].Lane(n).To(f32), out);
          }
    }
    k.SyncThreads();
  });

  // C is column-major: a thread's 8 rows of one column are 16 contiguous bytes.
  for (int s = 0; s < WNITER; ++s)
    for (int n = 0; n < TN; ++n) {
      std::vector<Value> column;
      for (int m = 0; m < TM; ++m)
        column.push_back(Value(acc[m * WNITER * TN + s * TN + n]).To(bf16));
      k.Store(g.C.At({row0 + warp_row + t_row, col0 + warp_col + s * WSUBN + t_col + n}),
              k.Vector(column));
    }
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hopper/k01", "fast.cu kernel 1: CUDA-core warptiling, 128x128x16", Build);
}  // namespace kiln::examples
