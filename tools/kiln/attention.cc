// `kiln attention`: FlashAttention forward through the attention entry point, against fp64.
#include <cfloat>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {
namespace {

// The command's errors name it ("kiln attention: ..."), the runner's and the checks' alike.
int FailAttention(const absl::Status& s) { return Fail(s, "kiln attention"); }

int Report(const absl::StatusOr<kiln::examples::AttentionResult>& r, const std::string& shape) {
  if (!r.ok()) return FailAttention(r.status());
  std::cout << absl::StrFormat(
      "%s %s: %d rows against fp64, error %.3e, lse off by %.1e past f32 rounding: %s", r->kernel,
      shape, r->rows_checked, r->rel_error, r->lse_error, r->passed ? "ok" : "FAIL: " + r->failure);
  if (r->ms > 0) std::cout << absl::StrFormat("; %.4f ms, %.1f TFLOPS", r->ms, r->tflops);
  std::cout << std::endl;
  return r->passed ? 0 : 1;
}

// --varlen's lengths.
absl::StatusOr<std::vector<int64_t>> VarlenLengths() {
  std::vector<int64_t> lengths;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_varlen), ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "kiln attention --varlen: '", part, "' is not a length (0 or more, comma-separated)"));
    lengths.push_back(n);
  }
  return lengths;
}

// --varlen: packed sequences of the listed lengths, --h/--hkv heads of --d.
int VarlenAttention(const kiln::rt::AttentionSize& z, const kiln::rt::AttentionOptions& options) {
  absl::StatusOr<std::vector<int64_t>> parsed = VarlenLengths();
  if (!parsed.ok()) return FailAttention(parsed.status());
  const std::vector<int64_t>& lengths = *parsed;
  absl::StatusOr<kiln::rt::AttentionSize> planned = kiln::examples::VarlenSize(z, lengths);
  if (!planned.ok()) return FailAttention(planned.status());
  absl::StatusOr<kiln::rt::AttentionPlan> plan =
      kiln::rt::PlanAttention(*planned, options, {16, 16, 16, 16, 16, 0, 0, 16}, 90);
  if (!plan.ok()) return FailAttention(plan.status());
  const std::string shape =
      absl::StrCat("varlen ", absl::GetFlag(FLAGS_varlen), " ",
                   kiln::examples::AttentionShapeName(*planned, options.causal));
  if (absl::GetFlag(FLAGS_emulate)) {
    absl::StatusOr<Bundle> b = GetBundle(plan->kernel);
    if (!b.ok()) return FailAttention(b.status());
    return Report(kiln::examples::RunVarlenAttentionEmulated(*b, z, lengths, options, 1), shape);
  }
  if (absl::Status st = NeedGpu("attention").status(); !st.ok()) return FailAttention(st);
  kiln::rt::AttentionRunner runner(BundleDir());
  return Report(
      kiln::examples::RunVarlenAttentionGpu(runner, z, lengths, options, absl::GetFlag(FLAGS_iters),
                                            1, absl::GetFlag(FLAGS_repeats)),
      shape);
}

// --backward: dQ, dK and dV of one problem (with --varlen, of packed sequences), checked against
// fp64 (and run again for the same bytes), timed alone on the GPU.
int BackwardAttention(kiln::rt::AttentionSize z, const kiln::rt::AttentionOptions& options) {
  if (!options.kernel.empty())  // (one answer for a forward's name and a backward kernel's)
    return FailAttention(absl::InvalidArgumentError(
        "kiln attention --backward takes no --kernel: the plan picks the backward's kernels "
        "(--deterministic or --dq_atomics choose how dQ is summed)"));
  std::vector<int64_t> lengths;
  if (!absl::GetFlag(FLAGS_varlen).empty()) {
    absl::StatusOr<std::vector<int64_t>> parsed = VarlenLengths();
    if (!parsed.ok()) return FailAttention(parsed.status());
    lengths = *parsed;
    absl::StatusOr<kiln::rt::AttentionSize> planned = kiln::examples::VarlenSize(z, lengths);
    if (!planned.ok()) return FailAttention(planned.status());
    z = *planned;
  }
  kiln::rt::AttentionGradOperands fake = {16, 16, 16, 16, 16, 16, 16, 16, 16};
  fake.cu_seqlens = z.varlen ? 16 : 0;
  const bool sm100 = absl::GetFlag(FLAGS_sm100);
  if (sm100 && !absl::GetFlag(FLAGS_emulate))
    return FailAttention(absl::InvalidArgumentError(
        "kiln attention --sm100 runs on the emulator (--emulate): no sm_100 GPU here"));
  if (absl::StatusOr<kiln::rt::AttentionBackwardPlan> plan =
          kiln::rt::PlanAttentionBackward(z, options, fake, sm100 ? 100 : 90);
      !plan.ok())
    return FailAttention(plan.status());
  absl::StatusOr<kiln::examples::AttentionGradResult> r;
  if (absl::GetFlag(FLAGS_emulate)) {
    const std::function<const Bundle*(const std::string&)> bundle_of = BundlesOnce();
    r = kiln::examples::RunAttentionBackwardEmulated(bundle_of, z, options, 1, lengths,
                                                     sm100 ? 100 : 90);
  } else {
    if (absl::Status st = NeedGpu("attention").status(); !st.ok()) return FailAttention(st);
    kiln::rt::AttentionRunner runner(BundleDir());
    r = kiln::examples::RunAttentionBackwardGpu(runner, z, options, absl::GetFlag(FLAGS_iters), 1,
                                                /*repeat_runs=*/9, absl::GetFlag(FLAGS_repeats),
                                                lengths);
  }
  if (!r.ok()) return FailAttention(r.status());
  std::cout << absl::StrFormat(
      "%s %s backward: %d heads against fp64, errors dQ %.3e dK %.3e dV %.3e, %d more runs the "
      "same bytes%s: %s",
      r->kernels,
      absl::StrCat(lengths.empty() ? "" : "varlen " + absl::GetFlag(FLAGS_varlen) + " ",
                   kiln::examples::AttentionShapeName(z, options.causal)),
      r->heads_checked, r->dq_error, r->dk_error, r->dv_error, r->runs_identical,
      r->dq_by_atomics ? " (dK and dV; dQ by atomics)" : "",
      r->passed ? "ok" : "FAIL: " + r->failure);
  if (r->ms > 0) std::cout << absl::StrFormat("; %.4f ms, %.1f TFLOPS", r->ms, r->tflops);
  std::cout << std::endl;
  return r->passed ? 0 : 1;
}

}  // namespace

