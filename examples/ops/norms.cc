// ops/rmsnorm and ops/layernorm over [rows, cols] bf16 with a bf16 weight (and bias) of cols (the
// .f16 and .f32 kernels: all f16, all f32):
//   rmsnorm:   y = x * rsqrt(mean(x^2) + eps) * w
//   layernorm: y = (x - mean) * rsqrt(mean((x - mean)^2) + eps) * w + b
// LayerNorm takes the variance around the mean in a second pass over the registers (not
// E[x^2] - mean^2, which cancels badly when the mean is large), the mean as the sum of each
// element over the length (a row of elements near f32's largest sums within range: its plain sum
// overflowed to inf and the row to NaN, where torch's running mean gives the row's 0 + b), and
// that mean corrected in the second pass (Corrected).
#include "examples/ops/row_kernel.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

using namespace ops;  // NOLINT: the row kernels' vocabulary

// The weight and bias are read by every row: default caching keeps them in L1.
constexpr CacheHint kParams = CacheHint::kDefault;

// LayerNorm's mean and scale in the corrected two-pass form: `mean` (rounded) corrected by
// `delta`, the mean of x - mean, taken with the squares' sum `ssq` (Chan, Golub and LeVeque's
// variance): a constant row's mean lay an ulp off its value, and the row came out as that ulp
// over sqrt(eps) where torch's running mean gives 0.
struct Moments {
  Value mean, scale;
};
Moments Corrected(Kernel& k, const Value& mean, const Value& ssq, const Value& delta,
                  const Value& inv_n, const Value& eps) {
  Value variance = Max(Fma(-delta, delta, ssq * inv_n), k.F32(0));  // rounding may dip below 0
  return {mean + delta, Rsqrt(variance + eps)};
}

// The sum of each of `xs` over the length, in two chains of fused multiply-adds: as many
// instructions as a plain sum's adds and one product, and within range where the plain sum of
// values near f32's largest is not (docs/perf/2026-12-04-row-ops-edge-cases.md).
Value SumOver(Kernel& k, const std::vector<Value>& xs, const Value& inv_n) {
  Value part[2] = {xs[0] * inv_n, xs.size() > 1 ? xs[1] * inv_n : k.F32(0)};
  for (size_t i = 2; i < xs.size(); ++i) part[i % 2] = Fma(xs[i], inv_n, part[i % 2]);
  return part[0] + part[1];
}

