#include "examples/row_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/host_data.h"
#include "examples/timing.h"
#include "kiln/emulator.h"
#include "kiln/runtime/launch.h"

namespace kiln::examples {
namespace {

constexpr float kEps = 1e-5f;

// A row op: which, and its element type (bf16; f16 or f32 for the kernels named *.f16, *.f32).
struct Op {
  enum Kind { kSoftmax, kRmsNorm, kLayerNorm } kind;
  enum Type { kBf16, kF16, kF32 } type = kBf16;
  size_t Bytes() const { return type == kF32 ? 4 : 2; }
  // Element i of an array of this type.
  double At(const uint8_t* p, size_t i) const {
    if (type == kF32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return type == kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
  }
};

absl::StatusOr<Op> OpOf(const std::string& name) {
  const std::string suffix = name.size() > 4 ? name.substr(name.size() - 4) : "";
  const Op::Type type = suffix == ".f16" ? Op::kF16 : suffix == ".f32" ? Op::kF32 : Op::kBf16;
  const std::string base = type == Op::kBf16 ? name : name.substr(0, name.size() - 4);
  if (base == "ops/softmax") return Op{Op::kSoftmax, type};
  if (base == "ops/rmsnorm") return Op{Op::kRmsNorm, type};
  if (base == "ops/layernorm") return Op{Op::kLayerNorm, type};
  return absl::NotFoundError(absl::StrCat(
      name, " is not a row op (ops/softmax, ops/rmsnorm, ops/layernorm, each also .f16, .f32)"));
}

// n samples of normal(0, 1) as `op`'s elements. f32 ones carry bits past bf16's (a second draw
// at 2^-8), so that a kernel reading or writing them through a 16-bit type fails.
std::vector<uint8_t> RandomRow(Op op, size_t n, uint64_t seed) {
  std::vector<uint16_t> a = RandomNormal16(n, seed, op.type == Op::kF16);
  std::vector<uint8_t> out(n * op.Bytes());
  if (op.type != Op::kF32) {
    std::memcpy(out.data(), a.data(), out.size());
    return out;
  }
  std::vector<uint16_t> fine = RandomNormal16(n, seed ^ 0x9e3779b97f4a7c15ull, false);
  for (size_t i = 0; i < n; ++i) {
    const float f = Bf16ToFloat(a[i]) + Bf16ToFloat(fine[i]) * (1.0f / 256);
    std::memcpy(&out[4 * i], &f, 4);
  }
  return out;
}

// The reference: one row in fp64 from the inputs as the kernel read them.
void ReferenceRow(Op op, const uint8_t* x, const uint8_t* w, const uint8_t* b, int64_t n,
                  double* y) {
  auto at = [&](const uint8_t* p, int64_t i) { return op.At(p, i); };
  if (op.kind == Op::kSoftmax) {
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, at(x, i));
    for (int64_t i = 0; i < n; ++i) sum += y[i] = std::exp(at(x, i) - m);
    for (int64_t i = 0; i < n; ++i) y[i] /= sum;
    return;
  }
  double mean = 0, ss = 0;
  if (op.kind == Op::kLayerNorm) {
    for (int64_t i = 0; i < n; ++i) mean += at(x, i);
    mean /= n;
  }
  for (int64_t i = 0; i < n; ++i) ss += (at(x, i) - mean) * (at(x, i) - mean);
  const double scale = 1.0 / std::sqrt(ss / n + kEps);
  for (int64_t i = 0; i < n; ++i)
    y[i] = (at(x, i) - mean) * scale * at(w, i) + (op.kind == Op::kLayerNorm ? at(b, i) : 0.0);
}

// The kernel's arguments, by its parameters: x[, w][, b], y, rows, cols[, eps].
std::vector<rt::Arg> ArgsFor(Op op, uint64_t x, uint64_t w, uint64_t b, uint64_t y, int64_t rows,
                             int64_t cols) {
  std::vector<rt::Arg> args = {rt::Arg::Ptr(x)};
  if (op.kind != Op::kSoftmax) args.push_back(rt::Arg::Ptr(w));
  if (op.kind == Op::kLayerNorm) args.push_back(rt::Arg::Ptr(b));
  args.push_back(rt::Arg::Ptr(y));
  args.push_back(rt::Arg::I32(static_cast<int32_t>(rows)));
  args.push_back(rt::Arg::I32(static_cast<int32_t>(cols)));
  if (op.kind != Op::kSoftmax) args.push_back(rt::Arg::F32(kEps));
  return args;
}

// Checks y (rows x cols, then 8 poisoned elements past the end) against the fp64 reference on
// up to 512 rows spread over the matrix (first and last included); fills r's verdict.
void CheckOutput(Op op, const std::vector<uint8_t>& x, const std::vector<uint8_t>& w,
                 const std::vector<uint8_t>& b, const std::vector<uint8_t>& y, int64_t rows,
                 int64_t cols, RowOpResult* r) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = n * op.Bytes(); i < y.size(); ++i)
    if (y[i] != 0xff) r->failure = "wrote past the end of the output";
  int64_t nans = 0;
  for (size_t i = 0; i < n; ++i) nans += std::isnan(op.At(y.data(), i));
  if (nans) r->failure = absl::StrCat(nans, " NaN or unwritten elements");
  const int64_t step = std::max<int64_t>(1, rows / 512);
  std::vector<double> ref(cols);
  double err = 0, norm = 0;
  std::vector<int64_t> checked;
  for (int64_t row = 0; row < rows; row += step) checked.push_back(row);
  if (checked.back() != rows - 1) checked.push_back(rows - 1);
  for (int64_t row : checked) {
    ReferenceRow(op, &x[row * cols * op.Bytes()], w.data(), b.data(), cols, ref.data());
    for (int64_t i = 0; i < cols; ++i) {
      const double d = op.At(y.data(), row * cols + i) - ref[i];
      err += d * d, norm += ref[i] * ref[i];
    }
  }
  r->rows_checked = static_cast<int64_t>(checked.size());
  r->rel_error = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
  // A correct kernel's error is about its bf16 output's rounding (half an ulp an element, 2^-9
  // relative; f16's is 2^-12) and f32 arithmetic far below it: the tolerance is half again bf16's
  // rounding, so that a result off by half a percent everywhere fails. In f32 the approximate
  // ex2, rcp and rsqrt (a few ulps of 2^-24) are the error: the tolerance is far under a 16-bit
  // type's rounding anywhere.
  r->tolerance = op.type == Op::kF32 ? 1e-5 : 3e-3;
  if (r->failure.empty() && !(r->rel_error <= r->tolerance))
    r->failure = absl::StrFormat("error %.3g over tolerance %.3g", r->rel_error, r->tolerance);
  r->passed = r->failure.empty();
}

