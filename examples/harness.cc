#include "examples/harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/cublas.h"
#include "examples/gemm_epilogue.h"
#include "examples/host_data.h"
#include "examples/timing.h"
#include "kiln/bundle/schedule.h"
#include "kiln/emulator.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"
#include "kiln/runtime/tensor_map.h"

namespace kiln::examples {
namespace {

using rt::DeviceBuffer;
using rt::Driver;

// Element (r, c) of a rows x cols matrix stored in `order`.
size_t Index(const std::string& order, int64_t r, int64_t c, int64_t rows, int64_t cols) {
  return order == "row" ? r * cols + c : c * rows + r;
}

}  // namespace

namespace {

// Kernel arguments by parameter name.
struct ArgPack {
  std::vector<uint64_t> pointers;
  std::vector<int32_t> ints;
  std::vector<float> floats;
  std::vector<std::unique_ptr<cu::CUtensorMap>> maps;  // by-value tensor maps
  std::vector<DeviceBuffer> buffers;  // device copies of maps and tables, workspaces
  bool partials = false;              // a work table splits tiles: they meet in the workspace
  std::vector<void*> args;
};

// The integer parameters the harness binds by name: the sizes M, N, K, a work table's split
// and, for kernels that index generically (the references), element strides of (row, col) of
// A, B and C.
std::map<std::string, int64_t> GemmIntArgs(const GemmSpec& g, const rt::GemmSize& s, int split) {
  auto strides = [](const std::string& order, int64_t rows, int64_t cols) {
    return order == "row" ? std::pair<int64_t, int64_t>{cols, 1}
                          : std::pair<int64_t, int64_t>{1, rows};
  };
  auto [a0, a1] = strides(g.a_order, s.m, s.k);
  auto [b0, b1] = strides(g.b_order, s.k, s.n);
  auto [c0, c1] = strides(g.c_order, s.m, s.n);
  return {{"M", s.m},  {"N", s.n},  {"K", s.k},  {"sA0", a0}, {"sA1", a1},
          {"sB0", b0}, {"sB1", b1}, {"sC0", c0}, {"sC1", c1}, {"split", split}};
}

// Copies `bytes` of host data to a new device buffer owned by `pack`; returns its address.
absl::StatusOr<uint64_t> Upload(ArgPack& pack, const void* data, size_t bytes) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes);
  if (!buf.ok()) return buf.status();
  if (absl::Status s = buf->CopyFromHost(data, bytes); !s.ok()) return s;
  pack.buffers.push_back(*std::move(buf));
  return pack.buffers.back().ptr();
}
// Why a split kernel fails when a second launch on its workspace writes other bytes than the first.
std::string SecondLaunchDiffers(int split) {
  return absl::StrCat("a second launch (split ", split,
                      ") wrote different bytes: its workspace was not left as "
                      "found, or the parts were not summed in a fixed order");
}

// `g` gives the storage orders of A, B, C (the kernel under test's, also for the reference).
absl::StatusOr<ArgPack> PackArgs(const rt::Manifest& m, const GemmSpec& g, const rt::GemmSize& s,
                                 int split, const GemmBuffers& buf) {
  ArgPack pack;
  pack.pointers.reserve(m.params.size());
  pack.ints.reserve(m.params.size());
  pack.floats.reserve(m.params.size());
  std::map<std::string, int64_t> ints = GemmIntArgs(g, s, split);
  ints.insert(
      {{"rope_rows", buf.rope_rows}, {"rope_dim", buf.rope_dim}, {"rope_period", buf.rope_period}});
  absl::StatusOr<std::map<std::string, rt::WorkTable>> tables =
      rt::BuildScheduleTables(m, rt::Symbols(ints.begin(), ints.end()));
  if (!tables.ok()) return tables.status();
  for (const auto& [name, t] : *tables) pack.partials |= t.partials > 0;
  auto operand = [&](const std::string& name) -> uint64_t {
    return name == "A"             ? buf.a
           : name == "B"           ? buf.b
           : name == "C"           ? buf.c
           : name == "C_in"        ? buf.c_in
           : name == "bias"        ? buf.bias
           : name == "residual"    ? buf.residual
           : name == "rope_angles" ? buf.rope_angles
                                   : 0;
  };
  for (const rt::ParamSpec& p : m.params) {
    if (p.kind == rt::ParamSpec::Kind::kTensorMap) {
      const rt::TensorMapParam& t = p.tensor_map;
      absl::StatusOr<cu::CUtensorMap> map =
          rt::EncodeTensorMap(t.Resolve(ProblemSymbols(s)), operand(t.tensor));
      if (!map.ok())
        return absl::InvalidArgumentError(absl::StrCat(m.name, ": tensor map ", p.name, " (",
                                                       m.source, "): ", map.status().message()));
      pack.maps.push_back(std::make_unique<cu::CUtensorMap>(*map));
      if (t.by_value) {
        pack.args.push_back(pack.maps.back().get());
      } else {
        absl::StatusOr<uint64_t> dev =
            Upload(pack, pack.maps.back().get(), sizeof(cu::CUtensorMap));
        if (!dev.ok()) return dev.status();
        pack.pointers.push_back(*dev);
        pack.args.push_back(&pack.pointers.back());
      }
      continue;
    }
    if (p.kind == rt::ParamSpec::Kind::kScheduleTable) {
      const std::vector<int32_t>& words = tables->at(p.name).words;
      absl::StatusOr<uint64_t> dev = Upload(pack, words.data(), words.size() * 4);
      if (!dev.ok()) return dev.status();
      pack.pointers.push_back(*dev);
      pack.args.push_back(&pack.pointers.back());
      continue;
    }
    if (p.kind == rt::ParamSpec::Kind::kWorkspace) {  // zeroed once; the kernel leaves it so
      const int64_t bytes = std::max<int64_t>(
          256, tables->at(p.workspace.table).partials * p.workspace.bytes_per_partial);
      absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Allocate(static_cast<size_t>(bytes));
      if (!ws.ok()) return ws.status();
      if (absl::Status st = ws->Fill(0); !st.ok()) return st;
      pack.buffers.push_back(*std::move(ws));
      pack.pointers.push_back(pack.buffers.back().ptr());
      pack.args.push_back(&pack.pointers.back());
      continue;
    }
    if (p.kind == rt::ParamSpec::Kind::kPointer) {
      uint64_t v = operand(p.name);
      if (!v)
        return absl::InvalidArgumentError(
            absl::StrCat(m.name, ": the GEMM harness has no pointer for parameter ", p.name));
      pack.pointers.push_back(v);
      pack.args.push_back(&pack.pointers.back());
    } else if (p.kind == rt::ParamSpec::Kind::kF32 && (p.name == "alpha" || p.name == "beta")) {
      pack.floats.push_back(p.name == "alpha" ? buf.alpha : buf.beta);
      pack.args.push_back(&pack.floats.back());
    } else {
      if (p.kind != rt::ParamSpec::Kind::kI32)
        return absl::InvalidArgumentError(absl::StrCat(
            m.name, " (", m.source, "): the GEMM harness passes i32 sizes; parameter ", p.name,
            " is ", rt::ParamKindName(p.kind), " (launch it through kiln::rt::LoadedKernel)"));
      auto it = ints.find(p.name);
      if (it == ints.end())
        return absl::InvalidArgumentError(
            absl::StrCat(m.name, ": the GEMM harness has no value for parameter ", p.name));
      pack.ints.push_back(static_cast<int32_t>(it->second));
      pack.args.push_back(&pack.ints.back());
    }
  }
  return pack;
}

