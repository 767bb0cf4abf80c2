// The harness's fallback reference where cuBLAS is absent: one thread per output element, fp32
// accumulation in k order, any storage order (element strides are parameters).
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildReference(Scalar in, Scalar out, const char* name) {
  Kernel k(name, sm80(), {16, 16});
  const std::string in_name = in == f16 ? "f16" : "bf16", out_name = out == f16 ? "f16" : "bf16";
  DescribeGemm(k, {.in_type = in_name, .out_type = out_name, .tile_m = 1, .tile_n = 1, .tile_k = 1});
  Value A = k.PtrParam("A", in), B = k.PtrParam("B", in), C = k.PtrParam("C", out);
  Value M = k.I32Param("M"), N = k.I32Param("N"), K = k.I32Param("K");
  Value strides[6];
  const char* names[] = {"sA0", "sA1", "sB0", "sB1", "sC0", "sC1"};
  for (int i = 0; i < 6; ++i) strides[i] = k.I32Param(names[i]);
  k.Grid("N/16", "M/16");
  GlobalTensor a(A, {M, K}, {strides[0], strides[1]}), b(B, {K, N}, {strides[2], strides[3]}),
      c(C, {M, N}, {strides[4], strides[5]});
  Value m = k.BlockIdx(1) * 16 + k.ThreadIdx(1), n = k.BlockIdx(0) * 16 + k.ThreadIdx(0);
  k.If((m < M) & (n < N) , [&] {
    Regs acc = k.Registers(Type::Of(f32), 1);
    k.For(0, K, 1, [&](Value kk) {
      acc[0] = Fma(k.Load(a.At({m, kk})).To(f32), k.Load(b.At({kk, n})).To(f32), acc[0]);
    });
    k.Store(c.At({m, n}), Value(acc[0]).To(out));
  });
  return k.Build();
}

absl::StatusOr<KernelDef> ReferenceBf16() { return BuildReference(bf16, bf16, "reference/bf16"); }
absl::StatusOr<KernelDef> ReferenceF16() { return BuildReference(f16, f16, "reference/f16"); }

}  // namespace
KILN_EXAMPLE("reference/bf16", "naive bf16 GEMM, fp32 accumulation: the fallback reference", ReferenceBf16);
KILN_EXAMPLE("reference/f16", "naive f16 GEMM, fp32 accumulation: the fallback reference", ReferenceF16);
}  // namespace kiln::examples
