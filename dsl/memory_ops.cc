// Cache-hinted and masked global accesses, and atomics (kiln/memory_ops.h). Each is one PTX
// instruction in inline asm: the predicate of a masked access guards the instruction itself,
// which LLVM's loads and stores cannot say.
#include "kiln/memory_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dsl/kernel_state.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {

const char* HintSuffix(CacheHint h) {
  switch (h) {
    case CacheHint::kDefault:
      return "";
    case CacheHint::kReadOnly:
      return ".nc";
    case CacheHint::kStreaming:
      return ".cs";
    case CacheHint::kNoL1:
      return ".L1::no_allocate";
    case CacheHint::kL2EvictFirst:
    case CacheHint::kL2EvictLast:
      return ".L2::cache_hint";
  }
  return "";
}

bool UsesPolicy(CacheHint h) {
  return h == CacheHint::kL2EvictFirst || h == CacheHint::kL2EvictLast;
}

// The value of 8-bit float `code` (PTX ISA, alternate floating-point formats): e4m3 has a bias
// of 7, no infinities and NaN at S.1111.111; e5m2 is IEEE-like with a bias of 15.
double Fp8Value(int code, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, exp_max = e4m3 ? 15 : 31;
  const int e = (code >> man_bits) & exp_max, m = code & ((1 << man_bits) - 1);
  const double sign = code & 0x80 ? -1 : 1;
  if (e4m3 ? (e == 15 && m == 7) : (e == 31 && m != 0)) return std::nan("");
  if (!e4m3 && e == 31) return sign * HUGE_VAL;
  return sign * std::ldexp(e ? (1 << man_bits) + m : m, (e ? e : 1) - bias - man_bits);
}

// The 8-bit float nearest `v` (ties to the even code), found among all 256: fill values only.
uint64_t Fp8Bits(double v, bool e4m3) {
  if (std::isnan(v)) return e4m3 ? 0x7f : 0x7e;
  int best = 0;
  for (int code = 0; code < 256; ++code) {
    const double x = Fp8Value(code, e4m3), y = Fp8Value(best, e4m3);
    if (std::isnan(x)) continue;
    const double dx = std::fabs(x - v), dy = std::fabs(y - v);
    if (dx < dy || (dx == dy && !(code & 1) && (best & 1))) best = code;
  }
  return best;
}

// The bits of `v` as one element of `s` (fill values: 0, +-inf and other exact numbers).
uint64_t ElementBits(Scalar s, double v) {
  switch (s) {
    case Scalar::kE4M3:
    case Scalar::kE5M2:
      return Fp8Bits(v, s == Scalar::kE4M3);
    case Scalar::kF32:
      return std::bit_cast<uint32_t>(static_cast<float>(v));
    case Scalar::kBF16: {  // round to nearest even from f32
      uint32_t f = std::bit_cast<uint32_t>(static_cast<float>(v));
      return (f + 0x7fff + ((f >> 16) & 1)) >> 16;
    }
    case Scalar::kF16:
      return std::bit_cast<uint16_t>(static_cast<_Float16>(v));
    case Scalar::kI8:
    case Scalar::kS8:
      return static_cast<uint8_t>(static_cast<int64_t>(v));
    case Scalar::kI1:
    case Scalar::kI16:
      return static_cast<uint16_t>(static_cast<int64_t>(v));
    case Scalar::kI32:
    case Scalar::kS32:
      return static_cast<uint32_t>(static_cast<int64_t>(v));
    case Scalar::kI64:
    case Scalar::kS64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
  }
  return 0;
}

// How a vector of `bytes` moves through registers: `words` registers of `word_bits` each.
struct Words {
  int count, bits;
  const char* reg;  // inline-asm constraint letter
};
Words WordsFor(int bytes) { return bytes == 2 ? Words{1, 16, "h"} : Words{bytes / 4, 32, "r"}; }

// The access's checks shared by loads and stores: a global pointer, a legal vector size, a
// valid mask. Returns the vector type moved, or nullopt after reporting the error.
std::optional<Type> CheckAccess(KernelState& s, const Value& ptr, int lanes,
                                const GlobalAccess& how, const char* op, const Loc& loc) {
  const Type& pt = ptr.type();
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kGlobal) {
    s.Fail(absl::StrCat(op, " needs a global pointer, not ", pt.Str()), loc);
    return std::nullopt;
  }
  const Type t = lanes == 1 ? Type::Of(pt.elem) : Type::Vec(pt.elem, lanes);
  const int bytes = t.Bytes();
  if (lanes < 1 || (lanes & (lanes - 1)) != 0 ||
      (bytes != 2 && bytes != 4 && bytes != 8 && bytes != 16)) {
    s.Fail(absl::StrCat(op, " moves one aligned vector of 2, 4, 8 or 16 bytes, not ", lanes, " x ",
                        Type::Of(pt.elem).Str()),
           loc);
    return std::nullopt;
  }
  if (how.mask.valid() &&
      (Access::State(how.mask) != &s || how.mask.type() != Type::Of(Scalar::kI1))) {
    s.Fail(absl::StrCat(op, "'s mask is an i1 of this kernel, not ", how.mask.type().Str()), loc);
    return std::nullopt;
  }
  return t;
}

