#include "kiln/ops/attention_backward.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "call_key.h"
#include "kiln/bundle/manifest.h"
#include "kiln/runtime/driver.h"

namespace kiln::rt {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln attention backward: ", message));
}

// The rows of a backward kernel's CTA tile, from its "attention_backward" attribute: block_m (a
// query tile: hopper_dq, blackwell_dq), else block_n (a key tile); 64 where it names neither.
int64_t TileRows(const Manifest& m) {
  const std::string* text = m.Attribute("attention_backward");
  if (!text) return 64;
  for (const char* key : {"block_m=", "block_n="})
    if (size_t at = text->find(key); at != std::string::npos)
      return std::max<int64_t>(1, std::atoll(text->c_str() + at + std::string(key).size()));
  return 64;
}

// Every parameter of the three kernels, by name.
absl::StatusOr<std::vector<Arg>> BackwardArgs(const Manifest& m, const AttentionSize& z,
                                              const AttentionBackwardPlan& plan,
                                              const AttentionGradOperands& o, uint64_t lse2,
                                              uint64_t delta, uint64_t dq_acc) {
  // varlen: the kernel's tiles over all sequences number at most T / rows + B.
  const int64_t rows = TileRows(m);
  const std::map<std::string, int64_t> ints = {{"B", z.b},
                                               {"Hq", z.hq},
                                               {"Hkv", z.hkv},
                                               {"S", z.s},
                                               {"Skv", z.skv},
                                               {"Sp", plan.padded_rows},
                                               {"D", z.d},
                                               {"T", z.total},
                                               {"tiles", (z.total + rows - 1) / rows + z.b},
                                               {"zero_dq", plan.dq_add ? 1 : 0}};
  const std::map<std::string, cu::CUdeviceptr> tensors = {{"Q", o.q},
                                                          {"K", o.k},
                                                          {"V", o.v},
                                                          {"O", o.o},
                                                          {"dO", o.d_o},
                                                          {"lse", o.lse},
                                                          {"dQ", o.dq},
                                                          {"dK", o.dk},
                                                          {"dV", o.dv},
                                                          {"lse2", lse2},
                                                          {"delta", delta},
                                                          {"dQacc", dq_acc},
                                                          {"cu_seqlens", o.cu_seqlens}};
  const int64_t row_heads = (z.varlen ? 1 : z.b) * z.hq;  // the workspace's heads
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    using Kind = ParamSpec::Kind;
    if (p.kind == Kind::kI32 && ints.count(p.name)) {
      args.push_back(Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    } else if (p.kind == Kind::kI64 && p.name == "units") {  // bwd_prep: 8 elements a thread
      args.push_back(Arg::I64(row_heads * plan.padded_rows * z.d / 8));
    } else if (p.kind == Kind::kI64 && p.name == "out_units") {  // bwd_dq_convert
      args.push_back(Arg::I64(z.b * z.hq * z.s * z.d / 8));
    } else if (p.kind == Kind::kF32 && p.name == "scale") {
      args.push_back(Arg::F32(plan.scale));
    } else if (p.kind == Kind::kPointer && tensors.count(p.name)) {
      args.push_back(Arg::Ptr(tensors.at(p.name)));
    } else if (p.kind == Kind::kTensorMap && tensors.count(p.tensor_map.tensor)) {
      args.push_back(Arg::Tensor(tensors.at(p.tensor_map.tensor)));
    } else {
      return absl::InternalError(absl::StrCat(m.name, " (", m.source,
                                              "): the attention backward has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return args;
}

}  // namespace

absl::StatusOr<AttentionBackwardPlan> PlanAttentionBackward(const AttentionSize& z,
                                                            const AttentionOptions& options,
                                                            const AttentionGradOperands& o,
                                                            int compute_capability) {
  if (z.lens || z.page || z.rows)  // (before the forward's checks, which would ask for them)
    return Invalid(
        "dense [B, H, S, D] tensors or packed sequences (varlen) only: no per-sequence lengths "
        "(lens), paged cache (page; --paged) or [B, S, H, D] layout (rows; --bshd)");
  // The forward's checks of the sizes, heads, type, scale and its tensors' pointers.
  absl::StatusOr<AttentionPlan> forward = PlanAttention(
      z, options,
      {.q = o.q, .k = o.k, .v = o.v, .o = o.o, .lse = o.lse, .cu_seqlens = o.cu_seqlens},
      compute_capability);
  if (!forward.ok()) return forward.status();
  const bool blackwell = compute_capability == 100;
  if (compute_capability != 90 && !blackwell)
    return Invalid(
        absl::StrCat("the backward kernels are for sm_90a (H100, H200) and sm_100a "
                     "(B200); this device is sm_",
                     compute_capability));
  if (blackwell && (z.d == 256 || z.varlen || options.dq_atomics))
    return Invalid(
        "on sm_100a the backward takes D = 64 or 128, dense tensors, dQ from its own kernel (no "
        "D = 256, varlen or dq_atomics)");
  if (z.d != 64 && z.d != 128 && z.d != 256)
    return Invalid(absl::StrCat("head dimension D = ", z.d, ": the backward takes 64, 128 or 256"));
  if (options.dq_atomics && options.deterministic)
    return Invalid(
        "dq_atomics adds dQ by atomics, whose last bits vary run to run, and deterministic asks "
        "for the same bytes run to run: give one");
  if (options.dq_atomics && z.d == 256)
    return Invalid("dQ by atomics (dq_atomics) takes D = 64 or 128; D = 256 runs deterministic");
  if (options.dq_atomics && z.varlen)
    return Invalid(
        "dQ by atomics (dq_atomics) takes dense tensors; packed sequences (varlen) run "
        "deterministic");
  if (!options.kernel.empty()) return Invalid("no kernel override: the plan picks the kernels");
  if (!o.d_o || !o.dq || !o.dk || !o.dv) return Invalid("dO, dQ, dK and dV need device pointers");
  if (o.d_o % 16 || o.dq % 16 || o.dk % 16 || o.dv % 16)
    return Invalid("dO, dQ, dK and dV are read and written by TMA: 16-byte aligned pointers");
  AttentionBackwardPlan plan;
  const std::string variant =
      absl::StrCat(".d", z.d, options.dtype == "f16" ? ".f16" : "", options.causal ? ".causal" : "",
                   z.varlen ? ".varlen" : "");
  plan.prep = absl::StrCat("attention/bwd_prep", options.dtype == "f16" ? ".f16" : "",
                           z.varlen ? ".varlen" : "", blackwell ? ".sm100a" : "");
  // dQ by atomics where they run, unless the same bytes run to run are asked for: since the
  // consumers' warpgroup index became warp-uniform they are the faster form
  // (docs/perf/2026-12-01-backward-dq-by-atomics-by-default.md).
  const bool atomics_run = !blackwell && (z.d == 64 || z.d == 128) && !z.varlen;
  plan.dq_add = options.dq_atomics || (atomics_run && !options.deterministic);
  const std::string family = blackwell ? "attention/blackwell_" : "attention/hopper_";
  plan.dkdv = family + "dkdv" + variant + (plan.dq_add ? ".dqadd" : "");
  plan.dq = plan.dq_add
                ? absl::StrCat("attention/bwd_dq_convert", options.dtype == "f16" ? ".f16" : "")
                : family + "dq" + variant;
  plan.scale = forward->scale;
  plan.padded_rows = z.varlen ? (z.total + 64) / 64 * 64 : (z.s + 63) / 64 * 64;
  return plan;
}

absl::Status RunAttentionBackward(const AttentionSize& size, const AttentionOptions& options,
                                  const AttentionGradOperands& operands, int compute_capability,
                                  OpDevice& device) {
  absl::StatusOr<AttentionBackwardPlan> plan =
      PlanAttentionBackward(size, options, operands, compute_capability);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<uint64_t> workspace = device.Scratch(2, plan->WorkspaceBytes(size));
  if (!workspace.ok()) return workspace.status();
  const int64_t rows = (size.varlen ? 1 : size.b) * size.hq * plan->padded_rows;
  const uint64_t lse2 = *workspace, delta = lse2 + rows * 4;
  const uint64_t dq_acc = plan->dq_add ? delta + rows * 4 : 0;
  for (const std::string& kernel : {plan->prep, plan->dkdv, plan->dq}) {
    absl::StatusOr<const Manifest*> manifest = device.ManifestOf(kernel);
    if (!manifest.ok()) return manifest.status();
    absl::StatusOr<std::vector<Arg>> args =
        BackwardArgs(**manifest, size, *plan, operands, lse2, delta, dq_acc);
    if (!args.ok()) return args.status();
    if (absl::Status st = device.Launch(kernel, *std::move(args)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

double AttentionBackwardFlops(const AttentionSize& size, bool causal) {
  return 2.5 * AttentionFlops(size, causal);
}

absl::Status AttentionRunner::Backward(const AttentionSize& size, const AttentionOptions& options,
                                       const AttentionGradOperands& operands, cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  GpuOpDevice device(kernels_, stream, [&](int which, size_t bytes) {
    return scratch_.Get(stream, which, bytes, "kiln attention backward: the row workspace");
  });
  const int cc = (*d)->compute_capability();
  return device.RunRemembered(
      memo_, AttentionCallKey('b', size, options, operands, cc, (*d)->context(), stream),
      [&] { return RunAttentionBackward(size, options, operands, cc, device); });
}

}  // namespace kiln::rt
