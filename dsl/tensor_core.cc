// Warp-level tensor-core ops: ldmatrix and mma.sync.
#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln {

using detail::KernelState;

namespace {
// The i-th i32 of a struct- or scalar-typed result.
std::vector<Value> Unpack(KernelState& s, mlir::Value v, int n, Type t, mlir::Location l) {
  std::vector<Value> out;
  if (n == 1 && !mlir::isa<mlir::LLVM::LLVMStructType>(v.getType())) return {s.Wrap(v, t)};
  for (int i = 0; i < n; ++i)
    out.push_back(s.Wrap(mlir::LLVM::ExtractValueOp::create(s.builder, l, v, i), t));
  return out;
}
}  // namespace

std::vector<Value> AmpereOps::LdMatrix(const Value& smem_row, int num, bool trans, Loc loc) {
  KernelState& s = state();
  const Type b32 = Type::Of(Scalar::kI32);
  if (num != 1 && num != 2 && num != 4) {
    self().Fail(absl::StrCat("ldmatrix loads 1, 2 or 4 matrices, not ", num), loc);
    return std::vector<Value>(std::max(num, 0), s.Poison(b32, loc));
  }
  const Type& pt = smem_row.type();
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kShared || ScalarBytes(pt.elem) != 2) {
    self().Fail(
        absl::StrCat("ldmatrix reads 16-bit elements from shared memory, not through ", pt.Str()),
        loc);
    return std::vector<Value>(num, s.Poison(b32, loc));
  }
  if (s.target.compute_capability < 80) self().Fail("ldmatrix needs sm_80 or later", loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Type i32 = s.builder.getI32Type();
  mlir::Type result = num == 1 ? i32
                               : mlir::LLVM::LLVMStructType::getLiteral(
                                     s.context.get(), llvm::SmallVector<mlir::Type>(num, i32));
  auto op = mlir::NVVM::LdMatrixOp::create(
      s.builder, l, result, s.Unwrap(smem_row), num,
      trans ? mlir::NVVM::MMALayout::col : mlir::NVVM::MMALayout::row,
      mlir::NVVM::LdStMatrixShapeAttr::get(s.context.get(), 8, 8),
      mlir::NVVM::LdStMatrixEltType::B16);
  std::vector<Value> out = Unpack(s, op.getResult(), num, b32, l);
  if (pt.elem == Scalar::kBF16 || pt.elem == Scalar::kF16)
    for (const Value& v : out) s.ldmatrix_elem.try_emplace(s.Unwrap(v), pt.elem, loc);
  return out;
}

std::vector<Value> AmpereOps::MmaM16N8K16(Scalar ab, const std::vector<Value>& a,
                                          const std::vector<Value>& b, const std::vector<Value>& c,
                                          Loc loc) {
  KernelState& s = state();
  const bool f16_acc = !c.empty() && c[0].type() == Type::Vec(Scalar::kF16, 2);
  const Type acc = f16_acc ? Type::Vec(Scalar::kF16, 2) : Type::Of(Scalar::kF32);
  const size_t nc = f16_acc ? 2 : 4;
  auto fail = [&](const std::string& m) {
    self().Fail(m, loc);
    return std::vector<Value>(nc, s.Poison(acc, loc));
  };
  if (ab != Scalar::kBF16 && ab != Scalar::kF16)
    return fail("mma.m16n8k16 takes bf16 or f16 inputs");
  if (f16_acc && ab != Scalar::kF16) return fail("an f16 accumulator needs f16 inputs");
  if (a.size() != 4 || b.size() != 2 || c.size() != nc)
    return fail(absl::StrCat("mma.m16n8k16 takes 4 A, 2 B and ", nc, " C registers; got ", a.size(),
                             ", ", b.size(), ", ", c.size()));
  const Type b32 = Type::Of(Scalar::kI32);
  for (const Value& v : a)
    if (v.type() != b32) return fail("mma A registers are b32 (pairs of 16-bit values)");
  for (const Value& v : b)
    if (v.type() != b32) return fail("mma B registers are b32 (pairs of 16-bit values)");
  for (const Value& v : c)
    if (v.type() != acc) return fail(absl::StrCat("mma accumulators must all be ", acc.Str()));
  if (s.target.compute_capability < 80) self().Fail("mma.m16n8k16 needs sm_80 or later", loc);
  for (const auto* regs : {&a, &b})
    for (const Value& v : *regs)
      if (auto it = s.ldmatrix_elem.find(s.Unwrap(v));
          it != s.ldmatrix_elem.end() && it->second.first != ab)
        return fail(absl::StrCat(
            "mma.m16n8k16 of ", Type::Of(ab).Str(), " reads ", regs == &a ? "an A" : "a B",
            " register that ldmatrix loaded from ", Type::Of(it->second.first).Str(), " (",
            LocString(it->second.second), "): the types must match"));

  mlir::Location l = s.ToLoc(loc);
  auto unwrap = [&](const std::vector<Value>& vs) {
    llvm::SmallVector<mlir::Value> out;
    for (const Value& v : vs) out.push_back(s.Unwrap(v, loc));
    return out;
  };
  llvm::SmallVector<mlir::Value> ma = unwrap(a), mb = unwrap(b), mc = unwrap(c);
  if (ab == Scalar::kF16) {  // f16 operands are typed vector<2xf16> in the NVVM op
    for (auto* regs : {&ma, &mb})
      for (mlir::Value& v : *regs)
        v = mlir::LLVM::BitcastOp::create(s.builder, l, s.ToMlir(Type::Vec(Scalar::kF16, 2)), v);
  }
  mlir::Type result = mlir::LLVM::LLVMStructType::getLiteral(
      s.context.get(), llvm::SmallVector<mlir::Type>(nc, s.ToMlir(acc)));
  const auto ptx = ab == Scalar::kBF16 ? mlir::NVVM::MMATypes::bf16 : mlir::NVVM::MMATypes::f16;
  auto op = mlir::NVVM::MmaOp::create(
      s.builder, l, result, ma, mb, mc, llvm::ArrayRef<int64_t>{16, 8, 16}, std::nullopt,
      std::nullopt, std::array<mlir::NVVM::MMATypes, 2>{ptx, ptx},
      std::array<mlir::NVVM::MMALayout, 2>{mlir::NVVM::MMALayout::row, mlir::NVVM::MMALayout::col});
  return Unpack(s, op.getResult(), static_cast<int>(nc), acc, l);
}

}  // namespace kiln
