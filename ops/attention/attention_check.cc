#include "ops/attention/attention_check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/host_data.h"
#include "examples/timing.h"
#include "kiln/emulator.h"
#include "kiln/runtime/driver.h"
#include "ops/attention/harness_memory.h"

namespace kiln::examples {

absl::Status EmulatorTakes(const rt::AttentionSize& z, const std::vector<int64_t>& lengths,
                           double passes) {
  const double d = z.d, hq = z.hq, hkv = z.hkv;
  double rows = static_cast<double>(z.b) * z.s, keys = static_cast<double>(z.b) * z.skv;
  double pairs = rows * z.skv;         // (query, key) pairs a head
  if (z.varlen || !lengths.empty()) {  // (packed: sized by the lengths, whatever z says)
    rows = keys = pairs = 0;
    for (int64_t n : lengths) rows += n, keys += n, pairs += static_cast<double>(n) * n;
  }
  return emu::CheckProblemSize("kiln attention --emulate",
                               {{"q", rows * hq * d}, {"k", keys * hkv * d}},
                               passes * pairs * hq * d);
}

namespace {

struct Inputs {
  std::vector<uint16_t> q, k, v;
};

Inputs RandomInputs(const rt::AttentionSize& z, bool half, uint64_t seed) {
  return {RandomNormal16(z.b * z.hq * z.s * z.d, seed, half),
          RandomNormal16(z.b * z.hkv * z.skv * z.d, seed + 1, half),
          RandomNormal16(z.b * z.hkv * z.skv * z.d, seed + 2, half)};
}

// The rows layout as the harness lays it out (RowsSize): each position's row of heads followed by
// 64 elements of NaN, so that a read past its heads shows in O and a write past them in the pad.
constexpr int64_t kRowsPad = 64;
constexpr uint16_t kNan16 = 0xffff;

// x, [B, H, S, D] (the harness's layout), as [B, S, stride] with heads h at columns h * D...
std::vector<uint16_t> ToRows(const std::vector<uint16_t>& x, int64_t b, int64_t heads, int64_t s,
                             int64_t d, int64_t stride) {
  std::vector<uint16_t> rows(b * s * stride, kNan16);
  for (int64_t n = 0; n < b * heads; ++n)
    for (int64_t i = 0; i < s; ++i)
      std::copy_n(&x[(n * s + i) * d], d, &rows[(n / heads * s + i) * stride + n % heads * d]);
  return rows;
}

// The inverse of ToRows; `pad_written` counts the pad's elements that are no longer NaN's bits.
std::vector<uint16_t> FromRows(const std::vector<uint16_t>& rows, int64_t b, int64_t heads,
                               int64_t s, int64_t d, int64_t stride, int64_t& pad_written) {
  std::vector<uint16_t> x(b * heads * s * d);
  for (int64_t n = 0; n < b * heads; ++n)
    for (int64_t i = 0; i < s; ++i)
      std::copy_n(&rows[(n / heads * s + i) * stride + n % heads * d], d, &x[(n * s + i) * d]);
  pad_written = 0;
  for (int64_t r = 0; r < b * s; ++r)
    for (int64_t c = heads * d; c < stride; ++c) pad_written += rows[r * stride + c] != kNan16;
  return x;
}

// The inputs' K and V as a paged cache (PagedSize): sequence b's page j is cache page
// table[b * max_pages + j], a permutation of the pages; rows past Skv hold NaN.
struct Paged {
  std::vector<uint16_t> k, v;
  std::vector<int32_t> table, lens;
  rt::AttentionSize size;
};
Paged PageInputs(const rt::AttentionSize& z, const Inputs& in, int64_t page, uint64_t seed) {
  Paged p;
  p.size = PagedSize(z, page);
  const int64_t row = z.hkv * z.d, cache = p.size.pages * page * row;
  p.k.assign(cache, 0x7fc0), p.v.assign(cache, 0x7fc0);
  std::vector<int32_t> order(p.size.pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed * 5 + 1));
  p.table.assign(order.begin(), order.begin() + z.b * p.size.max_pages);
  p.lens.assign(z.b, static_cast<int32_t>(z.skv));
  for (int64_t b = 0; b < z.b; ++b)
    for (int64_t j = 0; j < z.skv; ++j) {
      const int64_t slot = p.table[b * p.size.max_pages + j / page] * page + j % page;
      for (int64_t h = 0; h < z.hkv; ++h)
        for (int64_t d = 0; d < z.d; ++d) {
          const int64_t from = ((b * z.hkv + h) * z.skv + j) * z.d + d,
                        to = (slot * z.hkv + h) * z.d + d;
          p.k[to] = in.k[from], p.v[to] = in.v[from];
        }
    }
  return p;
}

// Keys query row i sees.
int64_t KeysSeen(const rt::AttentionSize& z, bool causal, int64_t i) {
  return causal ? std::clamp<int64_t>(i + 1 + z.skv - z.s, 0, z.skv) : z.skv;
}

// Rows (head-major: (b * Hq + h) * S + i) to compare: all of them when that is cheap, else the
// first and last rows of the first and last heads, each tile edge of one head, and random rows.
std::vector<int64_t> RowsToCheck(const rt::AttentionSize& z, uint64_t seed) {
  const int64_t heads = z.b * z.hq, rows = heads * z.s;
  if (static_cast<double>(rows) * z.skv * z.d <= 4e8) {
    std::vector<int64_t> all(rows);
    for (int64_t r = 0; r < rows; ++r) all[r] = r;
    return all;
  }
  std::set<int64_t> pick;
  std::mt19937_64 rng(seed * 13 + 5);
  for (int64_t head : {int64_t{0}, heads - 1})
    for (int64_t i : {int64_t{0}, int64_t{1}, z.s - 2, z.s - 1})
      if (i >= 0) pick.insert(head * z.s + i);
  const int64_t head = static_cast<int64_t>(rng() % heads);
  for (int64_t edge = 64; edge < z.s && pick.size() < 192; edge += 64)
    for (int64_t i : {edge - 1, edge}) pick.insert(head * z.s + i);
  while (pick.size() < 384 && pick.size() < static_cast<size_t>(rows))
    pick.insert(static_cast<int64_t>(rng() % rows));
  return {pick.begin(), pick.end()};
}

// Each row's lse, absolute, past f32's own rounding of it (a few ulps: a scale of 1e6 makes lse
// ~1e7, which f32 holds to about 1).
constexpr double kLseTolerance = 1e-2;
double LseRounding(double want) { return 8 * std::abs(want) * 0x1p-24; }

struct Sums {
  double diff2 = 0, ref2 = 0, lse_error = 0;
  int64_t bad = 0;  // NaN or Inf where a number belongs, or a wrong -inf
};

double Decode(uint16_t x, bool half) { return half ? HalfToFloat(x) : Bf16ToFloat(x); }

// Packed sequences checked as a dense problem padded to the longest: sequence b's length (its
// query rows and its keys), or -1 where every sequence is S x Skv.
using Lengths = std::vector<int64_t>;
int64_t LengthOf(const Lengths* lengths, int64_t b) { return lengths ? (*lengths)[b] : -1; }

// The fp64 reference of one row: its D values of O into `want`, its lse returned (-inf where the
// row sees no key).
double ReferenceRow(const rt::AttentionSize& z, bool causal, double scale, bool half,
                    const Inputs& in, int64_t row, std::vector<double>& want,
                    const Lengths* lengths = nullptr) {
  const int64_t head = row / z.s, i = row % z.s, b = head / z.hq, h = head % z.hq;
  const int64_t length = LengthOf(lengths, b);
  const int64_t kv_head = b * z.hkv + h / (z.hq / z.hkv), keys = length < 0 ? KeysSeen(z, causal, i)
                                                                 : causal   ? i + 1
                                                                            : length;
  const uint16_t* q = &in.q[row * z.d];
  std::vector<double> score(keys);
  want.assign(z.d, 0.0);
  double max = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const uint16_t* kj = &in.k[(kv_head * z.skv + j) * z.d];
    double dot = 0;
    for (int64_t c = 0; c < z.d; ++c) dot += Decode(q[c], half) * Decode(kj[c], half);
    score[j] = dot * scale;
    max = std::max(max, score[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < keys; ++j) {
    const double p = std::exp(score[j] - max);
    sum += p;
    const uint16_t* vj = &in.v[(kv_head * z.skv + j) * z.d];
    for (int64_t c = 0; c < z.d; ++c) want[c] += p * Decode(vj[c], half);
  }
  if (keys)
    for (double& w : want) w /= sum;
  return keys ? max + std::log(sum) : -INFINITY;
}

// One row against the reference, into `out`.
void CheckRow(const rt::AttentionSize& z, bool causal, double scale, bool half, const Inputs& in,
              const std::vector<uint16_t>& o, const std::vector<float>& lse, int64_t row, Sums& out,
              const Lengths* lengths) {
  std::vector<double> want;
  const double want_lse = ReferenceRow(z, causal, scale, half, in, row, want, lengths);
  for (int64_t c = 0; c < z.d; ++c) {
    const double got = Decode(o[row * z.d + c], half);
    if (!std::isfinite(got)) ++out.bad;
    out.diff2 += (got - want[c]) * (got - want[c]);
    out.ref2 += want[c] * want[c];
  }
  const double got_lse = lse[row];
  if (std::isinf(want_lse)) {
    if (!(std::isinf(got_lse) && got_lse < 0)) ++out.bad;
  } else if (!std::isfinite(got_lse)) {
    ++out.bad;
    out.lse_error = INFINITY;  // (said as such where the error is printed, not as 0)
  } else {
    out.lse_error = std::max(out.lse_error, std::abs(got_lse - want_lse) - LseRounding(want_lse));
  }
}

// Compares the checked rows on all host threads and scans all of O and lse for NaN (the poison
// an unwritten tile leaves).
void Check(const rt::AttentionSize& z, bool causal, double scale, bool half, const Inputs& in,
           const std::vector<uint16_t>& o, const std::vector<float>& lse, uint64_t seed,
           AttentionResult& r, const Lengths* lengths = nullptr) {
  std::vector<int64_t> rows = RowsToCheck(z, seed);
  if (lengths)  // a packed sequence's rows only
    std::erase_if(rows,
                  [&](int64_t row) { return row % z.s >= LengthOf(lengths, row / z.s / z.hq); });
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                              std::min<int64_t>(rows.size(), 32));
  std::vector<Sums> sums(workers);
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t n = rows.size() * w / workers; n < rows.size() * (w + 1) / workers; ++n)
        CheckRow(z, causal, scale, half, in, o, lse, rows[n], sums[w], lengths);
    });
  for (std::thread& t : threads) t.join();
  Sums all;
  for (const Sums& s : sums)
    all.diff2 += s.diff2, all.ref2 += s.ref2, all.bad += s.bad,
        all.lse_error = std::max(all.lse_error, s.lse_error);
  NanCount unwritten;
  for (uint16_t x : o) unwritten.Add16(x, half);
  for (float x : lse) unwritten.Add32(x);
  r.rows_checked = static_cast<int64_t>(rows.size());
  r.rel_error = all.bad ? NAN : std::sqrt(all.diff2 / std::max(all.ref2, 1e-30));
  r.lse_error = all.lse_error;
  const double tolerance = ForwardTolerance(half);
  if (unwritten)
    r.failure = unwritten.Describe("O and lse");
  else if (all.bad)
    r.failure = absl::StrCat(all.bad, " NaN, Inf or wrong -inf values in the checked rows");
  else if (!(r.rel_error <= tolerance))
    r.failure = absl::StrFormat("error %.3e over the tolerance %.0e", r.rel_error, tolerance);
  else if (!(r.lse_error <= kLseTolerance))
    r.failure = absl::StrFormat("lse off by %.3e past f32's rounding of it (tolerance %.0e)",
                                r.lse_error, kLseTolerance);
  r.passed = r.failure.empty();
}

