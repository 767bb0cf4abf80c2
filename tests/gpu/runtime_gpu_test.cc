// Runtime tests. Those that need a GPU skip with the reason where there is none; the GPU suite
// (tools/gpu_suite.sh) runs them on the device from the runtime-only build.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/harness.h"
#include "examples/host_data.h"
#include "examples/probe_check.h"
#include "examples/row_ops.h"
#include "gtest/gtest.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"
#include "kiln/bundle/manifest.h"
#include "kiln/runtime/tensor_map.h"

namespace kiln::rt {
namespace {

constexpr const char* kNoopPtx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry noop() { ret; }
)";

#define REQUIRE_GPU()                                                       \
  do {                                                                      \
    absl::StatusOr<Driver*> d = Driver::Get();                              \
    if (!d.ok()) GTEST_SKIP() << "no GPU here: " << d.status().message();   \
  } while (0)

// A GPU and a bundle directory (KILN_BUNDLE_DIR), named `dir` in the test, or the test skips.
#define REQUIRE_GPU_AND_BUNDLES()                                                                \
  REQUIRE_GPU();                                                                                 \
  const char* dir = std::getenv("KILN_BUNDLE_DIR");                                              \
  if (!dir) GTEST_SKIP() << "set KILN_BUNDLE_DIR to a bundle directory to run the kernels"

TEST(Driver, ReportsADeviceOrSaysWhyNot) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (d.ok()) {
    EXPECT_FALSE((*d)->device_name().empty());
    EXPECT_GT((*d)->sm_count(), 0);
    EXPECT_GE((*d)->compute_capability(), 50);
  } else {
    EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
    EXPECT_NE(d.status().message().find("CUDA"), std::string::npos) << d.status();
  }
}

TEST(TensorMap, RejectsBadSpecsBeforeTheDriver) {
  TensorMapSpec spec;
  spec.dims = {4096, 4096};
  spec.strides_bytes = {4096 * 2};
  spec.box = {64, 128};
  spec.swizzle = TmaSwizzle::k128B;
  EXPECT_TRUE(ValidateTensorMap(spec, 0x1000).ok());
  EXPECT_FALSE(ValidateTensorMap(spec, 0x1008).ok());  // unaligned base
  spec.strides_bytes = {4094};
  EXPECT_NE(ValidateTensorMap(spec, 0x1000).message().find("multiple of 16"), std::string::npos);
  spec.strides_bytes = {8192};
  spec.box = {128, 128};  // 256 bytes inner box > 128B swizzle span
  EXPECT_NE(ValidateTensorMap(spec, 0x1000).message().find("swizzle span"), std::string::npos);
}

TEST(TensorMapGpu, EncodesA2DMap) {
  REQUIRE_GPU();
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(256 * 256 * 2);
  ASSERT_TRUE(buf.ok()) << buf.status();
  TensorMapSpec spec{TmaDtype::kBF16, {256, 256}, {512}, {64, 64}, TmaSwizzle::k128B};
  EXPECT_TRUE(EncodeTensorMap(spec, buf->ptr()).ok());
}

TEST(KernelGpu, BadPtxCarriesTheJitLog) {
  REQUIRE_GPU();
  absl::StatusOr<Kernel> k = Kernel::Load(".version 7.8\n.target sm_80\nthis is not ptx\n", "x");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("JIT log"), std::string::npos) << k.status();
}

TEST(KernelGpu, MissingEntryIsNamed) {
  REQUIRE_GPU();
  absl::StatusOr<Kernel> k = Kernel::Load(kNoopPtx, "not_there");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("not_there"), std::string::npos) << k.status();
}

TEST(KernelGpu, LaunchesAndRejectsOversizedSharedMemory) {
  REQUIRE_GPU();
  absl::StatusOr<Kernel> k = Kernel::Load(kNoopPtx, "noop");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->Launch({{1}, {32}}, nullptr).ok());
  EXPECT_TRUE(Synchronize().ok());
  absl::Status s = k->Launch({{1}, {32}, {1}, 1u << 20}, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("shared memory"), std::string::npos) << s;
}

