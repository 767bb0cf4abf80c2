// cuda_hgemm mma_naive: one warp per 16x8 tile of C, fp16 in/out with fp16 accumulation. Each
// k-step copies a 16x16 slice of A and 8x16 of B into smem (16 bytes a lane), ldmatrix.x4 /
// .x2, one mma; C goes through a 16x8 smem tile and leaves as 16-byte rows.
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> Build() {
  Kernel k("hgemm/mma_naive", sm80(), {32});
  GemmOperands g = DeclareGemm(k, {.in_type = "f16", .out_type = "f16", .acc_type = "f16",
                                   .tile_m = 16, .tile_n = 8, .tile_k = 16});
  k.Grid("N/8", "M/16");
  SmemTile As = k.Smem(f16, 16, 16), Bs = k.Smem(f16, 8, 16), Cs = k.Smem(f16, 16, 8);
  Value lane = k.LaneId(), m0 = k.BlockIdx(1) * 16, n0 = k.BlockIdx(0) * 8;
  Regs acc = k.Registers(Type::Vec(f16, 2), 2);
  k.For(0, g.K, 16, [&](Value k0) {
    Value r = lane / 2, c = lane % 2 * 8;
    k.Store(As.At(r, c), k.Load(g.A.At({m0 + r, k0 + c}), 8));
    k.If(lane < 16, [&] { k.Store(Bs.At(r, c), k.Load(g.B.At({k0 + c, n0 + r}), 8)); });
    k.SyncThreads();
    auto a = k.LdMatrix(As, lane % 16, lane / 16 * 8, 4);
    auto b = k.LdMatrix(Bs, lane % 8, lane / 8 % 2 * 8, 2);
    auto d = k.MmaM16N8K16(f16, a, b, {acc[0], acc[1]});
    acc[0] = d[0];
    acc[1] = d[1];
    k.SyncThreads();
  });
  k.Store(Cs.At(lane / 4, lane % 4 * 2), acc[0]);
  k.Store(Cs.At(lane / 4 + 8, lane % 4 * 2), acc[1]);
  k.SyncThreads();
  k.If(lane < 16, [&] { k.Store(g.C.At({m0 + lane, n0}), k.Load(Cs.At(lane, 0), 8)); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("hgemm/mma_naive", "cuda_hgemm mma_naive: one warp per 16x8 tile, fp16 accumulate", Build);
}  // namespace kiln::examples
