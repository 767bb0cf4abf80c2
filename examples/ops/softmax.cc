// ops/softmax: y[r, :] = softmax(x[r, :]) over [rows, cols] bf16 (.f16, .f32: f16, f32), f32 math:
// the row's max, then e^(x - max) as ex2((x - max) * log2(e)), then the sum, each
// reduced over the row's threads (warp shuffles, then one shared slot per warp and a barrier).
#include <cmath>

#include "examples/ops/row_kernel.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {
using namespace ops;  // NOLINT: the row kernels' vocabulary

absl::StatusOr<KernelDef> BuildSoftmax(Scalar type) {
  Kernel k(RowKernelName("ops/softmax", type), sm80(), {kBlockThreads});
  if (type == f32) k.MinBlocksPerSm(2);  // two blocks a SM (row_kernel.h)
  Value x = k.PtrParam("x", type), y = k.PtrParam("y", type);
  Value rows = k.I32Param("rows"), cols = k.I32Param("cols");
  k.Grid("rows/16");
  const double log2e = M_LOG2E;
  auto row_of = [&](const Value& base, const RowCtx& r) {
    return base + r.row.To(i64) * cols.To(i64);
  };
  ForEachRow(
      k, rows, cols,
      [&](const RowCtx& r) {
        RowRegs v = LoadRow(row_of(x, r), r, cols, -INFINITY);
        Value m = v.x[0];
        for (size_t i = 1; i < v.x.size(); ++i) m = Max(m, v.x[i]);
        Value row_max = GroupReduce(k, m, Reduce::kMax, r.threads);
        std::vector<Value> e;  // x - max is exact; x * log2e - max * log2e is not, past 1e4
        for (const Value& xi : v.x)
          e.push_back(Exp2((xi - row_max) * log2e));  // lanes past the end: 0
        Value inv = Rcp(GroupReduce(k, SumOf(e), Reduce::kSum, r.threads));
        for (Value& ei : e) ei = ei * inv;
        StoreRow(k, row_of(y, r), r, v, e);
      },
      [&](const RowCtx& r) {
        // Any length: one pass for the running max and the sum rescaled to it, one to write.
        Value xr = row_of(x, r), yr = row_of(y, r);
        Regs st = k.Registers(Type::Of(f32), 2);
        st[0] = k.F32(-INFINITY);
        ForEachColumn(k, r, cols, [&](Value c) {
          Value v = k.Load(xr + c).To(f32);
          // e^(x - m) from base = m, or 0 while every value so far is -inf (-inf - -inf: NaN)
          Value m = Max(st[0], v), base = Select(m == -INFINITY, k.F32(0), m);
          st[1] = Fma(st[1], Exp2((st[0] - base) * log2e), Exp2((v - base) * log2e));
          st[0] = m;
        });
        Value m = GroupReduce(k, st[0], Reduce::kMax, r.threads);
        Value inv = Rcp(GroupReduce(k, st[1] * Exp2((st[0] - m) * log2e), Reduce::kSum, r.threads));
        // (the sum's terms, e^(x - m) as above)
        ForEachColumn(k, r, cols, [&](Value c) {
          k.Store(yr + c, (Exp2((k.Load(xr + c).To(f32) - m) * log2e) * inv).To(type));
        });
      });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(softmax, "ops/softmax",
                     "row softmax over [rows, cols] bf16 (f32 math, ex2 and shuffles)",
                     [] { return BuildSoftmax(bf16); });
KILN_EXAMPLE_VARIANT(softmax_f16, "ops/softmax.f16", "ops/softmax over f16",
                     [] { return BuildSoftmax(f16); });
KILN_EXAMPLE_VARIANT(softmax_f32, "ops/softmax.f32", "ops/softmax over f32",
                     [] { return BuildSoftmax(f32); });
}  // namespace kiln::examples
