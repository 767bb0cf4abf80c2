#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/attention.h"
#include "kiln/runtime/driver.h"

namespace kiln::rt {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln attention: ", message));
}

}  // namespace

absl::StatusOr<AttentionPlan> PlanAttention(const AttentionSize& z, const AttentionOptions& options,
                                            const AttentionOperands& o, int compute_capability) {
  if (z.b < 1 || z.hq < 1 || z.hkv < 1 || z.s < 1 || z.skv < 1)
    return Invalid(absl::StrCat("B, Hq, Hkv, S and Skv must be at least 1 (got B=", z.b,
                                " Hq=", z.hq, " Hkv=", z.hkv, " S=", z.s, " Skv=", z.skv, ")"));
  if (z.d != 64 && z.d != 128 && z.d != 256)
    return Invalid(absl::StrCat("head dimension D = ", z.d, ": the kernels take 64, 128 or 256"));
  if (z.hq % z.hkv)
    return Invalid(absl::StrCat("Hq = ", z.hq, " is not a multiple of Hkv = ", z.hkv,
                                " (grouped-query heads)"));
  // Grid y and z are Hq and B (65535 at most); the maps' rows and heads are 32-bit.
  if (z.hq > 65535 || z.b > 65535) return Invalid(absl::StrCat("Hq and B must be at most 65535"));
  if (z.s > INT32_MAX || z.skv > INT32_MAX || z.b * z.hq > INT32_MAX ||
      z.b * z.hq * z.s > INT32_MAX)
    return Invalid("S, Skv and B * Hq * S must fit in 32 bits");
  if (options.dtype != "bf16" && options.dtype != "f16")
    return Invalid(absl::StrCat("type '", options.dtype, "': bf16 or f16"));
  const float scale =
      options.scale == 0 ? 1.0f / std::sqrt(static_cast<float>(z.d)) : options.scale;
  if (!(scale > 0) || !std::isfinite(scale))
    return Invalid(
        absl::StrCat("scale = ", options.scale, ": a finite positive number (0: 1/sqrt(D))"));
  if (!o.q || !o.k || !o.v || !o.o || !o.lse)
    return Invalid("Q, K, V, O and lse need device pointers");
  if (o.q % 16 || o.k % 16 || o.v % 16 || o.o % 16)
    return Invalid("Q, K, V and O are read and written by TMA: 16-byte aligned pointers");
  if (o.lse % 4) return Invalid("lse must be 4-byte aligned");
  if (compute_capability != 90 && compute_capability != 100)
    return Invalid(absl::StrCat(
        "the attention kernels are for sm_90a (H100, H200) and sm_100a (B200); this device is sm_",
        compute_capability));
  AttentionPlan plan;
  plan.kernel =
      absl::StrCat(compute_capability == 100 ? "attention/blackwell.d" : "attention/hopper.d", z.d,
                   options.dtype == "f16" ? ".f16" : "", options.causal ? ".causal" : "");
  // Hopper's tilings, each where it was the fastest tried (docs/perf/2026-11-24-attention.md,
  // steps 9 and 13): persistent CTAs (".persist": a CTA per SM taking query tiles from a counter)
  // at D = 128 and at D = 64 without a mask. Causal D = 64 by the key tiles a query tile sees on
  // average: under 8 (S < 2048) a CTA per tile in two consumer warpgroups, up to 40 (S <= 10240)
  // persistent, beyond that a CTA per tile in three. Without a mask at D = 128, 160-key tiles where
  // they pad Skv by less than their faster steady state gains over 128 (the speeds weighed below).
  const double mean_keys =
      AttentionFlops(z, options.causal) / (4.0 * z.b * z.hq * z.s * z.d);  // a query row sees
  if (compute_capability == 90) {
    auto padded_time = [&](int block_n, double speed) {
      return std::ceil(static_cast<double>(z.skv) / block_n) * block_n / speed;
    };
    if (z.d == 128 && !options.causal && padded_time(160, 1.02) < padded_time(128, 1.0))
      absl::StrAppend(&plan.kernel, ".bn160");
    const bool short_causal_64 = z.d == 64 && options.causal && mean_keys < 8 * 128;
    if (z.d == 128 ||
        (z.d == 64 && (!options.causal || (!short_causal_64 && mean_keys <= 40 * 128))))
      absl::StrAppend(&plan.kernel, ".persist");
    if (short_causal_64) absl::StrAppend(&plan.kernel, ".wg2");
  }
  plan.scale = scale;
  if (!options.kernel.empty()) {
    // The override must compute this problem: the planned options, plus tiling options only.
    std::vector<std::string> want = absl::StrSplit(plan.kernel, '.'),
                             got = absl::StrSplit(options.kernel, '.');
    auto tiling =
        [](const std::string& o) {  // options that change how, not what, a kernel computes
          return o == "persist" || o == "lazy" || o == "eager" ||
                 ((absl::StartsWith(o, "wg") || absl::StartsWith(o, "bn") ||
                   absl::StartsWith(o, "st")) &&
                  o.size() > 2 && std::all_of(o.begin() + 2, o.end(), ::isdigit));
        };
    bool ok = got[0] == "attention/hopper" || got[0] == "attention/blackwell";
    for (size_t i = 1; i < want.size(); ++i)  // the plan's tiling: the override's own
      ok &= tiling(want[i]) || std::find(got.begin() + 1, got.end(), want[i]) != got.end();
    for (size_t i = 1; i < got.size(); ++i)
      ok &= tiling(got[i]) || std::find(want.begin() + 1, want.end(), got[i]) != want.end();
    if (!ok)
      return Invalid(absl::StrCat(
          "kernel ", options.kernel, " does not compute this problem (it runs ", plan.kernel,
          " with tiling options wgN, bnN, stN, persist, lazy or eager at most)"));
    plan.kernel = options.kernel;
  }
  return plan;
}

