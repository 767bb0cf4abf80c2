#include "ops/attention/attention_grad_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/host_data.h"
#include "kiln/emulator.h"
#include "kiln/runtime/driver.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/harness_memory.h"

namespace kiln::examples {
namespace {

// What a run needs of its device (the GPU or the emulator): its memory and the entry points' calls.
struct GradDevice : HarnessMemory {
  std::function<absl::Status(const rt::AttentionOperands&)> forward;
  std::function<absl::Status(const rt::AttentionGradOperands&)> backward;
};

// The gradients' norm-relative tolerances: P and dS are rounded to the input type before their
// GEMMs (bf16 keeps 8 bits, f16 11), and so is each gradient.
double Tolerance(bool half) { return half ? 2e-3 : 1e-2; }

// The inputs decoded, each head's rows of D, and the O the backward was given (the forward's).
struct Decoded {
  std::vector<double> q, k, v, d_o, o;
};

// Where row i of head h of sequence b starts, in elements: [B, H, S, D], or packed sequences
// [T, H, D] from the cumulative offsets `cu` (varlen).
struct Layout {
  rt::AttentionSize z;
  std::vector<int64_t> cu;  // varlen: B + 1 offsets; dense: empty
  int64_t S(int64_t b) const { return cu.empty() ? z.s : cu[b + 1] - cu[b]; }
  int64_t Skv(int64_t b) const { return cu.empty() ? z.skv : cu[b + 1] - cu[b]; }
  int64_t Q(int64_t b, int64_t h, int64_t i) const {
    return (cu.empty() ? (b * z.hq + h) * z.s + i : (cu[b] + i) * z.hq + h) * z.d;
  }
  int64_t Kv(int64_t b, int64_t g, int64_t j) const {
    return (cu.empty() ? (b * z.hkv + g) * z.skv + j : (cu[b] + j) * z.hkv + g) * z.d;
  }
};

// The fp64 gradients of one KV head's group: dQ of its query heads' rows ([G, S, D]), dK and dV
// of its keys ([Skv, D]); and its O ([G, S, D]), to check the forward's. dq_terms and dk_terms:
// the same sums over the terms' magnitudes (|dS_ij| as |P_ij| (|dP_ij| + |delta_i|)), the scale
// of what cancels in them (Sums::Error).
struct GroupGrads {
  std::vector<double> dq, dk, dv, o, dq_terms, dk_terms;
};

template <typename Fn>
void Parallel(int64_t n, const Fn& fn) {
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < std::min(workers, n); ++w)
    threads.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += workers) fn(i);
    });
  for (std::thread& t : threads) t.join();
}

