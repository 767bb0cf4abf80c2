// The row ops over the last dimension: y = softmax(x), rms_norm(x) * w, layer_norm(x) * w + b.
// CUDA tensors: bf16, f16 or f32 in and out (ops/softmax, ops/softmax.f16, ops/softmax.f32, ...),
// launched on the caller's stream. Host arrays: f32, run on the emulator by the f32 kernels.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

// x's and out's rows and columns (every dimension but the last, and the last).
std::pair<int64_t, int64_t> RowsCols(const std::string& call, const Array& x, const Array& out) {
  if (x.ndim() < 1) throw Error(call + ": x must have at least one dimension");
  if (ShapeOf(x) != ShapeOf(out))
    throw Error(absl::StrCat(call, ": out has shape ", ShapeText(out), ", x ", ShapeText(x)));
  const int64_t cols = static_cast<int64_t>(x.shape(x.ndim() - 1));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.ndim(); ++i) rows *= static_cast<int64_t>(x.shape(i));
  if (rows > INT32_MAX || cols > INT32_MAX)
    throw Error(absl::StrCat(call, ": x of shape ", ShapeText(x),
                             " must have at most 2^31-1 rows and columns"));
  return {rows, cols};
}

void RowOp(const std::string& call, const char* kernel, const Array& x, std::optional<Array> w,
           std::optional<Array> b, Array& out, float eps, uint64_t stream) {
  CallDevice d(call, {&x, w ? &*w : nullptr, b ? &*b : nullptr, &out}, stream);
  // x's type names the kernel and is every other array's.
  Require(x, call, "x", -1,
          d.emulated() ? std::vector<std::string>{"f32"}
                       : std::vector<std::string>{"bf16", "f16", "f32"});
  const std::string type = DtypeName(x);
  const std::vector<std::string> types = {type};
  Require(out, call, "out", -1, types, true, /*result=*/true);
  const auto [rows, cols] = RowsCols(call, x, out);
  for (const auto& [what, a] : {std::pair{"weight", &w}, std::pair{"bias", &b}})
    if (*a) {
      Require(**a, call, what, 1, types);
      if (static_cast<int64_t>((*a)->shape(0)) != cols)
        throw Error(absl::StrCat(call, ": ", what, " has shape ", ShapeText(**a), "; x has ", cols,
                                 " columns"));
    }
  if (rows == 0 || cols == 0) return;  // an empty x: out is empty too, nothing to launch
  // The emulator's bound (a row op reads every element of x): past it, a message, not minutes.
  if (d.emulated()) {
    ThrowIfError(emu::CheckProblemSize(
        call, {{absl::StrCat("x of shape ", ShapeText(x)), static_cast<double>(rows) * cols}},
        static_cast<double>(rows) * cols));
    // A row costs the emulator at least a warp's pass (a hundred elements' worth or more):
    // many short rows are bounded as that many elements.
    constexpr int64_t kMostRows = int64_t{1} << 19;
    if (rows > kMostRows)
      throw Error(absl::StrCat(call, ": x of shape ", ShapeText(x), " has ", rows,
                               " rows; the emulator takes up to 2^19 (each costs it a warp's pass; "
                               "run it on a GPU)"));
  }
  std::vector<rt::Arg> args = {rt::Arg::Ptr(d.Bind(x, /*read_only=*/true))};
  if (w) args.push_back(rt::Arg::Ptr(d.Bind(*w, /*read_only=*/true)));
  if (b) args.push_back(rt::Arg::Ptr(d.Bind(*b, /*read_only=*/true)));
  args.push_back(rt::Arg::Ptr(d.Bind(out)));
  args.push_back(rt::Arg::I32(static_cast<int32_t>(rows)));
  args.push_back(rt::Arg::I32(static_cast<int32_t>(cols)));
  if (w) args.push_back(rt::Arg::F32(eps));
  d.Launch(BundleNamed(absl::StrCat(kernel, type == "bf16" ? "" : "." + type)), args);
  d.Finish();
}

}  // namespace

void BindRowOps(nb::module_& m) {
  m.def(
      "_softmax",
      [](const Array& x, Array out, uint64_t stream) {
        RowOp("kiln.softmax", "ops/softmax", x, std::nullopt, std::nullopt, out, 0, stream);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("stream") = 0);
  m.def(
      "_rms_norm",
      [](const Array& x, const Array& w, Array out, float eps, uint64_t stream) {
        RowOp("kiln.rms_norm", "ops/rmsnorm", x, w, std::nullopt, out, eps, stream);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("out"), nb::arg("eps"), nb::arg("stream") = 0);
  m.def(
      "_layer_norm",
      [](const Array& x, const Array& w, const Array& b, Array out, float eps, uint64_t stream) {
        RowOp("kiln.layer_norm", "ops/layernorm", x, w, b, out, eps, stream);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("b"), nb::arg("out"), nb::arg("eps"),
      nb::arg("stream") = 0);
}

}  // namespace kiln::py
