// The builder: what it emits, and that every mistake is an error naming the DSL line.
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kiln/check.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"
#include "kiln/warp.h"
#include "tests/unit/expect_error.h"

namespace kiln {
namespace {

std::string Here(int line) { return HereIn("tests/unit/dsl_test.cc", line); }
void ExpectError(Kernel& k, int line, const std::string& what) {
  ExpectErrorAt(k, Here(line), what);
}

TEST(Dsl, BuildsAKernelWithLoopsAndRegisters) {
  Kernel k("test/axpy", sm80(), {128});
  Value x = k.PtrParam("X", f32), n = k.I32Param("N");
  k.Grid("N/128");
  Regs acc = k.Registers(Type::Of(f32), 2);
  Value i = k.BlockIdx() * 128 + k.ThreadIdx();
  k.If(i < n, [&] {
    k.For(0, 4, 1, [&](Value) { acc[0] += k.Load(GlobalTensor(x, {n}, {k.I32(1)}).At({i})); });
    k.Store(GlobalTensor(x, {n}, {k.I32(1)}).At({i}), Fma(acc[0], 2.0, acc[1]));
  });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->manifest().params.size(), 2u);
  EXPECT_EQ(def->manifest().grid[0].ToString(), "N/128");
  const std::string mlir = PrintMlir(*def);
  EXPECT_NE(mlir.find("scf.for"), std::string::npos);
  EXPECT_NE(mlir.find("scf.if"), std::string::npos);
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(".entry test_axpy("), std::string::npos);
  // The register array was promoted: no local memory.
  EXPECT_EQ(ptx->find(".local"), std::string::npos) << *ptx;
}

// PrefetchL2 asks L2 for a global line and takes nothing else (a shared pointer is an error at its
// line).
TEST(Dsl, PrefetchL2TakesAGlobalPointer) {
  Kernel k("test/prefetch", sm90a(), {32});
  Value x = k.PtrParam("x", i32);
  PrefetchL2(x + k.ThreadIdx().To(i64));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("prefetch.global.L2 ["), std::string::npos) << *ptx;
  Kernel bad("test/prefetch", sm90a(), {32});
  SmemTile t = bad.Smem(i32, 1, 32);
  PrefetchL2(t.At(0, 0)); const int line = __LINE__;
  ExpectError(bad, line, "PrefetchL2 takes a global pointer");
}

TEST(Dsl, TypeMismatchNamesTheLine) {
  Kernel k("test/mismatch", sm80(), {32});
  Value a = k.I32Param("a");
  Value f = k.F32(1.0);
  Value bad = a + f; const int line = __LINE__;
  (void)bad;
  ExpectError(k, line, "type mismatch in '+': i32 vs f32");
}

// A constant divisor of 0 or a shift past the width is undefined: the compiler dropped the code
// that reached it and the kernel built to a bare ret (a new user's i / 0 ran and wrote nothing).
TEST(Dsl, UndefinedConstantArithmeticIsAnError) {
  {
    Kernel k("test/div0", sm80(), {32});
    Value a = k.I32Param("a");
    Value bad = a / 0; const int line = __LINE__;
    (void)bad;
    ExpectError(k, line, "'/' by the constant 0: undefined");
  }
  {
    Kernel k("test/rem0", sm80(), {32});
    Value bad = k.ThreadIdx() % 0; const int line = __LINE__;
    (void)bad;
    ExpectError(k, line, "'%' by the constant 0");
  }
  {
    Kernel k("test/shl40", sm80(), {32});
    Value bad = k.ThreadIdx() << 40; const int line = __LINE__;
    (void)bad;
    ExpectError(k, line, "'<<' by 40 on i32: a shift takes 0 to 31");
  }
  {
    Kernel k("test/div_wraps", sm80(), {32});  // the constant in i32's 32 bits is 0
    Value bad = k.ThreadIdx() / int64_t{4294967296}; const int line = __LINE__;
    (void)bad;
    ExpectError(k, line, "'/' by the constant 4294967296, 0 in i32");
  }
  Kernel ok("test/shifts", sm80(), {32});  // the widest shift and a division by a constant build
  Value x = ok.I64Param("x");
  ok.Store(ok.PtrParam("y", i64), (x << 63) + x / 3);
  EXPECT_TRUE(ok.Build().ok());
}

// x = x + 1 in a loop body, x from before the loop: the body is built once, so every iteration
// would add to the value before the loop (a new user's cumsum carried nothing this way). A build
// error at the assignment; a fresh value each iteration (m = i * 2), or a parameter read again,
// builds.
TEST(Dsl, AValueCarriedThroughALoopByAssignmentIsAnError) {
  {
    Kernel k("test/carry", sm80(), {32});
    Value x = k.PtrParam("X", f32);
    Value n = k.I32Param("n");
    Value sum = k.F32(0);
    int line = 0;
    k.For(0, n, 1, [&](Value i) {
      sum = sum + k.Load(x + i.To(i64)); line = __LINE__;
      k.Store(x + i.To(i64), sum);
    });
    ExpectError(k, line, "is assigned one computed in the loop's body");
  }
  {
    Kernel k("test/fresh", sm80(), {32});
    Value x = k.PtrParam("X", i32);
    Value n = k.I32Param("n");
    Value m = k.I32(0), limit = n;
    k.For(0, n, 1, [&](Value i) {
      m = i * 2;
      limit = Min(limit, i + 7);  // a parameter's value read again: no carry meant
      k.Store(x + i.To(i64), m + limit);
    });
    EXPECT_TRUE(k.Build().ok());
  }
}

// A Value declared and never assigned from the kernel: an error at the line that uses it, naming
// the line that declared it, however it gets there (directly, through arithmetic, as a condition,
// into a register array); never a crash.
void ExpectEmptyValueError(Kernel& k, int use, int declared) {
  ExpectError(k, use, "a kiln::Value declared empty at " + Here(declared).substr(0, Here(declared).size() - 2) +
                          " is used before the kernel gave it a value");
}

// An operator between two C++ numbers passed as kiln::Operand (a helper taking "a number or a
// Value" called with 0) has no kernel to build in: its use is an error naming the operator's line,
// not a crash.
TEST(Dsl, AnOperatorBetweenTwoNumbersIsAnErrorWhereItIsUsed) {
  Kernel k("test/numbers_only", sm80(), {32});
  Value y = k.PtrParam("y", f32);
  auto offset = [&](const Operand& j) { return j * 512; }; const int op = __LINE__;
  Value o = offset(0);
  k.Store(y + o.To(i64), k.F32(1)); const int use = __LINE__;
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_FALSE(def.ok());
  const std::string at = Here(op);
  EXPECT_NE(def.status().message().find("an operation on C++ numbers only at " +
                                        at.substr(0, at.size() - 2)),
            std::string::npos) << def.status();
  EXPECT_NE(def.status().message().find(Here(use).substr(0, Here(use).size() - 2)), std::string::npos)
      << def.status();
}

TEST(Dsl, EmptyValueIsAnErrorNamingItsDeclaration) {
  for (Scalar elem : {f32, i32}) {  // i32: the type an empty Value would match if it had one
    Kernel k("test/empty_store", sm80(), {32});
    Value x = k.PtrParam("X", elem);
    Value v; const int declared = __LINE__;
    k.Store(x, v); const int use = __LINE__;
    ExpectEmptyValueError(k, use, declared);
  }
  {
    Kernel k("test/empty_arith", sm80(), {32});
    Value x = k.PtrParam("X", i32);
    Value i; const int declared = __LINE__;
    Value j = (i * 4 + 1).To(i32);  // empty all the way: no kernel to tell yet
    EXPECT_FALSE(j.valid());
    Value t = k.ThreadIdx() + j; const int use = __LINE__;
    k.Store(x, t);
    ExpectEmptyValueError(k, use, declared);
  }
  {
    Kernel k("test/empty_cond", sm80(), {32});
    Value limit; const int declared = __LINE__;
    k.If(k.ThreadIdx() < limit, [&] {}); const int use = __LINE__;
    ExpectEmptyValueError(k, use, declared);
  }
  {
    Kernel k("test/empty_reg", sm80(), {32});
    Regs r = k.Registers(Type::Of(f32), 1);
    Value v; const int declared = __LINE__;
    r[0] = v; const int use = __LINE__;
    ExpectEmptyValueError(k, use, declared);
  }
  {
    Kernel k("test/empty_ptr", sm80(), {32});
    Value p; const int declared = __LINE__;
    k.Load(p); const int use = __LINE__;
    ExpectEmptyValueError(k, use, declared);
  }
  {
    Kernel k("test/empty_tensor", sm80(), {32});
    Value base; const int declared = __LINE__;
    Value p = GlobalTensor(base, {k.I32(4)}, {k.I32(1)}).At({0});
    k.Load(p); const int use = __LINE__;
    ExpectEmptyValueError(k, use, declared);
  }
  {  // a kernel that only read an empty Value's type leaves nothing behind for the next one
    Kernel k1("test/read_only", sm80(), {32});
    Value unused;
    (void)unused.type();
    Kernel k2("test/next", sm80(), {32});
    k2.Smem(f32, 1024, 1024); const int line = __LINE__;
    ExpectError(k2, line, "shared memory over budget");
  }
  {
    Kernel other("test/other", sm80(), {32});
    Value foreign = other.ThreadIdx();
    Kernel k("test/foreign", sm80(), {32});
    Value x = k.PtrParam("X", i32);
    k.Store(x, foreign);
    ExpectErrorAt(k, "tests/unit/dsl_test.cc:", "made by another Kernel");  // the line is approximate
  }
  {  // Handles of a kernel already built (its module went to a KernelDef, gone here) or destroyed:
     // an error of the kernel that uses them, not a use of freed memory.
    SmemTile gone_tile;
    Value gone_value;
    {
      Kernel other("test/built", sm80(), {32});
      gone_tile = other.Smem(f32, 8, 8);
      gone_value = other.ThreadIdx();
      ASSERT_TRUE(other.Build().ok());
      EXPECT_EQ(other.Build().status().code(), absl::StatusCode::kFailedPrecondition);  // once
    }
    Kernel k("test/uses_a_gone_tile", sm80(), {32});
    Value x = k.PtrParam("X", f32);
    k.Store(x, k.Load(gone_tile.At(0, 0)));
    ExpectErrorAt(k, "tests/unit/dsl_test.cc:", "SmemTile made at tests/unit/dsl_test.cc:");
    Kernel k2("test/uses_a_gone_value", sm80(), {32});
    Value y = k2.PtrParam("Y", i32);
    k2.Store(y, gone_value + 1);
    ExpectErrorAt(k2, "tests/unit/dsl_test.cc:", "belongs to a kernel already built");
  }
  {  // Barriers of another kernel still being built: their ops (which name no kernel) are this
     // kernel's error, not built into the other one without a word.
    Kernel other("test/other_barriers", sm90a(), {128});
    Barriers bars = other.SmemBarriers(1);
    Kernel k("test/uses_other_barriers", sm90a(), {128});
    k.If(k.ThreadIdx() == 0, [&] { bars[0].Init(128); });
    ExpectErrorAt(k, "tests/unit/dsl_test.cc:", "a kiln::Barrier made by another Kernel");
  }
  {  // Two kernels built side by side: the older one's own If body builds its Barrier ops.
    Kernel a("test/older", sm90a(), {128});
    Barriers bars = a.SmemBarriers(1);
    Kernel b("test/newer", sm90a(), {128});
    a.If(a.ThreadIdx() == 0, [&] { bars[0].Init(1); });
    absl::StatusOr<KernelDef> built_a = a.Build();
    ASSERT_TRUE(built_a.ok()) << built_a.status();
    absl::StatusOr<std::string> ptx = EmitPtx(*built_a);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EXPECT_NE(ptx->find("mbarrier.init"), std::string::npos);
    EXPECT_TRUE(b.Build().ok());
  }
  {  // A parameter's name twice, or no identifier; a kernel name that is no file name.
    Kernel k("test/twice_named", sm80(), {32});
    k.PtrParam("x", f32);
    k.PtrParam("x", f32);
    ExpectErrorAt(k, "tests/unit/dsl_test.cc:", "a second parameter named 'x'");
    Kernel k2("test/odd_param", sm80(), {32});
    k2.I32Param("n m");
    ExpectErrorAt(k2, "tests/unit/dsl_test.cc:", "parameter name 'n m': an identifier");
    Kernel k3("test/bad name", sm80(), {32});
    ExpectErrorAt(k3, "tests/unit/dsl_test.cc:", "kernel name 'test/bad name'");
  }
  {  // A Build that failed ends the build too: a second Build is refused, not run on a module
     // the first one left half-finished.
    Kernel failed("test/failed_once", sm80(), {32});
    failed.Fail("planted");
    EXPECT_EQ(failed.Build().status().code(), absl::StatusCode::kInvalidArgument);
    absl::Status again = failed.Build().status();
    EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(again.message()).find("whether or not that Build succeeded"),
              std::string::npos);
  }
  {  // A default-constructed tile used: named as such.
    SmemTile never_made;
    Kernel k("test/empty_tile", sm80(), {32});
    Value x = k.PtrParam("X", f32);
    k.Store(x, k.Load(never_made.At(0, 0)));
    ExpectErrorAt(k, "tests/unit/dsl_test.cc:", "SmemTile is empty (default-constructed");
  }
}

