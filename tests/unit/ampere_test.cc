// The Ampere toolkit: smem layouts (padding, seed 003's XOR swizzles), cp.async, ldmatrix from a
// tile, warp tiling — what they compute, and that each misuse is an error at its DSL line.
#include "gtest/gtest.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#include "tests/unit/expect_error.h"

namespace kiln {
namespace {

std::string Here(int line) { return HereIn("tests/unit/ampere_test.cc", line); }
void ExpectError(Kernel& k, int line, const std::string& what) { ExpectErrorAt(k, Here(line), what); }

// Seed 003's swizzle_better, in 16-byte units: what the layouts must reproduce.
int SeedUnit(int row, int unit, int row_bytes) {
  return row_bytes >= 128 ? unit ^ (row % 8) : unit ^ ((row % 8) / 2);
}

// Stores to tile(row, unit * 8) for constant rows and units fold to constant smem offsets in the
// PTX; each must be where the seed's formula puts it.
TEST(AmpereLayout, UnitSwizzlesPlaceUnitsWhereTheSeedDoes) {
  for (auto [cols, swz] : {std::pair{64, UnitSwizzle::Row8()}, std::pair{32, UnitSwizzle::HalfRow8()}}) {
    Kernel k("test/xor_place", sm80(), {32});
    Value p = k.PtrParam("P", bf16);
    SmemTile t = k.Smem(bf16, 8, cols, SmemLayout{.swizzle = swz});
    const int row_bytes = cols * 2;
    for (int row = 0; row < 8; ++row)
      for (int unit = 0; unit < row_bytes / 16; ++unit)
        k.Store(t.At(row, unit * 8), k.Load(p + k.I32(row * 8 + unit)));
    absl::StatusOr<KernelDef> def = k.Build();
    ASSERT_TRUE(def.ok()) << def.status();
    absl::StatusOr<std::string> ptx = EmitPtx(*def);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    for (int row = 0; row < 8; ++row)
      for (int unit = 0; unit < row_bytes / 16; ++unit) {
        const int off = row * row_bytes + SeedUnit(row, unit, row_bytes) * 16;
        const std::string at = off ? "[kiln_smem+" + std::to_string(off) + "]" : "[kiln_smem]";
        EXPECT_NE(ptx->find(at), std::string::npos) << cols << " cols, row " << row << " unit " << unit;
      }
  }
}

// cuda_hgemm's permuted layout rotates units: (unit + (row % 8) / 2) % 4 on 64-byte rows.
TEST(AmpereLayout, RotationPlacesUnitsWhereCudaHgemmDoes) {
  Kernel k("test/rotate", sm80(), {32});
  Value p = k.PtrParam("P", f16);
  SmemTile t = k.Smem(f16, 8, 32, SmemLayout{.swizzle = UnitSwizzle::RotateHalfRow8()});
  for (int row = 0; row < 8; ++row)
    for (int unit = 0; unit < 4; ++unit) k.Store(t.At(row, unit * 8), k.Load(p + k.I32(row * 4 + unit)));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (int row = 0; row < 8; ++row)
    for (int unit = 0; unit < 4; ++unit) {
      const int off = row * 64 + (unit + row % 8 / 2) % 4 * 16;
      const std::string at = off ? "[kiln_smem+" + std::to_string(off) + "]" : "[kiln_smem]";
      EXPECT_NE(ptx->find(at), std::string::npos) << "row " << row << " unit " << unit;
    }
}

TEST(AmpereLayout, RotationNeedsPowerOfTwoUnits) {
  Kernel k("test/rotate3", sm80(), {32});
  k.Smem(f16, 8, 24, SmemLayout{.swizzle = UnitSwizzle::RotateHalfRow8()}); const int line = __LINE__;
  ExpectError(k, line, "power-of-two number of units per row, not 3");
}

TEST(AmpereLayout, TileOverAnotherReusesItsBytes) {
  Kernel k("test/over", sm80(), {32});
  SmemTile a = k.Smem(f16, 64, 32), b = k.Smem(f16, 32, 32);  // 4 KB + 2 KB
  SmemTile c = k.SmemOver(a, f16, 64, 64, {});                  // 8 KB from a's start
  EXPECT_EQ(c.offset_bytes(), a.offset_bytes());
  EXPECT_GT(b.offset_bytes(), a.offset_bytes());
  k.Store(c.At(0, 0), k.Load(b.At(0, 0)));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->manifest().smem_bytes, 8192u);
}

// The swizzled address really is emitted: tile(row, col) for a runtime row lands where the
// formula says (checked through the PTX's xor of the row bits into the column unit).
TEST(AmpereLayout, SwizzledAccessEmitsTheXor) {
  Kernel k("test/xor", sm80(), {128});
  SmemTile t = k.Smem(bf16, 128, 64, SmemLayout{.swizzle = UnitSwizzle::Row8()});
  Value p = k.PtrParam("P", bf16);
  k.Store(t.At(k.ThreadIdx(), 8), k.Load(p));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("xor.b32"), std::string::npos) << *ptx;
}

