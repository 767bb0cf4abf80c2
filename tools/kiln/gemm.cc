// `kiln gemm`: C = epilogue(A * B) at any size through the GEMM entry point.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

namespace {

// The plan the runner makes for packed operands of this layout (any aligned addresses).
absl::StatusOr<kiln::rt::GemmPlan> PlanPacked(const kiln::rt::GemmSize& size,
                                              const kiln::rt::GemmOptions& options, int cc,
                                              const kiln::rt::GemmTuneCache& tuned) {
  const kiln::cu::CUdeviceptr some = 256;
  kiln::rt::GemmOperands packed{
      .a = some, .b = some, .c = some, .a_col_major = options.a_mn, .b_row_major = options.b_mn};
  const std::string& ep = options.epilogue;
  if (ep.find("scale") != std::string::npos) packed.c_in = some;
  if (ep.find("bias") != std::string::npos) packed.bias = some;
  if (ep.find("residual") != std::string::npos) packed.residual = some;
  return kiln::rt::PlanGemm(size, options, packed, cc, &tuned);
}

// On an H100/H200 (GPU runs from bundles), the problems kiln gemm runs as kiln::rt::GemmRunner
// does rather than by the chosen kernel alone: operands whose packed rows TMA cannot stride (K,
// or an MN-major operand's M or N, no multiple of 8: copied first into rows 16 bytes apart by
// gemm/restride16, inside the time), a C of 1-4 columns (computed transposed), and a fused
// variant the bundles lack (a runtime-only kiln: the f32 product, then gemm/epilogue_pass; the
// harness's buffers follow the unfused variant's manifest, `run_kernel`). None: the kernel alone.
absl::StatusOr<std::optional<ThroughRunner>> ThroughTheRunner(
    const kiln::rt::GemmSize& size, const kiln::rt::GemmOptions& options, int cc,
    const kiln::rt::GemmTuneCache& tuned, kiln::rt::GemmChoice& choice, std::string& run_kernel,
    std::optional<kiln::rt::GemmRunner>& runner) {
  const std::string& ep = options.epilogue;
  const bool by_pass = !ep.empty() && ep.find("swiglu") == std::string::npos &&
                       ep.find("rope") == std::string::npos && BundleDirHint().empty() &&
                       absl::IsNotFound(GetBundle(choice.kernel).status());
  if (!by_pass && !kiln::rt::ReadsAnyStrides(choice.kernel) && size.n > 4) return std::nullopt;
  absl::StatusOr<kiln::rt::GemmPlan> plan = PlanPacked(size, options, cc, tuned);
  if (!plan.ok()) return plan.status();
  if (!by_pass && !plan->restrided_lda && !plan->restrided_ldb && !plan->swapped)
    return std::nullopt;
  ThroughRunner via;
  if (by_pass) {
    kiln::rt::GemmOptions unfused = options, product = options;
    unfused.epilogue = "", product.epilogue = "", product.out_type = "f32";
    run_kernel = kiln::rt::ChooseGemm(size, cc, unfused, &tuned).kernel;
    // The result is named after what runs: the f32 product as the runner plans it, its split.
    absl::StatusOr<kiln::rt::GemmPlan> runs = PlanPacked(size, product, cc, tuned);
    if (!runs.ok()) return runs.status();
    const int split = runs->choice.split;
    via.name = absl::StrCat(runs->choice.kernel, split == 0  ? "+streamK"
                                                 : split > 1 ? absl::StrCat("+splitK", split)
                                                             : "");
    via.suffix += "+epilogue_pass";
    choice.why += "; that variant is not bundled: the f32 product, then gemm/epilogue_pass";
  } else {
    choice = plan->choice, run_kernel = choice.kernel;
  }
  if (!runner) runner.emplace(absl::GetFlag(FLAGS_bundles), absl::GetFlag(FLAGS_tune_cache));
  via.launch = [&runner, size, options](const kiln::examples::GemmBuffers& b) {
    return runner->Run(size, options,
                       {.a = b.a,
                        .b = b.b,
                        .c = b.c,
                        .a_col_major = options.a_mn,
                        .b_row_major = options.b_mn,
                        .alpha = b.alpha,
                        .beta = b.beta,
                        .c_in = b.c_in,
                        .bias = b.bias,
                        .residual = b.residual});
  };
  if (plan->restrided_lda || plan->restrided_ldb) via.suffix += "+restride";
  if (plan->swapped) via.suffix += "+transposed";
  absl::StatusOr<std::string> terms = kiln::rt::CanonicalEpilogue(ep);
  if (!terms.ok()) return terms.status();
  via.epilogue = *terms;
  return via;
}

}  // namespace

