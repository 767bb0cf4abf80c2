// Tensor memory and tcgen05 in the builder: what they emit, and each misuse as an error at its
// DSL line.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#include "tests/unit/expect_error.h"

namespace kiln {
namespace {

std::string Here(int line) { return HereIn("tests/unit/blackwell_test.cc", line); }
void ExpectError(Kernel& k, int line, const std::string& what) { ExpectErrorAt(k, Here(line), what); }

TEST(Tmem, ColumnsArePowersOfTwoFrom32To512) {
  for (int cols : {16, 48, 1024}) {
    Kernel k("test/tmem_cols", sm100a(), {128});
    k.TensorMemory(cols); const int line = __LINE__;
    ExpectError(k, line, "powers of two from 32 to 512 columns");
  }
}

TEST(Tmem, AllocatedButNeverFreed) {
  Kernel k("test/tmem_leak", sm100a(), {128});
  Tmem t = k.TensorMemory(128);
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(t); }); const int line = __LINE__;
  ExpectError(k, line, "never freed");
}

TEST(Tmem, NeedsSm100a) {
  Kernel k("test/tmem_sm90", sm90a(), {128});
  Tmem t = k.TensorMemory(128);
  k.TmemAlloc(t); const int line = __LINE__;
  ExpectError(k, line, "tcgen05.alloc needs sm_100a; this kernel targets sm_90a");
}

TEST(Tmem, AllocFenceLoadFreeEmitTheirInstructions) {
  Kernel k("test/tmem_ops", sm100a(), {128});
  Value out = k.PtrParam("O", f32);
  Tmem t = k.TensorMemory(64);
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(t); k.TmemRelinquish(); });
  k.TcgenFenceBeforeSync();
  k.SyncThreads();
  k.TcgenFenceAfterSync();
  std::vector<Value> v = k.TcgenLoad(t, k.WarpId() * 32, 16, 16);
  for (int i = 0; i < 16; ++i) k.Store(out + (k.ThreadIdx() * 16 + i), v[i]);
  k.SyncThreads();
  k.If(k.WarpId() == 0, [&] { k.TmemFree(t); });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const char* s : {"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                        "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned",
                        "tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync",
                        "tcgen05.ld.sync.aligned.32x32b.x16.b32", "tcgen05.wait::ld.sync.aligned",
                        "tcgen05.dealloc.cta_group::1.sync.aligned.b32"})
    EXPECT_NE(ptx->find(s), std::string::npos) << s;
}

// kiln check's fence rule: a TMEM read or an MMA that follows a wait (a CTA barrier, an mbarrier
// wait, even one inside an if before it) without tcgen05.fence::after_thread_sync between them is
// a finding at its line, naming the wait's.
TEST(TcgenFence, AReadOrMmaAfterAWaitNeedsTheFence) {
  int wait_line = 0, use_line = 0;
  // 0: the load after SyncThreads, fenced; 1: unfenced; 2: an MMA after an mbarrier wait in an
  // if, fenced inside it; 3: unfenced.
  auto build = [&](int variant) {
    Kernel k("test/tcgen_fence", sm100a(), {128});
    Value out = k.PtrParam("O", f32);
    SmemTile a = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
    Barriers bar = k.SmemBarriers(1);
    Tmem t = k.TensorMemory(128);
    k.If(k.ThreadIdx() == 0, [&] { bar[0].Init(1); });
    k.If(k.WarpId() == 0, [&] { k.TmemAlloc(t); k.TmemRelinquish(); });
    k.TcgenFenceBeforeSync();
    if (variant < 2) {
      k.SyncThreads(); wait_line = __LINE__;
      if (variant == 0) k.TcgenFenceAfterSync();
      std::vector<Value> v = k.TcgenLoad(t, k.WarpId() * 32, 0, 16); use_line = __LINE__;
      for (int i = 0; i < 16; ++i) k.Store(out + (k.ThreadIdx() * 16 + i), v[i]);
    } else {
      k.SyncThreads();
      k.TcgenFenceAfterSync();
      k.If(k.ThreadIdx() == 0, [&] {
        k.If(k.BlockIdx() >= 0, [&] {
          bar[0].Wait(0); wait_line = __LINE__;
          if (variant == 2) k.TcgenFenceAfterSync();
        });
        k.TcgenMma(t, {.m = 128, .n = 128, .a = a, .b = b}); use_line = __LINE__;
        k.TcgenCommit(bar[0]);
      });
    }
    k.TcgenFenceBeforeSync();
    k.SyncThreads();
    k.If(k.WarpId() == 0, [&] { k.TmemFree(t); });
    return k.Build();
  };
  for (int variant : {0, 2}) {
    absl::StatusOr<KernelDef> def = build(variant);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_TRUE(def->findings().empty()) << variant << ": " << def->findings().front();
  }
  for (int variant : {1, 3}) {
    absl::StatusOr<KernelDef> def = build(variant);
    ASSERT_TRUE(def.ok()) << def.status();
    ASSERT_EQ(def->findings().size(), 1u) << variant;
    const std::string& f = def->findings()[0];
    EXPECT_EQ(f.rfind(Here(use_line), 0), 0u) << f;
    EXPECT_NE(f.find(absl::StrCat(variant == 1 ? "this tcgen05.ld" : "this tcgen05.mma",
                                  " follows the wait at tests/unit/blackwell_test.cc:", wait_line,
                                  " with no tcgen05.fence::after_thread_sync")),
              std::string::npos) << f;
  }
}