// `type`: x's, the weight's, the bias's and y's (bf16, f16 or f32).
absl::StatusOr<KernelDef> BuildNorm(bool layer, Scalar type) {
  Kernel k(RowKernelName(layer ? "ops/layernorm" : "ops/rmsnorm", type), sm80(), {kBlockThreads});
  // Two blocks a SM (row_kernel.h): ptxas keeps the 16-bit kernels within it unasked, not the
  // f32 ones, whose loads fill twice the registers before their conversions.
  if (type == f32) k.MinBlocksPerSm(2);
  Value x = k.PtrParam("x", type), w = k.PtrParam("w", type);
  Value b = layer ? k.PtrParam("b", type) : Value();
  Value y = k.PtrParam("y", type);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols"), eps = k.F32Param("eps");
  k.Grid("rows/16");
  Value inv_n = Rcp(cols.To(f32));
  auto row_of = [&](const Value& base, const RowCtx& r) {
    return base + r.row.To(i64) * cols.To(i64);
  };
  ForEachRow(
      k, rows, cols,
      [&](const RowCtx& r) {
        RowRegs v = LoadRow(row_of(x, r), r, cols, 0.0);
        std::vector<Value> d = v.x, sq;
        Value scale, shift;  // y = d * scale + shift, then the weight (and bias)
        if (layer) {
          Value mean = GroupReduce(k, SumOver(k, v.x, inv_n), Reduce::kSum, r.threads);
          for (size_t i = 0; i < d.size(); ++i)  // lanes past the end must add 0 to the sums
            d[i] = Select(v.In(i), v.x[i] - mean, 0.0f);
          Value ssq[2] = {d[0] * d[0], d.size() > 1 ? d[1] * d[1] : k.F32(0)};
          for (size_t i = 2; i < d.size(); ++i) ssq[i % 2] = Fma(d[i], d[i], ssq[i % 2]);
          std::vector<Value> sums =
              GroupReduce(k, {ssq[0] + ssq[1], SumOver(k, d, inv_n)}, Reduce::kSum, r.threads);
          // x - the corrected mean as d - delta, folded into the output's product: x itself
          // is not kept beside d (a block's registers hold one of them, not both).
          const Moments m = Corrected(k, mean, sums[0], sums[1], inv_n, eps);
          scale = m.scale;
          shift = -(sums[1] * scale);
        } else {
          for (const Value& di : d) sq.push_back(di * di);
          scale = Rsqrt(Fma(GroupReduce(k, SumOf(sq), Reduce::kSum, r.threads), inv_n, eps));
        }
        // The weight (and bias) chunk by chunk, each just before its use: fewer live registers.
        for (int c = 0; c < r.chunks; ++c) {
          RowRegs wc = LoadChunk(w, r, cols, c, 0.0, kParams);
          RowRegs bc = layer ? LoadChunk(b, r, cols, c, 0.0, kParams) : RowRegs{};
          std::vector<Value> out;
          for (int e = 0; e < kVec; ++e) {
            Value t = shift.valid() ? Fma(d[c * kVec + e], scale, shift) : d[c * kVec + e] * scale;
            out.push_back(layer ? Fma(t, wc.x[e], bc.x[e]) : t * wc.x[e]);
          }
          StoreChunk(k, row_of(y, r), r, c, v.ChunkIn(c), out);
        }
      },
      [&](const RowCtx& r) {
        // Any length: a pass for the sums (the mean first for layernorm), a pass to write.
        Value xr = row_of(x, r), yr = row_of(y, r);
        Regs acc = k.Registers(Type::Of(f32), layer ? 3 : 2);
        Value mean = k.F32(0);
        if (layer) {
          ForEachColumn(k, r, cols,
                        [&](Value c) { acc[0] = Fma(k.Load(xr + c).To(f32), inv_n, acc[0]); });
          mean = GroupReduce(k, acc[0], Reduce::kSum, r.threads);
        }
        ForEachColumn(k, r, cols, [&](Value c) {
          Value v = k.Load(xr + c).To(f32) - mean;
          acc[1] = Fma(v, v, acc[1]);
          if (layer) acc[2] = Fma(v, inv_n, acc[2]);
        });
        Value scale;
        if (layer) {
          std::vector<Value> sums = GroupReduce(k, {acc[1], acc[2]}, Reduce::kSum, r.threads);
          const Moments m = Corrected(k, mean, sums[0], sums[1], inv_n, eps);
          mean = m.mean, scale = m.scale;
        } else {
          scale = Rsqrt(Fma(GroupReduce(k, acc[1], Reduce::kSum, r.threads), inv_n, eps));
        }
        ForEachColumn(k, r, cols, [&](Value c) {
          Value v = (k.Load(xr + c).To(f32) - mean) * scale * k.Load(w + c).To(f32);
          if (layer) v = v + k.Load(b + c).To(f32);
          k.Store(yr + c, v.To(type));
        });
      });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(rmsnorm, "ops/rmsnorm",
                     "RMSNorm over [rows, cols] bf16 with a weight (f32 math, rsqrt)",
                     [] { return BuildNorm(false, bf16); });
KILN_EXAMPLE_VARIANT(layernorm, "ops/layernorm",
                     "LayerNorm over [rows, cols] bf16 with weight and bias (f32 math)",
                     [] { return BuildNorm(true, bf16); });
KILN_EXAMPLE_VARIANT(rmsnorm_f16, "ops/rmsnorm.f16", "ops/rmsnorm over f16",
                     [] { return BuildNorm(false, f16); });
KILN_EXAMPLE_VARIANT(layernorm_f16, "ops/layernorm.f16", "ops/layernorm over f16",
                     [] { return BuildNorm(true, f16); });
KILN_EXAMPLE_VARIANT(rmsnorm_f32, "ops/rmsnorm.f32", "ops/rmsnorm over f32",
                     [] { return BuildNorm(false, f32); });
KILN_EXAMPLE_VARIANT(layernorm_f32, "ops/layernorm.f32", "ops/layernorm over f32",
                     [] { return BuildNorm(true, f32); });
}  // namespace kiln::examples
