// Memory: register arrays, the shared memory planner, global tensors, loads and stores.
#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "dsl/watchdog.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {

// A store of an s32 value through an i32 pointer (or the other way round) is a mistake of
// signedness alone: name both ways out.
std::string SignednessHint(const Type& value, const Type& elem) {
  const auto twin = [](Scalar s) {
    return s == Scalar::kS32 ? Scalar::kI32 : s == Scalar::kS64 ? Scalar::kI64 : s;
  };
  if (value.lanes > 1 || IsSigned(value.elem) == IsSigned(elem.elem) ||
      twin(value.elem) != twin(elem.elem))
    return "";
  return absl::StrCat(" (a signedness apart: convert the value with To(", elem.Str(),
                      "), which keeps the bits, or declare the pointer of ", value.Str(),
                      ", e.g. PtrParam(name, ", value.Str(), "))");
}

// An i32 index or offset widened for a GEP: indices are unsigned (zero-extended).
mlir::Value Widen(KernelState& s, mlir::Value index, mlir::Location l) {
  return mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), index);
}

// base + index elements, as an LLVM GEP.
Value Offset(KernelState& s, const Value& base, mlir::Value index, const Loc& loc) {
  const Type& t = base.type();
  mlir::Location l = s.ToLoc(loc);
  return s.Wrap(mlir::LLVM::GEPOp::create(s.builder, l, s.ToMlir(t), s.ToMlir(t.elem),
                                          s.Unwrap(base), mlir::ValueRange{Widen(s, index, l)}),
                t);
}

bool IsI32(const Operand& o) {
  return Access::IsImm(o) ? !Access::IsFloatImm(o)
                          : Access::Val(o).type() == Type::Of(Scalar::kI32);
}

// The largest value a run-time index of the forms `x % c` and `x & m` (c, m constants) takes:
// c - 1 and m. Rings are indexed so (`i % kStages`); a tile of fewer stages than the modulus is
// a ring declared smaller than the loop that walks it. Nothing for other forms.
std::optional<int64_t> LargestOfModulus(mlir::Value v) {
  auto constant = [](mlir::Value c) -> std::optional<int64_t> {
    if (auto op = c.getDefiningOp<mlir::arith::ConstantOp>())
      if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(op.getValue())) return i.getInt();
    return std::nullopt;
  };
  mlir::Operation* op = v.getDefiningOp();
  if (!op || op->getNumOperands() != 2) return std::nullopt;
  std::optional<int64_t> c = constant(op->getOperand(1));
  if (!c || *c <= 0) return std::nullopt;
  if (mlir::isa<mlir::arith::RemSIOp, mlir::arith::RemUIOp>(op)) return *c - 1;
  if (mlir::isa<mlir::arith::AndIOp>(op)) return *c;
  return std::nullopt;
}

}  // namespace

// ---- register arrays

Regs MemoryOps::Registers(Type type, int count, Loc loc) {
  KernelState& s = state();
  Regs r;
  r.state_ = &state();
  r.type_ = type;
  r.size_ = count;
  if (count <= 0 || type.kind == Type::Kind::kPointer) {
    self().Fail(absl::StrCat("register array of ", count, " x ", type.Str()), loc);
    // Keep building on a one-element f32 array so that later accesses stay well-defined.
    r.type_ = type = Type::Of(Scalar::kF32);
    r.size_ = count = 1;
  }
  mlir::Location l = s.ToLoc(loc);
  mlir::OpBuilder& b = s.alloca_builder;
  mlir::Value one = mlir::LLVM::ConstantOp::create(b, l, b.getI32IntegerAttr(1));
  mlir::Type array = mlir::LLVM::LLVMArrayType::get(s.ToMlir(type), count);
  mlir::Value alloca = mlir::LLVM::AllocaOp::create(
      b, l, mlir::LLVM::LLVMPointerType::get(s.context.get()), array, one, type.Bytes());
  r.array_ = static_cast<int>(s.reg_arrays.size());
  s.reg_arrays.push_back(alloca);
  s.reg_types.push_back(type);
  // Zero-initialise in the body so that every use sees a defined value.
  mlir::Value zero = s.Unwrap(s.Constant(type, 0, loc));
  for (int i = 0; i < count; ++i) {
    mlir::Value p =
        mlir::LLVM::GEPOp::create(s.builder, l, mlir::LLVM::LLVMPointerType::get(s.context.get()),
                                  array, alloca, llvm::ArrayRef<mlir::LLVM::GEPArg>{0, i});
    mlir::LLVM::StoreOp::create(s.builder, l, zero, p);
  }
  return r;
}

