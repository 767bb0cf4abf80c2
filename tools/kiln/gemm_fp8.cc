// `kiln gemm --dtype e4m3` (e5m2, e5m2xe4m3: A's and B's): the entry point's 8-bit GEMM at each
// size, its inputs quantized with
// --scaling's scales (and --epilogue's terms fused), checked against the dequantized inputs' fp64
// product and timed
// (ops/gemm/fp8_check.h); --emulate runs it on the CPU emulator.
#include "ops/gemm/gemm_fp8.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ops/gemm/fp8_check.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

// A flag value no 8-bit plan takes (a scaling, a split, a tile, an epilogue term, an output
// type) is a usage error, said before a GPU is asked for: on the emulated GPU, or on neither of
// the GPUs the plan knows (a GPU run then plans again for its own).
absl::Status Plannable(const kiln::examples::Fp8GemmProblem& p, bool emulate) {
  if (emulate) return kiln::examples::PlanOf(p, p.compute_capability).status();
  absl::StatusOr<kiln::rt::GemmPlan> sm90 = kiln::examples::PlanOf(p, 90);
  if (sm90.ok() || kiln::examples::PlanOf(p, 100).ok()) return absl::OkStatus();
  return sm90.status();
}

// A refusal of one size of several names it.
absl::Status AtSize(const absl::Status& st, const kiln::rt::GemmSize& size, size_t sizes) {
  if (sizes < 2) return st;
  return absl::Status(st.code(), absl::StrCat(st.message(), " (at ", size.m, "x", size.n, "x",
                                              size.k, " of --sizes)"));
}

int Fp8Gemm(const std::vector<kiln::rt::GemmSize>& sizes) {
  const bool emulate = absl::GetFlag(FLAGS_emulate);
  const std::string out =
      absl::GetFlag(FLAGS_out_dtype).empty() ? "bf16" : absl::GetFlag(FLAGS_out_dtype);
  // A's type, then B's where it differs: e4m3, e5m2, e5m2xe4m3 (an e5m2 gradient by e4m3).
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const size_t x = dtype.find('x');
  const std::string a_type = dtype.substr(0, x),
                    b_type = x == std::string::npos ? a_type : dtype.substr(x + 1);
  if (!kiln::rt::IsFp8Type(a_type) || !kiln::rt::IsFp8Type(b_type))
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("--dtype ", dtype,
                     ": the 8-bit entry point takes e4m3, e5m2, or A's and B's as "
                     "e5m2xe4m3 or e4m3xe5m2")));
  if (absl::GetFlag(FLAGS_layout) != "row,col")
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("kiln gemm --dtype ", dtype, " --layout ", absl::GetFlag(FLAGS_layout),
                     ": the 8-bit check takes K-major A and B alone (row,col, the default)")));
  const std::function<const Bundle*(const std::string&)> bundle_of = BundlesOnce();
  absl::StatusOr<kiln::rt::GemmTuneCache> tuned = TuneCacheFromFlag();
  if (!tuned.ok()) return Fail(tuned.status());
  auto problem = [&](const kiln::rt::GemmSize& size) {
    return kiln::examples::Fp8GemmProblem{
        .size = size,
        .scaling = absl::GetFlag(FLAGS_scaling),
        .out_type = out,
        .tile = absl::GetFlag(FLAGS_kernel),
        .split = absl::GetFlag(FLAGS_split),
        .compute_capability = emulate && absl::GetFlag(FLAGS_sm100) ? 100 : 90,
        .epilogue = absl::GetFlag(FLAGS_epilogue),
        .a_type = a_type,
        .b_type = b_type,
        .tuned = &*tuned};
  };
  for (const kiln::rt::GemmSize& size : sizes)
    if (absl::Status st = Plannable(problem(size), emulate); !st.ok())
      return FailUsage(AtSize(st, size, sizes.size()));
  std::optional<kiln::rt::GemmRunner> runner;
  if (!emulate) {
    if (absl::Status st = NeedGpu("gemm").status(); !st.ok()) return Fail(st);
    runner.emplace(BundleDir(), absl::GetFlag(FLAGS_tune_cache));
  }
  std::ofstream tsv;
  if (!absl::GetFlag(FLAGS_out).empty()) {
    tsv.open(absl::GetFlag(FLAGS_out));
    if (!tsv)
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("kiln gemm: cannot write --out ", absl::GetFlag(FLAGS_out))));
  }
  std::cout << absl::StrFormat("%-20s %-11s %-48s %10s %9s %10s %10s %9s\n", "M x N x K", "scaling",
                               "kernel", "error", "bound", "vs exact", "ms", "TFLOPS");
  int failures = 0;
  for (const kiln::rt::GemmSize& size : sizes) {
    const kiln::examples::Fp8GemmProblem p = problem(size);
    absl::StatusOr<kiln::examples::Fp8GemmResult> r =
        emulate ? kiln::examples::RunFp8GemmEmulated(bundle_of, p, 1)
                : kiln::examples::RunFp8GemmGpu(*runner, p, absl::GetFlag(FLAGS_iters), 1);
    if (!r.ok()) return Fail(r.status());
    // (The emulator times nothing: its columns of time show "-".)
    std::cout << absl::StrFormat("%-20s %-11s %-48s %10.3e %9.2e %10.3e %10s %9s  %s\n",
                                 absl::StrFormat("%dx%dx%d", size.m, size.n, size.k), p.scaling,
                                 r->kernel, r->error, r->bound, r->quantized_error,
                                 emulate ? "-" : absl::StrFormat("%.4f", r->ms),
                                 emulate ? "-" : absl::StrFormat("%.1f", r->tflops),
                                 r->passed ? r->why : "FAILED: " + r->failure)
              << std::flush;  // each row as it is measured (a caller's timeout keeps the rest)
    failures += !r->passed;
    if (tsv.is_open())
      tsv << absl::StrFormat("%s\t%d\t%d\t%d\t%.5f\t%.1f\t%s\t%.4e\t%.4e\t%d\n", r->kernel, size.m,
                             size.n, size.k, r->ms, r->tflops, p.scaling, r->error, r->bound,
                             r->passed ? 1 : 0)
          << std::flush;
  }
  return failures ? 1 : 0;
}

