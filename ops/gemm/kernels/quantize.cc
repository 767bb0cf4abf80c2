// ops/quantize_e4m3: bf16 rows to e4m3 with one f32 scale per 1 x 128 of each row (the group's
// largest magnitude maps to 448, e4m3's largest), the activations' half of the blockwise GEMM.
// x is rows x cols, row-major; q the same shape in bytes; scales[g * rows + r] for group g of row r
// (M-contiguous, the layout the GEMM entry point's blockwise A takes by default). cols a multiple
// of 16. Each thread converts kWidth elements (16-byte loads, one store), kLanes threads a group,
// whose largest magnitude they find by shuffles; a row's threads are padded to whole groups, so
// that a group's lanes are aligned in their warp. Eight elements a thread in CTAs of 256 threads
// over one dimension: the best of the shapes tried (docs/perf/2026-11-29-fp8-gemm.md).
#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/kernel.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"

namespace kiln::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kWidth = 8;             // elements a thread
constexpr int kLanes = 128 / kWidth;  // threads a group of 128

absl::StatusOr<KernelDef> BuildQuantizeE4m3() {
  Kernel k("ops/quantize_e4m3", sm90a(), {kThreads});
  Value x = k.PtrParam("x", bf16), q = k.PtrParam("q", i64), scales = k.PtrParam("scales", f32);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols");
  k.RequireMultiple("cols", 16);
  Value groups = k.I32Param("groups");  // ceil(cols / 128): a row's groups, kLanes threads each
  Value units = k.I64Param("units");    // rows * groups * kLanes: the threads with work
  k.Grid(absl::StrCat("units/", kThreads));
  Value unit = k.BlockIdx(0).To(i64) * kThreads + k.ThreadIdx().To(i64);
  Value per_row = (groups * kLanes).To(i64);
  Value r = (unit / per_row).To(i32), u = (unit % per_row).To(i32);
  Value col0 = u * kWidth;
  Value inside = (unit < units) & (col0 < cols);
  Value at = Min(r, rows - 1).To(i64) * cols.To(i64) + col0.To(i64);  // in elements
  // Every lane shuffles (the group's reduction needs all of its lanes), those past the data with
  // zeros.
  std::vector<Value> xs;
  Value amax = k.F32(0);
  for (int half = 0; half < kWidth; half += 8) {
    Value v = LoadGlobal(x + at + half, 8, {.cache = CacheHint::kReadOnly, .mask = inside});
    for (int e = 0; e < 8; ++e) {
      xs.push_back(v.Lane(e).To(f32));
      amax = Max(amax, Abs(xs.back()));
    }
  }
  for (int lanes = kLanes / 2; lanes >= 1; lanes /= 2)
    amax = Max(amax, ShflXor(amax, lanes, kLanes));
  // An all-zero group keeps zeros whatever its scale: 1 then.
  Value scale = Select(amax > 0, amax * (1.0 / 448), k.F32(1));
  Value inv = Select(amax > 0, k.F32(448) / amax, k.F32(0));
  std::vector<Value> words;  // 8 bytes each, the lower element in the lower byte
  for (int w = 0; w < kWidth; w += 8) {
    Value packed = k.I32(0).To(i64);
    for (int e = 0; e < 8; e += 2) {
      Value pair = PackFp8x2(xs[w + e] * inv, xs[w + e + 1] * inv, Fp8::kE4M3).To(i64);
      packed = packed | (pair << (8 * e));
    }
    words.push_back(packed);
  }
  StoreGlobal(q + at / 8, k.Vector(words), {.mask = inside});
  k.If(inside & (u % kLanes == 0),
       [&] { StoreGlobal(scales + ((u / kLanes) * rows + r).To(i64), scale); });
  return k.Build();
}

}  // namespace
}  // namespace kiln::ops

namespace kiln::examples {
KILN_EXAMPLE_VARIANT(quantize_e4m3, "ops/quantize_e4m3",
                     "bf16 rows to e4m3 with one f32 scale per 1x128 (the blockwise GEMM's "
                     "activations)",
                     [] { return ops::BuildQuantizeE4m3(); });
}  // namespace kiln::examples