// The asm lines before the access: the predicate and the cache policy.
std::string Preamble(const GlobalAccess& how, int mask_operand) {
  std::string p;
  if (how.mask.valid())
    absl::StrAppend(&p, ".reg .pred p;\nsetp.ne.b32 p, $", mask_operand, ", 0;\n");
  if (UsesPolicy(how.cache))
    absl::StrAppend(&p, ".reg .b64 pol;\ncreatepolicy.fractional.L2::",
                    how.cache == CacheHint::kL2EvictFirst ? "evict_first" : "evict_last",
                    ".b64 pol, 1.0;\n");
  return p;
}

std::string OperandList(int first, int count) {
  std::string list;
  for (int i = 0; i < count; ++i) absl::StrAppend(&list, i ? ", " : "", "$", first + i);
  return count == 1 ? list : absl::StrCat("{", list, "}");
}

std::string VectorSuffix(const Words& w) {
  return absl::StrCat(w.count > 1 ? absl::StrCat(".v", w.count) : "", ".b", w.bits);
}

}  // namespace

Value LoadGlobal(const Value& ptr, int lanes, const GlobalAccess& how, Loc loc) {
  KernelState* sp = Access::State(ptr);
  if (!sp) return ptr;
  KernelState& s = *sp;
  std::optional<Type> t = CheckAccess(s, ptr, lanes, how, "LoadGlobal", loc);
  if (!t)
    return s.Poison(
        lanes == 1 ? Type::Of(ptr.type().elem) : Type::Vec(ptr.type().elem, std::max(lanes, 1)),
        loc);
  const Words w = WordsFor(t->Bytes());
  mlir::Location l = s.ToLoc(loc);
  mlir::Type word_type = w.bits == 16 ? s.builder.getI16Type() : s.builder.getI32Type();
  std::vector<mlir::Value> operands = {s.Unwrap(ptr, loc)};
  const int ptr_operand = w.count, mask_operand = w.count + 1;
  std::string constraints;
  for (int i = 0; i < w.count; ++i)
    absl::StrAppend(&constraints, how.mask.valid() ? "=&" : "=", w.reg, ",");
  absl::StrAppend(&constraints, "l");
  std::string ptx = absl::StrCat("{\n", Preamble(how, mask_operand));
  if (how.mask.valid()) {
    operands.push_back(
        mlir::LLVM::ZExtOp::create(s.builder, l, s.builder.getI32Type(), s.Unwrap(how.mask, loc)));
    absl::StrAppend(&constraints, ",r");
    // The fill, word by word, in the lanes' byte order.
    std::vector<unsigned char> bytes(t->Bytes());
    const int eb = ScalarBytes(t->elem);
    for (int i = 0; i < t->lanes; ++i) {
      const uint64_t bits = ElementBits(t->elem, how.fill);
      std::memcpy(&bytes[i * eb], &bits, eb);  // little-endian, as the GPU
    }
    for (int i = 0; i < w.count; ++i) {
      uint32_t word = 0;
      std::memcpy(&word, &bytes[i * w.bits / 8], w.bits / 8);
      absl::StrAppend(&ptx, absl::StrFormat("mov.b%d $%d, 0x%X;\n", w.bits, i, word));
    }
    absl::StrAppend(&ptx, "@p ");
  }
  absl::StrAppend(&ptx, "ld.global", HintSuffix(how.cache), VectorSuffix(w), " ",
                  OperandList(0, w.count), ", [$", ptr_operand, "]",
                  UsesPolicy(how.cache) ? ", pol" : "", ";\n}");
  std::vector<mlir::Type> result_types(w.count, word_type);
  std::vector<mlir::Value> words = s.InlineAsmResults(ptx, constraints, operands, result_types, l);
  mlir::Value packed = words[0];
  if (w.count > 1) {
    mlir::Type vt = mlir::VectorType::get({w.count}, word_type);
    packed = mlir::LLVM::PoisonOp::create(s.builder, l, vt);
    for (int i = 0; i < w.count; ++i) {
      mlir::Value idx =
          mlir::LLVM::ConstantOp::create(s.builder, l, s.builder.getI32IntegerAttr(i));
      packed = mlir::LLVM::InsertElementOp::create(s.builder, l, packed, words[i], idx);
    }
  }
  mlir::Value r =
      s.ToMlir(*t) == packed.getType()
          ? packed
          : mlir::LLVM::BitcastOp::create(s.builder, l, s.ToMlir(*t), packed).getResult();
  return s.Wrap(r, *t);
}