absl::StatusOr<double> MedianMs(rt::AttentionRunner& runner, const rt::AttentionSize& z,
                                const rt::AttentionOptions& options,
                                const rt::AttentionOperands& ops, int iters, int repeats) {
  return MedianCallMs([&] { return runner.Run(z, options, ops); }, iters, repeats);
}

int64_t OBytes(const rt::AttentionSize& z) {
  return z.rows ? z.b * z.s * z.OStride() * 2 : z.b * z.hq * z.s * z.d * 2;
}
// Element c of O's (head-major) row `row`, in elements from O's start.
int64_t OAt(const rt::AttentionSize& z, int64_t row, int64_t c) {
  if (!z.rows) return row * z.d + c;
  const int64_t head = row / z.s, i = row % z.s;
  return (head / z.hq * z.s + i) * z.OStride() + head % z.hq * z.d + c;
}

// The inputs as the device reads them: the harness's layout, or the rows layout (RowsSize).
Inputs DeviceInputs(const rt::AttentionSize& z, const Inputs& in) {
  if (!z.rows) return in;
  return {ToRows(in.q, z.b, z.hq, z.s, z.d, z.QStride()),
          ToRows(in.k, z.b, z.hkv, z.skv, z.d, z.KvStride()),
          ToRows(in.v, z.b, z.hkv, z.skv, z.d, z.KvStride())};
}