// The GEMM entry point: C = epilogue(A * B) at any M, N, K >= 1 (A row-major, B and C
// column-major) with the kernel ChooseGemm picks for this GPU (or --tune_cache's entry),
// checked against cuBLAS and fp64 spot checks and timed with it, for --m --n --k or each of
// --sizes (then with the geometric mean of the ratio to cuBLAS); --emulate runs the choice for an
// H100 on the CPU emulator instead.
int Gemm(const std::vector<std::string>& args) {
  const std::vector<kiln::rt::GemmSize> sizes = GemmSizes(args, "gemm");
  if (sizes.empty()) return 2;
  if (absl::GetFlag(FLAGS_emulate) && !absl::GetFlag(FLAGS_out).empty())
    return FailUsage(absl::InvalidArgumentError(
        "kiln gemm: --out writes the timed rows of a GPU run; the emulator times nothing"));
  if (kiln::rt::IsFp8Type(absl::GetFlag(FLAGS_dtype).substr(0, 4))) return Fp8Gemm(sizes);
  absl::StatusOr<kiln::rt::GemmOptions> options = GemmOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<kiln::rt::GemmTuneCache> tuned = TuneCacheFromFlag();
  if (!tuned.ok()) return Fail(tuned.status());
  const bool emulate = absl::GetFlag(FLAGS_emulate);
  int cc = 90;
  if (!emulate) {
    absl::StatusOr<int> gpu = NeedGpu("gemm");
    if (!gpu.ok()) return Fail(gpu.status());
    cc = *gpu;
    std::cout << kiln::examples::TableHeader() << std::endl;
  }
  std::ofstream tsv;
  if (!absl::GetFlag(FLAGS_out).empty()) tsv.open(absl::GetFlag(FLAGS_out));
  int failures = 0;
  double log_ratio = 0, worst = 0;
  int timed = 0;
  std::optional<kiln::rt::GemmRunner>
      runner;  // the entry point itself, where it copies operands first
  for (const kiln::rt::GemmSize& size : sizes) {
    kiln::rt::GemmChoice choice = kiln::rt::ChooseGemm(size, cc, *options, &*tuned);
    if (const int split = absl::GetFlag(FLAGS_split); split >= 0) {
      if (choice.kernel.rfind("gemm/bf16_sm90", 0) != 0)
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--split: ", choice.kernel, " (chosen at ", size.m, "x", size.n, "x",
                         size.k, ") keeps its tiles whole")));
      choice.split = split;
      choice.why += absl::StrCat("; --split ", split);
      // (The tile kernels' 16-bit k-step: 64.) Parts past K's steps are launched and add nothing.
      if (const int64_t steps = (size.k + 63) / 64; split > steps)
        choice.why +=
            absl::StrCat(" (K has ", steps, steps == 1 ? " step" : " steps",
                         " of 64: ", split - steps, " of the parts have none and add nothing)");
    }
    // The emulator runs a transposed plan's kernel on the transposed problem, with operands of
    // its own: the kernel the runner would launch, at the size it would see. (It and kiln's own
    // compiler run the strided kernels where a GPU run from bundles copies the operands first:
    // ThroughTheRunner.)
    kiln::rt::GemmSize run_size = size;
    if (emulate && absl::GetFlag(FLAGS_split) < 0 && size.n <= 4) {
      absl::StatusOr<kiln::rt::GemmPlan> plan = PlanPacked(size, *options, cc, *tuned);
      if (!plan.ok()) return Fail(plan.status());
      if (plan->swapped) {
        choice = plan->choice;
        run_size = {size.n, size.m, size.k};
        choice.why += absl::StrCat("; emulated as that transposed problem, ", size.n, "x", size.m,
                                   "x", size.k);
      }
    }
    std::string run_kernel = choice.kernel;
    std::optional<ThroughRunner> via;
    if (!emulate && cc == 90 && !Compiling() && absl::GetFlag(FLAGS_split) < 0) {
      absl::StatusOr<std::optional<ThroughRunner>> through =
          ThroughTheRunner(size, *options, cc, *tuned, choice, run_kernel, runner);
      if (!through.ok()) return Fail(through.status());
      via = *std::move(through);
    }
    std::cout << "# " << size.m << "x" << size.n << "x" << size.k << ": " << choice.kernel << ", "
              << kiln::rt::SplitName(choice.split) << " (" << choice.why << ")" << std::endl;
    absl::StatusOr<kiln::examples::GemmResult> r =
        RunEntryKernel(run_kernel, run_size, choice.split, emulate, via ? &*via : nullptr);
    if (absl::IsNotFound(r.status())) return Fail(r.status());
    if (!r.ok()) {
      std::cout << size.m << "x" << size.n << "x" << size.k << ": " << r.status().message()
                << std::endl;
      ++failures;
      continue;
    }
    failures += r->passed ? 0 : 1;
    if (emulate) {
      std::cout << absl::StrFormat("%s %dx%dx%d on the emulator: error %.3e against fp64: %s\n",
                                   r->name, run_size.m, run_size.n, run_size.k, r->rel_error,
                                   r->passed ? "ok" : "FAIL: " + r->failure);
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
    std::cout << absl::StrFormat(
        "# %d shapes: geometric mean of the ratio to cuBLAS %.3f, lowest %.3f\n", timed,
        std::exp(log_ratio / timed), worst);
  if (tsv.is_open() && timed) {
    tsv.close();
    failures += WritePlots(absl::GetFlag(FLAGS_out), "kiln gemm", "kiln gemm/the kernel it chose");
  }
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