void StoreGlobal(const Value& ptr, const Value& value, const GlobalAccess& how, Loc loc) {
  KernelState* sp = Access::State(ptr);
  if (!sp) return;
  KernelState& s = *sp;
  if (!value.valid()) return void(s.Unwrap(value, loc));  // reports the empty value
  const Type& vt = value.type();
  if (how.cache == CacheHint::kReadOnly)
    return s.Fail("StoreGlobal: the read-only path (.nc) is for loads", loc);
  if (vt.kind == Type::Kind::kPointer || vt.elem != ptr.type().elem)
    return s.Fail(absl::StrCat("StoreGlobal of ", vt.Str(), " through ", ptr.type().Str()), loc);
  std::optional<Type> t = CheckAccess(s, ptr, vt.lanes, how, "StoreGlobal", loc);
  if (!t) return;
  const Words w = WordsFor(t->Bytes());
  mlir::Location l = s.ToLoc(loc);
  mlir::Type word_type = w.bits == 16 ? s.builder.getI16Type() : s.builder.getI32Type();
  mlir::Type packed_type =
      w.count > 1 ? mlir::Type(mlir::VectorType::get({w.count}, word_type)) : word_type;
  mlir::Value v = s.Unwrap(value, loc);
  mlir::Value packed =
      v.getType() == packed_type
          ? v
          : mlir::LLVM::BitcastOp::create(s.builder, l, packed_type, v).getResult();
  std::vector<mlir::Value> operands = {s.Unwrap(ptr, loc)};
  for (int i = 0; i < w.count; ++i) {
    if (w.count == 1) {
      operands.push_back(packed);
      break;
    }
    mlir::Value idx = mlir::LLVM::ConstantOp::create(s.builder, l, s.builder.getI32IntegerAttr(i));
    operands.push_back(mlir::LLVM::ExtractElementOp::create(s.builder, l, packed, idx));
  }
  std::string constraints = "l";
  for (int i = 0; i < w.count; ++i) absl::StrAppend(&constraints, ",", w.reg);
  const int mask_operand = w.count + 1;
  if (how.mask.valid()) {
    operands.push_back(
        mlir::LLVM::ZExtOp::create(s.builder, l, s.builder.getI32Type(), s.Unwrap(how.mask, loc)));
    absl::StrAppend(&constraints, ",r");
  }
  absl::StrAppend(&constraints, ",~{memory}");
  std::string ptx =
      absl::StrCat("{\n", Preamble(how, mask_operand), how.mask.valid() ? "@p " : "", "st.global",
                   HintSuffix(how.cache), VectorSuffix(w), " [$0], ", OperandList(1, w.count),
                   UsesPolicy(how.cache) ? ", pol" : "", ";\n}");
  s.InlineAsm(ptx, constraints, operands, nullptr, l);
}