// O as the device wrote it, in the harness's layout.
std::vector<uint16_t> HostO(const rt::AttentionSize& z, const std::vector<uint16_t>& o,
                            int64_t& pad_written) {
  pad_written = 0;
  return z.rows ? FromRows(o, z.b, z.hq, z.s, z.d, z.OStride(), pad_written) : o;
}

// Check, and a write into the rows layout's pad fails too.
void CheckAll(const rt::AttentionSize& z, bool causal, double scale, bool half, const Inputs& in,
              const std::vector<uint16_t>& device_o, const std::vector<float>& lse, uint64_t seed,
              AttentionResult& r) {
  int64_t pad_written = 0;
  Check(z, causal, scale, half, in, HostO(z, device_o, pad_written), lse, seed, r);
  if (pad_written && r.passed) {
    r.passed = false;
    r.failure = absl::StrCat(pad_written, " elements written past the heads of O's rows");
  }
}

// Where a wrong emulated result comes from (the emulator's write sites): the first wrong element
// of O (row-major; WrongElementLimit over its row's reference) or, O being right, of lse (off by
// more than its tolerance), and the wrong element written first (in the emulator's run), each with
// its query tile and the block, thread and instruction that last wrote it. Empty when no element is
// wrong by itself.
std::string WrongAttentionPlace(const rt::AttentionSize& z, bool causal, double scale, bool half,
                                const Inputs& in, const std::vector<uint16_t>& o,
                                const std::vector<float>& lse, int64_t block_m,
                                const emu::Device& d, uint64_t o_at, uint64_t lse_at) {
  struct Wrong {
    std::string what;
    std::optional<emu::Device::WriteSite> site;
  };
  std::optional<Wrong> first, earliest;
  auto note = [&](int64_t row, const std::string& element, double got, double want,
                  uint64_t address) {
    const int64_t head = row / z.s, i = row % z.s;
    std::string what = absl::StrFormat("%s = %g (want %g), ", element, got, want);
    if (block_m > 0)
      absl::StrAppend(&what, "query tile ", i / block_m, " of ", block_m, " rows of head ",
                      head % z.hq, " batch ", head / z.hq, ", ");
    Wrong here{what, d.LastWrite(address)};
    absl::StrAppend(&here.what, here.site ? here.site->Describe() : "never written");
    if (!first) first = here;
    if (here.site && (!earliest || here.site->time < earliest->site->time)) earliest = here;
  };
  std::vector<double> want;
  for (bool of_lse : {false, true}) {
    for (int64_t row = 0; row < z.b * z.hq * z.s; ++row) {
      const double want_lse = ReferenceRow(z, causal, scale, half, in, row, want);
      const int64_t head = row / z.s, i = row % z.s;
      const std::string at = absl::StrCat("[", head / z.hq, "][", head % z.hq, "][", i, "]");
      if (of_lse) {
        const double got = lse[row];
        const bool wrong =
            std::isinf(want_lse)
                ? !(std::isinf(got) && got < 0)
                : IsWrongElement(got, want_lse, kLseTolerance + LseRounding(want_lse));
        if (wrong) note(row, "lse" + at, got, want_lse, lse_at + row * 4);
        continue;
      }
      double ref2 = 0;
      for (double w : want) ref2 += w * w;
      const double limit = WrongElementLimit(ForwardTolerance(half), ref2, z.d);
      for (int64_t c = 0; c < z.d; ++c)
        if (const double got = Decode(o[row * z.d + c], half); IsWrongElement(got, want[c], limit))
          note(row, absl::StrCat("O", at, "[", c, "]"), got, want[c], o_at + OAt(z, row, c) * 2);
    }
    if (first) break;  // O's wrong elements; lse's only where O is right
  }
  if (!first) return "";
  std::string place = absl::StrCat("the first wrong element: ", first->what);
  if (earliest) absl::StrAppend(&place, "; the wrong element written first: ", earliest->what);
  return place;
}

