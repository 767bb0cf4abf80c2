// Warpgroup MMA (wgmma) with shared-memory descriptors derived from the tiles' layouts, its
// accumulator fragments, and stmatrix.
#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "dsl/mn_major.h"
#include "kiln/math.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {
bool NeedWgmma(KernelState& s, const Loc& loc) {
  if (s.target.chip == "sm_90a") return true;
  s.Fail(absl::StrCat("wgmma needs sm_90a; this kernel targets ", s.target.chip), loc);
  return false;
}

// The smem matrix descriptor of rows [row0, row0 + 8k) x columns [k0, k0 + 16) of a K-major
// swizzled tile: start address, leading byte offset 16 (unused when swizzled), stride byte
// offset = one 8-row swizzle atom (or `group_rows` rows: WgmmaTile::group_rows), and the swizzle
// mode.
mlir::Value Descriptor(KernelState& s, const SmemTile& t, const Operand& row0, int k0,
                       const Loc& loc, int group_rows = 0) {
  const int es = ScalarBytes(t.elem());
  const int row_bytes = t.row_stride() * es;
  const int mode = t.swizzle() == Swizzle::k128B ? 1 : t.swizzle() == Swizzle::k64B ? 2 : 3;
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  Value base = s.Wrap(s.SharedAddress32(s.Unwrap(t.Base(loc)), l), i32);
  Value addr = base + s.Wrap(s.Materialize(row0, i32), i32) * Operand(row_bytes, loc) +
               Operand(k0 * es, loc);
  mlir::Value start = s.Unwrap((addr & Operand(0x3FFFF, loc)) >> Operand(4, loc));
  start = mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), start);
  const uint64_t fixed = (uint64_t{16 >> 4} << 16) |
                         (uint64_t((group_rows ? group_rows : 8) * row_bytes >> 4) << 32) |
                         (uint64_t(mode) << 62);
  mlir::Value hi =
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(fixed), 64);
  return mlir::arith::OrIOp::create(s.builder, l, start, hi);
}

// K per wgmma: 32 bytes of each row (k16 of 16-bit types, k32 of 8-bit ones).
int WgmmaK(Scalar elem) { return 32 / ScalarBytes(elem); }

bool CheckOperandTile(KernelState& s, const SmemTile& t, const char* which, int rows,
                      const Operand& row0, int k0, const Loc& loc, int group_rows = 0) {
  const std::string where = absl::StrCat("wgmma ", which, " tile (", LocString(t.loc()), ")");
  if (t.elem() != Scalar::kBF16 && t.elem() != Scalar::kF16 && !IsFp8(t.elem())) {
    s.Fail(absl::StrCat(where, " must hold bf16, f16, e4m3 or e5m2"), loc);
    return false;
  }
  const int kstep = WgmmaK(t.elem());
  const int span = SwizzleBytes(t.swizzle());
  if (span == 0 || t.row_stride() * ScalarBytes(t.elem()) != span) {
    s.Fail(absl::StrCat(where, " must be K-major with rows of exactly its swizzle span; it has ",
                        span ? absl::StrCat(span, "B swizzle and ",
                                            t.row_stride() * ScalarBytes(t.elem()), "-byte rows")
                             : std::string("no swizzle"),
                        ", which no wgmma descriptor describes"),
           loc);
    return false;
  }
  if (k0 < 0 || k0 % kstep || k0 + kstep > t.cols()) {
    s.Fail(absl::StrCat(where, ": k0 = ", k0, " is not a ", kstep, "-wide slice of its ", t.cols(),
                        " columns (a wgmma of ", Type::Of(t.elem()).Str(), " takes k", kstep, ")"),
           loc);
    return false;
  }
  if (group_rows && (group_rows < 8 || group_rows % 8)) {
    s.Fail(absl::StrCat(where, ": group_rows = ", group_rows,
                        " does not hold whole 8-row groups (a multiple of 8 rows)"),
           loc);
    return false;
  }
  // The rows this wgmma's 8-row groups span (group_rows apart, or packed).
  const int extent = group_rows ? (rows / 8 - 1) * group_rows + 8 : rows;
  if (extent > t.rows() || (Access::IsImm(row0) && (static_cast<int>(Access::Imm(row0)) % 8 ||
                                                    Access::Imm(row0) + extent > t.rows()))) {
    s.Fail(absl::StrCat(where, " has ", t.rows(), " rows; this wgmma reads ", rows, " rows",
                        group_rows ? absl::StrCat(" in 8-row groups ", group_rows, " rows apart")
                                   : std::string(),
                        " from row ", Access::IsImm(row0) ? Access::Imm(row0) : -1),
           loc);
    return false;
  }
  return true;
}
}  // namespace

