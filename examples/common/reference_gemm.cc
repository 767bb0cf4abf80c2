// The harness's fallback reference where cuBLAS is absent: one thread per output element, fp32
// accumulation in k order, any storage order (element strides are parameters).
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

// `epi` (the GEMM entry point's variants): C_in and residual are strided like C.
absl::StatusOr<KernelDef> BuildReference(Scalar in, const std::string& name,
                                         const EpilogueSpec& epi = {}) {
  Kernel k(name, sm80(), {16, 16});
  const Scalar out = epi.out;
  DescribeGemm(k, {.in_type = ScalarName(in),
                   .out_type = ScalarName(out),
                   .tile_m = 1,
                   .tile_n = 1,
                   .tile_k = 1,
                   .epilogue = epi.Terms()});
  const StridedGemm g = DeclareStridedGemm(k, in, epi);
  const Value &M = g.M, &N = g.N, &K = g.K;
  const GlobalTensor &a = g.a, &b = g.b, &c = g.c;
  const Epilogue& epilogue = g.epilogue;
  k.Grid("N/16", "M/16");
  Value m = k.BlockIdx(1) * 16 + k.ThreadIdx(1), n = k.BlockIdx(0) * 16 + k.ThreadIdx(0);
  k.If((m < M) & (n < N), [&] {
    Regs acc = k.Registers(Type::Of(f32), 1);
    k.For(0, K, 1, [&](Value kk) {
      acc[0] = Fma(k.Load(a.At({m, kk})).To(f32), k.Load(b.At({kk, n})).To(f32), acc[0]);
    });
    k.Store(c.At({m, n}), epilogue.Output(acc[0], m, n, m < M));
  });
  return k.Build();
}

absl::StatusOr<KernelDef> ReferenceBf16() { return BuildReference(bf16, "reference/bf16"); }
absl::StatusOr<KernelDef> ReferenceF16() {
  return BuildReference(f16, "reference/f16", {.out = f16});
}

}  // namespace
KILN_EXAMPLE("reference/bf16", "naive bf16 GEMM, fp32 accumulation: the fallback reference",
             ReferenceBf16);
KILN_EXAMPLE("reference/f16", "naive f16 GEMM, fp32 accumulation: the fallback reference",
             ReferenceF16);
// The GEMM entry point's fallback with other types and fused epilogues
// (reference/bf16.f16-f32.gelu).
KILN_EXAMPLE_FAMILY(reference_bf16_family,
                    GemmFamily("reference/bf16",
                               "the reference with other types and a fused epilogue",
                               /*tile=*/false, [](const std::string& name, const GemmVariant& v) {
                                 return BuildReference(v.in, name, v.epilogue);
                               }));
}  // namespace kiln::examples
