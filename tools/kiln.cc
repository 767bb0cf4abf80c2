// The kiln command line.
//   kiln list                         kernel names, one per line
//   kiln mlir|lowered|llvm|ptx|sass NAME   one stage of a kernel on stdout
//   kiln bundle [--dir D] [NAME...]   write bundles (manifest + PTX); with no NAME, all of them,
//                                     and drop D's bundles of kernels no longer registered
//   kiln run NAME [--m --n --k]       check and time one kernel against cuBLAS
//   kiln run ops/softmax [--rows --cols]  a row op, against an fp64 reference and a copy
//   kiln bench [--sizes ...] [--shapes ...] [NAME...]  the tables for many kernels
//   kiln emulate NAME [--seeds S,..]  check it on the CPU PTX emulator under several schedules
//   kiln crosscheck [NAME...]         the GPU's outputs against the emulator's, element by element
//   kiln gemm --m --n --k [--emulate] C = A * B at any size, with the kernel chosen for the shape
//   kiln plot RESULTS.tsv             the SVG charts of a bench/gemm TSV (bench --out writes them too)
// Built without the compiler (runtime-only), kernels come from bundles (--bundles DIR).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "examples/attention_check.h"
#include "examples/harness.h"
#include "examples/plot.h"
#include "examples/probe_check.h"
#include "examples/row_ops.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"
#include "kiln/runtime/gemm.h"
#include "kiln/runtime/manifest.h"
#ifdef KILN_HAVE_COMPILER
#include "examples/registry.h"
#include "kiln/compile.h"
#include "kiln/lowering.h"
#endif

ABSL_FLAG(std::string, bundles, "",
          "read kernels from this bundle directory instead of compiling them");
ABSL_FLAG(std::string, dir, "build/bundles", "where `kiln bundle` writes");
// 0: not given (kiln run takes 4096, kiln emulate the kernel's tile).
ABSL_FLAG(int64_t, m, 0, "M for `kiln run` (default 4096) and `kiln emulate` (default: 2x2 CTA tiles)");
ABSL_FLAG(int64_t, n, 0, "N for `kiln run` (default 4096) and `kiln emulate` (default: 2x2 CTA tiles)");
ABSL_FLAG(int64_t, k, 0,
          "K for `kiln run` (default 4096) and `kiln emulate` (default: enough K steps to wrap the kernel's deepest "
          "ring twice)");
ABSL_FLAG(std::string, sizes, "4096,8192",
          "`kiln bench` sizes: comma-separated S (S^3) or MxNxK");
// 0: not given (kiln run takes 32768x4096, kiln emulate 37x3001).
ABSL_FLAG(int64_t, rows, 0, "rows of a row op for `kiln run` (default 32768) and `kiln emulate` (default 37)");
ABSL_FLAG(int64_t, cols, 0, "cols of a row op for `kiln run` (default 4096) and `kiln emulate` (default 3001)");
ABSL_FLAG(std::string, shapes, "32768x4096,8192x8192,65536x1024",
          "`kiln bench` shapes of the row ops: comma-separated ROWSxCOLS");
ABSL_FLAG(bool, lines, false, "`kiln ptx`: with .file/.loc line tables naming each instruction's DSL line");
ABSL_FLAG(std::string, seeds, "1,2,3",
          "`kiln emulate`: the emulated threads' schedules, comma-separated (0: in index order)");
ABSL_FLAG(bool, emulate, false, "`kiln gemm`: run the chosen kernel on the CPU emulator instead of a GPU");
ABSL_FLAG(std::string, layout, "row,col",
          "`kiln gemm`: the storage orders of A and B, e.g. col,row: A column-major (M contiguous), B row-major "
          "(N contiguous); C is column-major");
ABSL_FLAG(int, split, -1,
          "`kiln gemm`, `kiln run`: the tile kernels' split instead of the rule's (or whole tiles): 1 whole tiles, "
          "S >= 2 split-K in S parts, 0 stream-K");
ABSL_FLAG(std::string, ptx, "", "`kiln emulate`: run this PTX file (e.g. a hand-edited one) with the kernel's manifest");
ABSL_FLAG(int, watchdog, 0,
          "build every sm_90+ kernel in the GPU debug mode: each mbarrier wait gives up after this many ms and "
          "reports its DSL line (Kernel::Watchdog); 0: off");
ABSL_FLAG(std::string, dtype, "bf16", "`kiln gemm`: the input type, bf16 or f16");
ABSL_FLAG(std::string, out_dtype, "", "`kiln gemm`: the output type, bf16, f16 or f32 (default: --dtype)");
ABSL_FLAG(std::string, epilogue, "",
          "`kiln gemm`: fused epilogue terms, comma-separated: scale (alpha, beta, C_in), bias_row or bias_col, "
          "relu, gelu or silu, residual");
ABSL_FLAG(std::string, tune_cache, "",
          "`kiln tune` writes (adds to) this file the fastest kernel per size; `kiln gemm` reads it");
ABSL_FLAG(int, iters, 30, "timed runs per measurement (the median is reported)");
ABSL_FLAG(int64_t, b, 1, "`kiln attention`: batch");
ABSL_FLAG(int64_t, h, 16, "`kiln attention`: query heads");
ABSL_FLAG(int64_t, hkv, 0, "`kiln attention`: key/value heads, dividing --h (default: --h)");
ABSL_FLAG(int64_t, s, 4096, "`kiln attention`: query length");
ABSL_FLAG(int64_t, skv, 0, "`kiln attention`: key/value length (default: --s)");
ABSL_FLAG(int64_t, d, 128, "`kiln attention`: head dimension, 64, 128 or 256");
ABSL_FLAG(bool, causal, false, "`kiln attention`: causal mask (bottom-right aligned)");
ABSL_FLAG(double, scale, 0, "`kiln attention`: softmax scale (0: 1/sqrt(d))");
ABSL_FLAG(std::string, kernel, "",
          "`kiln attention`: run this variant instead of the entry point's choice (a tiling: "
          "attention/hopper.d64.wg3.bn128; or attention/blackwell.d128 with --emulate)");
ABSL_FLAG(int32_t, steady_launches, 32,
          "GEMM timings at M <= 64: launches a timed block of the steady-state measure (back to back over "
          "copies of the weights) makes at least");
ABSL_FLAG(bool, flush_l2, true,
          "GEMM timings: evict L2 before every timed call (kiln, cuBLAS and the weights' copy alike), so "
          "each reads its inputs from DRAM and host launch work is not timed");
ABSL_FLAG(std::string, out, "",
          "`kiln bench`: also write the results as TSV here (GEMM rows: name M N K ms TFLOPS cuBLAS-ms "
          "cuBLAS-TFLOPS error spot-error reference ok; row-op rows: name rows cols ms GB/s copy-ms "
          "copy-GB/s ratio error ok)");
ABSL_FLAG(std::string, cache, "\x01", "`kiln compile`: the compile cache (default: kiln::DefaultCacheDir(); \"\" for none)");