TEST(KernelGpu, CountsTheClustersThatFit) {
  REQUIRE_GPU();
  if ((*Driver::Get())->compute_capability() < 90) GTEST_SKIP() << "clusters need sm_90";
  absl::StatusOr<Kernel> k = Kernel::Load(kNoopPtx, "noop");
  ASSERT_TRUE(k.ok()) << k.status();
  const int sms = (*Driver::Get())->sm_count();
  // Small blocks: many per SM, so pairs fit at least once per two SMs.
  absl::StatusOr<int> pairs = k->MaxActiveClusters({{2}, {32}, {2, 1, 1}});
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_GE(*pairs, sms / 2);
  // One block per SM (most of its smem): a cluster of 4 needs 4 SMs of one GPC, so at most
  // sms / 4 fit, and no fewer than one.
  absl::StatusOr<int> quads =
      k->MaxActiveClusters({{4}, {32}, {4, 1, 1}, static_cast<unsigned>((*Driver::Get())->max_smem_optin())});
  ASSERT_TRUE(quads.ok()) << quads.status();
  EXPECT_GE(*quads, 1);
  EXPECT_LE(*quads, sms / 4);
}

TEST(HarnessGpu, RefusesAKernelBuiltForAnotherChip) {
  REQUIRE_GPU();
  Bundle b;
  b.manifest.name = "test/other_chip";
  b.manifest.entry = "noop";
  b.manifest.target = (*Driver::Get())->compute_capability() == 100 ? "sm_90a" : "sm_100a";
  b.manifest.attributes = {{"gemm", "bf16 bf16 f32 row col row 1 1 1 -"}};
  b.ptx = kNoopPtx;
  // The typed launch API refuses it the same way.
  absl::StatusOr<LoadedKernel> loaded = LoadedKernel::Load(b);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("cannot run here"), std::string::npos) << loaded.status();
  examples::RunOptions opt;
  opt.size = {128, 128, 128};
  absl::StatusOr<examples::GemmResult> r = examples::RunGemm(b, nullptr, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("cannot run here"), std::string::npos) << r.status();
}

// A memory-bound GEMM (M <= 64) reports the weights' rates per call and, for 16 MB of weights or
// more, in steady state (back to back over copies of B making 256 MB or more), each beside a
// device copy's and a bare read's; a compute-bound one reports neither.
TEST(HarnessGpu, MemoryBoundGemmsReportTheWeightsRatesPerCallAndInSteadyState) {
  REQUIRE_GPU_AND_BUNDLES();
  if ((*Driver::Get())->compute_capability() != 90) GTEST_SKIP() << "the 64-row tiles are sm_90a kernels";
  absl::StatusOr<Bundle> b = ReadBundle(dir, "gemm/bf16_sm90_m64n32"), read = ReadBundle(dir, "ops/stream_read");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(read.ok()) << read.status();
  examples::RunOptions opt;
  opt.size = {16, 4096, 4096};  // 32 MB of weights: 9 copies
  opt.iterations = 4;
  opt.stream_read = &*read;
  absl::StatusOr<examples::GemmResult> r = examples::RunGemm(*b, nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->passed) << examples::TableRow(*r);
  for (double rate : {r->weight_gbps, r->copy_gbps, r->read_gbps, r->steady_weight_gbps, r->steady_copy_gbps,
                      r->steady_read_gbps, r->steady_cublas_gbps})
    EXPECT_TRUE(rate > 0 && std::isfinite(rate)) << r->note;
  EXPECT_EQ(r->steady_copies, 9);
  EXPECT_NE(r->note.find("in steady state (launches back to back over 9 copies of B)"), std::string::npos) << r->note;
  opt.size = {16, 256, 2048};  // 1 MB of weights: per call only
  r = examples::RunGemm(*b, nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->weight_gbps, 0);
  EXPECT_EQ(r->steady_copies, 0);
  EXPECT_EQ(r->note.find("steady state"), std::string::npos) << r->note;
  opt.size = {128, 4096, 4096};
  r = examples::RunGemm(*b, nullptr, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steady_copies, 0);
  EXPECT_EQ(r->weight_gbps, 0);
}