// Where a wrong row-op output comes from: its first wrong element (row-major; WrongElementLimit
// over its row's reference) and the block, thread and instruction that last wrote it (the
// emulator's write sites). Empty when no element is.
std::string WrongRowPlace(Op op, const std::vector<uint8_t>& x, const std::vector<uint8_t>& w,
                          const std::vector<uint8_t>& b, const std::vector<uint8_t>& y,
                          int64_t rows, int64_t cols, double tolerance, const emu::Device& d,
                          uint64_t dy) {
  std::vector<double> ref(cols);
  for (int64_t row = 0; row < rows; ++row) {
    ReferenceRow(op, &x[row * cols * op.Bytes()], w.data(), b.data(), cols, ref.data());
    double ref2 = 0;
    for (double v : ref) ref2 += v * v;
    const double limit = WrongElementLimit(tolerance, ref2, cols);
    for (int64_t i = 0; i < cols; ++i) {
      const double got = op.At(y.data(), row * cols + i);
      if (!IsWrongElement(got, ref[i], limit)) continue;
      std::string place = absl::StrFormat(": the first wrong element: y[%d][%d] = %g (want %g), ",
                                          row, i, got, ref[i]);
      const std::optional<emu::Device::WriteSite> site =
          d.LastWrite(dy + (row * cols + i) * op.Bytes());
      return place + (site ? site->Describe() : "never written");
    }
  }
  return "";
}

}  // namespace