double ToFloat(uint16_t v, const std::string& type) {
  return type == "f16" ? HalfToFloat(v) : Bf16ToFloat(v);
}

// A and B of a GEMM test: random normals in the input format, A from `seed` and B from the next,
// the same on every machine (the GPU's run, the emulator's and the crosscheck's scales agree).
// Under a fused activation A is scaled by 1/sqrt(K), so that the products are of order 1, where
// relu, gelu and silu differ: at K's own scale they differ in a sliver of the elements, and a
// kernel applying the wrong one passed the norm-relative check. Not with the `scale` term, whose
// alpha (RandomEpilogueInputs) already scales the product so: both would make it small beside
// C_in, the bias and the residual, and a product left out would pass.
struct GemmInputs {
  std::vector<uint16_t> a, b;
};
GemmInputs RandomGemmInputs(const GemmSpec& g, const rt::GemmSize& s, uint64_t seed) {
  const bool half_in = g.in_type == "f16";
  const absl::StatusOr<HostEpilogue> e = EpilogueOf(g);  // (one it cannot read: checked later)
  const double a_scale = e.ok() && !e->activation.empty() && !e->scale
                             ? 1.0 / std::sqrt(static_cast<double>(s.k))
                             : 1.0;
  return {RandomNormal16(s.m * s.k, seed, half_in, a_scale),
          RandomNormal16(s.k * s.n, seed + 1, half_in)};
}

// What both harnesses (GPU and emulator) check before running a GEMM: the problem against the
// tile, 16-bit inputs, an epilogue they know; then the epilogue to apply to the reference.
absl::StatusOr<HostEpilogue> CheckedEpilogue(const rt::Manifest& m, const GemmSpec& g,
                                             const rt::GemmSize& s) {
  if (absl::Status st = CheckProblem(m, g, s); !st.ok()) return st;
  if (g.in_type == "f32") return absl::UnimplementedError("the GEMM harness handles 16-bit inputs");
  absl::StatusOr<HostEpilogue> epi = EpilogueOf(g);
  if (!epi.ok())
    return absl::InvalidArgumentError(absl::StrCat(m.name, ": ", epi.status().message()));
  return epi;
}

struct Launchable {
  rt::Kernel kernel;
  rt::LaunchConfig config;
  ArgPack args;
  std::shared_ptr<rt::WatchdogRecord> watchdog;  // a bundle built with --watchdog
  absl::Status operator()() {
    if (watchdog)
      if (absl::Status s = watchdog->Arm(); !s.ok()) return s;
    return kernel.Launch(config, args.args.data());
  }
};

absl::StatusOr<Launchable> Prepare(const rt::Bundle& bundle, const GemmSpec& layout,
                                   const rt::GemmSize& size, int split,
                                   const GemmBuffers& buffers) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const rt::Manifest& m = bundle.manifest;
  if (absl::Status s = rt::CheckTarget(m, **d); !s.ok()) return s;
  absl::StatusOr<rt::Dim3> grid = GemmGrid(m, layout, size, (*d)->sm_count());
  if (!grid.ok()) return grid.status();
  absl::StatusOr<rt::Kernel> kernel = rt::Kernel::Load(bundle.ptx, m.entry);
  if (!kernel.ok()) return kernel.status();
  absl::StatusOr<ArgPack> args = PackArgs(m, layout, size, split, buffers);
  if (!args.ok()) return args.status();
  std::shared_ptr<rt::WatchdogRecord> watchdog;
  if (m.watchdog_ms > 0) {
    absl::StatusOr<std::shared_ptr<rt::WatchdogRecord>> w = rt::WatchdogRecord::Attach(*kernel, m);
    if (!w.ok()) return w.status();
    watchdog = *std::move(w);
  }
  return Launchable{*std::move(kernel), rt::LaunchConfigOf(m, *grid, m.smem_bytes),
                    *std::move(args), std::move(watchdog)};
}

}  // namespace

double Tolerance(const GemmSpec& spec) {
  // bf16/f16 outputs round each element at 2^-9 / 2^-12 relative; an f16 accumulator also rounds
  // every partial sum, so its error grows with K (seed 004's kernels).
  if (spec.acc_type == "f16") return 5e-2;
  return 1e-2;
}

absl::StatusOr<std::function<absl::Status()>> L2Evictor() {
  absl::StatusOr<DeviceBuffer> b =
      DeviceBuffer::Allocate(size_t{256} << 20);  // several times any L2
  if (!b.ok()) return b.status();
  auto buffer = std::make_shared<DeviceBuffer>(*std::move(b));
  return std::function<absl::Status()>([buffer] { return buffer->Fill(0); });
}