TEST(AmpereLayout, SwizzleOfEightByteUnitsBreaksLdmatrixRows) {
  Kernel k("test/ldm_unit", sm80(), {32});
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = {.unit_bytes = 8, .period = 8}});
  k.LdMatrix(t, k.LaneId(), 0, 4); const int line = __LINE__;
  ExpectError(k, line, "swizzles 8-byte units, which splits ldmatrix's 16-byte rows");
}

// ldmatrix's registers are untyped b32: an mma of f16 reading fragments loaded from a bf16 tile
// built and computed garbage. Now the mma's line says so, naming the ldmatrix; the matching type
// builds.
TEST(AmpereLayout, MmaOfAnotherTypeThanItsLdmatrixTile) {
  for (Scalar mma : {f16, bf16}) {
    Kernel k("test/mma_type", sm80(), {32});
    SmemTile t = k.Smem(bf16, 16, 16);
    std::vector<Value> a = k.LdMatrix(t, k.LaneId() % 16, 0, 4), b = k.LdMatrix(t, k.LaneId() % 16, 0, 2);
    std::vector<Value> c = k.MmaM16N8K16(mma, a, b, {k.F32(0), k.F32(0), k.F32(0), k.F32(0)}); const int line = __LINE__;
    k.Store(k.PtrParam("C", f32) + k.LaneId(), c[0]);
    if (mma == f16)
      ExpectError(k, line, "mma.m16n8k16 of f16 reads an A register that ldmatrix loaded from bf16");
    else
      EXPECT_TRUE(k.Build().ok());
  }
}

TEST(AmpereLayout, PaddingThatMisalignsRows) {
  Kernel k("test/ldm_pad", sm80(), {32});
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.pad = 4});  // rows 136 bytes apart
  k.LdMatrix(t, k.LaneId(), 0, 4); const int line = __LINE__;
  ExpectError(k, line, "rows 136 bytes apart");
}

TEST(AmpereLayout, CpAsyncIntoAMisalignedColumn) {
  Kernel k("test/cpa_col", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8()});
  k.CpAsync(t, k.LaneId(), 4, a); const int line = __LINE__;
  ExpectError(k, line, "starts 8 bytes into a 16-byte unit");
}

TEST(AmpereLayout, SwizzleWiderThanTheRow) {
  Kernel k("test/xor_wide", sm80(), {32});
  k.Smem(bf16, 64, 32, SmemLayout{.swizzle = UnitSwizzle::Row8()}); const int line = __LINE__;
  ExpectError(k, line, "the XOR would leave the row");  // 64-byte rows need HalfRow8
}

TEST(AmpereLayout, XorOnRowsThatAreNotWholeBlocks) {
  Kernel k("test/xor_192", sm80(), {32});
  // 12 units a row: row 7 would send unit 8 to 8 ^ 7 = 15, past the row's end.
  k.Smem(bf16, 64, 96, SmemLayout{.swizzle = UnitSwizzle::Row8()}); const int line = __LINE__;
  ExpectError(k, line, "not a whole number of such blocks");
}

TEST(AmpereLayout, TmaCannotFillAUnitSwizzledTile) {
  Kernel k("test/tma_unit", sm90a(), {128});
  rt::TensorMapParam spec;
  spec.tensor = "A";
  spec.dims = {*rt::GridExpr::Parse("K"), *rt::GridExpr::Parse("M")};
  spec.strides = {*rt::GridExpr::Parse("K*2")};
  spec.box = {64, 64};
  TensorMap map = k.TmaParam("tmA", spec);
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8()});
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(map, t, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "Ampere-style unit swizzle, which TMA cannot write");
}

TEST(AmpereLayout, WarpTilingNeedsAOneDimensionalBlock) {
  Kernel k("test/warps_2d", sm80(), {64, 2});
  k.Warps({.tile_m = 128, .tile_n = 128, .warps_m = 2, .warps_n = 2}); const int line = __LINE__;
  ExpectError(k, line, "the block must be one-dimensional");
}

TEST(AmpereLayout, PaddedAndSwizzled) {
  Kernel k("test/pad_xor", sm80(), {32});
  k.Smem(bf16, 64, 64, SmemLayout{.pad = 8, .swizzle = UnitSwizzle::Row8()}); const int line = __LINE__;
  ExpectError(k, line, "either padded or XOR-swizzled");
}

TEST(AmpereLayout, TileNotDivisibleByTheWarpLayout) {
  Kernel k("test/warps", sm80(), {128});
  k.Warps({.tile_m = 128, .tile_n = 72, .warps_m = 2, .warps_n = 2}); const int line = __LINE__;
  ExpectError(k, line, "a 128x72 tile does not divide into 2x2 warps of whole 16x8 mma tiles");
}