// Select between two C++ numbers is an i32, or an f32 where either is written as a float.
TEST(Dsl, SelectAndFmaOnNumbers) {
  Kernel k("test/numbers", sm80(), {32});
  Value x = k.PtrParam("X", f32), n = k.PtrParam("N", i32);
  k.Store(x, Fma(2.0, 3.0, k.F32(1.0)));  // 2*3 folded, added to the Value
  Value c = k.ThreadIdx() < 4;
  Value picked = Select(c, 1, 2), scaled = Select(c, 0.5, 2);
  EXPECT_EQ(picked.type(), Type::Of(Scalar::kI32));
  EXPECT_EQ(scaled.type(), Type::Of(Scalar::kF32));
  k.Store(n, picked);
  k.Store(x, scaled);
  ASSERT_TRUE(k.Build().ok());
}

// Conditions combine as docs/DSL.md says: &, | and ^ on i1 Values, ^ true for not.
TEST(Dsl, ConditionsCombineWithAndOrXor) {
  Kernel k("test/conditions", sm80(), {32});
  Value x = k.PtrParam("X", i32);
  Value t = k.ThreadIdx();
  k.If(((t > 1) & (t < 5)) | ((t == 7) ^ true), [&] { k.Store(x + t.To(i64), t); });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
}

TEST(Dsl, SharedMemoryOverBudgetNamesTheLine) {
  Kernel k("test/smem", sm90a(), {128});
  k.Smem(bf16, 256, 256);  // 128 KiB
  k.Smem(bf16, 256, 256); const int line = __LINE__;  // 256 KiB > 227 KiB
  ExpectError(k, line, "shared memory over budget");
}

TEST(Dsl, AConstantIndexOutsideASharedTileNamesTheLine) {
  Kernel k("test/smem_index", sm80(), {32});
  SmemTile a = k.Smem(f32, 4, 32);
  k.Store(a.At(3, 31), k.F32(1));  // the last element: fine
  k.Store(a.At(4, k.ThreadIdx()), k.F32(1)); const int line = __LINE__;
  ExpectError(k, line, "row 4 of a shared tile of 4 x 32: outside it");
}

TEST(Dsl, SmemPlannerAlignsAndTotals) {
  Kernel k("test/plan", sm80(), {128});
  SmemTile a = k.Smem(bf16, 3, 8);        // 48 bytes at 0
  SmemTile b = k.Smem(bf16, 4, 8, 8, 1024);  // 4 x 16 elements at 1024
  EXPECT_EQ(a.offset_bytes(), 0);
  EXPECT_EQ(b.offset_bytes(), 1024);
  EXPECT_EQ(b.row_stride(), 16);
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->manifest().smem_bytes, 1024u + 4 * 16 * 2);
}

TEST(Dsl, LdMatrixNeedsSharedSixteenBitRows) {
  Kernel k("test/ldmatrix", sm80(), {32});
  Value p = k.PtrParam("P", bf16);
  k.LdMatrix(p, 4); const int line = __LINE__;
  ExpectError(k, line, "ldmatrix reads 16-bit elements from shared memory");
}

TEST(Dsl, MmaChecksRegisterCounts) {
  Kernel k("test/mma", sm80(), {32});
  Value z = k.I32(0);
  k.MmaM16N8K16(bf16, {z, z}, {z, z}, {k.F32(0), k.F32(0), k.F32(0), k.F32(0)}); const int line = __LINE__;
  ExpectError(k, line, "takes 4 A, 2 B and 4 C registers");
}

TEST(Dsl, RegisterIndexOutOfRange) {
  Kernel k("test/regs", sm80(), {32});
  Regs r = k.Registers(Type::Of(f32), 4);
  r[4] = 1.0; const int line = __LINE__;
  ExpectError(k, line, "register index 4 out of range 0..3");
}

TEST(Dsl, EmptyRegisterArrayIsAnErrorNotACrash) {
  Kernel k("test/regs0", sm80(), {32});
  Regs r = k.Registers(Type::Of(f32), 0); const int line = __LINE__;
  r[0] = r[0] + 1.0;
  ExpectError(k, line, "register array of 0 x f32");
}

TEST(Dsl, BadBlockAndGrid) {
  Kernel k("test/block", sm80(), {2048}); const int line = __LINE__;
  ExpectError(k, line, "a block has 1..1024 threads");
  Kernel g("test/grid", sm80(), {32});
  g.Grid("rows-1"); const int gline = __LINE__;
  ExpectError(g, gline, "bad grid factor 'rows-1': a factor is a positive integer, or a symbol (the name of an integer parameter of the kernel, e.g. M or rows, or sms: the SM count)");
}

TEST(Dsl, GridRulesNameIntegerParameters) {
  Kernel k("test/grid_params", sm80(), {128});
  k.Grid("rows/4", "sms");
  k.PtrParam("x", f32);
  k.I64Param("rows");
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<rt::Dim3> grid = def->manifest().GridFor(rt::Symbols{{"rows", 1001}}, 132);
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->x, 251u);
  EXPECT_EQ(grid->y, 132u);
  EXPECT_NE(def->manifest().GridFor(rt::Symbols{}, 132).status().message().find("grid dimension rows/4 needs rows"),
            std::string::npos);
  // y at most 65535 blocks (CUDA's limit), x far past it.
  Kernel tall("test/grid_tall", sm80(), {128});
  tall.Grid("rows/4", "rows/4");
  tall.I64Param("rows");
  absl::StatusOr<KernelDef> tall_def = tall.Build();
  ASSERT_TRUE(tall_def.ok()) << tall_def.status();
  EXPECT_TRUE(tall_def->manifest().GridFor(rt::Symbols{{"rows", 4 * 65535}}, 132).ok());
  EXPECT_NE(tall_def->manifest().GridFor(rt::Symbols{{"rows", 4 * 65536}}, 132).status().message().find(
                "grid dimension y = rows/4 = 65536 is past CUDA's 65535 blocks"),
            std::string::npos);
  Kernel bad("test/grid_unknown", sm80(), {128});
  bad.F32Param("scale");
  bad.I32Param("n");
  bad.Grid("cols/8"); const int line = __LINE__;
  ExpectError(bad, line, "grid rule cols/8 names cols, which is not an integer parameter of this kernel (it has n; sms is the SM count)");
}

// The same small kernel lowers for every target, with that target's PTX version, and ptxas
// accepts it where the toolkit is installed.
TEST(Dsl, LowersForEveryTarget) {
  for (const Target* t : {&sm80(), &sm90a(), &sm100a()}) {
    Kernel k("test/ids", *t, {256});
    Value out = k.PtrParam("Out", i32);
    Value v = k.WarpgroupId() * 100 + k.WarpId() + k.LaneId();
    if (t->compute_capability >= 90) {
      k.ClusterDims({2, 1, 1});
      v = v + k.ClusterCtaRank() + k.ClusterIdx();
    }
    k.Store(GlobalTensor(out, {k.I32(256)}, {k.I32(1)}).At({k.ThreadIdx()}), v);
    absl::StatusOr<KernelDef> def = k.Build();
    ASSERT_TRUE(def.ok()) << def.status();
    absl::StatusOr<std::string> ptx = EmitPtx(*def);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EXPECT_NE(ptx->find(".target " + t->chip), std::string::npos);
    const std::string version =
        ".version " + std::to_string(t->ptx_version / 10) + "." + std::to_string(t->ptx_version % 10);
    EXPECT_NE(ptx->find(version), std::string::npos) << *ptx;
    if (t->compute_capability >= 90) {
      EXPECT_NE(ptx->find("%cluster_ctarank"), std::string::npos);
      EXPECT_NE(ptx->find(".explicitcluster"), std::string::npos) << *ptx;
      EXPECT_EQ(def->manifest().cluster.x, 2u);
    }
    if (!HaveToolkit()) continue;
    absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, t->chip);
    EXPECT_TRUE(cubin.ok()) << t->chip << ": " << cubin.status();
  }
}