namespace {

// The weights' rates in steady state (M <= 64): what a model's consecutive layers see. Each timed
// block launches a function `launches` times back to back, the i-th on the (i mod R)-th of R copies
// of B whose others make 256 MB or more (the L2 fill's bytes), so every launch reads its weights
// from DRAM while no launch pays the per-call costs the single-call figures carry (the launch and
// events around one call, the fill's write-back): docs/perf/2026-11-26-weights-in-steady-state.md.
// `run(f, i)` launches function f (0 kiln, 1 cuBLAS where `with_cublas`) on copy i. The copy
// counts its bytes twice (read and write), as the single-call figure does. The rates go into r's
// fields and its note. Only for weights of 16 MB or more (at most 17 copies): smaller ones would
// need hundreds to thousands of copies.
constexpr size_t kSteadyStateMinBytes = size_t{16} << 20;

struct Rotation {
  std::vector<DeviceBuffer> weights, sinks;  // R copies of B, and R buffers the copy writes
};

absl::StatusOr<Rotation> RotateWeights(const DeviceBuffer& b, size_t bytes) {
  const size_t floor_bytes = size_t{256} << 20;
  const size_t copies = std::max<size_t>(2, (floor_bytes + bytes - 1) / bytes + 1);
  Rotation r;
  for (size_t i = 0; i < copies; ++i) {
    absl::StatusOr<DeviceBuffer> w = DeviceBuffer::Allocate(bytes),
                                 sink = DeviceBuffer::Allocate(bytes);
    if (!w.ok()) return w.status();
    if (!sink.ok()) return sink.status();
    if (absl::Status st = w->CopyFrom(b, bytes); !st.ok()) return st;
    r.weights.push_back(*std::move(w));
    r.sinks.push_back(*std::move(sink));
  }
  return r;
}

absl::Status MeasureSteadyState(Rotation& rot, size_t bytes, bool with_cublas,
                                const std::function<absl::Status(int f, int i)>& run,
                                rt::LoadedKernel* bare_read, int iterations, int min_launches,
                                GemmResult& r) {
  const int copies = static_cast<int>(rot.weights.size());
  const int launches = std::max(copies, min_launches);
  const size_t words = bytes / 16;
  using Block = std::function<absl::Status()>;
  auto block = [&](const std::function<absl::Status(int)>& one) -> Block {
    return [one, launches, copies] {
      for (int i = 0; i < launches; ++i)
        if (absl::Status st = one(i % copies); !st.ok()) return st;
      return absl::OkStatus();
    };
  };
  std::vector<Block> blocks = {block([&](int i) { return run(0, i); }), block([&](int i) {
                                 return rot.sinks[i].CopyFrom(rot.weights[i], bytes);
                               })};
  if (bare_read)
    blocks.push_back(block([&](int i) {
      return bare_read->Launch({rt::Arg::Ptr(rot.weights[i].ptr()),
                                rt::Arg::Ptr(rot.sinks[i].ptr()),
                                rt::Arg::I32(static_cast<int32_t>(words))});
    }));
  if (with_cublas) blocks.push_back(block([&](int i) { return run(1, i); }));
  absl::StatusOr<std::vector<double>> ms =
      InterleavedMediansMs(blocks, 1, std::max(3, iterations / 2));
  if (!ms.ok()) return ms.status();
  auto gbps = [&](size_t at, double counted) { return counted / ((*ms)[at] / launches * 1e6); };
  r.steady_copies = copies;
  r.steady_weight_gbps = gbps(0, bytes);
  r.steady_copy_gbps = gbps(1, 2.0 * bytes);
  if (bare_read) r.steady_read_gbps = gbps(2, bytes);
  if (with_cublas) r.steady_cublas_gbps = gbps(blocks.size() - 1, bytes);
  std::string read, cublas;
  if (bare_read)
    read = absl::StrFormat(", %.0f%% of a bare read's %.0f GB/s",
                           100 * r.steady_weight_gbps / r.steady_read_gbps, r.steady_read_gbps);
  if (with_cublas) cublas = absl::StrFormat(" (cuBLAS %.0f GB/s)", r.steady_cublas_gbps);
  r.note = absl::StrCat(
      r.note,
      absl::StrFormat("; in steady state (launches back to back over %d copies of B) "
                      "%.0f GB/s, %.0f%% of the copy's %.0f GB/s%s%s",
                      copies, r.steady_weight_gbps, 100 * r.steady_weight_gbps / r.steady_copy_gbps,
                      r.steady_copy_gbps, read, cublas));
  return absl::OkStatus();
}

}  // namespace

namespace {

// One RunGemm call's inputs and buffers: A, B, C, the reference's C, then the epilogue's inputs on
// the device (owned, in that order), and the GEMM under test as a launch.
struct GemmRun {
  const rt::Bundle& bundle;
  const GemmSpec& g;
  const rt::GemmSize& s;
  HostEpilogue epi;
  EpilogueInputs ei;
  GemmInputs host;
  GemmSpec ref_spec;  // the reference's product: cuBLAS's in f32, or the fallback kernel's type
  absl::StatusOr<Cublas*> cublas;
  std::vector<DeviceBuffer> owned;
  GemmBuffers buf;
  uint64_t dref = 0;
  std::optional<Launchable> run;      // the bundle's kernel on these buffers (no caller's launch)
  std::optional<Launchable> ref_run;  // the fallback reference's launch, kept while it may run
  std::function<absl::Status()> launch;  // the GEMM under test: `run` or the caller's launch
  std::vector<uint8_t> hc, href;         // C and the reference's C, read back
};

// Random inputs on the device and the buffers they go to.
absl::Status Upload(GemmRun& x, const rt::Bundle* reference) {
  const rt::GemmSize& s = x.s;
  auto device = [&](size_t bytes, const void* host) -> absl::StatusOr<uint64_t> {
    if (!bytes) return 0;
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes);
    if (!buf.ok()) return buf.status();
    if (host)
      if (absl::Status st = buf->CopyFromHost(host, bytes); !st.ok()) return st;
    x.owned.push_back(*std::move(buf));
    return x.owned.back().ptr();
  };
  x.owned.reserve(10);
  x.buf = {.alpha = x.ei.alpha,
           .beta = x.ei.beta,
           .rope_rows = x.ei.rope_rows,
           .rope_dim = x.ei.rope_dim,
           .rope_period = x.ei.rope_period};
  x.ref_spec = x.g;
  x.ref_spec.out_type = "f32";
  if (!x.cublas.ok() && reference)
    if (std::optional<GemmSpec> rg = GemmOf(reference->manifest))
      x.ref_spec.out_type = rg->out_type;
  const auto& [ha, hb] = x.host;
  const EpilogueInputs& ei = x.ei;
  absl::StatusOr<uint64_t> da = device(ha.size() * 2, ha.data()),
                           db = device(hb.size() * 2, hb.data()),
                           dc = device(CRows(x.g, s) * s.n * ElementBytes(x.g.out_type), nullptr),
                           dref = device(s.m * s.n * ElementBytes(x.ref_spec.out_type), nullptr),
                           dcin = device(ei.c_in.size(), ei.c_in.data()),
                           dbias = device(ei.bias.size(), ei.bias.data()),
                           dres = device(ei.residual.size(), ei.residual.data()),
                           dangles = device(ei.rope_angles.size() * 4, ei.rope_angles.data());
  for (auto* p : {&da, &db, &dc, &dref, &dcin, &dbias, &dres, &dangles})
    if (!p->ok()) return p->status();
  x.buf.a = *da, x.buf.b = *db, x.buf.c = *dc, x.buf.c_in = *dcin, x.buf.bias = *dbias,
  x.buf.residual = *dres, x.buf.rope_angles = *dangles;
  x.dref = *dref;
  return absl::OkStatus();
}