struct MmaSetup {
  Kernel k{"test/mma", sm100a(), {128}};
  SmemTile a = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
  SmemTile b = k.SmemSwizzled(bf16, 256, 64, Swizzle::k128B);
  Tmem d = k.TensorMemory(256);
};

TEST(TcgenMma, ShapeOutsideTheTable) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 260, .a = m.a, .b = m.b}); const int line = __LINE__;
  ExpectError(m.k, line, "N from 8 to 256 in steps of 8; not 128x260");
}

TEST(TcgenMma, AccumulatorWiderThanTheAllocation) {
  Kernel k("test/mma_cols", sm100a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 256, 64, Swizzle::k128B);
  Tmem d = k.TensorMemory(128);
  k.TcgenMma(d, {.m = 128, .n = 256, .a = a, .b = b}); const int line = __LINE__;
  ExpectError(k, line, "needs 256 tensor memory columns");
}

// D placed at a constant column: N columns from there must lie in the allocation (a new user's
// trial: the emulator had found it, the build had not).
TEST(TcgenMma, AccumulatorPastTheAllocationFromItsColumn) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 128, .d_column = 128, .a = m.a, .b = m.b});  // columns 128..255: fits
  m.k.TcgenMma(m.d, {.m = 128, .n = 256, .d_column = 64, .a = m.a, .b = m.b}); const int line = __LINE__;
  ExpectError(m.k, line, "an N = 256 accumulator at d_column 64 takes tensor memory columns 64..319; the allocation");
}

TEST(TcgenMma, TileWithoutADescriptor) {
  Kernel k("test/mma_layout", sm100a(), {128});
  SmemTile a = k.Smem(bf16, 128, 64), b = k.SmemSwizzled(bf16, 256, 64, Swizzle::k128B);
  Tmem d = k.TensorMemory(256);
  k.TcgenMma(d, {.m = 128, .n = 256, .a = a, .b = b}); const int line = __LINE__;
  ExpectError(k, line, "no descriptor describes this layout");
}

TEST(TcgenMma, ReadsPastTheTile) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 256, .a = m.a, .a_row0 = 64, .b = m.b}); const int line = __LINE__;
  ExpectError(m.k, line, "reads 128 rows from row 64 but the tile has 128");
}

TEST(TcgenMma, RefusesWgmmasSpacedGroups) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 128, .a = m.a, .b = WgmmaTile::Grouped(m.b, 16)}); const int line = __LINE__;
  ExpectError(m.k, line, "WgmmaTile::group_rows is a wgmma form");
}

TEST(TcgenMma, EmitsTheWorklogDescriptors) {
  MmaSetup m;
  Barrier bar = m.k.SmemBarriers(1)[0];
  m.k.If(m.k.ThreadIdx() == 0, [&] {
    m.k.TcgenMma(m.d, {.m = 128, .n = 256, .a = m.a, .b = m.b, .k0 = 16});
    m.k.TcgenCommit(bar);
  });
  m.k.If(m.k.WarpId() == 0, [&] { m.k.TmemAlloc(m.d); m.k.TmemFree(m.d); });
  absl::StatusOr<KernelDef> def = m.k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("tcgen05.mma.cta_group::1.kind::f16"), std::string::npos);
  EXPECT_NE(ptx->find("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64"), std::string::npos);
  EXPECT_NE(ptx->find(std::to_string(0x08400490)), std::string::npos);  // M128 N256 bf16 -> f32
  // The smem descriptors' constant half: SBO 1024, fixed 0b001, 128B swizzle.
  EXPECT_NE(ptx->find(std::to_string(0x4000404000000000ll)), std::string::npos) << *ptx;
}

