// The PTX emulator against the PTX ISA's definitions, on hand-written PTX (no compiler needed):
// each test states what the ISA says an instruction does and checks the emulator does that.
#include "kiln/emulator.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace kiln::emu {
namespace {

// A one-entry bundle around `body`, with parameters (ptr out, i32 n).
rt::Bundle Kernel(const std::string& body, rt::Dim3 block = {32, 1, 1}, const std::string& regs = "") {
  rt::Bundle b;
  b.manifest.name = "test/emu";
  b.manifest.entry = "emu";
  b.manifest.target = "sm_80";
  b.manifest.block = block;
  b.manifest.source = "emulator_test.cc:1";
  b.manifest.smem_bytes = 1024;
  b.manifest.params = {{"out", rt::ParamSpec::Kind::kPointer}, {"n", rt::ParamSpec::Kind::kI32}};
  b.ptx = absl::StrCat(R"(.version 7.8
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 smem[];
.visible .entry emu(
	.param .u64 .ptr .global .align 1 emu_param_0,
	.param .u32 emu_param_1
)
{
	.reg .pred %p<8>;
	.reg .b16 %rs<8>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<16>;
)", regs, R"(
	ld.param.b64 %rd1, [emu_param_0];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
)", body, R"(
	ret;
}
)");
  return b;
}

// Emulates `b` on one block and returns out[0..count); out has room for a word per thread.
std::vector<uint32_t> Emulate(const rt::Bundle& b, int count, absl::Status* status = nullptr, uint64_t seed = 1) {
  Device d;
  uint64_t out = *d.Allocate(std::max<int>(count, b.manifest.block.count()) * 4);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(count)}, {.seed = seed});
  if (status) *status = s.status();
  else EXPECT_TRUE(s.ok()) << s.status();
  std::vector<uint32_t> v(count);
  EXPECT_TRUE(d.CopyOut(v.data(), out, count * 4).ok());
  return v;
}

float AsF(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// The same bundle for sm_90a (Hopper instructions).
rt::Bundle Sm90(rt::Bundle b) {
  b.ptx = absl::StrReplaceAll(b.ptx, {{".target sm_80", ".target sm_90a"}});
  b.manifest.target = "sm_90a";
  return b;
}

// A harness's two allocations in one call each: host bytes copied in, and NaN poison; and the
// emulator's memory cap is a message, not the host's memory exhausted.
TEST(Emulator, DeviceUploadsPoisonsAndRefusesWhatItCannotHold) {
  Device d;
  const float in[3] = {1.f, 2.f, 3.f};
  absl::StatusOr<uint64_t> a = d.Upload(in, sizeof(in)), b = d.AllocatePoisoned(8);
  ASSERT_TRUE(a.ok() && b.ok());
  float out[3] = {}, poison[2] = {};
  ASSERT_TRUE(d.CopyOut(out, *a, sizeof(out)).ok());
  ASSERT_TRUE(d.CopyOut(poison, *b, sizeof(poison)).ok());
  EXPECT_EQ(out[2], 3.f);
  EXPECT_TRUE(std::isnan(poison[0]) && std::isnan(poison[1]));
  absl::StatusOr<uint64_t> huge = d.Allocate(size_t{5} << 30);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("the emulator holds up to 8 GiB"), std::string::npos);
  // An access past an allocation says how far; about 4 Gi past it, that an i32 wrapped.
  EXPECT_NE(d.Near(*b + 12).find("4 bytes past the end of the allocation"), std::string::npos);
  EXPECT_EQ(d.Near(*b + 12).find("i32"), std::string::npos);
  EXPECT_NE(d.Near(*b + 8 + (uint64_t{1} << 32) - 4).find("an i32 index or offset that went below 0"),
            std::string::npos);
  // (The array nearest below so far an address need not be the one it came from.)
  EXPECT_NE(d.Near(*b + 8 + (uint64_t{1} << 32) - 4).find("the array nearest below it, not necessarily"),
            std::string::npos);
  // An access far past a small allocation lies in no other one (a read of its neighbour would
  // go unseen), and is reported against it, by the name a launch gave it.
  absl::StatusOr<uint64_t> small = d.Allocate(1), next = d.Allocate(size_t{1} << 20);
  ASSERT_TRUE(small.ok() && next.ok());
  EXPECT_EQ(d.Find(*small + (size_t{1} << 16), 4), nullptr);
  d.NameArguments({{*small, "src"}, {*small, "alias"}, {*next, "dst"}});  // (the first name stays)
  EXPECT_NE(d.Near(*small + (size_t{1} << 16)).find("65535 bytes past the end of 'src'"),
            std::string::npos)
      << d.Near(*small + (size_t{1} << 16));
  // Just below an allocation: before it, not far past the one below.
  EXPECT_NE(d.Near(*next - 8).find("8 bytes before the start of 'dst'"), std::string::npos)
      << d.Near(*next - 8);
  d.NameArguments({{*next, "later"}});  // a later launch's names replace the earlier ones
  EXPECT_NE(d.Near(*small + 8).find("past the end of the allocation"), std::string::npos);
  // An empty array uploads, poisons and copies back (it was "not in one allocation").
  absl::StatusOr<uint64_t> empty = d.Upload(in, 0), empty_poisoned = d.AllocatePoisoned(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  ASSERT_TRUE(empty_poisoned.ok()) << empty_poisoned.status();
  EXPECT_TRUE(d.CopyOut(out, *empty, 0).ok());
}

TEST(Emulator, PackedConversionPutsTheFirstSourceInTheUpperHalf) {
  // PTX ISA, cvt: "the value converted from input a is stored in the upper half of d".
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	cvt.rn.bf16x2.f32 %r2, 0f3F800000, 0f40000000;
	st.global.b32 [%rd3], %r2;
)"), 1);
  EXPECT_EQ(v[0], 0x3F804000u);  // bf16(1.0) = 0x3F80 high, bf16(2.0) = 0x4000 low
}

TEST(Emulator, UnpackingMovTakesTheLowHalfFirst) {
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, 0x40003F80;
	mov.b32 {%rs1, %rs2}, %r2;
	cvt.f32.bf16 %r3, %rs1;
	st.global.b32 [%rd3], %r3;
)"), 1);
  EXPECT_EQ(AsF(v[0]), 1.0f);
}

TEST(Emulator, MixedPrecisionFmaWidensItsHalfOperands) {
  // PTX ISA 8.6, fma.rn.f32.bf16 d, a, b, c (what LLVM makes for sm_100a of fma(f32(a), f32(b), c)
  // on bf16 a and b): bf16(1.5) * bf16(-2.0) + 0.25 = -2.75, one rounding.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b16 %rs1, 0x3FC0;
	mov.b16 %rs2, 0xC000;
	fma.rn.f32.bf16 %r2, %rs1, %rs2, 0f3E800000;
	mov.b16 %rs3, 0x3E00;
	fma.rn.f32.f16 %r3, %rs3, %rs3, 0f00000000;
	st.global.v2.b32 [%rd1], {%r2, %r3};
)"), 2);
  EXPECT_EQ(AsF(v[0]), -2.75f);
  EXPECT_EQ(AsF(v[1]), 2.25f);  // f16(1.5) squared
}

TEST(Emulator, HalfAbsAndNegTouchTheSignBitsAlone) {
  // PTX ISA, abs and neg on .bf16, .f16, .bf16x2 and .f16x2 (LLVM folds |f32(x)| of a bf16 x
  // into abs.bf16): each element's sign cleared or flipped, NaN staying NaN.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b16 %rs1, 0xBFC0;
	abs.bf16 %rs2, %rs1;
	neg.f16 %rs3, %rs2;
	mov.b32 %r2, 0xFFC04000;
	abs.bf16x2 %r3, %r2;
	neg.f16x2 %r4, %r3;
	mov.b32 %r5, {%rs2, %rs3};
	st.global.v4.b32 [%rd1], {%r5, %r3, %r4, 0};
)"), 4);
  EXPECT_EQ(v[0], 0xBFC03FC0u);  // abs(-1.5) = 1.5 low, its negation high
  EXPECT_EQ(v[1], 0x7FC04000u);  // NaN's sign cleared, 2.0 kept
  EXPECT_EQ(v[2], 0xFFC0C000u);
}

TEST(Emulator, HalfMinAndMaxWorkPerElement) {
  // PTX ISA, min/max on .bf16x2 and .f16x2: each element apart; one NaN gives the other element,
  // .NaN the canonical NaN; max(-0, +0) is +0.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, 0x3FC0C000;
	mov.b32 %r3, 0x40003F80;
	max.bf16x2 %r4, %r2, %r3;
	min.bf16x2 %r5, %r2, %r3;
	mov.b32 %r6, 0x7FC08000;
	mov.b32 %r7, 0x3C000000;
	max.f16x2 %r8, %r6, %r7;
	max.NaN.f16x2 %r9, %r6, %r7;
	st.global.v4.b32 [%rd1], {%r4, %r5, %r8, %r9};
	max.f16x2 %r10, %r7, %r6;
	min.f16x2 %r11, %r6, %r7;
	min.f16x2 %r12, %r7, %r6;
	st.global.v2.b32 [%rd1+16], {%r10, %r11};
	st.global.b32 [%rd1+24], %r12;
)"), 7);
  EXPECT_EQ(v[0], 0x40003F80u);  // max(1.5, 2) high, max(-2, 1) low
  EXPECT_EQ(v[1], 0x3FC0C000u);
  EXPECT_EQ(v[2], 0x3C000000u);  // max(NaN, 1) = 1 high; max(-0, +0) = +0 low
  EXPECT_EQ(v[3], 0x7FFF0000u);
  EXPECT_EQ(v[4], 0x3C000000u);  // max(+0, -0): +0 either way round
  EXPECT_EQ(v[5], 0x3C008000u);  // min(-0, +0) = -0; min(NaN, 1) = 1
  EXPECT_EQ(v[6], 0x3C008000u);  // min(+0, -0) = -0 too
  absl::Status status;
  Emulate(Kernel(R"(
	max.ftz.f16x2 %r2, %r1, %r1;
)"), 1, &status);
  EXPECT_NE(status.message().find("not emulated yet"), std::string::npos) << status;
}

