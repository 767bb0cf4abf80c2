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
#include <limits>
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

// Four bytes of e4m3 from four values times `inv`, value_at(0) in the lowest byte.
template <typename ValueAt>
Value Word4(const Value& inv, ValueAt value_at) {
  Value lo = PackFp8x2(value_at(0) * inv, value_at(1) * inv, Fp8::kE4M3).To(i32);
  return lo | (PackFp8x2(value_at(2) * inv, value_at(3) * inv, Fp8::kE4M3).To(i32) << 16);
}

Value Pair(const Value& lo, const Value& hi) { return lo.To(i64) | (hi.To(i64) << 32); }

// Eight bytes of e4m3 from eight values times `inv`, value_at(0) in the lowest byte.
template <typename ValueAt>
Value Word(const Value& inv, ValueAt value_at) {
  return Pair(Word4(inv, value_at), Word4(inv, [&](int e) { return value_at(4 + e); }));
}

// The columns of a 4 x 4 of bytes, rows[i] holding row i: word j holds column j, row 0's byte
// lowest. Pairs of rows interleaved, then pairs of pairs: 8 prmt.
std::vector<Value> Transpose4x4(const Value* rows) {
  Value ab_lo = BytePermute(rows[0], rows[1], 0x5140),
        ab_hi = BytePermute(rows[0], rows[1], 0x7362);
  Value cd_lo = BytePermute(rows[2], rows[3], 0x5140),
        cd_hi = BytePermute(rows[2], rows[3], 0x7362);
  return {BytePermute(ab_lo, cd_lo, 0x5410), BytePermute(ab_lo, cd_lo, 0x7632),
          BytePermute(ab_hi, cd_hi, 0x5410), BytePermute(ab_hi, cd_hi, 0x7632)};
}

// A group's scale (its largest magnitude over 448; 1 for an all-zero group) and the factor that
// takes its values to e4m3's range. The magnitude counts as at least 448 times f32's smallest
// normal number, so that the scale is a normal number and the factor finite: a group of
// subnormal values had a factor of inf, and its zeros came out as NaN (0 x inf).
struct GroupScale {
  Value scale, inv;
};
GroupScale GroupScaleOf(Kernel& k, const Value& amax) {
  Value floored = Max(amax, k.F32(448 * std::numeric_limits<float>::min()));
  return {Select(amax > 0, floored * (1.0 / 448), k.F32(1)),
          Select(amax > 0, k.F32(448) / floored, k.F32(0))};
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
    const GroupScale g = GroupScaleOf(k, amax[i]);
    Value at = (r0 + i).To(i64) * cols.To(i64) + c.To(i64);
    StoreGlobal(q + at / 8, Word(g.inv, [&](int e) { return v[i][e]; }), {.mask = inside[i]});
    k.If((r0 + i < rows) & (lane % 16 == 0),
         [&] { StoreGlobal(scales + (k.BlockIdx(0) * rows + r0 + i).To(i64), g.scale); });
  }
  return k.Build();
}

// A CTA a block. The block lands in shared memory by cp.async, holding no registers while in
// flight, then each thread reads its 8 x 8 of it: for the block's largest magnitude (on bf16
// pairs), and to convert, packing q's row words, and qt's column words from those by byte
// transposes. A half warp covers 128 columns of 8 rows, so that each store of q is whole 128-byte
// lines; qt's words go through shared memory, there to be stored as whole lines too (scattered
// stores cost a fifth of the kernel's rate: docs/perf/2026-11-29-fp8-quantizers.md).
absl::StatusOr<KernelDef> BuildQuantizeE4m3Blocks() {
  Kernel k("ops/quantize_e4m3_blocks", sm90a(), {kThreads});
  Value x = k.PtrParam("x", bf16), q = k.PtrParam("q", i64), qt = k.PtrParam("qt", i64),
        scales = k.PtrParam("scales", f32);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols"), transpose = k.I32Param("transpose");
  k.RequireMultiple("cols", 16);
  k.Grid("cols/128", "rows/128");
  // Unswizzled: cp.async's writes and a half warp's reads each cover whole 256-byte rows.
  SmemTile block = k.Smem(bf16, 128, 128);
  // qt's block: row j (column j of the block) in 8-byte words of 8 rows, word w at w ^ (j / 8),
  // so that a half warp's 16 columns 8 apart write distinct banks.
  SmemTile block_t = k.Smem(i64, 128, 16);
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
  Value rb = (warp * 2 + lane / 16) * 8, cb = (lane % 16) * 8;  // this thread's 8 x 8 in the block
  auto row_of = [&](int i) { return k.Load(block.At(rb + i, cb), 8); };
  Value amax2;  // the largest magnitudes of the even and the odd columns
  for (int i = 0; i < 8; ++i) {
    Value words = row_of(i).Bitcast(Type::Vec(Scalar::kI32, 4));
    for (int j = 0; j < 4; ++j) {
      Value pair = Abs(words.Lane(j).Bitcast(Type::Vec(Scalar::kBF16, 2)));
      amax2 = amax2.valid() ? Max(amax2, pair) : pair;
    }
  }
  Value amax = GroupReduce(k, Max(amax2.Lane(0).To(f32), amax2.Lane(1).To(f32)), Reduce::kMax);
  const GroupScale g = GroupScaleOf(k, amax);
  Value inv = g.inv;
  Value r0 = row0 + rb, c = col0 + cb;
  Value lo[8], hi[8];  // row i's bytes of columns 0-3 and 4-7
  for (int i = 0; i < 8; ++i) {
    Value v = row_of(i);
    lo[i] = Word4(inv, [&](int e) { return v.Lane(e).To(f32); });
    hi[i] = Word4(inv, [&](int e) { return v.Lane(4 + e).To(f32); });
    Value at = (r0 + i).To(i64) * cols.To(i64) + c.To(i64);
    StoreGlobal(q + at / 8, Pair(lo[i], hi[i]), {.mask = (r0 + i < rows) & (c < cols)});
  }
  k.If(transpose != 0, [&] {
    for (const int half : {0, 4}) {  // columns 0-3, then 4-7
      const Value* words = half ? hi : lo;
      std::vector<Value> top = Transpose4x4(words), bottom = Transpose4x4(words + 4);
      for (int e = 0; e < 4; ++e) {
        Value j = cb + half + e;
        k.Store(block_t.At(j, (rb / 8) ^ (j / 8)), Pair(top[e], bottom[e]));
      }
    }
    k.SyncThreads();
    for (int i = 0; i < 8; ++i) {  // a half warp a row of qt's block: 128 contiguous bytes
      Value unit = k.ThreadIdx() + i * kThreads, j = unit / 16, w = unit % 16;
      Value at = (col0 + j).To(i64) * rows.To(i64) + (row0 + w * 8).To(i64);
      StoreGlobal(qt + at / 8, k.Load(block_t.At(j, w ^ (j / 8))),
                  {.mask = (col0 + j < cols) & (row0 + w * 8 + 8 <= rows)});
    }
  });
  k.If(k.ThreadIdx() == 0, [&] {
    Value at = k.BlockIdx(1) * ((cols + 127) / 128) + k.BlockIdx(0);
    StoreGlobal(scales + at.To(i64), g.scale);
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