RegRef Regs::operator[](RegIndex index) const {
  const int i = index.value;
  if (state_ && (i < 0 || i >= size_))
    detail::Owner(state_, "Regs")
        .Fail(absl::StrCat("register index ", i, " out of range 0..", size_ - 1), index.loc);
  return RegRef(state_, array_, i < 0 || i >= size_ ? 0 : i, index.loc);
}

namespace {
mlir::Value RegAddress(KernelState& s, int array, int index, mlir::Location l) {
  mlir::Type arr = s.reg_arrays[array].getDefiningOp<mlir::LLVM::AllocaOp>().getElemType();
  return mlir::LLVM::GEPOp::create(s.builder, l, mlir::LLVM::LLVMPointerType::get(s.context.get()),
                                   arr, s.reg_arrays[array],
                                   llvm::ArrayRef<mlir::LLVM::GEPArg>{0, index});
}
}  // namespace

Value RegRef::Load(Loc loc) const {
  KernelState& s = detail::Owner(state_, "Regs");
  if (&s != state_) return s.Poison(Type::Of(Scalar::kF32), loc);  // (reported: not its arrays)
  const Type& t = s.reg_types[array_];
  if (!s.emitting_wgmma) {
    auto in_flight = [&](const std::vector<std::pair<int, Loc>>& ops) -> const Loc* {
      for (const auto& [array, where] : ops)
        if (array == array_) return &where;
      return nullptr;
    };
    // A wgmma of the open group was never committed: no wait_group covers it, however deep.
    const Loc* open = in_flight(s.wgmma_open);
    const Loc* by = open;
    for (const auto& g : s.wgmma_groups)
      if (!by) by = in_flight(g);
    if (open)
      s.Fail(absl::StrCat("reads a wgmma accumulator that the wgmma at ", LocString(*open),
                          " may still write: that wgmma is in no committed group (a WgmmaCommit "
                          "missing after it?), so no WgmmaWait completes it"),
             loc);
    else if (by)
      s.Fail(absl::StrCat("reads a wgmma accumulator that the wgmma at ", LocString(*by),
                          " may still write: an accumulator read before the wgmma.wait_group that "
                          "completes it"),
             loc);
  }
  mlir::Location l = s.ToLoc(loc);
  return s.Wrap(
      mlir::LLVM::LoadOp::create(s.builder, l, s.ToMlir(t), RegAddress(s, array_, index_, l)), t);
}

const RegRef& RegRef::operator=(const Operand& v) const {
  KernelState& s = detail::Owner(state_, "Regs");
  if (&s != state_) return *this;  // (reported: not its arrays)
  const Type& t = s.reg_types[array_];
  if (!Access::IsImm(v) && Access::Val(v).type() != t) {
    s.Fail(absl::StrCat("storing ", Access::Val(v).type().Str(), " into a register of ", t.Str()),
           v.loc());
    return *this;
  }
  mlir::Location l = s.ToLoc(v.loc());
  mlir::LLVM::StoreOp::create(s.builder, l, s.Materialize(v, t), RegAddress(s, array_, index_, l));
  s.NoteAccumulatorWrite(array_);
  return *this;
}

const RegRef& RegRef::operator=(const RegRef& other) const {
  return *this = Operand(other.Load(other.loc_), other.loc_);
}

const RegRef& RegRef::operator+=(const Operand& v) const {
  return *this = Operand(Load(v.loc()) + v, v.loc());
}

// ---- shared memory