// MXFP8: tcgen05.mma kind::mxf8f6f4.block_scale with its scales' tensor memory addresses, the
// descriptor's scale IDs and UE8M0 bit, and the PTX version the form needs (8.8).
TEST(TcgenMma, BlockScalesEmitTheMxForm) {
  Kernel k("test/mma_mx", sm100a(), {128});
  SmemTile a = k.SmemSwizzled(e4m3, 128, 128, Swizzle::k128B), b = k.SmemSwizzled(e4m3, 128, 128, Swizzle::k128B);
  Tmem d = k.TensorMemory(256);
  Barrier bar = k.SmemBarriers(1)[0];
  k.If(k.ThreadIdx() == 0, [&] {
    k.TcgenMma(d, {.m = 128, .n = 128, .a = a, .b = b, .k0 = 64,
                   .scales = {.tmem = &d, .a_column = 128, .b_column = 132, .byte = 2}});
    k.TcgenCommit(bar);
  });
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(d); k.TmemFree(d); });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find(".version 8.8"), std::string::npos);
  // N 128 at 17-22, UE8M0 at 23, M 128 at 27-28, scale IDs 2 at 4-5 and 29-30.
  EXPECT_NE(ptx->find(std::to_string(2u << 4 | 16u << 17 | 1u << 23 | 1u << 27 | 2u << 29)), std::string::npos) << *ptx;
}

TEST(TcgenMma, BlockScalesPastTheAllocation) {
  Kernel k("test/mma_mx_cols", sm100a(), {128});
  SmemTile a = k.SmemSwizzled(e4m3, 128, 128, Swizzle::k128B), b = k.SmemSwizzled(e4m3, 256, 128, Swizzle::k128B);
  Tmem d = k.TensorMemory(256), scales = k.TensorMemory(32);
  k.TcgenMma(d, {.m = 128, .n = 256, .a = a, .b = b, .scales = {.tmem = &scales, .a_column = 0, .b_column = 28}}); const int line = __LINE__;
  ExpectError(k, line, "B's scales take columns 28..35 of an allocation of 32");
}

TEST(TcgenMma, BlockScalesInsideTheAccumulator) {
  Kernel k("test/mma_mx_overlap", sm100a(), {128});
  SmemTile a = k.SmemSwizzled(e4m3, 128, 128, Swizzle::k128B), b = k.SmemSwizzled(e4m3, 128, 128, Swizzle::k128B);
  Tmem d = k.TensorMemory(256);
  k.TcgenMma(d, {.m = 128, .n = 128, .a = a, .b = b, .scales = {.tmem = &d, .a_column = 124, .b_column = 132}}); const int line = __LINE__;
  ExpectError(k, line, "A's scales (columns 124..127) lie inside the accumulator's columns 0..127");
}

TEST(TcgenMma, BlockScalesTakeEightBitTiles) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 128, .a = m.a, .b = m.b, .scales = {.tmem = &m.d, .a_column = 128}}); const int line = __LINE__;
  ExpectError(m.k, line, "with e4m3 or e5m2 tiles");
}

TEST(TcgenMma, OneCtaGroupPerKernel) {
  Kernel k("test/groups", sm100a(), {128});
  k.ClusterDims({2, 1, 1});
  Tmem pair = k.TensorMemory(256, 2);
  Barrier bar = k.SmemBarriers(1)[0];
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(pair); k.TmemFree(pair); });
  k.TcgenCommit(bar, 1); const int line = __LINE__;
  ExpectError(k, line, "uses cta_group::1 but the kernel already uses cta_group::2");
}

TEST(TcgenMma, RowsStartOnAnAtom) {
  MmaSetup m;
  m.k.TcgenMma(m.d, {.m = 128, .n = 120, .a = m.a, .b = m.b, .b_row0 = 4}); const int line = __LINE__;
  ExpectError(m.k, line, "not at a multiple of 8");
}

