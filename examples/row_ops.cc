#include "examples/row_ops.h"

#include <algorithm>
#include <cmath>
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

// A row op: which, and its element type (bf16, or f16 for the kernels named *.f16).
struct Op {
  enum Kind { kSoftmax, kRmsNorm, kLayerNorm } kind;
  bool half = false;
  double At(uint16_t v) const { return half ? HalfToFloat(v) : Bf16ToFloat(v); }
};

absl::StatusOr<Op> OpOf(const std::string& name) {
  const bool half = name.size() > 4 && name.compare(name.size() - 4, 4, ".f16") == 0;
  const std::string base = half ? name.substr(0, name.size() - 4) : name;
  if (base == "ops/softmax") return Op{Op::kSoftmax, half};
  if (base == "ops/rmsnorm") return Op{Op::kRmsNorm, half};
  if (base == "ops/layernorm") return Op{Op::kLayerNorm, half};
  return absl::NotFoundError(absl::StrCat(
      name, " is not a row op (ops/softmax, ops/rmsnorm, ops/layernorm, each also .f16)"));
}

// The reference: one row in fp64 from the 16-bit inputs (as the kernel read them).
void ReferenceRow(Op op, const uint16_t* x, const uint16_t* w, const uint16_t* b, int64_t n,
                  double* y) {
  auto at = [&](const uint16_t* p, int64_t i) { return op.At(p[i]); };
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
void CheckOutput(Op op, const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                 const std::vector<uint16_t>& b, const std::vector<uint16_t>& y, int64_t rows,
                 int64_t cols, RowOpResult* r) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = n; i < n + 8; ++i)
    if (y[i] != 0xffff) r->failure = "wrote past the end of the output";
  int64_t nans = 0;
  for (size_t i = 0; i < n; ++i) nans += std::isnan(op.At(y[i]));
  if (nans) r->failure = absl::StrCat(nans, " NaN or unwritten elements");
  const int64_t step = std::max<int64_t>(1, rows / 512);
  std::vector<double> ref(cols);
  double err = 0, norm = 0;
  std::vector<int64_t> checked;
  for (int64_t row = 0; row < rows; row += step) checked.push_back(row);
  if (checked.back() != rows - 1) checked.push_back(rows - 1);
  for (int64_t row : checked) {
    ReferenceRow(op, &x[row * cols], w.data(), b.data(), cols, ref.data());
    for (int64_t i = 0; i < cols; ++i) {
      const double d = op.At(y[row * cols + i]) - ref[i];
      err += d * d, norm += ref[i] * ref[i];
    }
  }
  r->rows_checked = static_cast<int64_t>(checked.size());
  r->rel_error = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
  // A correct kernel's error is about its bf16 output's rounding (half an ulp an element, 2^-9
  // relative; f16's is 2^-12) and f32 arithmetic far below it: the tolerance is half again bf16's
  // rounding, so that a result off by half a percent everywhere fails.
  r->tolerance = 3e-3;
  if (r->failure.empty() && !(r->rel_error <= r->tolerance))
    r->failure = absl::StrFormat("error %.3g over tolerance %.3g", r->rel_error, r->tolerance);
  r->passed = r->failure.empty();
}

