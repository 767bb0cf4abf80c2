// Seed 003 v1: mma.sync m16n8k16 (bf16 in, f32 accumulate), 128x128x64 block tile, 2x2 warps of
// 64x64, synchronous 16-byte global->shared copies, ldmatrix.x4 for A and .x2 for B, unpadded
// shared tiles, direct bf16x2 stores. A row-major, B column-major, C row-major.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 64, WM = 64, WN = 64;
constexpr int MMA_M = 16, MMA_N = 8, MMA_K = 16, TILES_M = WM / MMA_M, TILES_N = WN / MMA_N;

// rows x BK elements of `src` (rows starting at row0, K-major) into `dst`, 16 bytes a thread.
void CopyTile(Kernel& k, const GlobalTensor& src, bool k_major_rows, Value row0, Value k0,
              const SmemTile& dst, Value tid) {
  for (int it = 0; it < dst.rows() * BK / (128 * 8); ++it) {
    Value idx = (tid + it * 128) * 8, r = idx / BK, c = idx % BK;
    Value p = k_major_rows ? src.At({row0 + r, k0 + c}) : src.At({k0 + c, row0 + r});
    k.Store(dst.At(r, c), k.Load(p, 8));
  }
}

absl::StatusOr<KernelDef> Build() {
  Kernel k("ampere/v1", sm80(), {128});
  auto g = DeclareGemm(k, {.tile_m = BM, .tile_n = BN, .tile_k = BK});
  k.Grid("M/128*N/128");
  SmemTile As = k.Smem(bf16, BM, BK), Bs = k.Smem(bf16, BN, BK);  // both [row][k]

  Value tid = k.ThreadIdx(), warp = k.WarpId(), lane = k.LaneId();
  Value blocks_n = g.N / BN, row0 = k.BlockIdx() / blocks_n * BM, col0 = k.BlockIdx() % blocks_n * BN;
  Value warp_m = warp / (BN / WN) * WM, warp_n = warp % (BN / WN) * WN;
  Regs acc = k.Registers(Type::Of(f32), TILES_M * TILES_N * 4);

  k.For(0, g.K, BK, [&](Value k0) {
    CopyTile(k, g.A, true, row0, k0, As, tid);
    CopyTile(k, g.B, false, col0, k0, Bs, tid);
    k.SyncThreads();
    for (int kk = 0; kk < BK; kk += MMA_K) {
      std::vector<Value> b[TILES_N];
      for (int n = 0; n < TILES_N; ++n)
        b[n] = k.LdMatrix(Bs.At(warp_n + n * MMA_N + lane % 8, kk + lane / 8 % 2 * 8), 2);
      for (int m = 0; m < TILES_M; ++m) {
        auto a = k.LdMatrix(As.At(warp_m + m * MMA_M + lane % 16, kk + lane / 16 * 8), 4);
        for (int n = 0; n < TILES_N; ++n) {
          const int base = (m * TILES_N + n) * 4;
          auto d = k.MmaM16N8K16(bf16, a, b[n], {acc[base], acc[base + 1], acc[base + 2], acc[base + 3]});
          for (int i = 0; i < 4; ++i) acc[base + i] = d[i];
        }
      }
    }
    k.SyncThreads();
  });

  // Accumulator fragment: lane holds rows lane/4 and lane/4 + 8, columns (lane%4)*2 + {0,1}.
  for (int m = 0; m < TILES_M; ++m)
    for (int n = 0; n < TILES_N; ++n)
      for (int half = 0; half < 2; ++half) {
        const int base = (m * TILES_N + n) * 4 + half * 2;
        Value pair = k.Vector({Value(acc[base]).To(bf16), Value(acc[base + 1]).To(bf16)});
        k.Store(g.C.At({row0 + warp_m + m * MMA_M + lane / 4 + half * 8,
                        col0 + warp_n + n * MMA_N + lane % 4 * 2}),
                pair);
      }
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("ampere/v1", "seed 003 v1: mma.sync m16n8k16, ldmatrix x4/x2, 128x128x64, sync loads", Build);
}  // namespace kiln::examples
