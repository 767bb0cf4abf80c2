// The ops of non-GEMM kernels (kiln/math.h, kiln/warp.h, kiln/memory_ops.h): the PTX each emits,
// that ptxas accepts it for the kernel's target, and the errors each can give.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/hopper.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#include "tests/unit/expect_error.h"

namespace kiln {
namespace {

std::string Here(int line) { return HereIn("tests/unit/ops_test.cc", line); }
void ExpectError(Kernel& k, int line, const std::string& what) { ExpectErrorAt(k, Here(line), what); }

// The kernel's PTX, checked by ptxas for its target where the toolkit is installed.
std::string Ptx(Kernel& k) {
  absl::StatusOr<KernelDef> def = k.Build();
  EXPECT_TRUE(def.ok()) << def.status();
  if (!def.ok()) return "";
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return "";
  if (HaveToolkit()) {
    absl::StatusOr<PtxasResult> r = RunPtxas(*ptx, def->target().chip);
    EXPECT_TRUE(r.ok()) << r.status() << "\n" << *ptx;
  }
  return *ptx;
}

void ExpectHas(const std::string& ptx, const std::string& what) {
  EXPECT_NE(ptx.find(what), std::string::npos) << "no '" << what << "' in\n" << ptx;
}

TEST(Ops, MathEmitsTheSpecialFunctionUnitAndIeeeForms) {
  Kernel k("test/math", sm90a(), {32});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p + k.ThreadIdx());
  Value r = Exp2(x) + Exp(x) + Log2(x) + Log(x) + Rsqrt(x) + Sqrt(x) + SqrtApprox(x) + Rcp(x) +
            RcpApprox(x) + DivApprox(x, 3.0f) + x / x + Abs(x) + TanhApprox(x) + Round(x) + Floor(x) +
            Ceil(x) + Trunc(x);
  k.Store(p + k.ThreadIdx(), r);
  const std::string ptx = Ptx(k);
  for (const char* i : {"ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "rsqrt.approx.f32", "sqrt.rn.f32",
                        "sqrt.approx.ftz.f32", "rcp.rn.f32", "rcp.approx.ftz.f32", "div.approx.ftz.f32",
                        "div.rn.f32", "abs.f32", "tanh.approx.f32", "cvt.rni.f32.f32", "cvt.rmi.f32.f32",
                        "cvt.rpi.f32.f32", "cvt.rzi.f32.f32"})
    ExpectHas(ptx, i);
  EXPECT_EQ(ptx.find("rsqrt.approx.ftz"), std::string::npos) << "Rsqrt reads subnormals as they are";
  // Exp folds log2(e) into one multiply: 0f3FB8AA3B is 1.44269504f.
  ExpectHas(ptx, "0f3FB8AA3B");
}

TEST(Ops, MathRejectsOtherTypes) {
  Kernel k("test/math_types", sm90a(), {32});
  Value n = k.I32Param("n");
  Value bad = Exp2(n); const int line = __LINE__;
  (void)bad;
  ExpectError(k, line, "Exp2 takes f32, not i32");
}

TEST(Ops, PackedConversionsPutLoInTheLowHalf) {
  Kernel k("test/pack", sm90a(), {32});
  Value p = k.PtrParam("p", f32);
  Value out16 = k.PtrParam("o", bf16), outh = k.PtrParam("h", f16), out8 = k.PtrParam("e", i16);
  Value lo = k.Load(p), hi = k.Load(p + 1);
  k.Store(out16, PackBf16x2(lo, hi).Lane(0));
  k.Store(outh, PackF16x2(lo, hi).Lane(1));
  Value e4 = PackFp8x2(lo, hi, Fp8::kE4M3);
  k.Store(out8, e4);
  k.Store(out8 + 1, PackFp8x2(lo, hi, Fp8::kE5M2));
  k.Store(outh + 2, UnpackFp8x2(e4, Fp8::kE4M3).Lane(0));
  k.Store(outh + 3, UnpackFp8x2(e4, Fp8::kE5M2).Lane(1));
  const std::string ptx = Ptx(k);
  for (const char* i : {"cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32", "cvt.rn.satfinite.e4m3x2.f32",
                        "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e5m2x2"})
    ExpectHas(ptx, i);
}

TEST(Ops, BytePermuteIsOnePrmtOfWords) {
  Kernel k("test/prmt", sm90a(), {32});
  Value p = k.PtrParam("p", i32);
  k.Store(p + 2, BytePermute(k.Load(p), k.Load(p + 1), 0x5140));
  ExpectHas(Ptx(k), ", 20800;");  // prmt.b32 d, a, b, 0x5140 (its selector in decimal)
  Kernel wide("test/prmt_wide", sm90a(), {32});
  Value w = wide.PtrParam("p", i32);
  Value bad = BytePermute(wide.Load(w).To(i64), wide.Load(w), 0x3210); const int line = __LINE__;
  (void)bad;
  ExpectError(wide, line, "BytePermute takes i32, not i64");
  Kernel big("test/prmt_big", sm90a(), {32});
  Value b = big.PtrParam("p", i32);
  Value over = BytePermute(big.Load(b), big.Load(b), 0x12345); const int big_line = __LINE__;
  (void)over;
  ExpectError(big, big_line, "BytePermute's selector has 4 nibbles, not 0x12345");
}

TEST(Ops, Fp8NeedsSm89) {
  Kernel k("test/fp8_sm80", sm80(), {32});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p);
  Value e = PackFp8x2(x, x, Fp8::kE4M3); const int line = __LINE__;
  (void)e;
  ExpectError(k, line, "PackFp8x2 needs sm_89 or later (fp8 conversions); this kernel targets sm_80");
}