TEST(Emulator, PrmtPicksBytesAndReplicatesSigns) {
  // PTX ISA, prmt.b32 d, a, b, c: bytes 0-3 of a and 4-7 of b; nibble i of c picks byte i of d,
  // its top bit replicating the picked byte's sign. A 4 x 4 byte transpose in two steps of two.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, 0x03020100;
	mov.b32 %r3, 0x13121110;
	prmt.b32 %r4, %r2, %r3, 0x5140;
	prmt.b32 %r5, %r2, %r3, 0x7362;
	mov.b32 %r6, 0x00800000;
	prmt.b32 %r7, %r6, %r6, 0x0A82;
	mov.b32 %r10, 0x23222120;
	mov.b32 %r11, 0x33323130;
	prmt.b32 %r12, %r10, %r11, 0x5140;
	prmt.b32 %r8, %r4, %r12, 0x5410;
	prmt.b32 %r9, %r4, %r12, 0x7632;
	st.global.v4.b32 [%rd1], {%r4, %r5, %r7, %r8};
	st.global.b32 [%rd1+16], %r9;
)"), 5);
  EXPECT_EQ(v[0], 0x11011000u);  // rows a, b interleaved: [a0 b0 a1 b1]
  EXPECT_EQ(v[1], 0x13031202u);  // [a2 b2 a3 b3]
  EXPECT_EQ(v[2], 0x00FF0080u);  // byte 2 (0x80), byte 0's sign, byte 2's sign, byte 0
  EXPECT_EQ(v[3], 0x30201000u);  // with rows c, d: column 0 of the 4 x 4, [a0 b0 c0 d0]
  EXPECT_EQ(v[4], 0x31211101u);  // column 1, [a1 b1 c1 d1]
  absl::Status status;
  Emulate(Kernel(R"(
	prmt.b32.f4e %r2, %r1, %r1, 1;
)"), 1, &status);
  EXPECT_NE(status.message().find("prmt's modes other than the default are not emulated yet"), std::string::npos)
      << status;
}

TEST(Emulator, PopcClzAndBrevCountAndReverseBits) {
  // PTX ISA: popc and clz take .b32 or .b64 and write a .u32 count (clz of 0: the width); brev
  // reverses the bits. LLVM writes a count of trailing zeros (a division by a power of two
  // known only at run time) as popc of (x - 1) & ~x.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, 0xF0F00001;
	popc.b32 %r3, %r2;
	clz.b32 %r4, %r2;
	mov.b32 %r5, 0;
	clz.b32 %r6, %r5;
	brev.b32 %r7, %r2;
	mov.b64 %rd2, 0x00000000000F0000;
	popc.b64 %r8, %rd2;
	clz.b64 %r9, %rd2;
	st.global.v4.b32 [%rd1], {%r3, %r4, %r6, %r7};
	st.global.v2.b32 [%rd1+16], {%r8, %r9};
)"), 6);
  EXPECT_EQ(v[0], 9u);
  EXPECT_EQ(v[1], 0u);
  EXPECT_EQ(v[2], 32u);
  EXPECT_EQ(v[3], 0x80000F0Fu);
  EXPECT_EQ(v[4], 4u);
  EXPECT_EQ(v[5], 44u);
}

TEST(Emulator, AVectorOperandMayHoldImmediates) {
  // PTX ISA, vector operands: "{a, b, c, d}" of registers or immediates (LLVM stores zeros so).
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra $L_skip;
	mov.b32 %r2, 7;
	st.global.v4.b32 [%rd1], {0f3F800000, %r2, 0, 0f00000000};
$L_skip:
)"), 4);
  EXPECT_EQ(AsF(v[0]), 1.0f);
  EXPECT_EQ(v[1], 7u);
  EXPECT_EQ(v[2], 0u);
  EXPECT_EQ(v[3], 0u);
}

TEST(Emulator, ShuffleModesFollowTheIsa) {
  // bfly 1 swaps neighbours; up 1 with c = 0 keeps lane 0's own value; idx 5 broadcasts lane 5;
  // down 16 with c = 31 keeps lanes 16..31's own values.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;
	shfl.sync.up.b32 %r3, %r1, 1, 0, -1;
	shfl.sync.idx.b32 %r4, %r1, 5, 31, -1;
	shfl.sync.down.b32 %r5, %r1, 16, 31, -1;
	mul.lo.s32 %r6, %r2, 1000000;
	mul.lo.s32 %r7, %r3, 10000;
	mul.lo.s32 %r8, %r4, 100;
	add.s32 %r9, %r6, %r7;
	add.s32 %r9, %r9, %r8;
	add.s32 %r9, %r9, %r5;
	st.global.b32 [%rd3], %r9;
)"), 32);
  for (int lane = 0; lane < 32; ++lane) {
    const int bfly = lane ^ 1, up = lane == 0 ? 0 : lane - 1, down = lane < 16 ? lane + 16 : lane;
    EXPECT_EQ(v[lane], static_cast<uint32_t>(bfly * 1000000 + up * 10000 + 5 * 100 + down)) << lane;
  }
}

TEST(Emulator, SignedAndUnsignedComparisonsDiffer) {
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, -1;
	setp.lt.s32 %p1, %r2, 0;
	setp.lt.u32 %p2, %r2, 0;
	selp.b32 %r3, 10, 0, %p1;
	selp.b32 %r4, 1, 0, %p2;
	add.s32 %r5, %r3, %r4;
	shr.s32 %r6, %r2, 4;
	shr.u32 %r7, %r2, 28;
	add.s32 %r5, %r5, %r7;
	setp.eq.s32 %p3, %r6, -1;
	@!%p3 mov.b32 %r5, 999;
	st.global.b32 [%rd3], %r5;
)"), 1);
  EXPECT_EQ(v[0], 10u + 0u + 15u);
}

// brx.idx (PTX ISA, "Control flow: brx.idx"): each thread branches to the target its index picks
// from a .branchtargets list (LLVM emits one for a switch over a thread's lane); an index past the
// list is undefined in PTX and an error here.
TEST(Emulator, IndirectBranchesTakeTheirThreadsTarget) {
  const char* body = R"(
	and.b32 %r2, %r1, 3;
	@%p7 add.s32 %r2, %r2, 4;
	$L_list: .branchtargets $L_a, $L_b, $L_c, $L_d;
	brx.idx %r2, $L_list;
$L_a:
	mov.b32 %r5, 10;
	bra.uni $L_end;
$L_b:
	mov.b32 %r5, 11;
	bra.uni $L_end;
$L_c:
	mov.b32 %r5, 12;
	bra.uni $L_end;
$L_d:
	mov.b32 %r5, 13;
$L_end:
	st.global.b32 [%rd3], %r5;
)";
  std::vector<uint32_t> v = Emulate(Kernel(absl::StrCat("\tsetp.ne.s32 %p7, 0, 0;\n", body)), 8);
  ASSERT_EQ(v.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(v[i], 10u + i % 4) << i;
  absl::Status status;
  Emulate(Kernel(absl::StrCat("\tsetp.eq.s32 %p7, 0, 0;\n", body)), 8, &status);
  EXPECT_NE(status.message().find("past its 4 targets"), std::string::npos) << status;
}

// min.relu / max.relu.s32 clamp a negative result to 0 (PTX ISA, integer min and max); LLVM fuses
// max(min(a, b), 0) into min.relu. min/max.NaN.f32 give NaN where an operand is NaN.
TEST(Emulator, MinMaxReluAndNaN) {
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.b32 %r2, -152;
	min.relu.s32 %r3, %r2, 20;
	max.relu.s32 %r4, %r2, -7;
	min.relu.s32 %r5, %r2, -5;
	min.s32 %r6, %r2, 20;
	mov.b32 %r11, 30;
	min.relu.s32 %r12, %r11, 20;
	add.s32 %r7, %r3, %r4;
	add.s32 %r7, %r7, %r5;
	add.s32 %r7, %r7, %r12;
	mov.b32 %r8, 0f7FC00000;
	min.f32 %r9, %r8, 0f3F800000;
	min.NaN.f32 %r10, %r8, 0f3F800000;
	st.global.b32 [%rd3], %r7;
	st.global.b32 [%rd3+4], %r6;
	st.global.b32 [%rd3+8], %r9;
	st.global.b32 [%rd3+12], %r10;
)", {1, 1, 1}), 4);
  EXPECT_EQ(v[0], 20u);                          // three negative results clamped, and min(30, 20)
  EXPECT_EQ(static_cast<int32_t>(v[1]), -152);   // without .relu
  EXPECT_EQ(AsF(v[2]), 1.0f);                    // min of NaN and 1: 1
  EXPECT_TRUE(std::isnan(AsF(v[3])));            // .NaN: NaN
}

TEST(Emulator, BlockBarrierOrdersSharedMemory) {
  // Each thread writes its id to shared memory, waits, and reads its neighbour's.
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.u32 %r2, smem;
	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	st.shared.b32 [%r4], %r1;
	bar.sync 0;
	add.s32 %r5, %r1, 1;
	and.b32 %r5, %r5, 63;
	shl.b32 %r6, %r5, 2;
	add.s32 %r7, %r2, %r6;
	ld.shared.b32 %r8, [%r7];
	st.global.b32 [%rd3], %r8;
)", {64, 1, 1}), 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(v[i], static_cast<uint32_t>((i + 1) % 64)) << i;
}

// [reg+imm] in a 32-bit register is a 32-bit sum: LLVM folds constants into the immediate and
// leaves the register's part below 0 (its strength-reduced slot offsets), which wraps on the GPU.
TEST(Emulator, AThirtyTwoBitAddressWrapsAtThirtyTwoBits) {
  std::vector<uint32_t> v = Emulate(Kernel(R"(
	mov.u32 %r2, smem;
	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	sub.s32 %r5, %r4, 4096;
	st.shared.b32 [%r5+4096], %r1;
	bar.sync 0;
	ld.shared.b32 %r8, [%r4];
	st.global.b32 [%rd3], %r8;
)"), 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(v[i], static_cast<uint32_t>(i)) << i;
}

// An argument's array that a launch writes some words of, not all, is told with the grid that
// ran (a grid rule that covers too little leaves an output so); writes of earlier launches on the
// same device do not count, atomics do, and an array the launch never writes is no output.
TEST(Emulator, AnArrayWrittenInPartIsToldWithTheGrid) {
  const std::string body = R"(
	ld.param.u32 %r2, [emu_param_1];
	setp.ge.u32 %p1, %r1, %r2;
	@%p1 bra DONE;
	%STORE
DONE:
)";
  for (const char* store : {"st.global.b32 [%rd3], %r1;", "atom.global.add.u32 %r3, [%rd3], 1;"}) {
    SCOPED_TRACE(store);
    const rt::Bundle b = Kernel(absl::StrReplaceAll(body, {{"%STORE", store}}), {64, 1, 1});
    Device d;
    const uint64_t out = *d.Allocate(64 * 4);
    auto run = [&](int n) {
      absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(n)});
      EXPECT_TRUE(s.ok()) << s.status();
      return s.ok() ? s->partly_written : std::vector<PartlyWritten>{};
    };
    std::vector<PartlyWritten> part = run(40);
    ASSERT_EQ(part.size(), 1u);
    EXPECT_EQ(part[0].arg, 0);
    EXPECT_EQ(part[0].bytes, 256u);
    EXPECT_EQ(part[0].written, 160u);
    EXPECT_EQ(part[0].first_unwritten, 160u);
    EXPECT_EQ(part[0].message,
              "emulator_test.cc:1: test/emu: the array of parameter 'out' was written in part: 160 "
              "of its 256 bytes, the first one left as it was at byte 160. The launch ran 1x1x1 "
              "CTAs of 64x1x1 threads: if the kernel should write all of it, its grid (the kernel "
              "has no grid rule, Kernel::Grid, so a launch without a grid runs one CTA) or its "
              "bounds cover too little");
    {  // a bundle that records its grid rule's line names it (Kernel::Grid)
      rt::Bundle named = b;
      named.manifest.grid_source = "emulator_test.cc:7";
      absl::StatusOr<Stats> s = Launch(d, named, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(40)});
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_EQ(s->partly_written.size(), 1u);
      EXPECT_NE(s->partly_written[0].message.find("its grid rule (emulator_test.cc:7: 1, 1, 1) or its bounds"),
                std::string::npos)
          << s->partly_written[0].message;
    }
    EXPECT_TRUE(run(64).empty());
    EXPECT_TRUE(run(0).empty());  // nothing written: not an output of this launch
    part = run(20);
    ASSERT_EQ(part.size(), 1u);
    EXPECT_EQ(part[0].written, 80u);
  }
}