// The refused tiling still hands back the shape asked for, so that code sized by it (fragment
// loops, accumulators) reaches Build and its message rather than indexing past a placeholder.
TEST(AmpereLayout, WarpGridThatIsNotTheBlock) {
  Kernel k("test/warps_block", sm80(), {256});
  AmpereOps::WarpTile w = k.Warps({.tile_m = 128, .tile_n = 128, .warps_m = 2, .warps_n = 2}); const int line = __LINE__;
  EXPECT_EQ(std::vector<int>({w.rows, w.cols, w.mmas_m, w.mmas_n}), std::vector<int>({64, 64, 4, 8}));
  ExpectError(k, line, "need 128 threads; the block has 256");
}

TEST(AmpereCopy, CgCopiesSixteenBytes) {
  Kernel k("test/cpa_cg", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64);
  k.CpAsync(t, k.LaneId(), 0, a, 8); const int line = __LINE__;
  ExpectError(k, line, "cp.async.cg (L2 only) copies 16 bytes");
}

TEST(AmpereCopy, PrefetchSizesArePtxs) {
  Kernel k("test/cpa_prefetch", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64);
  k.CpAsync(t, k.LaneId(), 0, a, 16, Kernel::CacheAt::kL2, 96); const int line = __LINE__;
  ExpectError(k, line, "cp.async prefetches 64, 128 or 256 bytes into L2 (or 0: none), not 96");
}

TEST(AmpereCopy, PrefetchesIntoL2) {
  Kernel k("test/cpa_l2", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8(), .stages = 2});
  k.CpAsync(t.Stage(1), k.LaneId(), 8, a + 8, 16, Kernel::CacheAt::kL2, 128);
  k.CpAsync(t, k.LaneId(), 0, a, 8, Kernel::CacheAt::kL1, 64);
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("cp.async.cg.shared.global.L2::128B [%r"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find("cp.async.ca.shared.global.L2::64B [%r"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find("], 8;"), std::string::npos) << *ptx;
}

// The source size (zeros past it) goes out as cp.async's fourth operand, with or without an L2
// prefetch; anything but an i32 is refused at the call.
TEST(AmpereCopy, SourceSizeZeroFills) {
  Kernel k("test/cpa_src_size", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8(), .stages = 2});
  Value inside = k.LaneId() < 7;
  k.CpAsync(t, k.LaneId(), 0, a, 16, Kernel::CacheAt::kL2, 0, Select(inside, k.I32(16), k.I32(0)));
  k.CpAsync(t.Stage(1), k.LaneId(), 0, a, 16, Kernel::CacheAt::kL2, 128, Select(inside, k.I32(16), k.I32(0)));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("], 16, %r"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find("cp.async.cg.shared.global.L2::128B [%r"), std::string::npos) << *ptx;
  Kernel bad("test/cpa_src_size_type", sm80(), {32});
  Value b = bad.PtrParam("A", bf16);
  SmemTile u = bad.Smem(bf16, 64, 64);
  bad.CpAsync(u, bad.LaneId(), 0, b, 16, Kernel::CacheAt::kL2, 0, bad.F32(16)); const int line = __LINE__;
  ExpectError(bad, line, "cp.async's source size is an i32, not f32");
}

TEST(AmpereCopy, EmitsTheGroupOps) {
  Kernel k("test/cpa", sm80(), {32});
  Value a = k.PtrParam("A", bf16);
  SmemTile t = k.Smem(bf16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8(), .stages = 2});
  k.CpAsync(t.Stage(1), k.LaneId(), 8, a);
  k.CpAsync(t, k.LaneId(), 0, a, 8, Kernel::CacheAt::kL1);
  k.CpAsyncCommit();
  k.CpAsyncWait(1);
  k.CpAsyncWaitAll();
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->manifest().smem_bytes, 2u * 64 * 64 * 2);
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const char* s : {"cp.async.cg.shared.global", "cp.async.ca.shared.global", "cp.async.commit_group",
                        "cp.async.wait_group \t1", "cp.async.wait_all"})
    EXPECT_NE(ptx->find(s), std::string::npos) << s;
}

TEST(AmpereCopy, LdmatrixVariants) {
  Kernel k("test/ldm", sm80(), {32});
  Value out = k.PtrParam("O", i32);
  SmemTile t = k.Smem(f16, 64, 64, SmemLayout{.swizzle = UnitSwizzle::Row8()});
  Value lane = k.LaneId();
  std::vector<Value> regs;
  for (auto [num, trans] : {std::pair{1, false}, std::pair{2, false}, std::pair{4, false}, std::pair{4, true}})
    for (Value v : k.LdMatrix(t, lane, 8, num, trans)) regs.push_back(v);
  for (size_t i = 0; i < regs.size(); ++i) k.Store(out + k.I32(static_cast<int>(i)), regs[i]);
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const char* s : {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
                        "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"})
    EXPECT_NE(ptx->find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace kiln