TEST(Ops, ShufflesInEveryModeWithSegments) {
  Kernel k("test/shfl", sm80(), {32});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p + k.ThreadIdx());
  Value r = ShflXor(x, 16) + ShflUp(x, 1) + ShflDown(x, 2, 16) + ShflIdx(x, k.LaneId(), 8);
  k.Store(p + k.ThreadIdx(), r);
  const std::string ptx = Ptx(k);
  EXPECT_NE(ptx.find(", 16, 31, -1;"), std::string::npos) << ptx;  // a constant mask stays an immediate
  ExpectHas(ptx, "shfl.sync.bfly.b32");
  ExpectHas(ptx, "shfl.sync.up.b32");
  // c = (32 - width) << 8 | clamp: 31 for full warps, 0x101f for 16-lane and 0x181f for 8-lane
  // segments, and 0 for up over the full warp.
  EXPECT_NE(ptx.find(", 31, -1;"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(", 4127, -1;"), std::string::npos) << ptx;  // down, width 16
  EXPECT_NE(ptx.find(", 6175, -1;"), std::string::npos) << ptx;  // idx, width 8
  EXPECT_NE(ptx.find(", 0, -1;"), std::string::npos) << ptx;     // up
}

TEST(Ops, WarpReduceIsAButterflyOfLog2WidthSteps) {
  Kernel k("test/warp_reduce", sm80(), {32});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p + k.ThreadIdx());
  k.Store(p + k.ThreadIdx(), WarpReduce(x, Reduce::kSum) + WarpReduce(x, Reduce::kMax, 8));
  const std::string ptx = Ptx(k);
  int shuffles = 0;
  for (size_t at = ptx.find("shfl.sync.bfly"); at != std::string::npos; at = ptx.find("shfl.sync.bfly", at + 1))
    ++shuffles;
  EXPECT_EQ(shuffles, 5 + 3);
  ExpectHas(ptx, "max.f32");
}

TEST(Ops, ReduxSyncOnIntegers) {
  Kernel k("test/redux", sm80(), {32});
  Value p = k.PtrParam("p", i32);
  Value x = k.Load(p + k.ThreadIdx());
  k.Store(p + k.ThreadIdx(), ReduxSync(x, Reduce::kSum) + ReduxSync(x, Reduce::kMax));
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "redux.sync.add.u32");
  ExpectHas(ptx, "redux.sync.max.u32");
  Kernel bad("test/redux_f32", sm80(), {32});
  Value f = bad.F32(1.0);
  Value r = ReduxSync(f, Reduce::kSum); const int line = __LINE__;
  (void)r;
  ExpectError(bad, line, "ReduxSync reduces i32 values (redux.sync.*.u32), not f32");
}

TEST(Ops, GroupReduceUsesOneNamedBarrierPerGroup) {
  Kernel k("test/group_reduce", sm90a(), {512});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p + k.ThreadIdx());
  k.Store(p + k.ThreadIdx(), GroupReduce(k, x, Reduce::kSum, 128) + GroupReduce(k, x, Reduce::kMax));
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "bar.sync");
  EXPECT_NE(ptx.find(", 128;"), std::string::npos) << ptx;  // barrier over the group's 128 threads
  ExpectHas(ptx, "st.shared.b32");
}

