// Blackwell tensor memory and tcgen05: allocation, MMA with descriptors derived from the smem
// tiles, commit, loads, fences.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "dsl/mn_major.h"
#include "kiln/tcgen05_desc.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {
bool NeedSm100a(KernelState& s, const char* what, const Loc& loc) {
  if (s.target.chip == "sm_100a") return true;
  s.Fail(absl::StrCat(what, " needs sm_100a; this kernel targets ", s.target.chip), loc);
  return false;
}

mlir::NVVM::CTAGroupKind Group(int cta_group) {
  return cta_group == 2 ? mlir::NVVM::CTAGroupKind::CTA_2 : mlir::NVVM::CTAGroupKind::CTA_1;
}

// Tensor memory address (i32) as the addrspace(6) pointer the NVVM ops take.
mlir::Value TmemPtr(KernelState& s, const Value& address, mlir::Location l) {
  return mlir::LLVM::IntToPtrOp::create(
      s.builder, l, mlir::LLVM::LLVMPointerType::get(s.context.get(), 6), s.Unwrap(address));
}

// The smem descriptor (as i64) of rows row0.. and columns k0..k0+15 of a K-major tile. 128B
// swizzle: start + row0 * 128 + k0 * 2, SBO = one 8-row atom (1024 B). Interleaved (no swizzle):
// start + (k0 / 8) slabs + row0 * 16, LBO = one slab (the next 8 columns), SBO = 8 rows of 16 B.
mlir::Value SmemDescriptor(KernelState& s, const SmemTile& t, const Operand& row0, int k0,
                           const Loc& loc) {
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  const int es = ScalarBytes(t.elem()), slab_bytes = t.rows() * 16;
  Value base = s.Wrap(s.SharedAddress32(s.Unwrap(t.Base(loc)), l), i32);
  Value row = s.Wrap(s.Materialize(row0, i32), i32);
  Value addr = t.interleaved()
                   ? base + row * Operand(16, loc) + Operand(k0 * es / 16 * slab_bytes, loc)
                   : base + row * Operand(128, loc) + Operand(k0 * es, loc);
  mlir::Value start = s.Unwrap((addr & Operand(0x3FFFF, loc)) >> Operand(4, loc));
  start = mlir::arith::ExtUIOp::create(s.builder, l, s.builder.getI64Type(), start);
  const uint64_t fixed =
      t.interleaved()
          ? tcgen05::EncodeSmem({.leading_byte_offset = static_cast<uint32_t>(slab_bytes),
                                 .stride_byte_offset = 128})
          : tcgen05::EncodeSmem({.stride_byte_offset = 1024, .swizzle = tcgen05::Swizzle::k128B});
  mlir::Value hi =
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(fixed), 64);
  return mlir::arith::OrIOp::create(s.builder, l, start, hi);
}

// K of one tcgen05.mma: 16 of 16-bit types (kind::f16), 32 of 8-bit ones (kind::f8f6f4).
int MmaK(Scalar elem) { return 32 / ScalarBytes(elem); }

bool CheckMmaTile(KernelState& s, const SmemTile& t, const char* which, int rows,
                  const Operand& row0, int k0, const Loc& loc) {
  const std::string where = absl::StrCat("tcgen05.mma ", which, " tile (", LocString(t.loc()), ")");
  if (t.elem() != Scalar::kBF16 && t.elem() != Scalar::kF16 && !IsFp8(t.elem())) {
    s.Fail(absl::StrCat(where, " must hold bf16, f16 (kind::f16), e4m3 or e5m2 (kind::f8f6f4)"),
           loc);
    return false;
  }
  const bool swizzled =
      t.swizzle() == Swizzle::k128B && t.row_stride() * ScalarBytes(t.elem()) == 128;
  if (!swizzled && !t.interleaved()) {
    s.Fail(
        absl::StrCat(where, " must be K-major: 128-byte rows in 128B swizzle (SmemSwizzled) or ",
                     "8-column slabs without swizzle (SmemInterleaved); no descriptor describes ",
                     "this layout"),
        loc);
    return false;
  }
  if (Access::IsImm(row0) && static_cast<int>(Access::Imm(row0)) % 8 != 0) {
    // Interleaved: a core matrix; swizzled: the 1024-byte pattern (base offset 0).
    s.Fail(absl::StrCat(where, ": the MMA's rows start at row ", Access::Imm(row0),
                        ", not at a multiple of 8 (a core matrix / swizzle atom)"),
           loc);
    return false;
  }
  const int kk = MmaK(t.elem());  // 32 bytes of K an instruction
  if (k0 < 0 || k0 % kk || k0 + kk > t.cols()) {
    s.Fail(absl::StrCat(where, ": k0 = ", k0, " is not a ", kk, "-wide slice of its ", t.cols(),
                        " columns"),
           loc);
    return false;
  }
  if (Access::IsImm(row0) && (Access::Imm(row0) < 0 || Access::Imm(row0) + rows > t.rows())) {
    s.Fail(absl::StrCat(where, ": this tcgen05.mma reads ", rows, " rows from row ",
                        Access::Imm(row0), " but the tile has ", t.rows()),
           loc);
    return false;
  }
  return true;
}
}  // namespace