namespace detail {
bool CheckMnMajorTile(KernelState& s, const Kernel::WgmmaTile& w, const char* instr,
                      const char* which, int rows, const Operand& row0, int k0, const Loc& loc) {
  const SmemTile& t = w.tile;
  const std::string where =
      absl::StrCat(instr, " MN-major ", which, " tile (", LocString(t.loc()), ")");
  const int es = ScalarBytes(t.elem()), span = SwizzleBytes(t.swizzle()),
            atom = span ? span / es : 0;
  if (t.elem() != Scalar::kBF16 && t.elem() != Scalar::kF16) {
    s.Fail(absl::StrCat(where, " must hold bf16 or f16"), loc);
    return false;
  }
  if (span == 0 || t.row_stride() * es != span || w.k_rows <= 0 || w.k_rows % 8 ||
      t.rows() % w.k_rows) {
    s.Fail(
        absl::StrCat(
            where, " must be swizzled with rows of exactly its swizzle span, in blocks of k_rows (",
            w.k_rows, ", a multiple of 8) rows of K; it has ", t.rows(), " rows"),
        loc);
    return false;
  }
  const int columns = t.rows() / w.k_rows * atom;  // of M or N
  if (k0 < 0 || k0 % 16 || k0 + 16 > w.k_rows || (rows > atom && rows % atom) ||
      (Access::IsImm(row0) &&
       (static_cast<int>(Access::Imm(row0)) % atom || Access::Imm(row0) + rows > columns)) ||
      rows > columns) {
    s.Fail(absl::StrCat(where, " holds ", columns, " columns in blocks of ", atom, " and ",
                        w.k_rows, " rows of K; this ", instr, " reads ", rows, " columns from ",
                        Access::IsImm(row0) ? absl::StrCat(Access::Imm(row0))
                                            : std::string("a computed column"),
                        " at k0 = ", k0),
           loc);
    return false;
  }
  return true;
}

mlir::Value MnMajorStartField(KernelState& s, const Kernel::WgmmaTile& w, const Operand& row0,
                              int k0, const Loc& loc) {
  const SmemTile& t = w.tile;
  const int span = SwizzleBytes(t.swizzle()), atom = span / ScalarBytes(t.elem());
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  Value base = s.Wrap(s.SharedAddress32(s.Unwrap(t.Base(loc)), l), i32);
  Value addr =
      base +
      s.Wrap(s.Materialize(row0, i32), i32) / Operand(atom, loc) * Operand(w.k_rows * span, loc) +
      Operand(k0 * span, loc);
  mlir::Value start = s.Unwrap((addr & Operand(0x3FFFF, loc)) >> Operand(4, loc));
  return mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), start);
}

MnMajorOffsets MnMajorOffsetsOf(const Kernel::WgmmaTile& w) {
  const int span = SwizzleBytes(w.tile.swizzle());
  return {w.k_rows * span, 8 * span};
}
}  // namespace detail

namespace {
using detail::CheckMnMajorTile;

// Its wgmma descriptor: the start field, LBO, SBO, and the swizzle mode in bits 62-63.
mlir::Value MnMajorDescriptor(KernelState& s, const Kernel::WgmmaTile& w, const Operand& row0,
                              int k0, const Loc& loc) {
  const int mode = w.tile.swizzle() == Swizzle::k128B  ? 1
                   : w.tile.swizzle() == Swizzle::k64B ? 2
                                                       : 3;
  const detail::MnMajorOffsets o = detail::MnMajorOffsetsOf(w);
  const uint64_t fixed =
      (uint64_t(o.lbo >> 4) << 16) | (uint64_t(o.sbo >> 4) << 32) | (uint64_t(mode) << 62);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value hi =
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(fixed), 64);
  return mlir::arith::OrIOp::create(s.builder, l, detail::MnMajorStartField(s, w, row0, k0, loc),
                                    hi);
}
}  // namespace

