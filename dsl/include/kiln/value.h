// kiln's values: the scalar and vector types of a kernel, SSA values, immediates and the
// arithmetic on them. Every op records the caller's source line (std::source_location) so a
// mistake is reported at the DSL line that made it.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

namespace kiln {

using Loc = std::source_location;

// i32/i64 are unsigned (index arithmetic: /, %, >>, comparisons and conversions are unsigned,
// + and * may not wrap); s32/s64 are signed (sdiv, srem, arithmetic >>, signed comparisons,
// sign extension, signed int<->float). Both are the same registers: To() between them is free.
// kE4M3 and kE5M2 are the 8-bit floats of sm_89 and later (PTX .e4m3, .e5m2): storage and tensor
// core operands only (TMA, wgmma, tcgen05.mma); no arithmetic is defined on them. i8 (unsigned)
// and s8 (signed) are bytes: loads, stores and arithmetic as the wider integers; To(i8 or s8)
// from a float rounds toward zero and clamps to the type's range (0..255, -128..127; NaN gives
// 0), from a wider integer keeps the low 8 bits.
enum class Scalar : uint8_t {
  kI1,
  kI16,
  kI32,
  kI64,
  kF16,
  kBF16,
  kF32,
  kS32,
  kS64,
  kE4M3,
  kE5M2,
  kI8,
  kS8
};
// kSharedCluster: a cluster peer's shared memory (distributed shared memory, sm_90+), reached
// through HopperOps::PeerPointer.
enum class Space : uint8_t { kGlobal, kShared, kSharedCluster };

// A scalar, a short vector of scalars, or a pointer to scalars in a memory space.
struct Type {
  enum class Kind : uint8_t { kScalar, kVector, kPointer };
  Kind kind = Kind::kScalar;
  Scalar elem = Scalar::kI32;
  int lanes = 1;
  Space space = Space::kGlobal;

  static Type Of(Scalar s) { return {Kind::kScalar, s, 1, Space::kGlobal}; }
  static Type Vec(Scalar s, int lanes) { return {Kind::kVector, s, lanes, Space::kGlobal}; }
  static Type Ptr(Space space, Scalar elem) { return {Kind::kPointer, elem, 1, space}; }
  bool IsFloat() const;
  bool IsInt() const;
  int Bytes() const;  // size of the value (pointers: 8)
  std::string Str() const;
  friend bool operator==(const Type&, const Type&) = default;
};
int ScalarBytes(Scalar s);

inline constexpr Scalar i1 = Scalar::kI1, i16 = Scalar::kI16, i32 = Scalar::kI32,
                        i64 = Scalar::kI64, f16 = Scalar::kF16, bf16 = Scalar::kBF16,
                        f32 = Scalar::kF32, s32 = Scalar::kS32, s64 = Scalar::kS64,
                        e4m3 = Scalar::kE4M3, e5m2 = Scalar::kE5M2, i8 = Scalar::kI8,
                        s8 = Scalar::kS8;
inline bool IsFp8(Scalar s) { return s == Scalar::kE4M3 || s == Scalar::kE5M2; }
bool IsSigned(Scalar s);

namespace detail {
struct KernelState;
struct Access;
}  // namespace detail

// An SSA value of the kernel being built. A default-constructed Value is empty until assigned
// one the kernel made; an op that uses an empty Value (or one computed from it) fails the build
// with an error naming the line where it was declared.
class Value {
 public:
  Value(Loc declared = Loc::current()) : declared_(declared) {}
  Value(const Value&) = default;
  // Assigning, inside a For or While body, a value the body computed to a Value that held one
  // from before the loop is a build error: the body is built once, so every iteration would
  // start again from the value before the loop (a value carried from one iteration to the next
  // lives in k.Registers).
  Value& operator=(const Value& other);
  const Type& type() const;
  bool valid() const { return state_ != nullptr; }