int Fp8Tune(const std::vector<kiln::rt::GemmSize>& sizes) {
  if (absl::GetFlag(FLAGS_emulate) || !absl::GetFlag(FLAGS_epilogue).empty())
    return FailUsage(absl::InvalidArgumentError(
        "kiln tune --dtype e4m3 times the 8-bit tiles on the GPU: no --emulate or --epilogue "
        "(the tiles' plain variants stand for their fused ones)"));
  const std::string path = absl::GetFlag(FLAGS_tune_cache);
  absl::StatusOr<kiln::rt::GemmTuneCache> cache =
      path.empty() ? kiln::rt::GemmTuneCache() : kiln::rt::GemmTuneCache::Read(path);
  if (!cache.ok()) return Fail(cache.status());
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "e4m3")
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("kiln tune times e4m3 by e4m3 8-bit GEMMs, not --dtype ", dtype)));
  const std::string out =
      absl::GetFlag(FLAGS_out_dtype).empty() ? "bf16" : absl::GetFlag(FLAGS_out_dtype);
  for (const kiln::rt::GemmSize& size : sizes)
    if (absl::Status st =
            Plannable({.size = size, .scaling = absl::GetFlag(FLAGS_scaling), .out_type = out},
                      /*emulate=*/false);
        !st.ok())
      return FailUsage(AtSize(st, size, sizes.size()));
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return Fail(NeedGpu("tune").status());  // (the same error, with a hint)
  PrintDevice();
  kiln::rt::GemmRunner runner(BundleDir());
  std::cout << absl::StrFormat("%-20s %-11s %-48s %-10s %10s %10s %9s\n", "M x N x K", "scaling",
                               "kernel", "split", "error", "ms", "TFLOPS");
  int failures = 0;
  for (const kiln::rt::GemmSize& size : sizes) {
    const kiln::examples::Fp8GemmProblem p{
        .size = size, .scaling = absl::GetFlag(FLAGS_scaling), .out_type = out};
    absl::StatusOr<std::vector<kiln::examples::Fp8GemmResult>> rs =
        kiln::examples::SweepFp8GemmGpu(runner, p, absl::GetFlag(FLAGS_iters), 1);
    if (!rs.ok()) return Fail(rs.status());
    const kiln::examples::Fp8GemmResult* best = nullptr;
    for (const kiln::examples::Fp8GemmResult& r : *rs) {
      std::cout << absl::StrFormat("%-20s %-11s %-48s %-10s %10.3e %10.4f %9.1f  %s\n",
                                   absl::StrFormat("%dx%dx%d", size.m, size.n, size.k), p.scaling,
                                   r.kernel, kiln::rt::SplitName(r.split), r.error, r.ms, r.tflops,
                                   r.passed ? "" : "FAILED: " + r.failure)
                << std::flush;
      failures += !r.passed;
      if (r.passed && r.ms > 0 && std::isfinite(r.ms) && (!best || r.ms < best->ms)) best = &r;
    }
    absl::StatusOr<kiln::rt::GemmPlan> plan = kiln::examples::PlanOf(p, 90);  // the rule's
    if (!plan.ok()) return Fail(plan.status());
    if (!best) continue;
    std::cout << absl::StrFormat("# %dx%dx%d %s: fastest %s, %s (%.4f ms); the rule picks %s, %s\n",
                                 size.m, size.n, size.k, p.scaling, best->kernel,
                                 kiln::rt::SplitName(best->split), best->ms, plan->choice.kernel,
                                 kiln::rt::SplitName(plan->choice.split));
    // The tile's name without its variant, for the kernel's problem and scaling.
    cache->SetFp8(90, kiln::rt::Fp8TuneScaling(p.scaling, *plan), plan->size,
                  best->kernel.substr(0, best->kernel.find('.')), best->split, best->ms);
  }
  if (!path.empty()) {
    if (absl::Status st = cache->Write(path); !st.ok()) return Fail(st);
    std::cout << "# " << cache->size() << " entries in " << path << std::endl;
  }
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