bool IsRowOp(const std::string& name) { return OpOf(name).ok(); }

absl::StatusOr<RowOpResult> RunRowOp(const rt::Bundle& bundle, const RowOpOptions& opt) {
  const rt::Manifest& m = bundle.manifest;
  absl::StatusOr<Op> op = OpOf(m.name);
  if (!op.ok()) return op.status();
  const int64_t rows = opt.rows, cols = opt.cols;
  if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": rows and cols must be in 1..2^31-1, not ", rows, "x", cols));
  absl::StatusOr<rt::LoadedKernel> kernel = rt::LoadedKernel::Load(bundle);
  if (!kernel.ok()) return kernel.status();
  const size_t n = static_cast<size_t>(rows) * cols, eb = op->Bytes(), bytes = n * eb;
  // Device buffers first: a shape too large for the GPU is an error from the driver here, before
  // the host copies of that size are made.
  absl::StatusOr<rt::DeviceBuffer> dx = rt::DeviceBuffer::Allocate(bytes),
                                   dy = rt::DeviceBuffer::Allocate(bytes + 8 * eb),
                                   dw = rt::DeviceBuffer::Allocate(cols * eb),
                                   db = rt::DeviceBuffer::Allocate(cols * eb);
  for (auto* buf : {&dx, &dy, &dw, &db})
    if (!buf->ok()) return buf->status();
  std::vector<uint8_t> x = RandomRow(*op, n, opt.seed);
  std::vector<uint8_t> w = RandomRow(*op, cols, opt.seed + 1),
                       b = RandomRow(*op, cols, opt.seed + 2);
  if (absl::Status s = dx->CopyFromHost(x.data(), bytes); !s.ok()) return s;
  if (absl::Status s = dw->CopyFromHost(w.data(), cols * eb); !s.ok()) return s;
  if (absl::Status s = db->CopyFromHost(b.data(), cols * eb); !s.ok()) return s;
  if (absl::Status s = dy->Fill(0xff); !s.ok())
    return s;  // all ones is a NaN in bf16, f16 and f32: an unwritten element fails

  std::vector<rt::Arg> args = ArgsFor(*op, dx->ptr(), dw->ptr(), db->ptr(), dy->ptr(), rows, cols);
  auto launch = [&]() -> absl::Status { return kernel->Launch(args); };
  if (absl::Status s = launch(); !s.ok()) return s;
  if (absl::Status s = rt::Synchronize(); !s.ok()) return s;

  RowOpResult r;
  r.name = m.name, r.rows = rows, r.cols = cols;
  std::vector<uint8_t> y(bytes + 8 * eb);
  if (absl::Status s = dy->CopyToHost(y.data(), y.size()); !s.ok()) return s;
  CheckOutput(*op, x, w, b, y, rows, cols, &r);
  if (!opt.time) return r;

  absl::StatusOr<rt::DeviceBuffer> scratch = rt::DeviceBuffer::Allocate(bytes);
  if (!scratch.ok()) return scratch.status();
  auto copy = [&]() -> absl::Status { return scratch->CopyFrom(*dx, bytes); };
  std::vector<std::function<absl::Status()>> fns = {launch, copy};
  absl::StatusOr<std::vector<double>> ms = InterleavedMediansMs(fns, opt.warmup, opt.iterations);
  if (!ms.ok()) return ms.status();
  const double params = op->kind == Op::kSoftmax   ? 0
                        : op->kind == Op::kRmsNorm ? cols * double(eb)
                                                   : cols * 2.0 * eb;
  r.ms = (*ms)[0], r.copy_ms = (*ms)[1];
  r.gbps = (2.0 * bytes + params) / (r.ms * 1e6);
  r.copy_gbps = 2.0 * bytes / (r.copy_ms * 1e6);
  return r;
}