// kiln attention: one problem through the attention entry point, checked against an fp64 host
// reference and timed on the GPU, or (--emulate) checked on the emulator.
// Flags that name two problems at once, or values no problem has: refused before anything runs,
// rather than one of them silently dropped.
absl::Status CheckFlagCombinations() {
  const bool backward = absl::GetFlag(FLAGS_backward),
             varlen = !absl::GetFlag(FLAGS_varlen).empty();
  const int64_t page = absl::GetFlag(FLAGS_paged), decode = absl::GetFlag(FLAGS_decode);
  auto invalid = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("kiln attention: ", why));
  };
  // (0 is what a flag left out reads as: given, it is a value no problem has.)
  if (FlagGiven("hkv") && absl::GetFlag(FLAGS_hkv) < 1)
    return invalid("--hkv must be at least 1 (left out: --h's value)");
  if (FlagGiven("skv") && absl::GetFlag(FLAGS_skv) < 1)
    return invalid("--skv must be at least 1 (left out: --s's value)");
  // (Named here, as given: a paged problem's Skv is rounded up to whole pages before the plan's
  // checks.)
  for (const auto& [flag, value] : {std::pair{"b", absl::GetFlag(FLAGS_b)},
                                    {"h", absl::GetFlag(FLAGS_h)},
                                    {"s", absl::GetFlag(FLAGS_s)}})
    if (value < 1)
      return invalid(absl::StrCat("--", flag, " must be at least 1 (got ", value, ")"));
  if (!varlen && FlagGiven("varlen"))
    return invalid("--varlen is empty: give the sequences' lengths, e.g. --varlen 7,100,33");
  if (page < 0 || (page == 0 && FlagGiven("paged")))
    return invalid(
        absl::StrCat("--paged ", page, ": a page size (a power of two from 16 to 4096)"));
  if (decode < 0 || (decode == 0 && FlagGiven("decode")))
    return invalid(absl::StrCat("--decode ", decode,
                                ": query rows a sequence, 1 or more (the query rows of a KV head, "
                                "Hq / Hkv of them each, at most 64)"));
  if (absl::GetFlag(FLAGS_repeats) < 1)
    return invalid(absl::StrCat("--repeats ", absl::GetFlag(FLAGS_repeats),
                                ": launches a timed block, at least 1"));
  if (varlen && (FlagGiven("b") || FlagGiven("s") || FlagGiven("skv")))
    return invalid("--varlen's lengths are the batch's sequences: no --b, --s or --skv");
  if (varlen && (page || decode))
    return invalid("--varlen runs packed sequences of prefill: no --paged or --decode");
  if (backward && (page || decode))
    return invalid("--backward runs dense or packed (--varlen) tensors: no --paged or --decode");
  if (decode && absl::GetFlag(FLAGS_bshd))
    return invalid("--decode runs the [B, H, S, D] layout: no --bshd");
  if ((absl::GetFlag(FLAGS_dq_atomics) || absl::GetFlag(FLAGS_deterministic)) && !backward)
    return invalid("--dq_atomics and --deterministic pick the backward's dQ form: with --backward");
  return absl::OkStatus();
}

