#include "examples/probe_check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/host_data.h"
#include "examples/probes/probes.h"
#include "kiln/emulator.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"

namespace kiln::examples {
namespace {

// Where a probe runs: device memory and one launch, on a GPU or in the emulator.
class Target {
 public:
  virtual ~Target() = default;
  virtual absl::StatusOr<uint64_t> Upload(const void* data, size_t bytes) = 0;
  virtual absl::StatusOr<uint64_t> Filled(size_t bytes, uint8_t byte) = 0;
  virtual absl::Status Download(void* dst, uint64_t src, size_t bytes) = 0;
  virtual absl::Status Launch(const std::vector<rt::Arg>& args) = 0;

  template <typename T>
  absl::StatusOr<uint64_t> Upload(const std::vector<T>& v) {
    return Upload(v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> Download(uint64_t src, size_t count) {
    std::vector<T> v(count);
    if (absl::Status s = Download(v.data(), src, count * sizeof(T)); !s.ok()) return s;
    return v;
  }
};

class GpuTarget : public Target {
 public:
  explicit GpuTarget(rt::LoadedKernel kernel) : kernel_(std::move(kernel)) {}
  absl::StatusOr<uint64_t> Upload(const void* data, size_t bytes) override {
    absl::StatusOr<uint64_t> p = Filled(bytes, 0);
    if (!p.ok()) return p;
    if (absl::Status s = buffers_.back().CopyFromHost(data, bytes); !s.ok()) return s;
    return p;
  }
  absl::StatusOr<uint64_t> Filled(size_t bytes, uint8_t byte) override {
    absl::StatusOr<rt::DeviceBuffer> b = rt::DeviceBuffer::Allocate(bytes);
    if (!b.ok()) return b.status();
    if (absl::Status s = b->Fill(byte); !s.ok()) return s;
    buffers_.push_back(*std::move(b));
    return buffers_.back().ptr();
  }
  absl::Status Download(void* dst, uint64_t src, size_t bytes) override {
    for (const rt::DeviceBuffer& b : buffers_)
      if (b.ptr() == src) return b.CopyToHost(dst, bytes);
    return absl::InternalError("probe: download from a buffer it did not allocate");
  }
  absl::Status Launch(const std::vector<rt::Arg>& args) override {
    if (absl::Status s = kernel_.Launch(args); !s.ok()) return s;
    return rt::Synchronize();
  }

 private:
  rt::LoadedKernel kernel_;
  std::vector<rt::DeviceBuffer> buffers_;
};

class EmulatorTarget : public Target {
 public:
  EmulatorTarget(const rt::Bundle& bundle, uint64_t seed) : bundle_(bundle), seed_(seed) {}
  absl::StatusOr<uint64_t> Upload(const void* data, size_t bytes) override {
    absl::StatusOr<uint64_t> p = device_.Allocate(bytes);
    if (!p.ok()) return p;
    if (absl::Status s = device_.CopyIn(*p, data, bytes); !s.ok()) return s;
    return p;
  }
  absl::StatusOr<uint64_t> Filled(size_t bytes, uint8_t byte) override {
    absl::StatusOr<uint64_t> p = device_.Allocate(bytes);
    if (!p.ok()) return p;
    if (absl::Status s = device_.Fill(*p, byte, bytes); !s.ok()) return s;
    return p;
  }
  absl::Status Download(void* dst, uint64_t src, size_t bytes) override {
    return device_.CopyOut(dst, src, bytes);
  }
  absl::Status Launch(const std::vector<rt::Arg>& args) override {
    absl::StatusOr<emu::Stats> s = emu::Launch(device_, bundle_, args, {.seed = seed_});
    return s.ok() ? absl::OkStatus() : s.status();
  }

 private:
  const rt::Bundle& bundle_;
  uint64_t seed_;
  emu::Device device_;
};

// ---- comparisons

struct Checker {
  ProbeResult* r;
  void Fail(std::string what) {
    ++r->failed;
    if (r->failures.size() < 12) r->failures.push_back(std::move(what));
  }
  void Bits(const char* op, int64_t element, uint32_t got, uint32_t want) {
    ++r->checked;
    if (got != want)
      Fail(absl::StrFormat("%s at %d: got 0x%08x, want 0x%08x", op, element, got, want));
  }
  void Float(const char* op, int64_t element, float got, float want) {
    Bits(op, element, std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want));
  }
  // |got - want| <= tolerance; NaN never passes.
  void Near(const char* op, int64_t element, float got, double want, double tolerance) {
    ++r->checked;
    if (!(std::fabs(got - want) <= tolerance))
      Fail(absl::StrFormat("%s at %d: got %.9g, want %.9g (tolerance %.3g)", op, element, got, want,
                           tolerance));
  }
  void Equal(const char* what, int64_t got, int64_t want) {
    ++r->checked;
    if (got != want) Fail(absl::StrFormat("%s: got %d, want %d", what, got, want));
  }
};

// ---- small float formats, from their definitions: every finite non-negative code's value,
// so a rounding is a nearest-value search (ties to the even code), independent of any
// bit-twiddling conversion.

struct Format {
  int exp_bits, man_bits;
  uint32_t max_finite;         // the largest finite non-negative code
  bool ieee_infinity;          // the code after max_finite is +inf (otherwise saturate: satfinite)
  std::vector<double> values;  // values[code], code 0..max_finite
};

Format MakeFormat(int exp_bits, int man_bits, uint32_t max_finite, bool ieee_infinity) {
  Format f{exp_bits, man_bits, max_finite, ieee_infinity, {}};
  const int bias = (1 << (exp_bits - 1)) - 1;
  for (uint32_t code = 0; code <= max_finite; ++code) {
    const int e = static_cast<int>(code >> man_bits),
              m = static_cast<int>(code & ((1u << man_bits) - 1));
    f.values.push_back(e == 0 ? std::ldexp(m, 1 - bias - man_bits)
                              : std::ldexp((1 << man_bits) + m, e - bias - man_bits));
  }
  return f;
}

const Format& Bf16() {
  static const Format f = MakeFormat(8, 7, 0x7f7f, true);
  return f;
}
const Format& F16() {
  static const Format f = MakeFormat(5, 10, 0x7bff, true);
  return f;
}
const Format& E4M3() {
  static const Format f = MakeFormat(4, 3, 0x7e, false);
  return f;
}
const Format& E5M2() {
  static const Format f = MakeFormat(5, 2, 0x7b, false);
  return f;
}

// Round to nearest, ties to even; beyond the largest finite value: inf (IEEE formats, where
// the first value past the top is the next power of two) or the largest finite value.
uint32_t Encode(const Format& f, double x) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.exp_bits + f.man_bits) : 0;
  const double a = std::fabs(x);
  const double top = f.values.back();
  const double next = f.ieee_infinity ? std::ldexp(1.0, static_cast<int>(std::log2(top)) + 1) : top;
  if (a >= next) return sign | (f.ieee_infinity ? f.max_finite + 1 : f.max_finite);
  // The value of code c, with the code after the top standing for inf (at `next`).
  auto value = [&](size_t c) { return c < f.values.size() ? f.values[c] : next; };
  const size_t hi = std::lower_bound(f.values.begin(), f.values.end(), a) - f.values.begin();
  if (hi == 0 || value(hi) == a) return sign | static_cast<uint32_t>(hi);
  const size_t lo = hi - 1;
  const double dl = a - value(lo), dh = value(hi) - a;
  const size_t code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | static_cast<uint32_t>(code);
}

double Decode(const Format& f, uint32_t code) {
  const uint32_t sign_bit = 1u << (f.exp_bits + f.man_bits);
  const double v = f.values.at(code & (sign_bit - 1));
  return code & sign_bit ? -v : v;
}

// ---- the probes

std::mt19937_64 Rng(uint64_t seed) { return std::mt19937_64(seed * 0x9e3779b97f4a7c15ull + 1); }

// A float's conversion to a byte (kiln/value.h): toward zero, clamped to [lo, hi], NaN 0.
int32_t Byte(float v, int32_t lo, int32_t hi) {
  return std::isnan(v)
             ? 0
             : static_cast<int32_t>(std::clamp(std::trunc(double{v}), double{lo}, double{hi}));
}

absl::Status ProbeMath(Target& t, int64_t n, uint64_t seed, Checker& c) {
  auto rng = Rng(seed);
  std::uniform_real_distribution<float> log_x(-10, 10);
  std::normal_distribution<float> normal(0, 3);
  std::uniform_int_distribution<int32_t> ints(-1000000, 1000000);
  std::vector<float> x(n), z(n);
  std::vector<int32_t> w(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = std::exp2(log_x(rng)), z[i] = normal(rng), w[i] = ints(rng);
  absl::StatusOr<uint64_t> dx = t.Upload(x), dz = t.Upload(z), dw = t.Upload(w);
  absl::StatusOr<uint64_t> dy = t.Filled(n * probe::kMathOps * 4, 0xff),
                           dq = t.Filled(n * probe::kIntOps * 4, 0xff);
  for (auto* p : {&dx, &dz, &dw, &dy, &dq})
    if (!p->ok()) return p->status();
  if (absl::Status s = t.Launch({rt::Arg::Ptr(*dx), rt::Arg::Ptr(*dz), rt::Arg::Ptr(*dw),
                                 rt::Arg::Ptr(*dy), rt::Arg::Ptr(*dq), rt::Arg::I64(n)});
      !s.ok())
    return s;
  absl::StatusOr<std::vector<float>> y = t.Download<float>(*dy, n * probe::kMathOps);
  absl::StatusOr<std::vector<int32_t>> q = t.Download<int32_t>(*dq, n * probe::kIntOps);
  if (!y.ok()) return y.status();
  if (!q.ok()) return q.status();
  // The approximate instructions' PTX ISA bounds are 2 ulp or 2^-22 relative and better; allow
  // 2^-20 (a wrong function is off by far more).
  const double rel = std::ldexp(1.0, -20);
  for (int64_t i = 0; i < n; ++i) {
    const float xv = x[i], zv = z[i];
    const float* g = &(*y)[i * probe::kMathOps];
    const double e2 = std::exp2(double{zv}), e = std::exp(double{zv});
    const double l2 = std::log2(double{xv}), l = std::log(double{xv});
    c.Near("Exp2", i, g[0], e2, rel * e2);
    c.Near("Exp", i, g[1], e,
           (rel + std::fabs(zv) * std::ldexp(1.0, -22)) * e);  // the scale's rounding
    c.Near("Log2", i, g[2], l2, rel * std::fabs(l2) + std::ldexp(1.0, -21));
    c.Near("Log", i, g[3], l, rel * std::fabs(l) + std::ldexp(1.0, -21));
    c.Near("Rsqrt", i, g[4], 1.0 / std::sqrt(double{xv}), rel / std::sqrt(double{xv}));
    c.Float("Sqrt", i, g[5], std::sqrt(xv));
    c.Near("SqrtApprox", i, g[6], std::sqrt(double{xv}), rel * std::sqrt(double{xv}));
    c.Float("Rcp", i, g[7], 1.0f / zv);
    c.Near("RcpApprox", i, g[8], 1.0 / zv, rel / std::fabs(zv));
    c.Float("Div", i, g[9], zv / xv);
    c.Near("DivApprox", i, g[10], double{zv} / xv, rel * std::fabs(double{zv} / xv));
    c.Float("Abs", i, g[11], std::fabs(zv));
    c.Float("Fma", i, g[12], std::fma(zv, xv, zv));
    c.Float("Min", i, g[13], std::fmin(zv, xv));
    c.Float("Max", i, g[14], std::fmax(zv, xv));
    c.Float("Neg", i, g[15], -zv);
    const double th = std::tanh(double{zv});  // tanh.approx.f32: 2^-11 relative, its PTX ISA bound
    c.Near("TanhApprox", i, g[16], th, std::ldexp(std::fabs(th), -11));
    c.Float("Round", i, g[17], std::nearbyint(zv * 4.0f));  // (ties to even)
    c.Float("Floor", i, g[18], std::floor(zv * 4.0f));
    c.Float("Ceil", i, g[19], std::ceil(zv * 4.0f));
    c.Float("Trunc", i, g[20], std::trunc(zv * 4.0f));
    c.Float("Round of a tie", i, g[21], std::nearbyint(std::floor(zv * 2.0f) * 0.5f));
    const int32_t s = w[i];
    const int32_t* h = &(*q)[i * probe::kIntOps];
    const int32_t want[probe::kIntOps] = {s / 7,
                                          s % 7,
                                          s >> 3,
                                          std::min(s, -5),
                                          std::max(s, -5),
                                          s * -3 + 1,
                                          std::bit_cast<int32_t>(static_cast<float>(s)),
                                          static_cast<int32_t>(zv * 1000.0f),
                                          Byte(zv * 100.0f, -128, 127),
                                          Byte(zv * 100.0f, 0, 255),
                                          static_cast<int8_t>(Byte(zv * 100.0f, -128, 127) * 3)};
    static const char* kNames[probe::kIntOps] = {
        "s32 /",    "s32 %",    "s32 >>",       "s32 Min",      "s32 Max",       "s32 mad",
        "s32->f32", "f32->s32", "f32->s8->s32", "f32->i8->i32", "s8 * 3 (wraps)"};
    for (int j = 0; j < probe::kIntOps; ++j)
      c.Bits(kNames[j], i, static_cast<uint32_t>(h[j]), static_cast<uint32_t>(want[j]));
  }
  return absl::OkStatus();
}

absl::Status ProbeConvert(Target& t, int64_t pairs, uint64_t seed, Checker& c) {
  auto rng = Rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_int_distribution<int> scale(-16, 17);  // fp8 and f16 underflow, saturation, overflow
  std::vector<float> z(2 * pairs);
  for (float& v : z) v = std::ldexp(normal(rng), scale(rng));
  absl::StatusOr<uint64_t> dz = t.Upload(z), dc = t.Filled(pairs * probe::kConvertOps * 4, 0xff);
  if (!dz.ok()) return dz.status();
  if (!dc.ok()) return dc.status();
  if (absl::Status s = t.Launch({rt::Arg::Ptr(*dz), rt::Arg::Ptr(*dc), rt::Arg::I64(pairs)});
      !s.ok())
    return s;
  absl::StatusOr<std::vector<uint32_t>> got = t.Download<uint32_t>(*dc, pairs * probe::kConvertOps);
  if (!got.ok()) return got.status();
  auto pack = [](const Format& f, float hi, float lo) {  // a -> the upper half, b -> the lower
    return Encode(f, hi) << (f.exp_bits + f.man_bits + 1) | Encode(f, lo);
  };
  auto unpack = [](const Format& f8, uint32_t packed) {  // each byte exactly in f16
    return Encode(F16(), Decode(f8, packed >> 8 & 0xff)) << 16 |
           Encode(F16(), Decode(f8, packed & 0xff));
  };
  for (int64_t i = 0; i < pairs; ++i) {
    const float lo = z[2 * i], hi = z[2 * i + 1];
    const uint32_t* g = &(*got)[i * probe::kConvertOps];
    const uint32_t e4 = pack(E4M3(), hi, lo), e5 = pack(E5M2(), hi, lo);
    c.Bits("PackBf16x2", i, g[0], pack(Bf16(), hi, lo));
    c.Bits("PackF16x2", i, g[1], pack(F16(), hi, lo));
    c.Bits("PackFp8x2 e4m3", i, g[2], e4);
    c.Bits("PackFp8x2 e5m2", i, g[3], e5);
    c.Bits("UnpackFp8x2 e4m3", i, g[4], unpack(E4M3(), e4));
    c.Bits("UnpackFp8x2 e5m2", i, g[5], unpack(E5M2(), e5));
    c.Bits("To(bf16)", i, g[6], Encode(Bf16(), lo));
    c.Bits("To(f16)", i, g[7], Encode(F16(), lo));
  }
  return absl::OkStatus();
}

// Integers in [-1000, 1000]: their f32 sums are exact in any order.
std::vector<int32_t> SmallInts(int64_t n, uint64_t seed) {
  auto rng = Rng(seed);
  std::uniform_int_distribution<int32_t> ints(-1000, 1000);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = ints(rng);
  return v;
}

absl::Status ProbeWarp(Target& t, int64_t n, uint64_t seed, Checker& c) {
  const std::vector<int32_t> v = SmallInts(n, seed);
  absl::StatusOr<uint64_t> dv = t.Upload(v), dy = t.Filled(n * probe::kWarpOps * 4, 0xff);
  if (!dv.ok()) return dv.status();
  if (!dy.ok()) return dy.status();
  if (absl::Status s = t.Launch({rt::Arg::Ptr(*dv), rt::Arg::Ptr(*dy), rt::Arg::I64(n)}); !s.ok())
    return s;
  absl::StatusOr<std::vector<uint32_t>> got = t.Download<uint32_t>(*dy, n * probe::kWarpOps);
  if (!got.ok()) return got.status();
  // Over the `size`-thread group holding thread i.
  auto over = [&](int64_t i, int size, auto op, int64_t init) {
    int64_t acc = init;
    for (int64_t j = i / size * size; j < i / size * size + size; ++j) acc = op(acc, int64_t{v[j]});
    return acc;
  };
  auto sum = [](int64_t a, int64_t b) { return a + b; };
  auto max = [](int64_t a, int64_t b) { return std::max(a, b); };
  auto min = [](int64_t a, int64_t b) { return std::min(a, b); };
  auto f32 = [](int64_t x) { return std::bit_cast<uint32_t>(static_cast<float>(x)); };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t warp = i / 32 * 32, lane = i % 32;
    const uint32_t* g = &(*got)[i * probe::kWarpOps];
    auto at = [&](int64_t l) { return static_cast<uint32_t>(v[warp + l]); };
    c.Bits("ShflIdx", i, g[0], at((lane * 7 + 3) % 32));
    c.Bits("ShflUp", i, g[1],
           at(lane >= 3 ? lane - 3 : lane));  // out of range: the lane's own value
    c.Bits("ShflDown", i, g[2], at(lane + 5 < 32 ? lane + 5 : lane));
    c.Bits("ShflXor", i, g[3], at(lane ^ 9));
    c.Bits("ShflIdx width 8", i, g[4], at(lane / 8 * 8 + 2));
    c.Bits("ShflDown width 16", i, g[5], at(lane % 16 + 3 < 16 ? lane + 3 : lane));
    c.Bits("WarpReduce sum", i, g[6], f32(over(i, 32, sum, 0)));
    c.Bits("WarpReduce max", i, g[7], f32(over(i, 32, max, INT64_MIN)));
    c.Bits("WarpReduce sum width 16", i, g[8], f32(over(i, 16, sum, 0)));
    c.Bits("ReduxSync sum", i, g[9], static_cast<uint32_t>(over(i, 32, sum, 0)));
    c.Bits("ReduxSync max", i, g[10], static_cast<uint32_t>(over(i, 32, max, INT64_MIN) + 1000));
    c.Bits("ReduxSync min", i, g[11], static_cast<uint32_t>(over(i, 32, min, INT64_MAX) + 1000));
    c.Bits("GroupReduce sum (block)", i, g[12], f32(over(i, 256, sum, 0)));
    c.Bits("GroupReduce max (128)", i, g[13], f32(over(i, 128, max, INT64_MIN)));
    c.Bits("GroupReduce min (64)", i, g[14], f32(over(i, 64, min, INT64_MAX)));
  }
  return absl::OkStatus();
}

absl::Status ProbeAtomics(Target& t, int64_t n, uint64_t seed, Checker& c) {
  const std::vector<int32_t> v = SmallInts(n, seed);
  std::vector<uint32_t> words(probe::kWords, 0);
  words[probe::kMin] = 0xffffffffu;
  const float zero = 0;
  absl::StatusOr<uint64_t> dv = t.Upload(v), dw = t.Upload(words), ds = t.Upload(&zero, 4);
  absl::StatusOr<uint64_t> dt = t.Filled(n * 4, 0xff), dc = t.Filled(n * 4, 0xff),
                           dh = t.Filled(n / 256 * 16 * 4, 0xff);
  for (auto* p : {&dv, &dw, &ds, &dt, &dc, &dh})
    if (!p->ok()) return p->status();
  if (absl::Status s =
          t.Launch({rt::Arg::Ptr(*dv), rt::Arg::Ptr(*dw), rt::Arg::Ptr(*ds), rt::Arg::Ptr(*dt),
                    rt::Arg::Ptr(*dc), rt::Arg::Ptr(*dh), rt::Arg::I64(n)});
      !s.ok())
    return s;
  absl::StatusOr<std::vector<uint32_t>> w = t.Download<uint32_t>(*dw, probe::kWords);
  absl::StatusOr<std::vector<float>> sum = t.Download<float>(*ds, 1);
  absl::StatusOr<std::vector<uint32_t>> ticket = t.Download<uint32_t>(*dt, n),
                                        cas = t.Download<uint32_t>(*dc, n);
  absl::StatusOr<std::vector<uint32_t>> hist = t.Download<uint32_t>(*dh, n / 256 * 16);
  for (auto* p : {&w, &ticket, &cas, &hist})
    if (!p->ok()) return p->status();
  if (!sum.ok()) return sum.status();
  int64_t usum = 0, umax = 0, umin = INT64_MAX, vsum = 0;
  for (int32_t x : v)
    usum += x + 1000, umax = std::max<int64_t>(umax, x + 1000),
                      umin = std::min<int64_t>(umin, x + 1000), vsum += x;
  c.Equal("AtomicAdd count", (*w)[probe::kCount], n);
  c.Equal("AtomicMax", (*w)[probe::kMax], umax);
  c.Equal("AtomicMin", (*w)[probe::kMin], umin);
  c.Equal("RedAdd", (*w)[probe::kRedSum], static_cast<uint32_t>(usum));
  c.Equal("RedMax", (*w)[probe::kRedMax], umax);
  c.Equal("AtomicAdd f32 (integers, exact in any order)", static_cast<int64_t>((*sum)[0]), vsum);
  std::vector<uint32_t> sorted = *ticket;
  std::sort(sorted.begin(), sorted.end());
  int64_t out_of_place = 0;
  for (int64_t i = 0; i < n; ++i) out_of_place += sorted[i] != static_cast<uint32_t>(i);
  c.Equal("AtomicAdd's old values that are not a permutation of 0..n-1", out_of_place, 0);
  // The CAS race: exactly one thread saw 0 and wrote its index + 1; every other saw that.
  const uint32_t winner = (*w)[probe::kCas];
  int64_t zeros = 0, others = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((*cas)[i] == 0)
      zeros += 1, c.Equal("AtomicCas winner's index + 1", winner, i + 1);
    else
      others += (*cas)[i] != winner;
  }
  c.Equal("AtomicCas threads that saw 0", zeros, 1);
  c.Equal("AtomicCas losers that did not see the winner", others, 0);
  for (int64_t b = 0; b < n / 256; ++b) {
    int64_t bins[16] = {};
    for (int64_t i = b * 256; i < b * 256 + 256; ++i) ++bins[(v[i] + 1000) % 16];
    for (int j = 0; j < 16; ++j)
      c.Equal(absl::StrCat("shared AtomicAdd histogram, block ", b, " bin ", j).c_str(),
              (*hist)[b * 16 + j], bins[j]);
  }
  return absl::OkStatus();
}

