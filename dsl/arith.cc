// Types, arithmetic operators and conversions on kiln values.
#include "mlir/Dialect/Arith/IR/Arith.h"

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

int ScalarBytes(Scalar s) {
  switch (s) {
    case Scalar::kI1:
    case Scalar::kE4M3:
    case Scalar::kE5M2:
    case Scalar::kI8:
    case Scalar::kS8:
      return 1;
    case Scalar::kI16:
    case Scalar::kF16:
    case Scalar::kBF16:
      return 2;
    case Scalar::kI32:
    case Scalar::kF32:
    case Scalar::kS32:
      return 4;
    case Scalar::kI64:
    case Scalar::kS64:
      return 8;
  }
  return 0;
}

bool IsSigned(Scalar s) { return s == Scalar::kS32 || s == Scalar::kS64 || s == Scalar::kS8; }

bool Type::IsFloat() const {
  return kind != Kind::kPointer &&
         (elem == Scalar::kF16 || elem == Scalar::kBF16 || elem == Scalar::kF32);
}
bool Type::IsInt() const { return kind != Kind::kPointer && !IsFloat(); }
int Type::Bytes() const { return kind == Kind::kPointer ? 8 : ScalarBytes(elem) * lanes; }

std::string Type::Str() const {
  static const char* names[] = {"i1",  "i16", "i32",  "i64",  "f16", "bf16", "f32",
                                "s32", "s64", "e4m3", "e5m2", "i8",  "s8"};
  const char* e = names[static_cast<int>(elem)];
  switch (kind) {
    case Kind::kScalar:
      return e;
    case Kind::kVector:
      return absl::StrCat(e, "x", lanes);
    case Kind::kPointer:
      return absl::StrCat(space == Space::kShared          ? "smem"
                          : space == Space::kSharedCluster ? "peer_smem"
                                                           : "global",
                          "<", e, ">*");
  }
  return "?";
}

const Type& Value::type() const {
  if (!state_) detail::EmptyValueRead() = declared_;
  return type_;
}

namespace {
// Integer + and * are index arithmetic and must not wrap: saying so lets LLVM split constant
// offsets out of zero-extended addresses (one base register for a tile's many accesses). Signed
// integers may go negative, so they say only what C does: no signed overflow.
const mlir::arith::IntegerOverflowFlags kNoUnsignedWrap = mlir::arith::IntegerOverflowFlags::nuw;
const mlir::arith::IntegerOverflowFlags kNoSignedWrap = mlir::arith::IntegerOverflowFlags::nsw;
}  // namespace