namespace {

// The GEMM harness's options the timing flags set (--flush_l2, --steady_launches).
kiln::examples::RunOptions TimingFlags() {
  kiln::examples::RunOptions opt;
  opt.flush_l2 = absl::GetFlag(FLAGS_flush_l2);
  opt.steady_launches = absl::GetFlag(FLAGS_steady_launches);
  return opt;
}

using kiln::rt::Bundle;

int Fail(const absl::Status& s) {
  std::cerr << "kiln: " << s.message() << "\n";
  return 1;
}

std::string BundleDir() {
  std::string dir = absl::GetFlag(FLAGS_bundles);
  if (!dir.empty()) return dir;
  // A runtime-only build looks next to itself: <build>/bin/kiln -> <build>/bundles.
  char exe[4096] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "bundles";
  return (std::filesystem::path(exe).parent_path().parent_path() / "bundles").string();
}

bool Compiling() {
#ifdef KILN_HAVE_COMPILER
  return absl::GetFlag(FLAGS_bundles).empty();
#else
  return false;
#endif
}

// A family member (base.options: gemm/bf16_sm90.f16-f32.gelu): bundled for kiln gemm, checked by
// it and by the emulator tests, not part of kiln bench's or crosscheck's whole-registry runs.
bool FamilyMember(const std::string& name) {
  const size_t slash = name.rfind('/');
  return name.find('.', slash == std::string::npos ? 0 : slash) != std::string::npos;
}

absl::StatusOr<std::vector<std::string>> KernelNames() {
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    std::vector<std::string> names;
    for (const auto& e : kiln::examples::All()) names.push_back(e.name);
    for (const auto& f : kiln::examples::Families())  // the variants the GPU suite runs
      for (const std::string& options : f.bundled) names.push_back(absl::StrCat(f.base, ".", options));
    std::sort(names.begin(), names.end());
    return names;
  }
#endif
  return kiln::rt::ListBundles(BundleDir());
}

#ifdef KILN_HAVE_COMPILER
absl::StatusOr<kiln::KernelDef> BuildKernel(const std::string& name) {
  const kiln::examples::Example* e = kiln::examples::Find(name);
  if (!e)
    return absl::NotFoundError(absl::StrCat("unknown kernel '", name, "' (see `kiln list`)"));
  return e->build();
}
#endif

// `findings`: where given, kiln check's static findings (kernels built here only).
absl::StatusOr<Bundle> GetBundle(const std::string& name, std::vector<std::string>* findings = nullptr) {
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (!def.ok()) return def.status();
    if (findings) *findings = def->findings();
    absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def);
    if (!ptx.ok()) return ptx.status();
    return Bundle{def->manifest(), *std::move(ptx)};
  }
#endif
  absl::StatusOr<Bundle> b = kiln::rt::ReadBundle(BundleDir(), name);
  if (!b.ok() && absl::IsNotFound(b.status()))
    return absl::NotFoundError(absl::StrCat("unknown kernel '", name, "': ", b.status().message()));
  return b;
}

// The fallback reference for a kernel's dtype, when one can be had.
std::optional<Bundle> ReferenceFor(const kiln::rt::Manifest& m) {
  std::optional<kiln::examples::GemmSpec> g = kiln::examples::GemmOf(m);
  if (!g) return std::nullopt;
  absl::StatusOr<Bundle> b = GetBundle(absl::StrCat("reference/", g->in_type));
  if (!b.ok()) return std::nullopt;
  return *std::move(b);
}

// ops/stream_read, which the GEMM harness times on the weights at M <= 64 (null where this kiln
// has no such bundle: the timing then goes without it).
const Bundle* StreamRead() {
  static const std::optional<Bundle> bundle = []() -> std::optional<Bundle> {
    absl::StatusOr<Bundle> b = GetBundle("ops/stream_read");
    if (!b.ok()) return std::nullopt;
    return *std::move(b);
  }();
  return bundle ? &*bundle : nullptr;
}

int Stage(const std::string& stage_name, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "usage: kiln " << stage_name << " NAME\n";
    return 2;
  }
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    absl::StatusOr<kiln::Stage> stage = kiln::ParseStage(stage_name);
    if (!stage.ok()) return Fail(stage.status());
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(args[0]);
    if (!def.ok()) return Fail(def.status());
    absl::StatusOr<std::string> text = *stage == kiln::Stage::kPtx && absl::GetFlag(FLAGS_lines)
                                           ? kiln::EmitPtx(*def, {.line_info = true})
                                           : kiln::EmitStage(*def, *stage);
    if (!text.ok()) return Fail(text.status());
    std::cout << *text;
    return 0;
  }
#endif
  if (stage_name != "ptx")
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("this kiln was built without the compiler; only `kiln ptx` reads bundles, not `",
                     stage_name, "`")));
  absl::StatusOr<Bundle> b = GetBundle(args[0]);
  if (!b.ok()) return Fail(b.status());
  std::cout << b->ptx;
  return 0;
}

// The kernels a command names, or every kernel when it names none.
absl::StatusOr<std::vector<std::string>> NamesOrAll(const std::vector<std::string>& args) {
  if (!args.empty()) return args;
  return KernelNames();
}

int WriteBundles(const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  const std::vector<std::string>& names = *named;
  const std::string dir = absl::GetFlag(FLAGS_dir);
  int with_findings = 0;  // kiln check runs on every kernel bundled: a finding fails the step
  for (const std::string& name : names) {
    std::vector<std::string> findings;
    absl::StatusOr<Bundle> b = GetBundle(name, &findings);
    if (!b.ok()) return Fail(b.status());
    if (absl::Status s = kiln::rt::WriteBundle(dir, *b); !s.ok()) return Fail(s);
    if (b->manifest.Attribute("planted")) continue;  // planted bugs are meant to be found
    for (const std::string& f : findings) std::cerr << "kiln check: " << name << ": " << f << "\n";
    with_findings += findings.empty() ? 0 : 1;
  }
  std::cerr << "kiln: wrote " << names.size() << " bundles to " << dir << "\n";
  if (with_findings) {
    std::cerr << "kiln: " << with_findings << " kernels have static findings (kiln check)\n";
    return 1;
  }
  if (args.empty() && Compiling()) {
    // The directory mirrors the registry: drop bundles (a manifest that parses, and its PTX) of
    // kernels no longer registered. Nothing else in the directory is touched.
    absl::StatusOr<std::vector<std::string>> present = kiln::rt::ListBundles(dir);
    if (!present.ok()) {  // the bundles were written; only the tidying is skipped
      std::cerr << "kiln: not removing stale bundles from " << dir << ": " << present.status().message() << "\n";
      return 0;
    }
    const std::set<std::string> keep(names.begin(), names.end());
    int removed = 0;
    for (const std::string& name : *present) {
      if (keep.count(name)) continue;
      std::error_code ec;
      for (const char* ext : {".manifest", ".ptx"})
        std::filesystem::remove(absl::StrCat(dir, "/", kiln::rt::BundleStem(name), ext), ec);
      ++removed;
    }
    if (removed) std::cerr << "kiln: removed " << removed << " bundles of kernels no longer registered\n";
  }
  return 0;
}

#ifdef KILN_HAVE_COMPILER
// Builds and compiles kernels through the host API's disk cache, timing each step: the first
// run of a key lowers it, a second reads it back.
int CompileThroughCache(const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  const std::vector<std::string>& names = *named;
  kiln::CompileOptions options;
  if (std::string dir = absl::GetFlag(FLAGS_cache); dir != "\x01") options.cache_dir = dir;
  std::cout << "# cache " << (options.cache_dir.empty() ? "(none)" : options.cache_dir) << "\n"
            << "kernel\tbuild_ms\tcompile_ms\tsource\n";
  double build_total = 0, compile_total = 0;
  for (const std::string& name : names) {
    auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (!def.ok()) return Fail(def.status());
    double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    absl::StatusOr<kiln::CompiledKernel> c = kiln::Compile(*def, options);
    if (!c.ok()) return Fail(c.status());
    std::cout << name << "\t" << absl::StrFormat("%.1f\t%.1f", build_ms, c->milliseconds) << "\t"
              << (c->from_cache ? "cache" : "lowered") << "\n";
    if (!c->cache_warning.empty()) std::cerr << "kiln: " << name << ": " << c->cache_warning << "\n";
    build_total += build_ms;
    compile_total += c->milliseconds;
  }
  std::cout << absl::StrFormat("total\t%.1f\t%.1f\n", build_total, compile_total);
  return 0;
}
#endif