std::vector<float> NormalFloats(int64_t n, uint64_t seed) {
  std::vector<float> x(n);
  auto rng = Rng(seed);
  std::normal_distribution<float> normal(0, 1);
  for (float& v : x) v = normal(rng);
  return x;
}

// A probe of (x, y, n, stride): x uploaded, y `planes` planes of `stride` poisoned floats, one
// launch, y back.
absl::StatusOr<std::vector<float>> LaunchOverPlanes(Target& t, const std::vector<float>& x,
                                                    int64_t stride, int planes) {
  absl::StatusOr<uint64_t> dx = t.Upload(x), dy = t.Filled(planes * stride * 4, 0xff);
  if (!dx.ok()) return dx.status();
  if (!dy.ok()) return dy.status();
  const int64_t n = static_cast<int64_t>(x.size());
  if (absl::Status s =
          t.Launch({rt::Arg::Ptr(*dx), rt::Arg::Ptr(*dy), rt::Arg::I64(n), rt::Arg::I64(stride)});
      !s.ok())
    return s;
  return t.Download<float>(*dy, planes * stride);
}

absl::Status ProbeMemory(Target& t, int64_t n, uint64_t seed, Checker& c) {
  const int64_t stride = (n + 3) / 4 * 4 + 64;  // a poisoned gap after each plane
  const int planes = probe::kHintCount + 1;
  const std::vector<float> x = NormalFloats(n, seed);
  absl::StatusOr<std::vector<float>> y = LaunchOverPlanes(t, x, stride, planes);
  if (!y.ok()) return y.status();
  static const char* kPlanes[] = {"default",          ".nc",         ".cs",
                                  ".L1::no_allocate", "evict_first", "evict_last"};
  const float poison = std::bit_cast<float>(0xffffffffu);
  const int64_t whole = n / 4 * 4;
  for (int h = 0; h < probe::kHintCount; ++h)
    for (int64_t e = 0; e < stride; ++e)
      c.Float(absl::StrCat("load/store ", kPlanes[h], e < n ? "" : " (past the end: untouched)")
                  .c_str(),
              e, (*y)[h * stride + e], e < n ? x[e] * static_cast<float>(h + 1) : poison);
  for (int64_t e = 0; e < stride; ++e) {
    const float want = e < whole             ? x[e]
                       : e < (n + 3) / 4 * 4 ? static_cast<float>(probe::kFill)
                                             : poison;
    c.Float("masked v4 load's fill", e, (*y)[probe::kHintCount * stride + e], want);
  }
  return absl::OkStatus();
}

