// The Ampere tile toolkit: padded and XOR-swizzled smem layouts, cp.async, ldmatrix from a tile
// (with the layout checks that keep 16-byte rows whole) and the warp tiling of an mma block.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {
bool PowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Why `tile` cannot serve accesses of `bytes` contiguous bytes per lane (empty if it can).
std::string SplitsRows(const SmemTile& tile, int bytes, const char* what) {
  const int elem = ScalarBytes(tile.elem());
  const UnitSwizzle& x = tile.unit_swizzle();
  if (x.period > 1 && x.unit_bytes < bytes)
    return absl::StrCat("the tile (", LocString(tile.loc()), ") swizzles ", x.unit_bytes,
                        "-byte units, which splits ", what, "'s ", bytes, "-byte rows");
  if (tile.row_stride() * elem % bytes != 0)
    return absl::StrCat("the tile (", LocString(tile.loc()), ") has rows ",
                        tile.row_stride() * elem, " bytes apart (", tile.cols(), " + ",
                        tile.row_stride() - tile.cols(), " padding elements), so ", what, "'s ",
                        bytes, "-byte rows are not all aligned; pad by a multiple of ",
                        bytes / elem, " elements");
  return "";
}

// A compile-time column that is not on a `bytes` boundary.
std::string MisalignedColumn(const SmemTile& tile, const Operand& col, int bytes,
                             const char* what) {
  if (!Access::IsImm(col)) return "";
  const int64_t c = static_cast<int64_t>(Access::Imm(col)) * ScalarBytes(tile.elem());
  if (c % bytes == 0) return "";
  return absl::StrCat(what, " at column ", Access::Imm(col), " starts ", c % bytes,
                      " bytes into a ", bytes, "-byte unit");
}
}  // namespace

SmemTile MemoryOps::Smem(Scalar elem, int rows, int cols, const SmemLayout& layout, Loc loc) {
  const UnitSwizzle& x = layout.swizzle;
  const int row_bytes = cols * ScalarBytes(elem);
  std::string bad;
  if (layout.stages < 1)
    bad = absl::StrCat("a tile ring needs at least one stage, not ", layout.stages);
  else if (!PowerOfTwo(x.unit_bytes) || !PowerOfTwo(x.period) || !PowerOfTwo(x.divide) ||
           x.divide > x.period)
    bad = absl::StrCat("an XOR swizzle of ", x.unit_bytes, "-byte units by (row % ", x.period,
                       ") / ", x.divide, ": all three must be powers of two, divide <= period");
  else if (x.period > 1 && x.rotate && !PowerOfTwo(row_bytes / x.unit_bytes))
    bad = absl::StrCat("a rotating swizzle needs a power-of-two number of units per row, not ",
                       row_bytes / x.unit_bytes);
  else if (x.period > 1 && layout.pad != 0)
    bad = "a tile is either padded or XOR-swizzled, not both (padding shifts the swizzled units)";
  else if (x.period > 1 && x.unit_bytes < ScalarBytes(elem))
    bad = absl::StrCat("swizzle units of ", x.unit_bytes, " bytes would split ", ScalarBytes(elem),
                       "-byte elements");
  else if (x.period > 1 && (row_bytes % x.unit_bytes != 0 ||
                            (row_bytes / x.unit_bytes) % (x.period / x.divide) != 0))
    bad = absl::StrCat("this swizzle permutes blocks of ", x.period / x.divide, " ", x.unit_bytes,
                       "-byte units, but a row of ", row_bytes, " bytes is not a whole number of ",
                       "such blocks; the XOR would leave the row");
  if (!bad.empty()) {
    self().Fail(bad, loc);
    return Smem(elem, rows, cols, 0, 128, loc);
  }
  SmemTile t = Smem(elem, rows * layout.stages, cols, layout.pad, 128, loc);
  t.rows_ = rows;
  t.stages_ = layout.stages;
  state().deepest_ring = std::max(state().deepest_ring, layout.stages);
  t.xor_ = x;
  return t;
}