namespace detail {
bool UseTcgenGroup(KernelState& s, int cta_group, const Loc& loc) {
  if (s.tcgen_group == 0) {
    s.tcgen_group = cta_group;
    s.tcgen_group_loc = loc;
    return true;
  }
  if (s.tcgen_group == cta_group) return true;
  s.Fail(absl::StrCat("this tcgen05 op uses cta_group::", cta_group,
                      " but the kernel already uses cta_group::", s.tcgen_group, " (",
                      LocString(s.tcgen_group_loc), "); a kernel uses one of them"),
         loc);
  return false;
}
}  // namespace detail

Value Tmem::Base(Loc loc) const {
  Value slot = slot_.At(0, 0, loc);
  KernelState& s = detail::Owner(Access::State(slot), "Tmem");
  return s.Wrap(
      mlir::LLVM::LoadOp::create(s.builder, s.ToLoc(loc), s.builder.getI32Type(), s.Unwrap(slot)),
      Type::Of(Scalar::kI32));
}

Tmem BlackwellOps::TensorMemory(int columns, int cta_group, Loc loc) {
  Tmem t;
  t.loc_ = loc;
  t.columns_ = columns;
  t.cta_group_ = cta_group;
  if (columns < 32 || columns > 512 || (columns & (columns - 1)) != 0)
    self().Fail(
        absl::StrCat("tensor memory is allocated in powers of two from 32 to 512 columns, not ",
                     columns),
        loc);
  if (cta_group != 1 && cta_group != 2)
    self().Fail(absl::StrCat("cta_group is 1 or 2, not ", cta_group), loc);
  t.slot_ = self().Smem(Scalar::kI32, 1, 1, 0, 16, loc);
  return t;
}

void BlackwellOps::TmemAlloc(const Tmem& t, Loc loc) {
  KernelState& s = state();
  if (!NeedSm100a(s, "tcgen05.alloc", loc) || t.columns_ == 0 ||
      !detail::UseTcgenGroup(s, t.cta_group_, loc))
    return;
  if (s.tmem_allocs.empty()) {
    self().CheckAtBuild([this] {
      KernelState& st = state();
      for (const auto& [slot, cols, where] : st.tmem_allocs)
        if (std::find(st.tmem_frees.begin(), st.tmem_frees.end(), slot) == st.tmem_frees.end())
          self().Fail(
              "tensor memory allocated here is never freed (TmemFree); it must be deallocated "
              "before the kernel ends",
              where);
      // Each allocation (by its slot) holds its columns for the kernel's life: together they
      // must fit the SM's 512, or the last tcgen05.alloc waits forever.
      std::map<int, int> columns;
      for (const auto& [slot, cols, where] : st.tmem_allocs)
        columns[slot] = std::max(columns[slot], cols);
      int total = 0;
      for (const auto& [slot, cols] : columns) total += cols;
      if (total > 512)
        self().Fail(
            absl::StrCat("the kernel's tensor memory allocations total ", total,
                         " columns; an SM has 512 (the last tcgen05.alloc would wait forever)"),
            st.tmem_allocs.back().loc);
    });
  }
  s.tmem_allocs.push_back({t.slot_.offset_bytes(), t.columns_, loc});
  mlir::Location l = s.ToLoc(loc);
  mlir::Value cols = mlir::arith::ConstantIntOp::create(s.builder, l, t.columns_, 32);
  mlir::NVVM::Tcgen05AllocOp::create(s.builder, l, s.Unwrap(t.slot_.At(0, 0, loc)), cols,
                                     Group(t.cta_group_));
}

