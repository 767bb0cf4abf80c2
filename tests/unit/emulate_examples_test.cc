// The emulator on kernels the GPU has checked (ops/saxpy and the row ops, correct on an H100 at
// these kinds of shapes): it runs their PTX, as the compiler emitted it, to the fp64 reference's
// answer at ragged shapes that take every body of the row kernels, under two schedules.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "examples/gemm_epilogue.h"
#include "examples/harness.h"
#include "examples/host_data.h"
#include "examples/probe_check.h"
#include "examples/registry.h"
#include "examples/row_ops.h"
#include "gtest/gtest.h"
#include "tests/unit/built_bundle.h"
#include "kiln/lowering.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"
#include "kiln/emulator.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/gemm_choice.h"

namespace kiln::examples {
// The GEMM entry point's rule (kiln/ops/gemm_choice.h), checked here beside the kernels it picks.
using rt::CanonicalEpilogue;
using rt::ChooseGemm;
using rt::GemmChoice;
using rt::GemmOptions;
using rt::GemmVariantName;
namespace {

class EmulatedRowOp : public ::testing::TestWithParam<const char*> {};

TEST_P(EmulatedRowOp, MatchesTheReferenceAtRaggedShapes) {
  const rt::Bundle b = CachedBundle(GetParam());
  // 1x1; a 256-column row (32 threads x 1 chunk); 1000 (the 1024 layout, masked); 3001 (not a
  // multiple of 8: the loop body); 17 rows (a block and a bit).
  for (auto [rows, cols] : {std::pair{1, 1}, std::pair{17, 256}, std::pair{3, 1000}, std::pair{2, 3001}})
    for (uint64_t seed : {1, 7}) {
      RowOpOptions opt;
      opt.rows = rows, opt.cols = cols, opt.time = false;
      absl::StatusOr<RowOpResult> r = EmulateRowOp(b, opt, seed);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->passed) << GetParam() << " " << rows << "x" << cols << " seed " << seed << ": " << r->failure;
      EXPECT_LT(r->rel_error, 1e-2);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, EmulatedRowOp,
                         ::testing::Values("ops/softmax", "ops/rmsnorm", "ops/layernorm", "ops/softmax.f16",
                                           "ops/rmsnorm.f16", "ops/layernorm.f16", "ops/softmax.f32",
                                           "ops/rmsnorm.f32", "ops/layernorm.f32"),
                         [](const auto& info) {
                           std::string name = std::string(info.param).substr(4);
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// The op probes (examples/probes/): every result against the host's reference, at the probes'
// ragged default sizes, under two schedules. The GPU suite runs the same probes on an H100.
class EmulatedProbe : public ::testing::TestWithParam<const char*> {};

TEST_P(EmulatedProbe, EveryResultMatchesTheHost) {
  const rt::Bundle b = CachedBundle(GetParam());
  for (uint64_t seed : {1, 5}) {
    absl::StatusOr<ProbeResult> r = EmulateProbe(b, {.seed = seed}, seed);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->passed()) << ProbeReport(*r);
    EXPECT_GT(r->checked, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, EmulatedProbe,
                         ::testing::Values("probe/math", "probe/convert", "probe/warp", "probe/atomics",
                                           "probe/memory", "probe/wgmma_regs", "probe/cluster", "probe/cluster16"),
                         [](const auto& info) { return std::string(info.param).substr(6); });

// Bytes as integers: a float converted to s8 and to i8 rounds toward zero and clamps to the
// type's range (NaN gives 0), stored as single bytes beside each other (no word of a neighbour
// touched); loaded back, s8 extends its sign and i8 does not; byte arithmetic wraps.
TEST(EmulatedBytes, ConvertClampStoreAndLoadBack) {
  Kernel k("test/bytes", sm80(), {128});
  Value x = k.PtrParam("x", f32), q = k.PtrParam("q", s8), u = k.PtrParam("u", i8);
  Value back = k.PtrParam("back", f32), wrapped = k.PtrParam("wrapped", i32), count = k.I32Param("n");
  Value i = k.BlockIdx() * 128 + k.ThreadIdx();
  k.If(i < count, [&] {
    Value at = i.To(i64);
    Value v = k.Load(x + at);
    k.Store(q + at, v.To(s8));
    k.Store(u + at, v.To(i8));
    Value qs = k.Load(q + at), us = k.Load(u + at);
    k.Store(back + at, qs.To(s32).To(f32) * 1000.0f + us.To(i32).To(f32));
    k.Store(wrapped + at, (us + us).To(i32));  // mod 256, then widened: 2u past 255 wraps
  });
  absl::StatusOr<rt::Bundle> b = BundleOfBuilt(k);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->manifest.params[1].elem, "i8");
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<float> xs = {0.f, -0.5f, 3.7f, -3.7f, 127.9f, 128.f, -128.7f, -129.f, 255.5f, 256.f, 1e9f, -1e9f,
                           nan, inf, -inf, 200.f, -1.f};
  for (int j = 0; xs.size() < 301; ++j) xs.push_back(std::ldexp(static_cast<float>((j * 7919) % 2001 - 1000), -2));
  const int n = static_cast<int>(xs.size());
  emu::Device d;
  const uint64_t dx = *d.Allocate(4 * n), dq = *d.Allocate(n + 3), du = *d.Allocate(n + 3), db = *d.Allocate(4 * n),
                 dw = *d.Allocate(4 * n);
  std::vector<uint8_t> poison(n + 3, 0xA5);
  ASSERT_TRUE(d.CopyIn(dx, xs.data(), 4 * n).ok());
  ASSERT_TRUE(d.CopyIn(dq, poison.data(), n + 3).ok());
  ASSERT_TRUE(d.CopyIn(du, poison.data(), n + 3).ok());
  absl::StatusOr<emu::Stats> st =
      emu::Launch(d, *b, rt::Dim3{static_cast<unsigned>((n + 127) / 128), 1, 1},
                  {rt::Arg::Ptr(dx), rt::Arg::Ptr(dq), rt::Arg::Ptr(du), rt::Arg::Ptr(db), rt::Arg::Ptr(dw), rt::Arg::I32(n)});
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<int8_t> gq(n + 3);
  std::vector<uint8_t> gu(n + 3);
  std::vector<uint32_t> gw(n);
  std::vector<float> gb(n);
  ASSERT_TRUE(d.CopyOut(gq.data(), dq, n + 3).ok());
  ASSERT_TRUE(d.CopyOut(gu.data(), du, n + 3).ok());
  ASSERT_TRUE(d.CopyOut(gb.data(), db, 4 * n).ok());
  ASSERT_TRUE(d.CopyOut(gw.data(), dw, 4 * n).ok());
  for (int j = 0; j < n; ++j) {
    const double t = std::isnan(xs[j]) ? 0 : std::trunc(static_cast<double>(xs[j]));
    const int want_q = static_cast<int>(std::clamp(t, -128.0, 127.0));
    const int want_u = static_cast<int>(std::clamp(t, 0.0, 255.0));
    EXPECT_EQ(gq[j], want_q) << "x = " << xs[j];
    EXPECT_EQ(gu[j], want_u) << "x = " << xs[j];
    EXPECT_EQ(gb[j], want_q * 1000.0f + want_u) << "x = " << xs[j];
    EXPECT_EQ(gw[j], static_cast<uint32_t>(static_cast<uint8_t>(2 * want_u))) << "x = " << xs[j];
  }
  for (int j = n; j < n + 3; ++j) {
    EXPECT_EQ(gu[j], 0xA5) << "past the end: byte " << j;
    EXPECT_EQ(static_cast<uint8_t>(gq[j]), 0xA5) << "past the end: byte " << j;
  }
}

// GroupReduce once gave every group size the same barrier ids (group + 1): a reduction over
// groups of 128 then one over groups of 64 made warps 2-3 meet at id 2 with count 64 while
// warps 4-7 could still wait there with count 128. On an H100 that faulted (illegal
// instruction) at 256 blocks and passed at 4. The same ids, by hand: schedules where some warps
// run ahead find the mismatch and name both counts.
TEST(PlantedBugs, NamedBarrierIdsSharedByTwoGroupSizesAreCaught) {
  Kernel k("test/shared_bar_ids", sm80(), {256});
  Value p = k.PtrParam("p", i32);
  Value w = k.WarpId();
  for (int i = 0; i < 2; ++i) k.NamedBarrier(w / 4 + 1, 128);
  k.NamedBarrier(w / 2 + 1, 64); const int line = __LINE__;
  k.Store(p + (k.BlockIdx() * 256 + k.ThreadIdx()).To(i64), w);
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  const rt::Bundle b{def->manifest(), *ptx};
  int found = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    emu::Device d;
    uint64_t dp = *d.Allocate(4 * 256 * 4);
    absl::StatusOr<emu::Stats> s = emu::Launch(d, b, rt::Dim3{4, 1, 1}, {rt::Arg::Ptr(dp)}, {.seed = seed});
    if (s.ok()) continue;
    ++found;
    EXPECT_NE(s.status().message().find("threads here and 128 at the threads already waiting"), std::string::npos)
        << s.status();
    EXPECT_NE(s.status().message().find(absl::StrCat("emulate_examples_test.cc:", line)), std::string::npos)
        << s.status();
  }
  EXPECT_GT(found, 0);
}

// A launch whose dynamic shared memory passes the target's limit is refused, as the GPU refuses
// it, naming the line that sized it; one within the limit runs.
TEST(EmulatedLaunch, DynamicSharedMemoryOverTheTargetsLimitIsRefused) {
  Kernel k("test/smem_over", sm90a(), {32});
  Value out = k.PtrParam("out", f32);
  Value cols = k.I32Param("cols");
  Value row = k.SmemDynamic(f32, "cols*4"); const int line = __LINE__;
  k.Store(row + k.ThreadIdx(), k.F32(1));
  k.Store(out + k.ThreadIdx(), k.Load(row + k.ThreadIdx()));
  (void)cols;
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  const rt::Bundle b{def->manifest(), *ptx};
  emu::Device d;
  uint64_t dp = *d.Allocate(32 * 4);
  absl::StatusOr<emu::Stats> over = emu::Launch(d, b, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(dp), rt::Arg::I32(60000)});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find(absl::StrCat("emulate_examples_test.cc:", line)), std::string::npos) << over.status();
  EXPECT_NE(over.status().message().find("may have at most 232448"), std::string::npos) << over.status();
  EXPECT_TRUE(emu::Launch(d, b, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(dp), rt::Arg::I32(1000)}).ok());
}

// The GEMM entry point's copy of an operand TMA cannot stride: rows from any stride into rows 8
// elements apart, bit for bit, and nothing written past a row's end (the pad keeps its bytes).
TEST(EmulatedRestride, CopiesRowsBitForBitAndLeavesThePad) {
  const rt::Bundle b = CachedBundle("gemm/restride16");
  for (auto [rows, cols, lds] : {std::tuple{3, 1, 1}, std::tuple{2, 7, 9}, std::tuple{2, 2049, 2051}}) {
    const int ldd = (cols + 7) / 8 * 8;
    std::vector<uint16_t> src(rows * lds), dst(rows * ldd, 0xabcd);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
    emu::Device d;
    uint64_t ds = *d.Allocate(src.size() * 2), dd = *d.Allocate(dst.size() * 2);
    ASSERT_TRUE(d.CopyIn(ds, src.data(), src.size() * 2).ok());
    ASSERT_TRUE(d.CopyIn(dd, dst.data(), dst.size() * 2).ok());
    absl::StatusOr<emu::Stats> s = emu::Launch(d, b, {rt::Arg::Ptr(ds), rt::Arg::Ptr(dd), rt::Arg::I32(rows),
                                                      rt::Arg::I32(cols), rt::Arg::I32(lds), rt::Arg::I32(ldd)});
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(d.CopyOut(dst.data(), dd, dst.size() * 2).ok());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < ldd; ++c)
        ASSERT_EQ(dst[r * ldd + c], c < cols ? src[r * lds + c] : 0xabcd) << rows << "x" << cols << " at " << r << "," << c;
  }
}

TEST(EmulatedSaxpy, MatchesTheCpuAtRaggedSizes) {
  const rt::Bundle b = CachedBundle("ops/saxpy");
  for (int64_t n : {int64_t{1}, int64_t{777}, int64_t{3001}}) {
    std::vector<float> x(n), y(n + 1);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * i - 3, y[i] = 1.0f / (i + 1);
    y[n] = 12345.0f;  // past the end: must stay
    emu::Device d;
    uint64_t dx = *d.Allocate(n * 4), dy = *d.Allocate((n + 1) * 4);
    ASSERT_TRUE(d.CopyIn(dx, x.data(), n * 4).ok());
    ASSERT_TRUE(d.CopyIn(dy, y.data(), (n + 1) * 4).ok());
    absl::StatusOr<emu::Stats> s =
        emu::Launch(d, b, {rt::Arg::Ptr(dx), rt::Arg::Ptr(dy), rt::Arg::F32(1.5f), rt::Arg::I64(n)});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->blocks, (n + 255) / 256);
    std::vector<float> got(n + 1);
    ASSERT_TRUE(d.CopyOut(got.data(), dy, (n + 1) * 4).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], std::fma(1.5f, x[i], y[i])) << i;
    EXPECT_EQ(got[n], 12345.0f);
  }
}

