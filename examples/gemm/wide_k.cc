// gemm/bf16_wk*_sm90: C = A * B for up to 64 rows of A a pass, in stages of 128 or 256 k: one
// block owns BN columns of C over the whole K, a producer thread fills each stage with 2 or 4
// 128B-swizzled TMA boxes of 64 k for A (64 rows) and B (BN columns), and one consumer warpgroup
// runs the stage's wgmmas (m64nBNk16) and frees it. The 64-row tiles (k13_k14_deep_ring.cc) hand
// over a stage of 64 k (4 KB of B at BN = 32) at a time; here a stage carries 2-4x the bytes, so
// the ring's hand-offs per byte of the weights fall by as much. Rows past M, columns past N and k
// past K land as zeros (TMA's bounds); stores are clipped to M x N.
#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int ROWS = 64, EDGE_ROWS = 16, SLAB = 64, RING_BYTES = 208 * 1024;

rt::TensorMapParam SwizzledBoxes(const std::string& operand, const std::string& rows, Scalar in, int box_rows) {
  rt::TensorMapParam t;
  t.tensor = operand;
  t.dtype = in == f16 ? rt::TmaDtype::kF16 : rt::TmaDtype::kBF16;
  t.dims = {*rt::GridExpr::Parse("K"), *rt::GridExpr::Parse(rows)};
  t.strides = {*rt::GridExpr::Parse("K*2")};
  t.box = {SLAB, static_cast<uint32_t>(box_rows)};
  t.swizzle = rt::TmaSwizzle::k128B;
  return t;
}

absl::StatusOr<KernelDef> BuildWideK(const std::string& name, const GemmVariant& v, int bn, int slabs) {
  const int stage_k = SLAB * slabs;
  const int stages = std::min(8, RING_BYTES / ((ROWS + bn) * stage_k * 2));
  Kernel k(name, sm90a(), {256});
  DescribeGemm(k, {.in_type = ScalarName(v.in), .out_type = ScalarName(v.epilogue.out), .c_order = "col",
                   .tile_m = 1, .tile_n = 1, .tile_k = 8, .epilogue = v.epilogue.Terms()});
  Value M = k.I32Param("M"), N = k.I32Param("N"), K = k.I32Param("K");
  GlobalTensor C(k.PtrParam("C", v.epilogue.out), {M, N}, {k.I32(1), M});
  // A's maps by the rows of its box: 16, 32, 48, 64. A pass loads the rows before M only, in one
  // box a slab (TMA's zero fill of rows past M costs more than a read of as many rows, and so
  // does each further box issued: docs/PERF.md).
  std::vector<TensorMap> tmA;
  for (int rows = EDGE_ROWS; rows <= ROWS; rows += EDGE_ROWS)
    tmA.push_back(k.TmaParam(absl::StrCat("tmA", rows), SwizzledBoxes("A", "M", v.in, rows)));
  TensorMap tmB = k.TmaParam("tmB", SwizzledBoxes("B", "N", v.in, bn));
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, M, N, /*column_major=*/true);
  k.Grid(absl::StrCat("N/", bn));
  std::vector<SmemTile> sA, sB;  // a stage's slabs of 64 k
  for (int j = 0; j < slabs; ++j) sA.push_back(k.SmemSwizzled(v.in, ROWS, SLAB, Swizzle::k128B, stages));
  for (int j = 0; j < slabs; ++j) sB.push_back(k.SmemSwizzled(v.in, bn, SLAB, Swizzle::k128B, stages));
  Pipeline ring(k, stages, /*consumers=*/1);
  Value tid = k.ThreadIdx(), n0 = k.BlockIdx() * bn;
  k.If(tid == 0, [&] {
    for (const TensorMap& map : tmA) k.TmaPrefetchDescriptor(map);
    k.TmaPrefetchDescriptor(tmB);
    ring.Init();
  });
  k.SyncThreads();
  k.Role({.first_thread = 0, .threads = 128}, [&](Value t) {  // producer
    k.If(t == 0, [&] {
      k.WaitForPriorGrids();
      Pipeline::Cursor at = ring.Start();
      k.For(0, M, ROWS, [&](Value m0) {
        auto pass = [&](int box) {  // the pass's k loop with A's boxes of `box` rows
          const TensorMap& map = tmA[box / EDGE_ROWS - 1];
          k.For(0, K, stage_k, [&](Value k0) {
            std::vector<TmaCopy> copies;
            for (int j = 0; j < slabs; ++j) copies.push_back({.map = &tmB, .tile = sB[j], .coords = {k0 + j * SLAB, n0}});
            for (int j = 0; j < slabs; ++j)
              copies.push_back({.map = &map, .tile = sA[j].Rows(0, box), .coords = {k0 + j * SLAB, m0}});
            ring.Produce(at, copies);
          });
        };
        // The box for the rows left, chosen once a pass (a choice in the loop costs each copy).
        Value left = M - m0;
        k.If(left > 48, [&] { pass(64); }, [&] {
          k.If(left > 32, [&] { pass(48); }, [&] { k.If(left > 16, [&] { pass(32); }, [&] { pass(16); }); });
        });
      });
      k.LaunchDependents();
    });
  });
  k.Role({.first_thread = 128, .threads = 128}, [&](Value t) {  // consumer
    k.WaitForPriorGrids();
    Pipeline::Cursor at = ring.Start();
    k.For(0, M, ROWS, [&](Value m0) {
      WgmmaAccumulator acc = k.WgmmaAcc(bn);
      for (int p = 0; p < bn / 2; ++p) acc[p] = k.F32(0);
      k.For(0, K, stage_k, [&](Value) {
        ring.Consume(at, t, [&](Value s) {
          k.WgmmaFence();
          for (int j = 0; j < slabs; ++j)
            for (int kk = 0; kk < SLAB; kk += 16) k.Wgmma(acc, sA[j].Stage(s), 0, sB[j].Stage(s), 0, kk);
          k.WgmmaCommit();
          k.WgmmaWait(0);
        });
      });
      for (int p = 0; p < bn / 4; ++p)
        for (int e = 0; e < 2; ++e) {
          Value row = m0 + acc.Row(p), col = n0 + acc.Col(p) + e, inside = (row < M) & (col < N);
          k.If(inside, [&] { k.Store(C.At({row, col}), epilogue.Output(acc[2 * p + e], row, col, inside)); });
        }
    });
  });
  return k.Build();
}

void RegisterWideK(int bn, int slabs) {
  const std::string name = absl::StrCat("gemm/bf16_k", slabs * SLAB, "n", bn, "_sm90");
  Register({name,
            absl::StrCat("the entry point's kernel for 17-64 rows: 64x", bn, " blocks over the whole K in stages of ",
                         slabs * SLAB, " k"),
            [=] { return BuildWideK(name, {}, bn, slabs); }});
  RegisterFamily(GemmFamily(name, "the wide-stage 64-row kernel with other types and a fused epilogue", /*tile=*/false,
                            [=](const std::string& variant, const GemmVariant& v) {
                              return BuildWideK(variant, v, bn, slabs);
                            }));
}

const bool kWideKRegistered = [] {
  RegisterWideK(32, 4);
  RegisterWideK(64, 2);
  return true;
}();

}  // namespace
}  // namespace kiln::examples
