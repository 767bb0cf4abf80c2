// A program of its own that uses kiln: it builds a row softmax with the DSL, compiles it
// in-process (the second run reads the PTX from kiln's disk cache), prints the PTX, assembles it
// with ptxas where the CUDA toolkit is installed, and launches it on a ragged shape and checks it
// against a double-precision reference: on the GPU where one exists, else in kiln's PTX emulator.
//
// The same file builds `softmax_run` against kiln's runtime component alone (no LLVM), for GPU
// machines: it launches the bundle `softmax --save DIR` wrote on a build machine.
//
//   softmax     [--rows R] [--cols C] [--quiet] [--save DIR]
//   softmax_run --load DIR [--rows R] [--cols C]
// Exit 0 when everything that could run passed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/bundle/manifest.h"
#include "kiln/emulator.h"
#include "kiln/runtime/launch.h"
#ifndef KILN_RUNTIME_ONLY
#include "kiln/compile.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#endif

namespace {

using namespace kiln;  // NOLINT: a kernel reads better with the DSL's names unqualified

#ifndef KILN_RUNTIME_ONLY
constexpr int kRowsPerBlock = 8;  // one warp per row

// y[r, :] = softmax(x[r, :]) over an f32 [rows, cols] matrix, any shape: each lane keeps a
// running max and a sum rescaled to it over its columns, the warp combines them, and a second
// pass writes e^(x - max) / sum.
absl::StatusOr<KernelDef> BuildSoftmax() {
  Kernel k("standalone/softmax", sm80(), {32 * kRowsPerBlock});
  Value x = k.PtrParam("x", f32), y = k.PtrParam("y", f32);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols");
  k.Grid("rows/8");
  const double log2e = M_LOG2E;
  Value row = k.BlockIdx() * kRowsPerBlock + k.WarpId(), lane = k.LaneId();
  k.If(row < rows, [&] {
    Value xr = x + row.To(i64) * cols.To(i64), yr = y + row.To(i64) * cols.To(i64);
    Regs st = k.Registers(Type::Of(f32), 2);  // running max, sum of e^(x - max)
    st[0] = k.F32(-INFINITY);
    k.For(lane, cols, 32, [&](Value c) {
      Value v = k.Load(xr + c);
      Value m = Max(st[0], v);
      st[1] = Fma(st[1], Exp2((st[0] - m) * log2e), Exp2((v - m) * log2e));
      st[0] = m;
    });
    Value m = WarpReduce(st[0], Reduce::kMax);
    Value inv = Rcp(WarpReduce(st[1] * Exp2((st[0] - m) * log2e), Reduce::kSum));
    Value neg_m = m * -log2e;
    k.For(lane, cols, 32,
          [&](Value c) { k.Store(yr + c, Exp2(Fma(k.Load(xr + c), log2e, neg_m)) * inv); });
  });
  return k.Build();
}
#endif

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s << "\n";
  return 1;
}

// Where the kernel runs: device buffers and one launch, on the GPU or in kiln's emulator.
struct Device {
  virtual ~Device() = default;
  virtual absl::StatusOr<uint64_t> Upload(const std::vector<float>& v) = 0;
  virtual absl::StatusOr<uint64_t> Poisoned(size_t bytes) = 0;  // NaN: an unwritten element fails
  virtual absl::Status Launch(const std::vector<rt::Arg>& args) = 0;
  virtual absl::Status Download(std::vector<float>& v, uint64_t from) = 0;
};

struct Gpu : Device {
  rt::LoadedKernel kernel;
  std::vector<rt::DeviceBuffer> buffers;
  explicit Gpu(rt::LoadedKernel k) : kernel(std::move(k)) {}
  absl::StatusOr<uint64_t> Poisoned(size_t bytes) override {
    absl::StatusOr<rt::DeviceBuffer> b = rt::DeviceBuffer::Allocate(bytes);
    if (!b.ok()) return b.status();
    if (absl::Status s = b->Fill(0xff); !s.ok()) return s;
    buffers.push_back(*std::move(b));
    return buffers.back().ptr();
  }
  absl::StatusOr<uint64_t> Upload(const std::vector<float>& v) override {
    absl::StatusOr<uint64_t> p = Poisoned(v.size() * 4);
    if (!p.ok()) return p;
    if (absl::Status s = buffers.back().CopyFromHost(v.data(), v.size() * 4); !s.ok()) return s;
    return p;
  }
  absl::Status Launch(const std::vector<rt::Arg>& args) override {
    if (absl::Status s = kernel.Launch(args); !s.ok()) return s;
    return rt::Synchronize();
  }
  absl::Status Download(std::vector<float>& v, uint64_t from) override {
    for (const rt::DeviceBuffer& b : buffers)
      if (b.ptr() == from) return b.CopyToHost(v.data(), v.size() * 4);
    return absl::InternalError("not a buffer of this program");
  }
};

struct Emulator : Device {
  const rt::Bundle& bundle;
  emu::Device device;
  explicit Emulator(const rt::Bundle& b) : bundle(b) {}
  absl::StatusOr<uint64_t> Poisoned(size_t bytes) override {
    absl::StatusOr<uint64_t> p = device.Allocate(bytes);
    if (!p.ok()) return p;
    if (absl::Status s = device.Fill(*p, 0xff, bytes); !s.ok()) return s;
    return p;
  }
  absl::StatusOr<uint64_t> Upload(const std::vector<float>& v) override {
    absl::StatusOr<uint64_t> p = device.Allocate(v.size() * 4);
    if (!p.ok()) return p;
    if (absl::Status s = device.CopyIn(*p, v.data(), v.size() * 4); !s.ok()) return s;
    return p;
  }
  absl::Status Launch(const std::vector<rt::Arg>& args) override {
    absl::StatusOr<emu::Stats> s = emu::Launch(device, bundle, args);
    if (!s.ok()) return s.status();
    // An output some CTAs never reached (a grid rule that covers too little) is told here.
    for (const emu::PartlyWritten& p : s->partly_written) std::cerr << p.message << "\n";
    return absl::OkStatus();
  }
  absl::Status Download(std::vector<float>& v, uint64_t from) override {
    return device.CopyOut(v.data(), from, v.size() * 4);
  }
};

