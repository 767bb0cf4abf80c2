#include "examples/gemm.h"

namespace kiln::examples {
namespace {

Scalar ScalarNamed(const std::string& name) {
  if (name == "f16") return f16;
  if (name == "f32") return f32;
  return bf16;
}

// rows x cols matrix stored row-major (stride cols) or column-major (stride rows).
GlobalTensor Matrix(const Value& base, const Value& rows, const Value& cols,
                    const std::string& order, Kernel& k, Loc loc) {
  Value one = k.I32(1, loc);
  if (order == "row") return GlobalTensor(base, {rows, cols}, {cols, one});
  return GlobalTensor(base, {rows, cols}, {one, rows});
}

}  // namespace

GemmOperands DeclareGemm(Kernel& k, const rt::GemmSpec& spec, Loc loc) {
  k.Gemm(spec, loc);
  Value a = k.PtrParam("A", ScalarNamed(spec.in_type), loc);
  Value b = k.PtrParam("B", ScalarNamed(spec.in_type), loc);
  Value c = k.PtrParam("C", ScalarNamed(spec.out_type), loc);
  GemmOperands g;
  g.M = k.I32Param("M", loc);
  g.N = k.I32Param("N", loc);
  g.K = k.I32Param("K", loc);
  g.A = Matrix(a, g.M, g.K, spec.a_order, k, loc);
  g.B = Matrix(b, g.K, g.N, spec.b_order, k, loc);
  g.C = Matrix(c, g.M, g.N, spec.c_order, k, loc);
  return g;
}

}  // namespace kiln::examples