int64_t LseBytes(const rt::AttentionSize& z) { return z.b * z.hq * z.s * 4; }

// What a packed-sequence run needs of its device (the GPU or the emulator): its memory and the
// entry point's call.
struct VarlenDevice : HarnessMemory {
  std::function<absl::Status(const rt::AttentionSize&, const rt::AttentionOperands&)> run;
};

// The rows i < lengths[b] of each head of x [B, H, S, D] (padded), packed as [T, H, D].
std::vector<uint16_t> PackRows(const std::vector<uint16_t>& x, const rt::AttentionSize& pad,
                               int64_t heads, const std::vector<int64_t>& lengths) {
  std::vector<uint16_t> packed;
  for (int64_t b = 0; b < pad.b; ++b)
    for (int64_t i = 0; i < lengths[b]; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const uint16_t* row = &x[((b * heads + h) * pad.s + i) * pad.d];
        packed.insert(packed.end(), row, row + pad.d);
      }
  return packed;
}

}  // namespace

double ForwardTolerance(bool half) { return half ? 4e-3 : 2e-2; }

absl::StatusOr<double> MedianCallMs(const std::function<absl::Status()>& call, int iters,
                                    int repeats) {
  repeats = std::max(repeats, 1);
  std::vector<std::function<absl::Status()>> fns = {[&]() -> absl::Status {
    for (int n = 0; n < repeats; ++n)
      if (absl::Status st = call(); !st.ok()) return st;
    return absl::OkStatus();
  }};
  absl::StatusOr<std::vector<double>> ms = InterleavedMediansMs(fns, 1, iters);
  if (!ms.ok()) return ms.status();
  return (*ms)[0] / repeats;
}

std::string AttentionShapeName(const rt::AttentionSize& z, bool causal) {
  return absl::StrCat("b", z.b, " hq", z.hq, " hkv", z.hkv, " s", z.s, " skv", z.skv, " d", z.d,
                      causal ? " causal" : "");
}

std::string PlannedKernels(const rt::AttentionPlan& plan) {
  return plan.copy_pages.empty() ? plan.kernel : absl::StrCat(plan.copy_pages, " + ", plan.kernel);
}

rt::AttentionSize PagedSize(const rt::AttentionSize& z, int64_t page) {
  rt::AttentionSize p = z;
  if (page <= 0) return p;
  p.lens = true, p.page = page;
  p.max_pages = (z.skv + page - 1) / page;
  p.pages = z.b * p.max_pages + 1;  // one the table never names
  p.skv = p.max_pages * page;
  return p;
}