SmemTile MemoryOps::Smem(Scalar elem, int rows, int cols, int pad, int align, Loc loc) {
  KernelState& s = state();
  SmemTile t;
  t.state_ = &state();
  t.elem_ = elem;
  t.rows_ = rows, t.cols_ = cols, t.row_stride_ = cols + pad;
  if (rows <= 0 || cols <= 0 || pad < 0) {
    self().Fail(absl::StrCat("shared tile of ", rows, "x", cols, " (+", pad, ") elements"), loc);
    return t;
  }
  if (align <= 0 || (align & (align - 1)) != 0) {
    self().Fail(absl::StrCat("shared tile alignment ", align, " is not a power of two"), loc);
    return t;
  }
  t.loc_ = loc;
  if (s.smem_dynamic_at) {
    self().Fail(
        absl::StrCat("shared tiles go before the launch-sized shared memory of SmemDynamic (",
                     LocString(*s.smem_dynamic_at), "), which ends the plan"),
        loc);
    return t;
  }
  t.offset_ = (s.smem_top + align - 1) / align * align;
  s.smem_top = t.offset_ + t.bytes();
  if (s.smem_top > s.target.smem_budget_bytes)
    self().Fail(
        absl::StrCat("shared memory over budget: this tile's ", t.bytes(), " bytes (", rows, "x",
                     cols, " elements, its stages' rows counted) bring the total to ", s.smem_top,
                     " bytes; ", s.target.chip, " allows ", s.target.smem_budget_bytes),
        loc);
  return t;
}

SmemTile MemoryOps::SmemInterleaved(Scalar elem, int rows, int cols, int stages, Loc loc) {
  const int per_slab = 16 / ScalarBytes(elem);
  if (cols % per_slab != 0 || rows % 8 != 0) {
    self().Fail(absl::StrCat("an interleaved tile is whole 8-row, 16-byte core matrices: ", rows,
                             "x", cols, " elements of ", ScalarBytes(elem), " bytes is not"),
                loc);
    return Smem(elem, rows, cols, 0, 128, loc);
  }
  SmemTile t = Smem(elem, rows * std::max(stages, 1), cols, 0, 128, loc);
  t.rows_ = rows;
  t.stages_ = std::max(stages, 1);
  state().deepest_ring = std::max(state().deepest_ring, t.stages_);
  t.interleaved_ = true;
  return t;
}

SmemTile SmemTile::Slab(int s, Loc loc) const {
  KernelState& st = detail::Owner(state_, "SmemTile", &loc_);
  SmemTile t = *this;
  const int per_slab = 16 / ScalarBytes(elem_);
  if (!interleaved_ || s < 0 || s >= cols_ / per_slab || stages_ > 1) {
    st.Fail(absl::StrCat("Slab(", s, ") needs a single-stage interleaved tile with that many ",
                         "8-element slabs"),
            loc);
    return t;
  }
  t.interleaved_ = false;
  t.cols_ = t.row_stride_ = per_slab;
  t.offset_ = offset_ + s * rows_ * 16;
  t.loc_ = loc;
  return t;
}

SmemTile MemoryOps::SmemSwizzled(Scalar elem, int rows, int cols, Swizzle swizzle, int stages,
                                 Loc loc) {
  const int span = SwizzleBytes(swizzle);
  if (span && cols * ScalarBytes(elem) != span) {
    self().Fail(
        absl::StrCat("a ", span, "B-swizzled tile has rows of ", span, " bytes; ", cols,
                     " elements of ", ScalarBytes(elem), " bytes is ", cols * ScalarBytes(elem)),
        loc);
    swizzle = Swizzle::kNone;
  }
  if (stages < 1) {
    self().Fail(absl::StrCat("a tile ring needs at least one stage, not ", stages), loc);
    stages = 1;
  }
  // Place all stages as one tile of stages * rows rows, then describe it as a ring.
  SmemTile t = Smem(elem, rows * stages, cols, 0, 1024, loc);
  t.rows_ = rows;
  t.stages_ = stages;
  state().deepest_ring = std::max(state().deepest_ring, stages);
  t.swizzle_ = swizzle;
  t.loc_ = loc;
  if (t.stage_bytes() % 1024 != 0 && stages > 1 && span)
    self().Fail(absl::StrCat("each stage of a swizzled ring must be a multiple of 1024 bytes, not ",
                             t.stage_bytes()),
                loc);
  return t;
}