int Attention() {
  if (absl::Status flags = CheckFlagCombinations(); !flags.ok()) return FailAttention(flags);
  kiln::rt::AttentionSize z;
  z.b = absl::GetFlag(FLAGS_b), z.hq = absl::GetFlag(FLAGS_h), z.s = absl::GetFlag(FLAGS_s),
  z.d = absl::GetFlag(FLAGS_d);
  if (absl::GetFlag(FLAGS_emulate)) {  // the emulator's defaults: seconds, not hours
    if (!FlagGiven("h")) z.hq = 2;
    if (!FlagGiven("s")) z.s = 200;
  }
  z.hkv = absl::GetFlag(FLAGS_hkv) ? absl::GetFlag(FLAGS_hkv) : z.hq;
  const int64_t decode = absl::GetFlag(FLAGS_decode);
  z.skv = absl::GetFlag(FLAGS_skv) ? absl::GetFlag(FLAGS_skv) : z.s;
  if (decode > 0 && FlagGiven("s") && FlagGiven("skv"))
    return FailAttention(absl::InvalidArgumentError(
        absl::StrCat("--decode ", decode, " takes ", decode,
                     " query rows in place of --s: give the keys by --skv (or by --s), not both")));
  if (decode > 0) z.s = decode;  // (over --skv keys, --s's by default)
  z.rows = absl::GetFlag(FLAGS_bshd);
  kiln::rt::AttentionOptions options;
  options.dtype = absl::GetFlag(FLAGS_dtype);
  options.causal = absl::GetFlag(FLAGS_causal);
  const double scale = absl::GetFlag(FLAGS_scale);  // (a double past f32's range: no cast)
  options.scale = std::fabs(scale) <= FLT_MAX ? static_cast<float>(scale) : INFINITY;
  if (scale != 0 && !(options.scale > 0 && std::isfinite(options.scale)))
    return FailAttention(absl::InvalidArgumentError(absl::StrCat(
        "--scale ", absl::GetFlag(FLAGS_scale),
        ": the kernels take it as f32, where it must be positive and finite (0: 1/sqrt(d))")));
  options.kernel = absl::GetFlag(FLAGS_kernel);
  options.dq_atomics = absl::GetFlag(FLAGS_dq_atomics);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  if (absl::GetFlag(FLAGS_sm100) && !absl::GetFlag(FLAGS_backward))
    return FailAttention(absl::InvalidArgumentError(
        "kiln attention --sm100 emulates the backward's sm_100a kernels: with --backward "
        "--emulate"));
  if (absl::GetFlag(FLAGS_backward)) return BackwardAttention(z, options);
  if (!absl::GetFlag(FLAGS_varlen).empty()) return VarlenAttention(z, options);
  // The problem's own errors first, on any machine (the pointers here only pass the checks).
  const int64_t page = absl::GetFlag(FLAGS_paged);
  absl::StatusOr<kiln::rt::AttentionPlan> plan = kiln::rt::PlanAttention(
      kiln::examples::PagedSize(z, page), options, {16, 16, 16, 16, 16, 16, 16}, 90);
  if (!plan.ok()) return FailAttention(plan.status());
  if (decode && !options.kernel.empty() && !absl::StrContains(plan->kernel, ".split"))
    return FailAttention(absl::InvalidArgumentError(
        absl::StrCat("kiln attention --decode: --kernel ", options.kernel,
                     " is not a decode kernel (attention/hopper.*.split or "
                     "attention/blackwell.*.split)")));
  if (decode && !absl::StrContains(plan->kernel, ".split"))
    return FailAttention(absl::InvalidArgumentError(absl::StrCat(
        "kiln attention --decode: this problem runs ", plan->kernel, ", not a decode kernel: ",
        z.hq / z.hkv * z.s > 64
            ? absl::StrCat("the query rows of a KV head (Hq / Hkv * S = ", z.hq / z.hkv * z.s,
                           ") must fit 64")
            : "under a causal mask a decode kernel takes one query row (--decode 1)",
        "; leave out --decode to run what the entry point plans (kiln.decode_attention does)")));
  const std::string shape = kiln::examples::AttentionShapeName(z, options.causal);
  absl::StatusOr<kiln::examples::AttentionResult> r;
  if (absl::GetFlag(FLAGS_emulate)) {
    absl::StatusOr<Bundle> b = GetBundle(plan->kernel);
    if (!b.ok()) return FailAttention(b.status());
    std::optional<Bundle> combine;  // a split plan's merge of the parts
    if (plan->splits > 1) {
      absl::StatusOr<Bundle> c = GetBundle(plan->combine);
      if (!c.ok()) return FailAttention(c.status());
      combine = *std::move(c);
    }
    std::optional<Bundle> copy_pages;  // a plan's copy of a paged cache into dense K and V
    if (!plan->copy_pages.empty()) {
      absl::StatusOr<Bundle> g = GetBundle(plan->copy_pages);
      if (!g.ok()) return FailAttention(g.status());
      copy_pages = *std::move(g);
    }
    r = kiln::examples::RunAttentionEmulated(*b, z, options, 1, combine ? &*combine : nullptr, page,
                                             copy_pages ? &*copy_pages : nullptr);
  } else {
    if (absl::Status st = NeedGpu("attention").status(); !st.ok()) return FailAttention(st);
    kiln::rt::AttentionRunner runner(BundleDir());
    r = kiln::examples::RunAttentionGpu(runner, z, options, absl::GetFlag(FLAGS_iters), 1, page,
                                        absl::GetFlag(FLAGS_repeats));
  }
  return Report(r, shape);
}

}  // namespace kiln::cli
