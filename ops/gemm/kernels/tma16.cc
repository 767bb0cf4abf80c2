// gemm/bf16_tma16_sm90 and gemm/bf16_tma8_sm90: C = A * B for 16 (8) rows of A a pass, the weights
// read by TMA in boxes of 256 k x 16 columns (512 contiguous bytes of each column a box) into a
// ring of 4 stages, consumed by 8 warps with mma.sync. A block owns 16 columns of C over the whole
// K, as the mma16 kernel (mma16.cc) does, but one thread of a ninth warp issues the boxes (B's, and
// A's rows of the pass), so no consumer computes an address or holds a load in flight. Each
// consumer warp takes 32 of a stage's 256 k: C^T = B^T A^T with mma16's permuted k order (a
// thread's 16-byte shared load feeds two mmas). The warps' sums meet in shared memory in a fixed
// order. Rows past M, columns past N and k past K land as zeros (TMA's bounds); further rows take
// further passes. A consumer releases a stage only after `fence.proxy.async`: its reads are
// generic-proxy loads and the next box's write is the async proxy's. Without the fence ptxas issued
// the release before the loads had read the stage (SASS: SYNCS.ARRIVE right after the LDS), and on
// an H200 a box overwrote a stage still being read: 16x8192x8192 failed its check (error 0.02
// against cuBLAS) in 3 runs of 3, and 16x4096x4096 read some wrong k (error 3e-3 where 1.7e-3 is
// usual). The entry point takes them on Hopper for 12-16 and 3-8 rows over a long K
// (ops/gemm/gemm_choice.cc).
#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::examples {
namespace {

constexpr int CONSUMERS = 8, THREADS = 32 * (CONSUMERS + 1), ROWS = 16, BOX_K = 32 * CONSUMERS,
              STAGES = 4;

absl::StatusOr<KernelDef> BuildTma16(const std::string& name, const GemmVariant& v,
                                     int rows_a = ROWS) {
  const int halves = rows_a / 8;  // n8 groups of the mma over A's rows
  Kernel k(name, sm90a(), {THREADS});
  DescribeGemm(k, {.in_type = ScalarName(v.in),
                   .out_type = ScalarName(v.epilogue.out),
                   .c_order = "col",
                   .tile_m = 1,
                   .tile_n = 1,
                   .tile_k = 8,
                   .epilogue = v.epilogue.Terms()});
  Value M = k.I32Param("M"), N = k.I32Param("N"), K = k.I32Param("K");
  GemmOperands out;  // C and its bounds for the warps' sums (A and B come by TMA)
  out.C = GlobalTensor(k.PtrParam("C", v.epilogue.out), {M, N}, {k.I32(1), M});
  out.M = M, out.N = N, out.K = K;
  TensorMap tmA = k.TmaParam("tmA", PackedKMajorMap("A", "M", v.in, BOX_K, rows_a)),
            tmB = k.TmaParam("tmB", PackedKMajorMap("B", "N", v.in, BOX_K, ROWS));
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, M, N, /*column_major=*/true);
  k.Grid(absl::StrCat("N/", ROWS));
  SmemTile sB = k.Smem(v.in, ROWS, BOX_K, SmemLayout{.stages = STAGES});    // [column of C][k]
  SmemTile sA = k.Smem(v.in, rows_a, BOX_K, SmemLayout{.stages = STAGES});  // [row of A][k]
  SmemTile partial = k.Smem(f32, CONSUMERS, ROWS * rows_a);  // [warp][n * rows_a + m]
  Pipeline ring(k, STAGES, CONSUMERS);
  Value tid = k.ThreadIdx(), lane = k.LaneId(), warp = k.WarpId(), n0 = k.BlockIdx() * ROWS;
  Value quad = lane / 4, t = lane % 4;  // the mma fragment's row (group) and k slot pair
  k.If(tid == 0, [&] { ring.Init(); });
  k.SyncThreads();
  k.WaitForPriorGrids();
  Pipeline::Cursor produce = ring.Start(), consume = ring.Start();
  k.For(0, M, rows_a, [&](Value m0) {
    Regs acc = k.Registers(Type::Of(f32), 4 * halves);  // [half of A's rows][4]
    for (int i = 0; i < 4 * halves; ++i) acc[i] = k.F32(0);
    k.If(
        warp == CONSUMERS,
        [&] {
          k.If(lane == 0, [&] {
            k.For(0, K, BOX_K, [&](Value k0) {
              ring.Produce(produce, {{.map = &tmB, .tile = sB, .coords = {k0, n0}},
                                     {.map = &tmA, .tile = sA, .coords = {k0, m0}}});
            });
          });
        },
        [&] {
          k.For(0, K, BOX_K, [&](Value) {
            ring.Consume(consume, lane, [&](Value stage) {
              // This warp's 32 k of the stage: columns (rows of A) quad and quad + 8 at k 8t ..
              // 8t+7.
              auto words = [&](const SmemTile& tile, const Value& row) {
                return k.Load(tile.Stage(stage).At(row, warp * 32 + t * 8), 8)
                    .Bitcast(Type::Vec(i32, 4));
              };
              Value b_lo = words(sB, quad), b_hi = words(sB, quad + 8);
              std::vector<Value> a;
              for (int g = 0; g < halves; ++g) a.push_back(words(sA, quad + 8 * g));
              StepMmas(k, v.in, b_lo, b_hi, a, acc);
              k.FenceProxyAsync();  // the reads above before the next box's write (the async proxy)
              k.SyncWarp();         // every lane's, before lane 0 releases the stage
            });
          });
          StoreStepSums(k, partial, warp, lane, halves, rows_a, acc);
        });
    k.SyncThreads();
    k.If(tid < ROWS * rows_a, [&] {  // the consumers' threads, one element each
      StoreSumOfWarps(k, partial, CONSUMERS, tid, m0 + tid % rows_a, n0 + tid / rows_a, out,
                      epilogue);
    });
    k.SyncThreads();  // the partials are read before the next pass writes them
  });
  k.LaunchDependents();
  return k.Build();
}

// The kernel for 16 rows a pass, and for 8 (an A box of 8 rows: at 8 rows or fewer the 16-row
// box's rows past M, zero-filled by TMA, slow it; docs/perf/2026-11-27-a-box-of-8-rows.md).
void RegisterRows(const char* name, int rows_a) {
  Register({name,
            absl::StrCat("the entry point's kernel for ", rows_a == 16 ? "12-16" : "3-8",
                         " rows over a long K: B by TMA boxes into mma.sync"),
            [name, rows_a] { return BuildTma16(name, {}, rows_a); }});
  const std::string summary =
      absl::StrCat("the TMA-fed ", rows_a, "-row kernel with other types and a fused epilogue");
  RegisterFamily(GemmFamily(name, summary, /*tile=*/false,
                            [rows_a](const std::string& variant, const GemmVariant& v) {
                              return BuildTma16(variant, v, rows_a);
                            }));
}

const bool kTma16Registered = [] {
  RegisterRows("gemm/bf16_tma16_sm90", 16);
  RegisterRows("gemm/bf16_tma8_sm90", 8);
  return true;
}();

}  // namespace
}  // namespace kiln::examples