// Distributed shared memory and the split cluster barrier lower to the PTX the ISA names for them,
// and ptxas takes it.
TEST(Dsl, PeerSharedMemoryAndTheSplitClusterBarrier) {
  Kernel k("test/dsmem", sm90a(), {64});
  k.ClusterDims({2, 1, 1});
  Value out = k.PtrParam("out", f32);
  SmemTile t = k.Smem(f32, 1, 64);
  SmemTile counts = k.Smem(i32, 1, 1);
  Value tid = k.ThreadIdx(), peer = k.ClusterCtaRank() ^ 1;
  k.ClusterSync();
  k.Store(k.PeerPointer(t.At(0, tid), peer), k.F32(1));
  RedAdd(k.PeerPointer(counts.At(0, 0), peer), k.I32(1));
  k.ClusterArrive();
  k.ClusterWait();
  Value four = k.Load(k.PeerPointer(t.At(0, tid / 4 * 4), peer), 4);
  k.Store(out + tid.To(i64), four.Lane(0) + four.Lane(1) + four.Lane(2) + four.Lane(3) + k.Load(t.At(0, tid)));
  k.ClusterArrive(/*relaxed=*/true);
  k.ClusterWait();
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const char* want : {"mapa.shared::cluster", "st.shared::cluster.b32", "red.shared::cluster.add.u32",
                           "ld.shared::cluster.v4.b32", "barrier.cluster.arrive;", "barrier.cluster.arrive.relaxed;",
                           "barrier.cluster.wait;"})
    EXPECT_NE(ptx->find(want), std::string::npos) << want << "\n" << *ptx;
  if (!HaveToolkit()) return;
  absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, "sm_90a");
  EXPECT_TRUE(cubin.ok()) << cubin.status();
}

