// Seed 003 v5-v8: 128x64x64 block tile, 2x2 warps of 64x32, col ^ (row % 8) swizzled smem,
// ldmatrix.x4 for A and for B (two 8-column B tiles at once), f32 accumulate.
//   v5: one stage, cp.async + wait_all        v6: two-stage cp.async ring (commit/wait_group 1),
//   all fragments of a k-tile loaded first     v7: v6 with the last stage peeled off the loop
//   v8: v7 with GROUP_M = 8 block order
// Upstream computes each lane's swizzled ldmatrix address once and XORs in the k offset; here
// the tile's layout computes it at each access and LLVM hoists the loop-invariant part.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "examples/ampere/mma_pipeline.h"
#include "examples/gemm.h"
#include "examples/registry.h"

namespace kiln::examples {

absl::StatusOr<KernelDef> BuildMmaPipeline(const MmaPipeline& p) {
  constexpr int BK = 64, THREADS = 128;
  Kernel k(p.name, sm80(), {THREADS});
  // The peeled tail needs stages - 1 k-tiles to exist: K must divide by that many.
  const int k_tiles = p.peel_tail ? std::max(1, p.stages - 1) : 1;
  GemmOperands g = DeclareGemm(
      k, {.tile_m = p.bm, .tile_n = p.bn, .tile_k = BK * k_tiles, .block_k = k_tiles > 1 ? BK : 0});
  k.Grid(absl::StrCat("M/", p.bm, "*N/", p.bn));
  SmemLayout ring{.swizzle = UnitSwizzle::Row8(), .stages = p.stages};
  SmemTile As = k.Smem(bf16, p.bm, BK, ring), Bs = k.Smem(bf16, p.bn, BK, ring);  // [row][k]
  Kernel::WarpTile w = k.Warps({.tile_m = p.bm, .tile_n = p.bn, .warps_m = 2, .warps_n = 2});
  Value tid = k.ThreadIdx(), lane = k.LaneId(), bid = k.BlockIdx();
  Value grid_m = g.M / p.bm, grid_n = g.N / p.bn, bid_m = bid / grid_n, bid_n = bid % grid_n;
  if (p.group_m) {  // blocks walk GROUP_M rows of tiles column by column
    Value size = grid_n * p.group_m, first = bid / size * p.group_m;
    Value rows = Min(grid_m - first, p.group_m);
    bid_m = first + bid % size % rows;
    bid_n = bid % size / rows;
  }
  Value m0 = bid_m * p.bm, n0 = bid_n * p.bn;
  Regs acc = k.Registers(Type::Of(f32), w.mmas_m * w.mmas_n * 4);

  auto load = [&](Value k0, Value stage) {
    CopyTile(
        k, As.Stage(stage),
        [&](Value r, Value c) {
          return g.A.At({m0 + r, k0 + c});
        },
        tid, THREADS, true);
    CopyTile(
        k, Bs.Stage(stage),
        [&](Value r, Value c) {
          return g.B.At({k0 + c, n0 + r});
        },
        tid, THREADS, true);
  };
  auto mma = [&](const std::vector<Value>& a, const std::vector<Value>& b, int m, int n) {
    const int base = (m * w.mmas_n + n) * 4;
    auto d = k.MmaM16N8K16(bf16, a, {b[n % 2 * 2], b[n % 2 * 2 + 1]},
                           {acc[base], acc[base + 1], acc[base + 2], acc[base + 3]});
    for (int i = 0; i < 4; ++i) acc[base + i] = d[i];
  };
  auto compute = [&](Value stage) {
    SmemTile a = As.Stage(stage), b = Bs.Stage(stage);
    auto a_frag = [&](int kk, int m) {
      return k.LdMatrix(a, w.m0 + m * 16 + lane % 16, lane / 16 * 8 + kk, 4);
    };
    auto b_frag = [&](int kk, int n) {  // columns n, n+1 (8 each) at once
      return k.LdMatrix(b, w.n0 + n * 8 + lane % 8 + lane / 16 * 8, lane % 16 / 8 * 8 + kk, 4);
    };
    if (!p.fragments_first) {
      for (int kk = 0; kk < BK; kk += 16) {
        std::vector<std::vector<Value>> bs;
        for (int n = 0; n < w.mmas_n; n += 2) bs.push_back(b_frag(kk, n));
        for (int m = 0; m < w.mmas_m; ++m) {
          auto af = a_frag(kk, m);
          for (int n = 0; n < w.mmas_n; ++n) mma(af, bs[n / 2], m, n);
        }
      }
      return;
    }
    std::vector<std::vector<Value>> as, bs;
    for (int kk = 0; kk < BK; kk += 16)
      for (int m = 0; m < w.mmas_m; ++m) as.push_back(a_frag(kk, m));
    for (int kk = 0; kk < BK; kk += 16)
      for (int n = 0; n < w.mmas_n; n += 2) bs.push_back(b_frag(kk, n));
    for (int kk = 0; kk < BK / 16; ++kk)
      for (int m = 0; m < w.mmas_m; ++m)
        for (int n = 0; n < w.mmas_n; ++n)
          mma(as[kk * w.mmas_m + m], bs[kk * w.mmas_n / 2 + n / 2], m, n);
  };

  if (p.stages == 1) {
    k.For(0, g.K, BK, [&](Value k0) {
      load(k0, k.I32(0));
      k.CpAsyncWaitAll();
      k.SyncThreads();
      compute(k.I32(0));
      k.SyncThreads();
    });
  } else {
    const int ahead = p.stages - 1;  // k-tiles in flight ahead of the one computed
    for (int s = 0; s < ahead; ++s) {
      if (p.peel_tail)
        load(k.I32(s * BK), k.I32(s));
      else
        k.If(k.I32(s * BK) < g.K, [&] { load(k.I32(s * BK), k.I32(s)); });
      k.CpAsyncCommit();
    }
    auto step = [&](Value k0, bool guarded) {
      Value kt = k0 / BK, next = k0 + ahead * BK;
      k.SyncThreads();  // every warp is done with the stage about to be refilled
      if (guarded)
        k.If(next < g.K, [&] { load(next, (kt + ahead) % p.stages); });
      else
        load(next, (kt + ahead) % p.stages);
      k.CpAsyncCommit();
      k.CpAsyncWait(ahead);
      k.SyncThreads();
      compute(kt % p.stages);
    };
    if (!p.peel_tail) {
      k.For(0, g.K, BK, [&](Value k0) { step(k0, true); });
    } else {
      k.For(0, g.K - ahead * BK, BK, [&](Value k0) { step(k0, false); });
      for (int t = ahead; t > 0; --t) {  // nothing left to load: commit empty groups to keep counts
        Value kt = g.K / BK - t;
        k.CpAsyncCommit();
        k.CpAsyncWait(ahead);
        k.SyncThreads();
        compute(kt % p.stages);
      }
    }
  }
  StoreAccumulator(k, acc, w.mmas_m, w.mmas_n, [&](Value r, Value c) {
    return g.C.At({m0 + w.m0 + r, n0 + w.n0 + c});
  });
  return k.Build();
}

namespace {
MmaPipeline Version(const char* name, int stages, bool fragments_first, bool peel, int group_m) {
  return {.name = name,
          .bm = 128,
          .bn = 64,
          .stages = stages,
          .fragments_first = fragments_first,
          .peel_tail = peel,
          .group_m = group_m};
}
}  // namespace

KILN_EXAMPLE_VARIANT(v5, "ampere/v5",
                     "seed 003 v5: 128x64 tile, ldmatrix.x4 for B, swizzled, one stage",
                     [] { return BuildMmaPipeline(Version("ampere/v5", 1, false, false, 0)); });
KILN_EXAMPLE_VARIANT(v6, "ampere/v6",
                     "seed 003 v6: two-stage cp.async ring, fragments loaded first",
                     [] { return BuildMmaPipeline(Version("ampere/v6", 2, true, false, 0)); });
KILN_EXAMPLE_VARIANT(v7, "ampere/v7", "seed 003 v7: v6 with the last stage peeled off the loop",
                     [] { return BuildMmaPipeline(Version("ampere/v7", 2, true, true, 0)); });
KILN_EXAMPLE_VARIANT(v8, "ampere/v8", "seed 003 v8: v7 with GROUP_M = 8 block order",
                     [] { return BuildMmaPipeline(Version("ampere/v8", 2, true, true, 8)); });
}  // namespace kiln::examples
