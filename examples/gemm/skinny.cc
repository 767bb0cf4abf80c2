// gemm/bf16_skinny: C = A * B when M is small (decoding: one token to a few dozen), the weight B
// read once at the memory's speed. No tensor cores: each warp owns COLS columns of C and walks K
// in 16-byte chunks (8 bf16 per lane, 256 per warp), multiplying each chunk of B's columns by the
// same chunk of up to MMAX rows of A (small, so it stays in L1/L2), then sums across the warp.
// Any M (rows beyond MMAX in further passes), any N, K a multiple of 8 (16-byte aligned rows).
// A row-major, B and C column-major, f32 accumulation: the entry point's layout.
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"

namespace kiln::examples {
namespace {

constexpr int MMAX = 16, COLS = 4, THREADS = 256, VEC = 8;

absl::StatusOr<KernelDef> BuildSkinny() {
  Kernel k("gemm/bf16_skinny", sm80(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.c_order = "col", .tile_m = 1, .tile_n = 1, .tile_k = VEC});
  k.Grid(absl::StrCat("N/", THREADS / 32 * COLS));
  Value lane = k.LaneId(), n0 = (k.BlockIdx() * (THREADS / 32) + k.WarpId()) * COLS;
  k.For(0, g.M, MMAX, [&](Value m0) {
    Regs acc = k.Registers(Type::Of(f32), COLS * MMAX);
    for (int i = 0; i < COLS * MMAX; ++i) acc[i] = k.F32(0);
    k.For(lane * VEC, g.K, 32 * VEC, [&](Value k0) {
      std::vector<std::vector<Value>> b(COLS);
      for (int c = 0; c < COLS; ++c) {  // the weights: read once, so kept out of L1
        Value v = LoadGlobal(g.B.At({k0, n0 + c}), VEC, {.cache = CacheHint::kNoL1, .mask = n0 + c < g.N});
        for (int e = 0; e < VEC; ++e) b[c].push_back(v.Lane(e).To(f32));
      }
      for (int m = 0; m < MMAX; ++m) {
        Value v = LoadGlobal(g.A.At({m0 + m, k0}), VEC, {.mask = m0 + m < g.M});
        for (int e = 0; e < VEC; ++e) {
          Value a = v.Lane(e).To(f32);
          for (int c = 0; c < COLS; ++c) acc[c * MMAX + m] = Fma(a, b[c][e], acc[c * MMAX + m]);
        }
      }
    });
    for (int c = 0; c < COLS; ++c)
      for (int m = 0; m < MMAX; ++m) {
        Value sum = WarpReduce(acc[c * MMAX + m], Reduce::kSum);
        k.If((lane == 0) & (m0 + m < g.M) & (n0 + c < g.N), [&] { k.Store(g.C.At({m0 + m, n0 + c}), sum.To(bf16)); });
      }
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("gemm/bf16_skinny", "the entry point's kernel for small M: CUDA cores, B streamed once in 16-byte chunks",
             BuildSkinny);
}  // namespace kiln::examples
