#include "kiln/epilogue.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/bundle/epilogue_terms.h"
#include "kiln/kernel.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln {

std::string EpilogueSpec::Terms() const {
  std::vector<std::string> t;
  if (scale) t.push_back("scale");
  if (bias == BiasAxis::kRow) t.push_back("bias_row");
  if (bias == BiasAxis::kColumn) t.push_back("bias_col");
  if (activation == Activation::kRelu) t.push_back("relu");
  if (activation == Activation::kGelu) t.push_back("gelu");
  if (activation == Activation::kSilu) t.push_back("silu");
  if (residual) t.push_back("residual");
  if (swiglu) t.push_back("swiglu");
  if (rope) t.push_back("rope");
  return absl::StrJoin(t, ".");
}

absl::StatusOr<EpilogueSpec> ParseEpilogueTerms(const std::string& terms, Scalar out) {
  EpilogueSpec spec;
  spec.out = out;
  absl::StatusOr<std::string> canonical =
      rt::CanonicalEpilogue(terms);  // known terms, one of each kind
  if (!canonical.ok()) return canonical.status();
  for (absl::string_view t : absl::StrSplit(*canonical, '.', absl::SkipEmpty())) {
    if (t == "scale")
      spec.scale = true;
    else if (t == "residual")
      spec.residual = true;
    else if (t == "bias_row")
      spec.bias = BiasAxis::kRow;
    else if (t == "bias_col")
      spec.bias = BiasAxis::kColumn;
    else if (t == "swiglu")
      spec.swiglu = true;
    else if (t == "rope")
      spec.rope = true;
    else if (t == "relu")
      spec.activation = Activation::kRelu;
    else if (t == "gelu")
      spec.activation = Activation::kGelu;
    else
      spec.activation = Activation::kSilu;
  }
  return spec;
}

Epilogue Epilogue::Declare(Kernel& k, const EpilogueSpec& spec, const Value& M, const Value& N,
                           bool column_major, Loc loc) {
  Value one = k.I32(1, loc);
  return column_major ? Declare(k, spec, M, N, one, M, loc) : Declare(k, spec, M, N, N, one, loc);
}

Epilogue Epilogue::Declare(Kernel& k, const EpilogueSpec& spec, const Value& M, const Value& N,
                           const Value& row_stride, const Value& col_stride, Loc loc) {
  Epilogue e;
  e.spec_ = spec;
  e.m_ = M, e.n_ = N;
  if (spec.out != Scalar::kBF16 && spec.out != Scalar::kF16 && spec.out != Scalar::kF32)
    k.Fail("an epilogue stores bf16, f16 or f32", loc);
  auto matrix = [&](const char* name) {
    return GlobalTensor(k.PtrParam(name, spec.out, loc), {M, N}, {row_stride, col_stride});
  };
  if (spec.scale) {
    e.alpha_ = k.F32Param("alpha", loc);
    e.beta_ = k.F32Param("beta", loc);
    e.c_in_ = matrix("C_in");
  }
  if (spec.bias != BiasAxis::kNone) e.bias_ = k.PtrParam("bias", spec.out, loc);
  if (spec.residual) e.residual_ = matrix("residual");
  if (spec.rope) {
    e.rope_rows_ = k.I32Param("rope_rows", loc);
    e.rope_dim_ = k.I32Param("rope_dim", loc);
    e.rope_period_ = k.I32Param("rope_period", loc);
    e.rope_inv_period_ = Rcp(e.rope_period_.To(Scalar::kF32, loc), loc);
    Value half = e.rope_dim_ / 2, one = k.I32(1, loc);
    e.rope_angles_ = GlobalTensor(k.PtrParam("rope_angles", Scalar::kI32, loc),
                                  {e.rope_period_, half}, {half, one});
  }
  return e;
}

Epilogue::Inputs Epilogue::Load(const Value& row, const Value& col, const Value& inside,
                                Loc loc) const {
  Inputs in = LoadMatrices(row, col, inside, loc);
  if (spec_.bias != BiasAxis::kNone)
    in.bias = LoadGlobal(BiasAddress(row, col, loc), 1, {.mask = inside}, loc);
  return in;
}

Epilogue::Inputs Epilogue::LoadMatrices(const Value& row, const Value& col, const Value& inside,
                                        Loc loc) const {
  auto load = [&](const GlobalTensor& t) {
    return LoadGlobal(t.At({row, col}, loc), 1, {.mask = inside}, loc);
  };
  Inputs in;
  if (spec_.scale) in.c_in = load(c_in_);
  if (spec_.residual) in.residual = load(residual_);
  return in;
}

Value Epilogue::LoadBias(const Value& row, const Value& col, Loc loc) const {
  if (spec_.bias == BiasAxis::kNone) return Value();
  const bool by_row = spec_.bias == BiasAxis::kRow;
  return LoadGlobal(BiasAddress(row, col, loc), 1, {.mask = by_row ? row < m_ : col < n_}, loc);
}

Value Epilogue::BiasAddress(const Value& row, const Value& col, Loc loc) const {
  return bias_ + (spec_.bias == BiasAxis::kRow ? row : col).To(Scalar::kI64, loc);
}

