// The FP8 GEMM's quantizers: bf16 to e4m3, each group's largest magnitude mapped to 448 (e4m3's
// largest) by an f32 scale, an all-zero group's scale 1. cols a multiple of 16 (the GEMM reads
// rows 16 bytes apart).
//   ops/quantize_e4m3         a scale per 1 x 128 of each row (the blockwise GEMM's A): x rows x
//                             cols row-major, q the same shape in bytes, scales[g * rows + r] for
//                             group g of row r (M-contiguous, the entry point's default for A).
//   ops/quantize_e4m3_blocks  a scale per 128 x 128 block (its B, an (N, K) weight): scales
//                             [ceil(rows/128)][ceil(cols/128)] row-major; with `transpose` also
//                             qt = q's transpose (cols x rows), the weight as the backward pass's
//                             product along N reads it. With `transpose` rows is a multiple of 16
//                             too (the caller checks: a transposed word past `rows` is not stored).
// The shapes were chosen by measurement (docs/perf/2026-11-29-fp8-quantizers.md).
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/ampere.h"
#include "kiln/kernel.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"

namespace kiln::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kLanes = 16;  // threads of a group of 128 (8 elements each)

// Eight bytes of e4m3 from eight values times `inv`, value_at(0) in the lowest byte.
template <typename ValueAt>
Value Word(Kernel& k, const Value& inv, ValueAt value_at) {
  Value packed = k.I32(0).To(i64);
  for (int e = 0; e < 8; e += 2)
    packed = packed |
             (PackFp8x2(value_at(e) * inv, value_at(e + 1) * inv, Fp8::kE4M3).To(i64) << (8 * e));
  return packed;
}

// A CTA 64 rows of one group of 128 columns, a half warp 4 rows of it, each lane 8 columns of each
// row: 4 loads in flight a thread, and a grid that needs no division.
absl::StatusOr<KernelDef> BuildQuantizeE4m3() {
  constexpr int kRows = 4;  // rows a thread
  Kernel k("ops/quantize_e4m3", sm90a(), {kThreads});
  Value x = k.PtrParam("x", bf16), q = k.PtrParam("q", i64), scales = k.PtrParam("scales", f32);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols");
  k.RequireMultiple("cols", 16);
  k.Grid("cols/128", absl::StrCat("rows/", kThreads / kLanes * kRows));
  Value lane = k.ThreadIdx() % 32, half = k.ThreadIdx() / 16;
  Value c = k.BlockIdx(0) * 128 + (lane % 16) * 8;
  Value r0 = k.BlockIdx(1) * (kThreads / kLanes * kRows) + half * kRows;
  std::vector<Value> inside, amax;
  std::vector<std::vector<Value>> v(kRows);
  for (int i = 0; i < kRows; ++i) {
    inside.push_back((r0 + i < rows) & (c < cols));
    Value at = (r0 + i).To(i64) * cols.To(i64) + c.To(i64);
    Value row = LoadGlobal(x + at, 8, {.cache = CacheHint::kReadOnly, .mask = inside.back()});
    amax.push_back(k.F32(0));
    for (int e = 0; e < 8; ++e) {
      v[i].push_back(row.Lane(e).To(f32));
      amax[i] = Max(amax[i], Abs(v[i].back()));
    }
  }
  for (int i = 0; i < kRows; ++i) {
    for (int lanes = kLanes / 2; lanes >= 1; lanes /= 2)
      amax[i] = Max(amax[i], ShflXor(amax[i], lanes, kLanes));
    Value inv = Select(amax[i] > 0, k.F32(448) / amax[i], k.F32(0));
    Value at = (r0 + i).To(i64) * cols.To(i64) + c.To(i64);
    StoreGlobal(q + at / 8, Word(k, inv, [&](int e) { return v[i][e]; }), {.mask = inside[i]});
    k.If((r0 + i < rows) & (lane % 16 == 0), [&] {
      StoreGlobal(scales + (k.BlockIdx(0) * rows + r0 + i).To(i64),
                  Select(amax[i] > 0, amax[i] * (1.0 / 448), k.F32(1)));
    });
  }
  return k.Build();
}