// ops/stream_read must load every word it is given and none past them: a single word of the XOR
// that makes it write (0x9e3779b9, the kernel's), placed anywhere in the buffer, is found; placed
// one past the end, it is not. Blocks of 1024 words, the last one partly past the end.
TEST(EmulatedStreamRead, ReadsEveryWordAndNoneBeyond) {
  constexpr uint32_t kWrites = 0x9e3779b9u, kUntouched = 0x5a5a5a5au;
  const rt::Bundle b = CachedBundle("ops/stream_read");
  const int32_t n = 5 * 1024 + 700;
  for (int32_t at : {0, 1, 255, 256, 1023, 1024 + 3 * 256 + 17, 5 * 1024, n - 1, n}) {
    std::vector<uint32_t> words(4 * (n + 1), 0);
    words[4 * at] = kWrites;
    emu::Device d;
    uint64_t src = *d.Allocate(words.size() * 4), out = *d.Allocate(4);
    ASSERT_TRUE(d.CopyIn(src, words.data(), words.size() * 4).ok());
    ASSERT_TRUE(d.CopyIn(out, &kUntouched, 4).ok());
    absl::StatusOr<emu::Stats> s =
        emu::Launch(d, b, {rt::Arg::Ptr(src), rt::Arg::Ptr(out), rt::Arg::I32(n)});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->blocks, 6);
    uint32_t got = 0;
    ASSERT_TRUE(d.CopyOut(&got, out, 4).ok());
    EXPECT_EQ(got, at < n ? kWrites : kUntouched) << "the marked word at " << at << " of " << n;
  }
}

// A store into a peer's shared memory is seen by the peer after the cluster barrier, whose arrive
// releases it (PTX ISA, barrier.cluster); a relaxed arrive or no barrier leaves a race. Before
// the first access every CTA of the cluster must have started: a cluster barrier first.
TEST(EmulatorRaces, APeerStoreNeedsTheClusterBarriersRelease) {
  enum Form { kBarrier, kRelaxed, kNone, kNotStarted };
  for (Form form : {kBarrier, kRelaxed, kNone, kNotStarted}) {
    SCOPED_TRACE(form);
    Kernel k("test/peer_store", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    Value out = k.PtrParam("out", f32);
    SmemTile t = k.Smem(f32, 1, 32);
    Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
    if (form != kNotStarted) k.ClusterSync();
    const int store_line = __LINE__ + 1;
    k.Store(k.PeerPointer(t.At(0, tid), rank ^ 1), (tid + rank * 100).To(f32));
    const int arrive_line = __LINE__ + 2;
    if (form != kNone) {
      k.ClusterArrive(form == kRelaxed);
      k.ClusterWait();
    }
    k.Store(out + (rank * 32 + tid).To(i64), k.Load(t.At(0, tid)));
    k.ClusterSync();  // (no CTA leaves while its peer may still store into it)
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    emu::Device d;
    const uint64_t o = *d.Allocate(64 * 4);
    for (uint64_t seed : {1, 2}) {
      absl::StatusOr<emu::Stats> run = emu::Launch(d, *built, rt::Dim3{2, 1, 1}, {rt::Arg::Ptr(o)}, {.seed = seed});
      if (form == kBarrier) {
        ASSERT_TRUE(run.ok()) << run.status();
        std::vector<float> got(64);
        ASSERT_TRUE(d.CopyOut(got.data(), o, 64 * 4).ok());
        for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], static_cast<float>(i % 32 + (1 - i / 32) * 100)) << i;
        continue;
      }
      ASSERT_FALSE(run.ok());
      const std::string message(run.status().message());
      if (form == kNotStarted) {
        EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", store_line)), std::string::npos) << message;
        EXPECT_NE(message.find("before this thread has passed a cluster barrier: that CTA may not have started yet"),
                  std::string::npos)
            << message;
        continue;
      }
      // (Without a barrier the read may come first: its value is then one nothing had written.)
      const bool race = message.find("a data race on shared byte") != std::string::npos;
      const bool unwritten = message.find("from shared memory that nothing had written") != std::string::npos;
      EXPECT_TRUE(race || (form == kNone && unwritten)) << message;
      if (form == kRelaxed) {  // (the barrier was there: the message names its relaxed arrive)
        EXPECT_NE(message.find(absl::StrCat("was arrived at with .relaxed by that warp (PTX line")), std::string::npos) << message;
        EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", arrive_line)), std::string::npos) << message;
      }
    }
  }
}

// A plain access and another block's atomic of one global word race unless ordered (PTX ISA,
// memory consistency model: a data race is two conflicting accesses not both morally strong and
// not in causality order): one block storing a sum's first part while the others add theirs,
// or reading it while they add. All adds, or a word no atomic touches, pass.
TEST(EmulatorRaces, APlainAccessAndAnotherBlocksAtomicRace) {
  enum Form { kAllAdd, kStoreFirst, kReadWhileAdding };
  for (Form form : {kAllAdd, kStoreFirst, kReadWhileAdding}) {
    SCOPED_TRACE(form);
    Kernel k("test/plain_and_atomic", sm80(), {32});
    Value sum = k.PtrParam("sum", f32), seen = k.PtrParam("seen", f32);
    Value block = k.BlockIdx(), first = k.ThreadIdx() == 0;
    int plain_line = 0, atomic_line = 0;
    k.If(first, [&] {
      if (form == kStoreFirst) {
        k.If(block == 0, [&] {
          plain_line = __LINE__ + 1;
          k.Store(sum, k.F32(1));
        }, [&] {
          atomic_line = __LINE__ + 1;
          RedAdd(sum, k.F32(1));
        });
        return;
      }
      atomic_line = __LINE__ + 1;
      RedAdd(sum, k.F32(1));
      plain_line = __LINE__ + 1;
      if (form == kReadWhileAdding) k.If(block == 0, [&] { k.Store(seen, k.Load(sum)); });
    });
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    for (uint64_t seed : {1, 2, 3}) {
      emu::Device d;
      const uint64_t dsum = *d.Allocate(4), dseen = *d.Allocate(4);
      ASSERT_TRUE(d.Fill(dsum, 0, 4).ok());
      absl::StatusOr<emu::Stats> run = emu::Launch(d, *built, rt::Dim3{4, 1, 1}, {rt::Arg::Ptr(dsum), rt::Arg::Ptr(dseen)}, {.seed = seed});
      if (form == kAllAdd) {
        ASSERT_TRUE(run.ok()) << run.status();
        float got = 0;
        ASSERT_TRUE(d.CopyOut(&got, dsum, 4).ok());
        EXPECT_EQ(got, 4.0f);
        continue;
      }
      ASSERT_FALSE(run.ok()) << "seed " << seed;
      const std::string message(run.status().message());
      EXPECT_NE(message.find("a race on global memory between clusters"), std::string::npos) << message;
      EXPECT_NE(message.find("an atomic and a plain access of one word race too"), std::string::npos) << message;
      // Whichever ran first, the report names both lines.
      for (int line : {plain_line, atomic_line})
        EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", line)), std::string::npos) << message;
    }
  }
}

// Round, Floor, Ceil and Trunc (cvt.rni/rmi/rpi/rzi.f32.f32) round to a whole number in f32, as
// C's nearbyint (ties to even), floor, ceil and trunc do; To(s32) truncates (cvt.rzi.s32.f32).
TEST(EmulatorMath, WholeNumberRoundings) {
  const std::vector<float> in = {2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.7f, 3.4999998f, 1e30f, -0.0f, 0.49999997f,
                                 8388609.0f, -1e-40f, INFINITY, -INFINITY, NAN, 7.0f};
  const int n = static_cast<int>(in.size());
  Kernel k("test/roundings", sm90a(), {static_cast<unsigned>(n)});
  Value x_ptr = k.PtrParam("x", f32), out = k.PtrParam("out", f32), whole = k.PtrParam("whole", s32);
  Value i = k.ThreadIdx();
  Value x = k.Load(x_ptr + i.To(i64));
  const Value rounded[] = {Round(x), Floor(x), Ceil(x), Trunc(x)};
  for (int r = 0; r < 4; ++r) k.Store(out + (i + r * n).To(i64), rounded[r]);
  k.Store(whole + i.To(i64), Round(x).To(s32));
  k.Store(whole + (i + n).To(i64), x.To(s32));
  absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
  ASSERT_TRUE(built.ok()) << built.status();
  emu::Device d;
  const uint64_t dx = *d.Allocate(n * 4), dout = *d.Allocate(4 * n * 4), dwhole = *d.Allocate(2 * n * 4);
  ASSERT_TRUE(d.CopyIn(dx, in.data(), n * 4).ok());
  absl::StatusOr<emu::Stats> run = emu::Launch(d, *built, rt::Dim3{1, 1, 1},
                                               {rt::Arg::Ptr(dx), rt::Arg::Ptr(dout), rt::Arg::Ptr(dwhole)}, {.seed = 1});
  ASSERT_TRUE(run.ok()) << run.status();
  std::vector<float> got(4 * n);
  std::vector<int32_t> ints(2 * n);
  ASSERT_TRUE(d.CopyOut(got.data(), dout, got.size() * 4).ok());
  ASSERT_TRUE(d.CopyOut(ints.data(), dwhole, ints.size() * 4).ok());
  // A float's whole value as s32, saturated, NaN to 0 (PTX ISA, cvt: float to integer).
  auto saturated = [](float v) {
    if (std::isnan(v)) return 0;
    return static_cast<int32_t>(std::clamp<double>(v, -2147483648.0, 2147483647.0));
  };
  for (int j = 0; j < n; ++j) {
    SCOPED_TRACE(in[j]);
    const float want[] = {std::nearbyint(in[j]), std::floor(in[j]), std::ceil(in[j]), std::trunc(in[j])};
    for (int r = 0; r < 4; ++r) {
      if (std::isnan(want[r])) {
        EXPECT_TRUE(std::isnan(got[r * n + j])) << r;
        continue;
      }
      EXPECT_EQ(std::bit_cast<uint32_t>(got[r * n + j]), std::bit_cast<uint32_t>(want[r])) << r << ": " << got[r * n + j];
    }
    EXPECT_EQ(ints[j], saturated(std::nearbyint(in[j])));
    EXPECT_EQ(ints[n + j], saturated(std::trunc(in[j])));
  }
}

