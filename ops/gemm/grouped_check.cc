#include "ops/gemm/grouped_check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/driver.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/harness_memory.h"

namespace kiln::examples {
namespace {

uint16_t Bf16Of(double x) {  // round to nearest even (the inputs are finite)
  const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(x));
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
double Bf16Value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// body(i) for i in [0, count), spread over the host's threads (the large problems' inputs and
// reference take seconds on one).
void InParallel(int64_t count, const std::function<void(int64_t)>& body) {
  const int64_t threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(count, 1));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < count; i += threads) body(i);
    });
  for (std::thread& th : pool) th.join();
}

// Random normal bf16 values times `scale`, in chunks of their own seeds (the same values whatever
// the threads).
void FillNormal(std::vector<uint16_t>& v, uint64_t seed, double scale) {
  constexpr int64_t kChunk = 1 << 20;
  InParallel((static_cast<int64_t>(v.size()) + kChunk - 1) / kChunk, [&](int64_t c) {
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + c);
    std::normal_distribution<double> normal;
    const int64_t end = std::min<int64_t>(v.size(), (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) v[i] = Bf16Of(normal(rng) * scale);
  });
}

// Each group's first row, and the rows x and out hold.
struct Layout {
  std::vector<int64_t> begin;
  int64_t rows = 0;
};
absl::StatusOr<Layout> LayoutOf(const GroupedGemmProblem& p) {
  Layout l;
  const bool masked = p.layout == rt::GroupedLayout::kMasked;
  const int64_t capacity =
      p.capacity ? p.capacity
                 : std::max<int64_t>(1, *std::max_element(p.tokens.begin(), p.tokens.end()));
  for (int64_t t : p.tokens) {
    if (t < 0 || (masked && t > capacity))
      return absl::InvalidArgumentError(
          absl::StrCat("kiln grouped-gemm: a group's tokens must be 0 to ",
                       masked ? absl::StrCat("the capacity ", capacity) : "any", ", not ", t));
    l.begin.push_back(l.rows);
    l.rows += masked ? capacity : t;
  }
  if (!masked) l.rows += p.spare_rows;
  return l;
}

using RunOn = std::function<absl::Status(const rt::GroupedGemmSize&, const rt::GroupedGemmOptions&,
                                         const rt::GroupedGemmOperands&)>;