// probe/cluster and probe/cluster16 (examples/probes/cluster.cc), clusters of kC CTAs: CTA b is
// rank b % kC of cluster b / kC; element t of CTA b is x[b * 128 + t], or 0 past n.
template <int kC>
absl::Status ProbeCluster(Target& t, int64_t n, uint64_t seed, Checker& c) {
  constexpr int kT = probe::kClusterThreads;
  const int64_t clusters = (n + kT * kC - 1) / (kT * kC);
  const int64_t stride = std::max<int64_t>(n, clusters) + 64;  // a poisoned gap after each plane
  const std::vector<float> x = NormalFloats(n, seed);
  absl::StatusOr<std::vector<float>> y = LaunchOverPlanes(t, x, stride, probe::kClusterPlanes);
  if (!y.ok()) return y.status();
  const float poison = std::bit_cast<float>(0xffffffffu);
  auto element = [&](int64_t block, int64_t i) {
    return block * kT + i < n ? x[block * kT + i] : 0.0f;
  };
  auto peer = [&](int64_t block, int shift) { return block / kC * kC + (block % kC + shift) % kC; };
  for (int64_t e = 0; e < stride; ++e) {
    const int64_t b = e / kT, i = e % kT;
    const bool in = e < n;
    c.Float("a peer's element (ld.shared::cluster)", e, (*y)[e],
            in ? element(peer(b, kC - 1), i * 5 % kT) : poison);
    c.Float("what a peer stored here (st.shared::cluster)", e, (*y)[stride + e],
            in ? element(peer(b, kC - 1), i) * 2.0f : poison);
    const int64_t q = i / 4 * 4, b2 = peer(b, 2);
    const float four =
        element(b2, q) + element(b2, q + 1) + element(b2, q + 2) + element(b2, q + 3);
    c.Float("a peer's 16 bytes, summed (ld.shared::cluster.v4)", e, (*y)[2 * stride + e],
            in ? four : poison);
    c.Float("each cluster's count (red.shared::cluster.add)", e, (*y)[3 * stride + e],
            e < clusters ? static_cast<float>(kC * kT * (kT + 1) / 2) : poison);
  }
  return absl::OkStatus();
}