namespace {

enum class Bin { kAdd, kSub, kMul, kDiv, kRem, kAnd, kOr, kXor, kShl, kShr, kMin, kMax };

// An operator between C++ numbers only (an `Operand` helper called with 0) has no kernel to
// build in: an empty Value that says so where a kernel op uses it.
Value NumbersOnly(const Loc& loc) {
  detail::NumbersOnlyOperations().insert(LocString(loc));
  return Value(loc);
}

// The common type of two operands: the non-immediate one's (two immediates go to NumbersOnly
// first; C++ evaluates int op int itself).

KernelState* Resolve(const Operand& a, const Operand& b, Type* t) {
  const Operand& v = Access::IsImm(a) ? b : a;
  *t = Access::IsImm(v) ? Access::TypeOf(Access::Val(v))
                        : Access::Val(v).type();  // numbers: no Value read
  return Access::State(Access::Val(v));
}

// The first empty Value among the operands, if any. An op on one returns it unchanged (empty
// stays empty) when no operand belongs to a kernel, or reports it to the kernel of the others.
const Value* EmptyOperand(std::initializer_list<const Operand*> ops, KernelState** owner) {
  const Value* empty = nullptr;
  *owner = nullptr;
  for (const Operand* o : ops) {
    if (Access::IsImm(*o)) continue;
    const Value& v = Access::Val(*o);
    if (!v.valid() && !empty) empty = &v;
    if (v.valid() && !*owner) *owner = Access::State(v);
  }
  return empty;
}

// Handles an empty operand (see EmptyOperand); false when there is none.
bool PassOnEmpty(std::initializer_list<const Operand*> ops, Type result, const Loc& loc,
                 Value* out) {
  KernelState* owner;
  const Value* empty = EmptyOperand(ops, &owner);
  if (!empty) return false;
  if (!owner) {
    *out = *empty;  // it carries its declaration to the op that will report it
    detail::EmptyValueRead().reset();
  } else {
    detail::EmptyValueRead() = Access::Declared(*empty);
    owner->Fail("", loc);  // reported as the empty Value's use, at this operator's line
    *out = owner->Poison(result, loc);
  }
  return true;
}

bool CheckSameType(KernelState& s, const Operand& a, const Operand& b, const Type& t,
                   const char* op) {
  for (const Operand* o : {&a, &b}) {
    if (Access::IsImm(*o)) {
      if (Access::IsFloatImm(*o) && !t.IsFloat()) {
        s.Fail(absl::StrCat("float constant used with ", t.Str(), " in '", op, "'"), a.loc());
        return false;
      }
    } else if (Access::Val(*o).type() != t) {
      s.Fail(absl::StrCat("type mismatch in '", op, "': ", Access::Val(a).type().Str(), " vs ",
                          Access::Val(b).type().Str(), " (convert with .To())"),
             a.loc());
      return false;
    }
  }
  if (t.kind == Type::Kind::kPointer) {
    s.Fail(absl::StrCat("'", op, "' on a pointer: index tensors and tiles with At()"), a.loc());
    return false;
  }
  return true;
}

Value Binary(Bin kind, const char* name, const Operand& a, const Operand& b) {
  Type t;
  KernelState* s = Resolve(a, b, &t);
  if (Access::IsImm(a) && Access::IsImm(b)) return NumbersOnly(b.loc());
  if (Value e; PassOnEmpty({&a, &b}, t, a.loc(), &e)) return e;
  if (!CheckSameType(*s, a, b, t, name))
    return s->Poison(t.kind == Type::Kind::kPointer ? Type::Of(Scalar::kI32) : t, a.loc());
  // A constant divisor of 0 or a shift by the width or more is undefined: LLVM drops the code
  // that reaches it, and the kernel silently does nothing there.
  if (Access::IsImm(b) && !t.IsFloat() && t.kind != Type::Kind::kPointer) {
    const double v = Access::Imm(b);
    // What the constant becomes in the element's width (a vector's lanes each; i1 one bit).
    const int width = t.elem == Scalar::kI1 ? 1 : 8 * ScalarBytes(t.elem);
    const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(v));
    const bool zero = (width >= 64 ? bits : bits & ((uint64_t{1} << width) - 1)) == 0;
    if ((kind == Bin::kDiv || kind == Bin::kRem) && zero) {
      s->Fail(absl::StrCat("'", name, "' by the constant ", static_cast<int64_t>(v),
                           v == 0 ? "" : absl::StrCat(", 0 in ", t.Str()),
                           ": undefined (the compiler drops the code that reaches it)"),
              a.loc());
      return s->Poison(t, a.loc());
    }
    if ((kind == Bin::kShl || kind == Bin::kShr) && (v < 0 || v >= width)) {
      s->Fail(absl::StrCat("'", name, "' by ", static_cast<int64_t>(v), " on ", t.Str(),
                           ": a shift takes 0 to ", width - 1, " (a longer one is undefined)"),
              a.loc());
      return s->Poison(t, a.loc());
    }
  }
  mlir::OpBuilder& bld = s->builder;
  mlir::Location l = s->ToLoc(a.loc());
  mlir::Value x = s->Materialize(a, t), y = s->Materialize(b, t);
  const bool f = t.IsFloat(), sg = t.kind != Type::Kind::kPointer && IsSigned(t.elem);
  mlir::Value r;
  namespace ar = mlir::arith;
  // Index integers may not wrap (kiln/value.h); bytes and 16-bit words wrap, as their users
  // (packing, hashing, quantised sums) expect.
  const bool narrow = t.kind != Type::Kind::kPointer && ScalarBytes(t.elem) < 4;
  const ar::IntegerOverflowFlags no_wrap = narrow ? ar::IntegerOverflowFlags::none
                                           : sg   ? kNoSignedWrap
                                                  : kNoUnsignedWrap;
  switch (kind) {
    case Bin::kAdd:
      r = f ? ar::AddFOp::create(bld, l, x, y).getResult()
            : ar::AddIOp::create(bld, l, x, y, no_wrap).getResult();
      break;
    case Bin::kSub:
      r = f               ? ar::SubFOp::create(bld, l, x, y).getResult()
          : sg && !narrow ? ar::SubIOp::create(bld, l, x, y, kNoSignedWrap).getResult()
                          : ar::SubIOp::create(bld, l, x, y).getResult();
      break;
    case Bin::kMul:
      r = f ? ar::MulFOp::create(bld, l, x, y).getResult()
            : ar::MulIOp::create(bld, l, x, y, no_wrap).getResult();
      break;
    case Bin::kDiv:
      r = f    ? ar::DivFOp::create(bld, l, x, y).getResult()
          : sg ? ar::DivSIOp::create(bld, l, x, y).getResult()
               : ar::DivUIOp::create(bld, l, x, y).getResult();
      break;
    case Bin::kMin:
      r = f    ? ar::MinNumFOp::create(bld, l, x, y).getResult()
          : sg ? ar::MinSIOp::create(bld, l, x, y).getResult()
               : ar::MinUIOp::create(bld, l, x, y).getResult();
      break;
    case Bin::kMax:
      r = f    ? ar::MaxNumFOp::create(bld, l, x, y).getResult()
          : sg ? ar::MaxSIOp::create(bld, l, x, y).getResult()
               : ar::MaxUIOp::create(bld, l, x, y).getResult();
      break;
    default:
      if (f) {
        s->Fail(absl::StrCat("'", name, "' needs integers, not ", t.Str()), a.loc());
        return s->Poison(t, a.loc());
      }
      switch (kind) {
        case Bin::kRem:
          r = sg ? ar::RemSIOp::create(bld, l, x, y).getResult()
                 : ar::RemUIOp::create(bld, l, x, y).getResult();
          break;
        case Bin::kAnd:
          r = ar::AndIOp::create(bld, l, x, y);
          break;
        case Bin::kOr:
          r = ar::OrIOp::create(bld, l, x, y);
          break;
        case Bin::kXor:
          r = ar::XOrIOp::create(bld, l, x, y);
          break;
        case Bin::kShl:
          r = ar::ShLIOp::create(bld, l, x, y);
          break;
        default:
          r = sg ? ar::ShRSIOp::create(bld, l, x, y).getResult()
                 : ar::ShRUIOp::create(bld, l, x, y).getResult();
          break;
      }
  }
  return s->Wrap(r, t);
}