TEST(Ops, GroupReduceChecksItsGroups) {
  Kernel k("test/group_bad", sm90a(), {512});
  Value x = k.F32(1.0);
  Value a = GroupReduce(k, x, Reduce::kSum, 96); const int l1 = __LINE__;
  (void)a;
  ExpectError(k, l1, "GroupReduce over groups of 96 threads: a group is whole warps and the block (512 threads) is whole groups");
  Kernel k2("test/group_many", sm90a(), {1024});
  Value y = k2.F32(1.0);
  Value b = GroupReduce(k2, y, Reduce::kSum, 64); const int l2 = __LINE__;
  (void)b;
  ExpectError(k2, l2, "16 groups of 64 threads need 16 named barriers of their own; the kernel's other group sizes "
                      "hold 0 of a block's 15 (ids 1..15)");
}

// The kernel's own named barrier at an id GroupReduce takes is an error at the NamedBarrier's line,
// whichever comes first (it built, and the groups met the other threads at one id: a race named
// at the GroupReduce on some schedules only); an id past GroupReduce's builds.
TEST(Ops, OwnNamedBarriersMustNotMeetGroupReduces) {
  Kernel k("test/own_barrier", sm90a(), {256});
  Value p = k.PtrParam("p", f32);
  k.If(k.ThreadIdx() >= 128, [&] { k.NamedBarrier(1, 128); }); const int line = __LINE__;
  k.Store(p + k.ThreadIdx(), GroupReduce(k, k.Load(p + k.ThreadIdx()), Reduce::kSum, 128));
  ExpectError(k, line, "named barrier 1 is also GroupReduce's (its groups of 128 threads meet at ids 1..2)");
  Kernel ok("test/own_barrier_ok", sm90a(), {256});
  Value q = ok.PtrParam("p", f32);
  Value r = GroupReduce(ok, ok.Load(q + ok.ThreadIdx()), Reduce::kSum, 128);
  ok.If(ok.ThreadIdx() >= 128, [&] { ok.NamedBarrier(3, 128); });
  ok.Store(q + ok.ThreadIdx(), r);
  EXPECT_TRUE(ok.Build().ok());
}

// Each group size takes ids of its own (a group of 128 and a group of 64 meeting at one id with
// different counts is undefined on the GPU: it faulted there as an illegal instruction); calls
// with a size already seen reuse its ids. 8 + 4 ids fit, the 6 more of groups of 128 do not.
TEST(Ops, GroupReduceGivesEachGroupSizeItsOwnBarriers) {
  Kernel k("test/group_sizes", sm90a(), {768});
  Value x = k.F32(1.0);
  Value a = GroupReduce(k, x, Reduce::kSum, 96) + GroupReduce(k, x, Reduce::kMax, 192) +
            GroupReduce(k, x, Reduce::kMin, 96);
  Value b = GroupReduce(k, a, Reduce::kSum, 128); const int line = __LINE__;
  (void)b;
  ExpectError(k, line, "6 groups of 128 threads need 6 named barriers of their own; the kernel's other group sizes "
                       "hold 12 of a block's 15 (ids 1..15)");
}

TEST(Ops, NamedBarrierArriveCountsThreads) {
  Kernel k("test/bar_arrive", sm90a(), {256});
  k.If(k.WarpgroupId() == 0, [&] { k.NamedBarrierArrive(3, 256); }, [&] { k.NamedBarrier(3, 256); });
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "bar.arrive");
  Kernel bad("test/bar_bad", sm90a(), {256});
  bad.NamedBarrierArrive(16, 256); const int line = __LINE__;
  ExpectError(bad, line, "named barriers are numbered 0..15");
}