// Two arguments in one allocation are each judged from their address to the next one's, and a
// parameter the manifest's "writes_part" names is left out.
TEST(Emulator, PartlyWrittenArraysEndAtTheNextArgumentAndSparePartsByDesign) {
  rt::Bundle b = Kernel(R"(
	ld.param.u32 %r2, [emu_param_1];
	setp.ge.u32 %p1, %r1, %r2;
	@%p1 bra DONE;
	st.global.b32 [%rd3], %r1;
DONE:
)", {64, 1, 1});
  b.ptx = absl::StrReplaceAll(b.ptx, {{"\t.param .u32 emu_param_1\n", "\t.param .u32 emu_param_1,\n\t.param .u64 emu_param_2\n"}});
  b.manifest.params.push_back({"other", rt::ParamSpec::Kind::kPointer});
  Device d;
  const uint64_t base = *d.Allocate(64 * 4);
  auto run = [&](const rt::Bundle& bundle, int n) {
    absl::StatusOr<Stats> s = Launch(d, bundle, {1, 1, 1},
                                     {rt::Arg::Ptr(base), rt::Arg::I32(n), rt::Arg::Ptr(base + 160)});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->partly_written : std::vector<PartlyWritten>{};
  };
  EXPECT_TRUE(run(b, 40).empty());  // out's 160 bytes written whole; other's not at all
  std::vector<PartlyWritten> part = run(b, 20);
  ASSERT_EQ(part.size(), 1u);
  EXPECT_EQ(part[0].arg, 0);
  EXPECT_EQ(part[0].bytes, 160u);
  EXPECT_EQ(part[0].written, 80u);
  EXPECT_NE(part[0].message.find("(to the next argument's address"), std::string::npos);
  part = run(b, 50);  // past out's bytes into other's
  ASSERT_EQ(part.size(), 1u);
  EXPECT_EQ(part[0].arg, 2);
  EXPECT_EQ(part[0].written, 40u);
  b.manifest.attributes.push_back({"writes_part", "out,other"});
  EXPECT_TRUE(run(b, 20).empty());
}

TEST(Emulator, ABarrierSomeThreadsNeverReachIsADeadlock) {
  absl::Status s;
  Emulate(Kernel(R"(
	setp.lt.u32 %p1, %r1, 32;
	@%p1 bra $L__wait;
	bar.sync 1, 64;
	bra $L__done;
$L__wait:
	bar.sync 2, 64;
$L__done:
)", {64, 1, 1}), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deadlock in block (0,0,0): every live thread waits: 32 threads wait at barrier 1 (32 of "
                             "64 arrivals of its thread count"), std::string::npos) << s;
  EXPECT_NE(s.message().find("32 threads wait at barrier 2"), std::string::npos) << s;
}

// 128 threads at a barrier of 96: three warps complete it, the fourth arrives alone in the next
// phase and waits there, the whole warp, under every schedule (the lanes of a warp not yet whole
// when the barrier completes are not released with it).
TEST(Emulator, AWarpPastABarriersCountWaitsWhole) {
  for (uint64_t seed : {1, 2, 3, 5}) {
    absl::Status s;
    Emulate(Kernel("\tbar.sync 1, 96;\n", {128, 1, 1}), 1, &s, seed);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("32 threads wait at barrier 1 (32 of 96 arrivals"), std::string::npos)
        << "seed " << seed << ": " << s;
  }
}