absl::StatusOr<GroupedGemmResult> Check(const HarnessMemory& mem, const RunOn& run,
                                        const GroupedGemmProblem& p, uint64_t seed,
                                        rt::GroupedGemmOperands* kept = nullptr,
                                        rt::GroupedGemmSize* kept_size = nullptr) {
  if (p.tokens.empty())
    return absl::InvalidArgumentError("kiln grouped-gemm: no groups (--tokens)");
  absl::StatusOr<Layout> layout = LayoutOf(p);
  if (!layout.ok()) return layout.status();
  const int64_t E = p.tokens.size(), R = layout->rows, N = p.n, K = p.k;
  const bool masked = p.layout == rt::GroupedLayout::kMasked;
  std::vector<uint16_t> x(R * K), w(E * N * K);
  FillNormal(x, seed, 1);
  FillNormal(w, seed + 1, 1 / std::sqrt(static_cast<double>(K)));
  std::vector<int32_t> sizes;
  for (int64_t e = 0; e < E; ++e)
    sizes.push_back(static_cast<int32_t>(masked ? p.tokens[e] : layout->begin[e] + p.tokens[e]));
  auto put = [&](const void* from, size_t bytes) -> absl::StatusOr<uint64_t> {
    absl::StatusOr<uint64_t> at = mem.allocate(std::max<size_t>(bytes, 16));
    if (at.ok() && from && bytes) {
      if (absl::Status s = mem.copy_in(*at, from, bytes); !s.ok()) return s;
    }
    return at;
  };
  absl::StatusOr<uint64_t> px = put(x.data(), x.size() * 2), pw = put(w.data(), w.size() * 2),
                           ps = put(sizes.data(), sizes.size() * 4), po = put(nullptr, R * N * 2);
  for (const auto* s : {&px, &pw, &ps, &po})
    if (!s->ok()) return s->status();
  if (absl::Status s = mem.poison(*po, std::max<int64_t>(R * N * 2, 16)); !s.ok()) return s;
  const rt::GroupedGemmSize size{.rows = R, .n = N, .k = K, .groups = static_cast<int>(E)};
  const rt::GroupedGemmOptions options{.layout = p.layout, .kernel = p.kernel};
  const rt::GroupedGemmOperands o{.x = *px, .w = *pw, .out = *po, .sizes = *ps};
  GroupedGemmResult r;
  absl::StatusOr<std::string> kernel = rt::ChooseGroupedKernel(size, options);
  if (!kernel.ok()) return kernel.status();
  r.kernel = *kernel;
  if (absl::Status s = run(size, options, o); !s.ok()) return s;
  std::vector<uint16_t> out(R * N);
  if (absl::Status s = mem.copy_out(out.data(), *po, out.size() * 2); !s.ok()) return s;
  r.bound = std::ldexp(1, -8);
  // Which group owns each row (-1: none).
  std::vector<int64_t> owner(R, -1);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t t = 0; t < p.tokens[e]; ++t) owner[layout->begin[e] + t] = e;
  for (int64_t row = 0; row < R; ++row)
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t h = out[row * N + n];
      const bool poisoned = h == 0xffff;
      if (owner[row] < 0 && !poisoned) {
        r.failure = absl::StrCat("out[", row, ", ", n, "], in no group, was written");
        r.error = NAN;
        return r;
      }
      if (owner[row] >= 0 && !std::isfinite(Bf16Value(h))) {
        r.failure =
            absl::StrCat("out[", row, ", ", n, "] (group ", owner[row], ") is ", Bf16Value(h));
        r.error = NAN;
        return r;
      }
    }
  // Every row where the problem is small; else each group's first, last and a few between.
  const bool every = R * N * K <= (int64_t{1} << 28);
  std::vector<double> err(E), norm(E);  // per group, summed in group order
  InParallel(E, [&](int64_t e) {
    const int64_t T = p.tokens[e], picks = every ? T : std::min<int64_t>(T, 4);
    for (int64_t i = 0; i < picks; ++i) {
      const int64_t row = layout->begin[e] + (picks == T ? i : i * (T - 1) / (picks - 1));
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0;
        for (int64_t kk = 0; kk < K; ++kk)
          ref += Bf16Value(x[row * K + kk]) * Bf16Value(w[(e * N + n) * K + kk]);
        const double c = Bf16Value(out[row * N + n]);
        err[e] += (c - ref) * (c - ref), norm[e] += ref * ref;
      }
    }
  });
  r.error = std::sqrt(std::accumulate(err.begin(), err.end(), 0.0) /
                      std::max(std::accumulate(norm.begin(), norm.end(), 0.0), 1e-300));
  r.passed = r.error <= r.bound;
  if (!r.passed) r.failure = absl::StrCat("error ", r.error, " over the bound ", r.bound);
  if (kept) *kept = o, *kept_size = size;
  return r;
}

}  // namespace

absl::StatusOr<GroupedGemmResult> RunGroupedGemmGpu(rt::GemmRunner& runner,
                                                    const GroupedGemmProblem& p, int iters,
                                                    uint64_t seed) {
  std::vector<rt::DeviceBuffer> buffers;
  RunOn run = [&](const rt::GroupedGemmSize& s, const rt::GroupedGemmOptions& options,
                  const rt::GroupedGemmOperands& o) -> absl::Status {
    if (absl::Status st = runner.RunGrouped(s, options, o); !st.ok()) return st;
    return rt::Synchronize();
  };
  rt::GroupedGemmOperands o;
  rt::GroupedGemmSize size;
  absl::StatusOr<GroupedGemmResult> r = Check(GpuMemory(buffers), run, p, seed, &o, &size);
  if (!r.ok() || iters <= 0 || !r->passed) return r;
  const rt::GroupedGemmOptions options{.layout = p.layout, .kernel = p.kernel};
  absl::StatusOr<double> ms =
      MedianCallMs([&] { return runner.RunGrouped(size, options, o); }, iters, 1);
  if (!ms.ok()) return ms.status();
  r->ms = *ms;
  const int64_t tokens = std::accumulate(p.tokens.begin(), p.tokens.end(), int64_t{0});
  r->tflops = 2.0 * tokens * p.n * p.k / (r->ms * 1e-3) / 1e12;
  r->weights_gbps = 2.0 * p.tokens.size() * p.n * p.k / (r->ms * 1e-3) / 1e9;
  return r;
}

absl::StatusOr<GroupedGemmResult> RunGroupedGemmEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of,
    const GroupedGemmProblem& p, uint64_t seed) {
  emu::Device d;
  EmulatedOpDevice device(d, bundle_of, seed);
  RunOn run = [&](const rt::GroupedGemmSize& s, const rt::GroupedGemmOptions& options,
                  const rt::GroupedGemmOperands& o) {
    return rt::RunGroupedGemm(s, options, o, 90, device);
  };
  return Check(EmulatorMemory(d), run, p, seed);
}

}  // namespace kiln::examples
