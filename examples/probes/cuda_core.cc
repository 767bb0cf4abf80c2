// The CUDA-core op probes: each kernel applies one family of kiln's ops to known inputs and
// writes every result, so examples/probe_check.cc can compare them one by one with references
// computed on the host (not by kiln). They run on a GPU (kiln run probe/NAME, the GPU suite) and
// in the emulator (kiln emulate probe/NAME, the unit tests).
#include "examples/probes/probes.h"
#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256;
// probe/memory's planes, in order (a store takes the default where a load hint has no store form).
constexpr CacheHint kHints[probe::kHintCount] = {CacheHint::kDefault,      CacheHint::kReadOnly,
                                                 CacheHint::kStreaming,    CacheHint::kNoL1,
                                                 CacheHint::kL2EvictFirst, CacheHint::kL2EvictLast};

// The global index of this thread, as i64, for a grid of `n`/256 blocks.
Value GlobalIndex(Kernel& k) { return (k.BlockIdx(0) * kThreads + k.ThreadIdx()).To(i64); }

// probe/math: y[i, :] = the f32 special functions, arithmetic and roundings of x[i] > 0 and z[i];
// q[i, :] = the signed integer ops of w[i].
absl::StatusOr<KernelDef> BuildMath() {
  Kernel k("probe/math", sm80(), {kThreads});
  Value x = k.PtrParam("x", f32), z = k.PtrParam("z", f32), w = k.PtrParam("w", i32);
  Value y = k.PtrParam("y", f32), q = k.PtrParam("q", i32), n = k.I64Param("n");
  k.Grid("n/256");
  Value i = GlobalIndex(k);
  k.If(i < n, [&] {
    Value xv = k.Load(x + i), zv = k.Load(z + i);
    // The order is probe::kMathOps.
    std::vector<Value> r = {
        Exp2(zv), Exp(zv), Log2(xv), Log(xv), Rsqrt(xv), Sqrt(xv), SqrtApprox(xv), Rcp(zv),
        RcpApprox(zv), zv / xv, DivApprox(zv, xv), Abs(zv), Fma(zv, xv, zv), Min(zv, xv),
        Max(zv, xv), -zv, TanhApprox(zv),
        // (z * 4 is exact; Floor(z * 2) * 0.5 is a multiple of 0.5, half of them ties.)
        Round(zv * 4.0f), Floor(zv * 4.0f), Ceil(zv * 4.0f), Trunc(zv * 4.0f),
        Round(Floor(zv * 2.0f) * 0.5f)};
    for (size_t j = 0; j < r.size(); ++j)
      k.Store(y + i * probe::kMathOps + static_cast<int>(j), r[j]);
    Value s = k.Load(w + i).To(s32);
    // The order is probe::kIntOps.
    std::vector<Value> t = {s / 7, s % 7, s >> 3, Min(s, -5), Max(s, -5), s * -3 + 1,
                            s.To(f32).Bitcast(Type::Of(i32)).To(s32), (zv * 1000.0).To(s32),
                            // Bytes: clamped conversions, sign and zero extension, wrapping.
                            (zv * 100.0).To(s8).To(s32), (zv * 100.0).To(i8).To(i32).To(s32),
                            ((zv * 100.0).To(s8) * 3).To(s32)};
    for (size_t j = 0; j < t.size(); ++j)
      k.Store(q + i * probe::kIntOps + static_cast<int>(j), t[j].To(i32));
  });
  return k.Build();
}

// probe/convert: for each pair (z[2i+1], z[2i]) (hi, lo), c[i, :] = the packed conversions.
absl::StatusOr<KernelDef> BuildConvert() {
  Kernel k("probe/convert", sm90a(), {kThreads});
  Value z = k.PtrParam("z", f32), c = k.PtrParam("c", i32), pairs = k.I64Param("pairs");
  k.Grid("pairs/256");
  Value i = GlobalIndex(k);
  k.If(i < pairs, [&] {
    Value lo = k.Load(z + i * 2), hi = k.Load(z + i * 2 + 1);
    Value e4 = PackFp8x2(lo, hi, Fp8::kE4M3), e5 = PackFp8x2(lo, hi, Fp8::kE5M2);
    const Type word = Type::Of(i32);
    // The order is probe::kConvertOps.
    std::vector<Value> r = {PackBf16x2(lo, hi).Bitcast(word),
                            PackF16x2(lo, hi).Bitcast(word),
                            e4.To(i32),
                            e5.To(i32),
                            UnpackFp8x2(e4, Fp8::kE4M3).Bitcast(word),
                            UnpackFp8x2(e5, Fp8::kE5M2).Bitcast(word),
                            lo.To(bf16).Bitcast(Type::Of(i16)).To(i32),
                            lo.To(f16).Bitcast(Type::Of(i16)).To(i32)};
    for (size_t j = 0; j < r.size(); ++j)
      k.Store(c + i * probe::kConvertOps + static_cast<int>(j), r[j]);
  });
  return k.Build();
}

