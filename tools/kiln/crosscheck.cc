// `kiln crosscheck [NAME...]`: the GPU's outputs against the emulator's, element by element.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/kiln/common.h"

namespace kiln::cli {

// The GPU's output against the emulator's on the same inputs, element by element, for every
// GEMM this GPU runs (or NAME...): the evidence that the emulator computes what the hardware does
// where a GPU can check it (docs/EMULATOR.md).
int Crosscheck(std::vector<std::string> names) {
  constexpr double kRel = 1e-5;  // of each element's scale, sum_k |a_ik b_kj| (CompareOutputs)
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return Fail(NeedGpu("crosscheck").status());  // (the same error, with a hint)
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
      if (!everything)
        return Fail(absl::InvalidArgumentError(absl::StrCat(name, " is not a GEMM kernel")));
      continue;
    }
    if (g->epilogue == "swiglu")  // C has half the product's rows; the comparison is by element
      return Fail(absl::UnimplementedError(absl::StrCat(
          name,
          ": crosscheck compares C element by element with the product's scale; a swiglu "
          "C is checked by `kiln run` and `kiln emulate` against fp64")));
    if (absl::Status here = kiln::rt::CheckTarget(b->manifest, **d); !here.ok()) {
      if (!everything) return Fail(here);
      continue;
    }
    kiln::examples::RunOptions opt = TimingFlags();
    opt.size = EmulationSize(*b, *g);
    opt.time = false;
    opt.keep_output = true;
    std::optional<Bundle> ref = ReferenceFor(b->manifest);
    absl::StatusOr<kiln::examples::GemmResult> gpu =
        kiln::examples::RunGemm(*b, ref ? &*ref : nullptr, opt);
    if (!gpu.ok()) {
      std::cout << name << ": on the GPU: " << gpu.status().message() << std::endl;
      ++failures;
      continue;
    }
    rows.push_back({*std::move(b), *g, *std::move(gpu)});
  }
  std::vector<std::thread> workers;
  std::atomic<size_t> next{0};
  const unsigned width =
      std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), rows.size()));
  for (unsigned w = 0; w < width; ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < rows.size();) {
        const auto t0 = std::chrono::steady_clock::now();
        kiln::examples::RunOptions opt = TimingFlags();
        opt.size = rows[i].gpu.size;
        rows[i].emulated = kiln::examples::EmulateGemm(rows[i].bundle, opt, /*schedule_seed=*/1);
        rows[i].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    });
  for (std::thread& w : workers) w.join();
  std::cout << absl::StrFormat("%-26s %14s %9s %7s %6s %10s %10s  %s\n", "kernel", "size", "equal",
                               "close", "apart", "worst/scale", "norm diff",
                               "emulator vs GPU (rel " + absl::StrFormat("%.0e", kRel) + ")");
  for (const Row& r : rows) {
    const std::string size = absl::StrFormat("%dx%dx%d", r.gpu.size.m, r.gpu.size.n, r.gpu.size.k);
    if (!r.emulated.ok()) {
      std::cout << absl::StrFormat("%-26s %14s  emulator: %s\n", r.gpu.name, size,
                                   r.emulated.status().message());
      ++failures;
      continue;
    }
    const std::vector<double> scale =
        kiln::examples::ProductScales(r.spec, r.gpu.size, kiln::examples::RunOptions{}.seed);
    const kiln::examples::OutputAgreement a = kiln::examples::CompareOutputs(
        r.spec, r.gpu.size, r.emulated->output, r.gpu.output, scale, kRel,
        /*only_where_x_written=*/!r.emulated->coverage.empty());
    const bool ok = a.apart == 0 && r.gpu.passed && r.emulated->passed;
    std::cout << absl::StrFormat(
        "%-26s %14s %9d %7d %6d %10.2e %10.2e  %s (GPU %s, emulator %.1f s%s)%s\n", r.gpu.name,
        size, a.equal, a.close, a.apart, a.worst, a.norm_rel, ok ? "ok" : "DIFFER",
        r.gpu.passed ? "ok" : r.gpu.failure, r.seconds,
        r.emulated->coverage.empty() ? "" : ", " + r.emulated->coverage,
        a.worst_element.empty() ? "" : "; worst " + a.worst_element);
    failures += ok ? 0 : 1;
  }
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
