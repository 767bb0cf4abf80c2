// The GEMM entry point's kernel for operands TMA cannot read (K, or a packed MN-major operand's M
// or N, no multiple of 8: rows not 16 bytes apart) and for GPUs without a tuned kernel: mma.sync
// m16n8k16 (f32 accumulate) on 128x128x32 block tiles, 2x4 warps of 64x32, ldmatrix from padded
// shared memory. Each element of A and B is loaded on its own through the operands' strides
// (a warp's lanes along the operand's contiguous dimension) and masked past M, N and K, so any
// size and any storage order; C goes through the epilogue, masked.
#include <algorithm>
#include <tuple>
#include <vector>

#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int BM = 128, BN = 128, BK = 32, THREADS = 256;

absl::StatusOr<KernelDef> BuildStrided(Scalar in, const std::string& name,
                                       const EpilogueSpec& epi = {}) {
  Kernel k(name, sm80(), {THREADS});
  const Scalar out = epi.out;
  DescribeGemm(k, {.in_type = ScalarName(in),
                   .out_type = ScalarName(out),
                   .block_m = BM,
                   .block_n = BN,
                   .block_k = BK,
                   .epilogue = epi.Terms()});
  const StridedGemm g = DeclareStridedGemm(k, in, epi);
  const Value &M = g.M, &N = g.N, &K = g.K;
  k.Grid("N/128", "M/128");
  SmemTile As = k.Smem(in, BM, BK, {.pad = 8}), Bs = k.Smem(in, BN, BK, {.pad = 8});  // [row][k]
  Kernel::WarpTile w = k.Warps({.tile_m = BM, .tile_n = BN, .warps_m = 2, .warps_n = 4});
  Value tid = k.ThreadIdx(), lane = k.LaneId();
  Value m0 = k.BlockIdx(1) * BM, n0 = k.BlockIdx(0) * BN;
  Regs acc = k.Registers(Type::Of(f32), w.mmas_m * w.mmas_n * 4);
  for (int i = 0; i < acc.size(); ++i) acc[i] = k.F32(0);

  // The tile's elements, zero past the edges, a warp's 32 lanes along whichever of the operand's
  // dimensions is contiguous (a uniform branch on its strides): lane l takes k0 + l of rows
  // warp, warp + 8, ... where K is (K-major), else rows l, l + 32, l + 64, l + 96 of k-columns
  // warp, warp + 8, ... (MN-major).
  auto fill = [&](const SmemTile& tile, Value rows, Value row0, Value k0, Value k_contiguous,
                  auto at) {
    auto put = [&](Value r, Value col) {
      Value row = row0 + r;
      k.Store(tile.At(r, col),
              LoadGlobal(at(row, k0 + col), 1, {.mask = (row < rows) & (k0 + col < K)}));
    };
    k.If(
        k_contiguous,
        [&] {
          for (int r = 0; r < BM; r += THREADS / 32) put(tid / 32 + r, lane);
        },
        [&] {
          for (int r = 0; r < BM; r += 32)
            for (int col = 0; col < BK; col += THREADS / 32) put(lane + r, tid / 32 + col);
        });
  };
  k.For(0, K, BK, [&](Value k0) {
    fill(As, M, m0, k0, g.a.stride(1) == 1, [&](Value m, Value kk) { return g.a.At({m, kk}); });
    fill(Bs, N, n0, k0, g.b.stride(0) == 1, [&](Value n, Value kk) { return g.b.At({kk, n}); });
    k.SyncThreads();
    for (int kk = 0; kk < BK; kk += 16) MmaWarpStep(k, in, As, Bs, w, lane, kk, acc);
    k.SyncThreads();
  });
  // Accumulator i of mma (m, n): row lane / 4 (+ 8 for i >= 2), column lane % 4 * 2 + i % 2. A
  // fused epilogue's loads go out for EPI_MMAS mmas' elements before any is applied (one element
  // at a time, each waited on its own round trip:
  // docs/perf/2026-11-26-fused-epilogue-loads-together.md).
  auto element = [&](int j, int i) {
    const int m = j / w.mmas_n, n = j % w.mmas_n;
    Value row = m0 + w.m0 + m * 16 + lane / 4 + (i / 2) * 8,
          col = n0 + w.n0 + n * 8 + lane % 4 * 2 + i % 2;
    return std::tuple{row, col, (row < M) & (col < N)};
  };
  const int mmas = w.mmas_m * w.mmas_n, EPI_MMAS = 8;
  for (int j0 = 0; j0 < mmas; j0 += EPI_MMAS) {
    const int end = std::min(mmas, j0 + EPI_MMAS);
    std::vector<Epilogue::Inputs> inputs(4 * (end - j0));
    if (!epi.Plain())
      for (int j = j0; j < end; ++j)
        for (int i = 0; i < 4; ++i) {
          auto [row, col, inside] = element(j, i);
          inputs[(j - j0) * 4 + i] = g.epilogue.Load(row, col, inside);
        }
    for (int j = j0; j < end; ++j)
      for (int i = 0; i < 4; ++i) {
        auto [row, col, inside] = element(j, i);
        StoreGlobal(g.c.At({row, col}), g.epilogue.Output(acc[j * 4 + i], inputs[(j - j0) * 4 + i]),
                    {.mask = inside});
      }
  }
  return k.Build();
}

absl::StatusOr<KernelDef> StridedBf16() { return BuildStrided(bf16, "gemm/bf16_strided"); }

}  // namespace
KILN_EXAMPLE("gemm/bf16_strided",
             "the GEMM entry point's kernel where TMA cannot read the operands (K no multiple of "
             "8) and on GPUs "
             "without a tuned kernel: mma.sync on 128x128x32 tiles, elements loaded through any "
             "strides, masked",
             StridedBf16);
KILN_EXAMPLE_FAMILY(strided_bf16_family,
                    GemmFamily("gemm/bf16_strided",
                               "the strided kernel with other types and a fused epilogue",
                               /*tile=*/false, [](const std::string& name, const GemmVariant& v) {
                                 return BuildStrided(v.in, name, v.epilogue);
                               }));
}  // namespace kiln::examples
