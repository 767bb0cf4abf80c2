// Seed 003 v1-v4 (one kernel with switches, as upstream's matmul_v1.cu): mma.sync m16n8k16 (bf16
// in, f32 accumulate), 128x128x64 block tile, 2x2 warps of 64x64, one smem stage, ldmatrix.x4
// for A and .x2 for B, direct bf16x2 stores. A row-major, B column-major, C row-major.
//   v1: synchronous 16-byte loads, unpadded tiles      v2: cp.async + wait_all
//   v3: v2 with rows padded by 8 elements               v4: v2 with col ^ (row % 8) swizzled tiles
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 64, THREADS = 128;

absl::StatusOr<KernelDef> Build(const char* name, bool async, SmemLayout layout) {
  Kernel k(name, sm80(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.tile_m = BM, .tile_n = BN, .tile_k = BK});
  k.Grid("M/128*N/128");
  SmemTile As = k.Smem(bf16, BM, BK, layout), Bs = k.Smem(bf16, BN, BK, layout);  // [row][k]
  Kernel::WarpTile w = k.Warps({.tile_m = BM, .tile_n = BN, .warps_m = 2, .warps_n = 2});
  Value tid = k.ThreadIdx(), lane = k.LaneId();
  Value blocks_n = g.N / BN, m0 = k.BlockIdx() / blocks_n * BM, n0 = k.BlockIdx() % blocks_n * BN;
  Regs acc = k.Registers(Type::Of(f32), w.mmas_m * w.mmas_n * 4);

  k.For(0, g.K, BK, [&](Value k0) {
    CopyTile(
        k, As,
        [&](Value r, Value c) {
          return g.A.At({m0 + r, k0 + c});
        },
        tid, THREADS, async);
    CopyTile(
        k, Bs,
        [&](Value r, Value c) {
          return g.B.At({k0 + c, n0 + r});
        },
        tid, THREADS, async);
    if (async) k.CpAsyncWaitAll();
    k.SyncThreads();
    for (int kk = 0; kk < BK; kk += 16) MmaWarpStep(k, bf16, As, Bs, w, lane, kk, acc);
    k.SyncThreads();
  });
  StoreAccumulator(k, acc, w.mmas_m, w.mmas_n, [&](Value r, Value c) {
    return g.C.At({m0 + w.m0 + r, n0 + w.n0 + c});
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(v1, "ampere/v1",
                     "seed 003 v1: mma.sync m16n8k16, ldmatrix x4/x2, 128x128x64, sync loads",
                     [] { return Build("ampere/v1", false, {}); });
KILN_EXAMPLE_VARIANT(v2, "ampere/v2", "seed 003 v2: v1 with cp.async + wait_all",
                     [] { return Build("ampere/v2", true, {}); });
KILN_EXAMPLE_VARIANT(v3, "ampere/v3", "seed 003 v3: v2 with smem rows padded by 8 elements",
                     [] { return Build("ampere/v3", true, {.pad = 8}); });
KILN_EXAMPLE_VARIANT(v4, "ampere/v4", "seed 003 v4: v2 with col ^ (row % 8) swizzled smem",
                     [] { return Build("ampere/v4", true, {.swizzle = UnitSwizzle::Row8()}); });
}  // namespace kiln::examples