double Dot(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

GroupGrads ReferenceGroup(const Layout& at, bool causal, double scale, const Decoded& in, int64_t b,
                          int64_t g) {
  const rt::AttentionSize& z = at.z;
  const int64_t G = z.hq / z.hkv, D = z.d, S = at.S(b), Skv = at.Skv(b);
  auto q_row = [&](int64_t r, int64_t i) { return &in.q[at.Q(b, g * G + r, i)]; };
  auto do_row = [&](int64_t r, int64_t i) { return &in.d_o[at.Q(b, g * G + r, i)]; };
  auto k_row = [&](int64_t j) { return &in.k[at.Kv(b, g, j)]; };
  auto v_row = [&](int64_t j) { return &in.v[at.Kv(b, g, j)]; };
  auto given_o = [&](int64_t r, int64_t i) { return &in.o[at.Q(b, g * G + r, i)]; };
  auto keys = [&](int64_t i) {
    return causal ? std::clamp<int64_t>(i + 1 + Skv - S, 0, Skv) : Skv;
  };
  GroupGrads out;
  out.dq.assign(G * S * D, 0), out.dk.assign(Skv * D, 0), out.dv.assign(Skv * D, 0);
  out.o.assign(G * S * D, 0);
  out.dq_terms.assign(G * S * D, 0), out.dk_terms.assign(Skv * D, 0);
  std::vector<double> lse(G * S, 0), delta(G * S, 0);
  // Per query row: its scores, lse, O, delta = dO . O, and dQ = scale * sum_j dS_ij K_j. delta
  // takes the O the backward was given, as the backward's definition does: where the gradients
  // cancel to nothing (one key: dS = P (dO . V - dO . O) = 0 in exact arithmetic), the given O's
  // rounding is what remains, in the kernels and here alike.
  Parallel(G * S, [&](int64_t row) {
    const int64_t r = row / S, i = row % S, n = keys(i);
    if (!n) return;
    std::vector<double> p(n);
    double* o = &out.o[row * D];
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j)
      max = std::max(max, p[j] = scale * Dot(q_row(r, i), k_row(j), D));
    for (int64_t j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - max);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c) o[c] += p[j] / sum * v_row(j)[c];
    lse[row] = max + std::log(sum);
    delta[row] = Dot(do_row(r, i), given_o(r, i), D);
    double *dq = &out.dq[row * D], *terms = &out.dq_terms[row * D];
    for (int64_t j = 0; j < n; ++j) {
      const double dp = Dot(do_row(r, i), v_row(j), D), ds = p[j] / sum * (dp - delta[row]);
      const double magnitude = p[j] / sum * (std::abs(dp) + std::abs(delta[row]));
      for (int64_t c = 0; c < D; ++c) {
        dq[c] += scale * ds * k_row(j)[c];
        terms[c] += scale * magnitude * std::abs(k_row(j)[c]);
      }
    }
  });
  // Per key: dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij Q_i over the rows that see it.
  Parallel(Skv, [&](int64_t j) {
    double *dk = &out.dk[j * D], *dv = &out.dv[j * D], *terms = &out.dk_terms[j * D];
    for (int64_t row = 0; row < G * S; ++row) {
      const int64_t r = row / S, i = row % S;
      if (j >= keys(i)) continue;
      const double p = std::exp(scale * Dot(q_row(r, i), k_row(j), D) - lse[row]);
      const double dp = Dot(do_row(r, i), v_row(j), D), ds = p * (dp - delta[row]);
      const double magnitude = p * (std::abs(dp) + std::abs(delta[row]));
      for (int64_t c = 0; c < D; ++c) {
        dv[c] += p * do_row(r, i)[c];
        dk[c] += scale * ds * q_row(r, i)[c];
        terms[c] += scale * magnitude * std::abs(q_row(r, i)[c]);
      }
    }
  });
  return out;
}

// Norm-relative error, the reference's norm floored at 2^-12 of its terms' (where given): where
// the terms of a gradient cancel to nothing (one key: dS = 0), its norm measures only rounding,
// while of sums over many keys (terms of mixed signs) the floor lies far below the norm.
struct Sums {
  double diff2 = 0, ref2 = 0, terms2 = 0;
  int64_t bad = 0;
  void Add(const uint16_t* got, const double* want, int64_t n, bool half,
           const double* terms = nullptr) {
    for (int64_t x = 0; x < n; ++x) {
      const double g = half ? HalfToFloat(got[x]) : Bf16ToFloat(got[x]);
      if (!std::isfinite(g)) ++bad;
      diff2 += (g - want[x]) * (g - want[x]);
      ref2 += want[x] * want[x];
      if (terms) terms2 += terms[x] * terms[x];
    }
  }
  double Error() const {
    return bad ? NAN : std::sqrt(diff2 / std::max({ref2, terms2 * 0x1p-24, 1e-30}));
  }
};

struct Grads {
  std::vector<uint16_t> dq, dk, dv;
  bool operator==(const Grads& o) const = default;
};

// The groups to check: all of them where the reference is cheap, else the first and the last
// (packed sequences: each sequence's first and last KV head's).
std::vector<std::pair<int64_t, int64_t>> GroupsToCheck(const rt::AttentionSize& z) {
  std::vector<std::pair<int64_t, int64_t>> groups;
  if (static_cast<double>(z.b) * z.hq * z.s * z.skv * z.d <= 4e8) {
    for (int64_t b = 0; b < z.b; ++b)
      for (int64_t g = 0; g < z.hkv; ++g) groups.push_back({b, g});
  } else if (z.varlen) {
    for (int64_t b = 0; b < z.b; ++b)
      for (int64_t g : {int64_t{0}, z.hkv - 1})
        if (g == 0 || z.hkv > 1) groups.push_back({b, g});
  } else {
    groups.push_back({0, 0});
    if (z.b * z.hkv > 1) groups.push_back({z.b - 1, z.hkv - 1});
  }
  return groups;
}