Value Compare(mlir::arith::CmpIPredicate ip, mlir::arith::CmpFPredicate fp, const char* name,
              const Operand& a, const Operand& b) {
  Type t;
  KernelState* s = Resolve(a, b, &t);
  if (Access::IsImm(a) && Access::IsImm(b)) return NumbersOnly(b.loc());
  const Type i1 = Type::Of(Scalar::kI1);
  if (Value e; PassOnEmpty({&a, &b}, i1, a.loc(), &e)) return e;
  if (!CheckSameType(*s, a, b, t, name)) return s->Poison(i1, a.loc());
  mlir::Location l = s->ToLoc(a.loc());
  mlir::Value x = s->Materialize(a, t), y = s->Materialize(b, t);
  if (IsSigned(t.elem)) {  // the unsigned predicate's signed twin
    using P = mlir::arith::CmpIPredicate;
    ip = ip == P::ult   ? P::slt
         : ip == P::ule ? P::sle
         : ip == P::ugt ? P::sgt
         : ip == P::uge ? P::sge
                        : ip;
  }
  mlir::Value r = t.IsFloat() ? mlir::arith::CmpFOp::create(s->builder, l, fp, x, y).getResult()
                              : mlir::arith::CmpIOp::create(s->builder, l, ip, x, y).getResult();
  return s->Wrap(r, i1);
}

}  // namespace