// Every bundle in $KILN_BUNDLE_DIR, correct at a small square and a non-square size (each
// rounded up to the bundle's tile, for kernels whose schedules need large multiples).
TEST(BundlesGpu, EveryBundleIsCorrect) {
  REQUIRE_GPU_AND_BUNDLES();
  absl::StatusOr<std::vector<std::string>> names = ListBundles(dir);
  ASSERT_TRUE(names.ok()) << names.status();
  ASSERT_FALSE(names->empty());
  for (const std::string& name : *names) {
    if (name.rfind("reference/", 0) == 0) continue;
    absl::StatusOr<Bundle> b = ReadBundle(dir, name);
    ASSERT_TRUE(b.ok()) << b.status();
    const std::optional<examples::GemmSpec> gemm = examples::GemmOf(b->manifest);
    if (!gemm) continue;  // the ops kernels: LaunchGpu below
    // 8-bit inputs need their scales, which this harness does not make: tools/gpu_suite.sh's fp8
    // section checks those kernels through the entry point (kiln gemm --dtype e4m3 --scaling S,
    // tools/fp8_peers.py).
    if (gemm->in_type == "e4m3" || gemm->in_type == "e5m2") continue;
    if (absl::Status here = rt::CheckTarget(b->manifest, **Driver::Get()); !here.ok()) {
      // Built for a newer chip (sm_100a here on an H100/H200): the launch must say so clearly.
      examples::RunOptions opt;
      opt.size = {512, 512, 512};
      absl::StatusOr<examples::GemmResult> r = examples::RunGemm(*b, nullptr, opt);
      ASSERT_FALSE(r.ok()) << name;
      EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
      EXPECT_NE(r.status().message().find("cannot run here"), std::string::npos) << r.status();
      continue;
    }
    absl::StatusOr<Bundle> ref = ReadBundle(dir, "reference/" + gemm->in_type);
    const examples::GemmSpec& g = *gemm;
    auto up = [](int64_t v, int64_t tile) { return (v + tile - 1) / tile * tile; };
    using rt::GemmSize;
    for (rt::GemmSize size : {rt::GemmSize{512, 512, 512}, rt::GemmSize{768, 256, 384}}) {
      size = {up(size.m, g.tile_m), up(size.n, g.tile_n), up(size.k, g.tile_k)};
      examples::RunOptions opt;
      opt.size = size;
      opt.time = false;
      opt.seed = 7;
      absl::StatusOr<examples::GemmResult> r =
          examples::RunGemm(*b, ref.ok() ? &*ref : nullptr, opt);
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
      EXPECT_TRUE(r->passed) << examples::TableRow(*r);
    }
  }
}


// ops/saxpy through the typed launch API at ragged sizes, against the same fma on the CPU, and
// the launch-time errors on the loaded kernel.
TEST(LaunchGpu, SaxpyAtRaggedSizesAndItsErrors) {
  REQUIRE_GPU_AND_BUNDLES();
  absl::StatusOr<Bundle> b = ReadBundle(dir, "ops/saxpy");
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<LoadedKernel> k = LoadedKernel::Load(*b);
  ASSERT_TRUE(k.ok()) << k.status();
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0, 1);
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3001}, int64_t{(1 << 20) + 7}}) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = normal(gen);
    for (auto& v : y) v = normal(gen);
    absl::StatusOr<DeviceBuffer> dx = DeviceBuffer::Allocate(n * 4), dy = DeviceBuffer::Allocate(n * 4 + 4);
    ASSERT_TRUE(dx.ok() && dy.ok());
    ASSERT_TRUE(dx->CopyFromHost(x.data(), n * 4).ok());
    ASSERT_TRUE(dy->Fill(0x7f).ok());  // the element past n must stay as it is
    ASSERT_TRUE(dy->CopyFromHost(y.data(), n * 4).ok());
    const float a = 1.5f;
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    ASSERT_TRUE(k->Launch({blocks, 1, 1}, {Arg::Ptr(*dx), Arg::Ptr(*dy), Arg::F32(a), Arg::I64(n)}).ok());
    ASSERT_TRUE(Synchronize().ok());
    std::vector<float> out(n + 1);
    ASSERT_TRUE(dy->CopyToHost(out.data(), (n + 1) * 4).ok());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += out[i] != std::fma(a, x[i], y[i]);
    EXPECT_EQ(wrong, 0) << "n = " << n;
    uint32_t past;
    std::memcpy(&past, &out[n], 4);
    EXPECT_EQ(past, 0x7f7f7f7fu) << "n = " << n << ": a thread past the end wrote";
  }
  // The grid from the kernel's rule n/256, evaluated from the arguments.
  absl::StatusOr<Dim3> g = k->GridFor({Arg::Ptr(0), Arg::Ptr(0), Arg::F32(1), Arg::I64(1000)});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->x, 4u);
  {
    const int64_t n = 777;
    std::vector<float> x(n, 2.0f), y(n, 1.0f), out(n);
    absl::StatusOr<DeviceBuffer> dx = DeviceBuffer::Allocate(n * 4), dy = DeviceBuffer::Allocate(n * 4);
    ASSERT_TRUE(dx.ok() && dy.ok());
    ASSERT_TRUE(dx->CopyFromHost(x.data(), n * 4).ok() && dy->CopyFromHost(y.data(), n * 4).ok());
    ASSERT_TRUE(k->Launch({Arg::Ptr(*dx), Arg::Ptr(*dy), Arg::F32(0.5f), Arg::I64(n)}).ok());
    ASSERT_TRUE(dy->CopyToHost(out.data(), n * 4).ok());
    int64_t wrong = 0;
    for (float v : out) wrong += v != 2.0f;
    EXPECT_EQ(wrong, 0) << "launched on the grid of its rule";
  }
  absl::Status s = k->Launch({1, 1, 1}, {Arg::Ptr(0), Arg::F32(1)});
  EXPECT_NE(s.message().find("ops/saxpy takes 4 arguments (ptr x, ptr y, f32 a, i64 n), not 2"), std::string::npos) << s;
  EXPECT_NE(s.message().find("examples/ops/saxpy.cc:"), std::string::npos) << s;
  s = k->Launch({1, 1, 1}, {Arg::Ptr(0), Arg::Ptr(0), Arg::F32(1), Arg::I32(1)});
  EXPECT_NE(s.message().find("argument 3 (n) is i64, not i32"), std::string::npos) << s;
  s = k->Launch({0, 1, 1}, {Arg::Ptr(0), Arg::Ptr(0), Arg::F32(1), Arg::I64(1)});
  EXPECT_NE(s.message().find("empty grid"), std::string::npos) << s;
}