absl::Status CheckEmulatedRowOpSize(const std::string& name, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", rows, "x", cols, ": rows and columns at least 1"));
  if (rows > (int64_t{1} << 26) / cols)
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the emulator takes up to 2^26 elements, not ", rows, "x", cols));
  return absl::OkStatus();
}

absl::StatusOr<RowOpResult> EmulateRowOp(const rt::Bundle& bundle, const RowOpOptions& opt,
                                         uint64_t schedule_seed) {
  const rt::Manifest& m = bundle.manifest;
  absl::StatusOr<Op> op = OpOf(m.name);
  if (!op.ok()) return op.status();
  const int64_t rows = opt.rows, cols = opt.cols;
  if (absl::Status fits = CheckEmulatedRowOpSize(m.name, rows, cols); !fits.ok()) return fits;
  const size_t n = static_cast<size_t>(rows) * cols, eb = op->Bytes(), bytes = n * eb;
  emu::Device d;
  uint64_t dx = *d.Allocate(bytes), dy = *d.Allocate(bytes + 8 * eb), dw = *d.Allocate(cols * eb),
           db = *d.Allocate(cols * eb);
  std::vector<uint8_t> x = RandomRow(*op, n, opt.seed);
  std::vector<uint8_t> w = RandomRow(*op, cols, opt.seed + 1),
                       b = RandomRow(*op, cols, opt.seed + 2);
  for (auto [to, from, size] :
       {std::tuple{dx, x.data(), bytes}, std::tuple{dw, w.data(), cols * eb},
        std::tuple{db, b.data(), cols * eb}})
    if (absl::Status s = d.CopyIn(to, from, size); !s.ok()) return s;
  if (absl::Status s = d.Fill(dy, 0xff, bytes + 8 * eb); !s.ok()) return s;
  absl::StatusOr<emu::Stats> stats =
      emu::Launch(d, bundle, ArgsFor(*op, dx, dw, db, dy, rows, cols), {.seed = schedule_seed});
  if (!stats.ok()) return stats.status();
  RowOpResult r;
  r.name = m.name, r.rows = rows, r.cols = cols;
  std::vector<uint8_t> y(bytes + 8 * eb);
  if (absl::Status s = d.CopyOut(y.data(), dy, y.size()); !s.ok()) return s;
  CheckOutput(*op, x, w, b, y, rows, cols, &r);
  if (!r.passed)
    absl::StrAppend(&r.failure, WrongRowPlace(*op, x, w, b, y, rows, cols, r.tolerance, d, dy));
  return r;
}

std::string RowOpTableHeader() {
  return absl::StrFormat("%-16s %-12s %9s %9s %9s %7s %9s  %s", "op", "rows x cols", "ms", "GB/s",
                         "copy GB/s", "ratio", "rel.err", "check");
}

std::string RowOpTableRow(const RowOpResult& r) {
  return absl::StrFormat("%-16s %-12s %9.4f %9.0f %9.0f %7.3f %9.2e  %s", r.name,
                         absl::StrCat(r.rows, "x", r.cols), r.ms, r.gbps, r.copy_gbps,
                         r.copy_gbps > 0 ? r.gbps / r.copy_gbps : 0.0, r.rel_error,
                         r.passed ? "ok" : "FAIL: " + r.failure);
}

std::string RowOpTsvRow(const RowOpResult& r) {
  return absl::StrFormat("%s\t%d\t%d\t%.4f\t%.1f\t%.4f\t%.1f\t%.4f\t%.3e\t%s", r.name, r.rows,
                         r.cols, r.ms, r.gbps, r.copy_ms, r.copy_gbps,
                         r.copy_gbps > 0 ? r.gbps / r.copy_gbps : 0.0, r.rel_error,
                         r.passed ? "ok" : "fail");
}

}  // namespace kiln::examples