TEST(Dsl, PeerPointerMisuse) {
  {
    Kernel k("test/peer_no_cluster", sm90a(), {32});
    SmemTile t = k.Smem(f32, 1, 32);
    k.PeerPointer(t.At(0, 0), 1); const int line = __LINE__;
    ExpectError(k, line, "needs a cluster of 2 or more CTAs (ClusterDims first)");
  }
  {
    Kernel k("test/peer_global", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    Value p = k.PtrParam("p", f32);
    k.PeerPointer(p, 1); const int line = __LINE__;
    ExpectError(k, line, "PeerPointer takes a pointer into this CTA's shared memory (e.g. tile.At(r, c)), not global<f32>*");
  }
  {
    Kernel k("test/peer_rank", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    SmemTile t = k.Smem(f32, 1, 32);
    k.PeerPointer(t.At(0, 0), 2); const int line = __LINE__;
    ExpectError(k, line, "cluster CTA rank 2 is outside the cluster of 2 (ranks 0..1)");
  }
  {
    Kernel k("test/peer_sm80", sm80(), {32});
    SmemTile t = k.Smem(f32, 1, 32);
    k.PeerPointer(t.At(0, 0), 1); const int line = __LINE__;
    ExpectError(k, line, "distributed shared memory needs sm_90 or later");
  }
  {
    Kernel k("test/peer_rank_type", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    SmemTile t = k.Smem(f32, 1, 32);
    k.PeerPointer(t.At(0, 0), (k.ClusterCtaRank() ^ 1).To(i64)); const int line = __LINE__;
    ExpectError(k, line, "a cluster CTA rank is an i32 (e.g. k.ClusterCtaRank() ^ 1), not i64");
  }
  {
    Kernel k("test/cluster_twice", sm90a(), {32});
    k.ClusterDims({2, 1, 1}); const int first = __LINE__;
    k.ClusterDims({4, 1, 1}); const int line = __LINE__;
    ExpectError(k, line, absl::StrCat("ClusterDims given twice (first at tests/unit/dsl_test.cc:", first, ")"));
  }
  {
    Kernel k("test/wait_first", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    k.ClusterWait(); const int line = __LINE__;
    k.ClusterArrive();
    ExpectError(k, line, "ClusterWait with no ClusterArrive before it");
  }
  {
    Kernel k("test/cluster_grid", sm90a(), {32});
    k.ClusterDims({2, 1, 1}); const int line = __LINE__;
    k.Grid("3"); const int grid = __LINE__;
    ExpectError(k, line, absl::StrCat("clusters of 2x1x1 cannot tile the grid: Grid's x is the constant 3 (tests/unit/dsl_test.cc:", grid, "), no multiple of 2"));
  }
}

TEST(Dsl, RequireAtMostIsALaunchRule) {
  Kernel k("test/at_most", sm80(), {32});
  k.I32Param("cols");
  k.Grid("1");
  k.RequireAtMost("cols", 1024); const int line = __LINE__;
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  ASSERT_EQ(def->manifest().requirements.size(), 1u);
  EXPECT_EQ(def->manifest().requirements[0].at_most, 1024);
  EXPECT_EQ(def->manifest().CheckRequirements({{"cols", 1025}}).message(),
            absl::StrCat("tests/unit/dsl_test.cc:", line, ": test/at_most requires cols to be at most 1024; it is 1025"));
  Kernel bad("test/at_most_bad", sm80(), {32});
  bad.I32Param("cols");
  bad.RequireAtMost("cols", -1); const int bad_line = __LINE__;
  ExpectError(bad, bad_line, "RequireAtMost(cols, -1): a bound below 0, which no size meets");
}

TEST(Dsl, ClustersNeedHopper) {
  Kernel k("test/cluster80", sm80(), {32});
  k.ClusterDims({2, 1, 1}); const int line = __LINE__;
  ExpectError(k, line, "clusters need sm_90 or later");
}

// ---- Hopper misuse: each is an error at the line that made it.

// A 2D map over A whose dims and strides the launch gives (none of these kernels has M or K).
rt::TensorMapParam Map128B(int box_rows) {
  rt::TensorMapParam t;
  t.tensor = "A";
  t.box = {64, static_cast<uint32_t>(box_rows)};
  t.swizzle = rt::TmaSwizzle::k128B;
  return t;
}

TEST(Hopper, WgmmaOnATileWithoutTheSwizzleItsDescriptorNeeds) {
  Kernel k("test/wgmma_swizzle", sm90a(), {128});
  SmemTile plain = k.Smem(bf16, 64, 64);  // no swizzle: no K-major wgmma descriptor fits
  SmemTile b = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator acc = k.WgmmaAcc(64);
  k.Wgmma(acc, {.a = plain, .b = b}); const int line = __LINE__;
  ExpectError(k, line, "no swizzle");
}

TEST(Hopper, WgmmaOnAnMnMajorTileItsBlocksDoNotCover) {
  Kernel k("test/wgmma_mn", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  SmemTile b = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);  // two blocks of 64 rows of K: N = 128
  WgmmaAccumulator acc = k.WgmmaAcc(256);
  k.Wgmma(acc, {.a = {a, true, 64}, .b = {b, true, 64}}); const int line = __LINE__;
  ExpectError(k, line, "holds 128 columns in blocks of 64 and 64 rows of K; this wgmma reads 256 columns");
}

TEST(Hopper, WgmmaMnMajorBlocksOfWholeAtoms) {
  Kernel k("test/wgmma_mn_rows", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator acc = k.WgmmaAcc(64);
  k.Wgmma(acc, {.a = {a, true, 60}, .b = a}); const int line = __LINE__;
  ExpectError(k, line, "in blocks of k_rows (60, a multiple of 8) rows of K");
}

TEST(Hopper, TmaIntoATileOfAnotherSwizzle) {
  Kernel k("test/tma_swizzle", sm90a(), {128});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile wrong = k.SmemSwizzled(bf16, 128, 32, Swizzle::k64B);  // 8 KB like the box, 64B swizzle
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(a, wrong, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "swizzles 128B but the smem tile");
}

// The copy moves bytes either way: a map of f16 filling a bf16 tile gave only wrong numbers.
TEST(Hopper, TmaOfAnotherSixteenBitTypeThanItsTile) {
  Kernel k("test/tma_dtype", sm90a(), {128});
  rt::TensorMapParam half = Map128B(64);
  half.dtype = rt::TmaDtype::kF16;
  TensorMap a = k.TmaParam("tmA", half); const int map_line = __LINE__;
  SmemTile tile = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(a, tile, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "the tensor map (tests/unit/dsl_test.cc:" + std::to_string(map_line) + ") holds f16 but the smem tile");
}

// A box of more bytes than the tile's stage: the message names the map's declaration as well as
// the tile's, where the fix is one or the other.
TEST(Hopper, TmaBoxLargerThanItsTileNamesTheMapsDeclaration) {
  Kernel k("test/tma_box_large", sm90a(), {128});
  rt::TensorMapParam big = Map128B(128);  // 128 rows of 64: 16 KB
  TensorMap a = k.TmaParam("tmA", big); const int map_line = __LINE__;
  SmemTile tile = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B); const int tile_line = __LINE__;
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(a, tile, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "the tensor map (tests/unit/dsl_test.cc:" + std::to_string(map_line) +
                           ")'s box is 16384 bytes but the smem tile (tests/unit/dsl_test.cc:" +
                           std::to_string(tile_line) + ") holds 8192 per stage");
}

// A map of f32 into a bf16 tile: told as elements of another size, not as a box of other bytes.
TEST(Hopper, TmaOfElementsOfAnotherSizeThanItsTiles) {
  Kernel k("test/tma_dtype_size", sm90a(), {128});
  rt::TensorMapParam wide = Map128B(64);
  wide.dtype = rt::TmaDtype::kF32;
  wide.box = {32, 64};  // 128-byte rows: a valid box of f32
  TensorMap a = k.TmaParam("tmA", wide);
  SmemTile tile = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(a, tile, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, ") holds elements of 4 bytes but the smem tile");
}

// A ring walked by `i % 2` over a tile of one stage (or `i & 3` over two) is a build error at the
// Stage, naming the tile's declaration; the remainder within the stages builds.
TEST(Dsl, AStageIndexPastItsRingByItsModulusIsABuildError) {
  for (int variant : {0, 1, 2}) {
    Kernel k("test/stage_modulus", sm90a(), {128});
    Value out = k.PtrParam("out", f32), n = k.I32Param("n");
    SmemTile t = k.Smem(f32, 4, 32, SmemLayout{.stages = variant == 1 ? 2 : 1}); const int tile_line = __LINE__;
    int line = 0;
    k.For(0, n, 1, [&](Value i) {
      Value stage = variant == 0 ? i % 2 : variant == 1 ? i & 3 : i % 1;
      k.Store(t.Stage(stage).At(0, k.ThreadIdx() % 32), k.F32(1)); line = __LINE__;
    });
    k.Store(out, k.F32(0));
    if (variant == 2) {
      absl::StatusOr<KernelDef> def = k.Build();
      EXPECT_TRUE(def.ok()) << def.status();
      continue;
    }
    ExpectError(k, line, absl::StrCat("this stage index reaches ", variant == 0 ? 1 : 3,
                                      " (a remainder or mask), past the ", variant == 0 ? "1 stage" : "2 stages",
                                      " of the tile declared at tests/unit/dsl_test.cc:", tile_line));
  }
}

// A padded tile is no TMA destination: a box lands dense, and the message says the padding is
// why the bytes differ.
TEST(Hopper, TmaIntoAPaddedTileSaysThePaddingIsWhy) {
  Kernel k("test/tma_padded", sm90a(), {128});
  rt::TensorMapParam plain = Map128B(64);
  plain.swizzle = rt::TmaSwizzle::kNone;
  plain.box = {32, 64};
  TensorMap a = k.TmaParam("tmA", plain);
  SmemTile padded = k.Smem(bf16, 64, 32, /*pad=*/8);
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoad(a, padded, bar[0], {0, 0}); const int line = __LINE__;
  ExpectError(k, line, "its rows are 40 elements apart for 32 columns (padding)");
}

// TMA's coordinates and a wait's parity are i32: an i64 coordinate was an MLIR verifier error
// ("INTERNAL"), and an f32 parity was converted, its bit pattern's low bit waited on.
TEST(Hopper, TmaCoordinatesAndWaitParityAreI32) {
  {
    Kernel k("test/tma_i64", sm90a(), {128});
    TensorMap a = k.TmaParam("tmA", Map128B(64));
    SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
    Barriers bar = k.SmemBarriers(1);
    k.TmaLoad(a, t, bar[0], {k.I32(0).To(i64), 0}); const int line = __LINE__;
    ExpectError(k, line, "a tensor map's coordinates are i32 (TMA takes 32-bit ones); coordinate 0 is i64");
  }
  Kernel k("test/parity_f32", sm90a(), {128});
  Barriers bar = k.SmemBarriers(1);
  bar[0].Wait(k.I32(1).To(f32)); const int line = __LINE__;
  ExpectError(k, line, "an mbarrier wait's parity is an i32 (0 or 1), not f32");
  // a constant other than 0 or 1: only its low bit would be waited on
  Kernel k2("test/parity_2", sm90a(), {128});
  Barriers bar2 = k2.SmemBarriers(1);
  bar2[0].Wait(2); const int line2 = __LINE__;
  ExpectError(k2, line2, "an mbarrier wait's parity is 0 or 1, not 2");
}

// shfl reads the low 5 bits of a lane, distance or mask, and a distance or mask of the width or
// more moves nothing: a constant such as 32 is a mistake, said at its line.
TEST(Warp, ShflConstantsOutsideTheWarpAreErrors) {
  struct Case {
    std::function<Value(Value)> shfl;
    int line;  // the Shfl's: what the message names
    std::string says;
  };
  const Case cases[] = {
      {[](Value v) { return ShflXor(v, 32); }, __LINE__, "Shfl's mask 32 lies outside 0 to 31"},
      {[](Value v) { return ShflDown(v, 16, 16); }, __LINE__,
       "Shfl's distance 16 lies outside 0 to 15 (width 16: every lane would keep its own value)"},
      {[](Value v) { return ShflIdx(v, 40); }, __LINE__,
       "Shfl's lane 40 lies outside 0 to 31 (shfl reads only its low 5 bits)"},
      {[](Value v) { return ShflXor(v, 16, 16); }, __LINE__,
       "Shfl's mask 16 lies outside 0 to 15 (width 16: it would reach lanes of another segment)"},
      {[](Value v) { return ShflUp(v, -1); }, __LINE__, "Shfl's distance -1 lies outside 0 to 31"},
  };
  for (const Case& c : cases) {
    Kernel k("test/shfl_constants", sm80(), {32});
    Value x = k.PtrParam("x", f32);
    k.Store(x + k.ThreadIdx(), c.shfl(k.Load(x + k.ThreadIdx())));
    ExpectError(k, c.line, c.says);
  }
  // within the warp: builds
  Kernel k("test/shfl_in_range", sm80(), {32});
  Value x = k.PtrParam("x", f32);
  k.Store(x + k.ThreadIdx(), ShflXor(ShflDown(k.Load(x + k.ThreadIdx()), 31), 16));
  EXPECT_TRUE(k.Build().ok());
}

// kiln check's transaction-byte check: in each loop body, what expect_tx announces on a
// barrier against the boxes the TMA loads deliver to it. Two boxes land on bar[0], one is
// announced: the phase would complete before the second lands.
TEST(Hopper, ExpectTxShortOfTheBoxesIsAStaticFinding) {
  auto build = [](bool announce_both) {
    Kernel k("test/tx", sm90a(), {128});
    TensorMap a = k.TmaParam("tmA", Map128B(64)), b = k.TmaParam("tmB", Map128B(64));
    SmemTile sa = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), sb = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
    Barriers bar = k.SmemBarriers(1);
    k.For(0, 256, 64, [&](Value k0) {
      k.If(k.ThreadIdx() == 0, [&] {
        k.TmaLoad(a, sa, bar[0], {k0, 0});
        k.TmaLoad(b, sb, bar[0], {k0, 0});
        if (announce_both) bar[0].ArriveExpectTx({&a, &b});
        else bar[0].ArriveExpectTx({&a});
      });
      k.SyncThreads();  // the next iteration's loads wait for this one's readers
    });
    return k.Build();
  };
  absl::StatusOr<KernelDef> good = build(true);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->findings().empty());
  absl::StatusOr<KernelDef> bad = build(false);
  ASSERT_TRUE(bad.ok()) << bad.status();
  ASSERT_EQ(bad->findings().size(), 1u);
  EXPECT_NE(bad->findings()[0].find("tx-count mismatch: mbarrier 0 of the array at shared offset"), std::string::npos)
      << bad->findings()[0];
  EXPECT_NE(bad->findings()[0].find("is announced 8192 bytes by expect_tx at tests/unit/dsl_test.cc:"),
            std::string::npos)
      << bad->findings()[0];
  EXPECT_NE(bad->findings()[0].find("but its TMA loads deliver 16384"), std::string::npos) << bad->findings()[0];
  EXPECT_NE(bad->findings()[0].find("the phase completes before the last bytes land"), std::string::npos);
}

TEST(Hopper, TmaBoxOverTheHardwareLimit) {
  Kernel k("test/tma_box", sm90a(), {128});
  k.TmaParam("tmA", Map128B(2048)); const int line = __LINE__;
  ExpectError(k, line, "box dim 1 = 2048 must be in 1..256");
}

TEST(Hopper, WgmmaShapeItCannotTake) {
  Kernel k("test/wgmma_n", sm90a(), {128});
  k.WgmmaAcc(100); const int line = __LINE__;
  ExpectError(k, line, "N = 8..256 in steps of 8, not 100");
}

TEST(Hopper, WgmmaReadsPastTheTile) {
  Kernel k("test/wgmma_rows", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator acc = k.WgmmaAcc(128);  // B tile has 64 rows, not 128
  k.Wgmma(acc, {.a = a, .b = b}); const int line = __LINE__;
  ExpectError(k, line, "this wgmma reads 128 rows");
}

// K-major groups spaced apart (WgmmaTile::Grouped, [group][span][8 rows]): the rows a wgmma
// reads run to its last group's, and a group is whole 8-row atoms.
TEST(Hopper, WgmmaGroupsReadPastTheTile) {
  Kernel k("test/wgmma_groups", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
  WgmmaAccumulator acc = k.WgmmaAcc(64);  // 8 groups 16 rows apart: rows 8 .. 127 from span 1
  k.Wgmma(acc, {.a = a, .b = WgmmaTile::Grouped(b, 16), .b_row0 = 8});
  EXPECT_TRUE(k.Build().ok());
  Kernel past("test/wgmma_groups_past", sm90a(), {128});
  a = past.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = past.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
  acc = past.WgmmaAcc(64);
  past.Wgmma(acc, {.a = a, .b = WgmmaTile::Grouped(b, 16), .b_row0 = 16}); const int line = __LINE__;
  ExpectError(past, line, "this wgmma reads 64 rows in 8-row groups 16 rows apart from row 16");
}

TEST(Hopper, WgmmaGroupsOfPartAtoms) {
  Kernel k("test/wgmma_groups_atoms", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
  WgmmaAccumulator acc = k.WgmmaAcc(64);
  k.Wgmma(acc, {.a = a, .b = WgmmaTile::Grouped(b, 12)}); const int line = __LINE__;
  ExpectError(k, line, "group_rows = 12 does not hold whole 8-row groups");
}

TEST(Hopper, WgmmaGroupsOfAnMnMajorTile) {
  Kernel k("test/wgmma_groups_mn", sm90a(), {128});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaTile mn(a, true, 64);
  mn.group_rows = 16;
  WgmmaAccumulator acc = k.WgmmaAcc(64);
  k.Wgmma(acc, {.a = a, .b = mn}); const int line = __LINE__;
  ExpectError(k, line, "an MN-major tile has none");
}

TEST(Hopper, RingOverSharedMemoryBudget) {
  Kernel k("test/ring_budget", sm90a(), {384});
  k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B, 5);  // 80 KB
  k.SmemSwizzled(bf16, 256, 64, Swizzle::k128B, 5); const int line = __LINE__;  // +160 KB
  ExpectError(k, line, "shared memory over budget");
}

TEST(Hopper, SetmaxnregOnPartOfAWarpgroup) {
  Kernel k("test/setmaxnreg", sm90a(), {384});
  k.Role({.first_thread = 0, .threads = 96, .max_regs = 24}, [](Value) {}); const int line = __LINE__;
  ExpectError(k, line, "setmaxnreg applies to whole warpgroups");
}

// k11's budgets (producer 24, two consumers 240: the 64512 that 384 threads launch with, 168 a
// thread) pass; a consumer at 256 does not fit, nor a producer at 32 (65536: an H200 hung on it),
// and the build names the role asking most (the emulator shows the same wait at run time).
TEST(Hopper, RoleRegisterBudgetsMustFitTheSm) {
  Kernel ok("test/regs_ok", sm90a(), {384});
  ok.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [](Value) {});
  ok.Role({.first_thread = 128, .threads = 256, .max_regs = 240}, [](Value) {});
  EXPECT_TRUE(ok.Build().ok());
  Kernel k("test/regs_over", sm90a(), {384});
  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [](Value) {});
  k.Role({.first_thread = 128, .threads = 256, .max_regs = 256}, [](Value) {}); const int line = __LINE__;
  ExpectError(k, line, "the roles' register budgets (warpgroup 0: 24, warpgroup 1: 256, warpgroup 2: 256 per thread) "
                       "need 68608 registers; the block is launched with 168 a thread, 64512 in all, and setmaxnreg "
                       "only moves registers between its warpgroups");
  Kernel hung("test/regs_hung", sm90a(), {384});
  hung.Role({.first_thread = 0, .threads = 128, .max_regs = 32}, [](Value) {});
  hung.Role({.first_thread = 128, .threads = 256, .max_regs = 240}, [](Value) {}); const int hung_line = __LINE__;
  ExpectError(hung, hung_line, "need 65536 registers; the block is launched with 168 a thread, 64512 in all");
  // Two blocks an SM: each has half the registers, and its roles' budgets count from that share.
  Kernel two("test/regs_two", sm90a(), {256});
  two.MinBlocksPerSm(2);
  two.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [](Value) {});
  two.Role({.first_thread = 128, .threads = 128, .max_regs = 232}, [](Value) {});
  EXPECT_TRUE(two.Build().ok());
  Kernel over("test/regs_two_over", sm90a(), {256});
  over.MinBlocksPerSm(2);
  over.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [](Value) {});
  over.Role({.first_thread = 128, .threads = 128, .max_regs = 240}, [](Value) {}); const int over_line = __LINE__;
  ExpectError(over, over_line,
              "need 33792 registers; the block is launched with 128 a thread, 32768 in all (MinBlocksPerSm(2))");
}