absl::StatusOr<rt::AttentionSize> VarlenSize(const rt::AttentionSize& size,
                                             const std::vector<int64_t>& lengths) {
  if (lengths.empty() || *std::min_element(lengths.begin(), lengths.end()) < 0 ||
      *std::max_element(lengths.begin(), lengths.end()) < 1)
    return absl::InvalidArgumentError(
        "packed sequences need lengths of 0 or more, at least one of them 1 or more");
  rt::AttentionSize z = size;
  z.b = static_cast<int64_t>(lengths.size());
  z.s = z.skv = *std::max_element(lengths.begin(), lengths.end());
  z.varlen = true;
  z.total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  return z;
}

rt::AttentionSize RowsSize(const rt::AttentionSize& z) {
  rt::AttentionSize r = z;
  if (!z.rows) return r;
  if (!r.q_stride) r.q_stride = z.hq * z.d + kRowsPad;
  if (!r.kv_stride) r.kv_stride = z.hkv * z.d + kRowsPad;
  if (!r.o_stride) r.o_stride = z.hq * z.d + kRowsPad;
  return r;
}

absl::StatusOr<AttentionResult> RunAttentionGpu(rt::AttentionRunner& runner,
                                                const rt::AttentionSize& size,
                                                const rt::AttentionOptions& options, int iters,
                                                uint64_t seed, int64_t page, int repeats) {
  const rt::AttentionSize z = RowsSize(size);
  const bool half = options.dtype == "f16";
  const rt::AttentionSize planned = PagedSize(z, page);
  const rt::AttentionOperands fake = {16, 16, 16, 16, 16, 16, 16};  // the checks' pointers only
  absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(planned, options, fake, 90);
  if (!plan.ok()) return plan.status();
  AttentionResult r;
  r.kernel = PlannedKernels(*plan), r.size = z, r.causal = options.causal;
  const Inputs in = RandomInputs(z, half, seed), dev = DeviceInputs(z, in);
  const Paged paged = page > 0 ? PageInputs(z, in, page, seed) : Paged{dev.k, dev.v, {}, {}, z};
  auto ints = [](const std::vector<int32_t>& x) { return std::max<size_t>(x.size() * 4, 4); };
  absl::StatusOr<rt::DeviceBuffer> q = rt::DeviceBuffer::Allocate(dev.q.size() * 2),
                                   k = rt::DeviceBuffer::Allocate(paged.k.size() * 2),
                                   v = rt::DeviceBuffer::Allocate(paged.v.size() * 2),
                                   o = rt::DeviceBuffer::Allocate(OBytes(z)),
                                   lse = rt::DeviceBuffer::Allocate(LseBytes(z)),
                                   table = rt::DeviceBuffer::Allocate(ints(paged.table)),
                                   lens = rt::DeviceBuffer::Allocate(ints(paged.lens));
  for (auto* b : {&q, &k, &v, &o, &lse, &table, &lens})
    if (!b->ok()) return b->status();
  for (auto [buffer, host] :
       {std::pair{&*q, &dev.q}, std::pair{&*k, &paged.k}, std::pair{&*v, &paged.v}})
    if (absl::Status st = buffer->CopyFromHost(host->data(), host->size() * 2); !st.ok()) return st;
  for (auto [buffer, host] : {std::pair{&*table, &paged.table}, std::pair{&*lens, &paged.lens}})
    if (absl::Status st = buffer->CopyFromHost(host->data(), host->size() * 4); !st.ok()) return st;
  if (absl::Status st = o->Fill(0xff); !st.ok()) return st;  // NaN until written
  if (absl::Status st = lse->Fill(0xff); !st.ok()) return st;
  rt::AttentionOperands ops = {q->ptr(), k->ptr(), v->ptr(), o->ptr(), lse->ptr()};
  if (page > 0) ops.seq_lens = lens->ptr(), ops.block_table = table->ptr();
  if (absl::Status st = runner.Run(planned, options, ops); !st.ok()) return st;
  if (absl::Status st = rt::Synchronize(); !st.ok()) return st;
  std::vector<uint16_t> ho(OBytes(z) / 2);
  std::vector<float> hl(LseBytes(z) / 4);
  if (absl::Status st = o->CopyToHost(ho.data(), OBytes(z)); !st.ok()) return st;
  if (absl::Status st = lse->CopyToHost(hl.data(), LseBytes(z)); !st.ok()) return st;
  CheckAll(z, options.causal, plan->scale, half, in, ho, hl, seed, r);
  if (iters > 0 && r.passed) {
    absl::StatusOr<double> ms = MedianMs(runner, planned, options, ops, iters, repeats);
    if (!ms.ok()) return ms.status();
    r.ms = *ms;
    r.tflops = rt::AttentionFlops(z, options.causal) / (r.ms * 1e-3) / 1e12;
  }
  return r;
}