SmemTile SmemTile::Stage(const Operand& stage, Loc loc) const {
  KernelState& s = detail::Owner(state_, "SmemTile", &loc_);
  SmemTile t = *this;
  if (!IsI32(stage)) {
    s.Fail("a stage index must be i32", loc);
    return t;
  }
  if (Access::IsImm(stage) && (Access::Imm(stage) < 0 || Access::Imm(stage) >= stages_))
    s.Fail(absl::StrCat("stage ", Access::Imm(stage), " of a ring of ", stages_), loc);
  t.stage_ = s.Wrap(s.Materialize(stage, Type::Of(Scalar::kI32)), Type::Of(Scalar::kI32));
  if (!Access::IsImm(stage))
    if (std::optional<int64_t> top = LargestOfModulus(s.Unwrap(t.stage_)); top && *top >= stages_)
      s.Fail(absl::StrCat("this stage index reaches ", *top, " (a remainder or mask), past the ",
                          stages_, stages_ == 1 ? " stage" : " stages", " of the tile declared at ",
                          LocString(loc_), ": declare it with ", *top + 1,
                          " stages, or index it within its ", stages_),
             loc);
  if (!Access::IsImm(stage))  // (the GPU debug mode: within the ring)
    detail::CheckIndexInDebugMode(s, s.Unwrap(t.stage_), stages_, detail::WatchdogStop::kStage,
                                  loc);
  return t;
}

namespace {
// The constant part of an i32 sum: v = (x + 16) + y has 16. Indices of an unrolled loop are such
// sums (warp row + i * 16 + lane % 16); only the constant differs between them.
int64_t ConstantPart(mlir::Value v) {
  if (auto c = v.getDefiningOp<mlir::arith::ConstantOp>())
    if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(c.getValue())) return i.getInt();
  if (auto add = v.getDefiningOp<mlir::arith::AddIOp>())
    return ConstantPart(add.getLhs()) + ConstantPart(add.getRhs());
  return 0;
}

// v without its constant part (null when v is all constant).
mlir::Value WithoutConstant(KernelState& s, mlir::Value v, mlir::Location l) {
  if (v.getDefiningOp<mlir::arith::ConstantOp>()) return mlir::Value();
  auto add = v.getDefiningOp<mlir::arith::AddIOp>();
  if (!add || ConstantPart(v) == 0) return v;
  mlir::Value x = WithoutConstant(s, add.getLhs(), l), y = WithoutConstant(s, add.getRhs(), l);
  if (!x || !y) return x ? x : y;
  return mlir::arith::AddIOp::create(s.builder, l, x, y, mlir::arith::IntegerOverflowFlags::nuw);
}

// smem<i8>* to `byte` bytes past the start of the tile's selected stage.
mlir::Value TileByte(KernelState& s, const SmemTile& t, const Value& stage, mlir::Value byte,
                     mlir::Location l) {
  auto smem_ptr = mlir::LLVM::LLVMPointerType::get(s.context.get(), 3);
  mlir::Value base = mlir::LLVM::AddressOfOp::create(s.builder, l, smem_ptr, detail::kSmemSymbol);
  mlir::Value p = mlir::LLVM::GEPOp::create(s.builder, l, smem_ptr, s.builder.getI8Type(), base,
                                            llvm::ArrayRef<mlir::LLVM::GEPArg>{t.offset_bytes()});
  if (stage.valid()) {
    mlir::Value size = mlir::arith::ConstantIntOp::create(s.builder, l, t.stage_stride(), 32);
    byte = mlir::arith::AddIOp::create(
        s.builder, l, byte, mlir::arith::MulIOp::create(s.builder, l, s.Unwrap(stage), size));
  }
  return mlir::LLVM::GEPOp::create(s.builder, l, smem_ptr, s.builder.getI8Type(), p,
                                   mlir::ValueRange{Widen(s, byte, l)});
}
}  // namespace

SmemTile SmemTile::Rows(int row0, int rows, Loc loc) const {
  KernelState& s = detail::Owner(state_, "SmemTile", &loc_);
  SmemTile t = *this;
  if (row0 < 0 || rows <= 0 || row0 + rows > rows_) {
    s.Fail(absl::StrCat("rows ", row0, "..", row0 + rows, " of a tile of ", rows_, " rows"), loc);
    return t;
  }
  if (interleaved_) {
    s.Fail("Rows() splits row-major tiles (not interleaved ones)", loc);
    return t;
  }
  t.stage_stride_ = stage_stride();  // a ring's stages stay where they are
  if ((SwizzleBytes(swizzle_) || xor_.period > 1) && row0 % 8 != 0) {
    s.Fail(absl::StrCat("a swizzled tile splits at whole 8-row atoms, not at row ", row0), loc);
    return t;
  }
  t.offset_ = offset_ + row0 * row_stride_ * ScalarBytes(elem_);
  t.rows_ = rows;
  t.loc_ = loc;
  return t;
}