// probe/warp: y[i, :] = shuffles and warp, redux and group reductions of v[i] (n a multiple of
// 256: every lane takes part).
absl::StatusOr<KernelDef> BuildWarp() {
  Kernel k("probe/warp", sm80(), {kThreads});
  Value v = k.PtrParam("v", i32), y = k.PtrParam("y", i32), n = k.I64Param("n");
  k.Grid("n/256");
  k.RequireMultiple("n", kThreads);
  Value i = GlobalIndex(k), lane = k.LaneId();
  Value vi = k.Load(v + i);
  Value vf = vi.To(s32).To(f32);
  Value u = (vi.To(s32) + 1000).To(i32);  // >= 0: the same under signed and unsigned order
  const Type word = Type::Of(i32);
  // The order is probe::kWarpOps.
  std::vector<Value> r = {ShflIdx(vi, (lane * 7 + 3) % 32),
                          ShflUp(vi, 3),
                          ShflDown(vi, 5),
                          ShflXor(vi, 9),
                          ShflIdx(vi, 2, /*width=*/8),
                          ShflDown(vi, 3, /*width=*/16),
                          WarpReduce(vf, Reduce::kSum).Bitcast(word),
                          WarpReduce(vf, Reduce::kMax).Bitcast(word),
                          WarpReduce(vf, Reduce::kSum, /*width=*/16).Bitcast(word),
                          ReduxSync(vi, Reduce::kSum),
                          ReduxSync(u, Reduce::kMax),
                          ReduxSync(u, Reduce::kMin),
                          GroupReduce(k, vf, Reduce::kSum).Bitcast(word),
                          GroupReduce(k, vf, Reduce::kMax, /*threads=*/128).Bitcast(word),
                          GroupReduce(k, vf, Reduce::kMin, /*threads=*/64).Bitcast(word)};
  for (size_t j = 0; j < r.size(); ++j)
    k.Store(y + i * probe::kWarpOps + static_cast<int>(j), r[j]);
  return k.Build();
}

// probe/atomics: every thread hits the same global words (counts, extremes, a CAS race, a float
// sum) and its block's 16-bin shared-memory histogram; the results are checked as wholes.
absl::StatusOr<KernelDef> BuildAtomics() {
  Kernel k("probe/atomics", sm80(), {kThreads});
  Value v = k.PtrParam("v", i32), words = k.PtrParam("words", i32), sum = k.PtrParam("sum", f32);
  Value ticket = k.PtrParam("ticket", i32), cas = k.PtrParam("cas", i32),
        hist = k.PtrParam("hist", i32);
  Value n = k.I64Param("n");
  k.Grid("n/256");
  k.RequireMultiple("n", kThreads);
  SmemTile bins = k.Smem(i32, 1, 16);
  Value tid = k.ThreadIdx(), i = GlobalIndex(k);
  k.If(tid < 16, [&] { k.Store(bins.At(0, tid), 0); });
  k.SyncThreads();
  Value vi = k.Load(v + i);
  Value u = (vi.To(s32) + 1000).To(i32);  // 0..2000
  // words[] layout: probe::Word.
  k.Store(ticket + i, AtomicAdd(words + probe::kCount, 1));
  AtomicMax(words + probe::kMax, u);
  AtomicMin(words + probe::kMin, u);
  k.Store(cas + i, AtomicCas(words + probe::kCas, 0, i.To(i32) + 1));
  RedAdd(words + probe::kRedSum, u);
  RedMax(words + probe::kRedMax, u);
  AtomicAdd(sum, vi.To(s32).To(f32));
  AtomicAdd(bins.At(0, u % 16), 1);
  k.SyncThreads();
  k.If(tid < 16,
       [&] { k.Store(hist + k.BlockIdx(0).To(i64) * 16 + tid.To(i64), k.Load(bins.At(0, tid))); });
  return k.Build();
}

// probe/memory: plane h of y is x loaded and stored with kHints[h], four floats per
// thread: whole chunks by masked v4 accesses, the ragged tail by masked scalar ones; the last
// plane keeps the masked v4 load's fill where the chunk is not whole.
absl::StatusOr<KernelDef> BuildMemory() {
  Kernel k("probe/memory", sm80(), {kThreads});
  Value x = k.PtrParam("x", f32), y = k.PtrParam("y", f32);
  Value n = k.I64Param("n"), stride = k.I64Param("stride");
  k.Grid("n/1024");
  k.RequireMultiple("stride", 4);
  Value c = GlobalIndex(k) * 4;
  k.If(c < n, [&] {
    Value whole = c + 4 <= n, ragged = c + 4 > n;
    for (int h = 0; h < probe::kHintCount; ++h) {
      const CacheHint load_hint = kHints[h];
      const CacheHint store_hint =
          load_hint == CacheHint::kReadOnly ? CacheHint::kDefault : load_hint;
      Value plane = y + stride * h;
      Value v = LoadGlobal(x + c, 4, {.cache = load_hint, .mask = whole, .fill = probe::kFill});
      std::vector<Value> scaled;
      for (int j = 0; j < 4; ++j) scaled.push_back(v.Lane(j) * (h + 1.0));
      StoreGlobal(plane + c, k.Vector(scaled), {.cache = store_hint, .mask = whole});
      for (int j = 0; j < 4; ++j) {
        Value m = k.IfElse(
            ragged, [&] { return c + j < n; }, [&] { return c < 0; });  // false where whole
        Value e = LoadGlobal(x + c + j, 1, {.cache = load_hint, .mask = m, .fill = probe::kFill});
        StoreGlobal(plane + c + j, e * (h + 1.0), {.cache = store_hint, .mask = m});
      }
    }
    Value filled = LoadGlobal(x + c, 4, {.mask = whole, .fill = probe::kFill});
    k.Store(y + stride * probe::kHintCount + c, filled);
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("probe/math",
             "f32 special functions, IEEE and approximate division, roundings, signed integer ops",
             BuildMath);
KILN_EXAMPLE("probe/convert",
             "packed bf16x2/f16x2/fp8 conversions and back, scalar bf16/f16 rounding",
             BuildConvert);
KILN_EXAMPLE("probe/warp", "shfl idx/up/down/bfly (with widths), warp, redux and group reductions",
             BuildWarp);
KILN_EXAMPLE("probe/atomics", "global atom/red add, max, min, cas, f32 add; shared-memory atomics",
             BuildAtomics);
KILN_EXAMPLE("probe/memory", "v4 and masked loads/stores with every cache hint, ragged tails",
             BuildMemory);
}  // namespace kiln::examples