void BlackwellOps::TmemFree(const Tmem& t, Loc loc) {
  KernelState& s = state();
  if (!NeedSm100a(s, "tcgen05.dealloc", loc) || t.columns_ == 0 ||
      !detail::UseTcgenGroup(s, t.cta_group_, loc))
    return;
  s.tmem_frees.push_back(t.slot_.offset_bytes());
  mlir::Location l = s.ToLoc(loc);
  mlir::Value cols = mlir::arith::ConstantIntOp::create(s.builder, l, t.columns_, 32);
  mlir::NVVM::Tcgen05DeallocOp::create(s.builder, l, TmemPtr(s, t.Base(loc), l), cols,
                                       Group(t.cta_group_));
}

void BlackwellOps::TmemRelinquish(int cta_group, Loc loc) {
  if (!NeedSm100a(state(), "tcgen05.relinquish_alloc_permit", loc) ||
      !detail::UseTcgenGroup(state(), cta_group, loc))
    return;
  mlir::NVVM::Tcgen05RelinquishAllocPermitOp::create(state().builder, state().ToLoc(loc),
                                                     Group(cta_group));
}

Value BlackwellOps::ElectOne(Loc loc) {
  KernelState& s = state();
  if (s.target.compute_capability < 90) self().Fail("elect.sync needs sm_90 or later", loc);
  mlir::Location l = s.ToLoc(loc);
  return s.Wrap(mlir::NVVM::ElectSyncOp::create(s.builder, l, s.builder.getI1Type(), mlir::Value()),
                Type::Of(Scalar::kI1));
}

void BlackwellOps::TcgenFenceBeforeSync(Loc loc) {
  if (!NeedSm100a(state(), "tcgen05.fence", loc)) return;
  mlir::NVVM::Tcgen05FenceOp::create(state().builder, state().ToLoc(loc),
                                     mlir::NVVM::Tcgen05FenceKind::BEFORE_THREAD_SYNC);
}

void BlackwellOps::TcgenFenceAfterSync(Loc loc) {
  if (!NeedSm100a(state(), "tcgen05.fence", loc)) return;
  mlir::NVVM::Tcgen05FenceOp::create(state().builder, state().ToLoc(loc),
                                     mlir::NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC);
}

namespace {

// What both forms of TcgenMma check besides their tiles: the instruction descriptor for the
// shape, N against the accumulator's columns, A and B of one type, an i1 accumulate flag.
// nullopt after a Fail.
std::optional<uint32_t> CheckedInstr(KernelState& s, const tcgen05::InstrF16& shape, int cta_group,
                                     int columns, const Loc& allocated, Scalar a_elem,
                                     Scalar b_elem, const Operand& accumulate, const Loc& loc) {
  absl::StatusOr<uint32_t> idesc = tcgen05::EncodeInstr(shape, cta_group);
  if (!idesc.ok()) return s.Fail(std::string(idesc.status().message()), loc), std::nullopt;
  if (shape.n > columns)
    return s.Fail(absl::StrCat("an N = ", shape.n, " accumulator needs ", shape.n,
                               " tensor memory columns; the allocation (", LocString(allocated),
                               ") has ", columns),
                  loc),
           std::nullopt;
  if (a_elem != b_elem && !(IsFp8(a_elem) && IsFp8(b_elem)))
    return s.Fail(absl::StrCat("tcgen05.mma A and B tiles hold different types (A ",
                               Type::Of(a_elem).Str(), ", B ", Type::Of(b_elem).Str(),
                               "; only e4m3 and e5m2 mix)"),
                  loc),
           std::nullopt;
  if (!Access::IsImm(accumulate) && Access::Val(accumulate).type() != Type::Of(Scalar::kI1))
    return s.Fail("tcgen05.mma's accumulate flag is an i1 (a comparison) or 0/1", loc),
           std::nullopt;
  return *idesc;
}

// tcgen05.mma kind::f16 into the accumulator at `daddr`, from the operands' descriptors.
// The descriptors are built as the op's operands are (one expression), so the emitted order of
// their instructions does not depend on the caller.
void EmitTcgenMma(KernelState& s, int cta_group, const Value& daddr, uint32_t idesc, bool fp8_kind,
                  const std::function<mlir::Value()>& a_desc,
                  const std::function<mlir::Value()>& b_desc, const Operand& accumulate,
                  const Loc& loc) {
  mlir::Location l = s.ToLoc(loc);
  mlir::Value idesc_v =
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(idesc), 32);
  mlir::NVVM::Tcgen05MMAOp::create(
      s.builder, l, fp8_kind ? mlir::NVVM::Tcgen05MMAKind::F8F6F4 : mlir::NVVM::Tcgen05MMAKind::F16,
      Group(cta_group), mlir::NVVM::Tcgen05MMACollectorOp::DISCARD, /*aShift=*/false,
      TmemPtr(s, daddr, l), a_desc(), b_desc(), idesc_v,
      s.Materialize(accumulate, Type::Of(Scalar::kI1)), mlir::Value(), mlir::Value());
  s.tmem_uses.push_back({s.LastOp(), -1, "tcgen05.mma", loc});
}