absl::StatusOr<AttentionResult> RunAttentionEmulated(const rt::Bundle& bundle,
                                                     const rt::AttentionSize& size,
                                                     const rt::AttentionOptions& options,
                                                     uint64_t seed, const rt::Bundle* combine,
                                                     int64_t page, const rt::Bundle* copy_pages) {
  const rt::AttentionSize z = RowsSize(size);
  if (absl::Status fits = EmulatorTakes(z, {}, 2); !fits.ok()) return fits;
  const bool half = options.dtype == "f16";
  const int cc = bundle.manifest.target == "sm_100a" ? 100 : 90;
  const rt::AttentionOperands fake = {16, 16, 16, 16, 16, 16, 16};  // the checks' pointers only
  absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(PagedSize(z, page), options, fake, cc);
  if (!plan.ok()) return plan.status();
  if (plan->kernel != bundle.manifest.name)
    return absl::InvalidArgumentError(
        absl::StrCat("this problem runs ", plan->kernel, ", not ", bundle.manifest.name));
  // As rt::RunAttention: a split kernel that folds merges its parts itself.
  const bool fold = plan->splits > 1 && rt::FoldsSplits(bundle.manifest, plan->size);
  if (plan->splits > 1 && !fold && (!combine || combine->manifest.name != plan->combine))
    return absl::InvalidArgumentError(
        absl::StrCat("this problem's parts are merged by ", plan->combine, ": pass its bundle"));
  if (!plan->copy_pages.empty() && (!copy_pages || copy_pages->manifest.name != plan->copy_pages))
    return absl::InvalidArgumentError(
        absl::StrCat("this problem's pages are copied by ", plan->copy_pages, ": pass its bundle"));
  AttentionResult r;
  r.kernel = PlannedKernels(*plan), r.size = z, r.causal = options.causal;
  const Inputs in = RandomInputs(z, half, seed), dev = DeviceInputs(z, in);
  const Paged paged = page > 0 ? PageInputs(z, in, page, seed) : Paged{dev.k, dev.v, {}, {}, z};
  emu::Device d;
  absl::StatusOr<uint64_t> q = d.Allocate(dev.q.size() * 2), k = d.Allocate(paged.k.size() * 2),
                           v = d.Allocate(paged.v.size() * 2), o = d.Allocate(OBytes(z)),
                           lse = d.Allocate(LseBytes(z)),
                           table = d.Allocate(std::max<size_t>(paged.table.size() * 4, 4)),
                           lens = d.Allocate(std::max<size_t>(paged.lens.size() * 4, 4));
  for (auto* a : {&q, &k, &v, &o, &lse, &table, &lens})
    if (!a->ok()) return a->status();
  for (auto [at, host] : {std::pair{*q, &dev.q}, std::pair{*k, &paged.k}, std::pair{*v, &paged.v}})
    if (absl::Status st = d.CopyIn(at, host->data(), host->size() * 2); !st.ok()) return st;
  for (auto [at, host] : {std::pair{*table, &paged.table}, std::pair{*lens, &paged.lens}})
    if (absl::Status st = d.CopyIn(at, host->data(), host->size() * 4); !st.ok()) return st;
  // A split plan's parts land in their own buffers (poisoned too), which combine merges.
  uint64_t o_at = *o, lse_at = *lse;
  if (plan->splits > 1) {
    absl::StatusOr<uint64_t> op = d.Allocate(rt::PartsOBytes(*plan)),
                             lp = d.Allocate(rt::PartsLseBytes(*plan));
    if (!op.ok()) return op.status();
    if (!lp.ok()) return lp.status();
    o_at = *op, lse_at = *lp;
    if (absl::Status st = d.Fill(o_at, 0xff, rt::PartsOBytes(*plan)); !st.ok()) return st;
    if (absl::Status st = d.Fill(lse_at, 0xff, rt::PartsLseBytes(*plan)); !st.ok()) return st;
  }
  rt::AttentionOperands ops = {*q, *k, *v, o_at, lse_at};
  if (page > 0) ops.seq_lens = *lens, ops.block_table = *table;
  // The dense K and V a paged cache is copied into (poisoned: the attention kernel reads no row
  // the copy left).
  std::vector<rt::Arg> copied_pages;
  if (!plan->copy_pages.empty()) {
    const int64_t bytes = rt::CopiedBytes(plan->paged);
    absl::StatusOr<uint64_t> kd = d.Allocate(bytes), vd = d.Allocate(bytes);
    if (!kd.ok()) return kd.status();
    if (!vd.ok()) return vd.status();
    for (uint64_t at : {*kd, *vd})
      if (absl::Status st = d.Fill(at, 0xff, bytes); !st.ok()) return st;
    absl::StatusOr<std::vector<rt::Arg>> g =
        rt::CopyPagesArgs(copy_pages->manifest, *plan, ops, *kd, *vd);
    if (!g.ok()) return g.status();
    copied_pages = *std::move(g);
    ops.k = *kd, ops.v = *vd, ops.block_table = 0;
  }
  const rt::FoldedOutputs merged_into{*o, *lse};
  absl::StatusOr<std::vector<rt::Arg>> args = rt::AttentionArgs(
      bundle.manifest, plan->size, plan->scale, ops, plan->splits, fold ? &merged_into : nullptr);
  if (!args.ok()) return args.status();
  std::vector<rt::Arg> merge;
  if (plan->splits > 1 && !fold) {
    absl::StatusOr<std::vector<rt::Arg>> m =
        rt::CombineArgs(combine->manifest, *plan, o_at, lse_at, *o, *lse);
    if (!m.ok()) return m.status();
    merge = *std::move(m);
  }
  // Outputs poisoned, a launch on three SMs (a persistent grid then walks several query tiles per
  // CTA, rings, Q stages and the turn-taking running on across tiles, and leaves a CTA idle where
  // the work is one or two), outputs read back.
  std::vector<uint16_t> ho(OBytes(z) / 2);
  std::vector<float> hl(LseBytes(z) / 4);
  auto run = [&](uint64_t launch_seed) -> absl::Status {
    if (absl::Status st = d.Fill(*o, 0xff, OBytes(z)); !st.ok()) return st;
    if (absl::Status st = d.Fill(*lse, 0xff, LseBytes(z)); !st.ok()) return st;
    if (!copied_pages.empty()) {
      absl::StatusOr<emu::Stats> copied =
          emu::Launch(d, *copy_pages, copied_pages, {.seed = launch_seed});
      if (!copied.ok()) return copied.status();
    }
    absl::StatusOr<emu::Stats> stats =
        emu::Launch(d, bundle, *args, {.seed = launch_seed, .sm_count = 3});
    if (!stats.ok()) return stats.status();
    if (plan->splits > 1 && !fold) {
      absl::StatusOr<emu::Stats> merged = emu::Launch(d, *combine, merge, {.seed = launch_seed});
      if (!merged.ok()) return merged.status();
    }
    if (absl::Status st = d.CopyOut(ho.data(), *o, OBytes(z)); !st.ok()) return st;
    return d.CopyOut(hl.data(), *lse, LseBytes(z));
  };
  if (absl::Status st = run(seed); !st.ok()) return st;
  CheckAll(z, options.causal, plan->scale, half, in, ho, hl, seed, r);
  int64_t pad_written = 0;
  if (!r.passed)
    if (std::string place =
            WrongAttentionPlace(z, options.causal, plan->scale, half, in, HostO(z, ho, pad_written),
                                hl, rt::AttentionBlockM(bundle.manifest), d, *o, *lse);
        !place.empty())
      absl::StrAppend(&r.failure, ": ", place);
  // A second launch on the same device must give the same bytes: a kernel that hands out tiles
  // from a counter must have left it as it found it.
  const std::vector<uint16_t> first_o = ho;
  const std::vector<float> first_lse = hl;
  if (absl::Status st = run(seed + 1); !st.ok()) return st;
  if (r.passed && (ho != first_o || std::memcmp(hl.data(), first_lse.data(), LseBytes(z)) != 0)) {
    r.passed = false;
    r.failure = "a second launch gave other outputs (state left behind by the first)";
  }
  return r;
}