// setmaxnreg moves registers within the CTA's launch share (168 a thread for 384 threads): two
// consumer warpgroups at 240 leave the producer 24, and a producer at 32 leaves the incs waiting
// forever, as a CTA did on an H200.
TEST(Emulator, SetmaxnregMovesRegistersWithinTheCtasShare) {
  auto split = [](int producer) {
    return Kernel(absl::StrCat(R"(
	setp.lt.u32 %p1, %r1, 128;
	@%p1 bra $L__producer;
	setmaxnreg.inc.sync.aligned.u32 240;
	bra $L__done;
$L__producer:
	setmaxnreg.dec.sync.aligned.u32 )", producer, R"(;
$L__done:
)"), {384, 1, 1});
  };
  absl::Status s;
  Emulate(split(24), 1, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(split(32), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("128 threads wait at setmaxnreg.inc for registers no warpgroup gives back"),
            std::string::npos) << s;
  EXPECT_NE(s.message().find("of the 168 a thread the CTA was launched with"), std::string::npos) << s;
}

// .minnctapersm N launches a CTA with 65536 registers over N CTAs' threads: with two CTAs of 256
// threads an SM, 128 a thread, so a warpgroup at 240 beside one at 24 waits forever, where one at
// 232 fits (and without the directive, 248 a thread, both do).
TEST(Emulator, SetmaxnregCountsTheCtasAnSmMustHold) {
  auto split = [](int consumer, bool two_ctas) {
    rt::Bundle b = Kernel(absl::StrCat(R"(
	setp.lt.u32 %p1, %r1, 128;
	@%p1 bra $L__producer;
	setmaxnreg.inc.sync.aligned.u32 )", consumer, R"(;
	bra $L__done;
$L__producer:
	setmaxnreg.dec.sync.aligned.u32 24;
$L__done:
)"), {256, 1, 1});
    if (two_ctas) b.ptx = absl::StrReplaceAll(b.ptx, {{")\n{", ")\n.minnctapersm 2\n{"}});
    return b;
  };
  absl::Status s;
  Emulate(split(240, false), 1, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(split(232, true), 1, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(split(240, true), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("of the 128 a thread the CTA was launched with"), std::string::npos) << s;
}

// A prefetch of global memory gives no value, but the ISA does not promise that one outside any
// allocation is harmless: it is an error, with how far past the allocation it lies.
TEST(Emulator, PrefetchesStayInsideAllocations) {
  absl::Status s;
  Emulate(Kernel("\tprefetch.global.L2 [%rd3];\n"), 32, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(Kernel("\tadd.s64 %rd4, %rd1, 4096;\n\tprefetch.global.L2 [%rd4];\n"), 32, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("prefetches global address 0x"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bytes past the end of 'out' at 0x"), std::string::npos) << s;
}

TEST(Emulator, OutOfBoundsAndMisalignedAccessesNameTheLineAndThread) {
  absl::Status s;
  Emulate(Kernel(R"(
	st.global.b32 [%rd3+4], %r1;
)"), 32, &s);  // the last thread writes one word past the 32
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(st.global.b32 [%rd3+4], %r1): out-of-bounds global access of 4 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("in thread (31,0,0) of block (0,0,0)"), std::string::npos) << s;
  Emulate(Kernel(R"(
	st.global.b32 [%rd3+2], %r1;
)"), 32, &s);
  // which side of the access is off: the global address here
  EXPECT_NE(s.message().find("misaligned 4-byte access at global address 0x"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("(2 bytes past a multiple of 4)"), std::string::npos) << s;
}

// ldmatrix reads each row's 16 bytes from a 16-byte boundary (PTX ISA): a row address 2 bytes
// past one is an error naming the lane, not a load of the bytes there.
TEST(Emulator, LdmatrixRowsStartOn16ByteBoundaries) {
  auto ldmatrix_at = [](int offset) {
    return Kernel(absl::StrCat(R"(
	mov.u32 %r2, smem;
	shl.b32 %r3, %r1, 4;
	add.s32 %r4, %r2, %r3;
	st.shared.v4.b32 [%r4], {%r1, %r1, %r1, %r1};
	bar.sync 0;
	add.s32 %r5, %r4, )", offset, R"(;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%r5];
	st.global.b32 [%rd3], %r6;
)"));
  };
  absl::Status s;
  Emulate(ldmatrix_at(0), 32, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(ldmatrix_at(2), 32, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is 2 bytes past a 16-byte boundary"), std::string::npos) << s;
}

// What a launch is given that the GPU would refuse or read otherwise: a manifest's parameter word
// the PTX entry does not declare, a block of no thread or past 1024, an SM count below 1, a null
// host pointer: each a message, no run.
TEST(Emulator, LaunchesRefuseWhatTheGpuWouldNot) {
  Device d;
  const uint64_t out = *d.Allocate(32 * 4);
  const std::vector<rt::Arg> args = {rt::Arg::Ptr(out), rt::Arg::F32(1)};
  rt::Bundle b = Kernel("");
  b.manifest.params[1].kind = rt::ParamSpec::Kind::kF32;  // the PTX declares .u32
  absl::Status s = Launch(d, b, {1, 1, 1}, args).status();
  EXPECT_NE(s.message().find("parameter n is f32 in the manifest, but the PTX entry declares"),
            std::string::npos) << s;
  for (rt::Dim3 block : {rt::Dim3{0, 1, 1}, rt::Dim3{2048, 1, 1}}) {
    rt::Bundle c = Kernel("", block);
    s = Launch(d, c, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(1)}).status();
    EXPECT_NE(s.message().find("threads: 1 to 1024"), std::string::npos) << s;
  }
  rt::Bundle capped = Kernel("", {128, 1, 1});  // .maxntid 64 in its PTX, launched with 128
  capped.ptx = absl::StrReplaceAll(capped.ptx, {{")\n{", ")\n.maxntid 64,1,1\n{"}});
  s = Launch(d, capped, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(1)}).status();
  EXPECT_NE(s.message().find("at most the entry's .maxntid 64"), std::string::npos) << s;
  rt::Manifest twice = Kernel("").manifest;  // a parameter named twice does not parse
  twice.params.push_back(twice.params[0]);
  EXPECT_NE(rt::Manifest::Parse(twice.Serialize()).status().message().find(
                "a second parameter named 'out'"),
            std::string::npos);
  // A second block line replaced the first without a word (a hand-edited bundle ran half its
  // threads).
  const std::string text = Kernel("").manifest.Serialize();
  const size_t block_at = text.find("\nblock ");
  ASSERT_NE(block_at, std::string::npos);
  const std::string two_blocks = text.substr(0, block_at) + "\nblock 128 1 1" + text.substr(block_at);
  EXPECT_NE(rt::Manifest::Parse(two_blocks).status().message().find("a second 'block' line"),
            std::string::npos);
  rt::Bundle g = Kernel("");
  g.manifest.grid[0] = rt::GridExpr("sms");
  s = Launch(d, g, {rt::Arg::Ptr(out), rt::Arg::I32(1)}, {.sm_count = 0}).status();
  EXPECT_NE(s.message().find("sm_count 0"), std::string::npos) << s;
  EXPECT_EQ(d.Upload(nullptr, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.CopyIn(out, nullptr, 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.CopyOut(nullptr, out, 16).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Emulator, UnknownInstructionsAreRefusedAtTheirLine) {
  absl::Status s;
  Emulate(Kernel(R"(
	sin.approx.f32 %r2, %r1;
)"), 1, &s);
  EXPECT_NE(s.message().find("the emulator does not know 'sin'"), std::string::npos) << s;
}

TEST(Emulator, AnInstructionShortOfOperandsIsAMessage) {
  absl::Status s;
  Emulate(Kernel(R"(
	setp.lt.s32 %p1, %r1;
)"), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test/emu: malformed PTX (an instruction lacks an operand"), std::string::npos) << s;
  // (the ALU ops' operand counts are checked as the PTX is read)
  Emulate(Kernel(R"(
	add.s32 %r2, %r1;
)"), 1, &s);
  EXPECT_NE(s.message().find("2 operands where 'add.s32' takes 3"), std::string::npos) << s;
}

// Two uses of one named barrier id: warps 0-1 meet at one `bar.sync 1, 64`, warps 2-3 at another
// line with the same id and count. A phase then completes with a warp of each group (each waits
// for the other's, not its own): reported, naming both lines. One barrier of all the threads in
// both arms of a branch, and the same id met by a bar.arrive and a bar.sync (a producer and its
// consumers), are no such meeting.
TEST(Emulator, TwoUsesOfOneBarrierIdMeeting) {
  Device d;
  uint64_t out = *d.Allocate(4);
  // Threads 0-63 wait at one bar.sync on id 1, threads 64-127 at another, with this count.
  auto two_arms = [](int count) {
    return Kernel(absl::StrCat(R"(
	setp.lt.u32 %p1, %r1, 64;
	@%p1 bra $L__low;
	bar.sync 1, )", count, R"(;
	bra $L__end;
$L__low:
	bar.sync 1, )", count, R"(;
$L__end:
)"), {128, 1, 1});
  };
  rt::Bundle collide = two_arms(64);
  bool found = false;
  for (uint64_t seed = 1; seed <= 8 && !found; ++seed) {
    absl::StatusOr<Stats> s = Launch(d, collide, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)},
                                     {.seed = seed});
    if (s.ok()) continue;  // this order met each group alone
    found = true;
    EXPECT_NE(s.status().message().find("barrier 1 (64 threads) completes with threads waiting at "
                                        "two barrier instructions"),
              std::string::npos)
        << s.status();
    EXPECT_NE(s.status().message().find("give each its own id"), std::string::npos) << s.status();
  }
  EXPECT_TRUE(found) << "no schedule of 8 mixed the two groups";
  // One barrier of all 128 threads written in both arms of a branch: its count is theirs.
  rt::Bundle both_arms = two_arms(128);
  for (uint64_t seed = 1; seed <= 4; ++seed)
    EXPECT_TRUE(
        Launch(d, both_arms, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}, {.seed = seed}).ok());
  rt::Bundle producer_consumer = Kernel(R"(
	setp.lt.u32 %p1, %r1, 64;
	@%p1 bra $L__low;
	bar.arrive 1, 128;
	bra $L__end;
$L__low:
	bar.sync 1, 128;
$L__end:
)", {128, 1, 1});
  for (uint64_t seed = 1; seed <= 4; ++seed)
    EXPECT_TRUE(Launch(d, producer_consumer, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)},
                       {.seed = seed})
                    .ok());
}

// A kernel that never ends and that no watch can prove endless: a loop that is not a branch to
// itself (reported at once), a counter that changes each pass, and a way out that depends on the
// clock (loops.cc does not watch such a loop; it has a way out, so it is not one without any).
rt::Bundle Spinner() {
  return Kernel(R"(
$L__spin:
	add.u32 %r20, %r20, 1;
	mov.u32 %r21, %clock;
	setp.eq.u32 %p5, %r21, 0;
	@!%p5 bra $L__spin;
)");
}

// bar.sync is barrier.sync.aligned: the lanes of a warp run the same barrier instruction, and the
// warp arrives as one, for its threads that have not exited (PTX ISA, barrier). Two halves of a
// warp at two bar.sync instructions are reported; a warp whose other lanes exit arrives with the
// lanes left; and a counted barrier counts a warp as its size, so a warp partly exited completes
// `bar.sync 1, 64` with a whole warp (counted thread by thread, it would wait forever).
TEST(Emulator, AnAlignedBarrierIsRunByWholeWarps) {
  Device d;
  uint64_t out = *d.Allocate(4);
  rt::Bundle halves = Kernel(R"(
	setp.lt.u32 %p1, %r1, 16;
	@%p1 bra $L__low;
	bar.sync 0;
	bra $L__end;
$L__low:
	bar.sync 0;
$L__end:
)");
  absl::StatusOr<Stats> s = Launch(d, halves, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("of warp 0 arrives at barrier 0 here while lane"),
            std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("are .aligned (PTX ISA, barrier)"), std::string::npos)
      << s.status();
  // lane 0 alone at the barrier, the rest of the block exits: it waits for no one
  for (const char* barrier : {"bar.sync 0", "barrier.sync 0", "@%p2 bar.sync 0"}) {
    rt::Bundle alone = Kernel(absl::StrCat(R"(
	setp.ne.u32 %p1, %r1, 0;
	setp.eq.u32 %p2, %r1, 0;
	@%p1 bra $L__skip;
	)", barrier, R"(;
$L__skip:
)"), {64, 1, 1});
    EXPECT_TRUE(Launch(d, alone, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}).ok()) << barrier;
  }
  // threads 40..63 exit; two warps meet at a barrier of 64 (warp 1 counts 32 with 8 lanes)
  rt::Bundle partial = Kernel(R"(
	setp.ge.u32 %p1, %r1, 40;
	@%p1 bra $L__out;
	bar.sync 1, 64;
	st.global.b32 [%rd3], %r1;
$L__out:
)", {64, 1, 1});
  uint64_t wide = *d.Allocate(64 * 4);
  ASSERT_TRUE(Launch(d, partial, {1, 1, 1}, {rt::Arg::Ptr(wide), rt::Arg::I32(0)}).ok());
  uint32_t v[64];
  ASSERT_TRUE(d.CopyOut(v, wide, sizeof(v)).ok());
  EXPECT_EQ(v[39], 39u);
}

// A form the PTX ISA does not have is refused at its line, not run as something else: a type of
// no width, an ld/st modifier or vector width it does not know, a vector whose register list is
// not its width, an ALU op with an extra operand.
TEST(Emulator, FormsThePtxIsaDoesNotHaveAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"and.b17 %r2, %r1, 7;", "'.b17' is no PTX type"},
      {"and.b32 %r2, %r1, 7, 9;", "4 operands where 'and.b32' takes 3"},
      {"@%p1 add.s32 %r2, %r1;", "2 operands where 'add.s32' takes 3"},
      {"ld.glbal.u32 %r2, [%rd3];", "'.glbal' is no modifier of ld"},
      {"ld.global.v9.u32 {%r2, %r4, %r5, %r6}, [%rd3];", "'.v9' is no modifier of ld"},
      {"ld.global.v2.u32 {%r2, %r4, %r5, %r6}, [%rd3];", "2 elements (.v2) and 4 registers"},
      {"st.global.v4.u32 [%rd3], %r1;", "4 elements (.v4) and 1 registers"},
      // An ALU op's or cvt's modifiers and types: one it does not have was run as if absent, and
      // a rounding the emulator does not model as round-to-nearest.
      {"mul.wide.q32 %rd4, %r1, 4;", "'.q32' is no modifier of mul (nor a PTX type)"},
      {"shl.bogus.b32 %r2, %r1, 2;", "'.bogus' is no modifier of shl"},
      {"cvt.qq.u64.u32 %rd4, %r1;", "'.qq' is no modifier of cvt"},
      {"add.s32.s32 %r2, %r1, 1;", "add takes one type, not 2"},
      {"fma.rz.f32 %r2, %r1, %r1, %r1;", "'.rz' rounding is not emulated"},
      {"cvt.rm.f32.s32 %r2, %r1;", "'.rm' rounding is not emulated"},
  };
  for (const auto& [line, says] : cases) {
    Device d;
    uint64_t out = *d.Allocate(16 * 32);
    absl::StatusOr<Stats> s =
        Launch(d, Kernel(absl::StrCat("\t", line, "\n")), {1, 1, 1},
               {rt::Arg::Ptr(out), rt::Arg::I32(0)});
    ASSERT_FALSE(s.ok()) << line;
    EXPECT_NE(s.status().message().find(says), std::string::npos) << line << ": " << s.status();
  }
  // the forms kiln's kernels use pass (a cache-policy operand after st's data)
  Device d;
  uint64_t out = *d.Allocate(16 * 32);
  absl::StatusOr<Stats> fine = Launch(d, Kernel(R"(
	createpolicy.fractional.L2::evict_first.b64 %rd5, 1.0;
	mul.wide.u32 %rd6, %r1, 8;
	add.s64 %rd7, %rd1, %rd6;
	st.global.L2::cache_hint.v2.u32 [%rd7], {%r1, %r1}, %rd5;
	ld.global.L1::no_allocate.v2.u32 {%r2, _}, [%rd7];
)"), {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)});
  EXPECT_TRUE(fine.ok()) << fine.status();
}

TEST(Emulator, ABranchToItselfIsReportedAtOnce) {
  rt::Bundle b = Kernel(R"(
	ld.param.u32 %r2, [emu_param_1];
	setp.ne.u32 %p1, %r2, 0;
$L__self:
	@%p1 bra $L__self;
)");
  Device d;
  uint64_t out = *d.Allocate(4);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(1)});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("@%p1 bra $L__self): an endless loop: this branch jumps to "
                                      "itself"),
            std::string::npos)
      << s.status();
  // not taken: the thread goes on
  EXPECT_TRUE(Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}).ok());
}

TEST(Emulator, EndlessLoopsRunOutOfBudget) {
  rt::Bundle b = Spinner();
  Device d;
  uint64_t out = *d.Allocate(4);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(1)}, {.max_instructions = 100000});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s.status())) << s.status();
}