// The cluster barrier's halves misused: a second wait with no arrive since the last (it orders
// nothing), and a warp whose lanes arrive at two barrier sites in one phase, one of them
// ClusterSync's .aligned arrive (PTX ISA, barrier.cluster).
TEST(EmulatorClusters, MisusedBarrierHalvesAreNamed) {
  for (bool split_lane : {false, true}) {
    SCOPED_TRACE(split_lane);
    Kernel k("test/cluster_halves", sm90a(), {32});
    k.ClusterDims({2, 1, 1});
    Value out = k.PtrParam("out", f32);
    Value tid = k.ThreadIdx();
    int line = 0, other_line = -1;  // (either arrive may come second: both are named)
    if (split_lane) {
      other_line = __LINE__ + 1;
      k.If(tid == 0, [&] { k.ClusterArrive(); });
      k.If(tid == 0, [&] { k.ClusterWait(); });
      line = __LINE__ + 1;
      k.ClusterSync();
    } else {
      k.ClusterArrive();
      k.ClusterWait();
      line = __LINE__ + 1;
      k.ClusterWait();
    }
    k.Store(out + (k.ClusterCtaRank() * 32 + tid).To(i64), k.F32(1));
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    emu::Device d;
    const uint64_t o = *d.Allocate(64 * 4);
    absl::StatusOr<emu::Stats> run = emu::Launch(d, *built, rt::Dim3{2, 1, 1}, {rt::Arg::Ptr(o)}, {.seed = 1});
    ASSERT_FALSE(run.ok());
    const std::string message(run.status().message());
    EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", line)), std::string::npos) << message;
    if (split_lane)
      EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", other_line)), std::string::npos) << message;
    EXPECT_NE(message.find(split_lane ? "arrive at the cluster barrier at two instructions in one phase"
                                      : "no barrier.cluster.arrive since this thread's last wait"),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {
namespace {

// Every GEMM example of the series (Ampere, cuda_hgemm, Hopper, Blackwell) and the references,
// at its protocol size (ProtocolSize: 2x2 CTA tiles, K steps enough to wrap its deepest ring
// twice) under three schedules, against the fp64 product: mma.sync, ldmatrix and cp.async rings;
// TMA, mbarriers, wgmma, warp specialisation and setmaxnreg; persistent schedules and clusters
// with multicast TMA and remote arrivals; tcgen05 and tensor memory, CTA pairs and multicast
// commits. On a GPU, `kiln crosscheck` compares the Ampere and Hopper ones with the emulator
// element by element (docs/EMULATOR.md).
// By name, so that listing the tests builds no kernel (every test process lists them).
std::vector<std::string> SeriesGemms() {
  std::vector<std::string> names;
  for (const Example& e : All())
    for (const char* prefix : {"ampere/", "hgemm/", "hopper/", "blackwell/", "reference/"})
      if (e.name.rfind(prefix, 0) == 0) names.push_back(e.name);
  return names;
}

class EmulatedGemm : public ::testing::TestWithParam<std::string> {};

TEST_P(EmulatedGemm, MatchesFp64AtItsProtocolSizeUnderThreeSchedules) {
  const rt::Bundle b = CachedBundle(GetParam());
  const GemmSpec g = *GemmOf(b.manifest);
  RunOptions opt;
  opt.size = ProtocolSize(b, g);
  if (GetParam().rfind("reference/", 0) == 0) opt.size = {48, 40, 24};  // one thread per element: kept small
  EXPECT_GE(opt.size.m, 2 * g.BlockM());
  EXPECT_GE(opt.size.n, 2 * g.BlockN());
  if (IsPersistent(b)) {  // every CTA (cluster) of the emulator's grid runs at least two tiles
    absl::StatusOr<rt::Dim3> grid = EmulatedGemmGrid(b, g, opt.size, 132);
    ASSERT_TRUE(grid.ok()) << grid.status();
    const int64_t tiles = opt.size.m / g.BlockM() * (opt.size.n / g.BlockN());
    EXPECT_GE(tiles, 2 * static_cast<int64_t>(grid->x / std::max(1u, b.manifest.cluster.x))) << GetParam();
  }
  if (HasBuiltInCtaCount(b)) {  // twice the tiles of its CTAs; two of its clusters run
    absl::StatusOr<rt::Dim3> grid = EmulatedGemmGrid(b, g, opt.size, 132);
    ASSERT_TRUE(grid.ok()) << grid.status();
    EXPECT_GE(Tiles(g, opt.size), 2 * static_cast<int64_t>(grid->count())) << GetParam();
    EXPECT_EQ(EmulatedClusters(b, g, opt.size, *grid).size(), 2u) << GetParam();
  }
  absl::StatusOr<std::vector<GemmResult>> rs = EmulateGemmSchedules(b, opt, {1, 2, 3});
  ASSERT_TRUE(rs.ok()) << rs.status();
  for (const GemmResult& r : *rs) {
    EXPECT_TRUE(r.passed) << GetParam() << " seed " << r.schedule_seed << ": " << r.failure;
    EXPECT_EQ(r.coverage.empty(), !HasBuiltInCtaCount(b)) << GetParam() << ": " << r.coverage;
  }
}

// Which kernels the emulator's grid shrinks: those that stride over the tiles by their launched
// grid and those that take a work table (built for the shrunk grid's clusters), not those with a
// CTA count built in (the worklogs' 128) nor one CTA a tile.
TEST(EmulatedGemmGrid, ShrinksPersistentKernelsToTwoTilesACta) {
  for (const char* name : {"blackwell/persist_pipelined", "blackwell/v6", "blackwell/v7b",
                           "gemm/bf16_sm90", "gemm/bf16_sm90_m64", "hopper/k13"})
    EXPECT_TRUE(IsPersistent(CachedBundle(name))) << name;
  for (const char* name : {"hopper/k06", "hopper/k10", "hopper/k04"})
    EXPECT_FALSE(IsPersistent(CachedBundle(name))) << name;
  EXPECT_TRUE(HasBuiltInCtaCount(CachedBundle("hopper/k06")));
  EXPECT_TRUE(HasBuiltInCtaCount(CachedBundle("hopper/k10")));
  EXPECT_FALSE(HasBuiltInCtaCount(CachedBundle("hopper/k04")));  // one CTA a tile
  EXPECT_FALSE(HasBuiltInCtaCount(CachedBundle("blackwell/persist_pipelined")));
  const rt::Bundle table = CachedBundle("gemm/bf16_sm90_m64");
  rt::Dim3 table_grid;
  absl::StatusOr<rt::Bundle> shrunk =
      EmulatedGemmBundle(table, *GemmOf(table.manifest), {256, 256, 128}, 132, &table_grid);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_LT(table_grid.x, 128u);
  for (const rt::ParamSpec& p : shrunk->manifest.params)
    if (p.kind == rt::ParamSpec::Kind::kScheduleTable)
      EXPECT_EQ(p.schedule.groups, static_cast<int>(table_grid.x / table.manifest.cluster.x));
  const rt::Bundle b = CachedBundle("blackwell/persist_pipelined");
  absl::StatusOr<rt::Dim3> grid = EmulatedGemmGrid(b, *GemmOf(b.manifest), {256, 512, 128}, 132);
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(grid->x, 2u);  // four tiles, two CTAs
}

INSTANTIATE_TEST_SUITE_P(Examples, EmulatedGemm, ::testing::ValuesIn(SeriesGemms()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '/') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {
namespace {

// Planted bugs in hopper/k02's PTX, each caught: the emulator runs the text the GPU would get.
rt::Bundle Mutated(const std::string& from, const std::string& to) {
  rt::Bundle b = BundleWithLines("hopper/k02");
  size_t at = 0, count = 0;
  while ((at = b.ptx.find(from, at)) != std::string::npos) {
    b.ptx.replace(at, from.size(), to);
    at += to.size();
    ++count;
  }
  EXPECT_GT(count, 0u) << from;
  return b;
}

TEST(PlantedBugs, AnArrivalCountOneTooHighDeadlocks) {
  rt::Bundle b = Mutated("mov.b32 \t%r12, 128;", "mov.b32 \t%r12, 129;");
  RunOptions opt;
  opt.size = {64, 64, 128};
  absl::StatusOr<GemmResult> r = EmulateGemm(b, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("deadlock in block (0,0,0): every live thread waits: 128 threads wait on the "
                                      "mbarrier at shared offset 16384 for its phase of parity 0 (1 of 129 arrivals "
                                      "pending, transaction count 0; PTX line "),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find(", examples/hopper/k02_wgmma.cc:"), std::string::npos) << r.status();
}

// hopper/k02 without its consumers' try_wait loops: nothing holds them until the tiles land.
rt::Bundle WithoutTheWaits() {
  rt::Bundle b = Mutated("@!done bra.uni", "// @!done bra.uni");
  for (const char* wait : {"mbarrier.try_wait.parity.shared::cta.b64 done, [%r38], %r40;",
                           "mbarrier.try_wait.parity.shared::cta.b64 done, [%r39], %r40;"}) {
    size_t at = b.ptx.find(wait);
    EXPECT_NE(at, std::string::npos) << wait;
    if (at != std::string::npos) b.ptx.replace(at, std::string(wait).size(), "");
  }
  return b;
}

TEST(PlantedBugs, AMissingWaitIsCaught) {
  // With the loads landing as late as the ISA allows (seed 0), the wgmma reads them in flight.
  rt::Bundle b = WithoutTheWaits();
  RunOptions opt;
  opt.size = {64, 64, 128};
  absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, /*schedule_seed=*/0);
  ASSERT_FALSE(r.ok());
  // The first wgmma reads the tile the TMA load has not written: said at the wgmma's DSL line,
  // naming the load's.
  EXPECT_EQ(r.status().message().rfind("examples/hopper/k02_wgmma.cc:", 0), 0u) << r.status();
  EXPECT_NE(r.status().message().find("wgmma reads shared bytes 0..1, which a TMA load still in flight will write "
                                      "(issued at PTX line "),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("the wait for its mbarrier is missing or comes too late"), std::string::npos);
}

// The same kernel under schedules that land the loads early: the bytes are there when the wgmma
// reads them, but nothing ordered the landing before it (the TMA load's bytes are a write released
// only into its mbarrier's phase), so every schedule reports it, naming the load and the phase.
TEST(PlantedBugs, AReadOfLandedBytesNotWaitedForIsCaughtUnderEverySchedule) {
  rt::Bundle b = WithoutTheWaits();
  for (uint64_t seed : {1, 2, 3}) {
    RunOptions opt;
    opt.size = {64, 64, 128};
    absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, seed);
    ASSERT_FALSE(r.ok()) << "seed " << seed;
    EXPECT_NE(r.status().message().find("which the TMA load at PTX line "), std::string::npos)
        << "seed " << seed << ": " << r.status();
    EXPECT_NE(r.status().message().find("had not waited for that phase"), std::string::npos)
        << "seed " << seed << ": " << r.status();
  }
}

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {
namespace {

// Blackwell kernels, which no GPU here can run: tcgen05 allocation, MMAs from descriptors,
// commits to mbarriers and tcgen05.ld epilogues, on the emulator.
TEST(EmulatedBlackwell, V4IsCorrectUnderEverySchedule) {
  const rt::Bundle b = CachedBundle("blackwell/v4");
  for (uint64_t seed : {0, 1, 2, 3, 4}) {
    RunOptions opt;
    opt.size = {128, 128, 256};
    absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, seed);
    ASSERT_TRUE(r.ok()) << "seed " << seed << ": " << r.status();
    EXPECT_TRUE(r->passed) << "seed " << seed << ": " << r->failure;
  }
}

// Seed 002's v1-v3 as upstream wrote them: every thread waits on the one barrier twice per k-tile,
// so a thread still polling for a k-tile's loads can find the leader two phases on (the MMAs done,
// the next loads landed) and wait a k-tile late, then at the end for a phase that never comes.
// Some schedules find it and say so; kiln's v1-v3 let the leader alone wait (v1_v2.cc) and pass
// every schedule above.
TEST(PlantedBugs, UpstreamPerTileWaitsFallTwoPhasesBehind) {
  const rt::Bundle b = BundleWithLines("planted/bw_upstream_waits");
  const GemmSpec g = *GemmOf(b.manifest);
  int found = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    RunOptions opt;
    opt.size = {g.tile_m, g.tile_n, 2 * g.tile_k};
    absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, seed);
    if (r.ok()) {
      EXPECT_TRUE(r->passed) << "seed " << seed << ": " << r->failure;
      continue;
    }
    EXPECT_NE(r.status().message().find("it fell two phases behind"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("examples/blackwell/v1_v2.cc:"), std::string::npos) << r.status();
    ++found;
  }
  EXPECT_GT(found, 0);
}

// blackwell/v4 on the emulator at 128x128x256 with `edit` made to its PTX at its tcgen05.alloc
// line (`at`: the line's start, `end`: past its newline).
absl::StatusOr<GemmResult> EmulateV4Edited(const std::function<void(std::string&, size_t, size_t)>& edit) {
  rt::Bundle b = CachedBundle("blackwell/v4");
  const size_t at = b.ptx.find("\ttcgen05.alloc.cta_group::1");
  if (at == std::string::npos) return absl::NotFoundError("no tcgen05.alloc in blackwell/v4");
  edit(b.ptx, at, b.ptx.find('\n', at) + 1);
  RunOptions opt;
  opt.size = {128, 128, 256};
  return EmulateGemm(b, opt, 1);
}

// A CTA that gave up its permit to allocate tensor memory allocates no more (PTX ISA,
// tcgen05.relinquish_alloc_permit): here the permit is relinquished before the kernel's alloc.
TEST(PlantedBugs, AnAllocAfterRelinquishingThePermitIsReported) {
  absl::StatusOr<GemmResult> r = EmulateV4Edited([](std::string& ptx, size_t at, size_t) {
    ptx.insert(at, "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n");
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tcgen05.alloc after this CTA relinquished its permit"),
            std::string::npos)
      << r.status();
}

// The same slot allocated twice (the alloc line repeated): the first allocation leaks, and the
// report at the block's exit names the alloc that wrote its slot again.
TEST(PlantedBugs, TensorMemoryAllocatedTwiceIsNamedInTheLeak) {
  absl::StatusOr<GemmResult> r = EmulateV4Edited([](std::string& ptx, size_t at, size_t end) {
    ptx.insert(end, ptx.substr(at, end - at));
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exits with 128 columns of tensor memory still allocated"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("wrote again before a dealloc (the same tensor memory "
                                      "allocated twice?)"),
            std::string::npos)
      << r.status();
}

TEST(PlantedBugs, ATensorMemoryLeakIsReported) {
  rt::Bundle b = CachedBundle("blackwell/v4");
  const std::string dealloc = "tcgen05.dealloc.cta_group::1.sync.aligned.b32";
  size_t at = b.ptx.find(dealloc);
  ASSERT_NE(at, std::string::npos);
  b.ptx.replace(at, b.ptx.find('\n', at) - at, "");  // the dealloc is gone
  RunOptions opt;
  opt.size = {128, 128, 256};
  absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exits with 128 columns of tensor memory still allocated"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("by the tcgen05.alloc at PTX line"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {
namespace {

// kiln crosscheck's rule (CompareOutputs): bit-equal, or within one output ulp plus rel times the
// element's scale (sum_k |a_ik b_kj|); NaN never agrees.
TEST(Crosscheck, OutputsAgreeWithinAnUlpAndTheScaleNotBeyond) {
  const GemmSpec g;  // bf16 in and out, f32 accumulators, C row-major
  const rt::GemmSize s{1, 5, 16};
  const std::vector<double> scale = {100, 100, 100, 100, 100};
  auto bf16 = [](float f) { return FloatToBf16(f); };
  // 32 and 32.25 are neighbours in bf16 (ulp 0.25 in [32, 64)); 32.5 is two ulps off; an
  // element near zero may differ by 1e-5 * 100 = 1e-3 however small it is.
  const std::vector<uint16_t> gpu = {bf16(32), bf16(32), bf16(32), bf16(0.0005f), bf16(1)};
  const std::vector<uint16_t> emu = {bf16(32), bf16(32.25f), bf16(32.5f), bf16(-0.0004f), uint16_t{0x7fc0}};
  const OutputAgreement a = CompareOutputs(g, s, emu, gpu, scale, 1e-5);
  EXPECT_EQ(a.equal, 1);
  EXPECT_EQ(a.close, 2);  // the neighbour, and the near-zero pair 9e-4 apart
  EXPECT_EQ(a.apart, 2);  // two ulps, and the NaN
  EXPECT_NEAR(a.worst, 0.5 / 100, 1e-9);
  EXPECT_NE(a.worst_element.find("(0,2): 32.5 vs 32"), std::string::npos) << a.worst_element;
  // The scales are those of the harness's inputs: |a| . |b| over K.
  const rt::GemmSize tiny{2, 3, 4};
  const std::vector<double> sc = ProductScales(g, tiny, 1);
  ASSERT_EQ(sc.size(), 6u);
  for (double v : sc) EXPECT_GT(v, 0);
}

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {
namespace {

// The GEMM entry point's kernels at sizes no tile divides. The Hopper ones: TMA's bounds
// zero-fill the loads past M, N and K and clip the stores (M and K multiples of 8, N anything).
// The skinny one: masks, and rows in passes (any M, K a multiple of 8).
void ExpectCorrectAt(const char* name, std::initializer_list<rt::GemmSize> sizes, int split = 1) {
  const rt::Bundle b = CachedBundle(name);
  for (const rt::GemmSize& size : sizes) {
    RunOptions opt;
    opt.size = size;
    opt.split = split;
    absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, 2);
    ASSERT_TRUE(r.ok()) << name << " split " << split << " " << size.m << "x" << size.n << "x" << size.k << ": "
                        << r.status();
    EXPECT_TRUE(r->passed) << name << " split " << split << " " << size.m << "x" << size.n << "x" << size.k << ": "
                           << r->failure;
  }
}

// The entry point's Hopper tile kernels, as registered (gemm/bf16_sm90 and its other tiles).
std::vector<std::string> TileKernels() {
  std::vector<std::string> bases;
  for (const ExampleFamily& f : Families())
    if (f.base.rfind("gemm/bf16_sm90", 0) == 0) bases.push_back(f.base);
  return bases;
}

TEST(EmulatedGemmEntryPoint, TheTileKernelsAtRaggedSizes) {
  const std::vector<std::string> tiles = TileKernels();
  // Every kernel the rule and kiln tune weigh is one of them.
  for (const rt::GemmChoice& c : rt::GemmCandidates({4096, 4096, 4096}, 90))
    if (c.kernel.rfind("gemm/bf16_sm90", 0) == 0)
      EXPECT_NE(std::find(tiles.begin(), tiles.end(), c.kernel), tiles.end()) << c.kernel << " is not registered";
  EXPECT_GE(tiles.size(), 8u);
  for (const std::string& name : tiles)
    ExpectCorrectAt(name.c_str(), {{264, 300, 200}, {8, 1, 8}, {520, 7, 72}, {128, 257, 64}});
}

// A tile with at most half its rows before M loads A in 16-row boxes, those before M only
// (TmaGemmOperands::ACopies). The 64-row tiles: 24 rows (the second box straddles M), 88 (a whole
// tile, then 24 rows), 40 (one 64-row box, zero-filled past M); the pairs' second CTA past M
// loads no A at all. The 128-row tiles: 136 (one box straddling M), 160 (two), 296 and 320 (one
// box of 64 rows, past M from row 40 at 296; of the 256x256 pairs' last, the second CTA loads
// none), 200 (one 128-row box, zero-filled past M).
TEST(EmulatedGemmEntryPoint, TilesLoadOnlyTheRowsOfABeforeM) {
  for (const char* name : {"gemm/bf16_sm90_m64", "gemm/bf16_sm90_m64n32", "gemm/bf16_sm90_m64n64",
                           "gemm/bf16_sm90_m64n48.bf16-f32.scale.silu"})
    ExpectCorrectAt(name, {{24, 130, 136}, {88, 70, 72}, {40, 33, 64}});
  ExpectCorrectAt("gemm/bf16_sm90_m64n80.bf16-bf16.any_m", {{21, 90, 64}});
  for (const char* name : {"gemm/bf16_sm90", "gemm/bf16_sm90_n128", "gemm/bf16_sm90_n160.bf16-bf16.bias_row"})
    ExpectCorrectAt(name, {{136, 70, 136}, {160, 33, 64}, {296, 70, 72}, {320, 130, 72}, {200, 33, 64}});
}

// Split-K (2 and 3 parts, the last with fewer k-tiles) and stream-K: each split tile's parts meet
// in the workspace. The harness launches twice on one emulated device, the clusters in another
// order the second time, and wants the same bytes: the counters were put back and the parts
// summed in a fixed order whichever came last.
TEST(EmulatedGemmEntryPoint, SplitKAndStreamKAtRaggedSizes) {
  for (const char* name : {"gemm/bf16_sm90", "gemm/bf16_sm90_n128", "gemm/bf16_sm90_n64", "gemm/bf16_sm90_m64",
                           "gemm/bf16_sm90_n80", "gemm/bf16_sm90_n160", "gemm/bf16_sm90_m64n64"})
    for (int split : {2, 3, 0}) ExpectCorrectAt(name, {{136, 200, 328}}, split);
  for (const char* name : {"gemm/bf16_sm90_m64n32", "gemm/bf16_sm90_m64n48", "gemm/bf16_sm90_m64n80"})
    ExpectCorrectAt(name, {{40, 200, 328}}, 2);  // the rule splits them in 2 at most
  // The 64x16 tiles as the rule takes them (C of few columns, in 4 or 8 parts), the last part of
  // each tile short, C of 5 and 16 columns, M no multiple of 8.
  for (int split : {4, 8}) ExpectCorrectAt("gemm/bf16_sm90_m64n16", {{200, 16, 1096}, {136, 5, 584}}, split);
  // Past 4 parts the parts meet in a tree of 4 children a node: 5 parts (a node of one child
  // passed up), 17 (three levels, the second's last node of one child), over two consumer
  // warpgroups' shares.
  for (int split : {5, 17}) ExpectCorrectAt("gemm/bf16_sm90_n128", {{136, 130, 1096}}, split);
  // The pairs sharing B as the rule splits them over a long K (12 parts; a cluster's four shares).
  ExpectCorrectAt("gemm/bf16_sm90_n128c2", {{136, 130, 1096}}, 12);
  ExpectCorrectAt("gemm/bf16_sm90_m64n16.bf16-f32.scale.bias_row.silu", {{131, 13, 1096}}, 4);
  ExpectCorrectAt("gemm/bf16_sm90_m64n16.bf16-bf16.any_m", {{141, 9, 520}}, 8);
  ExpectCorrectAt("gemm/bf16_sm90_n64.bf16-f32.scale.silu", {{131, 70, 200}}, 0);
  ExpectCorrectAt("gemm/bf16_sm90.bf16-bf16.a_mn.b_mn", {{136, 200, 328}}, 0);  // MN-major A and B
  ExpectCorrectAt("gemm/bf16_sm90_m64.bf16-bf16.a_mn.b_mn", {{136, 200, 75}});  // any K where both are
  ExpectCorrectAt("gemm/bf16_sm90_n128.bf16-bf16.any_m.scale.bias_col.gelu.residual", {{13, 130, 136}}, 2);
}

// The 128x192 pairs (the tile the tune table takes where N splits into 192-column tiles): whole
// tiles with ragged M and N (3 column tiles: a pair and one alone, the last past N), stream-K at a
// ragged K, and MN-major A and B (192 = three 64-wide blocks).
TEST(EmulatedGemmEntryPoint, The192ColumnPairsAtRaggedSizes) {
  ExpectCorrectAt("gemm/bf16_sm90_n192", {{136, 400, 136}});
  ExpectCorrectAt("gemm/bf16_sm90_n192", {{136, 200, 328}}, 0);
  ExpectCorrectAt("gemm/bf16_sm90_n192.bf16-bf16.a_mn.b_mn", {{136, 200, 72}});
}

// The strided kernel (K no multiple of 8, operands TMA cannot stride): edges in M, N and K (75:
// two k-steps and a ragged third), tiles of one row or column, in every storage order of A, B, C.
TEST(EmulatedGemmEntryPoint, TheStridedKernelAtAnySizeInEveryOrder) {
  const rt::Bundle b = CachedBundle("gemm/bf16_strided");
  for (const char* a : {"row", "col"})
    for (const char* bo : {"row", "col"})
      for (const char* c : {"row", "col"}) {
        GemmSpec g = *GemmOf(b.manifest);
        g.a_order = a, g.b_order = bo, g.c_order = c;
        rt::Bundle ordered = b;
        SetGemmSpec(ordered.manifest, g);
        for (const rt::GemmSize& size : {rt::GemmSize{130, 140, 75}, rt::GemmSize{7, 5, 3}, rt::GemmSize{1, 129, 33}}) {
          RunOptions opt;
          opt.size = size;
          absl::StatusOr<GemmResult> r = EmulateGemm(ordered, opt, 1);
          const std::string what = absl::StrCat(a, ",", bo, ",", c, " ", size.m, "x", size.n, "x", size.k);
          ASSERT_TRUE(r.ok()) << what << ": " << r.status();
          EXPECT_TRUE(r->passed) << what << ": " << r->failure;
        }
      }
}

TEST(EmulatedGemmEntryPoint, TheSkinnyKernelAtRaggedSizes) {
  // K = 4120: two chunks a thread a step; in the second step only three threads' first chunks lie in K.
  ExpectCorrectAt("gemm/bf16_skinny", {{1, 300, 200}, {5, 7, 8}, {13, 129, 64}, {40, 33, 8}, {3, 9, 4120}, {2, 77, 1032}});
  // C row-major (a column-major C of few columns, transposed by the entry point).
  ExpectCorrectAt("gemm/bf16_skinny.bf16-bf16.c_row", {{2, 300, 200}, {4, 9, 4120}, {6, 33, 8}});
  // The Hopper twin: the same sums, each thread's loads after its wait for the kernel before.
  ExpectCorrectAt("gemm/bf16_skinny_sm90", {{1, 300, 200}, {13, 129, 64}, {3, 9, 4120}});
}

// Up to 16 rows on mma.sync: N past a block's 16 columns, K ending inside a warp's chunk and
// inside a thread's step (4120 = 32 chunks of 128 and 24), M past 16 (a second and third pass).
TEST(EmulatedGemmEntryPoint, TheMma16KernelAtRaggedSizes) {
  ExpectCorrectAt("gemm/bf16_mma16_sm90", {{3, 77, 72}, {16, 130, 1032}, {13, 33, 4120}, {17, 20, 264}, {40, 9, 8}});
}

// The cp.async ring kernels for a few rows, whole tiles, split-K and stream-K: N past a block's
// 128 columns, K ending inside a k-tile of 128, M past a tile of 16 or 64 rows, a 1x7x8 corner.
// Their edges are cp.async's zero fill (source size 0), and the emulator fails a read of a stage
// a copy still writes.
TEST(EmulatedGemm, TheCpAsyncRingKernelsAtRaggedSizes) {
  for (const char* name : {"gemm/bf16_mma16_ring_sm90", "gemm/bf16_mma64_ring_sm90"})
    for (int split : {1, 3, 0}) ExpectCorrectAt(name, {{13, 300, 1032}, {70, 129, 72}, {1, 7, 8}}, split);
}

// The TMA-fed kernels for up to 16 and 8 rows a pass: N past a block's 16 columns, K ending inside a box of 256
// (4120), M past 16 (further passes), a 1x7x8 corner.
TEST(EmulatedGemmEntryPoint, TheTma16KernelAtRaggedSizes) {
  for (const char* name : {"gemm/bf16_tma16_sm90", "gemm/bf16_tma8_sm90"})
    ExpectCorrectAt(name, {{3, 77, 72}, {16, 130, 1032}, {13, 33, 4120}, {17, 20, 264}, {40, 9, 8}, {1, 7, 8}});
}

// The wide-stage kernels for up to 64 rows: N past a block's 32 or 64 columns, K ending inside a
// stage's first 64-k slab (1032; 4120, 33 stages, wraps the ring of 7 or 9), K of one stage (72, 8),
// M past 64 (a second pass of 6 rows) and each size of A's box (17, 40, 63 rows: boxes of 32, 48,
// 64; 1 row: 16), a 1x7x8 corner. With a row-major B (its MN-major boxes of 64B and 128B
// swizzle), N a multiple of 8 (TMA strides B's rows by N).
TEST(EmulatedGemmEntryPoint, TheWideStageKernelsAtRaggedSizes) {
  for (const char* name : {"gemm/bf16_k128n32_sm90", "gemm/bf16_k128n64_sm90"})
    ExpectCorrectAt(name, {{17, 130, 1032}, {40, 33, 4120}, {63, 65, 264}, {70, 20, 72}, {1, 7, 8}});
  for (const char* name : {"gemm/bf16_k128n32_sm90.bf16-bf16.b_mn", "gemm/bf16_k128n64_sm90.bf16-bf16.b_mn"})
    ExpectCorrectAt(name, {{17, 136, 1032}, {40, 40, 4120}, {63, 72, 264}, {70, 24, 72}, {1, 8, 8}});
}

// Every bundled variant (input and output types, each epilogue term) of every entry-point kernel,
// at a ragged size, against the fp64 product put through the epilogue on the host. One test a
// kernel, so that ctest spreads them over its jobs.
std::vector<std::string> EntryPointKernels() {
  std::vector<std::string> bases = TileKernels();
  bases.insert(bases.end(), {"gemm/bf16_skinny", "gemm/bf16_skinny_sm90", "gemm/bf16_mma16_sm90", "gemm/bf16_tma16_sm90",
                             "gemm/bf16_tma8_sm90", "gemm/bf16_k128n32_sm90", "gemm/bf16_k128n64_sm90",
                             "gemm/bf16_strided", "reference/bf16"});
  return bases;
}

class EveryBundledVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryBundledVariant, OfTheKernel) {
  const std::string& base = GetParam();
  const bool skinny = base.rfind("gemm/bf16_skinny", 0) == 0 || base == "gemm/bf16_mma16_sm90" ||
                      base.rfind("gemm/bf16_tma", 0) == 0;
  // The family's own list: the tiles of 80, 96, 160 columns have no MN-major variants.
  std::vector<std::string> bundled;
  for (const ExampleFamily& f : Families())
    if (f.base == base) bundled = f.bundled;
  ASSERT_FALSE(bundled.empty()) << base;
  // 8-bit inputs take scales this harness has no values for: gemm_fp8_test.cc checks them.
  std::erase_if(bundled, [](const std::string& o) { return o.rfind("e4m3", 0) == 0 || o.rfind("e5m2", 0) == 0; });
  if (bundled.empty()) GTEST_SKIP() << base << " is bundled with 8-bit inputs alone (gemm_fp8_test.cc)";
  for (const std::string& options : bundled) {
    const std::string name = base + "." + options;
    // C from registers (any_m, f32) at an M no TMA store could take; but a packed column-major A
    // needs M a multiple of 8 too (its columns 16 bytes apart: the entry point copies it
    // otherwise, which runtime_test checks on the GPU).
    const bool any_m = options.find("any_m") != std::string::npos || options.find("-f32") != std::string::npos;
    const bool a_mn = options.find("a_mn") != std::string::npos;
    const bool swiglu = options.find("swiglu") != std::string::npos;  // M a multiple of 16
    // The reference kernel (a thread an element, no tiles) at the series test's size.
    ExpectCorrectAt(name.c_str(),
                    {skinny                      ? rt::GemmSize{3, 77, 72}
                     : base == "reference/bf16" ? rt::GemmSize{48, 40, 24}
                                                : rt::GemmSize{swiglu ? 144 : any_m && !a_mn ? 131 : 136, 200, 88}});
  }
}

INSTANTIATE_TEST_SUITE_P(EmulatedGemmEntryPoint, EveryBundledVariant, ::testing::ValuesIn(EntryPointKernels()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '/') c = '_';
                           return n;
                         });

// SwiGLU with an f32 C, which the tile kernels store from registers (the bundled variant is bf16,
// through TMA).
TEST(EmulatedGemmEntryPoint, SwigluStoredFromRegisters) {
  ExpectCorrectAt("gemm/bf16_sm90_n64.bf16-f32.swiglu", {rt::GemmSize{272, 200, 88}});
}

// RoPE with an f32 C, stored from registers (the bundled variant is bf16, through TMA), at heads of
// 64 rows of which three turn and one does not.
TEST(EmulatedGemmEntryPoint, RopeStoredFromRegisters) {
  ExpectCorrectAt("gemm/bf16_sm90_n64.bf16-f32.rope", {rt::GemmSize{272, 200, 88}});
}

// The entry point's rope checks, each naming what is wrong, and the plan it makes where all hold.
TEST(EmulatedGemmEntryPoint, RopePlansAndItsErrors) {
  rt::GemmOperands ok{.a = 256, .b = 256, .c = 256, .c_row_major = true};
  ok.rope_angles = 256, ok.rope_rows = 256, ok.rope_dim = 128, ok.rope_period = 100;
  const rt::GemmOptions rope{.epilogue = "rope"};
  auto error = [&](const rt::GemmSize& size, const rt::GemmOperands& o) {
    absl::StatusOr<rt::GemmPlan> p = rt::PlanGemm(size, rope, o, 90);
    return p.ok() ? p->choice.kernel : std::string(p.status().message());
  };
  const std::string planned = error({4096, 384, 4096}, ok);
  EXPECT_EQ(planned.rfind("gemm/bf16_sm90", 0), 0u) << planned;
  EXPECT_EQ(planned.substr(planned.size() - 5), ".rope") << planned;
  auto says = [&](const rt::GemmSize& size, const rt::GemmOperands& o, const std::string& what) {
    const std::string got = error(size, o);
    EXPECT_NE(got.find(what), std::string::npos) << got;
  };
  rt::GemmOperands o = ok;
  o.c_row_major = false;
  says({4096, 384, 4096}, o, "C must be row-major");
  o = ok, o.rope_dim = 24;
  says({4096, 384, 4096}, o, "positive multiple of 16, not 24");
  o = ok, o.rope_rows = 200;
  says({4096, 384, 4096}, o, "multiple of rope_dim (128) up to N (384), not 200");
  o = ok, o.rope_rows = 512;
  says({4096, 384, 4096}, o, "up to N (384), not 512");
  o = ok, o.rope_period = 0;
  says({4096, 384, 4096}, o, "rope_period");
  o = ok, o.rope_angles = 0;
  says({4096, 384, 4096}, o, "rope needs the angle words");
  says({(int64_t{1} << 23) + 16, 384, 4096}, ok, "at most 2^23 rows");
  says({4096, 392, 4096}, ok, "N a multiple of 16, not 392");
  // One token (a decode step) takes a tile kernel too; a problem small enough for the strided
  // kernel is refused by name.
  const std::string one_token = error({1, 384, 4096}, ok);
  EXPECT_EQ(one_token.rfind("gemm/bf16_sm90", 0), 0u) << one_token;
  EXPECT_EQ(one_token.substr(one_token.size() - 5), ".rope") << one_token;
  says({7, 384, 100}, ok, "rope is fused by the sm_90 tile kernels (gemm/bf16_sm90*) alone");
}

// The rope check fails on a product whose pairs are not turned: a plain kernel read as a rope one
// (the same inputs bound; the tables it does not read).
TEST(EmulatedGemmEntryPoint, ARopeCheckFailsOnAProductNotTurned) {
  rt::Bundle b = CachedBundle("gemm/bf16_sm90_n64.bf16-bf16");
  GemmSpec g = *GemmOf(b.manifest);
  g.epilogue = "rope";
  SetGemmSpec(b.manifest, g);
  RunOptions opt;
  opt.size = {144, 200, 88};
  absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed) << "error " << r->rel_error;
  EXPECT_GT(r->rel_error, 0.1);
}

// The check the previous test relies on fails where the epilogue is not the one described: the
// kernel with GELU, checked as if it applied ReLU, SiLU or no activation (the same inputs bound).
TEST(EmulatedGemmEntryPoint, AnEpilogueOtherThanTheDescribedOneFails) {
  rt::Bundle b = CachedBundle("gemm/bf16_sm90_n64.bf16-bf16.scale.bias_col.gelu.residual");
  for (const char* described : {"scale.bias_col.relu.residual", "scale.bias_col.silu.residual", "scale.bias_col.residual"}) {
    GemmSpec g = *GemmOf(b.manifest);
    g.epilogue = described;
    rt::Bundle mislabelled = b;
    SetGemmSpec(mislabelled.manifest, g);
    RunOptions opt;
    opt.size = {136, 200, 88};
    absl::StatusOr<GemmResult> r = EmulateGemm(mislabelled, opt, 1);
    ASSERT_TRUE(r.ok()) << described << ": " << r.status();
    EXPECT_FALSE(r->passed) << described << ": error " << r->rel_error;
  }
}

TEST(GemmChoice, VariantNamesCarryTypesAndTheEpilogueInTheKernelsOrder) {
  EXPECT_EQ(ChooseGemm({4096, 4096, 4096}, 90, {}).kernel, "gemm/bf16_sm90");
  EXPECT_EQ(ChooseGemm({1, 4096, 4096}, 90, {.in_type = "f16", .out_type = "f32"}).kernel,
            "gemm/bf16_skinny_sm90.f16-f32");
  absl::StatusOr<std::string> terms = CanonicalEpilogue("residual,gelu,bias_col,scale");
  ASSERT_TRUE(terms.ok()) << terms.status();
  EXPECT_EQ(*terms, "scale.bias_col.gelu.residual");
  EXPECT_EQ(ChooseGemm({100, 7, 60}, 90, {.epilogue = *terms}).kernel, "gemm/bf16_strided.bf16-bf16.scale.bias_col.gelu.residual");
  EXPECT_EQ(ChooseGemm({100, 7, 64}, 90, {.epilogue = "relu"}).kernel, "gemm/bf16_sm90_m64n32.bf16-bf16.any_m.relu");
  EXPECT_EQ(*CanonicalEpilogue("swiglu"), "swiglu");
  EXPECT_NE(CanonicalEpilogue("residual,swiglu").status().message().find("swiglu takes no other term"),
            std::string::npos);
  EXPECT_EQ(*CanonicalEpilogue("rope"), "rope");
  EXPECT_NE(CanonicalEpilogue("rope,residual").status().message().find("rope takes no other term"),
            std::string::npos);
  for (const char* bad : {"gelu,relu", "bias_row,bias_col", "scale,scale", "tanh", "swiglu,silu"}) {
    absl::StatusOr<std::string> t = CanonicalEpilogue(bad);
    EXPECT_FALSE(t.ok()) << bad;
  }
  EXPECT_NE(CanonicalEpilogue("tanh").status().message().find("unknown term 'tanh'"), std::string::npos);
}

// (kernel, split) as the rule gives it.
std::pair<std::string, int> Choice(const rt::GemmSize& s, const GemmOptions& o = {}) {
  const GemmChoice c = ChooseGemm(s, 90, o);
  return {c.kernel, c.split};
}

TEST(GemmChoice, TheTileAndSplitThatWasteLeastWhereTmaStridesAllowElseTheStridedKernel) {
  using P = std::pair<std::string, int>;
  EXPECT_EQ(Choice({4096, 4096, 4096}), P("gemm/bf16_sm90", 1));  // 4 full waves of 256x256: whole tiles
  EXPECT_EQ(Choice({16384, 8192, 28672}), P("gemm/bf16_sm90", 1));
  EXPECT_EQ(Choice({1024, 4096, 4096}), P("gemm/bf16_sm90", 1));  // one full wave
  // 1.5 waves of 256x256 tiles, which stream-K would even out for two partials a group; 2 whole
  // waves of 128x192 pairs (3 of 128x128 tiles) need no partials.
  EXPECT_EQ(Choice({1024, 6144, 4096}), P("gemm/bf16_sm90_n192", 1));
  // Not with a fused epilogue or an f32 C (docs/perf/2026-11-30-a-192-column-tile.md).
  EXPECT_EQ(Choice({1024, 6144, 4096}, {.out_type = "f32"}), P("gemm/bf16_sm90_n128.bf16-f32", 1));
  EXPECT_EQ(Choice({1024, 6144, 4096}, {.epilogue = "bias_col.gelu"}),
            P("gemm/bf16_sm90_n128.bf16-bf16.bias_col.gelu", 1));
  EXPECT_EQ(Choice({4096, 2112, 7168}, {.epilogue = "relu"}),
            P("gemm/bf16_sm90_n160.bf16-bf16.relu", 0));
  // 2112 columns are 11 tiles of 192: whole (2.7 waves) where 128x160 tiles, 13.2 a row, stream.
  EXPECT_EQ(Choice({4096, 2112, 7168}), P("gemm/bf16_sm90_n192", 1));
  // A size the built-in table records (ops/gemm/tables/sm_90.tune): its line wins over the rule; with a
  // fused term the tile's plain_c record sets it aside (docs/perf/2026-11-30-a-192-column-tile.md).
  EXPECT_EQ(Choice({8192, 2112, 7168}), P("gemm/bf16_sm90_n192", 0));
  EXPECT_NE(Choice({8192, 2112, 7168}, {.epilogue = "relu"}).first.rfind("gemm/bf16_sm90_n192", 0), 0u);
  EXPECT_EQ(Choice({2048, 2112, 7168}), P("gemm/bf16_sm90_n96", 1));
  EXPECT_EQ(Choice({64, 7168, 16384}), P("gemm/bf16_k128n64_sm90", 1));
  // 40 256x256 tiles for 64 clusters; 64 pairs of 128x160 tiles fill them (0.97x cuBLAS on the
  // H100 against 0.79 for 256x256 tiles streamed: docs/PERF.md, "Tiles for one wave").
  EXPECT_EQ(Choice({256, 10240, 8192}), P("gemm/bf16_sm90_n160", 1));
  EXPECT_EQ(Choice({256, 6144, 4096}), P("gemm/bf16_sm90_n96", 1));  // 128 tiles of 128x96
  // 4 full waves of 256x160 pairs rather than 2.5 waves of 256x256 tiles streamed (0.99x cuBLAS
  // on the H100 against 0.92).
  EXPECT_EQ(Choice({1024, 10240, 8192}), P("gemm/bf16_sm90_n160", 1));
  // 128 units either way: 16 256x256 tiles in 4 parts read back three partials a tile, 64
  // 128x128 tiles in 2 parts one (1.05x cuBLAS on the H100 against 0.89).
  EXPECT_EQ(Choice({256, 4096, 14336}), P("gemm/bf16_sm90_n128", 2));
  // 160-256 rows at N = 4096: 64x128 tiles whole, 96-128 of them, rather than 128x128 tiles in 2
  // parts (kiln tune on the H100: 0.815 against 0.718 at 160x4096x4096, 0.895 against 0.827 at
  // 200; even at 256: docs/PERF.md, "64-row tiles past 128 rows").
  EXPECT_EQ(Choice({160, 4096, 4096}), P("gemm/bf16_sm90_m64", 1));
  EXPECT_EQ(Choice({200, 4096, 4096}), P("gemm/bf16_sm90_m64", 1));
  // The unclustered tiles stream-K only after a full wave of whole tiles: where every tile would
  // stream in parts, whole tiles (on the H100, 320x4096x4096: 128x128 whole 0.80-0.83x cuBLAS
  // against 0.65 for 128x96 streamed; 640x4096x4096: 128x96 whole 0.76-0.80 against 0.55;
  // docs/PERF.md, "Stream-K where every tile streams")...
  EXPECT_EQ(Choice({320, 4096, 4096}), P("gemm/bf16_sm90_n128", 1));
  EXPECT_EQ(Choice({384, 4096, 4096}), P("gemm/bf16_sm90_n128", 1));
  EXPECT_EQ(Choice({640, 4096, 4096}), P("gemm/bf16_sm90_n96", 1));
  EXPECT_EQ(Choice({320, 4096, 14336}), P("gemm/bf16_sm90", 2));
  // ...while the 256x256 pairs stream every tile well (768x4096x14336: 158 us against 180 for
  // 128x96 tiles streamed), and past a full wave stream-K evens out the last one.
  EXPECT_EQ(Choice({768, 4096, 14336}), P("gemm/bf16_sm90", 0));
  EXPECT_EQ(Choice({768, 11008, 4096}).second, 0);
  // Past 128 rows the 64x128 tiles run whole only, and the 128x80 and 128x96 tiles never stream
  // (H200, one A/B call: 512x1024x4096 16.2 us in 128x64 tiles split against 19.1 in 64x128
  // tiles split; 384x11008x4096 62.1 us in 128x96 tiles whole against 74.5 streamed, 576x5120x5120
  // 57.9 in 256x256 pairs whole against 78.2: docs/PERF.md, "A tune run over 80 shapes").
  EXPECT_EQ(Choice({512, 1024, 4096}), P("gemm/bf16_sm90_n64", 2));
  EXPECT_EQ(Choice({320, 10240, 8192}), P("gemm/bf16_sm90_n128", 1));  // the last row of tiles loads no fill
  EXPECT_EQ(Choice({384, 11008, 4096}), P("gemm/bf16_sm90_n96", 1));
  EXPECT_EQ(Choice({576, 5120, 5120}), P("gemm/bf16_sm90", 1));
  // Rows off 128 bytes (K no multiple of 64) slow the tiles with more bytes per flop: the 256x256
  // pairs then, streamed or split (H200, one A/B call: 5000x5000x5000 360 us against 410 for
  // 128x160 pairs; 512x4096x5000 45.5 against 56.3 for 128x128 tiles: docs/PERF.md, "Rows off
  // 128 bytes").
  EXPECT_EQ(Choice({5000, 5000, 5000}), P("gemm/bf16_sm90", 0));
  EXPECT_EQ(Choice({512, 4096, 5000}), P("gemm/bf16_sm90", 2));
  EXPECT_EQ(Choice({512, 4096, 4096}).first, "gemm/bf16_sm90_n128");  // the same rows 128 bytes apart
  // Few tiles and a long K: split in 4 rather than streamed, where each tile would be cut among
  // a dozen groups and its last part read their partials one by one (H200: 130x130x8192 17.6 us
  // against 48.3; docs/PERF.md, "Stream-K of few tiles"), while 48 256x256 tiles on 64 clusters
  // (768x4096x14336 above) still stream.
  EXPECT_EQ(Choice({256, 256, 8192}).second, 4);
  // A long K over at most 8 pairs of 128x128 tiles: those pairs sharing B, split so that the parts
  // about fill one wave (docs/perf/2026-12-03-split-partials-in-a-tree.md); not where N leaves a
  // column of tiles mostly empty, M is no multiple of 8, the C is other than a plain one of the
  // inputs' type, more pairs would need a second wave, or on another GPU than sm_90.
  EXPECT_EQ(Choice({256, 256, 65536}), P("gemm/bf16_sm90_n128c2", 16));
  EXPECT_EQ(Choice({512, 512, 32768}), P("gemm/bf16_sm90_n128c2", 8));
  EXPECT_EQ(Choice({512, 512, 65536}), P("gemm/bf16_sm90_n128c2", 8));
  EXPECT_EQ(Choice({192, 640, 32768}), P("gemm/bf16_sm90_n128c2", 12));  // one row of 5 pairs
  EXPECT_EQ(Choice({256, 768, 65536}), P("gemm/bf16_sm90_n128c2", 10));
  EXPECT_EQ(Choice({384, 384, 65536}), P("gemm/bf16_sm90_n128c2", 8));   // two rows of 3
  EXPECT_EQ(Choice({320, 640, 32768}).first.rfind("gemm/bf16_sm90_n128c2", 0), std::string::npos);
  EXPECT_EQ(Choice({1024, 130, 65536}).first, "gemm/bf16_sm90_n80");
  EXPECT_EQ(ChooseGemm({256, 256, 65536}, 80, {}).kernel.find("sm90"), std::string::npos);  // sm_90a's
  EXPECT_EQ(Choice({2048, 256, 32768}).first, "gemm/bf16_sm90_n128");
  EXPECT_EQ(Choice({260, 256, 65536}).first.rfind("gemm/bf16_sm90_n128c2", 0), std::string::npos);
  EXPECT_EQ(Choice({256, 256, 65536}, {.out_type = "f32"}).first.rfind("gemm/bf16_sm90_n128c2", 0),
            std::string::npos);
  // Elsewhere, with K long enough for parts of 4 k-tiles, 8 or 16 parts where 4 would leave over
  // half the CTAs idle (docs/perf/2026-11-26-few-tiles-long-k.md; 16 parts once the tree sums
  // them, docs/perf/2026-12-03-split-partials-in-a-tree.md), and never 128x128 tiles in 8.
  EXPECT_EQ(Choice({256, 256, 65536}, {.out_type = "f32"}), P("gemm/bf16_sm90_n64.bf16-f32", 16));
  EXPECT_EQ(Choice({192, 600, 16384}), P("gemm/bf16_sm90_n80", 8));
  auto most_parts = [](const rt::GemmSize& s) {  // among the candidates kiln tune times
    int most = 0;
    for (const rt::GemmChoice& c : rt::GemmCandidates(s, 90)) most = std::max(most, c.split);
    return most;
  };
  EXPECT_EQ(most_parts({256, 256, 65536}), 16);
  EXPECT_EQ(most_parts({4096, 4096, 4096}), 4);
  // M = 128 is bound by the weight read: 128 whole 128x80 tiles stream B without partials (73 us
  // on the H100, 128x128 tiles 77: docs/PERF.md).
  EXPECT_EQ(Choice({128, 10240, 8192}), P("gemm/bf16_sm90_n80", 1));
  // 96 64x128 tiles whole: the two rows of tiles read each column of B once from memory (31.5 us
  // on the H100 against 34.8 for 128x128 tiles in 2 parts: docs/PERF.md, "M <= 64").
  EXPECT_EQ(Choice({128, 6144, 4096}), P("gemm/bf16_sm90_m64", 1));
  // N = 4096: 64 pairs of 64x64 tiles, whole, stream B on all 128 CTAs without partials (23.8 us
  // on the H100 against 25.5 for 64 64x128 tiles and 28.8 for 128x128 tiles in 4 parts:
  // docs/PERF.md, "64x64 pairs")...
  EXPECT_EQ(Choice({128, 4096, 4096}), P("gemm/bf16_sm90_m64n64", 1));
  // ...but with K of 8192 or more over fewer 128x64 tiles than CTAs, those tiles streamed (H200,
  // kiln tune: 42.1 us against 48.9 for the pairs at 128x4096x14336, 39.5 against 43.4 for 64x32
  // tiles at M = 16: docs/PERF.md, "Long K over few tiles"); not where M needs the any_m variant,
  // nor where the 128x64 tiles are more than half the CTAs (128x6144x8192: 5% slower there).
  EXPECT_EQ(Choice({128, 4096, 14336}), P("gemm/bf16_sm90_n64", 0));
  // (At 17-64 rows over packed operands the wide-stage kernels come first: below.)
  const GemmOptions padded = {.packed = false};
  EXPECT_EQ(Choice({32, 4096, 14336}, padded), P("gemm/bf16_sm90_n64", 0));
  EXPECT_EQ(Choice({128, 2048, 8192}), P("gemm/bf16_sm90_n64", 0));
  EXPECT_NE(Choice({100, 4096, 14336}).first, "gemm/bf16_sm90_n64.bf16-bf16.any_m");
  EXPECT_EQ(Choice({64, 4096, 4096}, padded).first, "gemm/bf16_sm90_m64n32");
  EXPECT_EQ(Choice({128, 8192, 28672}), P("gemm/bf16_sm90_n128", 2));
  EXPECT_NE(Choice({128, 6144, 8192}).first, "gemm/bf16_sm90_n64");
  EXPECT_EQ(Choice({1, 4096, 4096}), P("gemm/bf16_skinny_sm90", 1));
  // 3-4 rows: the skinny kernel up to N = 4096 (but the mma.sync kernel from N = 1024 on Hopper),
  // the narrow tiles past it (H200: 3x28672x4096 67.1 us against 75.5; 4x512x4096 6.6 against
  // 16.5 the other way); 2 rows, whose pass streams as fast as one row's, the skinny kernel always
  // (docs/PERF.md, "Two to four rows").
  EXPECT_EQ(Choice({4, 1000, 14336}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(Choice({4, 4096, 14336}, {.c_row = true}), P("gemm/bf16_skinny_sm90.bf16-bf16.c_row", 1));
  EXPECT_EQ(ChooseGemm({4, 4096, 14336}, 80, {}).kernel, "gemm/bf16_skinny");
  EXPECT_EQ(Choice({2, 512, 4096}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(Choice({2, 28672, 4096}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(Choice({3, 28672, 4096}).first, "gemm/bf16_sm90_m64n80.bf16-bf16.any_m");
  EXPECT_EQ(Choice({4, 6144, 4096}).first, "gemm/bf16_sm90_m64n48.bf16-bf16.any_m");
  // M <= 64, bound by the weight read (the H100's fastest in docs/PERF.md, "Narrow tiles for
  // M <= 64"): 64-row tiles narrow enough for 128 of them to cover N, whole, so that every CTA
  // streams B without partials (16x10240x8192: 64x80 tiles 71.6 us against 77.3 for 80 64x128
  // tiles)...
  EXPECT_EQ(Choice({32, 4096, 4096}, padded), P("gemm/bf16_sm90_m64n32", 1));
  EXPECT_EQ(Choice({64, 4096, 4096}, padded), P("gemm/bf16_sm90_m64n32", 1));
  EXPECT_EQ(Choice({16, 6144, 4096}), P("gemm/bf16_sm90_m64n48", 1));
  // 3-16 rows and N of 1024-4096 (2048 or less only up to K = 8192): the mma.sync kernel
  // (docs/PERF.md, "Up to 16 rows on mma.sync"), from 9 rows only under N = 3584 (the wide stages,
  // below); not MN-major, nor C row-major, nor off Hopper.
  EXPECT_EQ(Choice({16, 3072, 4096}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({8, 4096, 2048}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({3, 4096, 2048}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({4, 1536, 8192}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({11, 2048, 8192}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({16, 1024, 4096}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_NE(Choice({16, 2048, 14336}).first, "gemm/bf16_mma16_sm90");
  EXPECT_NE(Choice({17, 4096, 4096}).first, "gemm/bf16_mma16_sm90");
  EXPECT_NE(Choice({16, 4104, 4096}).first, "gemm/bf16_mma16_sm90");
  EXPECT_NE(Choice({16, 1016, 4096}).first, "gemm/bf16_mma16_sm90");
  EXPECT_EQ(Choice({2, 4096, 4096}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(ChooseGemm({16, 4096, 4096}, 90, {.b_mn = true}).kernel.find("mma16"), std::string::npos);
  // 12-16 rows, N of 2048-4096 over a longer K: the weights by TMA boxes (docs/PERF.md, "The
  // weights by TMA boxes into mma.sync"); not at 8 rows, 4096x4096, N = 2048 past K = 8192, nor
  // over padded operands or rows off 128 bytes.
  EXPECT_EQ(Choice({16, 3072, 14336}), P("gemm/bf16_tma16_sm90", 1));
  EXPECT_EQ(Choice({12, 3072, 8192}), P("gemm/bf16_tma16_sm90", 1));
  EXPECT_EQ(Choice({13, 3000, 9024}), P("gemm/bf16_tma16_sm90", 1));
  EXPECT_EQ(Choice({13, 3000, 9000}), P("gemm/bf16_mma16_sm90", 1));  // rows off 128 bytes
  EXPECT_EQ(Choice({16, 4096, 14336}, {.rows_128b = false}).first, "gemm/bf16_mma16_sm90");
  EXPECT_EQ(Choice({16, 2048, 4096}), P("gemm/bf16_tma16_sm90", 1));
  EXPECT_EQ(Choice({16, 3072, 14336}, {.out_type = "f32", .epilogue = "scale"}).first,
            "gemm/bf16_tma16_sm90.bf16-f32.scale");
  EXPECT_EQ(Choice({11, 3072, 14336}), P("gemm/bf16_mma16_sm90", 1));
  // 3-8 rows there: A's box of 8 rows.
  EXPECT_EQ(Choice({8, 4096, 14336}), P("gemm/bf16_tma8_sm90", 1));
  EXPECT_EQ(Choice({3, 2048, 4096}), P("gemm/bf16_tma8_sm90", 1));
  EXPECT_EQ(Choice({4, 4096, 4096}), P("gemm/bf16_tma8_sm90", 1));
  EXPECT_EQ(Choice({8, 4096, 2048}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({8, 1024, 8192}), P("gemm/bf16_mma16_sm90", 1));
  EXPECT_EQ(Choice({2, 4096, 14336}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(ChooseGemm({8, 4096, 14336}, 90, {.packed = false}).kernel.find("tma8"), std::string::npos);
  EXPECT_EQ(Choice({16, 3500, 4096}).first, "gemm/bf16_mma16_sm90");
  EXPECT_NE(Choice({16, 2048, 14336}).first.find("gemm/bf16_tma16_sm90"), 0u);
  EXPECT_NE(Choice({16, 6144, 14336}).first.find("gemm/bf16_tma16_sm90"), 0u);
  EXPECT_EQ(ChooseGemm({16, 4096, 14336}, 90, {.packed = false}).kernel.find("tma16"), std::string::npos);
  EXPECT_EQ(ChooseGemm({16, 4096, 14336}, 90, {.a_mn = true}).kernel.find("tma16"), std::string::npos);
  // 17-64 rows where 64-row blocks of 32 columns (N 3584-4224, K >= 1024) or 64 columns (N
  // 7680-8448, K >= 8192; from 3 rows where K >= 12288) make one wave, in stages of 128 k
  // (docs/PERF.md, "Stages of 128 and 256 k at 17-64 rows"); 32 columns also from 9 rows, and
  // from 3 rows past N = 4096 ("The 32-column wide stages from 9 rows"); not past those N, at
  // N = 3072 or 6144, with 32 columns at 3-8 rows up to N = 4096, nor over padded, MN-major or
  // off-128-byte operands.
  EXPECT_EQ(Choice({64, 4096, 4096}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({17, 4096, 14336}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({40, 4000, 1024}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({16, 4096, 4096}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({9, 4096, 2048}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({12, 4096, 8192}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({16, 3584, 14336}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({4, 4224, 4096}), P("gemm/bf16_k128n32_sm90", 1));
  EXPECT_EQ(Choice({16, 4096, 14336}, {.out_type = "f32", .epilogue = "scale"}).first,
            "gemm/bf16_k128n32_sm90.bf16-f32.scale");
  EXPECT_EQ(Choice({2, 4224, 4096}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(Choice({64, 8192, 28672}), P("gemm/bf16_k128n64_sm90", 1));
  EXPECT_EQ(Choice({24, 8192, 8192}), P("gemm/bf16_k128n64_sm90", 1));
  EXPECT_EQ(Choice({16, 8192, 28672}), P("gemm/bf16_k128n64_sm90", 1));  // under 17 rows: K >= 12288
  EXPECT_EQ(Choice({3, 8000, 14336}), P("gemm/bf16_k128n64_sm90", 1));
  EXPECT_EQ(Choice({16, 8192, 8192}).first.find("gemm/bf16_k"), std::string::npos);
  EXPECT_EQ(Choice({2, 8192, 28672}), P("gemm/bf16_skinny_sm90", 1));
  EXPECT_EQ(Choice({64, 8192, 14336}, {.out_type = "f32", .epilogue = "bias_col"}).first,
            "gemm/bf16_k128n64_sm90.bf16-f32.bias_col");
  for (rt::GemmSize other : {rt::GemmSize{64, 8192, 4096}, rt::GemmSize{64, 6144, 4096}, rt::GemmSize{64, 3072, 14336},
                            rt::GemmSize{8, 4096, 4096}, rt::GemmSize{16, 3500, 4096}, rt::GemmSize{16, 4096, 512},
                            rt::GemmSize{65, 4096, 4096}, rt::GemmSize{64, 4352, 4096},
                            rt::GemmSize{64, 4096, 512}, rt::GemmSize{64, 4096, 4104}})
    EXPECT_EQ(Choice(other).first.find("gemm/bf16_k"), std::string::npos)
        << other.m << "x" << other.n << "x" << other.k;
  EXPECT_EQ(ChooseGemm({64, 4096, 4096}, 90, {.packed = false}).kernel.find("gemm/bf16_k"), std::string::npos);
  EXPECT_EQ(ChooseGemm({64, 4096, 4096}, 90, {.a_mn = true}).kernel.find("gemm/bf16_k"), std::string::npos);
  // A row-major B (a [K][N] weight) too, packed (rows N apart): its b_mn variant.
  EXPECT_EQ(Choice({16, 4096, 4096}, {.b_mn = true}).first, "gemm/bf16_k128n32_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({64, 8192, 8192}, {.b_mn = true}).first, "gemm/bf16_k128n64_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({16, 4096, 4096}, {.a_mn = true, .b_mn = true}).first.find("gemm/bf16_k"), std::string::npos);
  EXPECT_EQ(Choice({16, 4096, 4096}, {.b_mn = true, .packed = false}).first.find("gemm/bf16_k"), std::string::npos);
  EXPECT_EQ(Choice({16, 4040, 4096}, {.b_mn = true}).first.find("gemm/bf16_k"), std::string::npos);  // N off 64
  EXPECT_EQ(Choice({64, 4096, 14336}, {.b_mn = true}).first, "gemm/bf16_k128n32_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({16, 8192, 28672}, {.b_mn = true}).first, "gemm/bf16_k128n64_sm90.bf16-bf16.b_mn");
  // No mma.sync or skinny kernel reads a row-major B: the wide stages from 1 row there.
  EXPECT_EQ(Choice({1, 4096, 4096}, {.b_mn = true}).first, "gemm/bf16_k128n32_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({8, 3584, 4096}, {.b_mn = true}).first, "gemm/bf16_k128n32_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({1, 8192, 14336}, {.b_mn = true}).first, "gemm/bf16_k128n64_sm90.bf16-bf16.b_mn");
  EXPECT_EQ(Choice({1, 8192, 8192}, {.b_mn = true}).first.find("gemm/bf16_k"), std::string::npos);
  EXPECT_EQ(Choice({64, 10240, 8192}), P("gemm/bf16_sm90_m64n80", 1));
  EXPECT_EQ(Choice({8, 28672, 4096}).first, "gemm/bf16_sm90_m64n80");
  // ...but where 64x128 tiles in 2 parts fill the 128 CTAs, those (179.7 us at 16x8192x28672
  // against 189.8 for 103 64x80 tiles; over packed operands the 64x64 wide-stage blocks, above).
  EXPECT_EQ(Choice({16, 8192, 28672}, padded), P("gemm/bf16_sm90_m64", 2));
  EXPECT_EQ(Choice({13, 6144, 4096}).first, "gemm/bf16_sm90_m64n48.bf16-bf16.any_m");
  EXPECT_EQ(Choice({13, 8192, 4096}).first, "gemm/bf16_sm90_m64n80.bf16-bf16.any_m");  // no C map at M = 13
  EXPECT_EQ(Choice({13, 8192, 4096}, {.out_type = "f32"}).first, "gemm/bf16_sm90_m64n80.bf16-f32");
  EXPECT_EQ(Choice({13, 3072, 4096}, {.out_type = "f32"}).first, "gemm/bf16_mma16_sm90.bf16-f32");
  EXPECT_EQ(Choice({13, 4096, 4096}, {.out_type = "f32"}).first, "gemm/bf16_k128n32_sm90.bf16-f32");
  EXPECT_EQ(Choice({100, 7, 64}), P("gemm/bf16_sm90_m64n32.bf16-bf16.any_m", 1));  // two tiles, one k-tile
  EXPECT_EQ(Choice({300, 7, 64}), P("gemm/bf16_sm90_m64.bf16-bf16.any_m", 1));  // past M = 128: the least padding
  const GemmChoice odd = ChooseGemm({100, 7, 60}, 90);
  EXPECT_EQ(odd.kernel, "gemm/bf16_strided");
  EXPECT_NE(odd.why.find("TMA needs K a multiple of 8"), std::string::npos) << odd.why;
  // MN-major A and B are strided by M and N, not K: the tile kernels take any K there.
  EXPECT_EQ(ChooseGemm({1024, 4096, 4095}, 90, {.a_mn = true, .b_mn = true}).kernel,
            "gemm/bf16_sm90.bf16-bf16.a_mn.b_mn");
  EXPECT_EQ(ChooseGemm({1024, 4096, 4095}, 90, {.a_mn = true}).kernel, "gemm/bf16_strided");
  EXPECT_EQ(ChooseGemm({4096, 4096, 4096}, 80).kernel, "gemm/bf16_strided");
  // Packed MN-major operands stride their columns by M or N: TMA needs a multiple of 8 there.
  const GemmChoice a_cols = ChooseGemm({70, 33, 24}, 90, {.a_mn = true});
  EXPECT_EQ(a_cols.kernel, "gemm/bf16_strided");
  EXPECT_NE(a_cols.why.find("A column-major with M = 70"), std::string::npos) << a_cols.why;
  EXPECT_EQ(ChooseGemm({64, 33, 24}, 90, {.b_mn = true}).kernel, "gemm/bf16_strided");
  EXPECT_EQ(ChooseGemm({70, 32, 24}, 90, {.b_mn = true}).kernel,
            "gemm/bf16_sm90_m64n64.bf16-bf16.any_m.b_mn");  // N = 32 strides B's rows by 64 bytes
}

// C of few columns: A is the weights, streamed by the 64-row narrow tiles (H200, kiln tune with
// A evicted first: 4096x16x4096 16.1 us in 64x32 tiles whole against 19.8 for the 128x64 tiles in
// 2 parts; docs/PERF.md, "C of few columns").
TEST(GemmChoice, ACOfFewColumnsStreamsAIn64RowTiles) {
  using P = std::pair<std::string, int>;
  EXPECT_EQ(Choice({4096, 16, 4096}), P("gemm/bf16_sm90_m64n32", 1));      // 64 tiles, whole
  EXPECT_EQ(Choice({4096, 64, 4096}), P("gemm/bf16_sm90_m64n32", 1));      // two columns of 64 tiles
  EXPECT_EQ(Choice({28672, 2, 4096}), P("gemm/bf16_sm90_m64n32", 1));
  EXPECT_EQ(Choice({16384, 64, 4096}), P("gemm/bf16_sm90_m64n64", 1));     // pairs: 256 CTAs, not 512
  EXPECT_EQ(Choice({2048, 16, 4096}), P("gemm/bf16_sm90_m64n32", 2));      // 32 tiles: in 2 parts
  EXPECT_EQ(Choice({2048, 48, 4096}), P("gemm/bf16_sm90_m64n32", 2));      // 32 blocks of A's rows, twice
  EXPECT_EQ(Choice({4096, 16, 14336}), P("gemm/bf16_sm90_m64n32", 2));     // 64 tiles and a long K
  EXPECT_EQ(Choice({8192, 16, 14336}), P("gemm/bf16_sm90_m64n32", 1));     // 128: whole
  EXPECT_EQ(Choice({1024, 32, 16384}), P("gemm/bf16_sm90_n64", 0));        // 16 tiles, long K: streamed
  // 16 columns or fewer, 16 blocks of A's rows or fewer, K >= 8192: 64x16 tiles in ~64 CTAs.
  EXPECT_EQ(Choice({1024, 16, 16384}), P("gemm/bf16_sm90_m64n16", 4));
  EXPECT_EQ(Choice({1024, 8, 8192}), P("gemm/bf16_sm90_m64n16", 4));
  EXPECT_EQ(Choice({512, 16, 16384}), P("gemm/bf16_sm90_m64n16", 8));
  EXPECT_EQ(Choice({1001, 5, 32768}).first, "gemm/bf16_sm90_m64n16.bf16-bf16.any_m");
  EXPECT_EQ(Choice({1024, 17, 8192}).first, "gemm/bf16_sm90_n64");        // 17 columns: as before
  EXPECT_EQ(Choice({2048, 16, 16384}), P("gemm/bf16_sm90_m64n32", 2));     // 32 blocks: as before
  EXPECT_EQ(Choice({1024, 16, 4096}), P("gemm/bf16_sm90_m64n32", 2));      // K < 8192: as before
  EXPECT_EQ(Choice({4095, 24, 4096}).first, "gemm/bf16_sm90_m64n32.bf16-bf16.any_m");
  // Not past N = 64, under M = 512, past 32 columns with K > 16384, nor for MN-major A (the narrow
  // tiles read K-major operands).
  EXPECT_NE(Choice({4096, 65, 4096}).first, "gemm/bf16_sm90_m64n32");
  EXPECT_EQ(Choice({256, 16, 8192}), P("gemm/bf16_sm90_n64", 4));
  EXPECT_EQ(Choice({4096, 64, 32768}), P("gemm/bf16_sm90_n64", 4));  // A read twice by 64x32 tiles there
  EXPECT_EQ(Choice({512, 64, 8192}), P("gemm/bf16_sm90_n64", 4));    // few rows, K under 16384: 4 parts
  EXPECT_EQ(Choice({4096, 32, 32768}).first, "gemm/bf16_sm90_m64n32");
  EXPECT_EQ(ChooseGemm({4096, 16, 4096}, 90, {.a_mn = true}).kernel.find("m64n32"), std::string::npos);
  EXPECT_NE(ChooseGemm({4096, 16, 4096}, 90).why.find("A is the weights"), std::string::npos);
}

}  // namespace
}  // namespace kiln::examples

namespace kiln::examples {

// PTX ISA, tcgen05.commit: a commit tracks the asynchronous tcgen05 ops its own thread issued.
// Warp 1's lane 0 issues the MMA; a commit by thread 0 instead leaves it uncommitted, so the
// wait on that commit ends at once and the load after it races with the MMA, which the report
// says, naming the issuing thread.
TEST(PlantedBugs, ACommitByAnotherThreadTracksNoneOfItsMmas) {
  for (bool own : {true, false}) {
    Kernel k("test/commit_thread", sm100a(), {128});
    Value out = k.PtrParam("out", f32);
    SmemTile a = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
    SmemTile b = k.SmemSwizzled(bf16, 128, 64, Swizzle::k128B);
    Barriers bar = k.SmemBarriers(1);
    Tmem t = k.TensorMemory(128);
    Value tid = k.ThreadIdx();
    for (int c = 0; c < 64; ++c) {
      k.Store(a.At(tid, c), k.F32(1).To(Scalar::kBF16));
      k.Store(b.At(tid, c), k.F32(1).To(Scalar::kBF16));
    }
    k.FenceProxyAsync();
    k.If(tid == 0, [&] { bar[0].Init(1); });
    k.If(k.WarpId() == 0, [&] { k.TmemAlloc(t); k.TmemRelinquish(); });
    k.TcgenFenceBeforeSync();
    k.SyncThreads();
    k.TcgenFenceAfterSync();
    k.If(tid == 32, [&] {
      k.TcgenMma(t, {.m = 128, .n = 128, .a = a, .b = b, .accumulate = 0});
      if (own) k.TcgenCommit(bar[0]);
    });
    if (!own) k.If(tid == 0, [&] { k.TcgenCommit(bar[0]); });
    bar[0].Wait(0);
    k.TcgenFenceAfterSync();
    std::vector<Value> v = k.TcgenLoad(t, k.WarpId() * 32, 0, 16);
    for (int i = 0; i < 16; ++i) k.Store(out + (tid * 16 + i).To(i64), v[i]);
    k.TcgenFenceBeforeSync();
    k.SyncThreads();
    k.If(k.WarpId() == 0, [&] { k.TmemFree(t); });
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    const rt::Bundle& bundle = *built;
    emu::Device d;
    uint64_t dp = *d.Allocate(128 * 16 * 4);
    absl::StatusOr<emu::Stats> s = emu::Launch(d, bundle, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(dp)});
    if (own) {
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<float> o(128 * 16);
      ASSERT_TRUE(d.CopyOut(o.data(), dp, o.size() * 4).ok());
      EXPECT_EQ(o[0], 16.f);  // one MMA: k 0..15 of a row of ones times a column of ones
      EXPECT_EQ(o[127 * 16 + 15], 16.f);
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.status().message().find("no tcgen05.commit of thread 32 (which issued it)"),
                std::string::npos)
          << s.status();
    }
  }
}

// A shared tile indexed past its rows by a run-time value lands in the next tile without a word;
// in the GPU debug mode (Watchdog) the index is checked, and the emulator stops at the trap, naming
// the DSL line of the At.
TEST(PlantedBugs, ASharedRowPastItsTileStopsTheDebugMode) {
  for (bool debug : {false, true}) {
    Kernel k(debug ? "test/index_checked" : "test/index_unchecked", sm90a(), {64});
    if (debug) k.Watchdog(100);
    Value out = k.PtrParam("out", f32);
    SmemTile a = k.Smem(f32, 4, 32), b = k.Smem(f32, 4, 32);
    Value tid = k.ThreadIdx();
    k.Store(b.At(tid / 32, tid % 32), k.F32(2));
    k.SyncThreads();
    k.Store(a.At(tid / 32 * 2 + 3, tid % 32), k.F32(1)); const int line = __LINE__;  // row 5 of 4
    k.SyncThreads();
    k.Store(out + tid.To(i64), k.Load(b.At(tid / 32, tid % 32)));
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    // Under every schedule: the threads that lose the race to report wait (nanosleep) for the
    // winner's trap, and that wait is not an endless loop.
    for (uint64_t seed = 0; seed < (debug ? 8 : 1); ++seed) {
    SCOPED_TRACE(seed);
    emu::Device d;
    const uint64_t o = *d.Allocate(64 * 4);
    absl::StatusOr<emu::Stats> s = emu::Launch(d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o)}, {.seed = seed});
    if (!debug) {  // b's row 1 was overwritten through a's row 5
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<float> got(64);
      ASSERT_TRUE(d.CopyOut(got.data(), o, 64 * 4).ok());
      EXPECT_EQ(got[32], 1.f);
      continue;
    }
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(absl::StrCat("emulate_examples_test.cc:", line)),
              std::string::npos)
        << s.status();
    // The record the GPU's launch would fill, read as the runtime reads it: what was indexed.
    EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange) << s.status();
    EXPECT_NE(s.status().message().find("indexed row 5 of a shared tile of 4 rows"), std::string::npos)
        << s.status();
    }
  }
}

// The debug mode's checks where one lane alone is out of range (its warp's lanes disagree: the
// check branches without .uni), and a ring's stage chosen at run time past its stages.
TEST(PlantedBugs, OneLanePastItsTileAndAStagePastItsRingStopTheDebugMode) {
  for (bool stage : {false, true}) {
    Kernel k(stage ? "test/stage_checked" : "test/lane_checked", sm90a(), {64});
    k.Watchdog(100);
    Value out = k.PtrParam("out", f32);
    SmemTile a = k.Smem(f32, 4, 32, SmemLayout{.stages = 2});  // a ring of two stages
    Value tid = k.ThreadIdx();
    int line = 0;
    if (stage) {
      SmemTile s = a.Stage(tid / 32 + 1); line = __LINE__;  // warp 1: stage 2 of 2
      k.Store(s.At(0, tid % 32), k.F32(1));
    } else {
      k.Store(a.Stage(0).At(Select(tid == 63, k.I32(4), tid / 32), tid % 32), k.F32(1)); line = __LINE__;
    }
    k.Store(out + tid.To(i64), k.F32(0));
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    emu::Device d;
    const uint64_t o = *d.Allocate(64 * 4);
    absl::StatusOr<emu::Stats> s = emu::Launch(d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o)});
    ASSERT_FALSE(s.ok()) << stage;
    EXPECT_NE(s.status().message().find(absl::StrCat("emulate_examples_test.cc:", line)),
              std::string::npos)
        << s.status();
    const std::string what = stage ? "of block (0,0,0) indexed stage 2 of a ring of 2 stages"
                                   : "thread 63 of block (0,0,0) indexed row 4 of a shared tile of 4 rows";
    EXPECT_NE(s.status().message().find(what), std::string::npos) << s.status();
    // A second launch on the same device reports again: the claim word and the record start
    // clear each time.
    absl::StatusOr<emu::Stats> again = emu::Launch(d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o)});
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find(what), std::string::npos) << again.status();
  }
}

// A wait on a flag that another thread sets. Through a plain load the compiler loads the flag
// once, before the loop, which becomes a branch to itself: the emulator says so at once (not at
// its instruction budget). Through LoadAcquire the loop reads the flag each pass and ends.
TEST(PlantedBugs, AFlagWaitedOnThroughAPlainLoadIsAnEndlessLoop) {
  for (bool acquire : {true, false}) {
    Kernel k("test/flag_wait", sm90a(), {64});
    Value flag = k.PtrParam("flag", i32), data = k.PtrParam("data", f32);
    Value out = k.PtrParam("out", f32);
    Value tid = k.ThreadIdx();
    k.If(
        tid == 0,
        [&] {
          k.Store(data, k.F32(42));
          k.FenceGpu();  // the data before the flag
          k.Store(flag, k.I32(1));
        },
        [&] {
          k.While([&] { return (acquire ? LoadAcquire(flag) : k.Load(flag)) == 0; }, [&] {});
          k.Store(out + tid.To(i64), k.Load(data));
        });
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    const rt::Bundle& bundle = *built;
    emu::Device d;
    const uint64_t f = *d.Allocate(4), x = *d.Allocate(4), o = *d.Allocate(64 * 4);
    const int zero = 0;
    ASSERT_TRUE(d.CopyIn(f, &zero, 4).ok());
    absl::StatusOr<emu::Stats> s =
        emu::Launch(d, bundle, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(f), rt::Arg::Ptr(x), rt::Arg::Ptr(o)});
    if (acquire) {
      ASSERT_TRUE(s.ok()) << s.status();
      std::vector<float> got(64);
      ASSERT_TRUE(d.CopyOut(got.data(), o, 64 * 4).ok());
      EXPECT_EQ(got[1], 42.f);
      EXPECT_EQ(got[63], 42.f);
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.status().message().find("an endless loop: this branch jumps to itself"),
                std::string::npos)
          << s.status();
    }
  }
}

// A loop whose pass changes nothing its condition depends on never ends: reported at its second
// such pass, at the loop's line, however much its body does (here shuffles and a barrier, which the
// watch for spinning reads leaves alone), not at the instruction budget; so is a loop the compiler
// left without a way out (a step it folded to 0). A loop nest whose inner loop makes the same single
// pass each time it is entered runs to its end.
TEST(EmulatorLoops, AForOfStepZeroIsReportedAtItsSecondPass) {
  for (int step : {1, 0, -1}) {  // -1: n - n, which the compiler folds
    SCOPED_TRACE(step);
    Kernel k("test/endless_for", sm90a(), {64});
    Value out = k.PtrParam("out", f32);
    Value n = k.I32Param("n"), m = k.I32Param("m"), s = k.I32Param("step");
    Value tid = k.ThreadIdx();
    Value at = out + tid.To(i64);
    k.Store(at, k.F32(0));
    const int for_line = __LINE__ + 1;
    k.For(0, n, step < 0 ? n - n : s, [&](Value) {
      k.For(0, m, 1, [&](Value) {
        Value v = k.Load(at) + 1.f;
        k.Store(at, v + ShflIdx(v, 0) * 0.f);
        k.SyncThreads();
      });
    });
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    emu::Device d;
    const uint64_t o = *d.Allocate(64 * 4);
    absl::StatusOr<emu::Stats> run = emu::Launch(
        d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o), rt::Arg::I32(4), rt::Arg::I32(2), rt::Arg::I32(step)});
    if (step > 0) {
      ASSERT_TRUE(run.ok()) << run.status();
      std::vector<float> got(64);
      ASSERT_TRUE(d.CopyOut(got.data(), o, 64 * 4).ok());
      EXPECT_EQ(got[0], 8.f);
      EXPECT_EQ(got[63], 8.f);
    } else {
      ASSERT_FALSE(run.ok());
      const std::string message(run.status().message());
      EXPECT_NE(message.find(step == 0 ? "an endless loop: a pass of this loop left every register its condition depends on"
                                       : "an endless loop: no path leads out of the loop this branch is in"),
                std::string::npos) << message;
      // The loop's line; where the compiler dropped the test, a branch's inside it (the inner For's).
      EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", for_line + (step < 0), ":")), std::string::npos)
          << message;
      EXPECT_LT(run.status().message().size(), 2000u);
    }
  }
}

// A SyncThreads inside an If that some warps skip orders nothing between them: the race it leaves
// names that barrier and the warp that skips it, beside a missing SyncThreads.
TEST(EmulatorRaces, ASyncThreadsThatSomeWarpsSkipIsNamed) {
  Kernel k("test/skipped_sync", sm80(), {64});
  Value out = k.PtrParam("out", f32);
  SmemTile t = k.Smem(f32, 1, 64);
  Value tid = k.ThreadIdx();
  k.Store(t.At(0, tid), k.F32(0));
  k.SyncThreads();
  const int sync_line = __LINE__ + 3;
  k.If(tid < 32, [&] {
    k.Store(t.At(0, tid), k.F32(1));
    k.SyncThreads();
  });
  k.Store(out + tid.To(i64), k.Load(t.At(0, 63 - tid)));  // warp 1 reads what warp 0 wrote in the If
  absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
  ASSERT_TRUE(built.ok()) << built.status();
  emu::Device d;
  const uint64_t o = *d.Allocate(64 * 4);
  // Whichever comes first, warp 0's write or warp 1's read, the message names the barrier.
  for (uint64_t seed : {0, 1, 2, 3}) {
    SCOPED_TRACE(seed);
    absl::StatusOr<emu::Stats> run = emu::Launch(d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o)}, {.seed = seed});
    ASSERT_FALSE(run.ok());
    const std::string message(run.status().message());
    EXPECT_NE(message.find("a data race on shared byte"), std::string::npos) << message;
    EXPECT_NE(message.find(absl::StrCat("or the SyncThreads at PTX line")), std::string::npos) << message;
    EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", sync_line, ", where ")), std::string::npos)
        << message;
    EXPECT_NE(message.find("is one that warp 1 skips"), std::string::npos) << message;
  }
}


// Lanes of one warp exchanging values through shared memory need a SyncWarp between the writes
// and the reads (program order holds within a thread only); whichever lane runs first, one of
// the pairs conflicts (a read after the write, or a write after the read). With it, every
// schedule gives the exchanged values.
TEST(EmulatorRaces, LanesOfAWarpNeedASyncWarpBetweenThem) {
  for (bool synced : {false, true}) {
    SCOPED_TRACE(synced);
    Kernel k("test/lane_exchange", sm80(), {32});
    Value out = k.PtrParam("out", f32);
    SmemTile t = k.Smem(f32, 1, 32);
    Value lane = k.ThreadIdx();
    k.Store(t.At(0, lane), k.F32(-1));  // (written and ordered first: a read before the exchange's
    k.SyncThreads();                    // write sees -1, not an uninitialised value)
    const int write_line = __LINE__ + 1;
    k.Store(t.At(0, lane), lane.To(f32));
    if (synced) k.SyncWarp();
    const int read_line = __LINE__ + 1;
    Value next = k.Load(t.At(0, (lane + 1) % 32));
    k.Store(out + lane.To(i64), next);
    absl::StatusOr<rt::Bundle> built = BundleOfBuilt(k);
    ASSERT_TRUE(built.ok()) << built.status();
    for (uint64_t seed : {0, 1, 2, 3}) {
      SCOPED_TRACE(seed);
      emu::Device d;
      const uint64_t o = *d.AllocatePoisoned(32 * 4);
      absl::StatusOr<emu::Stats> run =
          emu::Launch(d, *built, rt::Dim3{1, 1, 1}, {rt::Arg::Ptr(o)}, {.seed = seed});
      if (synced) {
        ASSERT_TRUE(run.ok()) << run.status();
        std::vector<float> got(32);
        ASSERT_TRUE(d.CopyOut(got.data(), o, 32 * 4).ok());
        for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], static_cast<float>((i + 1) % 32)) << i;
        continue;
      }
      ASSERT_FALSE(run.ok());
      const std::string message(run.status().message());
      EXPECT_NE(message.find("a data race on shared byte"), std::string::npos) << message;
      EXPECT_NE(message.find("in this warp are not ordered"), std::string::npos) << message;
      EXPECT_NE(message.find("a SyncWarp is missing"), std::string::npos) << message;
      // Both lines are named: the access that found the race and the earlier one.
      EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", write_line)), std::string::npos)
          << message;
      EXPECT_NE(message.find(absl::StrCat("emulate_examples_test.cc:", read_line)), std::string::npos)
          << message;
    }
  }
}

}  // namespace kiln::examples