// The reference's C first, into a poisoned buffer of its own, then the kernel's, into poisoned
// memory (all-ones bytes are NaN in bf16, f16 and f32); both read back.
absl::Status RunBoth(GemmRun& x, const rt::Bundle* reference, GemmResult& r) {
  DeviceBuffer &c_buffer = x.owned[2], &ref_buffer = x.owned[3];
  if (absl::Status st = ref_buffer.Fill(0xff); !st.ok()) return st;
  if (x.cublas.ok()) {
    r.reference = "cublas";
    if (absl::Status st = (*x.cublas)->Gemm(x.ref_spec, x.s, x.buf.a, x.buf.b, x.dref); !st.ok())
      return st;
  } else {
    if (!reference)
      return absl::FailedPreconditionError(absl::StrCat("no reference: cuBLAS is unavailable (",
                                                        x.cublas.status().message(),
                                                        ") and no reference bundle was given"));
    r.reference = reference->manifest.name;
    // The reference indexes through stride parameters, set from the tested kernel's layouts.
    absl::StatusOr<Launchable> rr =
        Prepare(*reference, x.g, x.s, 1, {.a = x.buf.a, .b = x.buf.b, .c = x.dref});
    if (!rr.ok()) return rr.status();
    if (absl::Status st = (*rr)(); !st.ok()) return st;
    x.ref_run.emplace(*std::move(rr));
  }
  if (absl::Status st = c_buffer.Fill(0xff); !st.ok()) return st;
  if (absl::Status st = x.launch(); !st.ok()) return st;
  if (absl::Status st = rt::Synchronize(); !st.ok()) return st;
  x.hc.resize(CRows(x.g, x.s) * x.s.n * ElementBytes(x.g.out_type));
  x.href.resize(x.s.m * x.s.n * ElementBytes(x.ref_spec.out_type));
  if (absl::Status st = c_buffer.CopyToHost(x.hc.data(), x.hc.size()); !st.ok()) return st;
  return ref_buffer.CopyToHost(x.href.data(), x.href.size());
}

// Full comparison: the reference's product through the epilogue, in fp64, rows split among the
// host's threads (a 16384x28672 C is 470M elements) and their sums added in row order; then fp64
// spot checks of random elements against the inputs themselves. Sets the errors and the failure.
void Compare(const GemmRun& x, uint64_t seed, GemmResult& r) {
  const GemmSpec& g = x.g;
  const rt::GemmSize& s = x.s;
  struct Sums {
    double diff2 = 0, ref2 = 0;
    size_t nan_count = 0;
  };
  const int64_t rows = CRows(g, s);  // C's (half M under swiglu)
  const int64_t workers =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(rows, 32));
  std::vector<Sums> sums(workers);
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      Sums& out = sums[w];
      for (int64_t i = rows * w / workers; i < rows * (w + 1) / workers; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          const double got = DecodeElement(x.hc, g.out_type, Index(g.c_order, i, j, rows, s.n));
          auto product = [&](int64_t row) {
            return DecodeElement(x.href, x.ref_spec.out_type, Index(g.c_order, row, j, s.m, s.n));
          };
          const double y = ExpectedAt(x.epi, x.ei, s, product, i, j);
          if (std::isnan(got) || std::isinf(got)) ++out.nan_count;
          out.diff2 += (got - y) * (got - y);
          out.ref2 += y * y;
        }
    });
  for (std::thread& t : threads) t.join();
  double diff2 = 0, ref2 = 0;
  size_t nan_count = 0;
  for (const Sums& part : sums) diff2 += part.diff2, ref2 += part.ref2, nan_count += part.nan_count;
  r.rel_error = nan_count ? NAN : std::sqrt(diff2 / std::max(ref2, 1e-30));
  std::mt19937_64 rng(seed * 7 + 3);
  double sd2 = 0, sr2 = 0;
  for (int t = 0; t < 64; ++t) {
    const int64_t i = rng() % rows, j = rng() % s.n;
    auto product = [&](int64_t row) {
      double acc = 0;
      for (int64_t kk = 0; kk < s.k; ++kk)
        acc += ToFloat(x.host.a[Index(g.a_order, row, kk, s.m, s.k)], g.in_type) *
               ToFloat(x.host.b[Index(g.b_order, kk, j, s.k, s.n)], g.in_type);
      return acc;
    };
    const double want = ExpectedAt(x.epi, x.ei, s, product, i, j);
    const double got = DecodeElement(x.hc, g.out_type, Index(g.c_order, i, j, rows, s.n));
    sd2 += (got - want) * (got - want);
    sr2 += want * want;
  }
  r.spot_error = std::sqrt(sd2 / std::max(sr2, 1e-30));
  if (nan_count)
    r.failure = absl::StrCat(nan_count, " outputs are NaN/Inf (unwritten or overflowed)");
  else if (!(r.rel_error <= r.tolerance))
    r.failure =
        absl::StrFormat("error %.3g vs %s exceeds %.0e", r.rel_error, r.reference, r.tolerance);
  else if (!(r.spot_error <= r.tolerance))
    r.failure =
        absl::StrFormat("fp64 spot-check error %.3g exceeds %.0e", r.spot_error, r.tolerance);
}

// Split tiles meet in the kernel's workspace: a second launch on it (its counters as the first
// left them, the parts finishing in another order) must write the same bytes. (A caller's launch
// may split tiles too: it is always launched twice.)
absl::Status LaunchAgain(GemmRun& x, bool callers_launch, int split, GemmResult& r) {
  if (!r.failure.empty() || !(callers_launch || x.run->args.partials)) return absl::OkStatus();
  DeviceBuffer& c_buffer = x.owned[2];
  std::vector<uint8_t> again(x.hc.size());
  if (absl::Status st = c_buffer.Fill(0xff); !st.ok()) return st;
  if (absl::Status st = x.launch(); !st.ok()) return st;
  if (absl::Status st = rt::Synchronize(); !st.ok()) return st;
  if (absl::Status st = c_buffer.CopyToHost(again.data(), again.size()); !st.ok()) return st;
  if (again != x.hc) r.failure = SecondLaunchDiffers(split);
  return absl::OkStatus();
}