SmemTile MemoryOps::SmemOver(const SmemTile& base, Scalar elem, int rows, int cols,
                             const SmemLayout& layout, Loc loc) {
  KernelState& s = state();
  const int top = s.smem_top;
  s.smem_top = base.offset_bytes();
  SmemTile t = Smem(elem, rows, cols, layout, loc);
  if (t.offset_bytes() != base.offset_bytes())
    self().Fail(
        absl::StrCat("a tile over ", LocString(base.loc()), " must start where it does (offset ",
                     base.offset_bytes(), "); its alignment moves it to ", t.offset_bytes()),
        loc);
  s.smem_top = std::max(top, s.smem_top);
  return t;
}

std::vector<Value> AmpereOps::LdMatrix(const SmemTile& tile, const Operand& row, const Operand& col,
                                       int num, bool trans, Loc loc) {
  std::string bad = SplitsRows(tile, 16, "ldmatrix");
  if (bad.empty()) bad = MisalignedColumn(tile, col, 16, "an ldmatrix row");
  if (!bad.empty()) {
    self().Fail(bad, loc);
    // (as many placeholders as asked, so that code indexing them reaches Build and its message)
    return std::vector<Value>(std::clamp(num, 1, 64), state().Poison(Type::Of(Scalar::kI32), loc));
  }
  return LdMatrix(tile.At(row, col, loc), num, trans, loc);
}

void AmpereOps::CpAsync(const SmemTile& tile, const Operand& row, const Operand& col,
                        const Value& src, int bytes, CacheAt cache, int l2_prefetch,
                        const Value& src_bytes, Loc loc) {
  KernelState& s = state();
  if (s.target.compute_capability < 80) return self().Fail("cp.async needs sm_80 or later", loc);
  if (bytes != 4 && bytes != 8 && bytes != 16)
    return self().Fail(absl::StrCat("cp.async copies 4, 8 or 16 bytes, not ", bytes), loc);
  if (cache == CacheAt::kL2 && bytes != 16)
    return self().Fail("cp.async.cg (L2 only) copies 16 bytes; use CacheAt::kL1 for smaller copies",
                       loc);
  const Type& st = src.type();
  if (st.kind != Type::Kind::kPointer || st.space != Space::kGlobal)
    return self().Fail(absl::StrCat("cp.async reads global memory, not through ", st.Str()), loc);
  if (l2_prefetch != 0 && l2_prefetch != 64 && l2_prefetch != 128 && l2_prefetch != 256)
    return self().Fail(
        absl::StrCat("cp.async prefetches 64, 128 or 256 bytes into L2 (or 0: none), not ",
                     l2_prefetch),
        loc);
  std::string bad = SplitsRows(tile, bytes, "cp.async");
  if (bad.empty()) bad = MisalignedColumn(tile, col, bytes, "a cp.async");
  if (!bad.empty()) return self().Fail(bad, loc);
  if (src_bytes.valid() && !(src_bytes.type() == Type::Of(i32)))
    return self().Fail(
        absl::StrCat("cp.async's source size is an i32, not ", src_bytes.type().Str()), loc);
  if (l2_prefetch != 0) {  // the NVVM op has no prefetch size
    mlir::Location l = s.ToLoc(loc);
    std::vector<mlir::Value> operands = {s.SharedAddress32(s.Unwrap(tile.At(row, col, loc)), l),
                                         s.Unwrap(src, loc)};
    if (src_bytes.valid()) operands.push_back(s.Unwrap(src_bytes, loc));
    s.InlineAsm(absl::StrCat("cp.async.", cache == CacheAt::kL2 ? "cg" : "ca",
                             ".shared.global.L2::", l2_prefetch, "B [$0], [$1], ", bytes,
                             src_bytes.valid() ? ", $2;" : ";"),
                src_bytes.valid() ? "r,l,r,~{memory}" : "r,l,~{memory}", operands, mlir::Type(), l);
    return;
  }
  mlir::NVVM::CpAsyncOp::create(s.builder, s.ToLoc(loc), s.Unwrap(tile.At(row, col, loc)),
                                s.Unwrap(src, loc), static_cast<uint32_t>(bytes),
                                cache == CacheAt::kL2 ? mlir::NVVM::LoadCacheModifierKind::CG
                                                      : mlir::NVVM::LoadCacheModifierKind::CA,
                                src_bytes.valid() ? s.Unwrap(src_bytes, loc) : mlir::Value());
}