// A wait that can never end is reported when it starts, not at the instruction budget: a
// hand-made grid barrier of two blocks (each sets its flag, then waits for the other's) works on
// a GPU that holds both at once, but the emulator runs one block to its end before the other.
TEST(Emulator, AWaitForABlockNotRunIsReportedAsItStarts) {
  rt::Bundle b = Kernel(R"(
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra $L__meet;
	mov.u32 %r2, %ctaid.x;
	mul.wide.u32 %rd4, %r2, 4;
	add.s64 %rd5, %rd1, %rd4;
	mov.u32 %r4, 1;
	st.release.gpu.global.u32 [%rd5], %r4;
	xor.b32 %r5, %r2, 1;
	mul.wide.u32 %rd6, %r5, 4;
	add.s64 %rd7, %rd1, %rd6;
$L__spin:
	ld.acquire.gpu.global.u32 %r3, [%rd7];
	setp.eq.u32 %p3, %r3, 0;
	@%p3 bra $L__spin;
$L__meet:
	bar.sync 0;)", {64, 1, 1});
  for (uint64_t seed : {0, 1, 2}) {
    Device d;
    const uint64_t out = *d.Allocate(8);
    ASSERT_TRUE(d.Fill(out, 0, 8).ok());
    absl::StatusOr<Stats> s = Launch(d, b, {2, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)},
                                     {.seed = seed, .max_instructions = 50000000});
    ASSERT_FALSE(s.ok()) << seed;
    EXPECT_FALSE(absl::IsResourceExhausted(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("a wait that cannot end: this thread reads global memory"), absl::string_view::npos) << s.status();
    EXPECT_NE(s.status().message().find("a block cannot wait for one that has not run"), absl::string_view::npos) << s.status();
    EXPECT_NE(s.status().message().find("while 63 wait"), absl::string_view::npos) << s.status();
  }
}

// Waits that do end are not reported: a thread spins on a flag while another works long before
// it sets it, and a thread gives up a bounded wait for a flag never set. Under seeds, so
// the spinning warp often runs far ahead.
TEST(Emulator, WaitsThatEndAreNotReported) {
  rt::Bundle b = Kernel(R"(
	setp.eq.u32 %p1, %r1, 32;
	@%p1 bra $L__work;
	setp.eq.u32 %p2, %r1, 1;
	@%p2 bra $L__bounded;
	setp.ne.u32 %p3, %r1, 0;
	@%p3 bra $L__end;
$L__spin:
	ld.volatile.global.u32 %r3, [%rd1+128];
	setp.eq.u32 %p4, %r3, 0;
	@%p4 bra $L__spin;
	st.global.u32 [%rd3], %r3;
	bra $L__end;
$L__bounded:
	mov.u32 %r5, 0;
$L__again:
	add.u32 %r5, %r5, 1;
	ld.volatile.global.u32 %r3, [%rd1+132];
	setp.lt.u32 %p5, %r5, 5000;
	@%p5 bra $L__again;
	st.global.u32 [%rd3], %r5;
	bra $L__end;
$L__work:
	mov.u32 %r6, 0;
$L__count:
	add.u32 %r6, %r6, 1;
	setp.lt.u32 %p6, %r6, 20000;
	@%p6 bra $L__count;
	st.volatile.global.u32 [%rd1+128], %r6;
$L__end:)", {64, 1, 1});
  for (uint64_t seed : {1, 2, 3}) {
    absl::Status s;
    std::vector<uint32_t> v = Emulate(b, 2, &s, seed);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(v[0], 20000u);
    EXPECT_EQ(v[1], 5000u);
  }
}

// The clocks (%globaltimer, %clock64) only rise, nanosleep only yields, and trap ends the launch
// with an error at its line (PTX ISA: trap aborts the kernel).
TEST(Emulator, ClocksRiseAndTrapStops) {
  rt::Bundle b = Kernel(R"(
	mov.u64 %rd4, %globaltimer;
	nanosleep.u32 100;
	mov.u64 %rd5, %clock64;
	mov.u64 %rd6, %globaltimer;
	setp.gt.u64 %p1, %rd6, %rd4;
	selp.u32 %r2, 1, 0, %p1;
	st.global.u32 [%rd3], %r2;
	setp.eq.u32 %p2, %r1, 5;
	@%p2 trap;)");
  absl::Status s;
  Emulate(b, 32, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trap): trap: the kernel stopped itself"), std::string::npos) << s;
  EXPECT_NE(s.message().find("in thread (5,0,0)"), std::string::npos) << s;
  std::vector<uint32_t> risen = Emulate(Kernel(R"(
	mov.u64 %rd4, %globaltimer;
	nanosleep.u32 100;
	mov.u64 %rd6, %clock64;
	setp.gt.u64 %p1, %rd6, %rd4;
	selp.u32 %r2, 1, 0, %p1;
	st.global.u32 [%rd3], %r2;)"), 32);
  for (uint32_t v : risen) EXPECT_EQ(v, 1u);
}

// A launch's error ends with the line that launched it, for arguments it refuses and for what
// goes wrong while it runs alike.
// A PTX label is any identifier (`$L__BB0_1` from LLVM, `AGAIN` by hand): a loop of three through
// `AGAIN`, and a branch to a label the kernel does not hold refused when the PTX is read.
TEST(Emulator, ABranchTakesAnyIdentifierAsItsLabel) {
  rt::Bundle loop = Kernel(R"(
	mov.u32 %r2, 0;
AGAIN:
	add.u32 %r2, %r2, 1;
	setp.lt.u32 %p1, %r2, 3;
	@%p1 bra AGAIN;
	st.global.u32 [%rd3], %r2;)");
  EXPECT_EQ(Emulate(loop, 1)[0], 3u);
  absl::Status status;
  Emulate(Kernel("\tbra NOWHERE;"), 1, &status);
  EXPECT_NE(status.message().find("unknown label NOWHERE"), absl::string_view::npos) << status;
}

// Under seeds 1..4: `ordered` writes `want` to out[0], and `racing` is reported as a data race on
// shared byte `byte`, its message also holding `also`.
void ExpectOrderedElseARace(const rt::Bundle& ordered, uint32_t want, const rt::Bundle& racing, int byte,
                            const std::string& also) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    EXPECT_EQ(Emulate(ordered, 1, nullptr, seed)[0], want);
    absl::Status status;
    Emulate(racing, 1, &status, seed);
    EXPECT_NE(status.message().find(absl::StrCat("a data race on shared byte ", byte, ":")), absl::string_view::npos)
        << status;
    EXPECT_NE(status.message().find(also), absl::string_view::npos) << status;
  }
}