// The row ops at ragged sizes, each body of the kernels: the seven register layouts (cols a
// multiple of 8 up to 256, 512, 1024, ..., 16384), the general loop (any other cols), rows not a
// multiple of the 16 a block handles, single rows and columns.
TEST(LaunchGpu, RowOpsAtRaggedSizes) {
  REQUIRE_GPU_AND_BUNDLES();
  const std::pair<int64_t, int64_t> shapes[] = {{1000, 3001}, {1, 1}, {7, 8},       {3, 1024}, {5, 1032},
                                                {6, 2048},   {9, 4000}, {2, 8192},  {3, 8200}, {4097, 1024},
                                                {33, 100},   {5, 16384}, {3, 16392},
                                                {17, 256},   {19, 512}};
  for (const char* name : {"ops/softmax", "ops/rmsnorm", "ops/layernorm", "ops/softmax.f16", "ops/rmsnorm.f16",
                           "ops/layernorm.f16", "ops/softmax.f32", "ops/rmsnorm.f32", "ops/layernorm.f32"}) {
    absl::StatusOr<Bundle> b = ReadBundle(dir, name);
    ASSERT_TRUE(b.ok()) << b.status();
    for (auto [rows, cols] : shapes) {
      kiln::examples::RowOpOptions opt;
      opt.rows = rows, opt.cols = cols, opt.time = false;
      absl::StatusOr<kiln::examples::RowOpResult> r = kiln::examples::RunRowOp(*b, opt);
      ASSERT_TRUE(r.ok()) << name << " " << rows << "x" << cols << ": " << r.status();
      EXPECT_TRUE(r->passed) << name << " " << rows << "x" << cols << ": " << r->failure;
      EXPECT_LT(r->rel_error, 1e-2) << name << " " << rows << "x" << cols;
    }
  }
}