// D's columns from a constant d_column: N of them from there must lie in the allocation.
bool CheckDColumn(KernelState& s, const Tmem& d, const Operand& d_column, int n, const Loc& loc) {
  if (!Access::IsImm(d_column)) return true;
  const int64_t c0 = Access::Imm(d_column);
  if (c0 >= 0 && c0 + n <= d.columns()) return true;
  s.Fail(absl::StrCat("an N = ", n, " accumulator at d_column ", c0,
                      " takes tensor memory columns ", c0, "..", c0 + n - 1, "; the allocation (",
                      LocString(d.loc()), ") has ", d.columns()),
         loc);
  return false;
}

// Both tiles K-major.
void TcgenMmaKMajor(Kernel& k, KernelState& s, const Tmem& d, const Operand& d_column,
                    const SmemTile& a, const Operand& a_row0, const SmemTile& b,
                    const Operand& b_row0, int k0, const Operand& accumulate, int m, int n,
                    const Loc& loc) {
  if (!NeedSm100a(s, "tcgen05.mma", loc) || d.columns() == 0 ||
      !detail::UseTcgenGroup(s, d.cta_group(), loc))
    return;
  const int rows_a = d.cta_group() == 2 ? m / 2 : m;  // a CTA pair splits A's rows
  // The tiles are checked after the shape: a shape tcgen05.mma lacks is the first thing to say.
  std::optional<uint32_t> idesc =
      CheckedInstr(s,
                   {.m = m,
                    .n = n,
                    .bf16_inputs = a.elem() == Scalar::kBF16,
                    .fp8 = IsFp8(a.elem()),
                    .a_e5m2 = a.elem() == Scalar::kE5M2,
                    .b_e5m2 = b.elem() == Scalar::kE5M2},
                   d.cta_group(), d.columns(), d.loc(), a.elem(), b.elem(), accumulate, loc);
  if (!idesc || !CheckDColumn(s, d, d_column, n, loc) ||
      !CheckMmaTile(s, a, "A", rows_a, a_row0, k0, loc) ||
      !CheckMmaTile(s, b, "B", d.cta_group() == 2 ? n / 2 : n, b_row0, k0, loc))
    return;
  const Type i32 = Type::Of(Scalar::kI32);
  Value daddr = d.Base(loc) + s.Wrap(s.Materialize(d_column, i32), i32);
  EmitTcgenMma(
      s, d.cta_group(), daddr, *idesc, IsFp8(a.elem()),
      [&] { return SmemDescriptor(s, a, a_row0, k0, loc); },
      [&] { return SmemDescriptor(s, b, b_row0, k0, loc); }, accumulate, loc);
}

