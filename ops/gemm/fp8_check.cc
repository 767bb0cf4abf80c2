#include "ops/gemm/fp8_check.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/gemm_epilogue.h"
#include "kiln/bundle/epilogue_terms.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/harness_memory.h"
#include "ops/gemm/gemm_fp8.h"
#include "ops/gemm/quantized_inputs.h"

namespace kiln::examples {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

using RunGemmOn = std::function<absl::Status(const rt::GemmOperands&)>;

// C (raw bytes of the output type) against the references at the checked rows: NaN fails, then
// the norm-relative error against the dequantized product within the bound.
Fp8GemmResult Compare(const std::vector<uint8_t>& raw, const Fp8GemmProblem& p,
                      const std::vector<double>& ref, const std::vector<double>& exact,
                      int64_t rows, const std::function<int64_t(int64_t)>& row_of) {
  const int64_t M = p.size.m, N = p.size.n;
  const int out_bytes = p.out_type == "f32" ? 4 : 2;
  auto c_at = [&](int64_t m, int64_t n) -> double {
    const int64_t i = p.c_row_major ? m * N + n : n * M + m;
    if (out_bytes == 4) {
      float f;
      std::memcpy(&f, &raw[i * 4], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &raw[i * 2], 2);
    if (p.out_type == "f16") return static_cast<double>(std::bit_cast<_Float16>(h));
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  };
  Fp8GemmResult r;
  r.bound = (p.out_type == "bf16"  ? std::ldexp(1, -8)
             : p.out_type == "f16" ? std::ldexp(1, -11)
                                   : 0) +
            std::ldexp(1, -10);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      if (!std::isfinite(c_at(m, n))) {
        r.failure = absl::StrCat("C[", m, ", ", n, "] is ", c_at(m, n));
        r.error = NAN;
        return r;
      }
  // Per checked row, summed in row order: {err, norm, qerr, qnorm}; and the element furthest off.
  std::array<double, 4> total = {0, 0, 0, 0};
  double worst = -1;
  int64_t worst_m = 0, worst_n = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t n = 0; n < N; ++n) {
      const double c = c_at(row_of(i), n), r0 = ref[i * N + n], x = exact[i * N + n];
      total[0] += (c - r0) * (c - r0), total[1] += r0 * r0;
      total[2] += (c - x) * (c - x), total[3] += x * x;
      if (std::abs(c - r0) > worst) worst = std::abs(c - r0), worst_m = row_of(i), worst_n = n;
    }
  r.error = std::sqrt(total[0] / std::max(total[1], 1e-300));
  r.quantized_error = std::sqrt(total[2] / std::max(total[3], 1e-300));
  r.passed = r.error <= r.bound;
  if (!r.passed) r.failure = absl::StrCat("error ", r.error, " over the bound ", r.bound);
  // A few wrong elements hide in the norm of many right ones: no element may be off by more than
  // 64 bounds of the reference's root mean square (a right one is off by a few bounds at most).
  const double rms = std::sqrt(total[1] / std::max<double>(rows * N, 1));
  if (r.passed && worst > 64 * r.bound * rms) {
    r.passed = false;
    r.failure = absl::StrCat("C[", worst_m, ", ", worst_n, "] is ", c_at(worst_m, worst_n),
                             ", off by ", worst, " where the reference's elements are ", rms,
                             " in root mean square (more than 64 bounds of it)");
  }
  return r;
}

// Each of `runs` on the same inputs, C poisoned before each; the reference is computed once.
// `each_alone`: a run's error fails its result alone (a sweep's candidate), not the whole call.
absl::StatusOr<std::vector<Fp8GemmResult>> CheckEach(const HarnessMemory& mem,
                                                     const std::vector<RunGemmOn>& runs,
                                                     const Fp8GemmProblem& p, uint64_t seed,
                                                     rt::GemmOperands* kept = nullptr,
                                                     bool each_alone = false) {
  const int64_t M = p.size.m, N = p.size.n, K = p.size.k, KB = CeilDiv(K, 128);
  const bool block = p.scaling == "blockwise", row = p.scaling == "rowwise",
             mx = p.scaling == "mxfp8";
  const int64_t KG = CeilDiv(K, 32);  // mxfp8: power-of-two scales per 1 x 32 of A and of B
  // A per 1 x 128 (M-contiguous scales), B per 128 x 128 (row-major), as GemmOperands defaults.
  std::vector<double> xa = NormalValues(M * K, seed), xb = NormalValues(N * K, seed + 1);
  const bool a5 = p.a_type == "e5m2", b5 = p.b_type == "e5m2";
  Quantized a = mx      ? Quantize(std::move(xa), M, K, 1, 32, KG, 1, M * KG, a5, true)
                : block ? Quantize(std::move(xa), M, K, 1, 128, 1, M, M * KB, a5)
                : row   ? Quantize(std::move(xa), M, K, 1, K, 1, 0, M, a5)
                        : Quantize(std::move(xa), M, K, M, K, 0, 0, 1, a5);
  Quantized b = mx      ? Quantize(std::move(xb), N, K, 1, 32, KG, 1, N * KG, b5, true)
                : block ? Quantize(std::move(xb), N, K, 128, 128, KB, 1, CeilDiv(N, 128) * KB, b5)
                : row   ? Quantize(std::move(xb), N, K, 1, K, 1, 0, N, b5)
                        : Quantize(std::move(xb), N, K, N, K, 0, 0, 1, b5);
  // The scales as the kernel reads them: f32, or mxfp8's UE8M0 bytes in rows of whole words.
  auto scale_bytes = [&](const Quantized& q, int64_t rows) {
    if (mx) return Ue8m0Rows(q.scales, rows, K);
    std::vector<uint8_t> bytes(q.scales.size() * 4);
    std::memcpy(bytes.data(), q.scales.data(), bytes.size());
    return bytes;
  };
  const std::vector<uint8_t> a_scales = scale_bytes(a, M), b_scales = scale_bytes(b, N);
  const int out_bytes = p.out_type == "f32" ? 4 : 2;
  rt::GemmOperands o{.c_row_major = p.c_row_major};
  // The fused terms' inputs (C_in, bias, residual in the output type, laid out as C).
  HostEpilogue e;
  EpilogueInputs terms_in;
  if (!p.epilogue.empty()) {
    absl::StatusOr<std::string> terms = rt::CanonicalEpilogue(p.epilogue);
    if (!terms.ok()) return terms.status();
    GemmSpec spec;
    spec.out_type = p.out_type, spec.c_order = p.c_row_major ? "row" : "col",
    spec.epilogue = *terms;
    absl::StatusOr<HostEpilogue> parsed = EpilogueOf(spec);
    if (!parsed.ok()) return parsed.status();
    e = *parsed;
    terms_in = RandomEpilogueInputs(e, p.size, seed + 2);
    o.alpha = terms_in.alpha, o.beta = terms_in.beta;
  }
  auto put = [&](const void* from, size_t bytes) -> absl::StatusOr<uint64_t> {
    absl::StatusOr<uint64_t> at = mem.allocate(bytes);
    if (at.ok() && from) {
      if (absl::Status s = mem.copy_in(*at, from, bytes); !s.ok()) return s;
    }
    return at;
  };
  absl::StatusOr<uint64_t> pa = put(a.bytes.data(), a.bytes.size()),
                           pb = put(b.bytes.data(), b.bytes.size()),
                           sa = put(a_scales.data(), a_scales.size()),
                           sb = put(b_scales.data(), b_scales.size()),
                           pc = put(nullptr, M * N * out_bytes);
  for (const auto* s : {&pa, &pb, &sa, &sb, &pc})
    if (!s->ok()) return s->status();
  for (auto [data, ptr] : {std::pair{&terms_in.c_in, &o.c_in}, std::pair{&terms_in.bias, &o.bias},
                           std::pair{&terms_in.residual, &o.residual}}) {
    if (data->empty()) continue;
    absl::StatusOr<uint64_t> at = put(data->data(), data->size());
    if (!at.ok()) return at.status();
    *ptr = *at;
  }
  o.a = *pa, o.b = *pb, o.c = *pc, o.scale_a = *sa, o.scale_b = *sb;
  if (kept) *kept = o;
  // The fp64 products at the checked rows (every row up to 2^28 multiply-adds, as the emulator's
  // problems are; else 64 spread rows, a GPU problem's fp64 product on the CPU being minutes),
  // through the epilogue: of the dequantized inputs, and of the unquantized ones.
  const int64_t rows =
      static_cast<double>(M) * N * K <= double{1 << 28} ? M : std::min<int64_t>(M, 64);
  auto row_of = [&](int64_t i) { return rows == M ? i : i * (M - 1) / (rows - 1); };
  std::vector<double> ref(rows * N), exact(rows * N);
  InParallel(rows, [&](int64_t i) {
    const int64_t m = row_of(i);
    for (int64_t n = 0; n < N; ++n) {
      double r = 0, x = 0;
      for (int64_t k = 0; k < K; ++k) {
        r += a.dequantized[m * K + k] * b.dequantized[n * K + k];
        x += a.exact[m * K + k] * b.exact[n * K + k];
      }
      if (!e.Plain())  // both through the epilogue
        r = ApplyEpilogue(e, terms_in, p.size, r, m, n),
        x = ApplyEpilogue(e, terms_in, p.size, x, m, n);
      ref[i * N + n] = r, exact[i * N + n] = x;
    }
  });
  std::vector<Fp8GemmResult> results;
  std::vector<uint8_t> raw(M * N * out_bytes);
  for (const RunGemmOn& run : runs) {
    if (absl::Status s = mem.poison(*pc, M * N * out_bytes); !s.ok()) return s;
    if (absl::Status s = run(o); !s.ok()) {
      if (!each_alone) return s;
      results.push_back({.error = NAN, .failure = std::string(s.message())});
      continue;
    }
    if (absl::Status s = mem.copy_out(raw.data(), *pc, raw.size()); !s.ok()) return s;
    results.push_back(Compare(raw, p, ref, exact, rows, row_of));
  }
  return results;
}

absl::StatusOr<Fp8GemmResult> Check(const HarnessMemory& mem, const RunGemmOn& run,
                                    const Fp8GemmProblem& p, uint64_t seed,
                                    rt::GemmOperands* kept = nullptr) {
  absl::StatusOr<std::vector<Fp8GemmResult>> r = CheckEach(mem, {run}, p, seed, kept);
  if (!r.ok()) return r.status();
  return r->front();
}

rt::GemmOptions OptionsOf(const Fp8GemmProblem& p) {
  return {.in_type = p.a_type,
          .out_type = p.out_type,
          .epilogue = p.epilogue,
          .in_type_b = p.b_type == p.a_type ? "" : p.b_type,
          .scaling = p.scaling,
          .fp8_tile = p.tile,
          .fp8_split = p.split};
}

// The result's kernel and why, as the plan chose them; where the chosen (fused) variant is not
// bundled (`bundled` says) and the call still ran, the entry point ran the plain f32 product and
// gemm/epilogue_pass instead (rt::RunGemm), and the row names those.
absl::Status Described(Fp8GemmResult& r, const Fp8GemmProblem& p, int cc,
                       const std::function<bool(const std::string&)>& bundled) {
  absl::StatusOr<rt::GemmPlan> plan = PlanOf(p, cc);
  if (!plan.ok()) return plan.status();
  r.kernel = plan->choice.kernel, r.why = plan->choice.why, r.split = plan->choice.split;
  if (bundled(r.kernel)) return absl::OkStatus();
  Fp8GemmProblem plain = p;
  plain.epilogue = "", plain.out_type = "f32";
  plain.c_row_major = false;  // (the pass's scratch product is column-major, packed)
  absl::StatusOr<rt::GemmPlan> product = PlanOf(plain, cc);
  if (!product.ok() || !bundled(product->choice.kernel)) return absl::OkStatus();
  r.kernel = absl::StrCat(product->choice.kernel, "+", rt::kEpiloguePassKernel, ".", p.out_type);
  r.why = absl::StrCat(product->choice.why, "; ", plan->choice.kernel,
                       " is not bundled: the product in f32, then the epilogue as a pass");
  return absl::OkStatus();
}

// The median of `iters` single calls of `options` on `o` into `r` (where r passed).
absl::Status Timed(rt::GemmRunner& runner, const Fp8GemmProblem& p, const rt::GemmOptions& options,
                   const rt::GemmOperands& o, int iters, Fp8GemmResult& r) {
  if (iters <= 0 || !r.passed) return absl::OkStatus();
  absl::StatusOr<double> ms =
      MedianCallMs([&] { return runner.Run(p.size, options, o); }, iters, 1);
  if (!ms.ok()) return ms.status();
  r.ms = *ms;
  r.tflops = 2.0 * p.size.m * p.size.n * p.size.k / (r.ms * 1e-3) / 1e12;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<rt::GemmPlan> PlanOf(const Fp8GemmProblem& p, int compute_capability) {
  const rt::GemmOperands probe{.a = 16,
                               .b = 16,
                               .c = 16,
                               .c_row_major = p.c_row_major,
                               .c_in = 16,
                               .bias = 16,
                               .residual = 16,
                               .scale_a = 16,
                               .scale_b = 16};
  return rt::PlanGemm(p.size, OptionsOf(p), probe, compute_capability, p.tuned);
}

absl::StatusOr<Fp8GemmResult> RunFp8GemmGpu(rt::GemmRunner& runner, const Fp8GemmProblem& p,
                                            int iters, uint64_t seed) {
  std::vector<rt::DeviceBuffer> buffers;
  const rt::GemmOptions options = OptionsOf(p);
  RunGemmOn run = [&](const rt::GemmOperands& o) -> absl::Status {
    if (absl::Status s = runner.Run(p.size, options, o); !s.ok()) return s;
    return rt::Synchronize();
  };
  rt::GemmOperands o;
  absl::StatusOr<Fp8GemmResult> r = Check(GpuMemory(buffers), run, p, seed, &o);
  if (!r.ok()) return r;
  auto bundled = [&runner](const std::string& kernel) { return runner.Bundled(kernel); };
  if (absl::Status s = Described(*r, p, 90, bundled); !s.ok()) return s;
  if (absl::Status s = Timed(runner, p, options, o, iters, *r); !s.ok()) return s;
  return r;
}

absl::StatusOr<std::vector<Fp8GemmResult>> SweepFp8GemmGpu(rt::GemmRunner& runner,
                                                           const Fp8GemmProblem& p, int iters,
                                                           uint64_t seed) {
  // The tiles see the plan's problem (C^T's for a row-major C).
  absl::StatusOr<rt::GemmPlan> plan = PlanOf(p, 90);
  if (!plan.ok()) return plan.status();
  std::vector<Fp8GemmProblem> each;
  std::vector<RunGemmOn> runs;
  for (const rt::GemmChoice& c : rt::Fp8TileCandidates(plan->size, p.scaling)) {
    Fp8GemmProblem& q = each.emplace_back(p);
    q.tile = c.kernel, q.split = c.split;
    runs.push_back([&runner, options = OptionsOf(q), size = q.size](const rt::GemmOperands& o) {
      if (absl::Status s = runner.Run(size, options, o); !s.ok()) return s;
      return rt::Synchronize();
    });
  }
  std::vector<rt::DeviceBuffer> buffers;
  rt::GemmOperands o;
  absl::StatusOr<std::vector<Fp8GemmResult>> results =
      CheckEach(GpuMemory(buffers), runs, p, seed, &o, /*each_alone=*/true);
  if (!results.ok()) return results;
  for (size_t i = 0; i < each.size(); ++i) {
    Fp8GemmResult& r = (*results)[i];
    if (absl::Status s = Described(r, each[i], 90,
                                   [&runner](const std::string& k) { return runner.Bundled(k); });
        !s.ok())
      return s;
    if (absl::Status s = Timed(runner, p, OptionsOf(each[i]), o, iters, r); !s.ok()) return s;
  }
  return results;
}

absl::StatusOr<Fp8GemmResult> RunFp8GemmEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of, const Fp8GemmProblem& p,
    uint64_t seed) {
  const double m = p.size.m, n = p.size.n, k = p.size.k;
  if (absl::Status fits = emu::CheckProblemSize(
          "kiln gemm --emulate", {{"A (M x K)", m * k}, {"B (K x N)", k * n}, {"C (M x N)", m * n}},
          m * n * k);
      !fits.ok())
    return fits;
  emu::Device d;
  rt::EmulatedOpDevice device = HarnessDevice(d, bundle_of, seed);
  RunGemmOn run = [&](const rt::GemmOperands& o) {
    return rt::RunGemm(p.size, OptionsOf(p), o, p.compute_capability, device);
  };
  absl::StatusOr<Fp8GemmResult> r = Check(EmulatorMemory(d), run, p, seed);
  if (r.ok()) {
    auto bundled = [&](const std::string& kernel) { return bundle_of(kernel) != nullptr; };
    if (absl::Status s = Described(*r, p, p.compute_capability, bundled); !s.ok()) return s;
  }
  return r;
}

}  // namespace kiln::examples
