// gemm/bf16_skinny: C = A * B when M is small (decoding: a token or a few), the weight B read
// once at the memory's speed. No tensor cores. A block owns COLS columns of C; its threads split K
// in 16-byte chunks (8 bf16 each, strided by the block), multiply each chunk of B's columns by the
// same chunk of R rows of A (small, so it stays in L1/L2), then sum within each warp (shuffles)
// and across the warps (shared memory). With a block per COLS columns and every warp streaming,
// enough loads are in flight to fill the memory system even where N is only a few thousand.
// R is M up to 4 (a pass of 2 rows streams B about as fast as one of 1, where the 4-row pass
// streams it slower: docs/perf/2026-11-26-two-to-four-rows.md): rows past M
// are not computed at all, and M past 4 takes further passes of 4 (any M is correct). Each thread
// issues its loads of B for two chunks before the FMAs wait on them; four rows at most keep it at
// 104 registers, two blocks an SM (with 16 rows: 142, one block, too few loads in flight to stream
// B at the copy's rate; docs/perf/2026-11-25-skinny-kernel-loads.md).
// Any N; K a multiple of 8 (16-byte aligned rows).
// A row-major, B and C column-major, f32 accumulation: the entry point's layout. Its variants
// (gemm/bf16_skinny.f16-f32.gelu) read f16, store f16 or f32 and fuse an epilogue.
// gemm/bf16_skinny_sm90 is the same kernel for Hopper, launched while the kernel before it ends
// (programmatic dependent launch): every thread waits for that kernel before its first load, and
// lets the next one launch once its loads are issued
// (docs/perf/2026-11-27-launched-while-kernel-before-ends.md).
#include <functional>

#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::examples {
namespace {

constexpr int COLS = 4, THREADS = 256, WARPS = THREADS / 32, VEC = 8, RMAX = 4, UNROLL = 2;

absl::StatusOr<KernelDef> BuildSkinny(const std::string& name, const GemmVariant& v, bool hopper) {
  Kernel k(name, hopper ? sm90a() : sm80(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.in_type = ScalarName(v.in),
                                   .out_type = ScalarName(v.epilogue.out),
                                   .c_order = v.c_row ? "row" : "col",
                                   .tile_m = 1,
                                   .tile_n = 1,
                                   .tile_k = VEC,
                                   .epilogue = v.epilogue.Terms()});
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, g.M, g.N, /*column_major=*/!v.c_row);
  k.Grid(absl::StrCat("N/", COLS));
  SmemTile partial = k.Smem(f32, WARPS, COLS * RMAX);  // each warp's sums, [warp][c * R + m]
  Value tid = k.ThreadIdx(), lane = k.LaneId(), warp = k.WarpId(), n0 = k.BlockIdx() * COLS;
  if (hopper) k.WaitForPriorGrids();
  // R rows of A from m0 against the block's columns.
  auto rows = [&](int R) {
    k.For(0, g.M, R, [&](Value m0) {
      Regs acc = k.Registers(Type::Of(f32), COLS * R);
      for (int i = 0; i < COLS * R; ++i) acc[i] = k.F32(0);
      // UNROLL chunks a thread: their loads of B all issued before the first FMA waits on one.
      k.For(tid * VEC, g.K, THREADS * VEC * UNROLL, [&](Value k_first) {
        std::vector<std::vector<Value>> b(UNROLL * COLS);
        std::vector<Value> in_k(UNROLL);
        for (int u = 0; u < UNROLL; ++u) {
          Value k0 = k_first + u * THREADS * VEC;
          in_k[u] = k0 < g.K;
          for (int c = 0; c < COLS; ++c) {  // the weights: read once, so kept out of L1
            Value v = LoadGlobal(g.B.At({k0, n0 + c}), VEC,
                                 {.cache = CacheHint::kNoL1, .mask = in_k[u] & (n0 + c < g.N)});
            for (int e = 0; e < VEC; ++e) b[u * COLS + c].push_back(v.Lane(e));
          }
        }
        for (int u = 0; u < UNROLL; ++u)
          for (int m = 0; m < R; ++m) {
            Value v = LoadGlobal(g.A.At({m0 + m, k_first + u * THREADS * VEC}), VEC,
                                 {.mask = in_k[u] & (m0 + m < g.M)});
            for (int e = 0; e < VEC; ++e) {
              Value a = v.Lane(e).To(f32);
              for (int c = 0; c < COLS; ++c)
                acc[c * R + m] = Fma(a, b[u * COLS + c][e].To(f32), acc[c * R + m]);
            }
          }
      });
      if (hopper)
        k.LaunchDependents();  // this thread's loads are issued (a later pass's call does nothing)
      for (int i = 0; i < COLS * R; ++i) {
        Value sum = WarpReduce(acc[i], Reduce::kSum);
        k.If(lane == 0, [&] { k.Store(partial.At(warp, i), sum); });
      }
      k.SyncThreads();
      k.If(tid < COLS * R, [&] {
        StoreSumOfWarps(k, partial, WARPS, tid, m0 + tid % R, n0 + tid / R, g, epilogue);
      });
      k.SyncThreads();  // the partials are read before the next pass writes them
    });
  };
  // Passes of exactly M rows where M <= RMAX, else of RMAX.
  std::function<void(int)> passes_from = [&](int r) {
    if (r == RMAX) return rows(RMAX);
    k.If(
        g.M <= r, [&] { rows(r); }, [&] { passes_from(r + 1); });
  };
  passes_from(1);
  return k.Build();
}

// Both builds: for sm_80 on, and for Hopper the one that waits for the kernel before it; each with
// its family of types and fused epilogues (gemm/bf16_skinny_sm90.f16-f32.gelu).
struct SkinnyBuild {
  const char* name;
  const char* summary;
  bool hopper;
};
constexpr SkinnyBuild kSkinnyBuilds[] = {
    {"gemm/bf16_skinny",
     "the entry point's kernel for small M: CUDA cores, B streamed once in 16-byte chunks", false},
    {"gemm/bf16_skinny_sm90",
     "the small-M kernel on Hopper, launched while the kernel before it ends", true}};

const bool kSkinnyRegistered = [] {
  for (const SkinnyBuild& b : kSkinnyBuilds) {
    const char* name = b.name;
    const bool hopper = b.hopper;
    Register({name, b.summary, [name, hopper] { return BuildSkinny(name, {}, hopper); }});
    RegisterFamily(GemmFamily(
        name, "the small-M kernel with other types and a fused epilogue", /*tile=*/false,
        [hopper](const std::string& variant, const GemmVariant& v) {
          return BuildSkinny(variant, v, hopper);
        },
        /*c_row=*/true));
  }
  return true;
}();

}  // namespace
}  // namespace kiln::examples