#ifdef KILN_HAVE_COMPILER
// The static checks, without running anything: the builder's own (types, tiles against their
// tensor maps, descriptors from the tiles, shared memory, tensor memory and setmaxnreg budgets,
// every allocation freed) and, over the built kernel, the transaction bytes each barrier is
// announced against the TMA boxes that complete on it; then ptxas's registers and spills where
// the toolkit is installed. Returns 1 if any kernel has a finding.
int CheckKernels(const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  int failing = 0;
  for (const std::string& name : *named) {
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (!def.ok()) {
      std::cout << name << ": " << def.status().message() << "\n";
      ++failing;
      continue;
    }
    const kiln::rt::Manifest& m = def->manifest();
    std::string summary = absl::StrFormat("smem %d of %d bytes", m.smem_bytes, def->target().smem_budget_bytes);
    if (kiln::HaveToolkit()) {
      absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def);
      absl::StatusOr<kiln::PtxasResult> cubin = ptx.ok() ? kiln::RunPtxas(*ptx, def->target().chip)
                                                         : absl::StatusOr<kiln::PtxasResult>(ptx.status());
      if (!cubin.ok()) {
        std::cout << name << ": " << cubin.status().message() << "\n";
        ++failing;
        continue;
      }
      // "Used 90 registers, ..." and "N bytes spill stores, M bytes spill loads".
      for (absl::string_view line : absl::StrSplit(cubin->log, '\n')) {
        if (size_t at = line.find("Used "); at != absl::string_view::npos)
          absl::StrAppend(&summary, "; ", line.substr(at, line.find(',', at) - at));
        if (size_t at = line.find("bytes spill stores"); at != absl::string_view::npos &&
                                                          line.find(" 0 bytes spill stores") == absl::string_view::npos)
          absl::StrAppend(&summary, "; ", absl::StripAsciiWhitespace(line.substr(line.find_last_of(',', at) + 1)));
      }
    }
    if (def->findings().empty()) {
      std::cout << name << ": ok (" << summary << ")\n";
      continue;
    }
    ++failing;
    for (const std::string& f : def->findings()) std::cout << name << ": " << f << "\n";
  }
  if (failing) std::cout << failing << " of " << named->size() << " kernels have findings\n";
  return failing ? 1 : 0;
}
#endif

absl::StatusOr<std::vector<kiln::examples::ProblemSize>> ParseSizes(const std::string& text) {
  std::vector<kiln::examples::ProblemSize> sizes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> p = absl::StrSplit(item, 'x');
    int64_t v[3];
    bool ok = (p.size() == 1 || p.size() == 3);
    for (size_t i = 0; ok && i < p.size(); ++i) ok = absl::SimpleAtoi(p[i], &v[i]) && v[i] > 0;
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad size '", item, "' (S or MxNxK)"));
    sizes.push_back(p.size() == 1 ? kiln::examples::ProblemSize{v[0], v[0], v[0]}
                                  : kiln::examples::ProblemSize{v[0], v[1], v[2]});
  }
  return sizes;
}

void PrintDevice() {
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return;
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  std::cout << "# " << (*d)->device_name() << " (sm_" << (*d)->compute_capability() << ", "
            << (*d)->sm_count() << " SMs), driver " << (*d)->driver_version() << ", " << date
            << "\n";
}

// Runs the row ops x shapes; prints their table. Returns the number of failed runs.
int BenchRowOps(const std::vector<Bundle>& ops, const std::vector<std::pair<int64_t, int64_t>>& shapes,
                std::ofstream& tsv) {
  if (ops.empty()) return 0;
  std::cout << "# row ops: GB/s = bytes read and written / median time; copy = cuMemcpyDtoD of the input, same run\n"
            << kiln::examples::RowOpTableHeader() << std::endl;
  int failures = 0;
  for (const Bundle& b : ops)
    for (auto [rows, cols] : shapes) {
      kiln::examples::RowOpOptions opt;
      opt.rows = rows, opt.cols = cols, opt.iterations = absl::GetFlag(FLAGS_iters);
      absl::StatusOr<kiln::examples::RowOpResult> r = kiln::examples::RunRowOp(b, opt);
      if (!r.ok()) {
        std::cout << b.manifest.name << " " << rows << "x" << cols << ": " << r.status().message() << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::RowOpTableRow(*r) << std::endl;
      if (tsv.is_open()) tsv << kiln::examples::RowOpTsvRow(*r) << "\n";
      failures += r->passed ? 0 : 1;
    }
  return failures;
}

// A planted bug for the GPU debug mode: one block, no arguments; it passes when the watchdog
// stopped it and said where. Returns 1 otherwise.
int RunPlanted(const Bundle& b) {
  absl::StatusOr<kiln::rt::LoadedKernel> k = kiln::rt::LoadedKernel::Load(b);
  if (!k.ok()) return Fail(k.status());
  absl::Status s = k->Launch({1, 1, 1}, {});
  if (s.ok()) s = kiln::rt::Synchronize();
  std::cout << b.manifest.name << " (" << *b.manifest.Attribute("planted") << "): " << s << std::endl;
  return s.code() == absl::StatusCode::kDeadlineExceeded ? 0 : 1;
}

// Runs the op probes on the GPU (checked, not timed). Returns the number that failed.
int CheckProbes(const std::vector<Bundle>& probes, bool everything) {
  if (probes.empty()) return 0;
  std::cout << "# op probes: every result against a host reference (examples/probe_check.h)" << std::endl;
  int failures = 0;
  for (const Bundle& b : probes) {
    if (absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get(); everything && d.ok()) {
      if (absl::Status here = kiln::rt::CheckTarget(b.manifest, **d); !here.ok()) {
        std::cout << "# " << here.message() << " (compiled only)" << std::endl;
        continue;
      }
    }
    absl::StatusOr<kiln::examples::ProbeResult> r = kiln::examples::RunProbe(b, {});
    if (!r.ok()) {
      std::cout << b.manifest.name << ": " << r.status().message() << std::endl;
      ++failures;
      continue;
    }
    std::cout << kiln::examples::ProbeReport(*r) << std::endl;
    failures += r->passed() ? 0 : 1;
  }
  return failures;
}

absl::StatusOr<std::vector<uint64_t>> ScheduleSeeds() {
  std::vector<uint64_t> seeds;
  for (absl::string_view item : absl::StrSplit(absl::GetFlag(FLAGS_seeds), ',', absl::SkipEmpty())) {
    uint64_t seed;
    if (!absl::SimpleAtoi(item, &seed)) return absl::InvalidArgumentError(absl::StrCat("bad seed '", item, "'"));
    seeds.push_back(seed);
  }
  if (seeds.empty()) return absl::InvalidArgumentError("--seeds names no schedule");
  return seeds;
}

// The GEMM size of `kiln emulate` and `kiln crosscheck`: the kernel's protocol size
// (kiln::examples::ProtocolSize) unless --m/--n/--k say otherwise.
kiln::examples::ProblemSize EmulationSize(const Bundle& b, const kiln::examples::GemmSpec& g) {
  kiln::examples::ProblemSize size = kiln::examples::ProtocolSize(b.manifest, g);
  if (absl::GetFlag(FLAGS_m)) size.m = absl::GetFlag(FLAGS_m);
  if (absl::GetFlag(FLAGS_n)) size.n = absl::GetFlag(FLAGS_n);
  if (absl::GetFlag(FLAGS_k)) size.k = absl::GetFlag(FLAGS_k);
  return size;
}

std::string SeedList(const std::vector<uint64_t>& seeds) { return absl::StrJoin(seeds, ","); }

// Runs a kernel on the PTX emulator (kiln/runtime/emulator.h) under each schedule and checks it
// like `kiln run`: one line with the size, the schedules and the worst error.
int Emulate(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "usage: kiln emulate NAME [--m M --n N --k K | --rows R --cols C] [--seeds S,...]\n";
    return 2;
  }
  absl::StatusOr<std::vector<uint64_t>> seeds = ScheduleSeeds();
  if (!seeds.ok()) return Fail(seeds.status());
  absl::StatusOr<Bundle> b = GetBundle(args[0]);
  if (!b.ok()) return Fail(b.status());
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {  // with line tables, so that the emulator's messages name the DSL line
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(args[0]);
    if (!def.ok()) return Fail(def.status());
    absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def, {.line_info = true});
    if (!ptx.ok()) return Fail(ptx.status());
    b->ptx = *std::move(ptx);
  }