// The builder follows each accumulator's wgmma group: a read before the wait that completes
// it (an epilogue store, or FragmentA for the next MMA) is an error at the read; after the
// wait, or with only a newer group left in flight (wait_group 1), it builds.
TEST(Hopper, AccumulatorReadBeforeItsWaitNamesBothLines) {
  auto build = [](int wait_before_read, bool fragment) {
    Kernel k("test/acc_read", sm90a(), {128});
    Value out = k.PtrParam("out", f32);
    SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
    WgmmaAccumulator s = k.WgmmaAcc(64), o = k.WgmmaAcc(64);
    k.WgmmaFence();
    k.Wgmma(s, {.a = a, .b = b, .accumulate = false});
    k.WgmmaCommit();
    k.Wgmma(o, {.a = a, .b = b, .k0 = 16, .accumulate = false});
    k.WgmmaCommit();
    if (wait_before_read >= 0) k.WgmmaWait(wait_before_read);
    if (fragment) k.Wgmma(o, {.a_regs = s.FragmentA(0, bf16), .b = b});
    else k.Store(out + k.ThreadIdx(), s[0]);
    k.WgmmaCommit();
    k.WgmmaWait(0);
    return k.Build();
  };
  EXPECT_TRUE(build(0, false).ok());
  EXPECT_TRUE(build(1, false).ok()) << "only o's newer group is in flight";
  EXPECT_TRUE(build(1, true).ok());
  for (bool fragment : {false, true}) {
    absl::StatusOr<KernelDef> bad = build(-1, fragment);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("reads a wgmma accumulator that the wgmma at tests/unit/dsl_test.cc:"),
              std::string::npos)
        << bad.status();
    EXPECT_NE(bad.status().message().find("an accumulator read before the wgmma.wait_group that completes it"),
              std::string::npos);
  }
  // Its commit left out, a wait is there but covers no group of it: said as the commit missing.
  Kernel k("test/acc_uncommitted", sm90a(), {128});
  Value out = k.PtrParam("out", f32);
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator s = k.WgmmaAcc(64);
  k.WgmmaFence();
  k.Wgmma(s, {.a = a, .b = b, .accumulate = false});
  k.WgmmaWait(0);
  k.Store(out + k.ThreadIdx(), s[0]);
  absl::StatusOr<KernelDef> uncommitted = k.Build();
  ASSERT_FALSE(uncommitted.ok());
  EXPECT_NE(uncommitted.status().message().find("that wgmma is in no committed group (a WgmmaCommit missing after "
                                                "it?), so no WgmmaWait completes it"),
            std::string::npos)
      << uncommitted.status();
}

// A register read through the conversion to Value (`Value v = acc[i]`, the docs' idiom) is
// reported at the line that indexed the array, not in kiln's headers.
TEST(Hopper, AccumulatorReadThroughTheConversionNamesItsLine) {
  Kernel k("test/acc_read_value", sm90a(), {128});
  Value out = k.PtrParam("out", f32);
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), b = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator s = k.WgmmaAcc(64);
  k.WgmmaFence();
  k.Wgmma(s, {.a = a, .b = b, .accumulate = false});
  k.WgmmaCommit();
  Value v = s[0]; const int line = __LINE__;
  k.Store(out + k.ThreadIdx(), v);
  k.WgmmaWait(0);
  ExpectError(k, line, "reads a wgmma accumulator that the wgmma at tests/unit/dsl_test.cc:");
}

TEST(Hopper, StageConsumedThatNothingProduces) {
  Kernel k("test/pipeline", sm90a(), {256});
  SmemTile a = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 2);
  Pipeline ring(k, 2, 1);
  k.If(k.ThreadIdx() == 0, [&] { ring.Init(); });
  Pipeline::Cursor at = ring.Start();
  ring.Consume(at, k.ThreadIdx() % 128, [&](Value s) { k.Load(a.Stage(s).At(0, 0)); }); const int line = __LINE__;
  ExpectError(k, line, "consumed but nothing produces it");
}

// A ring filled by threads' cp.async takes no TMA boxes, and its filling threads are counted
// before its barriers are initialised.
TEST(Hopper, RingsFilledByThreadsTakeCopiesNotBoxes) {
  Kernel k("test/pipeline", sm90a(), {256});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 2);
  Pipeline ring(k, 2, 1);
  ring.FillByThreads(128);
  k.If(k.ThreadIdx() == 0, [&] { ring.Init(); });
  Pipeline::Cursor at = ring.Start();
  ring.Produce(at, {{&a, t, {0, 0}}}); const int line = __LINE__;
  ExpectError(k, line, "this pipeline is filled by threads' cp.async (FillByThreads): ProduceByThreads");
  Kernel late("test/pipeline", sm90a(), {256});
  Pipeline ring2(late, 2, 1);
  late.If(late.ThreadIdx() == 0, [&] { ring2.Init(); });
  ring2.FillByThreads(128); const int late_line = __LINE__;
  ExpectError(late, late_line, "FillByThreads changes the full barriers' count: call it before Init");
}

// `kiln check` counts a ring's filling threads like any arrivals: 128 threads' cp.async arrivals
// fill a ring declared for 128, and overfill one declared for 64 (each phase would complete
// early, with half the copies still in flight).
absl::StatusOr<KernelDef> BuildRingFilledByThreads(int declared) {
  Kernel k("test/pipeline", sm90a(), {256});
  Value x = k.PtrParam("x", bf16);
  SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 2);
  Pipeline ring(k, 2, 1);
  ring.FillByThreads(declared);
  k.If(k.ThreadIdx() == 0, [&] { ring.Init(); });
  k.SyncThreads();
  Value tid = k.ThreadIdx();
  k.If(tid < 128, [&] {
    Pipeline::Cursor at = ring.Start();
    ring.ProduceByThreads(at, [&](Value s) {
      k.CpAsync(t.Stage(s), tid % 64, tid / 64 * 8, x + (tid * 8).To(i64));
    });
  });
  k.If(tid >= 128, [&] {
    Pipeline::Cursor at = ring.Start();
    ring.Consume(at, tid % 128, [&](Value s) { k.Load(t.Stage(s).At(0, 0)); });
  });
  return k.Build();
}

TEST(Hopper, RingsFilledByThreadsAreCountedByTheChecks) {
  auto build = BuildRingFilledByThreads;
  absl::StatusOr<KernelDef> right = build(128);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE(right->findings().empty()) << right->findings().front();
  absl::StatusOr<KernelDef> wrong = build(64);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  ASSERT_EQ(wrong->findings().size(), 1u);
  EXPECT_NE(wrong->findings()[0].find("128 threads arrive here on an mbarrier initialised at"), std::string::npos)
      << wrong->findings()[0];
  EXPECT_NE(wrong->findings()[0].find("for 64 arrivals a phase"), std::string::npos) << wrong->findings()[0];
}

// kiln::CheckKernel runs `kiln check`'s checks on any built kernel: the builder's findings, and
// where ptxas is installed what it says of the kernel's registers.
TEST(CheckKernel, ReportsAKernelsFindingsAndItsResources) {
  absl::StatusOr<KernelDef> right = BuildRingFilledByThreads(128);
  ASSERT_TRUE(right.ok()) << right.status();
  absl::StatusOr<CheckReport> clean = CheckKernel(*right);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_TRUE(clean->ok()) << clean->findings.front();
  EXPECT_EQ(clean->Resources().rfind("smem ", 0), 0u) << clean->Resources();
  EXPECT_NE(clean->Resources().find(HaveToolkit() ? "Used " : "registers not checked"), std::string::npos)
      << clean->Resources();

  absl::StatusOr<KernelDef> wrong = BuildRingFilledByThreads(64);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  absl::StatusOr<CheckReport> found = CheckKernel(*wrong);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->findings.size(), 1u);
  EXPECT_EQ(found->findings[0], wrong->findings()[0]);
  EXPECT_NE(found->findings[0].find("tests/unit/dsl_test.cc:"), std::string::npos) << found->findings[0];
}

// Acquiring stages without ever releasing them leaves the producer waiting at the first reuse.
TEST(Hopper, StagesAcquiredButNeverReleased) {
  Kernel k("test/pipeline", sm90a(), {256});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 2);
  Pipeline ring(k, 2, 1);
  k.If(k.ThreadIdx() == 0, [&] { ring.Init(); });
  k.If(k.ThreadIdx() == 128, [&] {
    Pipeline::Cursor at = ring.Start();
    k.For(0, 8, 1, [&](Value i) { ring.Produce(at, {{&a, t, {i * 64, 0}}}); });
  });
  k.If(k.ThreadIdx() < 128, [&] {
    Pipeline::Cursor at = ring.Start();
    k.For(0, 8, 1, [&](Value) { k.Load(t.Stage(ring.Acquire(at)).At(0, 0)); }); const int line = __LINE__;
    ExpectError(k, line, "pipeline stages are acquired here but never released");
  });
}

// A descriptor prefetch of a by-value map reads the parameter space, once; of a map never
// declared it is an error at its line.
TEST(Hopper, ADescriptorPrefetchReadsTheMapsParameter) {
  Kernel k("test/prefetch_map", sm90a(), {128});
  TensorMap a = k.TmaParam("tmA", Map128B(32));
  k.If(k.ThreadIdx() == 0, [&] { k.TmaPrefetchDescriptor(a); });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  // A __grid_constant__ map: prefetched from the parameter space, once.
  const size_t at = ptx->find("prefetch.param.tensormap");
  ASSERT_NE(at, std::string::npos) << *ptx;
  EXPECT_EQ(ptx->find("prefetch", at + 1), std::string::npos) << *ptx;
  Kernel bad("test/prefetch_map", sm90a(), {128});
  TensorMap never;
  bad.TmaPrefetchDescriptor(never); const int line = __LINE__;
  ExpectError(bad, line, "TmaPrefetchDescriptor of a tensor map that was never declared");
}