Value MemoryOps::SmemDynamic(Scalar elem, const std::string& bytes, Loc loc) {
  KernelState& s = state();
  const Type ptr = Type::Ptr(Space::kShared, elem);
  if (s.smem_dynamic_at) {
    self().Fail(absl::StrCat("SmemDynamic is already declared at ", LocString(*s.smem_dynamic_at)),
                loc);
    return s.Poison(ptr, loc);
  }
  absl::StatusOr<rt::GridExpr> rule = s.ParseRule("dynamic shared memory", bytes, loc);
  if (!rule.ok()) return s.Poison(ptr, loc);
  s.smem_top = (s.smem_top + 127) / 128 * 128;
  s.smem_dynamic_at = loc;
  s.manifest.smem_extra = *rule;
  s.manifest.smem_extra_source = LocString(loc);
  mlir::Location l = s.ToLoc(loc);
  auto smem_ptr = mlir::LLVM::LLVMPointerType::get(s.context.get(), 3);
  mlir::Value base = mlir::LLVM::AddressOfOp::create(s.builder, l, smem_ptr, detail::kSmemSymbol);
  mlir::Value p = mlir::LLVM::GEPOp::create(s.builder, l, smem_ptr, s.builder.getI8Type(), base,
                                            llvm::ArrayRef<mlir::LLVM::GEPArg>{s.smem_top});
  return s.Wrap(p, ptr);
}

Value SmemTile::Base(Loc loc) const {
  KernelState& s = detail::Owner(state_, "SmemTile", &loc_);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value zero = mlir::arith::ConstantIntOp::create(s.builder, l, 0, 32);
  return s.Wrap(TileByte(s, *this, stage_, zero, l), Type::Ptr(Space::kShared, elem_));
}