// A CTA a block. The block lands in shared memory by cp.async, holding no registers while in
// flight, then each thread reads its 8 x 8 twice: for the block's largest magnitude, and to
// convert, packing q's row words and qt's column words from its own registers. The 16 lanes of a
// half warp cover the block's 128 rows, the two halves and 8 warps its 128 columns; the 16-byte
// chunks of row r sit at chunk ^ (r / 8), so that a half warp's 16 rows, 8 apart, read 16 chunks.
absl::StatusOr<KernelDef> BuildQuantizeE4m3Blocks() {
  Kernel k("ops/quantize_e4m3_blocks", sm90a(), {kThreads});
  Value x = k.PtrParam("x", bf16), q = k.PtrParam("q", i64), qt = k.PtrParam("qt", i64),
        scales = k.PtrParam("scales", f32);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols"), transpose = k.I32Param("transpose");
  k.RequireMultiple("cols", 16);
  k.Grid("cols/128", "rows/128");
  SmemTile block = k.Smem(bf16, 128, 128, SmemLayout{.swizzle = {16, 128, 8}});
  Value row0 = k.BlockIdx(1) * 128, col0 = k.BlockIdx(0) * 128;
  for (int j = 0; j < 8; ++j) {  // 2 rows a warp a copy: 512 contiguous bytes
    Value unit = k.ThreadIdx() + j * kThreads, r = unit / 16, c = (unit % 16) * 8;
    Value inside = (row0 + r < rows) & (col0 + c < cols);
    Value at =
        Select(inside, (row0 + r).To(i64) * cols.To(i64) + (col0 + c).To(i64), k.I32(0).To(i64));
    k.CpAsync(block, r, c, x + at, 16, Kernel::CacheAt::kL2, 0,
              Select(inside, k.I32(16), k.I32(0)));
  }
  k.CpAsyncCommit();
  k.CpAsyncWaitAll();
  k.SyncThreads();
  Value lane = k.ThreadIdx() % 32, warp = k.ThreadIdx() / 32;
  Value rb = (lane % 16) * 8, cb = (warp * 2 + lane / 16) * 8;  // this thread's 8 x 8 in the block
  auto row_of = [&](int i) { return k.Load(block.At(rb + i, cb), 8); };
  Value amax = k.F32(0);
  for (int i = 0; i < 8; ++i) {
    Value row = row_of(i);
    for (int e = 0; e < 8; ++e) amax = Max(amax, Abs(row.Lane(e).To(f32)));
  }
  amax = GroupReduce(k, amax, Reduce::kMax);
  Value inv = Select(amax > 0, k.F32(448) / amax, k.F32(0));
  std::vector<Value> v;  // the 8 rows, 8 bf16 each
  for (int i = 0; i < 8; ++i) v.push_back(row_of(i));
  Value r0 = row0 + rb, c = col0 + cb;
  for (int i = 0; i < 8; ++i) {
    Value at = (r0 + i).To(i64) * cols.To(i64) + c.To(i64);
    StoreGlobal(q + at / 8, Word(k, inv, [&](int e) { return v[i].Lane(e).To(f32); }),
                {.mask = (r0 + i < rows) & (c < cols)});
  }
  k.If(transpose != 0, [&] {  // qt's conversions cost as much as q's
    for (int e = 0; e < 8; ++e) {
      Value at = (c + e).To(i64) * rows.To(i64) + r0.To(i64);
      StoreGlobal(qt + at / 8, Word(k, inv, [&](int i) { return v[i].Lane(e).To(f32); }),
                  {.mask = (c < cols) & (r0 + 8 <= rows)});
    }
  });
  k.If(k.ThreadIdx() == 0, [&] {
    Value at = k.BlockIdx(1) * ((cols + 127) / 128) + k.BlockIdx(0);
    StoreGlobal(scales + at.To(i64), Select(amax > 0, amax * (1.0 / 448), k.F32(1)));
  });
  return k.Build();
}

}  // namespace
}  // namespace kiln::ops

namespace kiln::examples {
KILN_EXAMPLE_VARIANT(quantize_e4m3, "ops/quantize_e4m3",
                     "bf16 rows to e4m3 with one f32 scale per 1x128 (the blockwise GEMM's "
                     "activations)",
                     [] { return ops::BuildQuantizeE4m3(); });
KILN_EXAMPLE_VARIANT(quantize_e4m3_blocks, "ops/quantize_e4m3_blocks",
                     "a bf16 weight to e4m3 with one f32 scale per 128x128, and its transpose (the "
                     "blockwise GEMM's B)",
                     [] { return ops::BuildQuantizeE4m3Blocks(); });
}  // namespace kiln::examples