using mlir::arith::CmpFPredicate;
using mlir::arith::CmpIPredicate;

Value operator+(const Operand& a, const Operand& b) {
  // pointer + i32 or i64: advances by that many elements (like C).
  if (!Access::IsImm(a) && Access::Val(a).valid() &&
      Access::Val(a).type().kind == Type::Kind::kPointer &&
      (Access::IsImm(b)
           ? !Access::IsFloatImm(b)
           : Access::Val(b).type().kind == Type::Kind::kScalar &&
                 ScalarBytes(Access::Val(b).type().elem) >= 4 && Access::Val(b).type().IsInt())) {
    const Value& p = Access::Val(a);
    KernelState& s = *Access::State(p);
    if (!Access::IsImm(b) && !Access::Val(b).valid()) {
      s.Unwrap(Access::Val(b), b.loc());  // reports the empty index
      return s.Poison(p.type(), a.loc());
    }
    mlir::Location l = s.ToLoc(a.loc());
    // A signed index may be negative (sign-extended); an i32 one is zero-extended.
    const Scalar e = Access::IsImm(b) ? (Access::Imm(b) < 0 ? Scalar::kS32 : Scalar::kI32)
                                      : Access::Val(b).type().elem;
    const bool wide = ScalarBytes(e) == 8;
    mlir::Value n = s.Materialize(b, Type::Of(e));
    mlir::Value i =
        wide ? n
        : IsSigned(e)
            ? mlir::arith::ExtSIOp::create(s.builder, l, s.builder.getI64Type(), n).getResult()
            : mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), n).getResult();
    return s.Wrap(
        mlir::LLVM::GEPOp::create(s.builder, l, s.ToMlir(p.type()), s.ToMlir(p.type().elem),
                                  s.Unwrap(p), mlir::ValueRange{i}),
        p.type());
  }
  return Binary(Bin::kAdd, "+", a, b);
}
Value operator-(const Operand& a, const Operand& b) { return Binary(Bin::kSub, "-", a, b); }
Value operator-(const Operand& a) {
  if (Access::IsImm(a) || !Access::Val(a).valid() || !Access::Val(a).type().IsFloat())
    return Binary(Bin::kSub, "-", Operand(0, a.loc()), a);
  const Value& v = Access::Val(a);
  KernelState& s = *Access::State(v);
  return s.Wrap(mlir::arith::NegFOp::create(s.builder, s.ToLoc(a.loc()), s.Unwrap(v, a.loc())),
                v.type());
}
Value operator*(const Operand& a, const Operand& b) { return Binary(Bin::kMul, "*", a, b); }
Value operator/(const Operand& a, const Operand& b) { return Binary(Bin::kDiv, "/", a, b); }
Value operator%(const Operand& a, const Operand& b) { return Binary(Bin::kRem, "%", a, b); }
Value operator&(const Operand& a, const Operand& b) { return Binary(Bin::kAnd, "&", a, b); }
Value operator|(const Operand& a, const Operand& b) { return Binary(Bin::kOr, "|", a, b); }
Value operator^(const Operand& a, const Operand& b) { return Binary(Bin::kXor, "^", a, b); }
Value operator<<(const Operand& a, const Operand& b) { return Binary(Bin::kShl, "<<", a, b); }
Value operator>>(const Operand& a, const Operand& b) { return Binary(Bin::kShr, ">>", a, b); }
Value Min(const Operand& a, const Operand& b) { return Binary(Bin::kMin, "Min", a, b); }
Value Max(const Operand& a, const Operand& b) { return Binary(Bin::kMax, "Max", a, b); }
Value operator<(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::ult, CmpFPredicate::OLT, "<", a, b);
}
Value operator<=(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::ule, CmpFPredicate::OLE, "<=", a, b);
}
Value operator>(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::ugt, CmpFPredicate::OGT, ">", a, b);
}
Value operator>=(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::uge, CmpFPredicate::OGE, ">=", a, b);
}
Value operator==(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::eq, CmpFPredicate::OEQ, "==", a, b);
}
Value operator!=(const Operand& a, const Operand& b) {
  return Compare(CmpIPredicate::ne, CmpFPredicate::UNE, "!=", a, b);
}