namespace {

absl::StatusOr<AttentionResult> RunVarlen(VarlenDevice& dev, const rt::AttentionSize& size,
                                          const std::vector<int64_t>& lengths,
                                          const rt::AttentionOptions& options, uint64_t seed,
                                          rt::AttentionOperands& ops, rt::AttentionSize& planned) {
  absl::StatusOr<rt::AttentionSize> varlen = VarlenSize(size, lengths);
  if (!varlen.ok()) return varlen.status();
  planned = *varlen;
  const bool half = options.dtype == "f16";
  const int64_t total = planned.total;
  rt::AttentionSize pad = planned;  // the padded dense problem the reference reads
  pad.varlen = false, pad.total = 0;
  absl::StatusOr<rt::AttentionPlan> plan =
      rt::PlanAttention(planned, options, {16, 16, 16, 16, 16, 0, 0, 16}, 90);
  if (!plan.ok()) return plan.status();
  AttentionResult r;
  r.kernel = plan->kernel, r.size = pad, r.causal = options.causal;
  const Inputs in = RandomInputs(pad, half, seed);
  const std::vector<uint16_t> q = PackRows(in.q, pad, pad.hq, lengths),
                              k = PackRows(in.k, pad, pad.hkv, lengths),
                              v = PackRows(in.v, pad, pad.hkv, lengths);
  std::vector<int32_t> cu = {0};
  for (int64_t n : lengths) cu.push_back(static_cast<int32_t>(cu.back() + n));
  const size_t o_bytes = total * pad.hq * pad.d * 2, lse_bytes = pad.hq * total * 4;
  std::vector<uint64_t> at;
  for (size_t bytes :
       {q.size() * 2, k.size() * 2, v.size() * 2, o_bytes, lse_bytes, cu.size() * 4}) {
    absl::StatusOr<uint64_t> a = dev.allocate(bytes);
    if (!a.ok()) return a.status();
    at.push_back(*a);
  }
  for (auto [i, host] : {std::pair{0, &q}, std::pair{1, &k}, std::pair{2, &v}})
    if (absl::Status st = dev.copy_in(at[i], host->data(), host->size() * 2); !st.ok()) return st;
  if (absl::Status st = dev.copy_in(at[5], cu.data(), cu.size() * 4); !st.ok()) return st;
  if (absl::Status st = dev.poison(at[3], o_bytes); !st.ok()) return st;
  if (absl::Status st = dev.poison(at[4], lse_bytes); !st.ok()) return st;
  ops = {at[0], at[1], at[2], at[3], at[4]};
  ops.cu_seqlens = at[5];
  if (absl::Status st = dev.run(planned, ops); !st.ok()) return st;
  std::vector<uint16_t> o(o_bytes / 2);
  std::vector<float> lse(lse_bytes / 4);
  if (absl::Status st = dev.copy_out(o.data(), at[3], o_bytes); !st.ok()) return st;
  if (absl::Status st = dev.copy_out(lse.data(), at[4], lse_bytes); !st.ok()) return st;
  // Back to the padded layout, the padding rows 0 (a NaN left there is a row never written).
  std::vector<uint16_t> dense_o(pad.b * pad.hq * pad.s * pad.d, 0);
  std::vector<float> dense_lse(pad.b * pad.hq * pad.s, 0);
  for (int64_t b = 0; b < pad.b; ++b)
    for (int64_t i = 0; i < lengths[b]; ++i)
      for (int64_t h = 0; h < pad.hq; ++h) {
        const int64_t t = cu[b] + i, row = (b * pad.hq + h) * pad.s + i;
        std::copy_n(&o[(t * pad.hq + h) * pad.d], pad.d, &dense_o[row * pad.d]);
        dense_lse[row] = lse[h * total + t];
      }
  Check(pad, options.causal, plan->scale, half, in, dense_o, dense_lse, seed, r, &lengths);
  return r;
}

double VarlenFlops(const rt::AttentionSize& size, const std::vector<int64_t>& lengths,
                   bool causal) {
  double flops = 0;
  for (int64_t n : lengths) {
    rt::AttentionSize one = size;
    one.b = 1, one.s = one.skv = n;
    flops += rt::AttentionFlops(one, causal);
  }
  return flops;
}

}  // namespace

