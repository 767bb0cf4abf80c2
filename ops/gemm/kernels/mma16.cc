// gemm/bf16_mma16_sm90: C = A * B for M up to 16 (a few tokens), the weights B read in 16-byte
// chunks straight into mma.sync fragments: no shared memory stages, no TMA. A block owns 16
// columns of C (16 rows of B^T, the mma's M) and its 8 warps split K in chunks of 128; a warp's
// threads issue all 16 loads of a chunk (B's two rows and A's two rows of 8 elements, 4 k-steps
// of 32) before the first mma waits on them. Computed as C^T = B^T A^T: B's columns are the mma's
// rows and A's 16 rows its N (two n8 halves). The mma's k order is a permutation the two operands
// share: a thread of quad index t holds the k slots {2t, 2t+1, 2t+8, 2t+9} of an m16n8k16 in both
// A and B, so its 8 loaded elements (k 8t .. 8t+7 of a 32-wide step) feed two mmas, k 8t..8t+3 the
// first and 8t+4..8t+7 the second. The warps' sums meet in shared memory, in a fixed order.
// Rows past M are loaded as zeros; M past 16 takes further passes of 16. K a multiple of 8.
// A warp barrier between the loads and the mmas keeps ptxas from interleaving them: without it
// only 4 of the 16 loads were in flight and the weights streamed far slower
// (docs/perf/2026-11-27-up-to-16-rows-mma-sync.md). The entry point takes it for 3-16 rows and N
// of 1024-4096 (ops/gemm/gemm_choice.cc).
// Hopper only: it waits for the kernel before it (programmatic dependent launch) as the skinny
// kernel's Hopper build does.
#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::examples {
namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32, ROWS = 16, STEPS = 4, CHUNK = 32 * STEPS;

absl::StatusOr<KernelDef> BuildMma16(const std::string& name, const GemmVariant& v) {
  Kernel k(name, sm90a(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.in_type = ScalarName(v.in),
                                   .out_type = ScalarName(v.epilogue.out),
                                   .c_order = "col",
                                   .tile_m = 1,
                                   .tile_n = 1,
                                   .tile_k = 8,
                                   .epilogue = v.epilogue.Terms()});
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, g.M, g.N, /*column_major=*/true);
  k.Grid(absl::StrCat("N/", ROWS));
  SmemTile partial = k.Smem(f32, WARPS, ROWS * ROWS);  // each warp's sums, [warp][n * 16 + m]
  Value tid = k.ThreadIdx(), lane = k.LaneId(), warp = k.WarpId(), n0 = k.BlockIdx() * ROWS;
  Value quad = lane / 4, t = lane % 4;  // the mma fragment's row (group) and k slot pair
  k.WaitForPriorGrids();
  k.For(0, g.M, ROWS, [&](Value m0) {
    Regs acc = k.Registers(Type::Of(f32), 8);  // [half of A's rows][4]
    for (int i = 0; i < 8; ++i) acc[i] = k.F32(0);
    k.For(warp * CHUNK, g.K, WARPS * CHUNK, [&](Value k_chunk) {
      std::vector<Value> b_lo, b_hi, a_lo, a_hi;  // per step: 4 x b32, elements 8t .. 8t+7
      auto words = [&](const Value& ptr, const Value& mask, CacheHint cache) {
        return LoadGlobal(ptr, 8, {.cache = cache, .mask = mask}).Bitcast(Type::Vec(i32, 4));
      };
      for (int s = 0; s < STEPS; ++s) {
        Value k0 = k_chunk + s * 32 + t * 8, in_k = k0 < g.K;
        b_lo.push_back(words(g.B.At({k0, n0 + quad}), in_k & (n0 + quad < g.N), CacheHint::kNoL1));
        b_hi.push_back(
            words(g.B.At({k0, n0 + quad + 8}), in_k & (n0 + quad + 8 < g.N), CacheHint::kNoL1));
        a_lo.push_back(
            words(g.A.At({m0 + quad, k0}), in_k & (m0 + quad < g.M), CacheHint::kDefault));
        a_hi.push_back(
            words(g.A.At({m0 + quad + 8, k0}), in_k & (m0 + quad + 8 < g.M), CacheHint::kDefault));
      }
      k.SyncWarp();  // every load above in flight before the first mma waits on one
      for (int s = 0; s < STEPS; ++s) StepMmas(k, v.in, b_lo[s], b_hi[s], {a_lo[s], a_hi[s]}, acc);
    });
    k.LaunchDependents();  // this thread's loads are issued (a later pass's call does nothing)
    StoreStepSums(k, partial, warp, lane, 2, ROWS, acc);
    k.SyncThreads();
    StoreSumOfWarps(k, partial, WARPS, tid, m0 + tid % ROWS, n0 + tid / ROWS, g,
                    epilogue);  // 256: one each
    k.SyncThreads();            // the partials are read before the next pass writes them
  });
  return k.Build();
}

const bool kMma16Registered = [] {
  const char* name = "gemm/bf16_mma16_sm90";
  Register(
      {name,
       "the entry point's kernel for M up to 16: B read in 16-byte chunks into mma.sync fragments",
       [name] { return BuildMma16(name, {}); }});
  RegisterFamily(GemmFamily(
      name, "the M <= 16 kernel with other types and a fused epilogue", /*tile=*/false,
      [](const std::string& variant, const GemmVariant& v) { return BuildMma16(variant, v); }));
  return true;
}();

}  // namespace
}  // namespace kiln::examples