// An L2 policy rides on the TMA copy as its cache-hint operand (plain and multicast), the policy
// made once by createpolicy; a copy without one carries none. A policy of another kind, or a
// value that is no policy, is an error at its line.
TEST(Hopper, ATmaCopyCarriesItsL2Policy) {
  Kernel k("test/l2_policy", sm90a(), {128});
  k.ClusterDims({2, 1, 1});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 3);
  Barriers bar = k.SmemBarriers(1);
  Value first = k.L2Policy(CacheHint::kL2EvictFirst);
  k.If(k.ThreadIdx() == 0, [&] {
    k.TmaLoad(a, t.Stage(0), bar[0], {0, 0}, first);
    k.TmaLoadMulticast(a, t.Stage(1), bar[0], {64, 0}, 0b11, first);
    k.TmaLoad(a, t.Stage(2), bar[0], {128, 0});
  });
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("createpolicy.fractional.L2::evict_first.b64"), std::string::npos) << *ptx;
  int hinted = 0, copies = 0;
  for (size_t at = ptx->find("cp.async.bulk.tensor"); at != std::string::npos;
       at = ptx->find("cp.async.bulk.tensor", at + 1)) {
    const std::string line = ptx->substr(at, ptx->find('\n', at) - at);
    ++copies;
    if (line.find(".L2::cache_hint") != std::string::npos) ++hinted;
  }
  EXPECT_EQ(copies, 3) << *ptx;
  EXPECT_EQ(hinted, 2) << *ptx;

  Kernel kind("test/l2_policy_kind", sm90a(), {128});
  kind.L2Policy(CacheHint::kStreaming); const int kind_line = __LINE__;
  ExpectError(kind, kind_line, "an L2 policy is kL2EvictFirst or kL2EvictLast");
  Kernel not_policy("test/l2_policy_type", sm90a(), {128});
  TensorMap m = not_policy.TmaParam("tmA", Map128B(64));
  SmemTile u = not_policy.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Barriers b = not_policy.SmemBarriers(1);
  not_policy.TmaLoad(m, u, b[0], {0, 0}, not_policy.I32(1)); const int type_line = __LINE__;
  ExpectError(not_policy, type_line, "a TMA load's L2 policy is an i64 of this kernel (Kernel::L2Policy), not i32");
}

// A stage whose second box comes only under a condition: one arrival expects the bytes of the
// boxes whose conditions hold (a selected count, not a constant), and the box is issued under the
// same condition. A multicast box cannot be conditional (its bytes land in other CTAs).
TEST(Hopper, AConditionalBoxOfAStageIsExpectedOnlyWhereItIsLoaded) {
  // Fills k (a plain or a two-CTA ring) and returns the line of the Produce.
  auto fill = [](Kernel& k, bool multicast) {
    int line = 0;
    Value rows = k.I32Param("rows");
    TensorMap a = k.TmaParam("tmA", Map128B(32));
    SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B, 2);
    if (multicast) k.ClusterDims({2, 1, 1});
    Pipeline ring(k, 2, 1, multicast ? 2 : 1);
    k.If(k.ThreadIdx() == 0, [&] { ring.Init(); });
    k.If(k.ThreadIdx() == 128, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, 8, 1, [&](Value i) {
        TmaCopy second{.map = &a, .tile = t.Rows(32, 32), .coords = {i * 64, 32}, .only_if = rows > 32};
        if (multicast) second.cta_mask = k.I32(3);
        ring.Produce(at, {{.map = &a, .tile = t.Rows(0, 32), .coords = {i * 64, 0}}, second}); line = __LINE__;
      });
    });
    k.If(k.ThreadIdx() < 128, [&] {
      Pipeline::Cursor at = ring.Start();
      k.For(0, 8, 1, [&](Value) { ring.Consume(at, k.ThreadIdx(), [&](Value s) { k.Load(t.Stage(s).At(0, 0)); }); });
    });
    return line;
  };
  Kernel plain("test/only_if", sm90a(), {256});
  fill(plain, false);
  absl::StatusOr<KernelDef> def = plain.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_EQ(ptx->find("mbarrier.expect_tx"), std::string::npos) << "one arrival carries every byte";
  const size_t arrive = ptx->find("mbarrier.arrive.expect_tx");
  ASSERT_NE(arrive, std::string::npos);
  const std::string arrival = ptx->substr(arrive, ptx->find('\n', arrive) - arrive);
  // The count, the last operand, is a register the conditions select (not the constant 8192).
  const std::string count = arrival.substr(arrival.rfind(',') + 1);
  EXPECT_NE(count.find("%r"), std::string::npos) << arrival;
  Kernel multicast("test/only_if", sm90a(), {256});
  const int line = fill(multicast, true);
  ExpectError(multicast, line, "a multicast TMA copy of a stage cannot be conditional (only_if)");
}

// A one-stage ring that thread 0 refills by TMA in a loop; `release` says how the loading thread
// waits for the last fill's readers, if at all.
enum class Release { kEveryRound, kAfterTheFirstRound, kOnlyOtherThreads, kByWgmmaWait, kNone };
absl::StatusOr<KernelDef> BuildRefillingLoop(Release release, int* load_line) {
  Kernel k("test/reuse", sm90a(), {128});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile sa = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Barriers full = k.SmemBarriers(1), empty = k.SmemBarriers(1);
  Value tid = k.ThreadIdx();
  k.If(tid == 0, [&] { full[0].Init(1); empty[0].Init(128); });
  k.SyncThreads();
  WgmmaAccumulator acc = k.WgmmaAcc(64);
  RingPosition at(k, 1);
  k.For(0, 256, 64, [&](Value k0) {
    k.If(tid == 0, [&] {
      if (release == Release::kEveryRound) empty[0].Wait(at.phase() ^ 1);
      if (release == Release::kAfterTheFirstRound)
        k.If(k0 >= 64, [&] { empty[0].Wait(at.phase() ^ 1); });
      k.TmaLoad(a, sa, full[0], {k0, 0}); *load_line = __LINE__;
      full[0].ArriveExpectTx({&a});
    });
    if (release == Release::kOnlyOtherThreads)
      k.If(tid >= 32, [&] { empty[0].Wait(at.phase() ^ 1); });
    full[0].Wait(at.phase());
    if (release == Release::kByWgmmaWait) {
      k.WgmmaFence();
      k.Wgmma(acc, {.a = sa, .b = sa});
      k.WgmmaCommit();
      k.WgmmaWait(0);
    } else {
      k.Load(sa.At(tid % 64, 0));
      empty[0].Arrive();
    }
    at.Advance();
  });
  return k.Build();
}

// kiln check's reuse check: a TMA load in a loop refills its tile every iteration, so the loading
// thread must wait somewhere in the loop (here for the readers' release of the stage).
TEST(Hopper, ALoopThatRefillsATileWithoutWaitingIsAStaticFinding) {
  int load_line = 0;
  absl::StatusOr<KernelDef> good = BuildRefillingLoop(Release::kEveryRound, &load_line);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->findings().empty()) << good->findings().front();
  absl::StatusOr<KernelDef> bad = BuildRefillingLoop(Release::kNone, &load_line);
  ASSERT_TRUE(bad.ok()) << bad.status();
  ASSERT_EQ(bad->findings().size(), 1u);
  EXPECT_EQ(bad->findings()[0].rfind(Here(load_line), 0), 0u) << bad->findings()[0];
  EXPECT_NE(bad->findings()[0].find("it can overwrite a stage that is still being read"), std::string::npos);
}

// The waits the reuse check counts are the loading thread's wherever it runs them in the loop: a
// release's wait skipped in the first round (an If whose condition every thread shares), and a
// loader that reads the stage by wgmma and waits for its own groups. A wait only other threads run
// does not count.
TEST(Hopper, TheReuseCheckCountsTheLoadersOwnWaitsUnderConditions) {
  int load_line = 0;
  for (Release fine : {Release::kAfterTheFirstRound, Release::kByWgmmaWait}) {
    absl::StatusOr<KernelDef> def = BuildRefillingLoop(fine, &load_line);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_TRUE(def->findings().empty()) << def->findings().front();
  }
  absl::StatusOr<KernelDef> other = BuildRefillingLoop(Release::kOnlyOtherThreads, &load_line);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->findings().size(), 1u);
  EXPECT_EQ(other->findings()[0].rfind(Here(load_line), 0), 0u) << other->findings()[0];
}

