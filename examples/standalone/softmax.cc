// A program of its own that uses kiln: it builds a row softmax with the DSL, compiles it
// in-process (the second run reads the PTX from kiln's disk cache), prints the PTX, assembles it
// with ptxas where the CUDA toolkit is installed, and where a GPU exists launches it on a ragged
// shape and checks it against a double-precision reference.
//
//   softmax [--rows R] [--cols C] [--quiet]     exit 0 when everything that could run passed
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/compile.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"
#include "kiln/runtime/launch.h"

namespace {

using namespace kiln;  // NOLINT: a kernel reads better with the DSL's names unqualified

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
    k.For(lane, cols, 32, [&](Value c) {
      k.Store(yr + c, Exp2(Fma(k.Load(xr + c), log2e, neg_m)) * inv);
    });
  });
  return k.Build();
}

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s << "\n";
  return 1;
}

// Launches the kernel on rows x cols normal inputs and compares with a double reference.
absl::Status RunOnGpu(const rt::Bundle& bundle, int rows, int cols) {
  absl::StatusOr<rt::LoadedKernel> kernel = rt::LoadedKernel::Load(bundle);
  if (!kernel.ok()) return kernel.status();
  size_t n = static_cast<size_t>(rows) * cols;
  std::vector<float> x(n), y(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (float& v : x) v = normal(rng);
  absl::StatusOr<rt::DeviceBuffer> dx = rt::DeviceBuffer::Allocate(n * 4);
  if (!dx.ok()) return dx.status();
  absl::StatusOr<rt::DeviceBuffer> dy = rt::DeviceBuffer::Allocate(n * 4);
  if (!dy.ok()) return dy.status();
  if (absl::Status s = dx->CopyFromHost(x.data(), n * 4); !s.ok()) return s;
  if (absl::Status s = dy->Fill(0xff); !s.ok()) return s;  // NaN: an unwritten element fails
  absl::Status s = kernel->Launch({rt::Arg::Ptr(*dx), rt::Arg::Ptr(*dy), rt::Arg::I32(rows),
                                   rt::Arg::I32(cols)});
  if (!s.ok()) return s;
  if (s = rt::Synchronize(); !s.ok()) return s;
  if (s = dy->CopyToHost(y.data(), n * 4); !s.ok()) return s;
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
  std::cout << "launched on " << (*rt::Driver::Get())->device_name() << ": " << rows << "x" << cols
            << ", relative error " << rel << "\n";
  if (!(rel < 1e-5)) return absl::InternalError(absl::StrCat("relative error ", rel, " >= 1e-5"));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 1000, cols = 3001;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) rows = std::atoi(argv[++i]);
    else if (a == "--cols" && i + 1 < argc) cols = std::atoi(argv[++i]);
    else if (a == "--quiet") quiet = true;
    else {
      std::cerr << "usage: softmax [--rows R] [--cols C] [--quiet]\n";
      return 2;
    }
  }

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

  if (absl::StatusOr<rt::Driver*> driver = rt::Driver::Get(); !driver.ok()) {
    std::cout << "no GPU here: launch skipped (" << driver.status().message() << ")\n";
    return 0;
  }
  if (absl::Status s = RunOnGpu(compiled->bundle, rows, cols); !s.ok()) return Fail(s);
  std::cout << "softmax correct\n";
  return 0;
}