WgmmaAccumulator HopperOps::WgmmaAcc(int n, Loc loc) {
  KernelState& s = state();
  WgmmaAccumulator acc;
  NeedWgmma(s, loc);
  if (n < 8 || n > 256 || n % 8) {
    self().Fail(absl::StrCat("wgmma m64nNk16 takes N = 8..256 in steps of 8, not ", n), loc);
    n = 8;
  }
  acc.n_ = n;
  acc.regs_ = self().Registers(Type::Of(Scalar::kF32), n / 2, loc);
  const int array = acc.regs_.array_;
  if (array >= static_cast<int>(s.wgmma_acc_arrays.size())) s.wgmma_acc_arrays.resize(array + 1);
  s.wgmma_acc_arrays[array] = true;
  acc.lane_ = self().LaneId(loc);
  acc.warp_ = self().WarpId(loc) % Operand(4, loc);
  return acc;
}

Value WgmmaAccumulator::Row(int pair, Loc loc) const {
  return warp_ * Operand(16, loc) + lane_ / Operand(4, loc) + Operand(RowSlot(pair) * 8, loc);
}

Value WgmmaAccumulator::Col(int pair, Loc loc) const {
  return lane_ % Operand(4, loc) * Operand(2, loc) + Operand(ColSlot(pair) * 8, loc);
}

void HopperOps::WgmmaFence(Loc loc) {
  KernelState& s = state();
  if (!NeedWgmma(s, loc)) return;
  const mlir::Location l = s.ToLoc(loc);
  std::vector<int> tied = std::move(s.acc_written_since_fence);
  s.acc_written_since_fence.clear();
  if (tied.empty()) {
    mlir::NVVM::WgmmaFenceAlignedOp::create(s.builder, l);
    return;
  }
  // The accumulators written since the last fence pass through it (tied operands), so that no
  // write of theirs, nor a copy LLVM makes for a wgmma's tied operand, lands between it and the
  // wgmma (the PTX ISA's rule for wgmma.fence; CUTLASS's warpgroup_fence_operand).
  std::vector<RegRef> regs;
  for (int array : tied) {
    auto alloca = s.reg_arrays[array].getDefiningOp<mlir::LLVM::AllocaOp>();
    const int64_t count =
        mlir::cast<mlir::LLVM::LLVMArrayType>(alloca.getElemType()).getNumElements();
    Regs r;
    r.state_ = &s, r.array_ = array, r.size_ = static_cast<int>(count);
    r.type_ = s.reg_types[array];
    for (int j = 0; j < r.size_; ++j) regs.push_back(r[RegIndex(j, loc)]);
  }
  std::vector<mlir::Value> operands;
  std::string constraints;
  s.emitting_wgmma = true;  // (the fence's own reads and writes of them)
  for (size_t i = 0; i < regs.size(); ++i) {
    operands.push_back(s.Unwrap(regs[i].Load(loc)));
    absl::StrAppend(&constraints, i ? "," : "", "=f");
  }
  for (size_t i = 0; i < regs.size(); ++i) absl::StrAppend(&constraints, ",", i);
  std::vector<mlir::Type> types(regs.size(), s.builder.getF32Type());
  std::vector<mlir::Value> pinned =
      s.InlineAsmResults("wgmma.fence.sync.aligned;", constraints, operands, types, l);
  for (size_t i = 0; i < regs.size(); ++i)
    regs[i] = Operand(s.Wrap(pinned[i], Type::Of(Scalar::kF32)), loc);
  s.emitting_wgmma = false;
}

void HopperOps::WgmmaCommit(Loc loc) {
  if (!NeedWgmma(state(), loc)) return;
  mlir::NVVM::WgmmaGroupSyncAlignedOp::create(state().builder, state().ToLoc(loc));
  state().wgmma_groups.push_back(std::move(state().wgmma_open));
  state().wgmma_open.clear();
}