TEST(Ops, GlobalAccessesWithCacheHintsAndMasks) {
  Kernel k("test/global", sm90a(), {128});
  Value x = k.PtrParam("x", bf16), y = k.PtrParam("y", bf16), n = k.I32Param("n");
  Value i = k.ThreadIdx() * 8;
  Value in = i < n;
  Value v = LoadGlobal(x + i, 8, {.cache = CacheHint::kReadOnly, .mask = in, .fill = -INFINITY});
  Value w = LoadGlobal(x + i, 8, {.cache = CacheHint::kL2EvictFirst});
  Value s = LoadGlobal(x + i, 4, {.cache = CacheHint::kNoL1});
  Value h = LoadGlobal(x + i, 1, {.cache = CacheHint::kStreaming});
  StoreGlobal(y + i, v, {.cache = CacheHint::kStreaming, .mask = in});
  StoreGlobal(y + i, w, {.cache = CacheHint::kL2EvictLast});
  StoreGlobal(y + i, s, {.cache = CacheHint::kNoL1});
  StoreGlobal(y + i, h);
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "@p ld.global.nc.v4.b32");
  ExpectHas(ptx, "mov.b32 %r");  // the fill before the predicated load
  ExpectHas(ptx, "0xFF80FF80");  // -inf as two bf16
  ExpectHas(ptx, "createpolicy.fractional.L2::evict_first.b64");
  ExpectHas(ptx, "ld.global.L2::cache_hint.v4.b32");
  ExpectHas(ptx, "ld.global.L1::no_allocate.v2.b32");
  ExpectHas(ptx, "ld.global.cs.b16");
  ExpectHas(ptx, "@p st.global.cs.v4.b32");
  ExpectHas(ptx, "createpolicy.fractional.L2::evict_last.b64");
  ExpectHas(ptx, "st.global.L1::no_allocate.v2.b32");
}

TEST(Ops, GlobalAccessErrors) {
  Kernel k("test/global_bad", sm90a(), {32});
  Value x = k.PtrParam("x", bf16);
  Value a = LoadGlobal(x, 3); const int l1 = __LINE__;
  (void)a;
  ExpectError(k, l1, "LoadGlobal moves one aligned vector of 2, 4, 8 or 16 bytes, not 3 x bf16");
  Kernel k2("test/global_bad2", sm90a(), {32});
  Value y = k2.PtrParam("y", f32);
  StoreGlobal(y, k2.Load(y), {.cache = CacheHint::kReadOnly}); const int l2 = __LINE__;
  ExpectError(k2, l2, "StoreGlobal: the read-only path (.nc) is for loads");
  Kernel k3("test/global_bad3", sm90a(), {32});
  Value z = k3.PtrParam("z", f32);
  Value b = LoadGlobal(z, 1, {.mask = k3.I32(1)}); const int l3 = __LINE__;
  (void)b;
  ExpectError(k3, l3, "LoadGlobal's mask is an i1 of this kernel, not i32");
}

TEST(Ops, AtomicsOnGlobalAndSharedMemory) {
  Kernel k("test/atomics", sm90a(), {32});
  Value f = k.PtrParam("f", f32), u = k.PtrParam("u", i32), w = k.PtrParam("w", i64);
  SmemTile t = k.Smem(f32, 1, 32);
  Value old = AtomicAdd(f, 1.0f) + AtomicAdd(t.At(0, k.LaneId()), 2.0f);
  k.Store(f, old);
  Value m = AtomicMax(u, k.LaneId()) + AtomicMin(u, 7) + AtomicCas(u, 0, k.LaneId()) + AtomicAdd(u, 1);
  k.Store(u, m);
  k.Store(w, AtomicAdd(w, k.LaneId().To(i64)) + AtomicCas(w, k.LaneId().To(i64), 5));
  RedAdd(f, 1.0f);
  RedMax(u, 3);
  const std::string ptx = Ptx(k);
  for (const char* i : {"atom.global.add.f32", "atom.shared.add.f32", "atom.global.max.u32", "atom.global.min.u32",
                        "atom.global.cas.b32", "atom.global.add.u32", "atom.global.add.u64", "atom.global.cas.b64",
                        "red.global.add.f32", "red.global.max.u32"})
    ExpectHas(ptx, i);
}