#endif
  if (const std::string path = absl::GetFlag(FLAGS_ptx); !path.empty()) {  // hand-edited PTX, same manifest
    std::ifstream in(path);
    if (!in) return Fail(absl::NotFoundError(absl::StrCat("cannot read ", path)));
    b->ptx.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (std::optional<kiln::examples::GemmSpec> g = kiln::examples::GemmOf(b->manifest)) {
    kiln::examples::RunOptions opt = TimingFlags();
    opt.size = EmulationSize(*b, *g);
    absl::StatusOr<std::vector<kiln::examples::GemmResult>> rs = kiln::examples::EmulateGemmSchedules(*b, opt, *seeds);
    if (!rs.ok()) return Fail(rs.status());
    const kiln::examples::GemmResult* worst = &rs->front();
    for (const kiln::examples::GemmResult& r : *rs)
      if (!r.passed || (worst->passed && r.rel_error > worst->rel_error)) worst = &r;
    std::cout << absl::StrFormat("%s %dx%dx%d on the emulator (seeds %s, %.1f s): error %.3e against fp64: %s\n",
                                 worst->name, worst->size.m, worst->size.n, worst->size.k, SeedList(*seeds), seconds(),
                                 worst->rel_error,
                                 worst->passed ? "ok" : absl::StrCat("FAIL (seed ", worst->schedule_seed, "): ",
                                                                     worst->failure));
    return worst->passed ? 0 : 1;
  }
  if (kiln::examples::IsProbe(args[0])) {
    int failures = 0;
    for (uint64_t seed : *seeds) {
      absl::StatusOr<kiln::examples::ProbeResult> r = kiln::examples::EmulateProbe(*b, {}, seed);
      if (!r.ok())
        return Fail(absl::Status(r.status().code(), absl::StrCat(r.status().message(), " (schedule seed ", seed, ")")));
      std::cout << kiln::examples::ProbeReport(*r) << absl::StrFormat("  (emulator, seed %d)\n", seed);
      failures += r->passed() ? 0 : 1;
    }
    return failures ? 1 : 0;
  }
  if (!kiln::examples::IsRowOp(args[0]))
    return Fail(absl::UnimplementedError(absl::StrCat("kiln emulate checks GEMMs, the row ops and the op probes; ",
                                                      args[0], " is none of them (launch it with kiln::emu::Launch)")));
  kiln::examples::RowOpOptions opt;
  opt.rows = absl::GetFlag(FLAGS_rows) ? absl::GetFlag(FLAGS_rows) : 37;
  opt.cols = absl::GetFlag(FLAGS_cols) ? absl::GetFlag(FLAGS_cols) : 3001;
  opt.time = false;
  std::optional<kiln::examples::RowOpResult> worst;
  uint64_t worst_seed = 0;
  for (uint64_t seed : *seeds) {
    absl::StatusOr<kiln::examples::RowOpResult> r = kiln::examples::EmulateRowOp(*b, opt, seed);
    if (!r.ok()) return Fail(absl::Status(r.status().code(), absl::StrCat(r.status().message(), " (schedule seed ", seed, ")")));
    if (!worst || !r->passed || (worst->passed && r->rel_error > worst->rel_error)) worst = *r, worst_seed = seed;
    if (!worst->passed) break;
  }
  std::cout << absl::StrFormat("%s %dx%d on the emulator (seeds %s, %.1f s): error %.3e over %d rows: %s\n",
                               worst->name, worst->rows, worst->cols, SeedList(*seeds), seconds(), worst->rel_error,
                               worst->rows_checked,
                               worst->passed ? "ok" : absl::StrCat("FAIL (seed ", worst_seed, "): ", worst->failure));
  return worst->passed ? 0 : 1;
}

// The GPU's output against the emulator's on the same inputs, element by element, for every
// GEMM this GPU runs (or NAME...): the evidence that the emulator computes what the hardware does
// where a GPU can check it (docs/EMULATOR.md).
int Crosscheck(std::vector<std::string> names) {
  constexpr double kRel = 1e-5;  // of each element's scale, sum_k |a_ik b_kj| (CompareOutputs)
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return Fail(d.status());
  const bool everything = names.empty();
  if (everything) {
    absl::StatusOr<std::vector<std::string>> all = KernelNames();
    if (!all.ok()) return Fail(all.status());
    names = *all;
  }
  // The GPU runs first, one at a time; then every kernel's emulation on its own thread.
  struct Row {
    Bundle bundle;
    kiln::examples::GemmSpec spec;
    kiln::examples::GemmResult gpu;
    absl::StatusOr<kiln::examples::GemmResult> emulated = absl::UnknownError("not run");
    double seconds = 0;
  };
  std::vector<Row> rows;
  int failures = 0;
  for (const std::string& name : names) {
    absl::StatusOr<Bundle> b = GetBundle(name);
    if (!b.ok()) return Fail(b.status());
    std::optional<kiln::examples::GemmSpec> g = kiln::examples::GemmOf(b->manifest);
    if (!g || name.rfind("reference/", 0) == 0 || (everything && FamilyMember(name))) {
      if (!everything) return Fail(absl::InvalidArgumentError(absl::StrCat(name, " is not a GEMM kernel")));
      continue;
    }
    if (absl::Status here = kiln::rt::CheckTarget(b->manifest, **d); !here.ok()) {
      if (!everything) return Fail(here);
      continue;
    }
    kiln::examples::RunOptions opt = TimingFlags();
    opt.size = EmulationSize(*b, *g);
    opt.time = false;
    opt.keep_output = true;
    std::optional<Bundle> ref = ReferenceFor(b->manifest);
    absl::StatusOr<kiln::examples::GemmResult> gpu = kiln::examples::RunGemm(*b, ref ? &*ref : nullptr, opt);
    if (!gpu.ok()) {
      std::cout << name << ": on the GPU: " << gpu.status().message() << std::endl;
      ++failures;
      continue;
    }
    rows.push_back({*std::move(b), *g, *std::move(gpu)});
  }
  std::vector<std::thread> workers;
  std::atomic<size_t> next{0};
  const unsigned width = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), rows.size()));
  for (unsigned w = 0; w < width; ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < rows.size();) {
        const auto t0 = std::chrono::steady_clock::now();
        kiln::examples::RunOptions opt = TimingFlags();
        opt.size = rows[i].gpu.size;
        rows[i].emulated = kiln::examples::EmulateGemm(rows[i].bundle, opt, /*schedule_seed=*/1);
        rows[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    });
  for (std::thread& w : workers) w.join();
  std::cout << absl::StrFormat("%-26s %14s %9s %7s %6s %10s %10s  %s\n", "kernel", "size", "equal", "close", "apart",
                               "worst/scale", "norm diff", "emulator vs GPU (rel " + absl::StrFormat("%.0e", kRel) + ")");
  for (const Row& r : rows) {
    const std::string size = absl::StrFormat("%dx%dx%d", r.gpu.size.m, r.gpu.size.n, r.gpu.size.k);
    if (!r.emulated.ok()) {
      std::cout << absl::StrFormat("%-26s %14s  emulator: %s\n", r.gpu.name, size, r.emulated.status().message());
      ++failures;
      continue;
    }
    const std::vector<double> scale = kiln::examples::ProductScales(r.spec, r.gpu.size, kiln::examples::RunOptions{}.seed);
    const kiln::examples::OutputAgreement a =
        kiln::examples::CompareOutputs(r.spec, r.gpu.size, r.emulated->output, r.gpu.output, scale, kRel);
    const bool ok = a.apart == 0 && r.gpu.passed && r.emulated->passed;
    std::cout << absl::StrFormat("%-26s %14s %9d %7d %6d %10.2e %10.2e  %s (GPU %s, emulator %.1f s)%s\n", r.gpu.name,
                                 size, a.equal, a.close, a.apart, a.worst, a.norm_rel, ok ? "ok" : "DIFFER",
                                 r.gpu.passed ? "ok" : r.gpu.failure, r.seconds,
                                 a.worst_element.empty() ? "" : "; worst " + a.worst_element);
    failures += ok ? 0 : 1;
  }
  return failures ? 1 : 0;
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseShapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> p = absl::StrSplit(item, 'x');
    int64_t r, c;
    if (p.size() != 2 || !absl::SimpleAtoi(p[0], &r) || !absl::SimpleAtoi(p[1], &c) || r < 1 || c < 1)
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", item, "' (ROWSxCOLS)"));
    shapes.push_back({r, c});
  }
  return shapes;
}

