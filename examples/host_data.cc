#include "examples/host_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

namespace kiln::examples {

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  if (std::isnan(f)) return 0x7e00;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal half: multiples of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t mant = u & 0x7fffff, exp = ((u >> 23) & 0xff) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carries into the exponent correctly
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  uint32_t u =
      exp == 31 ? sign | 0x7f800000 | (mant << 13) : sign | ((exp - 15 + 127) << 23) | (mant << 13);
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint16_t> RandomNormal16(size_t n, uint64_t seed, bool half, double scale) {
  std::vector<uint16_t> out(n);
  // A fixed number of chunks, each with its own stream, so that a seed gives the same data on
  // every machine (the GPU's outputs are compared with the emulator's on another); threads
  // take chunks in turn.
  constexpr unsigned kChunks = 32;
  const unsigned threads = std::max(1u, std::min(kChunks, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const size_t chunk = (n + kChunks - 1) / kChunks;
  auto fill = [&](unsigned t) {
    // splitmix64 per chunk, Box-Muller pairs.
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + t * 0xBF58476D1CE4E5B9ull + 1;
    auto next = [&] {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    const size_t end = std::min(n, (t + 1) * chunk);
    for (size_t i = t * chunk; i < end; i += 2) {
      const double u1 = ((next() >> 11) + 1) * 0x1.0p-53, u2 = (next() >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      const float z[2] = {static_cast<float>(scale * r * std::cos(2 * M_PI * u2)),
                          static_cast<float>(scale * r * std::sin(2 * M_PI * u2))};
      for (size_t j = 0; j < 2 && i + j < end; ++j)
        out[i + j] = half ? FloatToHalf(z[j]) : FloatToBf16(z[j]);
    }
  };
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (unsigned t = w; t < kChunks; t += threads) fill(t);
    });
  for (auto& th : pool) th.join();
  return out;
}

double WrongElementLimit(double tolerance, double ref2, int64_t count) {
  return 10 * tolerance * std::sqrt(ref2 / static_cast<double>(std::max<int64_t>(count, 1)));
}

bool IsWrongElement(double got, double want, double limit) {
  return std::isnan(got) || !(std::abs(got - want) <= limit);
}

}  // namespace kiln::examples