// A memory-bound GEMM's (M <= 64) weights against a device copy of them in the same run, and the
// same in steady state: the note's figures (the medians of the copy and of a bare read at
// `copy_at` and `read_at` among `ms`).
void NoteWeightRates(GemmRun& x, const RunOptions& opt, size_t weight_bytes,
                     const std::vector<double>& ms, size_t copy_at, size_t read_at,
                     rt::LoadedKernel* bare_read, GemmResult& r) {
  r.weight_gbps = weight_bytes / (r.ms * 1e6);
  r.copy_gbps =
      2.0 * weight_bytes / (ms[copy_at] * 1e6);  // read and write, as the row ops count it
  std::string bare;
  if (bare_read) {
    r.read_gbps = weight_bytes / (ms[read_at] * 1e6);
    bare = absl::StrFormat(" and %.0f%% of a bare read's %.0f GB/s (ops/stream_read)",
                           100 * r.weight_gbps / r.read_gbps, r.read_gbps);
  }
  r.note = absl::StrCat(
      r.note, r.note.empty() ? "" : "; ",
      absl::StrFormat("weights read at %.0f GB/s, %.0f%% of the device copy's %.0f GB/s%s in "
                      "the same run",
                      r.weight_gbps, 100 * r.weight_gbps / r.copy_gbps, r.copy_gbps, bare));
  // The same in steady state, where the copies of B fit beside the run's buffers (else a note),
  // for 16 MB of weights or more.
  if (weight_bytes < kSteadyStateMinBytes) return;
  absl::StatusOr<Rotation> rot = RotateWeights(x.owned[1], weight_bytes);
  absl::Status steady = rot.status();
  std::vector<Launchable> on_copy;  // the bundle's kernel bound to each copy of B
  if (rot.ok() && !opt.launch)
    for (const DeviceBuffer& w : rot->weights) {
      GemmBuffers bw = x.buf;
      bw.b = w.ptr();
      absl::StatusOr<Launchable> l = Prepare(x.bundle, x.g, x.s, opt.split, bw);
      if (!l.ok()) {
        steady = l.status();
        break;
      }
      on_copy.push_back(*std::move(l));
    }
  auto run_on = [&](int f, int i) -> absl::Status {
    const uint64_t b = rot->weights[i].ptr();
    if (f == 1) return (*x.cublas)->Gemm(x.g, x.s, x.buf.a, b, x.dref, /*spec_accumulator=*/true);
    if (!opt.launch) return on_copy[i]();
    GemmBuffers bw = x.buf;
    bw.b = b;
    return opt.launch(bw);
  };
  if (steady.ok())
    steady = MeasureSteadyState(*rot, weight_bytes, x.cublas.ok(), run_on, bare_read,
                                opt.iterations, opt.steady_launches, r);
  if (!steady.ok())
    r.note = absl::StrCat(r.note, "; steady state not measured: ", steady.message());
}

