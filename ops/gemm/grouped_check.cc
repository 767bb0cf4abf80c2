#include "ops/gemm/grouped_check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/driver.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/harness_memory.h"
#include "ops/gemm/quantized_inputs.h"

namespace kiln::examples {
namespace {

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

// The problem's layout, the entry point's size and its kernel (LayoutOf's checks, then the
// plan's).
absl::StatusOr<std::string> PlanOf(const GroupedGemmProblem& p, Layout* layout,
                                   rt::GroupedGemmSize* size) {
  if (p.tokens.empty())
    return absl::InvalidArgumentError("kiln grouped-gemm: no groups (--tokens)");
  absl::StatusOr<Layout> laid = LayoutOf(p);
  if (!laid.ok()) return laid.status();
  *layout = *std::move(laid);
  *size = {.rows = layout->rows, .n = p.n, .k = p.k, .groups = static_cast<int>(p.tokens.size())};
  return rt::ChooseGroupedKernel(*size,
                                 {.layout = p.layout, .in_type = p.in_type, .kernel = p.kernel});
}

using RunOn = std::function<absl::Status(const rt::GroupedGemmSize&, const rt::GroupedGemmOptions&,
                                         const rt::GroupedGemmOperands&)>;

absl::StatusOr<GroupedGemmResult> Check(const HarnessMemory& mem, const RunOn& run,
                                        const GroupedGemmProblem& p, uint64_t seed,
                                        rt::GroupedGemmOperands* kept = nullptr,
                                        rt::GroupedGemmSize* kept_size = nullptr) {
  // The entry point's checks first: the inputs below assume sizes it takes.
  Layout layout;
  rt::GroupedGemmSize size;
  absl::StatusOr<std::string> kernel = PlanOf(p, &layout, &size);
  if (!kernel.ok()) return kernel.status();
  const int64_t E = p.tokens.size(), R = layout.rows, N = p.n, K = p.k;
  const bool masked = p.layout == rt::GroupedLayout::kMasked;
  const rt::GroupedGemmOptions options{
      .layout = p.layout, .in_type = p.in_type, .kernel = p.kernel};
  // The inputs' bytes and the values the reference multiplies: bf16, or e4m3 with x's scales per
  // 1 x 128 (M-contiguous) and w's per 128 x 128 of each expert (row-major), as the operands take.
  const bool fp8 = p.in_type == "e4m3";
  const int64_t KB = (K + 127) / 128;
  std::vector<double> xv = NormalValues(R * K, seed),
                      wv = NormalValues(E * N * K, seed + 1, 1 / std::sqrt(static_cast<double>(K)));
  std::vector<uint8_t> x_bytes, w_bytes;
  std::vector<float> x_scales, w_scales;
  auto as_bf16 = [](std::vector<double>& v, std::vector<uint8_t>& bytes) {
    bytes.resize(v.size() * 2);
    InParallel(static_cast<int64_t>(v.size() + 4095) / 4096, [&](int64_t c) {
      for (size_t i = c * 4096; i < std::min(v.size(), (c + 1) * size_t{4096}); ++i) {
        const uint16_t h = Bf16Of(v[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
        v[i] = Bf16Value(h);
      }
    });
  };
  if (fp8) {
    Quantized qx = Quantize(std::move(xv), R, K, 1, 128, 1, R, R * KB);
    Quantized qw = Quantize(std::move(wv), E * N, K, 128, 128, KB, 1, E * N / 128 * KB);
    xv = std::move(qx.dequantized), wv = std::move(qw.dequantized);
    x_bytes = std::move(qx.bytes), w_bytes = std::move(qw.bytes);
    x_scales = std::move(qx.scales), w_scales = std::move(qw.scales);
  } else {
    as_bf16(xv, x_bytes), as_bf16(wv, w_bytes);
  }
  std::vector<int32_t> sizes;
  for (int64_t e = 0; e < E; ++e)
    sizes.push_back(static_cast<int32_t>(masked ? p.tokens[e] : layout.begin[e] + p.tokens[e]));
  auto put = [&](const void* from, size_t bytes) -> absl::StatusOr<uint64_t> {
    absl::StatusOr<uint64_t> at = mem.allocate(std::max<size_t>(bytes, 16));
    if (at.ok() && from && bytes) {
      if (absl::Status s = mem.copy_in(*at, from, bytes); !s.ok()) return s;
    }
    return at;
  };
  absl::StatusOr<uint64_t> px = put(x_bytes.data(), x_bytes.size()),
                           pw = put(w_bytes.data(), w_bytes.size()),
                           ps = put(sizes.data(), sizes.size() * 4), po = put(nullptr, R * N * 2),
                           psx = put(x_scales.data(), x_scales.size() * 4),
                           psw = put(w_scales.data(), w_scales.size() * 4);
  for (const auto* s : {&px, &pw, &ps, &po, &psx, &psw})
    if (!s->ok()) return s->status();
  if (absl::Status s = mem.poison(*po, std::max<int64_t>(R * N * 2, 16)); !s.ok()) return s;
  rt::GroupedGemmOperands o{.x = *px, .w = *pw, .out = *po, .sizes = *ps};
  if (fp8) o.scale_x = *psx, o.scale_w = *psw;
  GroupedGemmResult r;
  r.kernel = *kernel;
  if (absl::Status s = run(size, options, o); !s.ok()) return s;
  std::vector<uint16_t> out(R * N);
  if (absl::Status s = mem.copy_out(out.data(), *po, out.size() * 2); !s.ok()) return s;
  // bf16's rounding of out; e4m3: also the tensor core's sums of 128 products, which keep fewer
  // bits than f32 until their promotion (as ops/gemm/fp8_check.h).
  r.bound = std::ldexp(1, -8) + (fp8 ? std::ldexp(1, -10) : 0);
  // Which group owns each row (-1: none).
  std::vector<int64_t> owner(R, -1);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t t = 0; t < p.tokens[e]; ++t) owner[layout.begin[e] + t] = e;
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
      const int64_t row = layout.begin[e] + (picks == T ? i : i * (T - 1) / (picks - 1));
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0;
        for (int64_t kk = 0; kk < K; ++kk) ref += xv[row * K + kk] * wv[(e * N + n) * K + kk];
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

absl::Status CheckGroupedGemmProblem(const GroupedGemmProblem& p) {
  Layout layout;
  rt::GroupedGemmSize size;
  return PlanOf(p, &layout, &size).status();
}

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
  const rt::GroupedGemmOptions options{
      .layout = p.layout, .in_type = p.in_type, .kernel = p.kernel};
  absl::StatusOr<double> ms =
      MedianCallMs([&] { return runner.RunGrouped(size, options, o); }, iters, 1);
  if (!ms.ok()) return ms.status();
  r->ms = *ms;
  const int64_t tokens = std::accumulate(p.tokens.begin(), p.tokens.end(), int64_t{0});
  r->tflops = 2.0 * tokens * p.n * p.k / (r->ms * 1e-3) / 1e12;
  // The weights the kernel reads: those of the groups that hold tokens.
  const int64_t experts =
      std::count_if(p.tokens.begin(), p.tokens.end(), [](int64_t t) { return t > 0; });
  r->weights_gbps = (p.in_type == "e4m3" ? 1.0 : 2.0) * experts * p.n * p.k / (r->ms * 1e-3) / 1e9;
  return r;
}

absl::StatusOr<GroupedGemmResult> RunGroupedGemmEmulated(
    const std::function<const rt::Bundle*(const std::string&)>& bundle_of,
    const GroupedGemmProblem& p, uint64_t seed) {
  double tokens = 0;
  for (int64_t t : p.tokens) tokens += std::max<int64_t>(t, p.capacity);
  const double n = p.n, k = p.k, groups = static_cast<double>(p.tokens.size());
  if (absl::Status fits = emu::CheckProblemSize(
          "kiln grouped-gemm --emulate",
          {{"x (tokens x K)", std::max(tokens, 1.0) * k}, {"w (groups x N x K)", groups * n * k}},
          tokens * n * k);
      !fits.ok())
    return fits;
  emu::Device d;
  rt::EmulatedOpDevice device = HarnessDevice(d, bundle_of, seed);
  RunOn run = [&](const rt::GroupedGemmSize& s, const rt::GroupedGemmOptions& options,
                  const rt::GroupedGemmOperands& o) {
    return rt::RunGroupedGemm(s, options, o, 90, device);
  };
  return Check(EmulatorMemory(d), run, p, seed);
}

}  // namespace kiln::examples