void HopperOps::WgmmaWait(int pending, Loc loc) {
  if (!NeedWgmma(state(), loc)) return;
  if (pending < 0 || pending > 7) return self().Fail("wgmma.wait_group takes 0..7", loc);
  mlir::NVVM::WgmmaWaitGroupSyncOp::create(state().builder, state().ToLoc(loc), pending);
  auto& groups = state().wgmma_groups;
  if (groups.size() > static_cast<size_t>(pending))
    groups.erase(groups.begin(), groups.end() - pending);
}

std::vector<Value> WgmmaAccumulator::FragmentA(int k16, Scalar elem, Loc loc) const {
  KernelState& s = detail::Owner(Access::State(lane_), "WgmmaAccumulator");
  if (elem != Scalar::kBF16 && elem != Scalar::kF16) {
    s.Fail("an A fragment holds bf16 or f16", loc);
    return {};
  }
  if (k16 < 0 || 16 * (k16 + 1) > n_) {
    s.Fail(absl::StrCat("A fragment ", k16, " is columns ", 16 * k16, "..", 16 * k16 + 15, " of a ",
                        n_, "-column accumulator"),
           loc);
    return {};
  }
  std::vector<Value> a;
  for (int i = 0; i < 4; ++i) {
    const int pair = 4 * k16 + i;
    Value lo = regs_[RegIndex(2 * pair, loc)].Load(loc),
          hi = regs_[RegIndex(2 * pair + 1, loc)].Load(loc);
    Value packed = elem == Scalar::kBF16 ? PackBf16x2(lo, hi, loc) : PackF16x2(lo, hi, loc);
    a.push_back(packed.Bitcast(Type::Of(Scalar::kI32), loc));
  }
  return a;
}

namespace {

bool CheckRegisterA(KernelState& s, const std::vector<Value>& a, Scalar elem, const Loc& loc) {
  if (IsFp8(elem)) {
    s.Fail("a wgmma of 8-bit floats takes A from shared memory here, not from registers", loc);
    return false;
  }
  if (a.size() != 4) {
    s.Fail(absl::StrCat("wgmma A from registers takes 4 b32 registers, not ", a.size()), loc);
    return false;
  }
  const Type pair = Type::Vec(elem, 2);
  for (const Value& r : a)
    if (r.valid() && r.type() != Type::Of(Scalar::kI32) && r.type() != pair) {
      s.Fail(absl::StrCat("wgmma A registers are i32 or ", pair.Str(), " (the B tile's type), not ",
                          r.type().Str()),
             loc);
      return false;
    }
  return true;
}

// wgmma with A from registers and B from `b_desc`. No NVVM op takes A from registers: the
// instruction itself, accumulators tied in and out; `trans_b` is imm-trans-b (1: MN-major B).
void WgmmaRegisterA(KernelState& s, const WgmmaAccumulator& acc, const std::vector<Value>& a,
                    Scalar elem, mlir::Value b_desc, bool trans_b, bool scale_d, const Loc& loc) {
  mlir::Location l = s.ToLoc(loc);
  const int regs = acc.n() / 2;
  const char* type = elem == Scalar::kBF16 ? "bf16" : "f16";
  std::string d_list, a_list, constraints;
  std::vector<mlir::Value> operands;
  for (int i = 0; i < regs; ++i) {
    absl::StrAppend(&d_list, i ? ", " : "", "$", i);
    absl::StrAppend(&constraints, i ? "," : "", "=f");
  }
  if (scale_d)
    for (int i = 0; i < regs; ++i) {
      absl::StrAppend(&constraints, ",", i);  // tied: the accumulator is read and written
      operands.push_back(s.Unwrap(acc[RegIndex(i, loc)].Load(loc), loc));
    }
  const int first_a = regs + static_cast<int>(operands.size());
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&a_list, i ? ", " : "", "$", first_a + i);
    absl::StrAppend(&constraints, ",r");
    operands.push_back(s.Unwrap(a[i].Bitcast(Type::Of(Scalar::kI32), loc), loc));
  }
  absl::StrAppend(&constraints, ",l");
  operands.push_back(b_desc);
  // Operands after B: scale-d (a predicate), imm-scale-a, imm-scale-b, imm-trans-b.
  const std::string ptx = absl::StrCat("{\n.reg .pred p;\nsetp.ne.b32 p, ", scale_d ? 1 : 0,
                                       ", 0;\nwgmma.mma_async.sync.aligned.m64n", acc.n(),
                                       "k16.f32.", type, ".", type, " {", d_list, "}, {", a_list,
                                       "}, $", first_a + 4, ", p, 1, 1, ", trans_b ? 1 : 0, ";\n}");
  std::vector<mlir::Type> result_types(regs, s.builder.getF32Type());
  std::vector<mlir::Value> d = s.InlineAsmResults(ptx, constraints, operands, result_types, l);
  for (int i = 0; i < regs; ++i)
    acc[RegIndex(i, loc)] = Operand(s.Wrap(d[i], Type::Of(Scalar::kF32)), loc);
}