// The kernel, cuBLAS (like for like: an f16-accumulating kernel against fp16 compute) and, for
// M <= 64, a device copy of the weights and a bare read of them (ops/stream_read, where one is at
// hand), their calls interleaved, each the median of opt.iterations.
absl::Status Time(GemmRun& x, const RunOptions& opt, GemmResult& r) {
  const rt::GemmSize& s = x.s;
  const double flops = 2.0 * s.m * s.n * s.k;
  std::vector<std::function<absl::Status()>> fns = {x.launch};
  if (x.cublas.ok())
    fns.push_back([&] {
      return (*x.cublas)->Gemm(x.g, s, x.buf.a, x.buf.b, x.dref, /*spec_accumulator=*/true);
    });
  const size_t weight_bytes = x.host.b.size() * 2;
  std::optional<DeviceBuffer> scratch;
  size_t copy_at = 0, read_at = 0;  // their places among fns (and so among the medians)
  if (s.m <= 64) {
    absl::StatusOr<DeviceBuffer> sb = DeviceBuffer::Allocate(weight_bytes);
    if (!sb.ok()) return sb.status();
    scratch.emplace(*std::move(sb));
    copy_at = fns.size();
    fns.push_back([&] { return scratch->CopyFrom(x.owned[1], weight_bytes); });
  }
  // A bare read's n counts whole 16-byte words, at least one and under 2^31.
  std::optional<rt::LoadedKernel> bare_read;
  std::vector<rt::Arg> read_args;
  const size_t words = weight_bytes / 16;
  if (scratch && opt.stream_read && words >= 1 && words < (size_t{1} << 31)) {
    absl::StatusOr<rt::LoadedKernel> k = rt::LoadedKernel::Load(*opt.stream_read);
    if (!k.ok()) return k.status();
    bare_read.emplace(*std::move(k));
    read_args = {rt::Arg::Ptr(x.owned[1].ptr()), rt::Arg::Ptr(scratch->ptr()),
                 rt::Arg::I32(static_cast<int32_t>(words))};
    read_at = fns.size();
    fns.push_back([&] { return bare_read->Launch(read_args); });
  }
  std::function<absl::Status()> evict;
  if (opt.flush_l2) {
    absl::StatusOr<std::function<absl::Status()>> e = L2Evictor();
    if (!e.ok()) return e.status();
    evict = *std::move(e);
  }
  absl::StatusOr<std::vector<double>> ms =
      InterleavedMediansMs(fns, opt.warmup, opt.iterations, evict);
  if (!ms.ok()) return ms.status();
  r.ms = (*ms)[0];
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  if (x.cublas.ok()) {
    r.cublas_ms = (*ms)[1];
    r.cublas_tflops = flops / (r.cublas_ms * 1e-3) / 1e12;
  }
  if (scratch)
    NoteWeightRates(x, opt, weight_bytes, *ms, copy_at, read_at, bare_read ? &*bare_read : nullptr,
                    r);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GemmResult> RunGemm(const rt::Bundle& bundle, const rt::Bundle* reference,
                                   const RunOptions& opt) {
  const rt::Manifest& m = bundle.manifest;
  const std::optional<GemmSpec> gemm = GemmOf(m);
  if (!gemm)
    return absl::FailedPreconditionError(
        absl::StrCat(m.name, " (", m.source,
                     ") is not a GEMM; the GEMM harness (kiln run/bench) cannot check it. "
                     "Launch it with kiln::rt::LoadedKernel"));
  const GemmSpec& g = *gemm;
  const rt::GemmSize& s = opt.size;
  absl::StatusOr<HostEpilogue> epi = CheckedEpilogue(m, g, s);
  if (!epi.ok()) return epi.status();
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  if (absl::Status st = rt::CheckTarget(m, **d); !st.ok()) return st;

  GemmResult r;
  r.name = m.name;
  r.size = s;
  r.tolerance = Tolerance(g);
  GemmRun x{.bundle = bundle,
            .g = g,
            .s = s,
            .epi = *epi,
            .ei = RandomEpilogueInputs(*epi, s, opt.seed),
            .host = RandomGemmInputs(g, s, opt.seed),
            .cublas = Cublas::Get()};
  if (absl::Status st = Upload(x, reference); !st.ok()) return st;
  // The GEMM under test: the bundle's kernel on these buffers, or the caller's launch.
  if (!opt.launch) {
    absl::StatusOr<Launchable> prepared = Prepare(bundle, g, s, opt.split, x.buf);
    if (!prepared.ok()) return prepared.status();
    x.run.emplace(*std::move(prepared));
  }
  x.launch = [&]() -> absl::Status { return opt.launch ? opt.launch(x.buf) : (*x.run)(); };
  if (!opt.launch &&
      m.cluster.count() > 1) {  // clusters beyond what fits at once run as a second wave
    const int64_t wanted = static_cast<int64_t>(x.run->config.grid.count()) / m.cluster.count();
    absl::StatusOr<int> fit = x.run->kernel.MaxActiveClusters(x.run->config);
    if (fit.ok() && *fit < wanted)
      r.note = absl::StrCat("only ", *fit, " of its ", wanted, " clusters of ", m.cluster.count(),
                            " fit on the GPU at once");
  }
  if (absl::Status st = RunBoth(x, reference, r); !st.ok()) return st;
  Compare(x, opt.seed, r);
  if (opt.keep_output && ElementBytes(g.out_type) == 2) {
    r.output.resize(s.m * s.n);
    std::memcpy(r.output.data(), x.hc.data(), x.hc.size());
  }
  if (absl::Status st = LaunchAgain(x, static_cast<bool>(opt.launch), opt.split, r); !st.ok())
    return st;
  r.passed = r.failure.empty();
  if (opt.time && r.passed)
    if (absl::Status st = Time(x, opt, r); !st.ok()) return st;
  return r;
}

std::string TableHeader() {
  return absl::StrFormat("%-22s %6s %6s %6s %9s %9s %7s %9s %9s  %s", "kernel", "M", "N", "K",
                         "TFLOPS", "cuBLAS", "ratio", "rel_err", "spot_err", "check");
}

std::string TableRow(const GemmResult& r) {
  const double ratio = r.cublas_tflops > 0 ? r.tflops / r.cublas_tflops : 0;
  return absl::StrFormat("%-22s %6d %6d %6d %9.1f %9.1f %7.3f %9.2e %9.2e  %s", r.name, r.size.m,
                         r.size.n, r.size.k, r.tflops, r.cublas_tflops, ratio, r.rel_error,
                         r.spot_error, r.passed ? "ok" : "FAIL: " + r.failure);
}

namespace {

// The exact product in fp64, row-major M x N, with the inputs decoded once (A as M x K, B as
// N x K, so each element is one contiguous dot product).
std::vector<double> Fp64Product(const GemmSpec& g, const rt::GemmSize& s,
                                const std::vector<uint16_t>& ha, const std::vector<uint16_t>& hb) {
  std::vector<double> a(s.m * s.k), b(s.n * s.k), c(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t k = 0; k < s.k; ++k)
      a[i * s.k + k] = ToFloat(ha[Index(g.a_order, i, k, s.m, s.k)], g.in_type);
  for (int64_t j = 0; j < s.n; ++j)
    for (int64_t k = 0; k < s.k; ++k)
      b[j * s.k + k] = ToFloat(hb[Index(g.b_order, k, j, s.k, s.n)], g.in_type);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      const double *x = &a[i * s.k], *y = &b[j * s.k];
      double acc[4] = {0, 0, 0, 0};  // four chains, so the adds overlap
      int64_t k = 0;
      for (; k + 4 <= s.k; k += 4)
        for (int u = 0; u < 4; ++u) acc[u] += x[k + u] * y[k + u];
      for (; k < s.k; ++k) acc[0] += x[k] * y[k];
      c[i * s.n + j] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  return c;
}

// One emulated launch on the inputs: C's bytes as the kernel left them (poisoned with NaN
// before), and the device, which knows where each of C's words was last written.
struct EmulatedC {
  std::vector<uint8_t> bytes;
  std::shared_ptr<emu::Device> device;
  uint64_t c = 0;  // C's address on it
  // EmulatedClusters: how many of how many clusters ran; 0 of 0 when all did.
  uint64_t clusters_run = 0, clusters = 0;
};

absl::StatusOr<EmulatedC> EmulatedOutput(const rt::Bundle& bundle, const GemmSpec& g,
                                         const rt::GemmSize& s, const std::vector<uint16_t>& ha,
                                         const std::vector<uint16_t>& hb, const EpilogueInputs& ei,
                                         int split, uint64_t schedule_seed) {
  const rt::Manifest& m = bundle.manifest;
  auto device = std::make_shared<emu::Device>();
  emu::Device& d = *device;
  const size_t c_bytes = CRows(g, s) * s.n * ElementBytes(g.out_type);  // C's own size, no more
  const uint64_t da = *d.Allocate(ha.size() * 2), db = *d.Allocate(hb.size() * 2),
                 dc = *d.Allocate(c_bytes);
  if (absl::Status st = d.CopyIn(da, ha.data(), ha.size() * 2); !st.ok()) return st;
  if (absl::Status st = d.CopyIn(db, hb.data(), hb.size() * 2); !st.ok()) return st;
  if (absl::Status st = d.Fill(dc, 0xff, c_bytes); !st.ok()) return st;  // NaN until written
  std::map<std::string, uint64_t> pointers = {{"A", da}, {"B", db}, {"C", dc}};
  for (auto [name, data] : {std::pair{"C_in", &ei.c_in}, std::pair{"bias", &ei.bias},
                            std::pair{"residual", &ei.residual}})
    if (!data->empty()) {
      pointers[name] = *d.Allocate(data->size());
      if (absl::Status st = d.CopyIn(pointers[name], data->data(), data->size()); !st.ok())
        return st;
    }
  if (!ei.rope_angles.empty()) {
    const size_t bytes = ei.rope_angles.size() * 4;
    pointers["rope_angles"] = *d.Allocate(bytes);
    if (absl::Status st = d.CopyIn(pointers["rope_angles"], ei.rope_angles.data(), bytes); !st.ok())
      return st;
  }
  std::map<std::string, int64_t> ints = GemmIntArgs(g, s, split);
  ints.insert(
      {{"rope_rows", ei.rope_rows}, {"rope_dim", ei.rope_dim}, {"rope_period", ei.rope_period}});
  std::vector<rt::Arg> args;
  for (const rt::ParamSpec& p : m.params) {
    if (p.kind == rt::ParamSpec::Kind::kPointer && pointers.count(p.name))
      args.push_back(rt::Arg::Ptr(pointers.at(p.name)));
    else if (p.kind == rt::ParamSpec::Kind::kF32 && (p.name == "alpha" || p.name == "beta"))
      args.push_back(rt::Arg::F32(p.name == "alpha" ? ei.alpha : ei.beta));
    else if (p.kind == rt::ParamSpec::Kind::kI32 && ints.count(p.name))
      args.push_back(rt::Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    else if (p.kind == rt::ParamSpec::Kind::kTensorMap) {
      const std::string& t = p.tensor_map.tensor;
      if (!pointers.count(t))
        return absl::InvalidArgumentError(
            absl::StrCat(m.name, ": the GEMM harness has no tensor ", t, " for map ", p.name));
      args.push_back(rt::Arg::Tensor(pointers.at(t)));
    } else if (p.kind == rt::ParamSpec::Kind::kScheduleTable)
      args.push_back(rt::Arg::Schedule());
    else if (p.kind == rt::ParamSpec::Kind::kWorkspace)
      args.push_back(rt::Arg::Workspace());
    else
      return absl::InvalidArgumentError(absl::StrCat(
          m.name, ": the GEMM harness has no value for parameter ", p.name,
          absl::StartsWith(p.name, "scale")
              ? " (an 8-bit GEMM's scales: kiln gemm --dtype e4m3 --emulate [--scaling S] "
                "[--sm100] runs it through the entry point)"
              : ""));
  }
  emu::Options options{.seed = schedule_seed};
  rt::Dim3 grid;
  absl::StatusOr<rt::Bundle> launched = EmulatedGemmBundle(bundle, g, s, options.sm_count, &grid);
  if (!launched.ok()) return launched.status();
  options.only_clusters = EmulatedClusters(*launched, g, s, grid);
  absl::StatusOr<emu::Stats> stats = emu::Launch(d, *launched, grid, args, options);
  if (!stats.ok()) return stats.status();
  std::vector<uint8_t> hc(c_bytes);
  if (absl::Status st = d.CopyOut(hc.data(), dc, hc.size()); !st.ok()) return st;
  // A kernel whose tiles meet in its workspace must leave it ready for the next launch and sum
  // the parts in a fixed order: a second launch on the same device gives the same bytes.
  absl::StatusOr<std::map<std::string, rt::WorkTable>> tables =
      rt::BuildScheduleTables(launched->manifest, rt::Symbols(ints.begin(), ints.end()));
  if (!tables.ok()) return tables.status();
  if (std::any_of(tables->begin(), tables->end(),
                  [](const auto& t) { return t.second.partials > 0; })) {
    if (absl::Status st = d.Fill(dc, 0xff, c_bytes); !st.ok()) return st;
    options.seed = schedule_seed + 1;
    absl::StatusOr<emu::Stats> again = emu::Launch(d, *launched, grid, args, options);
    if (!again.ok()) return again.status();
    std::vector<uint8_t> hc2(c_bytes);
    if (absl::Status st = d.CopyOut(hc2.data(), dc, hc2.size()); !st.ok()) return st;
    if (hc2 != hc)
      return absl::InternalError(
          absl::StrCat(m.name, " (", m.source, "): ", SecondLaunchDiffers(split)));
  }
  EmulatedC out{std::move(hc), std::move(device), dc};
  if (!options.only_clusters.empty())
    out.clusters_run = options.only_clusters.size(),
    out.clusters = grid.count() / std::max<uint64_t>(1, m.cluster.count());
  return out;
}

// Where a wrong result comes from: the first wrong element (row-major; WrongElementLimit) and the
// earliest-written one, each with its tile, and the block, thread and instruction that last wrote
// it (the emulator's write sites).
std::string WrongResultPlace(const GemmSpec& g, const rt::GemmSize& s, const EmulatedC& run,
                             const std::vector<double>& got, const std::vector<double>& want,
                             double tolerance) {
  double ref2 = 0;
  for (double w : want) ref2 += w * w;
  const double limit = WrongElementLimit(tolerance, ref2, static_cast<int64_t>(want.size()));
  const int64_t bytes = ElementBytes(g.out_type);
  struct Wrong {
    int64_t i, j;
    std::optional<emu::Device::WriteSite> site;
  };
  std::optional<Wrong> first, earliest;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      const double x = got[i * s.n + j], w = want[i * s.n + j];
      if (!IsWrongElement(x, w, limit)) continue;
      Wrong here{i, j, run.device->LastWrite(run.c + Index(g.c_order, i, j, s.m, s.n) * bytes)};
      if (!first) first = here;
      if (here.site && (!earliest || here.site->time < earliest->site->time)) earliest = here;
    }
  if (!first) return "";
  auto describe = [&](const Wrong& e) {
    std::string out = absl::StrFormat("C[%d][%d] = %g (want %g), tile (%d, %d) of %dx%d, ", e.i,
                                      e.j, got[e.i * s.n + e.j], want[e.i * s.n + e.j],
                                      e.i / g.BlockM(), e.j / g.BlockN(), g.BlockM(), g.BlockN());
    return out + (e.site ? e.site->Describe() : "never written");
  };
  std::string place = absl::StrCat("the first wrong element: ", describe(*first));
  if (earliest) absl::StrAppend(&place, "; the wrong element written first: ", describe(*earliest));
  return place;
}

}  // namespace

absl::StatusOr<GemmResult> EmulateGemm(const rt::Bundle& bundle, const RunOptions& opt,
                                       uint64_t schedule_seed) {
  absl::StatusOr<std::vector<GemmResult>> r = EmulateGemmSchedules(bundle, opt, {schedule_seed});
  if (!r.ok()) return r.status();
  return std::move(r->front());
}

absl::StatusOr<std::vector<GemmResult>> EmulateGemmSchedules(
    const rt::Bundle& bundle, const RunOptions& opt, const std::vector<uint64_t>& schedule_seeds) {
  const rt::Manifest& m = bundle.manifest;
  const std::optional<GemmSpec> gemm = GemmOf(m);
  if (!gemm)
    return absl::FailedPreconditionError(absl::StrCat(m.name, " (", m.source, ") is not a GEMM"));
  const GemmSpec& g = *gemm;
  const rt::GemmSize& s = opt.size;
  absl::StatusOr<HostEpilogue> epi = CheckedEpilogue(m, g, s);
  if (!epi.ok()) return epi.status();
  const double dm = s.m, dn = s.n, dk = s.k;
  if (absl::Status fits = emu::CheckProblemSize(
          m.name, {{"A (M x K)", dm * dk}, {"B (K x N)", dk * dn}, {"C (M x N)", dm * dn}},
          dm * dn * dk);
      !fits.ok())
    return fits;
  const auto [ha, hb] = RandomGemmInputs(g, s, opt.seed);
  const EpilogueInputs ei = RandomEpilogueInputs(*epi, s, opt.seed);

  // The schedules run side by side (each launch has its own device), the reference meanwhile.
  std::vector<absl::StatusOr<EmulatedC>> outputs(schedule_seeds.size(),
                                                 absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (size_t i = 0; i < schedule_seeds.size(); ++i)
    workers.emplace_back([&, i] {
      outputs[i] = EmulatedOutput(bundle, g, s, ha, hb, ei, opt.split, schedule_seeds[i]);
    });
  const std::vector<double> want = Fp64Product(g, s, ha, hb);
  for (std::thread& w : workers) w.join();

  std::vector<GemmResult> results;
  for (size_t run = 0; run < schedule_seeds.size(); ++run) {
    if (!outputs[run].ok())  // the emulator's report (deadlock, race, ...) names the schedule
      return absl::Status(outputs[run].status().code(),
                          absl::StrCat(outputs[run].status().message(), " (schedule seed ",
                                       schedule_seeds[run], ")"));
    GemmResult r;
    r.name = m.name;
    r.size = s;
    r.tolerance = Tolerance(g);
    r.reference = "fp64 on the CPU";
    r.schedule_seed = schedule_seeds[run];
    const std::vector<uint8_t>& out = outputs[run]->bytes;
    if (ElementBytes(g.out_type) == 2) {
      r.output.resize(s.m * s.n);
      std::memcpy(r.output.data(), out.data(), out.size());
    }
    // Where only some clusters ran, C is compared where they wrote (what is NaN is left out,
    // as equal) and they must have written exactly their share of it.
    const EmulatedC& run_c = *outputs[run];
    const bool subset = run_c.clusters > 0;
    if (subset)
      r.coverage = absl::StrFormat("clusters 0 and %d of %d", run_c.clusters - 1, run_c.clusters);
    double err = 0, norm = 0;
    int64_t nans = 0;
    const int64_t rows = CRows(g, s);  // C's (half M under swiglu)
    std::vector<double> got(rows * s.n), expected(rows * s.n);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        const double x = DecodeElement(out, g.out_type, Index(g.c_order, i, j, rows, s.n));
        auto product = [&](int64_t row) { return want[row * s.n + j]; };
        const double w = ExpectedAt(*epi, ei, s, product, i, j);
        got[i * s.n + j] = x, expected[i * s.n + j] = w;
        if (std::isnan(x)) {
          ++nans;
          if (subset) {  // outside the clusters that ran
            got[i * s.n + j] = expected[i * s.n + j] = 0;
            continue;
          }
        }
        err += (x - w) * (x - w), norm += w * w;
      }
    r.rel_error = std::sqrt(err / std::max(norm, 1e-30));
    r.spot_error = r.rel_error;
    const int64_t share = rows * s.n / static_cast<int64_t>(std::max<uint64_t>(1, run_c.clusters)) *
                          static_cast<int64_t>(run_c.clusters_run);
    if (subset && rows * s.n - nans != share)
      r.failure = absl::StrCat("the ", r.coverage, " that ran wrote ", rows * s.n - nans,
                               " elements of C as numbers; their share of the tiles is ", share);
    else if (nans && !subset)
      r.failure = absl::StrCat(nans, " NaN or unwritten elements");
    else if (!(r.rel_error <= r.tolerance))
      r.failure = absl::StrFormat("error %.3g over tolerance %.3g", r.rel_error, r.tolerance);
    if (!r.failure.empty())
      if (std::string place =
              WrongResultPlace(g, {rows, s.n, s.k}, *outputs[run], got, expected, r.tolerance);
          !place.empty())
        absl::StrAppend(&r.failure, ": ", place);
    r.passed = r.failure.empty();
    results.push_back(std::move(r));
  }
  return results;
}

namespace {
// One unit in the last place of a 16-bit float format at magnitude v (subnormal spacing below).
double Ulp(double v, const std::string& type) {
  const bool half = type == "f16";
  return std::ldexp(1.0, std::max(std::ilogb(v), half ? -14 : -126) - (half ? 10 : 7));
}
}  // namespace

std::vector<double> ProductScales(const GemmSpec& g, const rt::GemmSize& s, uint64_t seed) {
  const auto [ha, hb] = RandomGemmInputs(g, s, seed);
  std::vector<uint16_t> abs_a(ha.size()), abs_b(hb.size());  // |a|, |b|: the sign bit cleared
  for (size_t i = 0; i < ha.size(); ++i) abs_a[i] = ha[i] & 0x7fff;
  for (size_t i = 0; i < hb.size(); ++i) abs_b[i] = hb[i] & 0x7fff;
  return Fp64Product(g, s, abs_a, abs_b);
}

OutputAgreement CompareOutputs(const GemmSpec& g, const rt::GemmSize& s,
                               const std::vector<uint16_t>& x, const std::vector<uint16_t>& y,
                               const std::vector<double>& scale, double rel,
                               bool only_where_x_written) {
  OutputAgreement a;
  double diff2 = 0, norm2 = 0;
  const size_t n = static_cast<size_t>(s.m * s.n);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      const size_t at = Index(g.c_order, i, j, s.m, s.n);
      if (at >= x.size() || at >= y.size()) {
        ++a.apart;
        continue;
      }
      const double u = ToFloat(x[at], g.out_type), v = ToFloat(y[at], g.out_type);
      if (only_where_x_written && std::isnan(u)) continue;
      if (std::isnan(u) || std::isnan(v)) {
        ++a.apart;  // NaN never agrees, not even with NaN
        continue;
      }
      diff2 += (u - v) * (u - v), norm2 += v * v;
      if (x[at] == y[at]) {
        ++a.equal;
        continue;
      }
      const double sc = scale[i * s.n + j], d = std::abs(u - v);
      double allowed = Ulp(std::max(std::abs(u), std::abs(v)), g.out_type) + rel * sc;
      // An f16 accumulator rounds at each 16-deep MMA step; where the two sums straddle a rounding
      // boundary they part by one accumulator ulp, which later steps carry along.
      if (g.acc_type == "f16") allowed += static_cast<double>(s.k / 16) * Ulp(sc, "f16");
      if (d <= allowed)
        ++a.close;
      else
        ++a.apart;
      if (d / sc > a.worst) {
        a.worst = d / sc;
        a.worst_element = absl::StrFormat("(%d,%d): %.6g vs %.6g, scale %.4g", i, j, u, v, sc);
      }
    }
  a.apart += static_cast<int64_t>(n - std::min({n, x.size(), y.size()}));
  a.norm_rel = std::sqrt(diff2 / std::max(norm2, 1e-30));
  return a;
}

std::string TsvRow(const GemmResult& r) {
  return absl::StrFormat("%s\t%d\t%d\t%d\t%.4f\t%.3f\t%.4f\t%.3f\t%.3e\t%.3e\t%s\t%s", r.name,
                         r.size.m, r.size.n, r.size.k, r.ms, r.tflops, r.cublas_ms, r.cublas_tflops,
                         r.rel_error, r.spot_error, r.reference, r.passed ? "ok" : "fail");
}

}  // namespace kiln::examples