// B MN-major, one CTA.
void TcgenMmaMnB(Kernel& k, KernelState& s, const Tmem& d, const Operand& d_column,
                 const SmemTile& a, const Operand& a_row0, int a_k0, const WgmmaTile& bt,
                 const Operand& b_row0, int b_k0, const Operand& accumulate, int m, int n,
                 const Loc& loc) {
  const SmemTile& b = bt.tile;
  if (!NeedSm100a(s, "tcgen05.mma", loc) || d.columns() == 0) return;
  if (d.cta_group() != 1)
    return k.Fail("tcgen05.mma with an MN-major B is built for one CTA (cta_group 1)", loc);
  if (IsFp8(a.elem()) || IsFp8(b.elem()))
    return k.Fail("tcgen05.mma reads 8-bit tiles K-major only here (no MN-major B)", loc);
  if (!detail::UseTcgenGroup(s, 1, loc)) return;
  std::optional<uint32_t> idesc = CheckedInstr(
      s, {.m = m, .n = n, .bf16_inputs = a.elem() == Scalar::kBF16, .transpose_b = true}, 1,
      d.columns(), d.loc(), a.elem(), b.elem(), accumulate, loc);
  if (!idesc || !CheckDColumn(s, d, d_column, n, loc) ||
      !CheckMmaTile(s, a, "A", m, a_row0, a_k0, loc) ||
      !detail::CheckMnMajorTile(s, bt, "tcgen05.mma", "B", n, b_row0, b_k0, loc))
    return;
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  Value daddr = d.Base(loc) + s.Wrap(s.Materialize(d_column, i32), i32);
  // The MN-major descriptor (PTX ISA, tcgen05 shared memory descriptor and canonical layouts):
  // LBO between blocks of columns of N, SBO between 8 rows of K, swizzle in bits 61-63.
  const detail::MnMajorOffsets o = detail::MnMajorOffsetsOf(bt);
  const tcgen05::Swizzle swizzle = b.swizzle() == Swizzle::k128B  ? tcgen05::Swizzle::k128B
                                   : b.swizzle() == Swizzle::k64B ? tcgen05::Swizzle::k64B
                                                                  : tcgen05::Swizzle::k32B;
  const uint64_t fixed = tcgen05::EncodeSmem({.leading_byte_offset = static_cast<uint32_t>(o.lbo),
                                              .stride_byte_offset = static_cast<uint32_t>(o.sbo),
                                              .swizzle = swizzle});
  mlir::Value b_desc = mlir::arith::OrIOp::create(
      s.builder, l, detail::MnMajorStartField(s, bt, b_row0, b_k0, loc),
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(fixed), 64));
  EmitTcgenMma(
      s, 1, daddr, *idesc, /*fp8_kind=*/false,
      [&] { return SmemDescriptor(s, a, a_row0, a_k0, loc); }, [&] { return b_desc; }, accumulate,
      loc);
}