TEST(Ops, AtomicsPtxDoesNotHave) {
  Kernel k("test/atomic_bad", sm90a(), {32});
  Value f = k.PtrParam("f", f32);
  Value r = AtomicMax(f, 1.0f); const int line = __LINE__;
  (void)r;
  ExpectError(k, line, "Atomic max: not offered on f32 (PTX has no such atom)");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Signed integers: every operator and conversion takes its signed form; nothing folds a
// negative intermediate away.
TEST(Signed, OperatorsAndConversionsUseTheSignedForms) {
  Kernel k("test/signed", sm80(), {32});
  Value p = k.PtrParam("p", s32), q = k.PtrParam("q", f32);
  Value x = k.Load(p + k.ThreadIdx()), y = k.Load(p + 32);
  Value r = x / y + (x + 1) % (y - 1) + (x >> 3) + Max(x, y) + Min(x, -y);
  r = Select(x < 0, r, r * 3);  // x < 0 is a real comparison, not false
  k.Store(p + k.ThreadIdx(), r);
  k.Store(q + k.ThreadIdx(), x.To(f32) + k.Load(q).To(s32).To(f32));
  Value wide = x.To(s64) * 5;
  k.Store(p + 64, wide.To(s32));
  k.Store(p + x, k.I32(1).To(s32));  // a negative x indexes backwards
  const std::string ptx = Ptx(k);
  for (const char* s : {"div.s32", "rem.s32", "shr.s32", "max.s32", "min.s32", "setp.lt.s32", "cvt.rn.f32.s32",
                        "cvt.rzi.s32.f32", "mul.wide.s32"})
    ExpectHas(ptx, s);
  EXPECT_EQ(ptx.find("div.u32"), std::string::npos) << ptx;
}

TEST(Signed, MixingSignednessIsAnError) {
  Kernel k("test/mixed", sm80(), {32});
  Value n = k.I32Param("n");
  Value d = n.To(s32);
  Value bad = d + n; const int line = __LINE__;
  (void)bad;
  ExpectError(k, line, "type mismatch in '+': s32 vs i32 (convert with .To())");
}

TEST(Signed, AStoreASignednessApartNamesBothWaysOut) {
  Kernel k("test/mixed_store", sm80(), {32});
  Value p = k.PtrParam("p", i32);
  k.Store(p, k.ThreadIdx().To(s32)); const int line = __LINE__;
  ExpectError(k, line, "storing s32 through global<i32>* (a signedness apart: convert the value with To(i32), which keeps the bits, or declare the pointer of s32, e.g. PtrParam(name, s32))");
}

TEST(IfElse, YieldsValuesFromEitherBranch) {
  Kernel k("test/if_else", sm80(), {32});
  Value p = k.PtrParam("p", f32);
  Value x = k.Load(p + k.ThreadIdx());
  Value y = k.IfElse(x > 0.0f, [&] { return Sqrt(x); }, [&] { return -x; });
  std::vector<Value> two = k.IfElse(
      x > 1.0f, [&]() -> std::vector<Value> { return {x, k.I32(1)}; },
      [&]() -> std::vector<Value> { return {y, k.I32(2)}; });
  k.Store(p + k.ThreadIdx(), y + two[0] + two[1].To(f32));
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "sqrt.rn.f32");
  ExpectHas(ptx, "neg.f32");
}