absl::StatusOr<AttentionResult> RunVarlenAttentionGpu(rt::AttentionRunner& runner,
                                                      const rt::AttentionSize& size,
                                                      const std::vector<int64_t>& lengths,
                                                      const rt::AttentionOptions& options,
                                                      int iters, uint64_t seed, int repeats) {
  std::vector<rt::DeviceBuffer> buffers;
  VarlenDevice dev{
      GpuMemory(buffers),
      [&](const rt::AttentionSize& z, const rt::AttentionOperands& ops) -> absl::Status {
        if (absl::Status st = runner.Run(z, options, ops); !st.ok()) return st;
        return rt::Synchronize();
      }};
  rt::AttentionOperands ops;
  rt::AttentionSize planned;
  absl::StatusOr<AttentionResult> r = RunVarlen(dev, size, lengths, options, seed, ops, planned);
  if (!r.ok() || iters <= 0 || !r->passed) return r;
  absl::StatusOr<double> ms = MedianMs(runner, planned, options, ops, iters, repeats);
  if (!ms.ok()) return ms.status();
  r->ms = *ms;
  r->tflops = VarlenFlops(size, lengths, options.causal) / (r->ms * 1e-3) / 1e12;
  return r;
}

absl::StatusOr<AttentionResult> RunVarlenAttentionEmulated(const rt::Bundle& bundle,
                                                           const rt::AttentionSize& size,
                                                           const std::vector<int64_t>& lengths,
                                                           const rt::AttentionOptions& options,
                                                           uint64_t seed) {
  if (absl::Status fits = EmulatorTakes(size, lengths, 2); !fits.ok()) return fits;
  emu::Device d;
  VarlenDevice dev{
      EmulatorMemory(d),
      [&](const rt::AttentionSize& z, const rt::AttentionOperands& ops) -> absl::Status {
        absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(z, options, ops, 90);
        if (!plan.ok()) return plan.status();
        if (plan->kernel != bundle.manifest.name)
          return absl::InvalidArgumentError(
              absl::StrCat("this problem runs ", plan->kernel, ", not ", bundle.manifest.name));
        absl::StatusOr<std::vector<rt::Arg>> args =
            rt::AttentionArgs(bundle.manifest, plan->size, plan->scale, ops);
        if (!args.ok()) return args.status();
        absl::StatusOr<emu::Stats> stats =
            emu::Launch(d, bundle, *args, {.seed = seed, .sm_count = 3});
        return stats.ok() ? absl::OkStatus() : stats.status();
      }};
  rt::AttentionOperands ops;
  rt::AttentionSize planned;
  return RunVarlen(dev, size, lengths, options, seed, ops, planned);
}

}  // namespace kiln::examples