void AmpereOps::CpAsyncCommit(Loc loc) {
  if (state().target.compute_capability < 80)
    return self().Fail("cp.async needs sm_80 or later", loc);
  mlir::NVVM::CpAsyncCommitGroupOp::create(state().builder, state().ToLoc(loc));
}

void AmpereOps::CpAsyncWait(int pending, Loc loc) {
  if (state().target.compute_capability < 80)
    return self().Fail("cp.async needs sm_80 or later", loc);
  if (pending < 0 || pending > 7) return self().Fail("cp.async.wait_group takes 0..7", loc);
  mlir::NVVM::CpAsyncWaitGroupOp::create(state().builder, state().ToLoc(loc),
                                         static_cast<uint32_t>(pending));
}

void AmpereOps::CpAsyncWaitAll(Loc loc) {
  if (state().target.compute_capability < 80)
    return self().Fail("cp.async needs sm_80 or later", loc);
  state().InlineAsm("cp.async.wait_all;", "~{memory}", {}, nullptr, state().ToLoc(loc));
}

AmpereOps::WarpTile AmpereOps::Warps(const WarpTiling& w, Loc loc) {
  WarpTile t{};
  const rt::Dim3& block = state().manifest.block;
  const int threads = static_cast<int>(block.x);
  std::string bad;
  if (block.y != 1 || block.z != 1)
    bad = "a warp tiling numbers warps along threadIdx.x; the block must be one-dimensional";
  else if (w.warps_m <= 0 || w.warps_n <= 0 || w.mma_m <= 0 || w.mma_n <= 0 || w.tile_m <= 0 ||
           w.tile_n <= 0)
    bad = "a warp tiling needs positive sizes";
  else if (w.tile_m % (w.warps_m * w.mma_m) != 0 || w.tile_n % (w.warps_n * w.mma_n) != 0)
    bad = absl::StrCat("a ", w.tile_m, "x", w.tile_n, " tile does not divide into ", w.warps_m, "x",
                       w.warps_n, " warps of whole ", w.mma_m, "x", w.mma_n, " mma tiles");
  else if (w.warps_m * w.warps_n * 32 != threads)
    bad = absl::StrCat(w.warps_m, "x", w.warps_n, " warps need ", w.warps_m * w.warps_n * 32,
                       " threads; the block has ", threads);
  if (!bad.empty()) {
    self().Fail(bad, loc);
    // The shape asked for, as near as it divides: code sized by it (accumulators, fragment
    // loops) then reaches Build and its message instead of indexing past a 1x1 placeholder.
    auto at_least_1 = [](int n) { return std::max(n, 1); };
    t.m0 = t.n0 = self().I32(0, loc);
    t.rows = at_least_1(w.warps_m > 0 ? w.tile_m / w.warps_m : 1);
    t.cols = at_least_1(w.warps_n > 0 ? w.tile_n / w.warps_n : 1);
    t.mmas_m = at_least_1(w.mma_m > 0 ? (t.rows + w.mma_m - 1) / w.mma_m : 1);
    t.mmas_n = at_least_1(w.mma_n > 0 ? (t.cols + w.mma_n - 1) / w.mma_n : 1);
    return t;
  }
  t.rows = w.tile_m / w.warps_m;
  t.cols = w.tile_n / w.warps_n;
  t.mmas_m = t.rows / w.mma_m;
  t.mmas_n = t.cols / w.mma_n;
  Value warp = self().WarpId(loc);
  t.m0 = warp / Operand(w.warps_n, loc) * Operand(t.rows, loc);
  t.n0 = warp % Operand(w.warps_n, loc) * Operand(t.cols, loc);
  return t;
}

}  // namespace kiln