absl::StatusOr<std::vector<Arg>> AttentionArgs(const Manifest& m, const AttentionSize& z,
                                               float scale, const AttentionOperands& o) {
  const std::map<std::string, int64_t> ints = {
      {"B", z.b}, {"Hq", z.hq}, {"Hkv", z.hkv}, {"S", z.s}, {"Skv", z.skv}};
  const std::map<std::string, cu::CUdeviceptr> maps = {
      {"Q", o.q}, {"K", o.k}, {"V", o.v}, {"O", o.o}};
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    using Kind = ParamSpec::Kind;
    if (p.kind == Kind::kI32 && ints.count(p.name)) {
      args.push_back(Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    } else if (p.kind == Kind::kF32 && p.name == "scale") {
      args.push_back(Arg::F32(scale));
    } else if (p.kind == Kind::kPointer && p.name == "lse") {
      args.push_back(Arg::Ptr(o.lse));
    } else if (p.kind == Kind::kTensorMap && maps.count(p.tensor_map.tensor)) {
      args.push_back(Arg::Tensor(maps.at(p.tensor_map.tensor)));
    } else if (p.kind == Kind::kWorkspace) {
      args.push_back(Arg::Workspace());  // the kernel's tile counter, kept by the launcher
    } else {
      return absl::InternalError(absl::StrCat(m.name, " (", m.source,
                                              "): the attention entry point has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return args;
}

double AttentionFlops(const AttentionSize& z, bool causal) {
  const double pairs = static_cast<double>(z.s) * z.skv;
  double kept = pairs;
  if (causal) {  // query i sees min(Skv, max(0, i + 1 + Skv - S)) keys
    kept = 0;
    for (int64_t i = 0; i < z.s; ++i)
      kept += std::min<double>(z.skv, std::max<double>(0, i + 1 + z.skv - z.s));
  }
  return 4.0 * z.b * z.hq * kept * z.d;
}

absl::Status AttentionRunner::Run(const AttentionSize& size, const AttentionOptions& options,
                                  const AttentionOperands& operands, cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  absl::StatusOr<AttentionPlan> plan =
      PlanAttention(size, options, operands, (*d)->compute_capability());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<const LoadedKernel*> kernel = kernels_.Get(plan->kernel, stream);
  if (!kernel.ok()) return kernel.status();
  absl::StatusOr<std::vector<Arg>> args =
      AttentionArgs((*kernel)->manifest(), size, plan->scale, operands);
  if (!args.ok()) return args.status();
  return (*kernel)->Launch(*std::move(args), stream);
}

}  // namespace kiln::rt