// The op probes: every shuffle, reduction, special function, conversion, atomic, cache hint,
// masked access, the wgmma with A from registers and distributed shared memory, against host
// references, at ragged sizes.
TEST(LaunchGpu, OpProbes) {
  REQUIRE_GPU_AND_BUNDLES();
  const std::pair<const char*, std::vector<int64_t>> probes[] = {
      {"probe/math", {1, 3001, 100000}},  {"probe/convert", {1, 3001, 100000}}, {"probe/warp", {256, 65536}},
      {"probe/atomics", {256, 65536}},     {"probe/memory", {1, 3, 5, 3001, 1000003}},
      {"probe/wgmma_regs", {4096}},        {"probe/cluster", {1, 511, 3001, 100000}},
      {"probe/cluster16", {1, 3001, 100000}}};
  for (const auto& [name, sizes] : probes) {
    absl::StatusOr<Bundle> b = ReadBundle(dir, name);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int64_t n : sizes)
      for (uint64_t seed : {1, 2}) {
        absl::StatusOr<kiln::examples::ProbeResult> r = kiln::examples::RunProbe(*b, {.elements = n, .seed = seed});
        ASSERT_TRUE(r.ok()) << name << " " << n << ": " << r.status();
        EXPECT_TRUE(r->passed()) << kiln::examples::ProbeReport(*r);
      }
  }
}

// `kiln run NAME` of bundle directory `dir` in a child process (a trap ends that process's
// context), its output and exit status together.
std::pair<std::string, int> RunPlantedAlone(const char* dir, const std::string& name) {
  const std::filesystem::path kiln = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kiln";
  if (!std::filesystem::exists(kiln)) return {absl::StrCat("no ", kiln.string()), -1};
  const std::string command = absl::StrCat("timeout 60 ", kiln.string(), " --bundles ", dir, " run ", name, " 2>&1");
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {"popen failed", -1};
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  return {out, pclose(p)};
}

// The GPU debug mode on a shared tile indexed past its end by a run-time row: the check stops
// the launch and the error names the At's DSL line, the row and the tile's rows (OUT_OF_RANGE).
TEST(LaunchGpu, TheDebugModeStopsAnIndexPastItsTile) {
  REQUIRE_GPU_AND_BUNDLES();
  const auto [out, rc] = RunPlantedAlone(dir, "planted/row_past_tile");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OUT_OF_RANGE: examples/probes/watchdog.cc:"), std::string::npos) << out;
  EXPECT_NE(out.find("the debug mode stopped the launch: thread "), std::string::npos) << out;
  EXPECT_NE(out.find("indexed row 5 of a shared tile of 4"), std::string::npos) << out;
}

// The GPU debug mode on a planted hang (one arrival of the two an mbarrier expects): the
// watchdog stops the launch after 200 ms and the error names the wait's DSL line, the block, the
// thread and the phase.
TEST(LaunchGpu, TheWatchdogStopsAHangAndNamesTheWait) {
  REQUIRE_GPU_AND_BUNDLES();
  const auto [out, rc] = RunPlantedAlone(dir, "planted/lost_arrival");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("DEADLINE_EXCEEDED: examples/probes/watchdog.cc:"), std::string::npos) << out;
  EXPECT_NE(out.find(": planted/lost_arrival: the watchdog stopped the launch: thread "), std::string::npos)
      << out;
  EXPECT_NE(out.find("waited over 200 ms for the phase of parity 0 of the mbarrier at shared address"),
            std::string::npos)
      << out;
}