// Data races on shared memory (PTX ISA, memory consistency model): warp 0's thread 0 writes a
// word (set before a barrier) that warp 1's thread 32 reads. With nothing between them the pair
// is a race, named with both lines whichever runs first (seeds 1 to 4); bar.sync between them
// orders them.
rt::Bundle WriteThenRead(const std::string& between) {
  return Kernel(absl::StrCat(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra SET;
	st.shared.u32 [%r2+4], 5;
SET:
	bar.sync 0;
	@%p1 bra NOT0;
	st.shared.u32 [%r2+4], 7;
NOT0:
)", between, R"(
	setp.ne.u32 %p2, %r1, 32;
	@%p2 bra DONE;
	ld.shared.u32 %r3, [%r2+4];
	st.global.u32 [%rd1], %r3;
DONE:)"), {64, 1, 1});
}

TEST(Emulator, SharedMemoryRacesBetweenWarpsAreNamed) {
  ExpectOrderedElseARace(WriteThenRead("\tbar.sync 0;"), 7, WriteThenRead(""), 4, "are not ordered");
}

// A buffer refilled each round while the other warp may still read the last round's: warp 0
// writes, a barrier, warp 1 reads; round 2's write is not ordered after round 1's read (the
// barrier that would order it, at the round's end, is missing).
TEST(Emulator, ABufferRewrittenBeforeItsReadersPassABarrierIsARace) {
  rt::Bundle rounds = Kernel(R"(
	mov.u32 %r2, smem;
	mov.u32 %r4, 0;
ROUND:
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra READ;
	st.shared.u32 [%r2], %r4;
READ:
	bar.sync 0;
	setp.ne.u32 %p2, %r1, 32;
	@%p2 bra NEXT;
	ld.shared.u32 %r3, [%r2];
NEXT:
	add.u32 %r4, %r4, 1;
	setp.lt.u32 %p3, %r4, 2;
	@%p3 bra ROUND;)", {64, 1, 1});
  absl::Status status;
  Emulate(rounds, 1, &status);
  EXPECT_NE(status.message().find("a data race on shared byte 0"), absl::string_view::npos)
      << status;
}

// A shared counter (a histogram's bin): set by thread 0, then each of two warps' threads add 1
// to it with atom.shared. Atomics do not race with each other, but the set does with the other
// warp's adds unless a barrier lies between; with one, the count is 64.
rt::Bundle Counter(const std::string& between) {
  return Kernel(absl::StrCat(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra SET;
	st.shared.u32 [%r2+8], 0;
SET:
)", between, R"(
	atom.shared.add.u32 %r3, [%r2+8], 1;
	bar.sync 0;
	@%p1 bra DONE;
	ld.shared.u32 %r4, [%r2+8];
	st.global.u32 [%rd1], %r4;
DONE:)"), {64, 1, 1});
}

TEST(Emulator, AtomicsRaceWithPlainAccessesButNotWithEachOther) {
  ExpectOrderedElseARace(Counter("\tbar.sync 0;"), 64, Counter(""), 8, "atomic");
}

// An mbarrier hands the word over: thread 0 writes it and arrives (release), thread 32 waits for
// the phase (acquire) and reads it. An arrive with .relaxed orders nothing.
rt::Bundle HandOver(const std::string& arrive) {
  return Sm90(Kernel(absl::StrCat(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra INITED;
	mbarrier.init.shared.b64 [%r2+64], 1;
INITED:
	bar.sync 0;
	@%p1 bra WAIT;
	st.shared.u32 [%r2], 9;
	)", arrive, R"( %rd4, [%r2+64];
	bra DONE;
WAIT:
	setp.ne.u32 %p2, %r1, 32;
	@%p2 bra DONE;
AGAIN:
	mbarrier.try_wait.parity.shared.b64 %p3, [%r2+64], 0;
	@!%p3 bra AGAIN;
	ld.shared.u32 %r3, [%r2];
	st.global.u32 [%rd1], %r3;
DONE:)"), {64, 1, 1}));
}

// An mbarrier's life: test_wait polled in a loop is a wait (it yields, and its true counts as
// having waited on the phase); mbarrier.inval ends the object, after which its bytes are plain
// memory, and a use before a new init is an error; a plain store over a live one is an error.
rt::Bundle MbarrierLife(const std::string& after) {
  return Sm90(Kernel(absl::StrCat(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra INITED;
	mbarrier.init.shared.b64 [%r2+64], 1;
INITED:
	bar.sync 0;
	setp.eq.u32 %p2, %r1, 32;
	@%p2 bra ARRIVE;
	@%p1 bra MEET;
POLL:
	mbarrier.test_wait.parity.shared.b64 %p3, [%r2+64], 0;
	@!%p3 bra POLL;
	bra MEET;
ARRIVE:
	mov.u32 %r5, 0;
WORK:
	add.u32 %r5, %r5, 1;
	setp.lt.u32 %p4, %r5, 3000;
	@%p4 bra WORK;
	mbarrier.arrive.shared.b64 %rd4, [%r2+64];
MEET:
	bar.sync 0;
	@%p1 bra DONE;
)", after, R"(
DONE:)"), {64, 1, 1}));
}

TEST(Emulator, AnMbarriersLifeFromInitToInval) {
  for (uint64_t seed : {0, 1, 2}) {
    absl::Status s;
    Emulate(MbarrierLife(R"(	mbarrier.inval.shared.b64 [%r2+64];
	st.shared.u64 [%r2+64], 7;)"), 1, &s, seed);
    EXPECT_TRUE(s.ok()) << seed << ": " << s;
  }
  absl::Status s;
  Emulate(MbarrierLife(R"(	mbarrier.inval.shared.b64 [%r2+64];
	mbarrier.arrive.shared.b64 %rd4, [%r2+64];)"), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the mbarrier at shared offset 64 was invalidated at PTX line"), std::string::npos) << s;
  Emulate(MbarrierLife("	st.shared.u64 [%r2+64], 7;"), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a plain store to shared bytes 64..71, which hold the live mbarrier at shared offset 64"),
            std::string::npos) << s;
}

// Correct kernels the watch for endless waits and the mbarrier's life must not refuse: a poll
// that meets the block at a barrier each pass while thread 0 counts to the flag (the others'
// registers repeat, but the barrier lets the writer run); and an mbarrier used for two phases,
// invalidated, initialised again and used again (its phases count from 0 anew).
TEST(Emulator, APollThroughABarrierAndABarrierBornTwiceRun) {
  absl::Status s;
  Emulate(Kernel(R"(
	mov.u32 %r3, 0;
$L_loop:
	bar.sync 0;
	ld.volatile.global.u32 %r6, [%rd1+1020];
	setp.ne.u32 %p1, %r6, 0;
	@%p1 bra $L_done;
	bar.sync 0;
	setp.eq.u32 %p2, %r1, 0;
	@!%p2 bra $L_loop;
	add.u32 %r3, %r3, 1;
	setp.ge.u32 %p3, %r3, 3000;
	@!%p3 bra $L_loop;
	st.volatile.global.u32 [%rd1+1020], %r3;
	bra $L_loop;
$L_done:)", {256, 1, 1}), 1, &s);
  EXPECT_TRUE(s.ok()) << s;
  Emulate(Sm90(Kernel(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	mov.u32 %r7, 0;
ROUND:
	@%p1 bra INITED;
	mbarrier.init.shared.b64 [%r2+64], 1;
INITED:
	mov.u32 %r6, 0;
	bar.sync 0;
PHASE:
	@%p1 bra W;
	mbarrier.arrive.shared.b64 %rd4, [%r2+64];
W:
	mbarrier.try_wait.parity.shared.b64 %p3, [%r2+64], %r6;
	@!%p3 bra W;
	bar.sync 0;
	xor.b32 %r6, %r6, 1;
	setp.eq.u32 %p4, %r6, 1;
	@%p4 bra PHASE;
	@%p1 bra NEXT;
	mbarrier.inval.shared.b64 [%r2+64];
NEXT:
	bar.sync 0;
	add.u32 %r7, %r7, 1;
	setp.lt.u32 %p5, %r7, 2;
	@%p5 bra ROUND;)")), 1, &s);
  EXPECT_TRUE(s.ok()) << s;
}

// A second init of an mbarrier in use (an arrival of its phase in) loses that arrival: an error.
TEST(Emulator, InitialisingABarrierInUseIsAnError) {
  absl::Status s;
  Emulate(Sm90(Kernel(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra DONE;
	mbarrier.init.shared.b64 [%r2+64], 2;
	mbarrier.arrive.shared.b64 %rd4, [%r2+64];
	mbarrier.init.shared.b64 [%r2+64], 2;
DONE:)")), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("initialises again the mbarrier at shared offset 64 while it is in use (1 of 2"),
            std::string::npos) << s;
}

// A poll of a phase that never completes is stopped as it starts, not at the instruction budget.
TEST(Emulator, APollThatCannotEndIsReported) {
  rt::Bundle b = Sm90(Kernel(R"(
	mov.u32 %r2, smem;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra DONE;
	mbarrier.init.shared.b64 [%r2+64], 2;
	mbarrier.arrive.shared.b64 %rd4, [%r2+64];
POLL:
	mbarrier.test_wait.parity.shared.b64 %p3, [%r2+64], 0;
	@!%p3 bra POLL;
DONE:)"));
  absl::Status s;
  Emulate(b, 1, &s, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a wait that cannot end"), std::string::npos) << s;
}

// setmaxnreg is .sync.aligned: one run by a single thread of a warpgroup is reported at exit.
TEST(Emulator, SetmaxnregRunByPartOfAWarpgroupIsAnError) {
  absl::Status s;
  Emulate(Kernel(R"(
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra $L__done;
	setmaxnreg.dec.sync.aligned.u32 24;
$L__done:
)", {128, 1, 1}), 1, &s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("run by 1 thread(s) of warpgroup 0 in all, not whole times its 128"), std::string::npos) << s;
}

TEST(Emulator, AnMbarrierPhaseOrdersItsArrivalsBeforeItsWaiters) {
  ExpectOrderedElseARace(HandOver("mbarrier.arrive.shared.b64"), 9, HandOver("mbarrier.arrive.relaxed.cta.shared.b64"),
                         0, "write");
}

// Shared addresses are rank << 24 | offset, as an H200's are (its cluster CTA 1's shared
// variables at 0x1000400: docs/perf/2026-11-30-descriptors-and-tma-destinations.md): in clusters
// of two, CTA r reads its own `smem` at r << 24, reaches its own bytes through that address, and
// mapa to rank 0 gives the bare offset. Thread 0 of CTA c writes out[4c..4c+2]: its address of
// smem, mapa of it to rank 0, and the word it stored there (its %ctaid.x) read back.
TEST(Emulator, ClusterCtasSharedAddressesCarryTheirRank) {
  rt::Bundle b = Sm90(Kernel(R"(
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra DONE;
	mov.u32 %r2, smem;
	mov.u32 %r3, %ctaid.x;
	st.shared.u32 [%r2+64], %r3;
	mapa.shared::cluster.u32 %r4, %r2, 0;
	ld.shared.u32 %r5, [%r2+64];
	shl.b32 %r6, %r3, 4;
	cvt.u64.u32 %rd4, %r6;
	add.s64 %rd5, %rd1, %rd4;
	st.global.u32 [%rd5], %r2;
	st.global.u32 [%rd5+4], %r4;
	st.global.u32 [%rd5+8], %r5;
DONE:
	barrier.cluster.arrive.aligned;
	barrier.cluster.wait.aligned;)", {32, 1, 1}));
  b.manifest.cluster = {2, 1, 1};
  Device d;
  const uint64_t out = *d.Allocate(4 * 4 * 4);
  absl::StatusOr<Stats> s = Launch(d, b, {4, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}, {.seed = 2});
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<uint32_t> v(4 * 4);
  ASSERT_TRUE(d.CopyOut(v.data(), out, v.size() * 4).ok());
  for (uint32_t cta = 0; cta < 4; ++cta) {
    EXPECT_EQ(v[cta * 4], (cta % 2) << 24) << cta;  // its own window: its rank above the offset
    EXPECT_EQ(v[cta * 4 + 1], 0u) << cta;            // rank 0's: the bare offset
    EXPECT_EQ(v[cta * 4 + 2], cta) << cta;           // its own bytes, through its own address
  }
}

// Options::only_clusters: the listed CTAs run and see the whole grid; the others never start.
// Each thread of each CTA that runs writes %nctaid.x at out[ctaid * 32 + tid].
TEST(Emulator, OnlyTheListedClustersRun) {
  rt::Bundle b = Kernel(R"(
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %nctaid.x;
	mad.lo.u32 %r4, %r2, 32, %r1;
	mul.wide.u32 %rd4, %r4, 4;
	add.s64 %rd5, %rd1, %rd4;
	st.global.u32 [%rd5], %r3;)", {32, 1, 1});
  Device d;
  const uint64_t out = *d.Allocate(4 * 32 * 4);
  ASSERT_TRUE(d.Fill(out, 0, 4 * 32 * 4).ok());
  absl::StatusOr<Stats> s = Launch(d, b, {4, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}, {.seed = 3, .only_clusters = {3, 1}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->blocks, 2);
  std::vector<uint32_t> v(4 * 32);
  ASSERT_TRUE(d.CopyOut(v.data(), out, v.size() * 4).ok());
  for (int cta = 0; cta < 4; ++cta)
    for (int t = 0; t < 32; ++t) EXPECT_EQ(v[cta * 32 + t], cta % 2 ? 4u : 0u) << cta << " " << t;
  absl::StatusOr<Stats> outside = Launch(d, b, {4, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(0)}, {.only_clusters = {4}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("cluster 4 to run is not in a grid of 4 clusters"), absl::string_view::npos)
      << outside.status();
}

TEST(Emulator, ErrorsNameTheLaunchingLine) {
  rt::Bundle b = Spinner();
  Device d;
  uint64_t out = *d.Allocate(4);
  absl::StatusOr<Stats> refused = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out)}); const int refused_line = __LINE__;
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::EndsWith(refused.status().message(),
                             absl::StrCat("emulator_test.cc:", refused_line, ")")))
      << refused.status();
  EXPECT_NE(refused.status().message().find("(launched at "), absl::string_view::npos);
  absl::StatusOr<Stats> spun = Launch(d, b, {1, 1, 1}, {rt::Arg::Ptr(out), rt::Arg::I32(1)}, {.max_instructions = 1000}); const int spun_line = __LINE__;
  ASSERT_FALSE(spun.ok());
  EXPECT_TRUE(absl::EndsWith(spun.status().message(), absl::StrCat("emulator_test.cc:", spun_line, ")")))
      << spun.status();
}

// Generic-proxy writes to shared memory reach a TMA store only through fence.proxy.async (PTX
// ISA, memory consistency model: proxies). Each thread writes its id; thread 0 stores the 32
// words with a 1D tensor map.
// A one-warp sm_90a kernel `emu` whose one parameter is a 1D tensor map of f32 in boxes of 32,
// over `tensor`.
rt::Bundle OneMapKernel(const std::string& name, const std::string& tensor, int smem_bytes) {
  rt::Bundle b;
  b.manifest.name = name;
  b.manifest.entry = "emu";
  b.manifest.target = "sm_90a";
  b.manifest.block = {32, 1, 1};
  b.manifest.smem_bytes = smem_bytes;
  b.manifest.source = "emulator_test.cc:2";
  rt::ParamSpec map{"map", rt::ParamSpec::Kind::kTensorMap};
  map.tensor_map.tensor = tensor;
  map.tensor_map.dtype = rt::TmaDtype::kF32;
  map.tensor_map.box = {32};
  b.manifest.params = {map};
  return b;
}

// The start of such a kernel's PTX, up to %r1 = the thread and %r2 = smem; `more_params` follow
// the map's.
std::string OneMapKernelStart(const std::string& more_params = "") {
  return absl::StrCat(R"(.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry emu(
	.param .align 64 .b8 emu_param_0[128])", more_params, R"(
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<6>;
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, smem;
)");
}

// The end of such a kernel: thread 0 (%p1 false) stores the 32 words at smem (%r2) through the
// map, its box at `column`, and waits until the store has read them.
std::string StoreTheWordsThroughTma(int column) {
  return absl::StrCat(R"(	@%p1 bra $L__end;
	mov.b64 %rd1, emu_param_0;
	cvta.param.u64 %rd2, %rd1;
	mov.b32 %r5, )", column, R"(;
	cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%rd2, {%r5}], [%r2];
	cp.async.bulk.commit_group;
	cp.async.bulk.wait_group.read 0;
$L__end:
	ret;
}
)");
}

// The box's innermost coordinate is `column` (32-bit elements).
absl::Status StoreThroughTma(bool fence, std::vector<uint32_t>* out, int column = 0) {
  rt::Bundle b = OneMapKernel("test/proxy", "out", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), R"(	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	st.shared.b32 [%r4], %r1;
)", fence ? "\tfence.proxy.async.shared::cta;\n" : "", R"(	bar.sync 0;
	setp.ne.s32 %p1, %r1, 0;
)", StoreTheWordsThroughTma(column));
  Device d;
  uint64_t dst = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(dst, {32}, {})});
  out->assign(32, 0);
  EXPECT_TRUE(d.CopyOut(out->data(), dst, 128).ok());
  return s.status();
}

// A tensor map that describes more than its tensor's allocation holds (here 64 words over 32):
// the copy that leaves the allocation names itself, its map and the map's dims.
TEST(Emulator, ATmaCopyPastItsAllocationNamesTheMap) {
  rt::Bundle b = OneMapKernel("test/proxy", "out", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), R"(	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	st.shared.b32 [%r4], %r1;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	setp.ne.s32 %p1, %r1, 0;
)", StoreTheWordsThroughTma(32));
  Device d;
  uint64_t dst = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(dst, {64}, {})});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("a TMA store writes global address"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("its box at (32) of tensor map map over out, dims (64)"), std::string::npos)
      << s.status();
}

// Thread 0 of such a kernel (the others branch to $L__end) starts a TMA load of the map's first
// 32 words into smem (%r2), completing on the mbarrier at smem + 512 (initialised for one
// arrival): %rd2 holds the map, %r5 the box's coordinate 0.
std::string ThreadZeroLoadsTheMap() {
  return R"(	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__end;
	mbarrier.init.shared.b64 [%r2+512], 1;
	mov.b64 %rd1, emu_param_0;
	cvta.param.u64 %rd2, %rd1;
	mov.b32 %r5, 0;
	mbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2+512], 128;
	cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r5}], [%r2+512];
)";
}

// A first wait on a phase no thread has arrived in (a producer waiting for a free stage on the
// parity its consumers complete later): the deadlock report names the other parity, which a fresh
// mbarrier's previous phase completes at once; with it the same kernel ends.
TEST(Emulator, AFirstWaitOnTheWrongParityIsNamedInTheDeadlock) {
  for (int parity : {0, 1}) {
    rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
    b.ptx = absl::StrCat(OneMapKernelStart(), R"(	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__end;
	mbarrier.init.shared.b64 [%r2+512], 1;
$L__wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], )", parity, R"(;
	@!%p2 bra $L__wait;
$L__end:
	ret;
}
)");
    Device d;
    uint64_t src = *d.Allocate(128);
    absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})});
    if (parity == 1) {
      EXPECT_TRUE(s.ok()) << s.status();
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("1 thread waits on the mbarrier at shared offset 512 for its "
                                        "phase of parity 0"),
              std::string::npos)
        << s.status();
    EXPECT_NE(s.status().message().find("no thread has arrived in this phase yet"), std::string::npos)
        << s.status();
    EXPECT_NE(s.status().message().find("wait for the phase before it instead (parity 1)"),
              std::string::npos)
        << s.status();
  }
}