  // Numeric conversion: int -> float and float widths round to nearest even; float -> int
  // truncates toward zero, saturating (cvt.rzi; kiln/math.h's Round first for nearest even);
  // int widths: a wider integer is sign-extended from s32, zero-extended from i32 (i32 <-> s32
  // keeps the bits).
  Value To(Scalar s, Loc loc = Loc::current()) const;
  // Reinterprets the bits as another type of the same size.
  Value Bitcast(Type t, Loc loc = Loc::current()) const;
  // One lane of a vector.
  Value Lane(int i, Loc loc = Loc::current()) const;

 private:
  friend struct detail::Access;
  detail::KernelState* state_ = nullptr;
  int id_ = -1;
  Type type_{Type::Kind::kScalar, Scalar::kI32,
             /*lanes=*/0};  // empty: no op's type check accepts it
  Loc declared_;            // where an empty Value was declared, for the error
};

class Regs;
// One element of a register array; reading it loads, assigning stores.
class RegRef {
 public:
  operator Value() const { return Load(loc_); }  // at the line that indexed the array
  Value Load(Loc loc = Loc::current()) const;
  const RegRef& operator=(const class Operand& v) const;
  const RegRef& operator=(const RegRef& other) const;
  const RegRef& operator+=(const class Operand& v) const;

 private:
  friend class Regs;
  friend class Operand;
  RegRef(detail::KernelState* s, int array, int index, Loc loc)
      : state_(s), array_(array), index_(index), loc_(loc) {}
  detail::KernelState* state_;
  int array_, index_;
  Loc loc_;
};

// A value or an immediate, with the source line of the expression that used it. Immediates take
// the type of the other operand.
class Operand {
 public:
  Operand(const Value& v, Loc loc = Loc::current()) : value_(v), loc_(loc) {}
  Operand(const RegRef& r, Loc loc = Loc::current()) : value_(r.Load(loc)), loc_(loc) {}
  Operand(int v, Loc loc = Loc::current()) : imm_(v), is_imm_(true), loc_(loc) {}
  Operand(unsigned v, Loc loc = Loc::current()) : imm_(v), is_imm_(true), loc_(loc) {}
  Operand(int64_t v, Loc loc = Loc::current())
      : imm_(static_cast<double>(v)), is_imm_(true), loc_(loc) {}
  Operand(double v, Loc loc = Loc::current())
      : imm_(v), is_imm_(true), is_float_imm_(true), loc_(loc) {}
  Operand(float v, Loc loc = Loc::current())
      : imm_(v), is_imm_(true), is_float_imm_(true), loc_(loc) {}

  const Loc& loc() const { return loc_; }

 private:
  friend struct detail::Access;
  Value value_;
  double imm_ = 0;
  bool is_imm_ = false, is_float_imm_ = false;
  Loc loc_;
};

// Arithmetic on values. i32/i64 are index-like (/, %, >> and comparisons unsigned); s32/s64 are
// signed. Mixing them is an error: convert one with To().
Value operator+(const Operand& a, const Operand& b);
Value operator-(const Operand& a, const Operand& b);
Value operator-(const Operand& a);  // negation (floats: the sign bit flips, -0.0 included)
Value operator*(const Operand& a, const Operand& b);
Value operator/(const Operand& a, const Operand& b);
Value operator%(const Operand& a, const Operand& b);
Value operator&(const Operand& a, const Operand& b);
Value operator|(const Operand& a, const Operand& b);
Value operator^(const Operand& a, const Operand& b);
Value operator<<(const Operand& a, const Operand& b);
Value operator>>(const Operand& a, const Operand& b);
Value operator<(const Operand& a, const Operand& b);
Value operator<=(const Operand& a, const Operand& b);
Value operator>(const Operand& a, const Operand& b);
Value operator>=(const Operand& a, const Operand& b);
Value operator==(const Operand& a, const Operand& b);
Value operator!=(const Operand& a, const Operand& b);
Value Min(const Operand& a, const Operand& b);
Value Max(const Operand& a, const Operand& b);
Value Select(const Operand& cond, const Operand& a, const Operand& b);
// a * b + c, fused (fma.rn for floats).
Value Fma(const Operand& a, const Operand& b, const Operand& c);

}  // namespace kiln