// kiln check's arrival check: the threads that run each arrival (from the conditions around it,
// evaluated for every thread) against the count the barrier's Init expects a phase.
TEST(Hopper, ArrivalCountsAgainstTheInitAreStaticFindings) {
  int init_line = 0, arrive_line = 0;
  // 0: every thread arrives on a barrier of 128; 1: only the first 64 do; 2: one elected thread
  // of warp 1 on a barrier of 1, then every thread too; 3: a thread picked by a loop variable
  // (not the thread's alone: left to the emulator); 4 and 5: lane 0 of each warp, under a size
  // parameter and a loop counted by a register (the same in every thread, so they pick nobody),
  // on a barrier of 2 (too few: a finding) and of 4; 6: under a register that only some threads
  // set (not the same in every thread: left to the emulator).
  int loop_arrive_line = 0;
  auto build = [&](int variant) {
    Kernel k("test/arrivals", sm90a(), {128});
    Value n = k.I32Param("n");
    Barriers bar = k.SmemBarriers(1);
    Value tid = k.ThreadIdx();
    const int count = variant == 2                                    ? 1
                      : variant == 4 || variant == 6 || variant == 7 ? 2
                      : variant == 5 || variant == 8                 ? 4
                                                                     : 128;
    k.If(tid == 0, [&] { bar[0].Init(count); }); init_line = __LINE__;
    k.SyncThreads();
    if (variant == 0) bar[0].Arrive();
    if (variant == 1) { k.If(tid < 64, [&] { bar[0].Arrive(); }); }
    if (variant == 2) {
      k.If(tid / 32 == 1, [&] { k.If(k.ElectOne(), [&] { bar[0].Arrive(); }); });
      bar[0].Arrive(); arrive_line = __LINE__;
    }
    if (variant == 3) k.For(0, 4, 1, [&](Value i) { k.If(tid == i, [&] { bar[0].Arrive(); }); });
    if (variant == 4 || variant == 5) {
      Regs steps = k.Registers(Type::Of(i32), 1);
      steps[0] = n * 2;
      k.If(n > 0, [&] {
        k.For(0, steps[0], 1, [&](Value) {
          k.If(tid % 32 == 0, [&] { bar[0].Arrive(); }); loop_arrive_line = __LINE__;
          steps[0] = steps[0] - 1;
        });
      });
    }
    if (variant == 7 || variant == 8)  // lane 0 of each warp from the second pass on: & of both
      k.For(0, n, 1, [&](Value i) {
        k.If((i > 0) & (tid % 32 == 0), [&] { bar[0].Arrive(); }); loop_arrive_line = __LINE__;
      });
    if (variant == 6) {
      Regs set = k.Registers(Type::Of(i32), 1);
      k.If(tid < 2, [&] { set[0] = 1; });
      k.If(set[0] == 1, [&] { bar[0].Arrive(); });
    }
    bar[0].Wait(0);
    return k.Build();
  };
  for (int variant : {0, 3, 5, 6, 8}) {
    absl::StatusOr<KernelDef> def = build(variant);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_TRUE(def->findings().empty()) << variant << ": " << def->findings().front();
  }
  absl::StatusOr<KernelDef> few = build(1);
  ASSERT_TRUE(few.ok()) << few.status();
  ASSERT_EQ(few->findings().size(), 1u);
  EXPECT_EQ(few->findings()[0].rfind(Here(init_line), 0), 0u) << few->findings()[0];
  EXPECT_NE(few->findings()[0].find("expects 128 arrivals a phase, but its arrivals come from tests/unit/dsl_test.cc:"),
            std::string::npos) << few->findings()[0];
  EXPECT_NE(few->findings()[0].find("(64 threads), which neither complete a phase each nor add up to 128"),
            std::string::npos) << few->findings()[0];
  absl::StatusOr<KernelDef> many = build(2);
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->findings().size(), 1u);  // the elected thread alone completes a phase
  EXPECT_EQ(many->findings()[0].rfind(Here(arrive_line), 0), 0u) << many->findings()[0];
  EXPECT_NE(many->findings()[0].find("128 threads arrive here on an mbarrier initialised at"), std::string::npos);
  EXPECT_NE(many->findings()[0].find("for 1 arrivals a phase: more arrivals than a phase expects"), std::string::npos);
  // A warpgroup's worth of phases at once is an arrival missing its If, not a design to state.
  EXPECT_NE(many->findings()[0].find("(to have 1 thread arrive, put the arrival in an If on the thread index; "
                                     "or Init the mbarrier for 128)"), std::string::npos) << many->findings()[0];
  EXPECT_EQ(many->findings()[0].find("PhasesPerRound"), std::string::npos) << many->findings()[0];
  // A ring built for fewer consumers than release it, as attention/hopper's three warpgroups once
  // released a ring of two (it hung on the GPU only once the ring wrapped).
  absl::StatusOr<KernelDef> looped = build(4);
  ASSERT_TRUE(looped.ok()) << looped.status();
  ASSERT_EQ(looped->findings().size(), 1u);
  EXPECT_EQ(looped->findings()[0].rfind(Here(loop_arrive_line), 0), 0u) << looped->findings()[0];
  EXPECT_NE(looped->findings()[0].find("4 threads arrive here on an mbarrier initialised at"), std::string::npos)
      << looped->findings()[0];
  // The same threads picked by a condition of two parts, one of them the loop's counter.
  absl::StatusOr<KernelDef> conjunction = build(7);
  ASSERT_TRUE(conjunction.ok()) << conjunction.status();
  ASSERT_EQ(conjunction->findings().size(), 1u);
  EXPECT_EQ(conjunction->findings()[0].rfind(Here(loop_arrive_line), 0), 0u) << conjunction->findings()[0];
  EXPECT_NE(conjunction->findings()[0].find("4 threads arrive here on an mbarrier initialised at"),
            std::string::npos) << conjunction->findings()[0];
}

// A barrier waited on that nothing arrives on (a ring's consumers that never release), or that no
// Init sets up: findings at the Init and at the wait (a new user's trial found neither said; the
// arrival check saw only arrays with arrival sites).
TEST(Hopper, BarriersWaitedOnWithoutArrivalsOrInitAreStaticFindings) {
  int init_line = 0, wait_line = 0;
  auto build = [&](bool init, bool arrive) {
    Kernel k("test/no_arrivals", sm90a(), {128});
    Barriers full = k.SmemBarriers(1), empty = k.SmemBarriers(1);
    Value tid = k.ThreadIdx();
    k.If(tid == 0, [&] {
      full[0].Init(128);
      if (init) { empty[0].Init(128); init_line = __LINE__; }
    });
    k.SyncThreads();
    full[0].Arrive();
    full[0].Wait(0);
    if (arrive) empty[0].Arrive();
    empty[0].Wait(1); wait_line = __LINE__;
    return k.Build();
  };
  absl::StatusOr<KernelDef> fine = build(true, true);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_TRUE(fine->findings().empty()) << fine->findings().front();
  absl::StatusOr<KernelDef> silent = build(true, false);
  ASSERT_TRUE(silent.ok()) << silent.status();
  ASSERT_EQ(silent->findings().size(), 1u);
  EXPECT_EQ(silent->findings()[0].rfind(Here(init_line), 0), 0u) << silent->findings()[0];
  EXPECT_NE(silent->findings()[0].find(": nothing arrives on this mbarrier"), std::string::npos);
  EXPECT_NE(silent->findings()[0].find(absl::StrCat("dsl_test.cc:", wait_line, " waits on it")),
            std::string::npos)
      << silent->findings()[0];
  absl::StatusOr<KernelDef> uninit = build(false, true);
  ASSERT_TRUE(uninit.ok()) << uninit.status();
  ASSERT_EQ(uninit->findings().size(), 1u);
  EXPECT_EQ(uninit->findings()[0].rfind(Here(wait_line), 0), 0u) << uninit->findings()[0];
  EXPECT_NE(uninit->findings()[0].find("no Init sets up"), std::string::npos) << uninit->findings()[0];
}

// Arrivals that are a multiple of the count: each site (or one site's threads) completes a phase,
// so one round completes several and a waiter that counts one a round falls behind. A finding
// unless the Init states the phases a round; sites in exclusive branches or in different loops
// are not one round.
TEST(Hopper, ArrivalsCompletingSeveralPhasesARoundMustBeStated) {
  int init_line = 0, site_line = 0;
  // 0: two sites of 4 threads in one loop body on a barrier of 4; 1: the same, stated; 2: one
  // site of 8 threads; 3: the same, stated; 4: the two sites in the two branches of one if; 5:
  // one site before the loop, one inside it.
  auto build = [&](int variant) {
    Kernel k("test/phases", sm90a(), {128});
    Value n = k.I32Param("n");
    Barriers bar = k.SmemBarriers(1);
    Value tid = k.ThreadIdx();
    k.If(tid == 0, [&] {
      if (variant == 1 || variant == 3) bar[0].Init(4, PhasesPerRound{2});
      else { bar[0].Init(4); init_line = __LINE__; }
    });
    k.SyncThreads();
    if (variant == 5) k.If(tid < 4, [&] { bar[0].Arrive(); });
    k.For(0, n, 1, [&](Value) {
      if (variant <= 1) {
        k.If(tid < 4, [&] { bar[0].Arrive(); });
        k.If(tid / 4 == 8, [&] { bar[0].Arrive(); });
      }
      if (variant == 2 || variant == 3) { k.If(tid < 8, [&] { bar[0].Arrive(); }); site_line = __LINE__; }
      if (variant == 4)
        k.If(n > 4, [&] { k.If(tid < 4, [&] { bar[0].Arrive(); }); },
             [&] { k.If(tid / 4 == 8, [&] { bar[0].Arrive(); }); });
      if (variant == 5) k.If(tid / 4 == 8, [&] { bar[0].Arrive(); });
      bar[0].Wait(0);
    });
    return k.Build();
  };
  for (int variant : {1, 3, 4, 5}) {
    absl::StatusOr<KernelDef> def = build(variant);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_TRUE(def->findings().empty()) << variant << ": " << def->findings().front();
  }
  absl::StatusOr<KernelDef> two_sites = build(0);
  ASSERT_TRUE(two_sites.ok()) << two_sites.status();
  ASSERT_EQ(two_sites->findings().size(), 1u);
  EXPECT_EQ(two_sites->findings()[0].rfind(Here(init_line), 0), 0u) << two_sites->findings()[0];
  EXPECT_NE(two_sites->findings()[0].find("each complete one in the same round: 2 phases a round"),
            std::string::npos) << two_sites->findings()[0];
  EXPECT_NE(two_sites->findings()[0].find("Init(4, PhasesPerRound{2})"), std::string::npos);
  absl::StatusOr<KernelDef> one_site = build(2);
  ASSERT_TRUE(one_site.ok()) << one_site.status();
  ASSERT_EQ(one_site->findings().size(), 1u);
  EXPECT_EQ(one_site->findings()[0].rfind(Here(site_line), 0), 0u) << one_site->findings()[0];
  EXPECT_NE(one_site->findings()[0].find("they complete 2 phases at once"), std::string::npos)
      << one_site->findings()[0];
}

// A cluster's barriers reached from other CTAs (a multicast load, a remote arrival) need a
// ClusterSync between their Inits and that first use: a SyncThreads there is a finding at the use
// (a planted-mistake trial's emulator caught it under some schedules only).
TEST(Hopper, ClusterBarriersNeedAClusterSyncAfterTheirInits) {
  int use_line = 0;
  auto build = [&](bool cluster_sync) {
    Kernel k("test/cluster_init", sm90a(), {128});
    k.ClusterDims({2, 1, 1});
    TensorMap a = k.TmaParam("tmA", Map128B(64));
    SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
    Barriers bar = k.SmemBarriers(1), empty = k.SmemBarriers(1);
    Value tid = k.ThreadIdx();
    k.If(tid == 0, [&] { bar[0].Init(1), empty[0].Init(2); });
    if (cluster_sync) k.ClusterSync();
    else k.SyncThreads();
    k.If(tid == 0, [&] {
      bar[0].ArriveExpectTx({&a});
      k.If(k.ClusterCtaRank() == 0, [&] { k.TmaLoadMulticast(a, t, bar[0], {0, 0}, 0b11); }); use_line = __LINE__;
    });
    bar[0].Wait(0);
    k.If(tid == 0, [&] { empty[0].ArriveCluster(0), empty[0].ArriveCluster(1); });
    empty[0].Wait(0);
    k.ClusterSync();
    return k.Build();
  };
  absl::StatusOr<KernelDef> fine = build(true);
  ASSERT_TRUE(fine.ok()) << fine.status();
  for (const std::string& f : fine->findings()) ADD_FAILURE() << f;
  absl::StatusOr<KernelDef> racy = build(false);
  ASSERT_TRUE(racy.ok()) << racy.status();
  ASSERT_EQ(racy->findings().size(), 2u) << absl::StrJoin(racy->findings(), "\n");
  EXPECT_EQ(racy->findings()[0].rfind(Here(use_line), 0), 0u) << racy->findings()[0];
  EXPECT_NE(racy->findings()[0].find("no ClusterSync lies between their Inits and here"), std::string::npos);
  EXPECT_NE(racy->findings()[1].find(": this reaches other CTAs' mbarriers"), std::string::npos)
      << racy->findings()[1];  // the remote arrivals on empty
}