// A wait for a later phase that no thread arrives in (the arrivers' loop ran fewer rounds): the
// deadlock report says the arrivals stopped, not that the parity is wrong (the other parity
// would only pass a phase already waited for).
TEST(Emulator, AWaitPastTheLastArrivalsRoundSaysTheArrivalsStopped) {
  rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), R"(	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__end;
	mbarrier.init.shared.b64 [%r2+512], 1;
	mbarrier.arrive.shared.b64 %rd3, [%r2+512];
$L__first:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 0;
	@!%p2 bra $L__first;
$L__second:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 1;
	@!%p2 bra $L__second;
$L__end:
	ret;
}
)");
  Device d;
  uint64_t src = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no thread has arrived in this phase yet, after 1 phases completed: the "
                                      "threads that arrive on it wait elsewhere (listed here), or "
                                      "stopped before this wait's round"),
            std::string::npos)
      << s.status();
  EXPECT_EQ(s.status().message().find("wait for the phase before it instead"), std::string::npos) << s.status();
}

// A stage read after its next load was issued into it, by a thread that waited for the load
// before (a consumer that released the stage before reading it): the report says that, not that
// a wait is missing.
TEST(Emulator, AStageReadUnderItsNextLoadSaysItWasReleasedEarly) {
  rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), ThreadZeroLoadsTheMap(), R"($L__first:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 0;
	@!%p2 bra $L__first;
	mbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2+512], 128;
	cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r5}], [%r2+512];
	ld.shared.b32 %r6, [%r2];
$L__second:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 1;
	@!%p2 bra $L__second;
$L__end:
	ret;
}
)");
  Device d;
  uint64_t src = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})}, {.seed = 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("which a TMA load still in flight will write"), std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("this thread waited for the stage's previous load (phase 0 of the "
                                      "mbarrier at shared offset 512) and still reads it"),
            std::string::npos)
      << s.status();
}

// A TMA load that completes on a barrier no mbarrier.init set up (a cluster's Inits not yet run
// in the CTA a peer's multicast lands in, in a new user's trial): the load's PTX line, and what
// orders an init before a load (the message had named neither).
TEST(Emulator, ALoadOnABarrierNeverInitialisedNamesTheLoad) {
  rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), R"(	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__end;
	mov.b64 %rd1, emu_param_0;
	cvta.param.u64 %rd2, %rd1;
	mov.b32 %r5, 0;
	mbarrier.init.shared.b64 [%r2+520], 1;
	cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r5}], [%r2+512];
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+520], 0;
	mbarrier.arrive.shared.b64 %rd3, [%r2+520];
$L__wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+520], 0;
	@!%p2 bra $L__wait;
$L__end:
	ret;
}
)");
  Device d;
  uint64_t src = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})}, {.seed = 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("PTX line 20 (cp.async.bulk.tensor.1d"), std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("a TMA load completes on shared offset 512, which holds no "
                                      "initialised mbarrier: its mbarrier.init has not run yet"),
            std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("a ClusterSync after them"), std::string::npos) << s.status();
}

// A TMA load that no thread waits for, still in flight when the block's threads have all exited
// (a producer's load past the last stage a consumer waits for), is an error.
TEST(Emulator, ATmaLoadInFlightAtExitIsAnError) {
  rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
  b.ptx = absl::StrCat(OneMapKernelStart(), ThreadZeroLoadsTheMap(), R"($L__end:
	ret;
}
)");
  Device d;
  uint64_t src = *d.Allocate(128);
  absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})}, {.seed = 0});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("has exited with this TMA load still in flight"), std::string::npos)
      << s.status();
}

TEST(Emulator, TmaStoresNeedTheProxyFence) {
  std::vector<uint32_t> out;
  absl::Status s = StoreThroughTma(/*fence=*/true, &out);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], static_cast<uint32_t>(i));
  s = StoreThroughTma(/*fence=*/false, &out);
  ASSERT_FALSE(s.ok());
  // The write is named with its PTX line, so that the fence's place can be found.
  EXPECT_NE(s.message().find("a TMA store reads shared byte 0, which thread 0 wrote at PTX line "),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("through the generic proxy with no fence.proxy.async after it"),
            std::string::npos)
      << s;
}

// cp.async writes through the generic proxy (PTX ISA, cp.async), so bytes that a
// cp.async.mbarrier.arrive.noinc delivers reach the async proxy (here a TMA store) only through a
// fence.proxy.async by a thread that waited for the arrival's phase: after its wait, not before.
// Each of 32 threads copies one word of `in` into shared memory and arrives when it lands.
enum class CopyFence { kNone, kBeforeTheWait, kAfterTheWait, kOwnWaitAllThenFence };
absl::Status StoreCopiedWords(CopyFence fence, std::vector<uint32_t>* out) {
  rt::Bundle b = OneMapKernel("test/copied", "out", 1024);
  b.manifest.params.push_back({"in", rt::ParamSpec::Kind::kPointer});
  const char* before = fence == CopyFence::kBeforeTheWait ? "\tfence.proxy.async.shared::cta;\n" : "";
  const char* after = fence == CopyFence::kAfterTheWait ? "\tfence.proxy.async.shared::cta;\n" : "";
  b.ptx = absl::StrCat(OneMapKernelStart(",\n\t.param .u64 emu_param_1"), R"(	add.s32 %r6, %r2, 512;
	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__inited;
	mbarrier.init.shared::cta.b64 [%r6], 32;
$L__inited:
	bar.sync 0;
	ld.param.u64 %rd3, [emu_param_1];
	cvta.to.global.u64 %rd4, %rd3;
	mul.wide.u32 %rd5, %r1, 4;
	add.s64 %rd4, %rd4, %rd5;
	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	cp.async.ca.shared.global [%r4], [%rd4], 4;
	cp.async.mbarrier.arrive.noinc.shared.b64 [%r6];
)", before,
                       fence == CopyFence::kOwnWaitAllThenFence
                           ? "\tcp.async.wait_all;\n\tfence.proxy.async.shared::cta;\n\tbar.sync 0;\n"
                           : R"($L__wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r6], 0;
	@!%p2 bra $L__wait;
)",
                       after, StoreTheWordsThroughTma(0));
  Device d;
  uint64_t dst = *d.Allocate(128);
  std::vector<uint32_t> words(32);
  for (int i = 0; i < 32; ++i) words[i] = 1000 + i;
  absl::StatusOr<uint64_t> in = d.Upload(words.data(), 128);
  EXPECT_TRUE(in.ok()) << in.status();
  absl::StatusOr<Stats> s =
      Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(dst, {32}, {}), rt::Arg::Ptr(*in)}, {.seed = 7});
  out->assign(32, 0);
  EXPECT_TRUE(d.CopyOut(out->data(), dst, 128).ok());
  return s.status();
}