void Check(const Layout& at, bool causal, double scale, bool half, const Decoded& in,
           const std::vector<uint16_t>& o, const Grads& got, AttentionGradResult& r) {
  Sums dq, dk, dv, fo;
  const rt::AttentionSize& z = at.z;
  const int64_t G = z.hq / z.hkv, D = z.d;
  for (auto [b, g] : GroupsToCheck(z)) {
    const GroupGrads want = ReferenceGroup(at, causal, scale, in, b, g);
    const int64_t S = at.S(b), Skv = at.Skv(b);
    // The group's rows of a tensor, in the reference's order ([G, S, D] or [Skv, D]).
    auto rows = [&](const std::vector<uint16_t>& x, bool query_side) {
      std::vector<uint16_t> out;
      for (int64_t r = 0; r < (query_side ? G : 1); ++r)
        for (int64_t i = 0; i < (query_side ? S : Skv); ++i) {
          const int64_t from = query_side ? at.Q(b, g * G + r, i) : at.Kv(b, g, i);
          out.insert(out.end(), x.begin() + from, x.begin() + from + D);
        }
      return out;
    };
    dq.Add(rows(got.dq, true).data(), want.dq.data(), G * S * D, half, want.dq_terms.data());
    dk.Add(rows(got.dk, false).data(), want.dk.data(), Skv * D, half, want.dk_terms.data());
    dv.Add(rows(got.dv, false).data(), want.dv.data(), Skv * D, half);
    fo.Add(rows(o, true).data(), want.o.data(), G * S * D, half);
    r.heads_checked += G;
  }
  r.dq_error = dq.Error(), r.dk_error = dk.Error(), r.dv_error = dv.Error();
  r.o_error = fo.Error();
  NanCount unwritten;
  for (const std::vector<uint16_t>* x : {&got.dq, &got.dk, &got.dv})
    for (uint16_t e : *x) unwritten.Add16(e, half);
  const double tolerance = Tolerance(half);
  if (unwritten)
    r.failure = unwritten.Describe("dQ, dK and dV");
  else if (dq.bad + dk.bad + dv.bad)
    r.failure = absl::StrCat(dq.bad + dk.bad + dv.bad, " NaN or Inf values in the checked heads");
  else if (!(r.dq_error <= tolerance && r.dk_error <= tolerance && r.dv_error <= tolerance))
    r.failure = absl::StrFormat("errors dQ %.3e, dK %.3e, dV %.3e: over the tolerance %.0e",
                                r.dq_error, r.dk_error, r.dv_error, tolerance);
  else if (!(r.o_error <= ForwardTolerance(half)))
    r.failure = absl::StrFormat(
        "the forward's O (the backward's input) off by %.3e (tolerance "
        "%.0e, the forward harness's)",
        r.o_error, ForwardTolerance(half));
  r.passed = r.failure.empty();
}