Value SmemTile::At(const Operand& row, const Operand& col, Loc loc) const {
  KernelState& s = detail::Owner(state_, "SmemTile", &loc_);
  const Type ptr = Type::Ptr(Space::kShared, elem_);
  if (!IsI32(row) || !IsI32(col)) {
    s.Fail("shared tile indices must be i32", loc);
    return s.Poison(ptr, loc);
  }
  // An index written as a number outside the tile is a mistake the builder can name (a computed
  // one past it reads a neighbouring tile's bytes, which no check at run time tells apart).
  const int64_t all_rows = static_cast<int64_t>(rows_) * std::max(stages_, 1);
  for (auto [index, extent, what] : {std::tuple{&row, all_rows, "row"},
                                     std::tuple{&col, static_cast<int64_t>(row_stride_), "column"}})
    if (Access::IsImm(*index) && (Access::Imm(*index) < 0 || Access::Imm(*index) >= extent)) {
      s.Fail(
          absl::StrCat(what, " ", Access::Imm(*index), " of a shared tile of ", rows_, " x ", cols_,
                       stages_ > 1 ? absl::StrCat(" in ", stages_, " stages") : "", ": outside it"),
          loc);
      return s.Poison(ptr, loc);
    }
  const Type i32 = Type::Of(Scalar::kI32);
  Value r = s.Wrap(s.Materialize(row, i32), i32);
  // In the GPU debug mode an index computed at run time is checked too: past the tile it would
  // read or write the next tile's bytes, which nothing else tells apart.
  // (A selected stage, a Rows() view of a ring or an interleaved tile ends at its rows: past them
  // lie the next stage, the parent's other rows or the next slab.)
  const bool view = stage_.valid() || stage_stride_ || interleaved_;
  if (!Access::IsImm(row))
    detail::CheckIndexInDebugMode(s, s.Unwrap(r), view ? rows_ : all_rows,
                                  detail::WatchdogStop::kRow, loc);
  if (!Access::IsImm(col))
    detail::CheckIndexInDebugMode(s, s.Materialize(col, i32), row_stride_,
                                  detail::WatchdogStop::kColumn, loc);
  // A constant row offset that keeps the swizzle's phase leaves the address as base + immediate,
  // so the rows of an unrolled loop share one base register (ldmatrix [%r+1024]) instead of each
  // folding its constant into the swizzle arithmetic, which the compiler then cannot undo.
  int64_t peeled_bytes = 0;
  if (const int64_t dr = ConstantPart(s.Unwrap(r)); dr > 0) {
    const int span = SwizzleBytes(swizzle_);
    const int64_t dr_bytes = dr * (interleaved_ ? 16 : row_stride_ * ScalarBytes(elem_));
    const bool keeps_phase =
        (xor_.period <= 1 || dr % xor_.period == 0) && (span == 0 || dr_bytes % (span * 8) == 0);
    mlir::Value rest = keeps_phase ? WithoutConstant(s, s.Unwrap(r), s.ToLoc(loc)) : mlir::Value();
    if (rest) {
      r = s.Wrap(rest, i32);
      peeled_bytes = dr_bytes;
    }
  }
  Value byte = (r * Operand(row_stride_, loc) + col) * Operand(ScalarBytes(elem_), loc);
  if (interleaved_) {  // slab col / per_slab, then row, then the column within the slab
    const int per_slab = 16 / ScalarBytes(elem_);
    Value c = s.Wrap(s.Materialize(col, i32), i32);
    byte = c / Operand(per_slab, loc) * Operand(rows_ * 16, loc) + r * Operand(16, loc) +
           c % Operand(per_slab, loc) * Operand(ScalarBytes(elem_), loc);
  }
  if (xor_.period > 1) {
    // Only the column part moves: unit c of row r goes to c ^ f(r) or (c + f(r)) % units.
    int unit_shift = 0;
    while ((1 << unit_shift) < xor_.unit_bytes) ++unit_shift;
    const int units = cols_ * ScalarBytes(elem_) / xor_.unit_bytes;
    Value f = (r & Operand(xor_.period - 1, loc)) / Operand(xor_.divide, loc);
    Value col_bytes = s.Wrap(s.Materialize(col, i32), i32) * Operand(ScalarBytes(elem_), loc);
    Value unit = col_bytes >> Operand(unit_shift, loc);
    Value moved = xor_.rotate ? (unit + f) & Operand(units - 1, loc) : unit ^ f;
    byte = r * Operand(row_stride_ * ScalarBytes(elem_), loc) +
           (moved << Operand(unit_shift, loc)) + (col_bytes & Operand(xor_.unit_bytes - 1, loc));
  }
  if (const int span = SwizzleBytes(swizzle_)) {
    // The 16-byte chunk index XORs with the row within its 8-row (or 4/2-row) atom.
    const int mask = (span / 16 - 1) << 4;
    byte = byte ^ ((byte >> Operand(3, loc)) & Operand(mask, loc));
  }
  if (peeled_bytes > 0) byte = byte + Operand(static_cast<int>(peeled_bytes), loc);
  return s.Wrap(TileByte(s, *this, stage_, s.Unwrap(byte), s.ToLoc(loc)), ptr);
}

// ---- global tensors

Value GlobalTensor::At(std::initializer_list<Operand> index, Loc loc) const {
  if (!base_.valid()) return base_;  // empty base: reported where the element pointer is used
  KernelState& s = *Access::State(base_);
  if (index.size() != strides_.size()) {
    s.Fail(absl::StrCat("tensor of rank ", strides_.size(), " indexed with ", index.size(),
                        " indices"),
           loc);
    return base_;
  }
  Value linear;
  int i = 0;
  for (const Operand& o : index) {
    if (!IsI32(o)) {
      s.Fail("tensor indices must be i32", loc);
      return base_;
    }
    Value term = Operand(strides_[i++], loc) * o;
    linear = linear.valid() ? linear + term : term;
  }
  return Offset(s, base_, s.Unwrap(linear), loc);
}

// ---- loads and stores

Value MemoryOps::Load(const Value& ptr, int lanes, Loc loc) {
  KernelState& s = state();
  const Type& pt = ptr.type();
  if (pt.kind != Type::Kind::kPointer || lanes < 1 || (lanes & (lanes - 1)) != 0) {
    self().Fail(absl::StrCat("Load of ", lanes, " lanes through ", pt.Str()), loc);
    return s.Poison(Type::Of(Scalar::kI32), loc);
  }
  const Type t = lanes == 1 ? Type::Of(pt.elem) : Type::Vec(pt.elem, lanes);
  if (t.Bytes() > 16) {
    self().Fail(absl::StrCat("a load moves at most 16 bytes, not ", t.Bytes()), loc);
    return s.Poison(t, loc);
  }
  return s.Wrap(mlir::LLVM::LoadOp::create(s.builder, s.ToLoc(loc), s.ToMlir(t), s.Unwrap(ptr, loc),
                                           t.Bytes()),
                t);
}