// The accumulator registers a wgmma reads and writes: its builder may touch them, and until the
// wait that completes its group nothing else may.
class WgmmaEmission {
 public:
  WgmmaEmission(KernelState& s, int array, const Loc& loc) : s_(s) {
    s_.emitting_wgmma = true;
    s_.wgmma_open.push_back({array, loc});
  }
  ~WgmmaEmission() { s_.emitting_wgmma = false; }

 private:
  KernelState& s_;
};

// A from shared memory, K-major or MN-major; B the same.
void WgmmaSmemA(Kernel& k, KernelState& s, const WgmmaAccumulator& acc, int array,
                const WgmmaTile& at, const Operand& a_row0, const WgmmaTile& bt,
                const Operand& b_row0, int k0, bool scale_d, const Loc& loc) {
  const SmemTile &a = at.tile, &b = bt.tile;
  if (!NeedWgmma(s, loc) || acc.n() == 0) return;
  auto check = [&](const WgmmaTile& w, const char* which, int rows, const Operand& row0) {
    return w.mn_major ? CheckMnMajorTile(s, w, "wgmma", which, rows, row0, k0, loc)
                      : CheckOperandTile(s, w.tile, which, rows, row0, k0, loc, w.group_rows);
  };
  // 8-bit operands mix (e4m3 by e5m2) and are K-major only (PTX ISA: no imm-trans for them).
  if ((IsFp8(a.elem()) && at.mn_major) || (IsFp8(b.elem()) && bt.mn_major))
    return k.Fail("a wgmma of 8-bit floats reads K-major A and B only (no MN-major tile)", loc);
  if (!check(at, "A", 64, a_row0) || !check(bt, "B", acc.n(), b_row0)) return;
  if (IsFp8(a.elem()) != IsFp8(b.elem()) || (!IsFp8(a.elem()) && a.elem() != b.elem()))
    return k.Fail(absl::StrCat("wgmma A and B tiles hold different types (A ",
                               Type::Of(a.elem()).Str(), ", B ", Type::Of(b.elem()).Str(), ")"),
                  loc);
  WgmmaEmission emitting(s, array, loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Type f32 = s.builder.getF32Type();
  const int regs = acc.n() / 2;
  mlir::Type st = mlir::LLVM::LLVMStructType::getLiteral(s.context.get(),
                                                         llvm::SmallVector<mlir::Type>(regs, f32));
  mlir::Value d = mlir::LLVM::PoisonOp::create(s.builder, l, st);
  // With scale-d 0 the old accumulator is not read: passing poison lets it die before this.
  for (int i = 0; i < regs && scale_d; ++i)
    d = mlir::LLVM::InsertValueOp::create(s.builder, l, d,
                                          s.Unwrap(acc[RegIndex(i, loc)].Load(loc)), i);
  auto type_of = [](Scalar e) {
    switch (e) {
      case Scalar::kBF16:
        return mlir::NVVM::WGMMATypes::bf16;
      case Scalar::kE4M3:
        return mlir::NVVM::WGMMATypes::e4m3;
      case Scalar::kE5M2:
        return mlir::NVVM::WGMMATypes::e5m2;
      default:
        return mlir::NVVM::WGMMATypes::f16;
    }
  };
  const auto ty = type_of(a.elem()), b_ty = type_of(b.elem());
  auto op = mlir::NVVM::WgmmaMmaAsyncOp::create(
      s.builder, l, st, d,
      at.mn_major ? MnMajorDescriptor(s, at, a_row0, k0, loc)
                  : Descriptor(s, a, a_row0, k0, loc, at.group_rows),
      bt.mn_major ? MnMajorDescriptor(s, bt, b_row0, k0, loc)
                  : Descriptor(s, b, b_row0, k0, loc, bt.group_rows),
      mlir::NVVM::MMAShapeAttr::get(s.context.get(), 64, acc.n(), WgmmaK(a.elem())), ty, b_ty,
      mlir::NVVM::WGMMATypes::f32,
      scale_d ? mlir::NVVM::WGMMAScaleOut::one : mlir::NVVM::WGMMAScaleOut::zero,
      mlir::NVVM::WGMMAScaleIn::one, mlir::NVVM::WGMMAScaleIn::one,
      // row / col: K-major A / B; the other: MN-major (the transposes)
      at.mn_major ? mlir::NVVM::MMALayout::col : mlir::NVVM::MMALayout::row,
      bt.mn_major ? mlir::NVVM::MMALayout::row : mlir::NVVM::MMALayout::col, nullptr);
  for (int i = 0; i < regs; ++i) {
    mlir::Value v = mlir::LLVM::ExtractValueOp::create(s.builder, l, op.getResult(), i);
    acc[RegIndex(i, loc)] = Operand(s.Wrap(v, Type::Of(Scalar::kF32)), loc);
  }
}

// A from registers, B K-major.
void WgmmaRegsA(Kernel& k, KernelState& s, const WgmmaAccumulator& acc, int array,
                const std::vector<Value>& a, const WgmmaTile& bt, const Operand& b_row0, int k0,
                bool scale_d, const Loc& loc) {
  const SmemTile& b = bt.tile;
  if (!NeedWgmma(s, loc) || acc.n() == 0) return;
  if (!CheckOperandTile(s, b, "B", acc.n(), b_row0, k0, loc, bt.group_rows)) return;
  if (!CheckRegisterA(s, a, b.elem(), loc)) return;
  WgmmaEmission emitting(s, array, loc);
  WgmmaRegisterA(s, acc, a, b.elem(), Descriptor(s, b, b_row0, k0, loc, bt.group_rows),
                 /*trans_b=*/false, scale_d, loc);
}

// A from registers, B MN-major as a ring of spans of N side by side (k_rows 0).
void WgmmaRegsARingB(Kernel& k, KernelState& s, const WgmmaAccumulator& acc, int array,
                     const std::vector<Value>& a, const SmemTile& b, int k0, bool scale_d,
                     const Loc& loc) {
  if (!NeedWgmma(s, loc) || acc.n() == 0) return;
  const std::string where = absl::StrCat("wgmma MN-major B tile (", LocString(b.loc()), ")");
  const int es = ScalarBytes(b.elem()), span = SwizzleBytes(b.swizzle());
  if (b.elem() != Scalar::kBF16 && b.elem() != Scalar::kF16)
    return k.Fail(absl::StrCat(where, " must hold bf16 or f16"), loc);
  if (span == 0 || b.row_stride() * es != span)
    return k.Fail(
        absl::StrCat(where,
                     " must be swizzled with rows of exactly its swizzle span (K rows of N)"),
        loc);
  const int atom = span / es;  // N columns per swizzle atom
  if (acc.n() > atom * b.stages() || (acc.n() > atom && acc.n() % atom))
    return k.Fail(absl::StrCat(where, " holds ", atom * b.stages(), " columns of N in ", b.stages(),
                               " atom(s) of ", atom, "; this wgmma needs N = ", acc.n()),
                  loc);
  if (k0 < 0 || k0 % 16 || k0 + 16 > b.rows())
    return k.Fail(absl::StrCat(where, ": k0 = ", k0, " is not a 16-row slice of its ", b.rows(),
                               " rows of K"),
                  loc);
  if (!CheckRegisterA(s, a, b.elem(), loc)) return;
  WgmmaEmission emitting(s, array, loc);
  // MN-major canonical layout (PTX ISA, matrix descriptors): each 8 rows of K are one swizzle
  // atom, SBO = 8 rows apart; LBO = from one atom of N columns to the next (a stage).
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  const int mode = b.swizzle() == Swizzle::k128B ? 1 : b.swizzle() == Swizzle::k64B ? 2 : 3;
  Value base = s.Wrap(s.SharedAddress32(s.Unwrap(b.Stage(0, loc).Base(loc)), l), i32);
  Value addr = base + Operand(k0 * span, loc);
  mlir::Value start = s.Unwrap((addr & Operand(0x3FFFF, loc)) >> Operand(4, loc));
  start = mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), start);
  const uint64_t fixed = (uint64_t(b.stage_bytes() >> 4) << 16) | (uint64_t(8 * span >> 4) << 32) |
                         (uint64_t(mode) << 62);
  mlir::Value hi =
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(fixed), 64);
  WgmmaRegisterA(s, acc, a, b.elem(), mlir::arith::OrIOp::create(s.builder, l, start, hi),
                 /*trans_b=*/true, scale_d, loc);
}