// MXFP8: both tiles K-major, 8-bit; one CTA, M 128; the scales in tensor memory.
void TcgenMmaBlockScaled(KernelState& s, const Tmem& d, const TcgenMmaOp& op, const Loc& loc) {
  const TcgenBlockScales& sc = op.scales;
  if (!NeedSm100a(s, "tcgen05.mma kind::mxf8f6f4", loc) || d.columns() == 0) return;
  if (d.cta_group() != 1 || op.b.mn_major || !IsFp8(op.a.elem()) || !IsFp8(op.b.tile.elem()))
    return s.Fail(
        "tcgen05.mma with block scales (kind::mxf8f6f4) is built for one CTA with e4m3 or e5m2 "
        "tiles, both K-major",
        loc);
  if (sc.tmem->columns() == 0)
    return s.Fail("the block scales' Tmem was not declared by TensorMemory", loc);
  if (!detail::UseTcgenGroup(s, 1, loc)) return;
  const SmemTile &a = op.a, &b = op.b.tile;
  absl::StatusOr<uint32_t> idesc =
      tcgen05::EncodeInstrBlockScaled(tcgen05::InstrMxf8f6f4{.m = op.m,
                                                             .n = op.n,
                                                             .a_e5m2 = a.elem() == Scalar::kE5M2,
                                                             .b_e5m2 = b.elem() == Scalar::kE5M2,
                                                             .sfa_id = sc.byte,
                                                             .sfb_id = sc.byte},
                                      1);
  if (!idesc.ok()) return s.Fail(std::string(idesc.status().message()), loc);
  if (op.n > d.columns())
    return s.Fail(absl::StrCat("an N = ", op.n, " accumulator needs ", op.n,
                               " tensor memory columns; the allocation (", LocString(d.loc()),
                               ") has ", d.columns()),
                  loc);
  if (!CheckDColumn(s, d, op.d_column, op.n, loc)) return;
  // A's 128 rows take 4 columns, B's N rows N / 32 (rounded up).
  for (const auto& [name, column, count] :
       {std::tuple{"A", &sc.a_column, 4}, std::tuple{"B", &sc.b_column, (op.n + 31) / 32}})
    if (Access::IsImm(*column) &&
        (Access::Imm(*column) < 0 || Access::Imm(*column) + count > sc.tmem->columns()))
      return s.Fail(absl::StrCat(name, "'s scales take columns ", Access::Imm(*column), "..",
                                 Access::Imm(*column) + count - 1, " of an allocation of ",
                                 sc.tmem->columns(), " (", LocString(sc.tmem->loc()), ")"),
                    loc);
  // Scales inside the accumulator's columns would be overwritten by the MMA that reads them.
  if (sc.tmem == &d && Access::IsImm(op.d_column))
    for (const auto& [name, column, count] :
         {std::tuple{"A", &sc.a_column, 4}, std::tuple{"B", &sc.b_column, (op.n + 31) / 32}})
      if (const int64_t d0 = Access::Imm(op.d_column); Access::IsImm(*column) &&
                                                       Access::Imm(*column) < d0 + op.n &&
                                                       d0 < Access::Imm(*column) + count)
        return s.Fail(
            absl::StrCat(name, "'s scales (columns ", Access::Imm(*column), "..",
                         Access::Imm(*column) + count - 1,
                         ") lie inside the accumulator's columns ", d0, "..", d0 + op.n - 1),
            loc);
  if (!Access::IsImm(op.accumulate) && Access::Val(op.accumulate).type() != Type::Of(Scalar::kI1))
    return s.Fail("tcgen05.mma's accumulate flag is an i1 (a comparison) or 0/1", loc);
  if (!CheckMmaTile(s, a, "A", op.m, op.a_row0, op.k0, loc) ||
      !CheckMmaTile(s, b, "B", op.n, op.b_row0, op.k0, loc))
    return;
  const Type i32 = Type::Of(Scalar::kI32);
  auto at = [&](const Tmem& t, const Operand& column) {
    return t.Base(loc) + s.Wrap(s.Materialize(column, i32), i32);
  };
  // LLVM prints the form with one scale per 32 of K as .block_scale (the .block32 alias), which
  // PTX 8.8 introduced: the kernel's PTX version rises to it (dsl/target.cc keeps the lowest).
  s.target.ptx_version = std::max(s.target.ptx_version, 88);
  mlir::Location l = s.ToLoc(loc);
  Value daddr = at(d, op.d_column), sfa = at(*sc.tmem, sc.a_column),
        sfb = at(*sc.tmem, sc.b_column);
  mlir::Value a_desc = SmemDescriptor(s, a, op.a_row0, op.k0, loc),
              b_desc = SmemDescriptor(s, b, op.b_row0, op.k0, loc);
  mlir::NVVM::Tcgen05MMABlockScaleOp::create(
      s.builder, l, mlir::NVVM::MMABlockScaleKind::MXF8F6F4, Group(1),
      mlir::NVVM::Tcgen05MMABlockScale::DEFAULT, mlir::NVVM::Tcgen05MMACollectorOp::DISCARD,
      TmemPtr(s, daddr, l), a_desc, b_desc,
      mlir::arith::ConstantIntOp::create(s.builder, l, static_cast<int64_t>(*idesc), 32),
      s.Materialize(op.accumulate, Type::Of(Scalar::kI1)), TmemPtr(s, sfa, l), TmemPtr(s, sfb, l));
  s.tmem_uses.push_back({s.LastOp(), -1, "tcgen05.mma", loc});
}

}  // namespace