absl::Status ProbeWgmmaRegs(Target& t, int64_t, uint64_t seed, Checker& c) {
  constexpr int kT = 64;
  std::vector<uint16_t> a = RandomNormal16(kT * kT, seed, false),
                        b1 = RandomNormal16(kT * kT, seed + 1, false),
                        b2 = RandomNormal16(kT * kT, seed + 2, false);
  absl::StatusOr<uint64_t> da = t.Upload(a), db1 = t.Upload(b1), db2 = t.Upload(b2),
                           dd = t.Filled(kT * kT * 4, 0xff), dd2 = t.Filled(kT * kT * 4, 0xff);
  for (auto* p : {&da, &db1, &db2, &dd, &dd2})
    if (!p->ok()) return p->status();
  if (absl::Status s = t.Launch({rt::Arg::Ptr(*da), rt::Arg::Ptr(*db1), rt::Arg::Ptr(*db2),
                                 rt::Arg::Ptr(*dd), rt::Arg::Ptr(*dd2)});
      !s.ok())
    return s;
  absl::StatusOr<std::vector<float>> d = t.Download<float>(*dd, kT * kT),
                                     d2 = t.Download<float>(*dd2, kT * kT);
  if (!d.ok()) return d.status();
  if (!d2.ok()) return d2.status();
  // P = bf16(A * B1^T) as the kernel rounds its f32 accumulator; D = P * B2^T, in fp64.
  std::vector<double> p(kT * kT);
  for (int m = 0; m < kT; ++m)
    for (int n = 0; n < kT; ++n) {
      double s = 0;
      for (int k = 0; k < kT; ++k)
        s += double{Bf16ToFloat(a[m * kT + k])} * Bf16ToFloat(b1[n * kT + k]);
      p[m * kT + n] = Bf16ToFloat(FloatToBf16(static_cast<float>(s)));
    }
  // D = P * B2^T (B2 K-major: B(n, k) = b2[n][k]); D2 = P * B2 (MN-major: B(n, k) = b2[k][n]).
  for (const bool mn_major : {false, true}) {
    const std::vector<float>& got_d = mn_major ? *d2 : *d;
    const char* name = mn_major ? "D2 (MN-major B)" : "D";
    double err = 0, norm = 0;
    for (int m = 0; m < kT; ++m)
      for (int n = 0; n < kT; ++n) {
        double want = 0;
        for (int k = 0; k < kT; ++k)
          want += p[m * kT + k] * Bf16ToFloat(mn_major ? b2[k * kT + n] : b2[n * kT + k]);
        const double got = got_d[m * kT + n];
        err += (got - want) * (got - want), norm += want * want;
        ++c.r->checked;
        if (!std::isfinite(got)) c.Fail(absl::StrFormat("%s(%d, %d) is %g", name, m, n, got));
      }
    // P's rounding can differ by one bf16 step where the f32 and fp64 sums straddle a boundary.
    const double rel = std::sqrt(err / norm), tolerance = 4e-3;
    if (!(rel <= tolerance))
      c.Fail(absl::StrFormat("%s: norm-relative error %.3g over %.3g", name, rel, tolerance));
  }
  return absl::OkStatus();
}