// Beside a results TSV (kiln bench/gemm --out F.tsv): F-ratio.svg, the ratio to cuBLAS against
// the shape a line per kernel, and F-versions.svg, each series' versions at one shape.
// `as_one`: draw every row as one kernel of that name (kiln gemm: the entry point, whichever
// kernel it chose at each shape).
int WritePlots(const std::string& tsv_path, const std::string& title, const std::string& as_one = "") {
  absl::StatusOr<std::vector<kiln::examples::GemmResult>> results = kiln::examples::ReadResultsTsv(tsv_path);
  if (!results.ok()) return Fail(results.status());
  if (!as_one.empty())
    for (kiln::examples::GemmResult& r : *results) r.name = as_one;
  const std::string stem(absl::StripSuffix(tsv_path, ".tsv"));
  for (const auto& [suffix, svg] :
       {std::pair{"-ratio.svg", kiln::examples::RatioChart(*results, title + ": ratio to cuBLAS")},
        std::pair{"-versions.svg", kiln::examples::ProgressionChart(*results, title + ": each series' versions")}}) {
    std::ofstream out(stem + suffix);
    out << svg;
    if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write ", stem, suffix)));
    std::cerr << "kiln: wrote " << stem << suffix << "\n";
  }
  return 0;
}

// Runs kernels x sizes; prints the table. Returns non-zero if any run failed or errored.
int Bench(std::vector<std::string> names, const std::vector<kiln::examples::ProblemSize>& sizes,
          const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  const bool everything = names.empty();  // then kernels for other chips are listed, not failed
  if (names.empty()) {
    absl::StatusOr<std::vector<std::string>> all = KernelNames();
    if (!all.ok()) return Fail(all.status());
    for (const std::string& n : *all)
      if (n.rfind("reference/", 0) != 0 && n.rfind("planted/", 0) != 0 && !FamilyMember(n)) names.push_back(n);
  }
  PrintDevice();
  bool gemm_header = false;  // printed before the first GEMM row
  std::ofstream tsv;
  if (!absl::GetFlag(FLAGS_out).empty()) tsv.open(absl::GetFlag(FLAGS_out));
  int failures = 0;
  std::vector<Bundle> row_ops, probes;
  for (const std::string& name : names) {
    absl::StatusOr<Bundle> b = GetBundle(name);
    if (!b.ok()) {
      std::cout << name << ": " << b.status().message() << std::endl;
      ++failures;
      continue;
    }
    if (kiln::examples::IsRowOp(name)) {
      row_ops.push_back(*b);
      continue;
    }
    if (kiln::examples::IsProbe(name)) {
      probes.push_back(*b);
      continue;
    }
    if (b->manifest.Attribute("planted")) {
      failures += RunPlanted(*b);
      continue;
    }
    if (everything && !kiln::examples::GemmOf(b->manifest)) {
      std::cout << "# " << name << " is not a GEMM (launched through kiln::rt::LoadedKernel, not timed here)"
                << std::endl;
      continue;
    }
    if (absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get(); everything && d.ok()) {
      if (absl::Status here = kiln::rt::CheckTarget(b->manifest, **d); !here.ok()) {
        std::cout << "# " << here.message() << " (compiled only)" << std::endl;
        continue;
      }
    }
    if (!std::exchange(gemm_header, true)) std::cout << kiln::examples::TableHeader() << std::endl;
    std::optional<Bundle> ref = ReferenceFor(b->manifest);
    const int split = absl::GetFlag(FLAGS_split);
    const bool walks_work = std::any_of(b->manifest.params.begin(), b->manifest.params.end(), [](const auto& p) {
      return p.kind == kiln::rt::ParamSpec::Kind::kScheduleTable && p.schedule.work();
    });
    if (split >= 0 && split != 1 && !walks_work) {  // named, an error; among all the kernels, passed over
      std::cout << (everything ? "# " : "") << name << ": --split " << split
                << ": this kernel walks no work table, so its tiles are whole (the entry point's gemm/bf16_sm90* "
                   "kernels split)"
                << std::endl;
      failures += everything ? 0 : 1;
      continue;
    }
    for (const kiln::examples::ProblemSize& size : sizes) {
      kiln::examples::RunOptions opt = TimingFlags();
      opt.size = size;
      opt.iterations = absl::GetFlag(FLAGS_iters);
      opt.stream_read = StreamRead();
      if (split >= 0) opt.split = split;
      absl::StatusOr<kiln::examples::GemmResult> r =
          kiln::examples::RunGemm(*b, ref ? &*ref : nullptr, opt);
      if (r.ok() && split >= 0 && split != 1 && walks_work)
        r->name += split == 0 ? "+streamK" : absl::StrCat("+splitK", split);
      if (!r.ok()) {
        std::cout << name << " " << size.m << "x" << size.n << "x" << size.k << ": "
                  << r.status().message() << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::TableRow(*r) << std::endl;
      if (!r->note.empty()) std::cout << "#   note: " << r->note << std::endl;
      if (tsv.is_open()) tsv << kiln::examples::TsvRow(*r) << "\n";
      failures += r->passed ? 0 : 1;
    }
  }
  if (tsv.is_open()) {
    tsv.close();
    if (gemm_header) failures += WritePlots(absl::GetFlag(FLAGS_out), "kiln bench");
    tsv.open(absl::GetFlag(FLAGS_out), std::ios::app);
  }
  failures += BenchRowOps(row_ops, shapes, tsv);
  failures += CheckProbes(probes, everything);
  return failures ? 1 : 0;
}

// kiln gemm's and kiln tune's problem sizes: --m --n --k, or each of --sizes; empty after a
// usage message.
std::vector<kiln::examples::ProblemSize> GemmSizes(const std::vector<std::string>& args, const char* command) {
  std::vector<kiln::examples::ProblemSize> sizes = {
      {absl::GetFlag(FLAGS_m), absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_k)}};
  if (!sizes[0].m && !sizes[0].n && !sizes[0].k) {
    absl::StatusOr<std::vector<kiln::examples::ProblemSize>> list = ParseSizes(absl::GetFlag(FLAGS_sizes));
    if (!list.ok()) {
      std::cerr << "kiln: " << list.status().message() << "\n";
      return {};
    }
    sizes = *list;
  }
  for (const kiln::examples::ProblemSize& size : sizes)
    if (!args.empty() || size.m < 1 || size.n < 1 || size.k < 1) {
      std::cerr << "usage: kiln " << command << " (--m M --n N --k K | --sizes MxNxK,...) [--dtype bf16|f16] "
                   "[--out_dtype bf16|f16|f32] [--epilogue TERMS] [--tune_cache FILE]"
                << (std::string(command) == "gemm" ? " [--layout row|col,row|col] [--split S] [--emulate]" : "")
                << "  (sizes at least 1)\n";
      return {};
    }
  return sizes;
}