// The TMA GEMMs through the typed launch API, as a user's program would call them: tensors for
// the tensor map parameters (encoded by the launcher from the kernel's rules), the schedule table
// built by the launcher, the grid from the kernel's rule. k02 takes its maps by pointer and C as
// a pointer; k14 takes all three by value and a Hilbert table. Checked against fp64 on the CPU.
TEST(LaunchGpu, TmaGemmsFromTensorsAndTheirErrors) {
  REQUIRE_GPU_AND_BUNDLES();
  if ((*Driver::Get())->compute_capability() != 90) GTEST_SKIP() << "the TMA GEMMs are sm_90a kernels";
  const int64_t M = 512, N = 768, K = 320;  // multiples of k14's 256x256x64 and k02's 64
  std::vector<uint16_t> a = examples::RandomNormal16(M * K, 1, false), b = examples::RandomNormal16(N * K, 2, false);
  absl::StatusOr<DeviceBuffer> da = DeviceBuffer::Allocate(a.size() * 2), db = DeviceBuffer::Allocate(b.size() * 2),
                               dc = DeviceBuffer::Allocate(M * N * 2);
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  ASSERT_TRUE(da->CopyFromHost(a.data(), a.size() * 2).ok());
  ASSERT_TRUE(db->CopyFromHost(b.data(), b.size() * 2).ok());
  for (const char* name : {"hopper/k02", "hopper/k14"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Bundle> bundle = ReadBundle(dir, name);
    ASSERT_TRUE(bundle.ok()) << bundle.status();
    absl::StatusOr<LoadedKernel> k = LoadedKernel::Load(*bundle);
    ASSERT_TRUE(k.ok()) << k.status();
    // Arguments by the manifest's parameters: A (MxK) and B (NxK) K-major, C column-major.
    auto args_for = [&](int64_t m) {
      std::vector<Arg> args;
      for (const ParamSpec& p : bundle->manifest.params) {
        if (p.name == "M") args.push_back(Arg::I32(static_cast<int32_t>(m)));
        else if (p.name == "N") args.push_back(Arg::I32(N));
        else if (p.name == "K") args.push_back(Arg::I32(K));
        else if (p.name == "C") args.push_back(Arg::Ptr(*dc));
        else if (p.kind == ParamSpec::Kind::kScheduleTable) args.push_back(Arg::Schedule());
        else {
          const std::string& t = p.tensor_map.tensor;
          args.push_back(Arg::Tensor(t == "A" ? da->ptr() : t == "B" ? db->ptr() : dc->ptr()));
        }
      }
      return args;
    };
    ASSERT_TRUE(dc->Fill(0xff).ok());  // NaN until written
    absl::Status s = k->Launch(args_for(M));
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(Synchronize().ok());
    std::vector<uint16_t> c(M * N);
    ASSERT_TRUE(dc->CopyToHost(c.data(), c.size() * 2).ok());
    double err = 0, norm = 0;
    for (int64_t i = 0; i < M; i += 7)
      for (int64_t j = 0; j < N; j += 5) {
        double want = 0;
        for (int64_t kk = 0; kk < K; ++kk)
          want += double(examples::Bf16ToFloat(a[i * K + kk])) * examples::Bf16ToFloat(b[j * K + kk]);
        const double got = examples::Bf16ToFloat(c[j * M + i]);
        ASSERT_FALSE(std::isnan(got)) << i << "," << j;
        err += (got - want) * (got - want);
        norm += want * want;
      }
    EXPECT_LT(std::sqrt(err / norm), 1e-2);
    // A size the tile does not divide: refused before launch, naming the rule's line.
    s = k->Launch(args_for(M + 8));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find(" requires M to be a multiple of "), std::string::npos) << s;
    EXPECT_EQ(s.message().rfind("examples/hopper/", 0), 0u) << s;
    // A tensor TMA cannot address (not 16-byte aligned).
    std::vector<Arg> bad = args_for(M);
    for (size_t i = 0; i < bad.size(); ++i)
      if (bundle->manifest.params[i].kind == ParamSpec::Kind::kTensorMap &&
          bundle->manifest.params[i].tensor_map.tensor == "A")
        bad[i] = Arg::Tensor(da->ptr() + 8);
    s = k->Launch(bad);
    EXPECT_NE(s.message().find("tensor map tmA over A: tensor map base address must be 16-byte aligned"),
              std::string::npos) << s;
  }
}

// Shared memory sized by a launch rule, beyond what the device allows: a message, not a launch.
TEST(LaunchGpu, DynamicSmemOverTheDeviceLimitIsRefused) {
  REQUIRE_GPU();
  Bundle b;
  b.manifest.name = "test/dyn_smem";
  b.manifest.entry = "noop";
  b.manifest.target = "sm_80";
  b.manifest.source = "t.cc:1";
  b.manifest.params = {{"n", ParamSpec::Kind::kI32}};
  b.manifest.smem_extra = *GridExpr::Parse("n*1024");
  b.manifest.smem_extra_source = "t.cc:5";
  b.ptx = R"(.version 7.8
.target sm_80
.address_size 64
.visible .entry noop(.param .u32 n) { ret; }
)";
  absl::StatusOr<LoadedKernel> k = LoadedKernel::Load(b);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->Launch({1, 1, 1}, {Arg::I32(16)}).ok());
  absl::Status s = k->Launch({1, 1, 1}, {Arg::I32(1000)});
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(s.message().rfind("t.cc:5: test/dyn_smem: needs 1024000 bytes of shared memory (0 planned + n*1024)", 0), 0u) << s;
  ASSERT_TRUE(Synchronize().ok());
}

}  // namespace
}  // namespace kiln::rt