// A from registers, B MN-major in blocks of k_rows.
void WgmmaRegsAMnB(Kernel& k, KernelState& s, const WgmmaAccumulator& acc, int array,
                   const std::vector<Value>& a, const WgmmaTile& bt, const Operand& b_row0, int k0,
                   bool scale_d, const Loc& loc) {
  if (!NeedWgmma(s, loc) || acc.n() == 0) return;
  if (!CheckMnMajorTile(s, bt, "wgmma", "B", acc.n(), b_row0, k0, loc)) return;
  if (!CheckRegisterA(s, a, bt.tile.elem(), loc)) return;
  WgmmaEmission emitting(s, array, loc);
  WgmmaRegisterA(s, acc, a, bt.tile.elem(), MnMajorDescriptor(s, bt, b_row0, k0, loc),
                 /*trans_b=*/true, scale_d, loc);
}

}  // namespace

void HopperOps::Wgmma(const WgmmaAccumulator& acc, const WgmmaOp& op, Loc loc) {
  KernelState& s = state();
  const int array = acc.regs_.array_;
  if ((op.a.mn_major && op.a.group_rows) || (op.b.mn_major && op.b.group_rows))
    return self().Fail("group_rows spaces a K-major tile's 8-row groups; an MN-major tile has none",
                       loc);
  if (op.a_regs.empty())
    return WgmmaSmemA(self(), s, acc, array, op.a, op.a_row0, op.b, op.b_row0, op.k0, op.accumulate,
                      loc);
  if (!op.b.mn_major)
    return WgmmaRegsA(self(), s, acc, array, op.a_regs, op.b, op.b_row0, op.k0, op.accumulate, loc);
  if (op.b.k_rows == 0)
    return WgmmaRegsARingB(self(), s, acc, array, op.a_regs, op.b.tile, op.k0, op.accumulate, loc);
  WgmmaRegsAMnB(self(), s, acc, array, op.a_regs, op.b, op.b_row0, op.k0, op.accumulate, loc);
}

