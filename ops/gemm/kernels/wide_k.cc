// gemm/bf16_k128n32_sm90 and gemm/bf16_k128n64_sm90: C = A * B for up to 64 rows of A a pass in
// stages of 128 k. A block owns 32 (64) columns of C over the whole K; a producer thread fills each
// stage with two 128B-swizzled TMA boxes of 64 k for B's columns and two for A's rows, and one
// consumer warpgroup runs the stage's wgmmas (m64n32k16 or m64n64k16). The 64-row tiles
// (k13_k14_deep_ring.cc) hand over a stage of 64 k (4 KB of B at 32 columns); here a stage carries
// twice the bytes and a stage goes back while the next one's wgmmas run. A's box holds the pass's
// rows before M only (16, 32, 48 or 64): TMA's zero fill of rows past M costs more than a read.
// Rows past M (in the box), columns past N and k past K land as zeros (TMA's bounds); stores are
// clipped to M x N, each element through the fused epilogue. B K-major, or row-major (`.b_mn`: K
// rows of N, each box 64 k x the block's columns, read as wgmma's MN-major B). The entry point
// takes them on Hopper where their blocks make one wave (ops/gemm/gemm_choice.cc, WideStages).
#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::examples {
namespace {

constexpr int ROWS = 64, EDGE_ROWS = 16, SLAB = 64, SLABS = 2, STAGE_K = SLAB * SLABS,
              RING_BYTES = 224 * 1024;

// The GEMM it computes, as the harness and the entry point read it from the manifest.
void DescribeWideK(Kernel& k, const GemmVariant& v) {
  DescribeGemm(k, {.in_type = ScalarName(v.in),
                   .out_type = ScalarName(v.epilogue.out),
                   .b_order = v.b_mn ? "row" : "col",
                   .c_order = "col",
                   .tile_m = 1,
                   .tile_n = v.b_mn ? 8 : 1,
                   .tile_k = 8,  // TMA strides B's rows: 16 bytes
                   .epilogue = v.epilogue.Terms()});
}

absl::StatusOr<KernelDef> BuildWideK(const std::string& name, const GemmVariant& v, int bn) {
  // 32 columns: 9 stages of 24 KB; 64: 7 of 32 KB: as deep as the ring's bytes allow, its depth in
  // stages setting the small shapes' rate (docs/perf/2026-11-27-wide-stages-ring-depth.md).
  const int stages = std::min(9, RING_BYTES / ((ROWS + bn) * STAGE_K * 2));
  Kernel k(name, sm90a(), {256});
  // B row-major (b_mn: K rows of N, as a [K][N] weight lies) lands as MN-major boxes of 64 k x the
  // block's columns, one swizzle span each (64B at 32 columns, 128B at 64), read as wgmma's
  // transposed B.
  const bool b_span128 = bn * 2 == 128;  // else 64 bytes
  const Swizzle b_swizzle = b_span128 ? Swizzle::k128B : Swizzle::k64B;
  DescribeWideK(k, v);
  Value M = k.I32Param("M"), N = k.I32Param("N"), K = k.I32Param("K");
  GlobalTensor C(k.PtrParam("C", v.epilogue.out), {M, N}, {k.I32(1), M});
  // A's maps by the rows of its box: 16, 32, 48, 64. A pass loads the rows before M only, in one
  // box a slab (TMA's zero fill of rows past M costs more than a read of as many rows, and so
  // does each further box issued: docs/perf/2026-11-25-a-rows-past-m.md,
  // docs/perf/2026-11-27-stages-128-256-k-17-64-rows.md).
  std::vector<TensorMap> tmA;
  for (int rows = EDGE_ROWS; rows <= ROWS; rows += EDGE_ROWS)
    tmA.push_back(k.TmaParam(absl::StrCat("tmA", rows),
                             PackedKMajorMap("A", "M", v.in, SLAB, rows, rt::TmaSwizzle::k128B)));
  TensorMap tmB = k.TmaParam(
      "tmB", v.b_mn ? PackedMnMajorMap("B", "N", v.in, SLAB, bn,
                                       b_span128 ? rt::TmaSwizzle::k128B : rt::TmaSwizzle::k64B)
                    : PackedKMajorMap("B", "N", v.in, SLAB, bn, rt::TmaSwizzle::k128B));
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, M, N, /*column_major=*/true);
  k.Grid(absl::StrCat("N/", bn));
  std::vector<SmemTile> sA, sB;  // a stage's slabs of 64 k
  for (int j = 0; j < SLABS; ++j)
    sA.push_back(k.SmemSwizzled(v.in, ROWS, SLAB, Swizzle::k128B, stages));
  for (int j = 0; j < SLABS; ++j)
    sB.push_back(v.b_mn ? k.SmemSwizzled(v.in, SLAB, bn, b_swizzle, stages)
                        : k.SmemSwizzled(v.in, bn, SLAB, Swizzle::k128B, stages));
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
          k.For(0, K, STAGE_K, [&](Value k0) {
            std::vector<TmaCopy> copies;
            for (int j = 0; j < SLABS; ++j)
              copies.push_back({.map = &tmB,
                                .tile = sB[j],
                                .coords = v.b_mn ? std::vector<Operand>{n0, k0 + j * SLAB}
                                                 : std::vector<Operand>{k0 + j * SLAB, n0}});
            for (int j = 0; j < SLABS; ++j)
              copies.push_back(
                  {.map = &map, .tile = sA[j].Rows(0, box), .coords = {k0 + j * SLAB, m0}});
            ring.Produce(at, copies);
          });
        };
        // The box for the rows left, chosen once a pass (a choice in the loop costs each copy).
        Value left = M - m0;
        k.If(
            left > 48, [&] { pass(64); },
            [&] {
              k.If(
                  left > 32, [&] { pass(48); },
                  [&] {
                    k.If(
                        left > 16, [&] { pass(32); }, [&] { pass(16); });
                  });
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
      auto mma = [&](const Value& s) {
        k.WgmmaFence();
        for (int j = 0; j < SLABS; ++j)
          for (int kk = 0; kk < SLAB; kk += 16) {
            if (v.b_mn)
              k.Wgmma(acc, {.a = sA[j].Stage(s), .b = {sB[j].Stage(s), true, SLAB}, .k0 = kk});
            else
              k.Wgmma(acc, {.a = sA[j].Stage(s), .b = sB[j].Stage(s), .k0 = kk});
          }
        k.WgmmaCommit();
      };
      // A stage goes back once the group after it is issued and its own group has retired
      // (wgmma.wait_group 1), so the tensor cores work while the next stage is waited for: in
      // 256-k stages level with a release after each group's wait_group 0, ahead of it in 128-k
      // stages (docs/perf/2026-11-27-stages-128-256-k-17-64-rows.md).
      Regs held = k.Registers(Type::Of(i32), 1);  // the stage the group in flight reads
      held[0] = ring.Acquire(at);
      mma(held[0]);
      k.For(STAGE_K, K, STAGE_K, [&](Value) {
        Value s = ring.Acquire(at);
        mma(s);
        k.WgmmaWait(1);
        ring.Release(held[0], t);
        held[0] = s;
      });
      k.WgmmaWait(0);
      ring.Release(held[0], t);
      const EpilogueSpec& epi = v.epilogue;
      if (!epi.scale && epi.bias == BiasAxis::kNone &&
          !epi.residual) {  // nothing to load: each element as it is
        for (int p = 0; p < bn / 4; ++p)
          for (int e = 0; e < 2; ++e) {
            Value row = m0 + acc.Row(p), col = n0 + acc.Col(p) + e, inside = (row < M) & (col < N);
            k.If(inside, [&] {
              k.Store(C.At({row, col}), epilogue.Output(acc[2 * p + e], row, col, inside));
            });
          }
        return;
      }
      // The thread's elements: every input of the fused epilogue (C_in, bias, residual) loaded
      // before any is used, so that their round trips overlap.
      struct Element {
        Value row, col, inside;
        Epilogue::Inputs in;
      };
      std::vector<Element> elements;
      for (int p = 0; p < bn / 4; ++p)
        for (int e = 0; e < 2; ++e) {
          Value row = m0 + acc.Row(p), col = n0 + acc.Col(p) + e, inside = (row < M) & (col < N);
          elements.push_back({row, col, inside, epilogue.Load(row, col, inside)});
        }
      for (size_t i = 0; i < elements.size(); ++i) {
        const Element& x = elements[i];
        StoreGlobal(C.At({x.row, x.col}), epilogue.Output(acc[static_cast<int>(i)], x.in),
                    {.mask = x.inside});
      }
    });
  });
  return k.Build();
}

void RegisterWideK(int bn) {
  const std::string name = absl::StrCat("gemm/bf16_k", STAGE_K, "n", bn, "_sm90");
  Register({name,
            absl::StrCat("the entry point's kernel for up to 64 rows where ", bn,
                         "-column blocks make one wave: ", "64 rows over the whole K in stages of ",
                         STAGE_K, " k"),
            [=] { return BuildWideK(name, {}, bn); }});
  const std::string summary =
      absl::StrCat("the ", bn, "-column wide-stage kernel with other types and a fused epilogue");
  RegisterFamily(GemmFamily(
      name, summary, /*tile=*/false,
      [=](const std::string& variant, const GemmVariant& v) { return BuildWideK(variant, v, bn); },
      /*c_row=*/false, /*b_mn=*/true));
}

const bool kWideKRegistered = [] {
  RegisterWideK(32);
  RegisterWideK(64);
  return true;
}();

}  // namespace
}  // namespace kiln::examples
