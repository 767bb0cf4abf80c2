// Special functions, division variants and packed conversions (kiln/math.h). Each is a PTX
// instruction in an inline-asm block without side effects, so LLVM may still move, merge or
// drop it like the arithmetic around it.
#include "kiln/math.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {

const Type kF32 = Type::Of(Scalar::kF32);

// The kernel of `x`, or null for an empty x (returned as is: its first use reports it).
KernelState* StateOf(const Value& x) { return Access::State(x); }

bool Expect(KernelState& s, const Value& x, const Type& t, const char* op, const Loc& loc) {
  if (x.type() == t) return true;
  s.Fail(absl::StrCat(op, " takes ", t.Str(), ", not ", x.type().Str()), loc);
  return false;
}

// One f32 -> f32 instruction, e.g. "ex2.approx.ftz.f32".
Value UnaryF32(const char* op, const char* instr, const Value& x, const Loc& loc) {
  KernelState* s = StateOf(x);
  if (!s) return x;
  if (!Expect(*s, x, kF32, op, loc)) return s->Poison(kF32, loc);
  mlir::Location l = s->ToLoc(loc);
  return s->Wrap(s->InlineAsm(absl::StrCat(instr, " $0, $1;"), "=f,f", {s->Unwrap(x, loc)},
                              s->builder.getF32Type(), l, /*side_effects=*/false),
                 kF32);
}

}  // namespace

Value Exp2(const Value& x, Loc loc) { return UnaryF32("Exp2", "ex2.approx.ftz.f32", x, loc); }
Value Log2(const Value& x, Loc loc) { return UnaryF32("Log2", "lg2.approx.ftz.f32", x, loc); }
Value Rsqrt(const Value& x, Loc loc) { return UnaryF32("Rsqrt", "rsqrt.approx.f32", x, loc); }
Value Sqrt(const Value& x, Loc loc) { return UnaryF32("Sqrt", "sqrt.rn.f32", x, loc); }
Value SqrtApprox(const Value& x, Loc loc) {
  return UnaryF32("SqrtApprox", "sqrt.approx.ftz.f32", x, loc);
}
Value Rcp(const Value& x, Loc loc) { return UnaryF32("Rcp", "rcp.rn.f32", x, loc); }
Value RcpApprox(const Value& x, Loc loc) {
  return UnaryF32("RcpApprox", "rcp.approx.ftz.f32", x, loc);
}
Value TanhApprox(const Value& x, Loc loc) {
  return UnaryF32("TanhApprox", "tanh.approx.f32", x, loc);
}
Value Round(const Value& x, Loc loc) { return UnaryF32("Round", "cvt.rni.f32.f32", x, loc); }
Value Floor(const Value& x, Loc loc) { return UnaryF32("Floor", "cvt.rmi.f32.f32", x, loc); }
Value Ceil(const Value& x, Loc loc) { return UnaryF32("Ceil", "cvt.rpi.f32.f32", x, loc); }
Value Trunc(const Value& x, Loc loc) { return UnaryF32("Trunc", "cvt.rzi.f32.f32", x, loc); }

Value Exp(const Value& x, Loc loc) {
  if (!StateOf(x)) return x;
  return Exp2(Operand(x, loc) * Operand(M_LOG2E, loc), loc);
}

Value Log(const Value& x, Loc loc) {
  if (!StateOf(x)) return x;
  return Operand(Log2(x, loc), loc) * Operand(M_LN2, loc);
}

Value DivApprox(const Operand& a, const Operand& b) {
  const Operand& v = Access::IsImm(a) ? b : a;
  const Value& val = Access::Val(v);
  KernelState* s = StateOf(val);
  if (Access::IsImm(v)) return Value(a.loc());  // two numbers: C++ divides them
  if (!s) return val;
  for (const Operand* o : {&a, &b})
    if (!Access::IsImm(*o) && !Expect(*s, Access::Val(*o), kF32, "DivApprox", a.loc()))
      return s->Poison(kF32, a.loc());
  mlir::Location l = s->ToLoc(a.loc());
  return s->Wrap(s->InlineAsm("div.approx.ftz.f32 $0, $1, $2;", "=f,f,f",
                              {s->Materialize(a, kF32), s->Materialize(b, kF32)},
                              s->builder.getF32Type(), l, /*side_effects=*/false),
                 kF32);
}

Value Abs(const Value& x, Loc loc) {
  KernelState* s = StateOf(x);
  if (!s) return x;
  const Type& t = x.type();
  if (!t.IsFloat() || t.kind == Type::Kind::kPointer) {
    s->Fail(absl::StrCat("Abs takes a float value, not ", t.Str()), loc);
    return s->Poison(t, loc);
  }
  return s->Wrap(mlir::LLVM::FAbsOp::create(s->builder, s->ToLoc(loc), s->Unwrap(x, loc)), t);
}