void HopperOps::StMatrix(const Value& smem_row, const std::vector<Value>& regs, bool trans,
                         Loc loc) {
  KernelState& s = state();
  const Type& pt = smem_row.type();
  if (regs.size() != 1 && regs.size() != 2 && regs.size() != 4)
    return self().Fail(absl::StrCat("stmatrix stores 1, 2 or 4 matrices, not ", regs.size()), loc);
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kShared || ScalarBytes(pt.elem) != 2)
    return self().Fail(
        absl::StrCat("stmatrix writes 16-bit elements to shared memory, not through ", pt.Str()),
        loc);
  for (const Value& r : regs)
    if (r.type() != Type::Of(Scalar::kI32))
      return self().Fail("stmatrix registers are b32 (pairs of 16-bit values)", loc);
  if (s.target.compute_capability < 90) return self().Fail("stmatrix needs sm_90 or later", loc);
  llvm::SmallVector<mlir::Value> src;
  for (const Value& r : regs) src.push_back(s.Unwrap(r, loc));
  mlir::NVVM::StMatrixOp::create(s.builder, s.ToLoc(loc), s.Unwrap(smem_row), src,
                                 trans ? mlir::NVVM::MMALayout::col : mlir::NVVM::MMALayout::row,
                                 mlir::NVVM::LdStMatrixShapeAttr::get(s.context.get(), 8, 8),
                                 mlir::NVVM::LdStMatrixEltType::B16);
}

}  // namespace kiln
