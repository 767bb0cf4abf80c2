#include "ops/gemm/quantized_inputs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <thread>

namespace kiln::examples {

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

std::vector<double> NormalValues(int64_t count, uint64_t seed, double scale) {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<double> v(count);
  InParallel((count + kChunk - 1) / kChunk, [&](int64_t c) {
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + c);
    std::normal_distribution<double> normal;
    for (int64_t i = c * kChunk; i < std::min(count, (c + 1) * kChunk); ++i)
      v[i] = normal(rng) * scale;
  });
  return v;
}

uint16_t Bf16Of(double x) {
  const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(x));
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
double Bf16Value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

double E4m3Value(int code) {
  const int e = code >> 3, m = code & 7;
  return std::ldexp(e ? 8 + m : m, (e ? e : 1) - 10);
}

double E5m2Value(int code) {
  const int e = code >> 2, m = code & 3;
  return std::ldexp(e ? 4 + m : m, (e ? e : 1) - 17);
}

namespace {

// The nearest code of x among the finite codes 0..top of `value` (increasing), ties to even,
// saturating at value(top).
uint8_t NearestCode(double x, double (*value)(int), int top) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::min(std::fabs(x), value(top));
  int lo = 0, hi = top;  // the largest code <= a, by bisection over the increasing values
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (value(mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  int code = lo;
  if (lo < top) {
    const double below = a - value(lo), above = value(lo + 1) - a;
    if (above < below || (above == below && (lo & 1))) code = lo + 1;
  }
  return sign | static_cast<uint8_t>(code);
}

}  // namespace

uint8_t E4m3Of(double x) { return NearestCode(x, E4m3Value, 0x7e); }
uint8_t E5m2Of(double x) { return NearestCode(x, E5m2Value, 0x7b); }

Quantized Quantize(std::vector<double> exact, int64_t rows, int64_t K, int64_t group_rows,
                   int64_t group_k, int64_t row_stride, int64_t k_stride, int64_t scale_count,
                   bool e5m2, bool power_of_two) {
  const double largest = e5m2 ? 57344 : 448;
  uint8_t (*code_of)(double) = e5m2 ? E5m2Of : E4m3Of;
  double (*value_of)(int) = e5m2 ? E5m2Value : E4m3Value;
  Quantized q;
  q.exact = std::move(exact);
  q.scales.assign(scale_count, 0.f);
  auto at = [&](int64_t r, int64_t k) {
    return (r / group_rows) * row_stride + (k / group_k) * k_stride;
  };
  // A block of group_rows rows owns its scales: blocks in parallel.
  const int64_t blocks = group_rows > 0 ? (rows + group_rows - 1) / group_rows : 0;
  auto each_row = [&](const std::function<void(int64_t)>& body) {
    InParallel(blocks, [&](int64_t b) {
      for (int64_t r = b * group_rows; r < std::min(rows, (b + 1) * group_rows); ++r) body(r);
    });
  };
  each_row([&](int64_t r) {
    for (int64_t k = 0; k < K; ++k)
      q.scales[at(r, k)] =
          std::max(q.scales[at(r, k)], static_cast<float>(std::fabs(q.exact[r * K + k])));
  });
  for (float& s : q.scales) {
    s = s > 0 ? static_cast<float>(s / largest) : 1.f;
    if (power_of_two) s = std::exp2f(std::ceil(std::log2f(s)));
  }
  q.bytes.resize(rows * K), q.dequantized.resize(rows * K);
  each_row([&](int64_t r) {
    for (int64_t k = 0; k < K; ++k) {
      const double s = q.scales[at(r, k)];
      const uint8_t b = code_of(q.exact[r * K + k] / s);
      q.bytes[r * K + k] = b;
      q.dequantized[r * K + k] = (b & 0x80 ? -1 : 1) * value_of(b & 0x7f) * s;
    }
  });
  return q;
}

std::vector<uint8_t> Ue8m0Rows(const std::vector<float>& scales, int64_t rows, int64_t K) {
  const int64_t groups = (K + 31) / 32, width = 4 * ((K + 127) / 128);
  std::vector<uint8_t> bytes(rows * width, 127);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < groups; ++j)
      bytes[r * width + j] = static_cast<uint8_t>(std::ilogb(scales[r * groups + j]) + 127);
  return bytes;
}

}  // namespace kiln::examples