TEST(Tmem, LoadPastTheAllocation) {
  Kernel k("test/ld_cols", sm100a(), {128});
  Tmem t = k.TensorMemory(64);
  k.TcgenLoad(t, 0, 56, 16); const int line = __LINE__;
  ExpectError(k, line, "tcgen05.ld of columns 56..71 of an allocation of 64");
}

// A warp reaches the TMEM lanes of its quarter: a constant lane base off a multiple of 32, or past
// the 128 lanes, is a build error at the load or store, not a fault the emulator meets at run time.
TEST(Tmem, ALaneBaseOffItsQuarterIsABuildError) {
  for (int lane : {16, 128, -32}) {
    Kernel load("test/ld_lane", sm100a(), {128});
    Tmem t = load.TensorMemory(64);
    load.TcgenLoad(t, lane, 0, 16); const int line = __LINE__;
    ExpectError(load, line, absl::StrCat("tcgen05.ld 32x32b from TMEM lane ", lane,
                                         ": a warp reaches the 32 lanes of its quarter"));
    Kernel store("test/st_lane", sm100a(), {128});
    Tmem u = store.TensorMemory(64);
    store.TcgenStore(u, lane, 0, std::vector<Value>(16, store.F32(0))); const int st = __LINE__;
    ExpectError(store, st, "so the lane base is 0, 32, 64 or 96");
  }
}

TEST(TcgenCommit, MulticastNeedsACluster) {
  Kernel k("test/commit_mc", sm100a(), {128});
  Barrier bar = k.SmemBarriers(1)[0];
  k.TcgenCommit(bar, 1, k.I32(0b11)); const int line = __LINE__;
  ExpectError(k, line, "a multicast commit needs a cluster");
}

TEST(Interleaved, TakesOnlySlabBoxes) {
  Kernel k("test/interleaved_box", sm100a(), {128});
  rt::TensorMapParam spec;  // a 64-wide box: the right bytes, the wrong layout
  spec.tensor = "A";
  spec.dims = {*rt::GridExpr::Parse("K"), *rt::GridExpr::Parse("M")};
  spec.strides = {*rt::GridExpr::Parse("K*2")};
  spec.box = {64, 128};
  TensorMap map = k.TmaParam("tmA", spec);
  SmemTile t = k.SmemInterleaved(bf16, 128, 64);
  Barrier bar = k.SmemBarriers(1)[0];
  k.TmaLoad(map, t, bar, {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "takes one box of {8, 128, 8} (16-byte slabs)");
}

// The no-swizzle canonical layout: element (r, c) at slab c / 8, row r, column c % 8.
TEST(Interleaved, PlacesElementsInSlabs) {
  Kernel k("test/interleaved", sm100a(), {32});
  Value p = k.PtrParam("P", bf16);
  SmemTile t = k.SmemInterleaved(bf16, 16, 32);
  const int cells[][2] = {{0, 0}, {1, 0}, {0, 8}, {5, 9}, {15, 31}};
  for (int i = 0; i < 5; ++i) k.Store(t.At(cells[i][0], cells[i][1]), k.Load(p + i));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const auto& [r, c] : cells) {
    const int off = c / 8 * 16 * 16 + r * 16 + c % 8 * 2;
    const std::string at = off ? "[kiln_smem+" + std::to_string(off) + "]" : "[kiln_smem]";
    EXPECT_NE(ptx->find(at), std::string::npos) << r << "," << c;
  }
}

TEST(Interleaved, SlabOfARowMajorTile) {
  Kernel k("test/slab", sm100a(), {32});
  SmemTile t = k.Smem(bf16, 16, 32);
  t.Slab(1); const int line = __LINE__;
  ExpectError(k, line, "needs a single-stage interleaved tile");
}

}  // namespace
// Two allocations of 512 and 64 columns cannot both be held: the build says so at the second.
TEST(Tmem, AllocationsMustFitTheSm) {
  Kernel k("test/tmem_over", sm100a(), {128});
  Tmem a = k.TensorMemory(512), b = k.TensorMemory(64);
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(a); });
  k.If(k.WarpId() == 0, [&] { k.TmemAlloc(b); }); const int line = __LINE__;
  k.SyncThreads();
  k.If(k.WarpId() == 0, [&] { k.TmemFree(a); k.TmemFree(b); });
  ExpectError(k, line, "the kernel's tensor memory allocations total 576 columns; an SM has 512");
}

}  // namespace kiln