absl::StatusOr<kiln::examples::GemmOptions> GemmOptionsFromFlags() {
  kiln::examples::GemmOptions options;
  options.in_type = absl::GetFlag(FLAGS_dtype);
  options.out_type = absl::GetFlag(FLAGS_out_dtype).empty() ? options.in_type : absl::GetFlag(FLAGS_out_dtype);
  if (options.in_type != "bf16" && options.in_type != "f16")
    return absl::InvalidArgumentError(absl::StrCat("--dtype ", options.in_type, ": bf16 or f16"));
  if (options.out_type != "bf16" && options.out_type != "f16" && options.out_type != "f32")
    return absl::InvalidArgumentError(absl::StrCat("--out_dtype ", options.out_type, ": bf16, f16 or f32"));
  absl::StatusOr<std::string> epilogue = kiln::examples::CanonicalEpilogue(absl::GetFlag(FLAGS_epilogue));
  if (!epilogue.ok()) return epilogue.status();
  options.epilogue = *epilogue;
  const std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout != "row,col" && layout != "col,col" && layout != "row,row" && layout != "col,row")
    return absl::InvalidArgumentError(absl::StrCat("--layout ", layout, ": A's order, B's order (row or col)"));
  options.a_mn = layout.rfind("col,", 0) == 0;
  options.b_mn = layout.substr(layout.find(',') + 1) == "row";
  return options;
}

// The GEMM as kiln::rt::GemmRunner runs it on the harness's buffers, in place of the bundle's
// kernel alone: `suffix` for the result's name; `epilogue`, the caller's terms, which the
// reference applies (the kernel's differ where the runner swapped M and N: bias_row is bias_col).
struct ThroughRunner {
  std::function<absl::Status(const kiln::examples::GemmBuffers&)> launch;
  std::string suffix, epilogue;
};

// One GEMM kernel of the entry point at one size, checked against cuBLAS and fp64 spot checks
// and timed with cuBLAS (or, `emulate`, checked on the emulator); `via`, where given, runs it.
// A split other than whole tiles shows in the result's name (gemm/bf16_sm90_n128+streamK).
absl::StatusOr<kiln::examples::GemmResult> RunEntryKernel(const std::string& name,
                                                          const kiln::examples::ProblemSize& size, int split,
                                                          bool emulate, const ThroughRunner* via = nullptr) {
  absl::StatusOr<Bundle> b = GetBundle(name);
  if (!b.ok() && !Compiling() && absl::IsNotFound(b.status()))
    return absl::NotFoundError(absl::StrCat(
        b.status().message(), ": this kiln runs bundles only; write that variant's with `kiln bundle ", name,
        "` where kiln has its compiler (the build bundles ", absl::StrJoin(kiln::examples::kBundledTileVariants, ", "),
        ")"));
  if (!b.ok()) return b.status();
  // One layout whatever the kernel: the reference indexes through strides, so it is told C is
  // column-major like the others, and A and B are as --layout says.
  std::optional<kiln::examples::GemmSpec> spec = kiln::examples::GemmOf(b->manifest);
  if (!spec) return absl::InternalError(absl::StrCat(name, " is not a GEMM"));
  // (Other kernels describe their own C: a c_row one's row-major; through the runner, C is the caller's.)
  if (via || kiln::rt::ReadsAnyStrides(name)) spec->c_order = "col";
  if (kiln::rt::ReadsAnyStrides(name)) {
    const std::string layout = absl::GetFlag(FLAGS_layout);
    spec->a_order = layout.substr(0, layout.find(','));
    spec->b_order = layout.substr(layout.find(',') + 1);
  }
  if (via) spec->epilogue = via->epilogue;
  kiln::examples::SetGemmSpec(b->manifest, *spec);
  kiln::examples::RunOptions opt = TimingFlags();
  opt.size = size;
  opt.iterations = absl::GetFlag(FLAGS_iters);
  opt.split = split;
  opt.stream_read = StreamRead();
  if (via) opt.launch = via->launch;
  absl::StatusOr<kiln::examples::GemmResult> r =
      emulate ? kiln::examples::EmulateGemm(*b, opt, 1) : kiln::examples::RunGemm(*b, nullptr, opt);
  if (r.ok() && split != 1) r->name += split == 0 ? "+streamK" : absl::StrCat("+splitK", split);
  if (r.ok() && via) r->name += via->suffix;
  return r;
}

// The tune cache named by --tune_cache (empty where none is).
absl::StatusOr<kiln::rt::GemmTuneCache> TuneCacheFromFlag() {
  if (absl::GetFlag(FLAGS_tune_cache).empty()) return kiln::rt::GemmTuneCache();
  return kiln::rt::GemmTuneCache::ReadExisting(absl::GetFlag(FLAGS_tune_cache));
}