Value Epilogue::Apply(const Value& acc, const Inputs& in, Loc loc) const {
  return AddResidual(ApplyBeforeResidual(acc, in, loc), in.residual, loc);
}

Value Epilogue::AddResidual(const Value& x, const Value& residual, Loc loc) const {
  return spec_.residual ? x + residual.To(Scalar::kF32, loc) : x;
}

Value Epilogue::ApplyBeforeResidual(const Value& acc, const Inputs& in, Loc loc) const {
  auto f32 = [&](const Value& v) { return v.To(Scalar::kF32, loc); };
  Value x = acc;
  if (spec_.scale)
    x = Fma(Operand(alpha_, loc), Operand(x, loc), Operand(beta_ * f32(in.c_in), loc));
  if (spec_.bias != BiasAxis::kNone) x = x + f32(in.bias);
  return ApplyActivation(spec_.activation, x, loc);
}

Value ApplyActivation(Activation activation, const Value& x, Loc loc) {
  // GELU and SiLU are x * (1 + tanh(u)) / 2 with one tanh.approx.f32 each (u = the GELU's cubic,
  // or x / 2 for SiLU: x * sigmoid(x) exactly): one special-function instruction and five or two
  // others an element. The forms through ex2 and rcp took two special-function instructions and
  // ~14 others, and bounded the epilogue (docs/perf/2026-11-26-gelu-silu-tanh-approx-bias-once.md).
  // tanh.approx's relative error is at most 2^-11, so the result's absolute error is at most
  // |x| 2^-12: under half a bf16 or f16 step where |x| dominates.
  auto half_x_times_one_plus_tanh = [&](const Value& u) {
    Value half = x * 0.5;
    return Fma(Operand(half, loc), Operand(TanhApprox(u, loc), loc), Operand(half, loc));
  };
  switch (activation) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:  // (a select, not max.f32, which would turn NaN into 0)
      return Select(Operand(Operand(x, loc) < Operand(0.0, loc), loc), Operand(0.0, loc),
                    Operand(x, loc));
    case Activation::kGelu: {
      const double sqrt_2_over_pi = 0.7978845608028654;
      Value u = x * Fma(Operand(x * x, loc), Operand(0.044715 * sqrt_2_over_pi, loc),
                        Operand(sqrt_2_over_pi, loc));
      return half_x_times_one_plus_tanh(u);
    }
    case Activation::kSilu:
      return half_x_times_one_plus_tanh(x * 0.5);
  }
  return x;
}

Value Epilogue::Swiglu(const Value& gate, const Value& up, Loc loc) const {
  Value half = gate * 0.5;  // silu(g) = g / 2 (1 + tanh(g / 2)), as kSilu
  return Fma(Operand(half, loc), Operand(TanhApprox(half, loc), loc), Operand(half, loc)) * up;
}

Value Epilogue::RopeAngle(const Value& row, const Value& col, const Value& inside, Loc loc) const {
  Value in_head = row % rope_dim_;
  // col % rope_period without a division per column (a tile's thread has dozens): the quotient
  // from the period's f32 reciprocal is off by at most one either way below 2^23 columns, so one
  // less than it (at least 0) leaves a remainder under three periods, brought down twice.
  Value q = Max((col.To(Scalar::kF32, loc) * rope_inv_period_).To(Scalar::kI32, loc), 1) - 1;
  Value position = col - q * rope_period_;
  for (int i = 0; i < 2; ++i)
    position = Select(Operand(position >= rope_period_, loc), Operand(position - rope_period_, loc),
                      Operand(position, loc));
  Value frequency = in_head / 16 * 8 + in_head % 8;
  return LoadGlobal(rope_angles_.At({position, frequency}, loc), 1,
                    {.mask = inside & (row < rope_rows_)}, loc);
}

std::pair<Value, Value> Epilogue::Rope(const Value& x1, const Value& x2, const Value& row,
                                       const Value& angle, Loc loc) const {
  Value turns = row < rope_rows_;
  // bf16 to f32 is the bf16's bits in the high half: cos from the word's low half, sin its high.
  Value c = (angle << 16).Bitcast(Type::Of(Scalar::kF32), loc),
        s = (angle & -65536).Bitcast(Type::Of(Scalar::kF32), loc);
  return {Select(Operand(turns, loc), Operand(Fma(x1, c, -(x2 * s)), loc), Operand(x1, loc)),
          Select(Operand(turns, loc), Operand(Fma(x2, c, x1 * s), loc), Operand(x2, loc))};
}

Value Epilogue::Apply(const Value& acc, const Value& row, const Value& col, const Value& inside,
                      Loc loc) const {
  return Apply(acc, Load(row, col, inside, loc), loc);
}

Value Epilogue::Output(const Value& acc, const Inputs& in, Loc loc) const {
  Value x = Apply(acc, in, loc);
  return spec_.out == Scalar::kF32 ? x : x.To(spec_.out, loc);
}

Value Epilogue::Output(const Value& acc, const Value& row, const Value& col, const Value& inside,
                       Loc loc) const {
  return Output(acc, Load(row, col, inside, loc), loc);
}

}  // namespace kiln