TEST(IfElse, BranchesMustAgree) {
  {
    Kernel k("test/if_else_types", sm80(), {32});
    Value n = k.I32Param("n");
    k.IfElse(n > 0, [&] { return n; }, [&] { return n.To(f32); }); const int line = __LINE__;
    ExpectError(k, line, "IfElse branches yield different types for value 0: i32 vs f32 (convert with .To())");
  }
  {
    Kernel k("test/if_else_count", sm80(), {32});
    Value n = k.I32Param("n");
    k.IfElse(n > 0, [&]() -> std::vector<Value> { return {n, n}; },
             [&]() -> std::vector<Value> { return {n}; }); const int line = __LINE__ - 1;
    ExpectError(k, line, "IfElse branches yield 2 and 1 values");
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// P*V as attention computes it: S = Q*K^T in an accumulator, rounded to bf16 in registers and
// fed back as wgmma's A operand, without shared memory.
TEST(WgmmaRegisterA, AccumulatorColumnsFeedTheNextMma) {
  Kernel k("test/wgmma_rs", sm90a(), {128});
  SmemTile q = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B), kt = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B),
           v = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  Value out = k.PtrParam("out", f32);
  WgmmaAccumulator s = k.WgmmaAcc(64), o = k.WgmmaAcc(64);
  k.WgmmaFence();
  for (int k0 = 0; k0 < 64; k0 += 16) k.Wgmma(s, {.a = q, .b = kt, .k0 = k0, .accumulate = k0 > 0});
  k.WgmmaCommit();
  k.WgmmaWait(0);
  for (int j = 0; j < 4; ++j) k.Wgmma(o, {.a_regs = s.FragmentA(j, bf16), .b = v, .k0 = 16 * j, .accumulate = j > 0});
  k.WgmmaCommit();
  k.WgmmaWait(0);
  k.Store(out + k.ThreadIdx(), o[0] + o[31]);
  const std::string ptx = Ptx(k);
  ExpectHas(ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16");
  ExpectHas(ptx, "cvt.rn.bf16x2.f32");
  // The register form: four b32 registers in braces where the smem form has a descriptor.
  const size_t at = ptx.rfind("wgmma.mma_async");
  const std::string line = ptx.substr(at, ptx.find('\n', at) - at);
  EXPECT_EQ(std::count(line.begin(), line.end(), '{'), 2) << line;
  EXPECT_NE(line.find("}, {%r"), std::string::npos) << line;
}

TEST(WgmmaRegisterA, Mistakes) {
  Kernel k("test/wgmma_rs_bad", sm90a(), {128});
  SmemTile v = k.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator s = k.WgmmaAcc(32), o = k.WgmmaAcc(64);
  s.FragmentA(2, bf16); const int line = __LINE__;
  ExpectError(k, line, "A fragment 2 is columns 32..47 of a 32-column accumulator");
  Kernel k2("test/wgmma_rs_bad2", sm90a(), {128});
  SmemTile v2 = k2.SmemSwizzled(bf16, 64, 64, Swizzle::k128B);
  WgmmaAccumulator o2 = k2.WgmmaAcc(64);
  k2.Wgmma(o2, {.a_regs = {k2.I32(0), k2.I32(0)}, .b = v2}); const int line2 = __LINE__;
  ExpectErrorAt(k2, Here(line2), "wgmma A from registers takes 4 b32 registers, not 2");
  (void)v; (void)o;
}

// The GPU debug mode: each mbarrier wait gets a deadline on %globaltimer, a record and a trap,
// and the manifest lists the waits' lines so that the runtime can name the one that fired.
TEST(Watchdog, BoundsEveryWaitAndListsItsLine) {
  Kernel k("test/watchdog", sm90a(), {128});
  k.Watchdog(150);
  Barriers bar = k.SmemBarriers(2);
  k.If(k.ThreadIdx() == 0, [&] { bar[0].Init(1); bar[1].Init(1); });
  k.SyncThreads();
  k.If(k.ThreadIdx() == 0, [&] { bar[0].Arrive(); bar[1].Arrive(); });
  bar[0].Wait(0);
  bar[1].Wait(0); const int line = __LINE__;
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->manifest().watchdog_ms, 150);
  ASSERT_EQ(def->manifest().watch_sites.size(), 2u);
  EXPECT_EQ(def->manifest().watch_sites[1], absl::StrCat("tests/unit/ops_test.cc:", line));
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const char* want : {"%globaltimer", "setp.lt.u64 more, t1, 150000000;", "atom.global.cas.b32",
                           "st.volatile.global.u32 [rec+4], 1;", "trap;", ".global .align 8 .u64 kiln_watchdog_record"})
    EXPECT_NE(ptx->find(want), std::string::npos) << want;
  if (HaveToolkit()) {
    absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, "sm_90a");
    EXPECT_TRUE(cubin.ok()) << cubin.status();
  }
  // Without it, the same waits are plain loops and the manifest has no sites.
  Kernel plain("test/no_watchdog", sm90a(), {128});
  Barriers b2 = plain.SmemBarriers(1);
  b2[0].Wait(0);
  absl::StatusOr<KernelDef> d2 = plain.Build();
  ASSERT_TRUE(d2.ok()) << d2.status();
  EXPECT_EQ(d2->manifest().watchdog_ms, 0);
  EXPECT_TRUE(d2->manifest().watch_sites.empty());
}

TEST(Watchdog, ItsMistakesNameTheLine) {
  Kernel late("test/watchdog_late", sm90a(), {128});
  Barriers bar = late.SmemBarriers(1);
  bar[0].Wait(0);
  late.Watchdog(100); const int l1 = __LINE__;
  ExpectError(late, l1, "Watchdog comes after 1 mbarrier wait(s) it would not cover: call it before the first wait");
  Kernel ampere("test/watchdog_sm80", sm80(), {128});
  ampere.Watchdog(100); const int l2 = __LINE__;
  ExpectError(ampere, l2, "the watchdog bounds mbarrier waits, which need sm_90 or later; this kernel targets sm_80");
  Kernel indexed("test/watchdog_after_at", sm90a(), {128});
  SmemTile t = indexed.Smem(f32, 128, 4);
  indexed.Store(t.At(indexed.ThreadIdx(), 0), indexed.F32(0));
  indexed.Watchdog(100); const int l4 = __LINE__;
  ExpectError(indexed, l4, "Watchdog comes after 1 shared tile index(es) computed at run time that it would not check");
  Kernel zero("test/watchdog_zero", sm90a(), {128});
  zero.Watchdog(0); const int l3 = __LINE__;
  ExpectError(zero, l3, "a watchdog of 0 ms: give 1..3600000");
}

}  // namespace
}  // namespace kiln