namespace {

enum class AtomOp { kAdd, kMax, kMin, kCas };

// atom (with_result) or red on `ptr`; `compare` only for kCas.
Value Atomic(AtomOp op, bool with_result, const Value& ptr, const Operand* compare,
             const Operand& value, const Loc& loc) {
  static const char* names[] = {"add", "max", "min", "cas"};
  const char* name = names[static_cast<int>(op)];
  KernelState* sp = Access::State(ptr);
  if (!sp) return ptr;
  KernelState& s = *sp;
  const Type& pt = ptr.type();
  const Type t = Type::Of(pt.elem);
  const char* fn = with_result ? "Atomic" : "Red";
  auto fail = [&](const std::string& why) {
    s.Fail(absl::StrCat(fn, " ", name, ": ", why), loc);
    return s.Poison(t.kind == Type::Kind::kPointer ? Type::Of(Scalar::kI32) : t, loc);
  };
  if (pt.kind != Type::Kind::kPointer) return fail(absl::StrCat("needs a pointer, not ", pt.Str()));
  const char* type_suffix = nullptr;
  const char* reg = nullptr;
  switch (pt.elem) {
    case Scalar::kF32:
      type_suffix = op == AtomOp::kAdd ? ".f32" : nullptr, reg = "f";
      break;
    case Scalar::kI32:
      type_suffix = op == AtomOp::kCas ? ".b32" : ".u32", reg = "r";
      break;
    case Scalar::kS32:
      type_suffix = op == AtomOp::kCas ? ".b32" : ".s32", reg = "r";
      break;
    case Scalar::kI64:
      type_suffix = op == AtomOp::kCas ? ".b64" : op == AtomOp::kAdd ? ".u64" : nullptr, reg = "l";
      break;
    default:
      break;
  }
  if (!type_suffix)
    return fail(absl::StrCat("not offered on ", t.Str(), " (PTX has no such atom)"));
  for (const Operand* o : {compare, &value})
    if (o && !Access::IsImm(*o) && Access::Val(*o).valid() && Access::Val(*o).type() != t)
      return fail(
          absl::StrCat("the value is ", Access::Val(*o).type().Str(), ", the memory ", t.Str()));
  mlir::Location l = s.ToLoc(loc);
  // (A peer's shared memory, PeerPointer's: a 32-bit shared::cluster address, as this CTA's.)
  const bool peer = pt.space == Space::kSharedCluster;
  const bool shared = pt.space == Space::kShared || peer;
  std::vector<mlir::Value> operands = {shared ? s.SharedAddress32(s.Unwrap(ptr, loc), l)
                                              : s.Unwrap(ptr, loc)};
  if (compare) operands.push_back(s.Materialize(*compare, t));
  operands.push_back(s.Materialize(value, t));
  const int first = with_result ? 1 : 0;
  std::string ptx =
      absl::StrCat(with_result ? "atom" : "red",
                   peer     ? ".shared::cluster"
                   : shared ? ".shared"
                            : ".global",
                   ".", name, type_suffix, " ", with_result ? "$0, " : "", "[$", first, "], $",
                   first + 1, compare ? absl::StrCat(", $", first + 2) : "", ";");
  std::string constraints =
      absl::StrCat(with_result ? absl::StrCat("=", reg, ",") : "", shared ? "r" : "l", ",", reg,
                   compare ? absl::StrCat(",", reg) : "", ",~{memory}");
  mlir::Value r =
      s.InlineAsm(ptx, constraints, operands, with_result ? s.ToMlir(t) : mlir::Type(), l);
  return with_result ? s.Wrap(r, t) : Value(loc);
}

}  // namespace

void PrefetchL2(const Value& ptr, Loc loc) {
  KernelState* sp = Access::State(ptr);
  if (!sp) return;
  KernelState& s = *sp;
  const Type& t = ptr.type();
  if (t.kind != Type::Kind::kPointer || t.space != Space::kGlobal)
    return s.Fail(absl::StrCat("PrefetchL2 takes a global pointer, not ", t.Str()), loc);
  s.InlineAsm("prefetch.global.L2 [$0];", "l", {s.Unwrap(ptr, loc)}, mlir::Type(), s.ToLoc(loc));
}

Value LoadAcquire(const Value& ptr, Loc loc) {
  KernelState* sp = Access::State(ptr);
  if (!sp) return ptr;
  KernelState& s = *sp;
  const Type& pt = ptr.type();
  const bool word =
      pt.kind == Type::Kind::kPointer && (pt.elem == Scalar::kI32 || pt.elem == Scalar::kS32 ||
                                          pt.elem == Scalar::kI64 || pt.elem == Scalar::kF32);
  if (!word || pt.space != Space::kGlobal) {
    s.Fail(absl::StrCat("LoadAcquire reads one i32, s32, i64 or f32 word of global memory, not ",
                        pt.Str()),
           loc);
    return s.Poison(Type::Of(Scalar::kI32), loc);
  }
  const Type t = Type::Of(pt.elem);
  const bool wide = pt.elem == Scalar::kI64;
  const char* reg = wide ? "l" : pt.elem == Scalar::kF32 ? "f" : "r";
  mlir::Value r = s.InlineAsm(
      absl::StrCat("ld.acquire.gpu.global.", wide ? "b64" : "b32", " $0, [$1];"),
      absl::StrCat("=", reg, ",l,~{memory}"), {s.Unwrap(ptr, loc)}, s.ToMlir(t), s.ToLoc(loc));
  return s.Wrap(r, t);
}

Value AtomicAdd(const Value& ptr, const Operand& value, Loc loc) {
  return Atomic(AtomOp::kAdd, true, ptr, nullptr, value, loc);
}
Value AtomicMax(const Value& ptr, const Operand& value, Loc loc) {
  return Atomic(AtomOp::kMax, true, ptr, nullptr, value, loc);
}
Value AtomicMin(const Value& ptr, const Operand& value, Loc loc) {
  return Atomic(AtomOp::kMin, true, ptr, nullptr, value, loc);
}
Value AtomicCas(const Value& ptr, const Operand& compare, const Operand& value, Loc loc) {
  return Atomic(AtomOp::kCas, true, ptr, &compare, value, loc);
}
void RedAdd(const Value& ptr, const Operand& value, Loc loc) {
  Atomic(AtomOp::kAdd, false, ptr, nullptr, value, loc);
}
void RedMax(const Value& ptr, const Operand& value, Loc loc) {
  Atomic(AtomOp::kMax, false, ptr, nullptr, value, loc);
}

}  // namespace kiln