// The GEMM entry point: C = epilogue(A * B) at any M, N, K >= 1 (A row-major, B and C
// column-major) with the kernel ChooseGemm picks for this GPU (or --tune_cache's measured one),
// checked against cuBLAS and fp64 spot checks and timed with it, for --m --n --k or each of
// --sizes (then with the geometric mean of the ratio to cuBLAS); --emulate runs the choice for an
// H100 on the CPU emulator instead.
int Gemm(const std::vector<std::string>& args) {
  const std::vector<kiln::examples::ProblemSize> sizes = GemmSizes(args, "gemm");
  if (sizes.empty()) return 2;
  absl::StatusOr<kiln::examples::GemmOptions> options = GemmOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<kiln::rt::GemmTuneCache> tuned = TuneCacheFromFlag();
  if (!tuned.ok()) return Fail(tuned.status());
  const bool emulate = absl::GetFlag(FLAGS_emulate);
  int cc = 90;
  if (!emulate) {
    absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
    if (!d.ok()) return Fail(absl::Status(d.status().code(), absl::StrCat(d.status().message(),
                                                                         " (kiln gemm --emulate runs it on the CPU)")));
    cc = (*d)->compute_capability();
    PrintDevice();
    std::cout << kiln::examples::TableHeader() << std::endl;
  }
  std::ofstream tsv;
  if (!absl::GetFlag(FLAGS_out).empty()) tsv.open(absl::GetFlag(FLAGS_out));
  int failures = 0;
  double log_ratio = 0, worst = 0;
  int timed = 0;
  std::optional<kiln::rt::GemmRunner> runner;  // the entry point itself, where it copies operands first
  for (const kiln::examples::ProblemSize& size : sizes) {
    kiln::examples::GemmChoice choice = kiln::examples::ChooseGemm(size, cc, *options, &*tuned);
    if (absl::GetFlag(FLAGS_split) < -1)
      return Fail(absl::InvalidArgumentError(absl::StrCat("--split ", absl::GetFlag(FLAGS_split),
                                                          ": 1 whole tiles, S >= 2 split-K, 0 stream-K")));
    if (const int split = absl::GetFlag(FLAGS_split); split >= 0) {
      if (choice.kernel.rfind("gemm/bf16_sm90", 0) != 0)
        return Fail(absl::InvalidArgumentError(absl::StrCat("--split: ", choice.kernel, " (chosen at ", size.m, "x",
                                                            size.n, "x", size.k, ") keeps its tiles whole")));
      choice.split = split;
      choice.why += absl::StrCat("; --split ", split);
    }
    // On an H100/H200, operands whose packed rows TMA cannot stride (K, or an MN-major operand's
    // M or N, no multiple of 8) take the entry point's way, as kiln::rt::GemmRunner runs them:
    // copied first into rows 16 bytes apart (gemm/restride16), then a tile kernel; the copies are
    // inside the time. (The emulator and kiln's own compiler run the strided kernel there.) So
    // does a C of 1-4 columns, which the runner computes transposed.
    const std::string& ep = options->epilogue;
    auto plan_packed = [&] {
      const kiln::cu::CUdeviceptr some = 256;  // plans only: any aligned address
      kiln::rt::GemmOperands packed{.a = some, .b = some, .c = some, .a_col_major = options->a_mn,
                                    .b_row_major = options->b_mn};
      if (ep.find("scale") != std::string::npos) packed.c_in = some;
      if (ep.find("bias") != std::string::npos) packed.bias = some;
      if (ep.find("residual") != std::string::npos) packed.residual = some;
      return kiln::rt::PlanGemm(size, *options, packed, cc, &*tuned);
    };
    // The emulator runs a transposed plan's kernel on the transposed problem, with operands of
    // its own: the kernel the runner would launch, at the size it would see.
    kiln::examples::ProblemSize run_size = size;
    if (emulate && absl::GetFlag(FLAGS_split) < 0 && size.n <= 4) {
      absl::StatusOr<kiln::rt::GemmPlan> plan = plan_packed();
      if (!plan.ok()) return Fail(plan.status());
      if (plan->swapped) {
        choice = plan->choice;
        run_size = {size.n, size.m, size.k};
        choice.why += absl::StrCat("; emulated as that transposed problem, ", size.n, "x", size.m, "x", size.k);
      }
    }
    std::optional<ThroughRunner> via;
    if (!emulate && cc == 90 && !Compiling() && absl::GetFlag(FLAGS_split) < 0 &&
        (kiln::rt::ReadsAnyStrides(choice.kernel) || size.n <= 4)) {
      absl::StatusOr<kiln::rt::GemmPlan> plan = plan_packed();
      if (!plan.ok()) return Fail(plan.status());
      if (plan->restrided_lda || plan->restrided_ldb || plan->swapped) {
        choice = plan->choice;
        if (!runner) runner.emplace(absl::GetFlag(FLAGS_bundles), absl::GetFlag(FLAGS_tune_cache));
        const bool a_mn = options->a_mn, b_mn = options->b_mn;
        const kiln::examples::GemmOptions run_options = *options;
        via.emplace();
        via->launch = [&runner, size, a_mn, b_mn, run_options](const kiln::examples::GemmBuffers& b) {
          return runner->Run(size, run_options,
                             {.a = b.a, .b = b.b, .c = b.c, .a_col_major = a_mn, .b_row_major = b_mn, .alpha = b.alpha,
                              .beta = b.beta, .c_in = b.c_in, .bias = b.bias, .residual = b.residual});
        };
        if (plan->restrided_lda || plan->restrided_ldb) via->suffix += "+restride";
        if (plan->swapped) via->suffix += "+transposed";
        absl::StatusOr<std::string> terms = kiln::examples::CanonicalEpilogue(ep);
        if (!terms.ok()) return Fail(terms.status());
        via->epilogue = *terms;
      }
    }
    std::cout << "# " << size.m << "x" << size.n << "x" << size.k << ": " << choice.kernel << ", "
              << kiln::rt::SplitName(choice.split) << " (" << choice.why << ")" << std::endl;
    absl::StatusOr<kiln::examples::GemmResult> r =
        RunEntryKernel(choice.kernel, run_size, choice.split, emulate, via ? &*via : nullptr);
    if (absl::IsNotFound(r.status())) return Fail(r.status());
    if (!r.ok()) {
      std::cout << size.m << "x" << size.n << "x" << size.k << ": " << r.status().message() << std::endl;
      ++failures;
      continue;
    }
    failures += r->passed ? 0 : 1;
    if (emulate) {
      std::cout << absl::StrFormat("%s %dx%dx%d on the emulator: error %.3e against fp64: %s\n", r->name, run_size.m,
                                   run_size.n, run_size.k, r->rel_error, r->passed ? "ok" : "FAIL: " + r->failure);
      continue;
    }
    std::cout << kiln::examples::TableRow(*r) << std::endl;
    if (!r->note.empty()) std::cout << "#   note: " << r->note << std::endl;
    if (tsv.is_open()) tsv << kiln::examples::TsvRow(*r) << "\n";
    if (r->passed && r->cublas_tflops > 0) {
      const double ratio = r->tflops / r->cublas_tflops;
      log_ratio += std::log(ratio), worst = timed ? std::min(worst, ratio) : ratio, ++timed;
    }
  }
  if (timed > 1)
    std::cout << absl::StrFormat("# %d shapes: geometric mean of the ratio to cuBLAS %.3f, lowest %.3f\n", timed,
                                 std::exp(log_ratio / timed), worst);
  if (tsv.is_open() && timed) {
    tsv.close();
    failures += WritePlots(absl::GetFlag(FLAGS_out), "kiln gemm", "kiln gemm/the kernel it chose");
  }
  return failures ? 1 : 0;
}