void BlackwellOps::TcgenMma(const Tmem& d, const TcgenMmaOp& op, Loc loc) {
  KernelState& s = state();
  if (op.b.group_rows)
    return self().Fail(
        "tcgen05.mma reads K-major tiles in packed 8-row groups: WgmmaTile::group_rows is a wgmma "
        "form",
        loc);
  if (op.scales.tmem) return TcgenMmaBlockScaled(s, d, op, loc);
  if (!op.b.mn_major)
    return TcgenMmaKMajor(self(), s, d, op.d_column, op.a, op.a_row0, op.b.tile, op.b_row0, op.k0,
                          op.accumulate, op.m, op.n, loc);
  TcgenMmaMnB(self(), s, d, op.d_column, op.a, op.a_row0, op.k0, op.b, op.b_row0, op.b_k0,
              op.accumulate, op.m, op.n, loc);
}

void BlackwellOps::TcgenCommit(const Barrier& bar, int cta_group, const Value& cta_mask, Loc loc) {
  KernelState& s = state();
  if (!NeedSm100a(s, "tcgen05.commit", loc) || !detail::UseTcgenGroup(s, cta_group, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::Value mask;
  if (cta_mask.valid()) {
    if (s.manifest.cluster.count() < 2)
      return self().Fail("a multicast commit needs a cluster of 2 or more CTAs", loc);
    if (cta_mask.type() != Type::Of(Scalar::kI32))
      return self().Fail("the commit's CTA mask is an i32 (16 bits used)", loc);
    mask = mlir::arith::TruncIOp::create(s.builder, l, s.builder.getI16Type(),
                                         s.Unwrap(cta_mask, loc));
  }
  mlir::NVVM::Tcgen05CommitOp::create(s.builder, l, s.Unwrap(bar.ptr()), mask, Group(cta_group));
  s.RecordArrival(Access::BarrierArray(bar), Access::BarrierIndex(bar), 0,
                  loc);  // one arrival when the MMAs complete
}

namespace {

// A warp reaches the 32 TMEM lanes of its quarter of the warpgroup ((warp % 4) x 32): a lane base
// known at build time is one of 0, 32, 64, 96 (the PTX ISA's tcgen05 data-movement shapes).
std::string BadLaneBase(const Operand& lane, const char* op) {
  if (!Access::IsImm(lane)) return "";
  const int64_t base = static_cast<int64_t>(Access::Imm(lane));
  if (base >= 0 && base < 128 && base % 32 == 0) return "";
  return absl::StrCat(op, " 32x32b from TMEM lane ", base,
                      ": a warp reaches the 32 lanes of its quarter, (warp % 4) x 32, so the "
                      "lane base is 0, 32, 64 or 96");
}

}  // namespace

std::vector<Value> BlackwellOps::TcgenLoad(const Tmem& t, const Operand& lane,
                                           const Operand& column, int num, Loc loc) {
  KernelState& s = state();
  const Type f32 = Type::Of(Scalar::kF32);
  if (num < 1 || num > 128 || (num & (num - 1)) != 0) {
    self().Fail(absl::StrCat("tcgen05.ld 32x32b loads 1..128 columns, a power of two, not ", num),
                loc);
    // (as many placeholders as asked, so that code indexing them reaches Build and its message)
    return std::vector<Value>(std::clamp(num, 1, 1024), s.Poison(f32, loc));
  }
  if (!NeedSm100a(s, "tcgen05.ld", loc)) return std::vector<Value>(num, s.Poison(f32, loc));
  if (t.columns_ == 0) {
    self().Fail("tcgen05.ld from a Tmem that TensorMemory did not declare", loc);
    return std::vector<Value>(num, s.Poison(f32, loc));
  }
  if (std::string bad = BadLaneBase(lane, "tcgen05.ld"); !bad.empty()) {
    self().Fail(bad, loc);
    return std::vector<Value>(num, s.Poison(f32, loc));
  }
  if (Access::IsImm(column) && static_cast<int>(Access::Imm(column)) + num > t.columns_) {
    self().Fail(absl::StrCat("tcgen05.ld of columns ", Access::Imm(column), "..",
                             Access::Imm(column) + num - 1, " of an allocation of ", t.columns_,
                             " (", LocString(t.loc_), ")"),
                loc);
    return std::vector<Value>(num, s.Poison(f32, loc));
  }
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  Value addr = t.Base(loc) + (s.Wrap(s.Materialize(lane, i32), i32) << Operand(16, loc)) +
               s.Wrap(s.Materialize(column, i32), i32);
  // The load and its wait in one block: the ISA leaves the destination registers undefined until
  // tcgen05.wait::ld, and with the two apart LLVM moved copies of them (its vector unpacking)
  // above the wait. Here the registers exist for LLVM only once the wait is done.
  std::string dst, constraints;
  for (int i = 0; i < num; ++i) {
    absl::StrAppend(&dst, i ? ", " : "", "$", i);
    absl::StrAppend(&constraints, i ? "," : "", "=f");
  }
  absl::StrAppend(&constraints, ",r");
  const std::string ptx = absl::StrCat("tcgen05.ld.sync.aligned.32x32b.x", num, ".b32 {", dst,
                                       "}, [$", num, "];\ntcgen05.wait::ld.sync.aligned;");
  std::vector<mlir::Type> types(num, s.builder.getF32Type());
  std::vector<mlir::Value> v =
      s.InlineAsmResults(ptx, constraints, {s.Unwrap(addr, loc)}, types, l);
  s.tmem_uses.push_back({s.LastOp(), -1, "tcgen05.ld", loc});
  std::vector<Value> out;
  for (mlir::Value e : v) out.push_back(s.Wrap(e, f32));
  return out;
}

void BlackwellOps::TcgenStore(const Tmem& t, const Operand& lane, const Operand& column,
                              const std::vector<Value>& values, Loc loc) {
  KernelState& s = state();
  const int num = static_cast<int>(values.size());
  if (num < 1 || num > 128 || (num & (num - 1)) != 0)
    return self().Fail(
        absl::StrCat("tcgen05.st 32x32b stores 1..128 columns, a power of two, not ", num), loc);
  if (!NeedSm100a(s, "tcgen05.st", loc)) return;
  if (t.columns_ == 0)
    return self().Fail("tcgen05.st to a Tmem that TensorMemory did not declare", loc);
  if (std::string bad = BadLaneBase(lane, "tcgen05.st"); !bad.empty()) return self().Fail(bad, loc);
  if (Access::IsImm(column) && static_cast<int>(Access::Imm(column)) + num > t.columns_)
    return self().Fail(absl::StrCat("tcgen05.st of columns ", Access::Imm(column), "..",
                                    Access::Imm(column) + num - 1, " of an allocation of ",
                                    t.columns_, " (", LocString(t.loc_), ")"),
                       loc);
  const Type f32 = Type::Of(Scalar::kF32), i32 = Type::Of(Scalar::kI32);
  std::vector<mlir::Value> operands;
  std::string src, constraints = "r";
  for (int i = 0; i < num; ++i) {
    if (values[i].type() != f32)
      return self().Fail(
          absl::StrCat("tcgen05.st stores f32 values; value ", i, " is ", values[i].type().Str()),
          loc);
    absl::StrAppend(&src, i ? ", " : "", "$", i + 1);
    absl::StrAppend(&constraints, ",f");
  }
  mlir::Location l = s.ToLoc(loc);
  Value addr = t.Base(loc) + (s.Wrap(s.Materialize(lane, i32), i32) << Operand(16, loc)) +
               s.Wrap(s.Materialize(column, i32), i32);
  operands.push_back(s.Unwrap(addr, loc));
  for (const Value& v : values) operands.push_back(s.Unwrap(v, loc));
  // The store and its wait in one block, as TcgenLoad keeps its load and wait together.
  s.InlineAsmResults(absl::StrCat("tcgen05.st.sync.aligned.32x32b.x", num, ".b32 [$0], {", src,
                                  "};\ntcgen05.wait::st.sync.aligned;"),
                     constraints, operands, {}, l);
  s.tmem_uses.push_back({s.LastOp(), -1, "tcgen05.st", loc});
}

}  // namespace kiln
