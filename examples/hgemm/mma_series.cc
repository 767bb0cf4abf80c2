// cuda_hgemm's mma series (seed 004): fp16 in and out, fp16 accumulation (mma.sync m16n8k16
// .f16.f16.f16.f16), ldmatrix.x4 for A and .x2 for B, C staged through smem for coalesced
// 16-byte stores. The versions:
//   mma_naive: one warp per 16x8 tile of C, k-steps of 16, plain copies into smem
//   mma_base: 256 threads as 4x2 warps of 64x64, block tile 256x128x32, a serpentine over the
//       warp's 8 column tiles, block order over a 16-wide grid whose z picks a 2048-column strip
//       and reverses the rows when odd; synchronous 16-byte copies, one stage, plain rows
//   mma_permuted: + rotated 16-byte units ((unit + row % 8 / 2) % 4 for A/B, (unit + row % 8)
//       % 16 for the C staging rows) against bank conflicts
//   mma_async: + cp.async (commit, wait_group 0; .L2::128B)   mma_async_pg2s: + two smem buffers
//   mma_async_pg2s_ps2r: + register double buffering within a k-tile
//   mma_async_stage2/3/4: an N-stage cp.async ring (wait_group N-2), fragments prefetched across
//       k-tiles
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {
namespace {

struct Shape {
  int bm, bn, bk, warps_m, warps_n;
  bool strip;  // the z-strip block order (else one block per tile, row-major)
};
constexpr Shape kNaive{16, 8, 16, 1, 1, false}, kTiled{256, 128, 32, 4, 2, true};
constexpr int STRIP = 16;

enum class Regs2 { kNone, kWithinTile, kAcrossTiles };  // register double buffering
struct Version {
  const char* name;
  bool async, permuted;
  int stages;
  Regs2 regs = Regs2::kNone;
  Shape shape = kTiled;
};

absl::StatusOr<KernelDef> Build(const Version& v) {
  const int BM = v.shape.bm, BN = v.shape.bn, BK = v.shape.bk, warps_m = v.shape.warps_m,
            warps_n = v.shape.warps_n;
  const bool strip = v.shape.strip;
  const int THREADS = warps_m * warps_n * 32;
  Kernel k(v.name, sm80(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.in_type = "f16",
                                   .out_type = "f16",
                                   .acc_type = "f16",
                                   .tile_m = BM,
                                   .tile_n = strip ? BN * STRIP : BN,
                                   .tile_k = BK,
                                   .block_n = strip ? BN : 0});
  if (strip)
    k.Grid("16", absl::StrCat("M/", BM), absl::StrCat("N/", BN * STRIP));
  else
    k.Grid(absl::StrCat("N/", BN), absl::StrCat("M/", BM));
  SmemLayout ring{.swizzle = v.permuted ? UnitSwizzle::RotateHalfRow8() : UnitSwizzle{},
                  .stages = v.stages};
  SmemTile As = k.Smem(f16, BM, BK, ring), Bs = k.Smem(f16, BN, BK, ring);  // [row][k]
  SmemTile Cs =
      k.SmemOver(As, f16, BM, BN, {.swizzle = v.permuted ? UnitSwizzle::Rotate8() : UnitSwizzle{}});
  Kernel::WarpTile w =
      k.Warps({.tile_m = BM, .tile_n = BN, .warps_m = warps_m, .warps_n = warps_n});
  Value tid = k.ThreadIdx(), lane = k.LaneId(), z = k.BlockIdx(2), y = k.BlockIdx(1);
  Value m0 = (strip ? Select((z & 1) == 1, k.GridDim(1) - y - 1, y) : y) * BM;
  Value n0 = ((strip ? z * STRIP : k.I32(0)) + k.BlockIdx(0)) * BN;
  Regs acc = k.Registers(Type::Vec(f16, 2), w.mmas_m * w.mmas_n * 2);
  const int nfrag = w.mmas_m * 4 + w.mmas_n * 2;  // one k-step's A and B fragments

  // As upstream: each warp copies its own strip of rows; cp.async asks L2 for the 128-byte line.
  const Chunking chunking{.warp_strips = strip, .l2_prefetch = v.async ? 128 : 0};
  auto load = [&](Value k0, Value stage) {
    CopyTile(
        k, As.Stage(stage),
        [&](Value r, Value c) {
          return g.A.At({m0 + r, k0 + c});
        },
        tid, THREADS, v.async, chunking);
    CopyTile(
        k, Bs.Stage(stage),
        [&](Value r, Value c) {
          return g.B.At({k0 + c, n0 + r});
        },
        tid, THREADS, v.async, chunking);
  };
  auto fragments = [&](Value stage, int kk) {  // A: mmas_m x4, then B: mmas_n x2
    std::vector<Value> f;
    for (int i = 0; i < w.mmas_m; ++i)
      for (Value r : k.LdMatrix(As.Stage(stage), w.m0 + i * 16 + lane % 16, lane / 16 * 8 + kk, 4))
        f.push_back(r);
    for (int j = 0; j < w.mmas_n; ++j)
      for (Value r : k.LdMatrix(Bs.Stage(stage), w.n0 + j * 8 + lane % 8, lane / 8 % 2 * 8 + kk, 2))
        f.push_back(r);
    return f;
  };
  auto mma = [&](const std::vector<Value>& f) {
    for (int i = 0; i < w.mmas_m; ++i)
      for (int jj = 0; jj < w.mmas_n; ++jj) {
        const int j = i % 2 ? w.mmas_n - 1 - jj : jj, c = (i * w.mmas_n + j) * 2;  // serpentine
        const int b = w.mmas_m * 4 + j * 2;
        auto d = k.MmaM16N8K16(f16, {f[i * 4], f[i * 4 + 1], f[i * 4 + 2], f[i * 4 + 3]},
                               {f[b], f[b + 1]}, {acc[c], acc[c + 1]});
        acc[c] = d[0];
        acc[c + 1] = d[1];
      }
  };
  auto compute = [&](Value stage) {  // both k-steps of a k-tile
    if (v.regs == Regs2::kNone) {
      for (int kk = 0; kk < BK; kk += 16) mma(fragments(stage, kk));
      return;
    }
    std::vector<Value> now = fragments(stage, 0);
    std::vector<Value> next = fragments(stage, 16);  // loaded before the first step's mmas
    mma(now);
    mma(next);
  };

  if (v.stages == 1) {
    k.For(0, g.K, BK, [&](Value k0) {
      load(k0, k.I32(0));
      if (v.async) {
        k.CpAsyncCommit();
        k.CpAsyncWait(0);
      }
      k.SyncThreads();
      compute(k.I32(0));
      k.SyncThreads();
    });
  } else if (v.regs != Regs2::kAcrossTiles) {  // pg2s: load the next tile, compute this one
    // (cuda_hgemm computes its last tile after the loop instead of branching around the load;
    // that peel made kiln's pg2s slower: docs/perf/2026-11-23-cuda-hgemm-originals-speed.md)
    load(k.I32(0), k.I32(0));
    k.CpAsyncCommit();
    k.CpAsyncWait(0);
    k.SyncThreads();
    k.For(0, g.K, BK, [&](Value k0) {
      Value t = k0 / BK;
      k.If(k0 + BK < g.K, [&] { load(k0 + BK, (t + 1) % 2); });
      compute(t % 2);
      k.CpAsyncCommit();
      k.CpAsyncWait(0);
      k.SyncThreads();
    });
  } else {  // an N-stage ring; the next k-step's fragments are always in registers already
    const int ahead = v.stages - 1;
    for (int s = 0; s < ahead; ++s) {
      k.If(k.I32(s * BK) < g.K, [&] { load(k.I32(s * BK), k.I32(s)); });
      k.CpAsyncCommit();
    }
    k.CpAsyncWait(v.stages - 2);
    k.SyncThreads();
    Regs held = k.Registers(Type::Of(i32), nfrag);
    std::vector<Value> first = fragments(k.I32(0), 0);
    for (int i = 0; i < nfrag; ++i) held[i] = first[i];
    k.For(0, g.K, BK, [&](Value k0) {
      Value t = k0 / BK;
      std::vector<Value> step0, step1 = fragments(t % v.stages, 16);
      for (int i = 0; i < nfrag; ++i) step0.push_back(held[i]);
      mma(step0);
      k.If(k0 + ahead * BK < g.K, [&] { load(k0 + ahead * BK, (t + ahead) % v.stages); });
      k.CpAsyncCommit();
      k.CpAsyncWait(v.stages - 2);
      k.SyncThreads();
      std::vector<Value> next = fragments((t + 1) % v.stages, 0);  // unused after the last tile
      for (int i = 0; i < nfrag; ++i) held[i] = next[i];
      mma(step1);
    });
  }

  // Epilogue: fragments to the C staging tile, then out in 16-byte row chunks.
  if (v.async) k.CpAsyncWaitAll();  // no copy may still land in the bytes C reuses
  k.SyncThreads();
  for (int i = 0; i < w.mmas_m; ++i)
    for (int j = 0; j < w.mmas_n; ++j)
      for (int half = 0; half < 2; ++half)
        k.Store(Cs.At(w.m0 + i * 16 + half * 8 + lane / 4, w.n0 + j * 8 + lane % 4 * 2),
                acc[(i * w.mmas_n + j) * 2 + half]);
  k.SyncThreads();
  StoreTile(
      k, Cs,
      [&](Value r, Value c) {
        return g.C.At({m0 + r, n0 + c});
      },
      tid, THREADS, chunking);
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(naive, "hgemm/mma_naive",
                     "cuda_hgemm mma_naive: one warp per 16x8 tile, fp16 accumulate", [] {
                       return Build({"hgemm/mma_naive", false, false, 1, Regs2::kNone, kNaive});
                     });
KILN_EXAMPLE_VARIANT(
    base, "hgemm/mma_base",
    "cuda_hgemm mma_base: 256x128x32, sync copies, serpentine, z-strip block order, smem-staged C",
    [] {
      return Build({"hgemm/mma_base", false, false, 1});
    });
KILN_EXAMPLE_VARIANT(permuted, "hgemm/mma_permuted",
                     "cuda_hgemm mma_permuted: + rotated 16-byte units in smem", [] {
                       return Build({"hgemm/mma_permuted", false, true, 1});
                     });
KILN_EXAMPLE_VARIANT(async, "hgemm/mma_async", "cuda_hgemm mma_async: + cp.async", [] {
  return Build({"hgemm/mma_async", true, true, 1});
});
KILN_EXAMPLE_VARIANT(pg2s, "hgemm/mma_async_pg2s",
                     "cuda_hgemm mma_async_pg2s: + double-buffered smem", [] {
                       return Build({"hgemm/mma_async_pg2s", true, true, 2});
                     });
KILN_EXAMPLE_VARIANT(
    ps2r, "hgemm/mma_async_pg2s_ps2r", "cuda_hgemm mma_async_pg2s_ps2r: + register double buffer",
    [] {
      return Build({"hgemm/mma_async_pg2s_ps2r", true, true, 2, Regs2::kWithinTile});
    });
KILN_EXAMPLE_VARIANT(stage2, "hgemm/mma_async_stage2",
                     "cuda_hgemm mma_async_stage2: 2-stage ring, fragments across k-tiles", [] {
                       return Build({"hgemm/mma_async_stage2", true, true, 2, Regs2::kAcrossTiles});
                     });
KILN_EXAMPLE_VARIANT(stage3, "hgemm/mma_async_stage3", "cuda_hgemm mma_async_stage3: 3-stage ring",
                     [] {
                       return Build({"hgemm/mma_async_stage3", true, true, 3, Regs2::kAcrossTiles});
                     });
KILN_EXAMPLE_VARIANT(stage4, "hgemm/mma_async_stage4", "cuda_hgemm mma_async_stage4: 4-stage ring",
                     [] {
                       return Build({"hgemm/mma_async_stage4", true, true, 4, Regs2::kAcrossTiles});
                     });
}  // namespace kiln::examples