// kiln attention: one problem through the attention entry point, checked against an fp64 host
// reference and timed on the GPU, or (--emulate) checked on the emulator.
int Attention() {
  kiln::rt::AttentionSize z;
  z.b = absl::GetFlag(FLAGS_b), z.hq = absl::GetFlag(FLAGS_h), z.s = absl::GetFlag(FLAGS_s), z.d = absl::GetFlag(FLAGS_d);
  z.hkv = absl::GetFlag(FLAGS_hkv) ? absl::GetFlag(FLAGS_hkv) : z.hq;
  z.skv = absl::GetFlag(FLAGS_skv) ? absl::GetFlag(FLAGS_skv) : z.s;
  kiln::rt::AttentionOptions options;
  options.dtype = absl::GetFlag(FLAGS_dtype);
  options.causal = absl::GetFlag(FLAGS_causal);
  options.scale = static_cast<float>(absl::GetFlag(FLAGS_scale));
  options.kernel = absl::GetFlag(FLAGS_kernel);
  // The problem's own errors first, on any machine (the pointers here only pass the checks).
  absl::StatusOr<kiln::rt::AttentionPlan> plan = kiln::rt::PlanAttention(z, options, {16, 16, 16, 16, 16}, 90);
  if (!plan.ok()) return Fail(plan.status());
  const std::string shape = kiln::examples::AttentionShapeName(z, options.causal);
  absl::StatusOr<kiln::examples::AttentionResult> r;
  if (absl::GetFlag(FLAGS_emulate)) {
    absl::StatusOr<Bundle> b = GetBundle(plan->kernel);
    if (!b.ok()) return Fail(b.status());
    r = kiln::examples::RunAttentionEmulated(*b, z, options, 1);
  } else {
    absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
    if (!d.ok()) return Fail(absl::Status(d.status().code(), absl::StrCat(d.status().message(),
                                                                         " (kiln attention --emulate runs it on the CPU)")));
    PrintDevice();
    kiln::rt::AttentionRunner runner(BundleDir());
    r = kiln::examples::RunAttentionGpu(runner, z, options, absl::GetFlag(FLAGS_iters), 1);
  }
  if (!r.ok()) return Fail(r.status());
  std::cout << absl::StrFormat("%s %s: %d rows against fp64, error %.3e, lse %.1e: %s", r->kernel, shape,
                               r->rows_checked, r->rel_error, r->lse_error, r->passed ? "ok" : "FAIL: " + r->failure);
  if (r->ms > 0) std::cout << absl::StrFormat("; %.4f ms, %.1f TFLOPS", r->ms, r->tflops);
  std::cout << std::endl;
  return r->passed ? 0 : 1;
}

// kiln tune: every kernel that can run each size (GemmCandidates), checked and timed on this GPU
// in its plain form (the types and epilogue do not change which tile is fastest much); the
// fastest correct one goes to --tune_cache, which kiln gemm and GemmRunner read.
int Tune(const std::vector<std::string>& args) {
  const std::vector<kiln::examples::ProblemSize> sizes = GemmSizes(args, "tune");
  if (sizes.empty()) return 2;
  const std::string path = absl::GetFlag(FLAGS_tune_cache);
  if (path.empty()) return Fail(absl::InvalidArgumentError("kiln tune writes its choices to --tune_cache FILE"));
  absl::StatusOr<kiln::rt::GemmTuneCache> cache = kiln::rt::GemmTuneCache::Read(path);
  if (!cache.ok()) return Fail(cache.status());
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return Fail(d.status());
  const int cc = (*d)->compute_capability();
  PrintDevice();
  std::cout << kiln::examples::TableHeader() << std::endl;
  int failures = 0;
  for (const kiln::examples::ProblemSize& size : sizes) {
    std::optional<kiln::rt::GemmChoice> best;
    double best_ms = 0;
    for (const kiln::rt::GemmChoice& c : kiln::rt::GemmCandidates(size, cc)) {
      kiln::examples::GemmOptions plain;
      plain.any_m = c.kernel.rfind("gemm/bf16_sm90", 0) == 0 && size.m % 8 != 0;
      absl::StatusOr<kiln::examples::GemmResult> r =
          RunEntryKernel(kiln::examples::GemmVariantName(c.kernel, plain), size, c.split, false);
      if (!r.ok()) {
        std::cout << c.kernel << " (" << kiln::rt::SplitName(c.split) << ") " << size.m << "x" << size.n << "x"
                  << size.k << ": " << r.status().message() << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::TableRow(*r) << std::endl;
      if (r->passed && (!best || r->ms < best_ms)) best = c, best_ms = r->ms;
    }
    const kiln::examples::GemmChoice rule = kiln::examples::ChooseGemm(size, cc);
    if (!best) {
      std::cout << "# " << size.m << "x" << size.n << "x" << size.k << ": no candidate passed" << std::endl;
      ++failures;
      continue;
    }
    cache->Set(cc, size, best->kernel, best->split, best_ms);
    std::cout << absl::StrFormat("# %dx%dx%d: fastest %s, %s (%.4f ms); the rule picks %s, %s\n", size.m, size.n,
                                 size.k, best->kernel, kiln::rt::SplitName(best->split), best_ms, rule.kernel,
                                 kiln::rt::SplitName(rule.split));
  }
  if (absl::Status st = cache->Write(path); !st.ok()) return Fail(st);
  std::cout << "# " << cache->size() << " entries in " << path << std::endl;
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kiln list | mlir|lowered|llvm|ptx|sass NAME | bundle [NAME...] | compile [NAME...] | check [NAME...] | emulate NAME | crosscheck [NAME...] | gemm --m --n --k | tune --sizes | attention --b --h --hkv --s --skv --d [--causal] | plot TSV | run NAME | bench [NAME...]");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (args.empty()) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  const std::string command = args[0];
  args.erase(args.begin());
#ifdef KILN_HAVE_COMPILER
  kiln::SetDefaultWatchdog(absl::GetFlag(FLAGS_watchdog));
#else
  if (absl::GetFlag(FLAGS_watchdog))
    return Fail(absl::FailedPreconditionError("--watchdog builds kernels: this kiln has no compiler (bundle them with it)"));
#endif
  if (command == "list") {
    absl::StatusOr<std::vector<std::string>> names = KernelNames();
    if (!names.ok()) return Fail(names.status());
    for (const std::string& n : *names) std::cout << n << "\n";
    return 0;
  }
  if (command == "mlir" || command == "lowered" || command == "llvm" || command == "ptx" ||
      command == "sass")
    return Stage(command, args);
  if (command == "bundle") return WriteBundles(args);
  if (command == "emulate") return Emulate(args);
  if (command == "crosscheck") return Crosscheck(args);
  if (command == "check") {
#ifdef KILN_HAVE_COMPILER
    return CheckKernels(args);
#else
    return Fail(absl::FailedPreconditionError("kiln check builds kernels: this kiln has no compiler"));
#endif
  }
  if (command == "compile") {
#ifdef KILN_HAVE_COMPILER
    return CompileThroughCache(args);
#else
    return Fail(absl::FailedPreconditionError("this kiln was built without the compiler"));
#endif
  }
  if (command == "gemm") return Gemm(args);
  if (command == "tune") return Tune(args);
  if (command == "attention") return Attention();
  if (command == "plot") {  // the charts of a results TSV written before (kiln bench/gemm --out)
    if (args.size() != 1) {
      std::cerr << "usage: kiln plot RESULTS.tsv   (writes RESULTS-ratio.svg and RESULTS-versions.svg)\n";
      return 2;
    }
    return WritePlots(args[0], std::filesystem::path(args[0]).stem().string());
  }
  if (command == "run") {
    if (args.size() != 1) {
      std::cerr << "usage: kiln run NAME [--m M --n N --k K]\n";
      return 2;
    }
    auto size = [](int64_t v) { return v ? v : int64_t{4096}; };
    return Bench(args, {{size(absl::GetFlag(FLAGS_m)), size(absl::GetFlag(FLAGS_n)), size(absl::GetFlag(FLAGS_k))}},
                 {{absl::GetFlag(FLAGS_rows) ? absl::GetFlag(FLAGS_rows) : 32768,
                   absl::GetFlag(FLAGS_cols) ? absl::GetFlag(FLAGS_cols) : 4096}});
  }
  if (command == "bench") {
    absl::StatusOr<std::vector<kiln::examples::ProblemSize>> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
    if (!sizes.ok()) return Fail(sizes.status());
    absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> shapes = ParseShapes(absl::GetFlag(FLAGS_shapes));
    if (!shapes.ok()) return Fail(shapes.status());
    return Bench(args, *sizes, *shapes);
  }
  std::cerr << "kiln: unknown command '" << command << "'\nusage: " << absl::ProgramUsageMessage()
            << "\n";
  return 2;
}