TEST(Hopper, MulticastNeedsACluster) {
  Kernel k("test/multicast", sm90a(), {128});
  TensorMap a = k.TmaParam("tmA", Map128B(64));
  SmemTile t = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Barriers bar = k.SmemBarriers(1);
  k.TmaLoadMulticast(a, t, bar[0], {0, 0}, 3); const int line = __LINE__;
  ExpectError(k, line, "needs a cluster");
}

TEST(Hopper, TensorMapRulesNameIntegerParameters) {
  Kernel k("test/tmap_rules", sm90a(), {128});
  k.I32Param("rows");
  rt::TensorMapParam t = Map128B(64);
  t.dims = {*rt::GridExpr::Parse("K"), *rt::GridExpr::Parse("rows")};
  t.strides = {*rt::GridExpr::Parse("K*2")};
  k.TmaParam("tmA", t); const int line = __LINE__;
  ExpectError(k, line, "tensor map tmA rule K names K, which is not an integer parameter of this kernel (it has rows;");
}

// Rules written as text: one that does not parse is an error at the line that uses it, not an
// abort at a dereference.
TEST(Hopper, TensorMapRuleThatDoesNotParseIsAnErrorAtItsLine) {
  Kernel k("test/tmap_bad_rule", sm90a(), {128});
  k.I32Param("K");
  rt::TensorMapParam t = Map128B(64);
  t.dims = {"K+1", "K"};
  t.strides = {"K*2"};
  k.TmaParam("tmA", t); const int line = __LINE__;
  ExpectError(k, line, "tensor map tmA: rule 'K+1': bad grid factor 'K+1'");
}

// A program's kernels are named relative to its source root, never by an absolute path.
TEST(Kernel, SourceLinesAreRelativeToTheSourceRoot) {
  SetSourceRoot(std::string(KILN_SOURCE_DIR) + "/tests");
  const std::string here = LocString(Loc::current());
  SetSourceRoot("");
  EXPECT_EQ(here.rfind("unit/dsl_test.cc:", 0), 0u) << here;
  EXPECT_EQ(LocString(Loc::current()).rfind("tests/unit/dsl_test.cc:", 0), 0u);
}

// The ops a library call builds for its caller (RingPosition::Advance's compare and selects, in
// dsl/pipeline.cc, which take no line of their own) carry the caller's line in the line tables:
// a message that names an instruction's line names the user's call, not kiln's source.
TEST(Kernel, OpsALibraryCallBuildsCarryTheCallersLine) {
  Kernel k("test/library_lines", sm90a(), {32});
  Value out = k.PtrParam("out", Scalar::kI32);
  Value steps = k.I32Param("steps");  // a run-time count: the ring is not folded away
  RingPosition at(k, 3);
  int advance_line = 0;
  k.For(0, steps, 1, [&](Value i) {
    k.Store(out + i, i);  // a user line before the call, which the call's ops must not take
    at.Advance(); advance_line = __LINE__;
  });
  k.Store(out + k.ThreadIdx(), at.stage());
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_EQ(ptx->find("dsl/"), std::string::npos) << *ptx;
  // The instructions under the Advance line's .loc entries include the wrap's select.
  const std::string loc = absl::StrCat(".loc\t1 ", advance_line, " ");
  bool select_there = false;
  for (size_t at_loc = ptx->find(loc); at_loc != std::string::npos; at_loc = ptx->find(loc, at_loc + 1)) {
    const size_t next = ptx->find(".loc", at_loc + 1);
    select_there |= ptx->substr(at_loc, next - at_loc).find("selp") != std::string::npos;
  }
  EXPECT_TRUE(select_there) << loc << "in\n" << *ptx;
}

TEST(Kernel, ForWithAStepOfZeroOrLessIsAnError) {
  for (int step : {0, -1}) {
    Kernel k("test/for_step", sm80(), {32});
    k.For(0, 8, step, [&](Value) {}); const int line = __LINE__;
    ExpectError(k, line, absl::StrCat("For's step is ", step, ": it must be positive"));
  }
}

TEST(Kernel, LaunchRulesAttributesAndDynamicSmem) {
  Kernel k("test/launch_rules", sm90a(), {128});
  Value x = k.PtrParam("x", f32);
  Value cols = k.I32Param("cols");
  k.Grid("cols/128");
  k.RequireMultiple("cols", 4); const int require_line = __LINE__;
  k.Attribute("note", "anything a harness wants");
  SmemTile t = k.Smem(f32, 1, 40);  // 160 bytes planned
  Value extra = k.SmemDynamic(f32, "cols*4"); const int extra_line = __LINE__;
  k.Store(extra + k.ThreadIdx(), k.Load(x + k.ThreadIdx()));
  k.Store(t.At(0, 0), k.F32(1));
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  const rt::Manifest& m = def->manifest();
  EXPECT_EQ(m.smem_bytes, 256u);  // the plan, rounded up to where the dynamic part starts
  EXPECT_EQ(m.SmemBytes({{"cols", 1000}}), 256 + 4000);
  EXPECT_EQ(m.smem_extra_source, "tests/unit/dsl_test.cc:" + std::to_string(extra_line));
  ASSERT_EQ(m.requirements.size(), 1u);
  EXPECT_EQ(m.requirements[0].source, "tests/unit/dsl_test.cc:" + std::to_string(require_line));
  EXPECT_EQ(*m.Attribute("note"), "anything a harness wants");
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find("+256], "), std::string::npos) << *ptx;  // the launch-sized part, past the plan
}

TEST(Kernel, LaunchRuleMistakes) {
  {
    Kernel k("test/late_tile", sm90a(), {128});
    k.I32Param("n");
    k.SmemDynamic(f32, "n*4"); const int dyn = __LINE__;
    k.Smem(f32, 8, 8); const int line = __LINE__;
    ExpectError(k, line, absl::StrCat("shared tiles go before the launch-sized shared memory of SmemDynamic (",
                                      "tests/unit/dsl_test.cc:", dyn, ")"));
  }
  {
    Kernel k("test/bad_dynamic", sm90a(), {128});
    k.I32Param("n");
    k.SmemDynamic(f32, "cols*4"); const int line = __LINE__;
    ExpectError(k, line, "dynamic shared memory rule cols*4 names cols, which is not an integer parameter of this kernel (it has n;");
  }
  {
    Kernel k("test/bad_require", sm90a(), {128});
    k.RequireMultiple("M", 128); const int line = __LINE__;
    ExpectError(k, line, "requirement rule M names M, which is not an integer parameter of this kernel (it has none;");
  }
  {
    Kernel k("test/bad_attr", sm90a(), {128});
    k.Attribute("two words", "x"); const int line = __LINE__;
    ExpectError(k, line, "attribute 'two words': a key is one word and a value one line");
  }
}

TEST(Hopper, ExpectTxComesFromTheBoxes) {
  Kernel k("test/expect_tx", sm90a(), {128});
  TensorMap a = k.TmaParam("tmA", Map128B(64)), b = k.TmaParam("tmB", Map128B(128));
  Barriers bar = k.SmemBarriers(1);
  bar[0].ArriveExpectTx({&a, &b});
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  // 64x64 + 128x64 bf16 = 24576 bytes, a constant the user never typed.
  EXPECT_NE(ptx->find("24576"), std::string::npos) << *ptx;
  EXPECT_EQ(def->manifest().params.size(), 2u);
  EXPECT_EQ(def->manifest().params[0].kind, rt::ParamSpec::Kind::kTensorMap);
}

TEST(Target, KnowsItsChips) {
  EXPECT_EQ(Target::Named("sm_90a")->ptx_version, 80);
  EXPECT_EQ(Target::Named("sm_100a")->compute_capability, 100);
  EXPECT_FALSE(Target::Named("sm_70").ok());
  EXPECT_FALSE(ParseStage("bytecode").ok());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A ring of `size` slots advanced n times; its stage and phase stored each step.
std::string RingPtx(int size) {
  Kernel k("test/ring", sm90a(), {32});
  Value out = k.PtrParam("out", i32), n = k.I32Param("n");
  RingPosition at(k, size);
  k.For(0, n, 1, [&](Value i) {
    k.Store(out + i * 2, at.stage());
    k.Store(out + (i * 2 + 1), at.phase());
    at.Advance();
  });
  absl::StatusOr<KernelDef> def = k.Build();
  EXPECT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  return ptx.ok() ? *ptx : "";
}

TEST(Ring, WrapsTheStageAndFlipsThePhase) {
  const std::string three = RingPtx(3);
  EXPECT_NE(three.find("setp.eq.b32"), std::string::npos) << three;  // next == 3
  EXPECT_NE(three.find("selp.b32"), std::string::npos) << three;     // stage back to 0
  // One slot: every step wraps, so only the phase moves (no compare, no select).
  const std::string one = RingPtx(1);
  EXPECT_NE(one.find("xor.b32"), std::string::npos) << one;
  EXPECT_EQ(one.find("selp.b32"), std::string::npos) << one;
}

TEST(Ring, NeedsASlot) {
  Kernel k("test/ring0", sm90a(), {32});
  RingPosition at(k, 0); const int line = __LINE__;
  ExpectError(k, line, "a ring needs at least one slot, not 0");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Control, IfWithAnElseBranch) {
  Kernel k("test/if_else", sm80(), {32});
  Value out = k.PtrParam("out", i32);
  Regs r = k.Registers(Type::Of(i32), 1);
  k.If(k.LaneId() < 16, [&] { r[0] = k.LaneId() * 3; }, [&] { r[0] = k.LaneId() + 100; });
  k.Store(out + k.LaneId(), r[0]);
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  // The else region holds the other arm (its constant 100), and both arms survive into the PTX.
  const std::string mlir = PrintMlir(*def);
  const size_t otherwise = mlir.find("} else {");
  ASSERT_NE(otherwise, std::string::npos) << mlir;
  EXPECT_NE(mlir.find("arith.constant 100", otherwise), std::string::npos) << mlir;
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(", 100;"), std::string::npos) << *ptx;
}

TEST(Control, AValueUsedAfterItsIfNamesBothLines) {
  Kernel k("test/if_escape", sm80(), {32});
  Value out = k.PtrParam("out", i32);
  Value inner;
  k.If(k.LaneId() < 16, [&] { inner = k.LaneId() * 3; }); const int made = __LINE__;
  k.Store(out + k.LaneId(), inner); const int used = __LINE__;
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_FALSE(def.ok());
  EXPECT_EQ(def.status().message().substr(0, Here(used).size()), Here(used)) << def.status();
  EXPECT_NE(def.status().message().find(absl::StrCat("a Value made at tests/unit/dsl_test.cc:", made,
                                                     " inside an If, For or While body")),
            std::string::npos) << def.status();
}

}  // namespace
}  // namespace kiln
