// `kiln tune`: time every candidate kernel and split, record the fastest for `kiln gemm`.
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

// Past the weight-bound rows, each tile's speed as the compute model would need it to predict
// this size's timings (docs/GEMM_CHOICE.md says how to refit the table from them).
namespace {
void PrintFittedSpeeds(const kiln::rt::GemmSize& size, int cc,
                       const std::vector<std::pair<std::string, double>>& whole_ms) {
  // The speeds are relative to the widest tile's, which GemmCandidates lists first.
  if (whole_ms.empty() || whole_ms.front().first != "gemm/bf16_sm90") return;
  for (const auto& [kernel, ms] : whole_ms)
    if (std::optional<double> speed =
            kiln::rt::FittedTileSpeed(size, cc, kernel, ms, whole_ms.front().second))
      std::cout << absl::StrFormat("# %dx%dx%d: fitted speed %s %.2f\n", size.m, size.n, size.k,
                                   kernel, *speed);
}
}  // namespace

// kiln tune: every kernel that can run each size (GemmCandidates), checked and timed on this GPU
// in its plain form (the types and epilogue do not change which tile is fastest much); the
// fastest correct one goes to --tune_cache, which kiln gemm and GemmRunner read.
int Tune(const std::vector<std::string>& args) {
  const std::vector<kiln::rt::GemmSize> sizes = GemmSizes(args, "tune");
  if (sizes.empty()) return 2;
  if (kiln::rt::IsFp8Type(absl::GetFlag(FLAGS_dtype).substr(0, 4))) return Fp8Tune(sizes);
  // The 16-bit tiles are timed in their plain bf16 form: a type or epilogue asked for would be
  // ignored, so it is refused.
  const bool f16 = absl::GetFlag(FLAGS_dtype) != "bf16";
  for (const char* flag : {"out_dtype", "epilogue", "dtype"})
    if (FlagGiven(flag) && (flag != std::string("dtype") || f16))
      return FailUsage(absl::InvalidArgumentError(absl::StrCat(
          "kiln tune times the 16-bit tiles in their plain bf16 form, which picks the tile for "
          "every type and epilogue: no --",
          flag, " (with --dtype e4m3, --out_dtype picks the 8-bit GEMM's output)")));
  const std::string path = absl::GetFlag(FLAGS_tune_cache);
  if (path.empty())
    return Fail(absl::InvalidArgumentError("kiln tune writes its choices to --tune_cache FILE"));
  absl::StatusOr<kiln::rt::GemmTuneCache> cache = kiln::rt::GemmTuneCache::Read(path);
  if (!cache.ok()) return Fail(cache.status());
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return Fail(NeedGpu("tune").status());  // (the same error, with a hint)
  const int cc = (*d)->compute_capability();
  PrintDevice();
  std::cout << kiln::examples::TableHeader() << std::endl;
  int failures = 0;
  for (const kiln::rt::GemmSize& size : sizes) {
    std::optional<kiln::rt::GemmChoice> best;
    double best_ms = 0;
    std::vector<std::pair<std::string, double>> whole_ms;  // each kernel's whole tiles
    for (const kiln::rt::GemmChoice& c : kiln::rt::GemmCandidates(size, cc)) {
      kiln::rt::GemmOptions plain;
      plain.any_m = c.kernel.rfind("gemm/bf16_sm90", 0) == 0 && size.m % 8 != 0;
      absl::StatusOr<kiln::examples::GemmResult> r =
          RunEntryKernel(kiln::rt::GemmVariantName(c.kernel, plain), size, c.split, false);
      if (!r.ok()) {
        std::cout << c.kernel << " (" << kiln::rt::SplitName(c.split) << ") " << size.m << "x"
                  << size.n << "x" << size.k << ": " << r.status().message() << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::TableRow(*r) << std::endl;
      // (a time that is no measurement, not a positive finite number, is never recorded: the
      // tables refuse it)
      const bool timed = r->ms > 0 && std::isfinite(r->ms);
      if (r->passed && timed && (!best || r->ms < best_ms)) best = c, best_ms = r->ms;
      if (r->passed && c.split == 1) whole_ms.push_back({c.kernel, r->ms});
    }
    PrintFittedSpeeds(size, cc, whole_ms);
    const kiln::rt::GemmChoice rule = kiln::rt::ChooseGemm(size, cc);
    if (!best) {
      std::cout << "# " << size.m << "x" << size.n << "x" << size.k << ": no candidate passed"
                << std::endl;
      ++failures;
      continue;
    }
    cache->Set(cc, size, best->kernel, best->split, best_ms);
    std::cout << absl::StrFormat("# %dx%dx%d: fastest %s, %s (%.4f ms); the rule picks %s, %s\n",
                                 size.m, size.n, size.k, best->kernel,
                                 kiln::rt::SplitName(best->split), best_ms, rule.kernel,
                                 kiln::rt::SplitName(rule.split));
  }
  if (absl::Status st = cache->Write(path); !st.ok()) return Fail(st);
  std::cout << "# " << cache->size() << " entries in " << path << std::endl;
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