void MemoryOps::Store(const Value& ptr, const Operand& value, Loc loc) {
  KernelState& s = state();
  const Type& pt = ptr.type();
  if (pt.kind != Type::Kind::kPointer) return self().Fail("Store needs a pointer", loc);
  Type t = Access::IsImm(value) ? Type::Of(pt.elem) : Access::Val(value).type();
  if (t.elem != pt.elem || t.kind == Type::Kind::kPointer)
    return self().Fail(absl::StrCat("storing ", t.Str(), " through ", pt.Str(),
                                    SignednessHint(t, Type::Of(pt.elem))),
                       loc);
  mlir::LLVM::StoreOp::create(s.builder, s.ToLoc(loc), s.Materialize(value, t), s.Unwrap(ptr, loc),
                              t.Bytes());
}

void MemoryOps::StoreWriteThrough(const Value& ptr, const Operand& value, Loc loc) {
  KernelState& s = state();
  const Type& pt = ptr.type();
  Type t = Access::IsImm(value) ? Type::Of(pt.elem) : Access::Val(value).type();
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kGlobal || t != Type::Of(pt.elem) ||
      (t.Bytes() != 2 && t.Bytes() != 4))
    return self().Fail(absl::StrCat("StoreWriteThrough stores one 16- or 32-bit element to global "
                                    "memory, not ",
                                    t.Str(), " through ", pt.Str()),
                       loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value bits =
      s.Unwrap(s.Wrap(s.Materialize(value, t), t)
                   .Bitcast(Type::Of(t.Bytes() == 2 ? Scalar::kI16 : Scalar::kI32), loc));
  s.InlineAsm(t.Bytes() == 2 ? "st.global.wt.b16 [$0], $1;" : "st.global.wt.b32 [$0], $1;",
              t.Bytes() == 2 ? "l,h" : "l,r", {s.Unwrap(ptr, loc), bits}, {}, l);
}

void MemoryOps::StoreNoL1Allocate(const Value& ptr, const Value& value, Loc loc) {
  KernelState& s = state();
  const Type& pt = ptr.type();
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kGlobal || value.type().Bytes() != 16 ||
      value.type().elem != pt.elem)
    return self().Fail(
        absl::StrCat("StoreNoL1Allocate stores one 16-byte vector to global memory, not ",
                     value.type().Str(), " through ", pt.Str()),
        loc);
  if (s.target.compute_capability < 70)
    return self().Fail("L1::no_allocate needs sm_70 or later", loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value words = s.Unwrap(value.Bitcast(Type::Vec(Scalar::kI32, 4), loc));
  std::vector<mlir::Value> args = {s.Unwrap(ptr, loc)};
  for (int i = 0; i < 4; ++i)
    args.push_back(mlir::LLVM::ExtractElementOp::create(
        s.builder, l, words, mlir::arith::ConstantIntOp::create(s.builder, l, i, 32)));
  s.InlineAsm("st.global.L1::no_allocate.v4.b32 [$0], {$1, $2, $3, $4};", "l,r,r,r,r,~{memory}",
              args, {}, l);
}

Value MemoryOps::Vector(const std::vector<Value>& lanes, Loc loc) {
  KernelState& s = state();
  if (lanes.empty() || lanes.size() > 16) {
    self().Fail("Vector needs 1..16 lanes", loc);
    return s.Poison(Type::Of(Scalar::kI32), loc);
  }
  const Type t = Type::Vec(lanes[0].type().elem, static_cast<int>(lanes.size()));
  mlir::Location l = s.ToLoc(loc);
  mlir::Value v = mlir::LLVM::PoisonOp::create(s.builder, l, s.ToMlir(t));
  for (size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i].type() != Type::Of(t.elem)) {
      self().Fail("Vector lanes must be scalars of one type", loc);
      return s.Poison(t, loc);
    }
    mlir::Value idx = mlir::LLVM::ConstantOp::create(s.builder, l, s.builder.getI32IntegerAttr(i));
    v = mlir::LLVM::InsertElementOp::create(s.builder, l, v, s.Unwrap(lanes[i], loc), idx);
  }
  return s.Wrap(v, t);
}

}  // namespace kiln