// Inputs in, the forward, the backward with its outputs poisoned, checked; then `repeat_runs`
// more backward passes compared bit for bit with the first. `ops` keeps the operands for timing.
absl::StatusOr<AttentionGradResult> RunGrad(GradDevice& dev, const Layout& layout,
                                            const rt::AttentionOptions& options, uint64_t seed,
                                            int repeat_runs, rt::AttentionGradOperands& ops,
                                            int compute_capability = 90) {
  const rt::AttentionSize& z = layout.z;
  const bool half = options.dtype == "f16";
  rt::AttentionGradOperands fake = {16, 16, 16, 16, 16, 16, 16, 16, 16};
  fake.cu_seqlens = z.varlen ? 16 : 0;
  absl::StatusOr<rt::AttentionBackwardPlan> plan =
      rt::PlanAttentionBackward(z, options, fake, compute_capability);
  if (!plan.ok()) return plan.status();
  AttentionGradResult r;
  r.kernels = absl::StrCat(plan->prep, " + ", plan->dkdv, " + ", plan->dq);
  r.size = z, r.causal = options.causal, r.dq_by_atomics = plan->dq_add;
  // Rows a head: varlen's tensors hold `total` rows of all heads.
  const int64_t q_rows = z.varlen ? z.total : z.b * z.s, kv_rows = z.varlen ? z.total : z.b * z.skv;
  const int64_t q_elems = q_rows * z.hq * z.d, kv_elems = kv_rows * z.hkv * z.d;
  const std::vector<uint16_t> q = RandomNormal16(q_elems, seed, half),
                              k = RandomNormal16(kv_elems, seed + 1, half),
                              v = RandomNormal16(kv_elems, seed + 2, half),
                              d_o = RandomNormal16(q_elems, seed + 3, half);
  std::vector<uint64_t> at;
  for (int64_t bytes : {q_elems * 2, kv_elems * 2, kv_elems * 2, q_elems * 2, q_rows * z.hq * 4,
                        q_elems * 2, q_elems * 2, kv_elems * 2, kv_elems * 2,
                        std::max<int64_t>(4, static_cast<int64_t>(layout.cu.size()) * 4)}) {
    absl::StatusOr<uint64_t> a = dev.allocate(bytes);
    if (!a.ok()) return a.status();
    at.push_back(*a);
  }
  for (auto [i, host] : {std::pair{0, &q}, std::pair{1, &k}, std::pair{2, &v}, std::pair{5, &d_o}})
    if (absl::Status st = dev.copy_in(at[i], host->data(), host->size() * 2); !st.ok()) return st;
  const std::vector<int32_t> cu(layout.cu.begin(), layout.cu.end());
  if (!cu.empty())
    if (absl::Status st = dev.copy_in(at[9], cu.data(), cu.size() * 4); !st.ok()) return st;
  ops = {at[0], at[1], at[2], at[3], at[4], at[5], at[6], at[7], at[8]};
  ops.cu_seqlens = z.varlen ? at[9] : 0;
  if (absl::Status st = dev.forward({.q = ops.q,
                                     .k = ops.k,
                                     .v = ops.v,
                                     .o = ops.o,
                                     .lse = ops.lse,
                                     .cu_seqlens = ops.cu_seqlens});
      !st.ok())
    return st;
  std::vector<uint16_t> o(q_elems);
  if (absl::Status st = dev.copy_out(o.data(), ops.o, q_elems * 2); !st.ok()) return st;
  auto run = [&](Grads& out) -> absl::Status {
    for (auto [ptr, elems] :
         {std::pair{ops.dq, q_elems}, std::pair{ops.dk, kv_elems}, std::pair{ops.dv, kv_elems}})
      if (absl::Status st = dev.poison(ptr, elems * 2); !st.ok()) return st;
    if (absl::Status st = dev.backward(ops); !st.ok()) return st;
    out.dq.resize(q_elems), out.dk.resize(kv_elems), out.dv.resize(kv_elems);
    for (auto [ptr, host] :
         {std::pair{ops.dq, &out.dq}, std::pair{ops.dk, &out.dk}, std::pair{ops.dv, &out.dv}})
      if (absl::Status st = dev.copy_out(host->data(), ptr, host->size() * 2); !st.ok()) return st;
    return absl::OkStatus();
  };
  Grads first;
  if (absl::Status st = run(first); !st.ok()) return st;
  Decoded in;
  auto decode = [&](const std::vector<uint16_t>& x, std::vector<double>& out) {
    out.resize(x.size());
    for (size_t e = 0; e < x.size(); ++e) out[e] = half ? HalfToFloat(x[e]) : Bf16ToFloat(x[e]);
  };
  decode(q, in.q), decode(k, in.k), decode(v, in.v), decode(d_o, in.d_o), decode(o, in.o);
  Check(layout, options.causal, plan->scale, half, in, o, first, r);
  for (int n = 0; n < repeat_runs && r.passed; ++n) {
    Grads again;
    if (absl::Status st = run(again); !st.ok()) return st;
    // (dQ added by atomics: its last bits may differ; dK and dV never)
    if (plan->dq_add) again.dq = first.dq;
    if (!(again == first)) {
      r.passed = false;
      r.failure = absl::StrCat("run ", n + 2, " gave other bytes than the first");
    } else {
      ++r.runs_identical;
    }
  }
  return r;
}