struct ProbeSpec {
  const char* name;
  int64_t default_elements;
  int64_t multiple;  // of elements
  absl::Status (*run)(Target&, int64_t elements, uint64_t seed, Checker&);
};

const std::vector<ProbeSpec>& Specs() {
  static const auto* specs = new std::vector<ProbeSpec>{
      {"probe/math", 3001, 1, ProbeMath},
      {"probe/convert", 3001, 1, ProbeConvert},
      {"probe/warp", 1024, 256, ProbeWarp},
      {"probe/atomics", 1024, 256, ProbeAtomics},
      {"probe/memory", 3001, 1, ProbeMemory},
      {"probe/wgmma_regs", 64 * 64, 64 * 64, ProbeWgmmaRegs},
      {"probe/cluster", 3001, 1, ProbeCluster<probe::kClusterCtas>},
      {"probe/cluster16", 3001, 1, ProbeCluster<probe::kClusterCtasLargest>},
  };
  return *specs;
}

const ProbeSpec* SpecOf(const std::string& name) {
  for (const ProbeSpec& s : Specs())
    if (name == s.name) return &s;
  return nullptr;
}

absl::StatusOr<ProbeResult> Probe(const rt::Bundle& bundle, const ProbeOptions& opt,
                                  Target& target) {
  const ProbeSpec* spec = SpecOf(bundle.manifest.name);
  if (!spec)
    return absl::InvalidArgumentError(absl::StrCat(bundle.manifest.name, " is not an op probe"));
  ProbeResult r;
  r.name = spec->name;
  r.elements = opt.elements > 0 ? opt.elements : spec->default_elements;
  if (r.elements % spec->multiple)
    return absl::InvalidArgumentError(absl::StrCat(spec->name, " runs on a multiple of ",
                                                   spec->multiple, " elements, not ", r.elements));
  Checker c{&r};
  if (absl::Status s = spec->run(target, r.elements, opt.seed, c); !s.ok()) return s;
  return r;
}

}  // namespace

bool IsProbe(const std::string& name) { return SpecOf(name) != nullptr; }

absl::StatusOr<ProbeResult> RunProbe(const rt::Bundle& bundle, const ProbeOptions& options) {
  absl::StatusOr<rt::LoadedKernel> kernel = rt::LoadedKernel::Load(bundle);
  if (!kernel.ok()) return kernel.status();
  GpuTarget target(*std::move(kernel));
  return Probe(bundle, options, target);
}

absl::StatusOr<ProbeResult> EmulateProbe(const rt::Bundle& bundle, const ProbeOptions& options,
                                         uint64_t schedule_seed) {
  EmulatorTarget target(bundle, schedule_seed);
  return Probe(bundle, options, target);
}

std::string ProbeReport(const ProbeResult& r) {
  std::string s = absl::StrFormat("%-18s %6d elements %8d values checked  %s", r.name, r.elements,
                                  r.checked, r.passed() ? "ok" : absl::StrCat(r.failed, " FAILED"));
  for (const std::string& f : r.failures) absl::StrAppend(&s, "\n  ", f);
  return s;
}

}  // namespace kiln::examples
