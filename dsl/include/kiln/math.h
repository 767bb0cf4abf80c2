// Math on kiln values beyond the operators: the special-function unit (ex2, lg2, rsqrt, ...),
// IEEE and approximate square root, reciprocal and division, and packed conversions to 16- and
// 8-bit floats. Each takes scalar f32 values unless it says otherwise; a wrong type fails the
// build at the calling line. The PTX each emits is named beside it.
#pragma once

#include "kiln/value.h"

namespace kiln {

// 2^x: ex2.approx.ftz.f32 (max relative error 2^-22.5; subnormal inputs and results flush to 0).
Value Exp2(const Value& x, Loc loc = Loc::current());
// e^x = 2^(x * log2 e): one mul.f32 and ex2.approx.ftz.f32. Fold a scale into the multiply
// yourself (Exp2(x * (scale * log2 e))) to save the mul, as attention kernels do.
Value Exp(const Value& x, Loc loc = Loc::current());
// log2 x: lg2.approx.ftz.f32 (max absolute error 2^-22 on [0.5, 2]).
Value Log2(const Value& x, Loc loc = Loc::current());
// ln x = log2 x * ln 2.
Value Log(const Value& x, Loc loc = Loc::current());
// 1/sqrt(x): rsqrt.approx.f32 (max relative error 2^-22.9), subnormal x read as it is (a norm of
// tiny values, whose mean square is subnormal, stays finite).
Value Rsqrt(const Value& x, Loc loc = Loc::current());
// sqrt(x): sqrt.rn.f32 (IEEE, correctly rounded); SqrtApprox: sqrt.approx.ftz.f32.
Value Sqrt(const Value& x, Loc loc = Loc::current());
Value SqrtApprox(const Value& x, Loc loc = Loc::current());
// 1/x: rcp.rn.f32 (IEEE); RcpApprox: rcp.approx.ftz.f32 (max relative error 2^-23).
Value Rcp(const Value& x, Loc loc = Loc::current());
Value RcpApprox(const Value& x, Loc loc = Loc::current());
// tanh x: tanh.approx.f32, one special-function instruction (max relative error 2^-11 over the
// whole range; subnormal inputs pass through; +-inf give +-1).
Value TanhApprox(const Value& x, Loc loc = Loc::current());
// x rounded to a whole number, still f32 (NaN stays NaN, +-inf stay): Round to nearest even
// (cvt.rni.f32.f32), Floor toward -inf (cvt.rmi), Ceil toward +inf (cvt.rpi), Trunc toward 0
// (cvt.rzi). x.To(s32) truncates (cvt.rzi.s32.f32): Round(x).To(s32) rounds to nearest even.
Value Round(const Value& x, Loc loc = Loc::current());
Value Floor(const Value& x, Loc loc = Loc::current());
Value Ceil(const Value& x, Loc loc = Loc::current());
Value Trunc(const Value& x, Loc loc = Loc::current());
// a / b: div.approx.ftz.f32 (2 ulp over the full range). IEEE division is operator/ (div.rn.f32).
Value DivApprox(const Operand& a, const Operand& b);
// |x| for f32 (abs.f32) or f16/bf16.
Value Abs(const Value& x, Loc loc = Loc::current());

// Two f32 values rounded to nearest even and packed into one 32-bit vector, `lo` in lane 0:
// cvt.rn.bf16x2.f32 (bf16x2 result) and cvt.rn.f16x2.f32 (f16x2 result).
Value PackBf16x2(const Value& lo, const Value& hi, Loc loc = Loc::current());
Value PackF16x2(const Value& lo, const Value& hi, Loc loc = Loc::current());

// The 8-bit floats of sm_89 and later: e4m3 (max 448, no infinity) and e5m2 (max 57344).
enum class Fp8 : uint8_t { kE4M3, kE5M2 };
// Two f32 values rounded to nearest even, saturated to the largest finite fp8, packed into an
// i16 (`lo` in the low byte): cvt.rn.satfinite.e4m3x2.f32 / .e5m2x2.f32.
Value PackFp8x2(const Value& lo, const Value& hi, Fp8 format, Loc loc = Loc::current());
// An i16 of two fp8 values to an f16x2 vector, exactly: cvt.rn.f16x2.e4m3x2 / .e5m2x2.
Value UnpackFp8x2(const Value& packed, Fp8 format, Loc loc = Loc::current());

// Four bytes picked from two i32 words: byte i of the result is the byte that nibble i of
// `selector` names in {b, a} (bytes 0-3 of a, 4-7 of b); a nibble's top bit replicates that
// byte's sign bit instead. prmt.b32, one instruction: a 4 x 4 byte transpose takes 8.
Value BytePermute(const Value& a, const Value& b, uint32_t selector, Loc loc = Loc::current());

}  // namespace kiln
