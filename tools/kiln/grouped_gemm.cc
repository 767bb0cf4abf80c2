// `kiln grouped-gemm`: a grouped GEMM (kiln/ops/grouped_gemm.h) of --experts groups of --tokens
// each, checked against fp64 and timed (ops/gemm/grouped_check.h); --emulate runs it on the CPU
// emulator.
#include <algorithm>
#include <iostream>
#include <map>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ops/gemm/grouped_check.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {
namespace {

// --tokens: one count for every expert, or one per expert.
absl::StatusOr<std::vector<int64_t>> Tokens(int64_t experts, const std::string& text) {
  std::vector<int64_t> tokens;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens: '", part, "' is no count of tokens (0 or more)"));
    tokens.push_back(t);
  }
  if (tokens.size() == 1 && experts > 1) tokens.assign(experts, tokens[0]);
  if (experts && static_cast<int64_t>(tokens.size()) != experts)
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens: ", tokens.size(), " counts for ", experts, " experts (--experts)"));
  return tokens;
}

}  // namespace

int GroupedGemm() {
  const bool emulate = absl::GetFlag(FLAGS_emulate);
  const char* usage =
      "usage: kiln grouped-gemm --experts E --tokens T|T1,T2,.. --n N --k K [--masked "
      "[--capacity C]] [--dtype e4m3] [--kernel K] [--emulate]";
  // --tokens, --n or --k missing or below 1: a usage error, exit 2 (as kiln gemm's sizes).
  if (absl::GetFlag(FLAGS_tokens).empty())
    return FailUsage(absl::InvalidArgumentError(absl::StrCat("--tokens is missing\n", usage)));
  for (const auto& [flag, value] :
       {std::pair{"n", absl::GetFlag(FLAGS_n)}, std::pair{"k", absl::GetFlag(FLAGS_k)}})
    if (value < 1)
      return FailUsage(absl::InvalidArgumentError(
          FlagGiven(flag) ? absl::StrCat("--", flag, " ", value, ": at least 1\n", usage)
                          : absl::StrCat("--", flag, " is missing\n", usage)));
  if (absl::GetFlag(FLAGS_capacity) < 0 ||
      (FlagGiven("capacity") && !absl::GetFlag(FLAGS_capacity)))
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("kiln grouped-gemm: --capacity ", absl::GetFlag(FLAGS_capacity),
                     ": rows of each expert's block, at least 1 (left out: the largest count)")));
  // Flag values no grouped GEMM takes, and flags it does not take (refused rather than dropped):
  // usage errors, exit 2.
  if (absl::GetFlag(FLAGS_experts) < 0 ||
      (FlagGiven("experts") && absl::GetFlag(FLAGS_experts) == 0))
    return FailUsage(absl::InvalidArgumentError(absl::StrCat(
        "kiln grouped-gemm: --experts ", absl::GetFlag(FLAGS_experts), ": 1 or more groups")));
  if (!absl::GetFlag(FLAGS_epilogue).empty() || !absl::GetFlag(FLAGS_out_dtype).empty())
    return FailUsage(absl::InvalidArgumentError(
        "kiln grouped-gemm: the grouped GEMM stores bf16 with no epilogue: no --epilogue or "
        "--out_dtype"));
  if (const std::string t = absl::GetFlag(FLAGS_dtype); t != "bf16" && t != "e4m3")
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("kiln grouped-gemm: --dtype ", t, ": bf16 or e4m3")));
  if (absl::GetFlag(FLAGS_capacity) && !absl::GetFlag(FLAGS_masked))
    return FailUsage(
        absl::InvalidArgumentError("kiln grouped-gemm: --capacity is the masked layout's block of "
                                   "rows a group: with --masked"));
  absl::StatusOr<std::vector<int64_t>> tokens =
      Tokens(absl::GetFlag(FLAGS_experts), absl::GetFlag(FLAGS_tokens));
  if (!tokens.ok()) return FailUsage(tokens.status());
  const kiln::examples::GroupedGemmProblem p{.tokens = *tokens,
                                             .n = absl::GetFlag(FLAGS_n),
                                             .k = absl::GetFlag(FLAGS_k),
                                             .layout = absl::GetFlag(FLAGS_masked)
                                                           ? kiln::rt::GroupedLayout::kMasked
                                                           : kiln::rt::GroupedLayout::kContiguous,
                                             .capacity = absl::GetFlag(FLAGS_capacity),
                                             .in_type = absl::GetFlag(FLAGS_dtype),
                                             .kernel = absl::GetFlag(FLAGS_kernel)};
  // Sizes, tokens and kernels no grouped GEMM takes are usage errors too (exit 2).
  if (absl::Status st = kiln::examples::CheckGroupedGemmProblem(p); !st.ok()) return FailUsage(st);
  const std::function<const Bundle*(const std::string&)> bundle_of = BundlesOnce();
  absl::StatusOr<kiln::examples::GroupedGemmResult> r;
  if (emulate) {
    r = kiln::examples::RunGroupedGemmEmulated(bundle_of, p, 1);
  } else {
    if (absl::Status st = NeedGpu("grouped-gemm").status(); !st.ok()) return Fail(st);
    kiln::rt::GemmRunner runner(BundleDir());
    r = kiln::examples::RunGroupedGemmGpu(runner, p, absl::GetFlag(FLAGS_iters), 1);
  }
  if (!r.ok()) return Fail(r.status());
  int64_t total = 0;
  for (int64_t t : p.tokens) total += t;
  std::cout << absl::StrFormat("%-34s %-30s %10s %9s %10s %9s %9s\n", "experts x tokens, N, K",
                               "kernel", "error", "bound", "ms", "TFLOPS", "w GB/s");
  std::cout << absl::StrFormat(
      "%-34s %-30s %10.3e %9.2e %10s %9s %9s  %s\n",
      absl::StrFormat(
          "%d x %s%s, %d, %d", p.tokens.size(),
          p.tokens.size() > 1 && std::any_of(p.tokens.begin(), p.tokens.end(),
                                             [&](int64_t t) { return t != p.tokens[0]; })
              ? absl::StrCat(total, " in all")
              : absl::StrCat(p.tokens.empty() ? 0 : p.tokens[0]),
          absl::StrCat(p.layout == kiln::rt::GroupedLayout::kMasked ? " masked" : "",
                       p.in_type == "e4m3" ? " e4m3" : ""),
          p.n, p.k),
      r->kernel, r->error, r->bound, emulate ? "-" : absl::StrFormat("%.4f", r->ms),
      emulate ? "-" : absl::StrFormat("%.1f", r->tflops),
      emulate ? "-" : absl::StrFormat("%.0f", r->weights_gbps),
      r->passed ? "" : "FAILED: " + r->failure);
  return r->passed ? 0 : 1;
}

}  // namespace kiln::cli