Value Select(const Operand& cond, const Operand& a, const Operand& b) {
  Type t;
  KernelState* s = Resolve(a, b, &t);
  if (Value e; PassOnEmpty({&cond, &a, &b}, t, cond.loc(), &e)) return e;
  if (!s) {  // two C++ numbers: i32, or f32 where either is written as a floating-point number
    if (Access::IsImm(cond)) return NumbersOnly(cond.loc());
    s = Access::State(Access::Val(cond));
    t = Type::Of(Access::IsFloatImm(a) || Access::IsFloatImm(b) ? Scalar::kF32 : Scalar::kI32);
  }
  if (Access::IsImm(cond) || Access::Val(cond).type() != Type::Of(Scalar::kI1)) {
    s->Fail("Select needs an i1 condition", cond.loc());
    return s->Poison(t, cond.loc());
  }
  if (!CheckSameType(*s, a, b, t, "Select")) return s->Poison(t, a.loc());
  return s->Wrap(mlir::arith::SelectOp::create(s->builder, s->ToLoc(cond.loc()),
                                               s->Unwrap(Access::Val(cond), cond.loc()),
                                               s->Materialize(a, t), s->Materialize(b, t)),
                 t);
}

Value Fma(const Operand& a, const Operand& b, const Operand& c) {
  Type t;
  KernelState* s = Resolve(a, b, &t);
  if (Value e; PassOnEmpty({&a, &b, &c}, t, a.loc(), &e)) return e;
  if (!s) {                                             // a and b are numbers: c decides
    if (Access::IsImm(c)) return NumbersOnly(a.loc());  // three numbers: nothing to build
    const Value& cv = Access::Val(c);
    const double p = Access::Imm(a) * Access::Imm(b);
    if (Access::TypeOf(cv).IsFloat()) return Operand(cv, a.loc()) + Operand(p, a.loc());
    return Operand(cv, a.loc()) + Operand(static_cast<int>(p), a.loc());
  }
  if (!CheckSameType(*s, a, b, t, "Fma") || !CheckSameType(*s, a, c, t, "Fma"))
    return s->Poison(t, a.loc());
  if (!t.IsFloat()) return a * b + c;
  return s->Wrap(mlir::LLVM::FMAOp::create(s->builder, s->ToLoc(a.loc()), s->Materialize(a, t),
                                           s->Materialize(b, t), s->Materialize(c, t)),
                 t);
}