// The layout of `size`, or of packed sequences of `lengths` (size as VarlenSize gives it).
absl::StatusOr<Layout> LayoutOf(const rt::AttentionSize& size,
                                const std::vector<int64_t>& lengths) {
  Layout at{size, {}};
  if (size.varlen != !lengths.empty() ||
      (!lengths.empty() && static_cast<int64_t>(lengths.size()) != size.b))
    return absl::InvalidArgumentError(
        "the attention backward harness: packed sequences take their B lengths, and only they");
  if (lengths.empty()) return at;
  at.cu.push_back(0);
  for (int64_t n : lengths) at.cu.push_back(at.cu.back() + n);
  return at;
}

}  // namespace

absl::StatusOr<AttentionGradResult> RunAttentionBackwardGpu(
    rt::AttentionRunner& runner, const rt::AttentionSize& size, const rt::AttentionOptions& options,
    int iters, uint64_t seed, int repeat_runs, int repeats, const std::vector<int64_t>& lengths) {
  absl::StatusOr<Layout> layout = LayoutOf(size, lengths);
  if (!layout.ok()) return layout.status();
  std::vector<rt::DeviceBuffer> buffers;
  GradDevice dev{GpuMemory(buffers),
                 [&](const rt::AttentionOperands& ops) { return runner.Run(size, options, ops); },
                 [&](const rt::AttentionGradOperands& ops) -> absl::Status {
                   if (absl::Status st = runner.Backward(size, options, ops); !st.ok()) return st;
                   return rt::Synchronize();
                 }};
  rt::AttentionGradOperands ops;
  absl::StatusOr<AttentionGradResult> r = RunGrad(dev, *layout, options, seed, repeat_runs, ops);
  if (!r.ok() || iters <= 0 || !r->passed) return r;
  absl::StatusOr<double> ms =
      MedianCallMs([&] { return runner.Backward(size, options, ops); }, iters, repeats);
  if (!ms.ok()) return ms.status();
  r->ms = *ms;
  double flops = rt::AttentionBackwardFlops(size, options.causal);
  if (size.varlen) {  // the sequences' own pairs
    flops = 0;
    for (int64_t n : lengths)
      flops += rt::AttentionBackwardFlops(
          {.b = 1, .hq = size.hq, .hkv = size.hkv, .s = n, .skv = n, .d = size.d}, options.causal);
  }
  r->tflops = flops / (r->ms * 1e-3) / 1e12;
  return r;
}

absl::StatusOr<AttentionGradResult> RunAttentionBackwardEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of,
    const rt::AttentionSize& size, const rt::AttentionOptions& options, uint64_t seed,
    const std::vector<int64_t>& lengths, int compute_capability) {
  absl::StatusOr<Layout> layout = LayoutOf(size, lengths);
  if (!layout.ok()) return layout.status();
  if (absl::Status fits = EmulatorTakes(size, lengths, 7); !fits.ok()) return fits;
  emu::Device d;
  rt::EmulatedOpDevice device = HarnessDevice(d, bundle_of, seed);
  GradDevice dev{EmulatorMemory(d),
                 [&](const rt::AttentionOperands& ops) {
                   return rt::RunAttention(size, options, ops, compute_capability, device);
                 },
                 [&](const rt::AttentionGradOperands& ops) {
                   return rt::RunAttentionBackward(size, options, ops, compute_capability, device);
                 }};
  rt::AttentionGradOperands ops;
  return RunGrad(dev, *layout, options, seed, /*repeat_runs=*/1, ops, compute_capability);
}

}  // namespace kiln::examples
