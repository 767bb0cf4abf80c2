// kiln.grouped_gemm: out[t] = x[t] @ w[e].T for each token t of expert e (kiln/ops/grouped_gemm.h).
// Contiguous: x (T, K), out (T, N), `sizes` the int32 ends of the experts' rows (torch's offs);
// masked: x (E, C, K), out (E, C, N), `sizes` each expert's count. w (E, N, K), row-major. CUDA
// tensors (bf16) run through rt::GemmRunner on the caller's stream; host arrays (f32, run as bf16)
// on the emulator. With scales, x and w are e4m3 bytes (uint8; the kiln package views torch's
// float8_e4m3fn so): scale_x per 1 x 128 of each of x's rows, (rows, ceil(K/128)) with the rows
// contiguous (kiln.quantize_e4m3's), scale_w per 128 x 128 of each expert's weights,
// (E, N/128, ceil(K/128)) row-major.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ops/gemm.h"
#include "python/bindings/bindings.h"
#include "python/bindings/call_device.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace nb = nanobind;

namespace kiln::py {
namespace {

constexpr const char* kCall = "kiln.grouped_gemm";

// Whether each row of out (T rows, or E x C) belongs to an expert: contiguous, the rows before the
// last expert's end; masked, each expert's first `count` of its C (host `sizes`, checked).
std::vector<bool> OwnedRows(const Array& sizes, bool masked, int64_t rows, int64_t experts) {
  const auto* at = reinterpret_cast<const int32_t*>(Address(sizes));
  std::vector<bool> owned(static_cast<size_t>(rows), false);
  if (experts == 0) return owned;
  if (!masked) {
    const int64_t end = std::clamp<int64_t>(at[experts - 1], 0, rows);
    std::fill(owned.begin(), owned.begin() + end, true);
    return owned;
  }
  const int64_t capacity = rows / experts;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t count = std::clamp<int64_t>(at[e], 0, capacity);
    std::fill(owned.begin() + e * capacity, owned.begin() + e * capacity + count, true);
  }
  return owned;
}

void GroupedGemm(const Array& x, const Array& w, Array out, const Array& sizes,
                 std::optional<Array> scale_x, std::optional<Array> scale_w, bool masked,
                 uint64_t stream) {
  const bool fp8 = scale_x.has_value();
  const int rank = masked ? 3 : 2;
  if (x.ndim() != static_cast<size_t>(rank) || out.ndim() != static_cast<size_t>(rank) ||
      w.ndim() != 3 || sizes.ndim() != 1)
    throw Error(absl::StrCat(kCall, ": x and out must have rank ", rank,
                             masked ? " (experts, capacity, ...)" : " (tokens, ...)",
                             ", w rank 3 (experts, N, K) and offsets or counts rank 1, not x ",
                             ShapeText(x), ", w ", ShapeText(w), ", out ", ShapeText(out),
                             ", offsets or counts ", ShapeText(sizes)));
  const int64_t E = w.shape(0), N = w.shape(1), K = w.shape(2);
  const int64_t rows = masked ? x.shape(0) * x.shape(1) : x.shape(0);
  const bool fits = static_cast<int64_t>(x.shape(rank - 1)) == K &&
                    static_cast<int64_t>(out.shape(rank - 1)) == N &&
                    static_cast<int64_t>(sizes.shape(0)) == E &&
                    (!masked || static_cast<int64_t>(x.shape(0)) == E) &&
                    (masked ? out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1)
                            : out.shape(0) == x.shape(0));
  if (!fits)
    throw Error(absl::StrCat(kCall, ": x ", ShapeText(x), ", w ", ShapeText(w), ", out ",
                             ShapeText(out), " and ", masked ? "counts " : "offsets ",
                             ShapeText(sizes), " do not make ",
                             masked ? "(E, C, K) x (E, N, K) -> (E, C, N) with E counts"
                                    : "(T, K) x (E, N, K) -> (T, N) with E ends"));
  std::vector<const Array*> arrays = {&x, &w, &out, &sizes};
  const int64_t k_blocks = (K + 127) / 128;
  if (fp8) {
    if (!scale_w) throw Error(absl::StrCat(kCall, ": e4m3 x and w need both scale_x and scale_w"));
    for (const auto& [what, a] : {std::pair{"x", &x}, std::pair{"w", &w}})
      if (a->dtype().bits != 8)
        throw Error(absl::StrCat(kCall, ": scale_x and scale_w are for e4m3 x and w (8-bit: uint8 ",
                                 "or float8_e4m3fn); ", what, " is ", DtypeName(*a)));
    // scale_x (rows, KB), rows contiguous; scale_w (E, N/128, KB) packed.
    const Array &sx = *scale_x, &sw = *scale_w;
    if (N % 128)
      throw Error(absl::StrCat(kCall, ": e4m3 x and w take N a multiple of 128 (a scale_w per ",
                               "128 x 128 block), not ", N));
    const bool x_shape = sx.ndim() == 2 && static_cast<int64_t>(sx.shape(0)) == rows &&
                         static_cast<int64_t>(sx.shape(1)) == k_blocks;
    if (!x_shape)
      throw Error(absl::StrCat(kCall, ": scale_x must be (", rows, ", ", k_blocks,
                               ") (a row's scale per 128 of K), not ", ShapeText(sx)));
    if (!((rows == 1 || sx.stride(0) == 1) && (k_blocks == 1 || sx.stride(1) == rows)))
      throw Error(absl::StrCat(
          kCall, ": scale_x (", rows, ", ", k_blocks,
          ") must have its rows contiguous (a column-major array, as kiln.quantize_e4m3 returns "
          "it: its transpose's memory); its strides are ",
          sx.stride(0), " and ", sx.stride(1), " elements"));
    if (!(sw.ndim() == 3 && static_cast<int64_t>(sw.shape(0)) == E &&
          static_cast<int64_t>(sw.shape(1)) * 128 == N &&
          static_cast<int64_t>(sw.shape(2)) == k_blocks))
      throw Error(absl::StrCat(kCall, ": scale_w must be (", E, ", ", N / 128, ", ", k_blocks,
                               ") (a scale per 128 x 128 block of each expert), not ",
                               ShapeText(sw)));
    if (!IsContiguous(sw))
      throw Error(absl::StrCat(kCall, ": scale_w ", ShapeText(sw), " must be packed (row-major)"));
    arrays.push_back(&sx), arrays.push_back(&sw);
  }
  CallDevice d(kCall, arrays, stream);
  Require(sizes, kCall, masked ? "counts" : "offsets", 1, {"i32"});
  const rt::GroupedGemmSize size{.rows = rows, .n = N, .k = K, .groups = static_cast<int>(E)};
  const rt::GroupedGemmOptions options{
      .layout = masked ? rt::GroupedLayout::kMasked : rt::GroupedLayout::kContiguous,
      .in_type = fp8 ? "e4m3" : "bf16"};
  const std::string in = fp8 ? "u8" : d.emulated() ? "f32" : "bf16";
  Require(x, kCall, "x", rank, {in});
  Require(w, kCall, "w", 3, {in});
  if (fp8) {
    Require(*scale_x, kCall, "scale_x", 2, {"f32"}, /*contiguous=*/false);
    Require(*scale_w, kCall, "scale_w", 3, {"f32"});
  }
  rt::GroupedGemmOperands o;
  if (!d.emulated()) {
    Require(out, kCall, "out", rank, {"bf16"}, true, /*result=*/true);
    o = {.x = Address(x), .w = Address(w), .out = Address(out), .sizes = Address(sizes)};
    if (fp8) o.scale_x = Address(*scale_x), o.scale_w = Address(*scale_w);
    ThrowIfError(RunnerFor<rt::GemmRunner>(BundleDir())
                     .RunGrouped(size, options, o, reinterpret_cast<cu::CUstream>(stream)));
    return;
  }
  Require(out, kCall, "out", rank, {"f32"}, true, /*result=*/true);
  // Every row of x times every column of its expert's weight, at most.
  if (x.size() > 0)
    ThrowIfError(
        emu::CheckProblemSize(kCall, {{"x", double(x.size())}}, double(x.size()) * w.shape(1)));
  std::vector<uint8_t> result;
  o = {.x = fp8 ? d.Bind(x, /*read_only=*/true) : d.BindNarrowed(x, "bf16"),
       .w = fp8 ? d.Bind(w, /*read_only=*/true) : d.BindNarrowed(w, "bf16"),
       .out = d.BindPoisoned(out.size(), "bf16", &result),
       .sizes = d.Bind(sizes, /*read_only=*/true)};
  // The emulator copies a host array's bytes as they lie: scale_x's rows contiguous, as checked.
  if (fp8) o.scale_x = d.Bind(*scale_x, true), o.scale_w = d.Bind(*scale_w, true);
  rt::EmulatedOpDevice device = EmulatorDevice(*d.emulator());
  ThrowIfError(rt::RunGroupedGemm(size, options, o, /*cc=*/90, device));
  d.Finish();
  // Rows no expert owns keep what out held, as on a GPU, where the kernel writes owned rows alone
  // (the poison marked the emulator's unwritten ones).
  const std::vector<bool> owned = OwnedRows(sizes, masked, rows, E);
  const size_t row_bytes = static_cast<size_t>(N) * 4;
  auto* out_bytes = reinterpret_cast<uint8_t*>(Address(out));
  std::vector<uint8_t> kept(out_bytes, out_bytes + owned.size() * row_bytes);
  Widen(result, "bf16", out, /*column_major=*/false);
  for (size_t r = 0; r < owned.size(); ++r)
    if (!owned[r]) std::memcpy(out_bytes + r * row_bytes, kept.data() + r * row_bytes, row_bytes);
}

}  // namespace

void BindGroupedGemm(nb::module_& m) {
  m.def("_grouped_gemm", &GroupedGemm, nb::arg("x"), nb::arg("w"), nb::arg("out"), nb::arg("sizes"),
        nb::arg("scale_x").none(), nb::arg("scale_w").none(), nb::arg("masked"),
        nb::arg("stream") = 0);
}

}  // namespace kiln::py