namespace {

// Two f32 values into one register by `instr` ("cvt.rn.bf16x2.f32 $0, $1, $2;" shape), whose
// result has `bits` (32: "=r", 16: "=h") and is read back as `result`.
Value PackPair(const char* op, const std::string& instr, int bits, const Type& result,
               const Value& lo, const Value& hi, const Loc& loc) {
  if (!StateOf(lo)) return lo;
  if (!StateOf(hi)) return hi;
  KernelState& s = *StateOf(lo);
  if (!Expect(s, lo, kF32, op, loc) || !Expect(s, hi, kF32, op, loc)) return s.Poison(result, loc);
  const Type word = Type::Of(bits == 32 ? Scalar::kI32 : Scalar::kI16);
  // The first source goes to the upper half of the destination (PTX ISA, cvt): hi first.
  mlir::Value packed =
      s.InlineAsm(absl::StrCat(instr, " $0, $1, $2;"), bits == 32 ? "=r,f,f" : "=h,f,f",
                  {s.Unwrap(hi, loc), s.Unwrap(lo, loc)}, s.ToMlir(word), s.ToLoc(loc),
                  /*side_effects=*/false);
  Value w = s.Wrap(packed, word);
  return result == word ? w : w.Bitcast(result, loc);
}

bool CheckFp8Target(KernelState& s, const char* op, const Loc& loc) {
  if (s.target.compute_capability >= 89) return true;
  s.Fail(absl::StrCat(op, " needs sm_89 or later (fp8 conversions); this kernel targets ",
                      s.target.chip),
         loc);
  return false;
}

const char* Fp8Name(Fp8 format) { return format == Fp8::kE4M3 ? "e4m3x2" : "e5m2x2"; }

}  // namespace

Value PackBf16x2(const Value& lo, const Value& hi, Loc loc) {
  return PackPair("PackBf16x2", "cvt.rn.bf16x2.f32", 32, Type::Vec(Scalar::kBF16, 2), lo, hi, loc);
}
Value PackF16x2(const Value& lo, const Value& hi, Loc loc) {
  return PackPair("PackF16x2", "cvt.rn.f16x2.f32", 32, Type::Vec(Scalar::kF16, 2), lo, hi, loc);
}

Value PackFp8x2(const Value& lo, const Value& hi, Fp8 format, Loc loc) {
  if (StateOf(lo) && !CheckFp8Target(*StateOf(lo), "PackFp8x2", loc))
    return StateOf(lo)->Poison(Type::Of(Scalar::kI16), loc);
  return PackPair("PackFp8x2", absl::StrCat("cvt.rn.satfinite.", Fp8Name(format), ".f32"), 16,
                  Type::Of(Scalar::kI16), lo, hi, loc);
}

Value BytePermute(const Value& a, const Value& b, uint32_t selector, Loc loc) {
  if (!StateOf(a)) return a;
  if (!StateOf(b)) return b;
  KernelState& s = *StateOf(a);
  const Type word = Type::Of(Scalar::kI32);
  if (!Expect(s, a, word, "BytePermute", loc) || !Expect(s, b, word, "BytePermute", loc))
    return s.Poison(word, loc);
  if (selector > 0xffff) {
    s.Fail(absl::StrCat("BytePermute's selector has 4 nibbles, not 0x", absl::Hex(selector)), loc);
    return s.Poison(word, loc);
  }
  return s.Wrap(s.InlineAsm(absl::StrCat("prmt.b32 $0, $1, $2, ", selector, ";"), "=r,r,r",
                            {s.Unwrap(a, loc), s.Unwrap(b, loc)}, s.ToMlir(word), s.ToLoc(loc),
                            /*side_effects=*/false),
                word);
}

Value UnpackFp8x2(const Value& packed, Fp8 format, Loc loc) {
  KernelState* s = StateOf(packed);
  if (!s) return packed;
  const Type result = Type::Vec(Scalar::kF16, 2);
  if (!Expect(*s, packed, Type::Of(Scalar::kI16), "UnpackFp8x2", loc) ||
      !CheckFp8Target(*s, "UnpackFp8x2", loc))
    return s->Poison(result, loc);
  mlir::Value bits =
      s->InlineAsm(absl::StrCat("cvt.rn.f16x2.", Fp8Name(format), " $0, $1;"), "=r,h",
                   {s->Unwrap(packed, loc)}, s->builder.getI32Type(), s->ToLoc(loc),
                   /*side_effects=*/false);
  return s->Wrap(bits, Type::Of(Scalar::kI32)).Bitcast(result, loc);
}

}  // namespace kiln