TEST(Emulator, CopiesTrackedByAnMbarrierNeedTheWaitersProxyFence) {
  std::vector<uint32_t> out;
  // A wait for the arrival, or each thread's own wait_all, then the fence.
  for (CopyFence right : {CopyFence::kAfterTheWait, CopyFence::kOwnWaitAllThenFence}) {
    absl::Status s = StoreCopiedWords(right, &out);
    ASSERT_TRUE(s.ok()) << s;
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], static_cast<uint32_t>(1000 + i));
  }
  for (CopyFence wrong : {CopyFence::kNone, CopyFence::kBeforeTheWait}) {
    absl::Status s = StoreCopiedWords(wrong, &out);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("a cp.async's bytes reach the async proxy once a thread that "
                               "waited for them runs fence.proxy.async"),
              std::string::npos)
        << s;
  }
}

// A TMA box starts on a 16-byte boundary of its tensor's rows: 4 elements of 4 bytes in is one,
// 3 is not (the GPU raises an illegal instruction).
TEST(Emulator, ATmaBoxStartsOnA16ByteBoundary) {
  std::vector<uint32_t> out;
  absl::Status s = StoreThroughTma(/*fence=*/true, &out, /*column=*/4);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[4], 0u);
  EXPECT_EQ(out[31], 27u);
  s = StoreThroughTma(/*fence=*/true, &out, /*column=*/3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("innermost coordinate 3 (4-byte elements) is not on a 16-byte"),
            std::string::npos)
      << s;
}

// Programmatic dependent launch (PTX ISA, griddepcontrol): a kernel launched while the grids
// before it finish may touch global memory only after its griddepcontrol.wait, and a manifest
// that asks for such a launch must come with a kernel that waits.
absl::Status PriorGrids(const std::string& body, bool manifest_says) {
  rt::Bundle b = Sm90(Kernel(body));
  b.manifest.waits_for_prior_grids = manifest_says;
  absl::Status s;
  Emulate(b, 32, &s);
  return s;
}

TEST(Emulator, GlobalMemoryWaitsForThePriorGrids) {
  const std::string store = "\tst.global.u32 [%rd3], %r1;\n";
  EXPECT_TRUE(PriorGrids("\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n" + store, true).ok());
  absl::Status s = PriorGrids(store + "\tgriddepcontrol.wait;\n", true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("touches global memory before this thread's griddepcontrol.wait"), std::string::npos) << s;
  s = PriorGrids(store, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("its manifest says it waits for the grids before it (waits_for_prior_grids), but its "
                             "PTX has no griddepcontrol.wait"),
            std::string::npos)
      << s;
  EXPECT_TRUE(PriorGrids(store, false).ok());  // launched in stream order: nothing to wait for
}

// A wgmma with A from registers reads them until the wgmma.wait_group that covers it (PTX ISA,
// wgmma.mma_async: accessing the A fragment's registers before that wait is undefined). One
// warpgroup multiplies a 64x16 A of ones (registers) by a 16x8 B of ones (shared memory, no
// swizzle: 8-row core matrices of 16 bytes, the two halves of K 128 bytes apart); each D element
// is 16 (descriptor: start >> 4, LBO 128 >> 4 at bit 16, SBO 256 >> 4 at bit 32). `rewrite` puts
// a write to an A register between the commit and the wait.
absl::Status RegisterAWgmma(const std::string& rewrite, std::vector<uint32_t>* out,
                           bool fence = true) {
  rt::Bundle b = Sm90(Kernel(absl::StrCat(R"(	mov.u32 %r2, smem;
	shl.b32 %r3, %r1, 2;
	add.s32 %r4, %r2, %r3;
	mov.b32 %r5, 1065369472;
	st.shared.b32 [%r4], %r5;
	fence.proxy.async.shared::cta;
	bar.sync 0;
	mov.b32 %r6, %r5;
	mov.b32 %r7, %r5;
	mov.b32 %r8, %r5;
	cvt.u64.u32 %rd5, %r2;
	shr.u64 %rd5, %rd5, 4;
	or.b64 %rd5, %rd5, 68720001024;
)", fence ? "\twgmma.fence.sync.aligned;\n" : "", R"(	{
	.reg .pred p;
	setp.ne.b32 p, 0, 0;
	wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r10, %r11, %r12, %r13}, {%r5, %r6, %r7, %r8}, %rd5, p, 1, 1, 0;
	}
	wgmma.commit_group.sync.aligned;
)", rewrite, R"(
	wgmma.wait_group.sync.aligned 0;
	st.global.b32 [%rd3], %r10;
)"), {128, 1, 1}));
  absl::Status s;
  *out = Emulate(b, 128, &s);
  return s;
}

// The ISA's wgmma.fence before a warpgroup's first wgmma.mma_async.
TEST(Emulator, AWarpgroupsFirstWgmmaNeedsItsFence) {
  std::vector<uint32_t> out;
  rt::Bundle b;
  absl::Status s = RegisterAWgmma("", &out);
  ASSERT_TRUE(s.ok()) << s;
  s = RegisterAWgmma("", &out, /*fence=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the warpgroup's first wgmma.mma_async with no wgmma.fence before it"),
            std::string::npos) << s;
}

TEST(Emulator, AWgmmaReadsItsRegisterFragmentUntilItsWait) {
  std::vector<uint32_t> out;
  absl::Status s = RegisterAWgmma("", &out);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(AsF(out[i]), 16.0f) << "thread " << i;
  // The next k-step's fragment loaded into the same registers while this one may still run.
  s = RegisterAWgmma("\tmov.b32 %r6, 0;", &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("uses %r6 while the wgmma at PTX line"), std::string::npos) << s;
  EXPECT_NE(s.message().find("may still read it: an A fragment's register used before its wgmma.wait_group"),
            std::string::npos)
      << s;
}

// An L2 prefetch of a TMA box (cp.async.bulk.prefetch.tensor) has no effect a thread can see,
// but its operand must be a tensor map with one coordinate per dimension.
absl::Status PrefetchBox(const std::string& coords) {
  rt::Bundle b = OneMapKernel("test/prefetch", "in", 0);
  b.ptx = absl::StrCat(R"(.version 8.0
.target sm_90a
.address_size 64
.visible .entry emu(
	.param .align 64 .b8 emu_param_0[128]
)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	mov.b64 %rd1, emu_param_0;
	cvta.param.u64 %rd2, %rd1;
	mov.b32 %r5, 0;
	cp.async.bulk.prefetch.tensor.1d.L2.global.tile [%rd2, {)", coords, R"(}];
	ret;
}
)");
  Device d;
  uint64_t src = *d.Allocate(128);
  return Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})}).status();
}

TEST(Emulator, AnL2PrefetchOfABoxChecksItsMap) {
  absl::Status s = PrefetchBox("%r5");
  EXPECT_TRUE(s.ok()) << s;
  s = PrefetchBox("%r5, %r5");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a rank-1 tensor map with 2 coordinates"), std::string::npos) << s;
}

// Lane 0 of the consumer warp releases the stage once its own read and fence are done, with no
// SyncWarp: the producer's next load may land while another lane has read the stage but not yet
// reached its fence. Where a schedule shows it so, the report names the fence still ahead of that
// lane and the SyncWarp, not a fence missing; with the SyncWarp every schedule passes.
TEST(Emulator, ALaneThatReleasesAheadOfItsWarpMatesIsNamed) {
  for (bool synced : {false, true}) {
    SCOPED_TRACE(synced);
    rt::Bundle b = OneMapKernel("test/proxy", "in", 1024);
    b.manifest.block = {64, 1, 1};
    b.ptx = absl::StrCat(OneMapKernelStart(), R"(	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__inits_done;
	mbarrier.init.shared.b64 [%r2+512], 1;
	mbarrier.init.shared.b64 [%r2+520], 1;
$L__inits_done:
	bar.sync 0;
	setp.lt.u32 %p1, %r1, 32;
	@%p1 bra $L__producer;
$L__wait_full:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 0;
	@!%p2 bra $L__wait_full;
	sub.s32 %r6, %r1, 32;
	shl.b32 %r7, %r6, 2;
	add.s32 %r7, %r2, %r7;
	ld.shared.b32 %r3, [%r7];
)", [] {  // work on what it read
                           std::string work;
                           for (int i = 0; i < 48; ++i) work += "\tadd.s32 %r4, %r3, %r4;\n";
                           return work;
                         }(),
                         R"(	fence.proxy.async.shared::cta;
)", synced ? "\tbar.warp.sync -1;\n" : "", R"(	setp.ne.s32 %p1, %r6, 0;
	@%p1 bra $L__end;
	mbarrier.arrive.shared.b64 %rd4, [%r2+520];
	bra $L__end;
$L__producer:
	setp.ne.s32 %p1, %r1, 0;
	@%p1 bra $L__end;
	mov.b64 %rd1, emu_param_0;
	cvta.param.u64 %rd2, %rd1;
	mov.b32 %r5, 0;
	mbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2+512], 128;
	cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r5}], [%r2+512];
$L__wait_empty:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+520], 0;
	@!%p2 bra $L__wait_empty;
$L__wait_first:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 0;
	@!%p2 bra $L__wait_first;
	mbarrier.arrive.expect_tx.shared.b64 %rd3, [%r2+512], 128;
	cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd2, {%r5}], [%r2+512];
$L__wait_again:
	mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2+512], 1;
	@!%p2 bra $L__wait_again;
$L__end:
	ret;
}
)");
    int named = 0;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      SCOPED_TRACE(seed);
      Device d;
      uint64_t src = *d.Allocate(128);
      absl::StatusOr<Stats> s = Launch(d, b, {1, 1, 1}, {rt::Arg::Tensor(src, {32}, {})}, {.seed = seed});
      if (synced) {
        EXPECT_TRUE(s.ok()) << s.status();
        continue;
      }
      if (s.ok()) continue;  // (a schedule where every lane read and fenced before the release)
      const std::string message(s.status().message());
      if (getenv("KILN_PRINT_REPORTS")) std::cout << seed << ": " << message << "\n";
      if (message.find("a TMA load lands on shared byte") == std::string::npos) continue;
      ++named;
      EXPECT_NE(message.find("has not reached its fence.proxy.async (PTX line"), std::string::npos) << message;
      EXPECT_NE(message.find("a SyncWarp before one lane arrives"), std::string::npos) << message;
    }
    if (!synced) EXPECT_GT(named, 0) << "no schedule let the load land under an unfenced read";
  }
}

}  // namespace
}  // namespace kiln::emu