// Launches the kernel on rows x cols normal inputs and compares with a double reference.
absl::Status RunAndCheck(Device& device, const std::string& where, int rows, int cols) {
  size_t n = static_cast<size_t>(rows) * cols;
  std::vector<float> x(n), y(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (float& v : x) v = normal(rng);
  absl::StatusOr<uint64_t> dx = device.Upload(x), dy = device.Poisoned(n * 4);
  if (!dx.ok()) return dx.status();
  if (!dy.ok()) return dy.status();
  if (absl::Status s = device.Launch(
          {rt::Arg::Ptr(*dx), rt::Arg::Ptr(*dy), rt::Arg::I32(rows), rt::Arg::I32(cols)});
      !s.ok())
    return s;
  if (absl::Status s = device.Download(y, *dy); !s.ok()) return s;
  double err = 0, norm = 0;
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r) * cols];
    double m = -INFINITY, sum = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(xr[c]));
    for (int c = 0; c < cols; ++c) sum += std::exp(xr[c] - m);
    for (int c = 0; c < cols; ++c) {
      double want = std::exp(xr[c] - m) / sum, got = y[static_cast<size_t>(r) * cols + c];
      if (std::isnan(got)) return absl::InternalError(absl::StrCat("NaN at row ", r, " col ", c));
      err += (got - want) * (got - want);
      norm += want * want;
    }
  }
  double rel = std::sqrt(err / norm);
  std::cout << "launched on " << where << ": " << rows << "x" << cols << ", relative error " << rel
            << "\n";
  if (!(rel < 1e-5)) return absl::InternalError(absl::StrCat("relative error ", rel, " >= 1e-5"));
  return absl::OkStatus();
}

// On the GPU where one exists, else in the emulator (a smaller shape: it runs every thread).
absl::Status Check(const rt::Bundle& bundle, int rows, int cols) {
  if (absl::StatusOr<rt::Driver*> driver = rt::Driver::Get(); driver.ok()) {
    absl::StatusOr<rt::LoadedKernel> kernel = rt::LoadedKernel::Load(bundle);
    if (!kernel.ok()) return kernel.status();
    Gpu gpu(*std::move(kernel));
    return RunAndCheck(gpu, (*driver)->device_name(), rows, cols);
  } else {
    std::cout << "no GPU here (" << driver.status().message()
              << "): running kiln's PTX emulator instead\n";
  }
  Emulator emulator(bundle);
  return RunAndCheck(emulator, "kiln's PTX emulator", std::min(rows, 37), cols);
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 1000, cols = 3001;
  bool quiet = false;
  std::string save, load;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc)
      rows = std::atoi(argv[++i]);
    else if (a == "--cols" && i + 1 < argc)
      cols = std::atoi(argv[++i]);
    else if (a == "--quiet")
      quiet = true;
    else if (a == "--save" && i + 1 < argc)
      save = argv[++i];
    else if (a == "--load" && i + 1 < argc)
      load = argv[++i];
    else {
      std::cerr << "usage: softmax [--rows R] [--cols C] [--quiet] [--save DIR]; softmax_run "
                   "--load DIR [...]\n";
      return 2;
    }
  }
  if (rows < 1 || cols < 1) {
    std::cerr << "rows and cols must be at least 1\n";
    return 2;
  }

#ifdef KILN_RUNTIME_ONLY
  if (load.empty()) {
    std::cerr << "softmax_run has no compiler: give it the bundle `softmax --save DIR` wrote "
                 "(--load DIR)\n";
    return 2;
  }
  absl::StatusOr<rt::Bundle> bundle = rt::ReadBundle(load, "standalone/softmax");
  if (!bundle.ok()) return Fail(bundle.status());
  std::cout << "loaded " << bundle->manifest.name << " from " << load << "\n";
#else
  absl::StatusOr<KernelDef> def = BuildSoftmax();
  if (!def.ok()) return Fail(def.status());
  absl::StatusOr<CompiledKernel> compiled = Compile(*def);
  if (!compiled.ok()) return Fail(compiled.status());
  std::cout << "compiled " << def->manifest().name << " in " << compiled->milliseconds << " ms ("
            << (compiled->from_cache ? "from the cache" : "lowered") << ", key "
            << compiled->key.substr(0, 12) << ")\n";
  if (!compiled->cache_warning.empty()) std::cout << "cache: " << compiled->cache_warning << "\n";
  if (!quiet) std::cout << compiled->bundle.ptx;

  if (HaveToolkit()) {
    absl::StatusOr<PtxasResult> cubin = RunPtxas(compiled->bundle.ptx, def->target().chip);
    if (!cubin.ok()) return Fail(cubin.status());
    std::cout << "ptxas accepted it for " << def->target().chip << "\n";
  } else {
    std::cout << "no CUDA toolkit here: ptxas check skipped\n";
  }
  if (!save.empty()) {
    if (absl::Status s = rt::WriteBundle(save, compiled->bundle); !s.ok()) return Fail(s);
    std::cout << "saved the bundle to " << save << " (softmax_run --load " << save
              << " launches it)\n";
  }
  const rt::Bundle* bundle = &compiled->bundle;
#endif
  if (absl::Status s = Check(*bundle, rows, cols); !s.ok()) return Fail(s);
  std::cout << "softmax correct\n";
  return 0;
}
