// gemm/epilogue_pass.{bf16,f16,f32}: the GEMM entry point's epilogue as a pass of its own, for a
// combination of terms no bundled kernel fuses (bundles hold a chosen few; rt::RunGemm). The
// product comes in f32 (acc: M x N, column-major, packed) and each element becomes
//   C[r, c] = act(alpha * acc + beta * C_in[r, c] + bias[r or c]) + residual[r, c]
// as the fused epilogues compute it (kiln/epilogue.h, ApplyActivation). The terms are chosen by
// parameters, not by variant: has_c_in, bias_axis (0 none, 1 bias[r], 2 bias[c]), activation
// (0 none, 1 relu, 2 gelu, 3 silu) and has_residual; C, C_in and residual hold element (r, c) at
// r * sC0 + c * sC1. A thread an element, along M: acc's reads coalesce, and a column-major C's
// stores too.
#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/epilogue.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256;

absl::StatusOr<KernelDef> BuildEpiloguePass(Scalar out, const char* type) {
  Kernel k(absl::StrCat("gemm/epilogue_pass.", type), sm80(), {kThreads});
  Value acc = k.PtrParam("acc", f32), c = k.PtrParam("C", out);
  Value c_in = k.PtrParam("C_in", out), bias = k.PtrParam("bias", out),
        residual = k.PtrParam("residual", out);
  Value M = k.I32Param("M");
  Value s0 = k.I64Param("sC0"), s1 = k.I64Param("sC1");
  Value alpha = k.F32Param("alpha"), beta = k.F32Param("beta");
  Value has_c_in = k.I32Param("has_c_in"), bias_axis = k.I32Param("bias_axis"),
        activation = k.I32Param("activation"), has_residual = k.I32Param("has_residual");
  Value units = k.I64Param("units");  // M * N: the elements
  k.Grid(absl::StrCat("units/", kThreads));
  Value e = k.BlockIdx(0).To(i64) * kThreads + k.ThreadIdx().To(i64);
  k.If(e < units, [&] {
    Value r = e % M.To(i64), col = e / M.To(i64), at = r * s0 + col * s1;
    Regs x = k.Registers(Type::Of(f32), 1);
    Value product = k.Load(acc + e);
    x[0] = alpha * product;  // (alpha = 1 where the call has no scale: acc itself)
    k.If(has_c_in != 0, [&] {
      x[0] = Fma(Operand(alpha), Operand(product), Operand(beta * k.Load(c_in + at).To(f32)));
    });
    k.If(bias_axis == 1, [&] { x[0] = Value(x[0]) + k.Load(bias + r).To(f32); });
    k.If(bias_axis == 2, [&] { x[0] = Value(x[0]) + k.Load(bias + col).To(f32); });
    for (auto [code, a] : {std::pair{1, Activation::kRelu}, std::pair{2, Activation::kGelu},
                           std::pair{3, Activation::kSilu}})
      k.If(activation == code, [&] { x[0] = ApplyActivation(a, x[0]); });
    k.If(has_residual != 0, [&] { x[0] = Value(x[0]) + k.Load(residual + at).To(f32); });
    k.Store(c + at, Value(x[0]).To(out));
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(gemm_epilogue_pass_bf16, "gemm/epilogue_pass.bf16",
                     "the GEMM entry point's epilogue as a pass of its own (terms by parameter), "
                     "for a combination no bundled kernel fuses; bf16 C",
                     [] { return BuildEpiloguePass(bf16, "bf16"); });
KILN_EXAMPLE_VARIANT(gemm_epilogue_pass_f16, "gemm/epilogue_pass.f16", "gemm/epilogue_pass, f16 C",
                     [] { return BuildEpiloguePass(f16, "f16"); });
KILN_EXAMPLE_VARIANT(gemm_epilogue_pass_f32, "gemm/epilogue_pass.f32", "gemm/epilogue_pass, f32 C",
                     [] { return BuildEpiloguePass(f32, "f32"); });
}  // namespace kiln::examples