// Where a wrong row-op output comes from: its first wrong element (row-major; WrongElementLimit
// over its row's reference) and the block, thread and instruction that last wrote it (the
// emulator's write sites). Empty when no element is.
std::string WrongRowPlace(Op op, const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                          const std::vector<uint16_t>& b, const std::vector<uint16_t>& y,
                          int64_t rows, int64_t cols, double tolerance, const emu::Device& d,
                          uint64_t dy) {
  std::vector<double> ref(cols);
  for (int64_t row = 0; row < rows; ++row) {
    ReferenceRow(op, &x[row * cols], w.data(), b.data(), cols, ref.data());
    double ref2 = 0;
    for (double v : ref) ref2 += v * v;
    const double limit = WrongElementLimit(tolerance, ref2, cols);
    for (int64_t i = 0; i < cols; ++i) {
      const double got = op.At(y[row * cols + i]);
      if (!IsWrongElement(got, ref[i], limit)) continue;
      std::string place = absl::StrFormat(": the first wrong element: y[%d][%d] = %g (want %g), ",
                                          row, i, got, ref[i]);
      const std::optional<emu::Device::WriteSite> site = d.LastWrite(dy + (row * cols + i) * 2);
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
  const size_t n = static_cast<size_t>(rows) * cols, bytes = n * 2;
  // Device buffers first: a shape too large for the GPU is an error from the driver here, before
  // the host copies of that size are made.
  absl::StatusOr<rt::DeviceBuffer> dx = rt::DeviceBuffer::Allocate(bytes),
                                   dy = rt::DeviceBuffer::Allocate(bytes + 16),
                                   dw = rt::DeviceBuffer::Allocate(cols * 2),
                                   db = rt::DeviceBuffer::Allocate(cols * 2);
  for (auto* buf : {&dx, &dy, &dw, &db})
    if (!buf->ok()) return buf->status();
  std::vector<uint16_t> x = RandomNormal16(n, opt.seed, op->half);
  std::vector<uint16_t> w = RandomNormal16(cols, opt.seed + 1, op->half),
                        b = RandomNormal16(cols, opt.seed + 2, op->half);
  if (absl::Status s = dx->CopyFromHost(x.data(), bytes); !s.ok()) return s;
  if (absl::Status s = dw->CopyFromHost(w.data(), cols * 2); !s.ok()) return s;
  if (absl::Status s = db->CopyFromHost(b.data(), cols * 2); !s.ok()) return s;
  if (absl::Status s = dy->Fill(0xff); !s.ok())
    return s;  // 0xffff is a NaN in bf16 and f16: an unwritten element fails

  std::vector<rt::Arg> args = ArgsFor(*op, dx->ptr(), dw->ptr(), db->ptr(), dy->ptr(), rows, cols);
  auto launch = [&]() -> absl::Status { return kernel->Launch(args); };
  if (absl::Status s = launch(); !s.ok()) return s;
  if (absl::Status s = rt::Synchronize(); !s.ok()) return s;

  RowOpResult r;
  r.name = m.name, r.rows = rows, r.cols = cols;
  std::vector<uint16_t> y(n + 8);
  if (absl::Status s = dy->CopyToHost(y.data(), bytes + 16); !s.ok()) return s;
  CheckOutput(*op, x, w, b, y, rows, cols, &r);
  if (!opt.time) return r;

  absl::StatusOr<rt::DeviceBuffer> scratch = rt::DeviceBuffer::Allocate(bytes);
  if (!scratch.ok()) return scratch.status();
  auto copy = [&]() -> absl::Status { return scratch->CopyFrom(*dx, bytes); };
  std::vector<std::function<absl::Status()>> fns = {launch, copy};
  absl::StatusOr<std::vector<double>> ms = InterleavedMediansMs(fns, opt.warmup, opt.iterations);
  if (!ms.ok()) return ms.status();
  const double params = op->kind == Op::kSoftmax   ? 0
                        : op->kind == Op::kRmsNorm ? cols * 2.0
                                                   : cols * 4.0;
  r.ms = (*ms)[0], r.copy_ms = (*ms)[1];
  r.gbps = (2.0 * bytes + params) / (r.ms * 1e6);
  r.copy_gbps = 2.0 * bytes / (r.copy_ms * 1e6);
  return r;
}

absl::StatusOr<RowOpResult> EmulateRowOp(const rt::Bundle& bundle, const RowOpOptions& opt,
                                         uint64_t schedule_seed) {
  const rt::Manifest& m = bundle.manifest;
  absl::StatusOr<Op> op = OpOf(m.name);
  if (!op.ok()) return op.status();
  const int64_t rows = opt.rows, cols = opt.cols;
  if (rows < 1 || cols < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": ", rows, "x", cols, ": rows and columns at least 1"));
  if (rows * cols > (int64_t{1} << 26))
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": the emulator takes up to 2^26 elements, not ", rows, "x", cols));
  const size_t n = static_cast<size_t>(rows) * cols, bytes = n * 2;
  emu::Device d;
  uint64_t dx = *d.Allocate(bytes), dy = *d.Allocate(bytes + 16), dw = *d.Allocate(cols * 2),
           db = *d.Allocate(cols * 2);
  std::vector<uint16_t> x = RandomNormal16(n, opt.seed, op->half);
  std::vector<uint16_t> w = RandomNormal16(cols, opt.seed + 1, op->half),
                        b = RandomNormal16(cols, opt.seed + 2, op->half);
  for (auto [to, from, size] :
       {std::tuple{dx, x.data(), bytes}, std::tuple{dw, w.data(), size_t(cols) * 2},
        std::tuple{db, b.data(), size_t(cols) * 2}})
    if (absl::Status s = d.CopyIn(to, from, size); !s.ok()) return s;
  if (absl::Status s = d.Fill(dy, 0xff, bytes + 16); !s.ok()) return s;
  absl::StatusOr<emu::Stats> stats =
      emu::Launch(d, bundle, ArgsFor(*op, dx, dw, db, dy, rows, cols), {.seed = schedule_seed});
  if (!stats.ok()) return stats.status();
  RowOpResult r;
  r.name = m.name, r.rows = rows, r.cols = cols;
  std::vector<uint16_t> y(n + 8);
  if (absl::Status s = d.CopyOut(y.data(), dy, bytes + 16); !s.ok()) return s;
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