Value Value::To(Scalar to, Loc loc) const {
  if (!state_) return *this;  // empty stays empty (reported where a kernel op uses it)
  KernelState& s = *Access::State(*this);
  Type from = type_;
  Type result = from;
  result.elem = to;
  if (from.kind == Type::Kind::kPointer) {
    s.Fail("cannot convert a pointer", loc);
    return s.Poison(Type::Of(to), loc);
  }
  if (from.elem == to) return *this;
  mlir::Location l = s.ToLoc(loc);
  mlir::Type mt = s.ToMlir(result);
  mlir::Value v = s.Unwrap(*this), r;
  namespace ar = mlir::arith;
  const bool ff = from.IsFloat(), tf = result.IsFloat();
  const bool from_signed = IsSigned(from.elem), to_signed = IsSigned(to);
  // By bits (i1 and the bytes share a size, not a width).
  const unsigned fw = mlir::getElementTypeOrSelf(v.getType()).getIntOrFloatBitWidth(),
                 tw = mlir::getElementTypeOrSelf(mt).getIntOrFloatBitWidth();
  // `elem` in v's shape (a scalar, or a vector of as many lanes).
  auto shaped = [&](mlir::Type elem) -> mlir::Type {
    if (auto vt = mlir::dyn_cast<mlir::VectorType>(v.getType()))
      return mlir::VectorType::get(vt.getShape(), elem);
    return elem;
  };
  if (ff && tf)
    r = tw > fw ? ar::ExtFOp::create(s.builder, l, mt, v).getResult()
                : ar::TruncFOp::create(s.builder, l, mt, v).getResult();
  else if (ff && (to == Scalar::kI8 || to == Scalar::kS8)) {
    // Clamped in the float's own type first (NaN to 0), so that the conversion toward zero is
    // always in range: an out-of-range or NaN fptosi is poison in LLVM.
    const mlir::Type ft = v.getType();
    auto bound = [&](double x) {
      mlir::TypedAttr a = s.builder.getFloatAttr(mlir::getElementTypeOrSelf(ft), x);
      if (auto vt = mlir::dyn_cast<mlir::VectorType>(ft)) a = mlir::DenseElementsAttr::get(vt, a);
      return ar::ConstantOp::create(s.builder, l, a).getResult();
    };
    mlir::Value c = ar::MaxNumFOp::create(s.builder, l, v, bound(to_signed ? -128 : 0));
    c = ar::MinNumFOp::create(s.builder, l, c, bound(to_signed ? 127 : 255));
    mlir::Value nan = ar::CmpFOp::create(s.builder, l, ar::CmpFPredicate::UNO, v, v);
    c = ar::SelectOp::create(s.builder, l, nan, bound(0), c);
    mlir::Value w = ar::FPToSIOp::create(s.builder, l, shaped(s.builder.getI32Type()), c);
    r = ar::TruncIOp::create(s.builder, l, mt, w);
  } else if (ff)
    r = to_signed ? ar::FPToSIOp::create(s.builder, l, mt, v).getResult()
                  : ar::FPToUIOp::create(s.builder, l, mt, v).getResult();
  else if (tf)
    r = from_signed ? ar::SIToFPOp::create(s.builder, l, mt, v).getResult()
                    : ar::UIToFPOp::create(s.builder, l, mt, v).getResult();
  else if (tw == fw)
    r = v;  // i32 <-> s32: the same bits, read another way
  else if (tw > fw)
    r = from_signed ? ar::ExtSIOp::create(s.builder, l, mt, v).getResult()
                    : ar::ExtUIOp::create(s.builder, l, mt, v).getResult();
  else
    r = ar::TruncIOp::create(s.builder, l, mt, v);
  return s.Wrap(r, result);
}

Value Value::Bitcast(Type t, Loc loc) const {
  if (!state_) return *this;  // empty stays empty (reported where a kernel op uses it)
  KernelState& s = *Access::State(*this);
  if (t.Bytes() != type_.Bytes() || t.kind == Type::Kind::kPointer ||
      type_.kind == Type::Kind::kPointer) {
    s.Fail(absl::StrCat("cannot bitcast ", type_.Str(), " to ", t.Str()), loc);
    return s.Poison(t, loc);
  }
  return s.Wrap(
      mlir::LLVM::BitcastOp::create(s.builder, s.ToLoc(loc), s.ToMlir(t), s.Unwrap(*this)), t);
}

Value Value::Lane(int i, Loc loc) const {
  if (!state_) return *this;  // empty stays empty (reported where a kernel op uses it)
  KernelState& s = *Access::State(*this);
  Type scalar = Type::Of(type_.elem);
  if (type_.kind != Type::Kind::kVector || i < 0 || i >= type_.lanes) {
    s.Fail(absl::StrCat("lane ", i, " of ", type_.Str()), loc);
    return s.Poison(scalar, loc);
  }
  mlir::Location l = s.ToLoc(loc);
  mlir::Value idx = mlir::LLVM::ConstantOp::create(s.builder, l, s.builder.getI32IntegerAttr(i));
  return s.Wrap(mlir::LLVM::ExtractElementOp::create(s.builder, l, s.Unwrap(*this), idx), scalar);
}

}  // namespace kiln
