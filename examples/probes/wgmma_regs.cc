// probe/wgmma_regs: the attention pattern of two chained GEMMs on one warpgroup, the second with
// A from registers: S = A * B1^T (wgmma from shared memory), P = bf16(S) taken straight from the
// accumulator (WgmmaAccumulator::FragmentA), D = P * B2^T (wgmma with A in registers), and
// D2 = P * B2 with the same tile read MN-major (B2 as K rows of N, attention's V). All tiles are
// 64 x 64 bf16, 128B-swizzled, filled by plain loads and stores. The check
// (examples/probe_check.cc) recomputes D and D2 from the inputs.
#include "examples/registry.h"
#include "kiln/hopper.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildWgmmaRegs() {
  constexpr int kTile = 64, kThreads = 128;
  Kernel k("probe/wgmma_regs", sm90a(), {kThreads});
  Value a = k.PtrParam("a", bf16), b1 = k.PtrParam("b1", bf16), b2 = k.PtrParam("b2", bf16);
  Value d = k.PtrParam("d", f32), d2 = k.PtrParam("d2", f32);
  k.Grid("1");
  SmemTile ta = k.SmemSwizzled(bf16, kTile, kTile, Swizzle::k128B);
  SmemTile tb1 = k.SmemSwizzled(bf16, kTile, kTile, Swizzle::k128B);
  SmemTile tb2 = k.SmemSwizzled(bf16, kTile, kTile, Swizzle::k128B);
  Value tid = k.ThreadIdx();
  // 16-byte chunks, 8 per row: generic-proxy writes, fenced before the async proxy reads them.
  for (int pass = 0; pass < kTile * kTile / 8 / kThreads; ++pass) {
    Value chunk = tid + pass * kThreads;
    Value row = chunk / 8, col = chunk % 8 * 8;
    Value at = (row * kTile + col).To(i64);
    k.Store(ta.At(row, col), k.Load(a + at, 8));
    k.Store(tb1.At(row, col), k.Load(b1 + at, 8));
    k.Store(tb2.At(row, col), k.Load(b2 + at, 8));
  }
  k.FenceProxyAsync();
  k.SyncThreads();

  WgmmaAccumulator s = k.WgmmaAcc(kTile);
  k.WgmmaFence();
  for (int k0 = 0; k0 < kTile; k0 += 16)
    k.Wgmma(s, {.a = ta, .b = tb1, .k0 = k0, .accumulate = k0 > 0});
  k.WgmmaCommit();
  k.WgmmaWait(0);

  // The A fragments are made before the wgmma.fence that orders them before the wgmmas (PTX ISA).
  std::vector<std::vector<Value>> p;
  for (int j = 0; j < kTile / 16; ++j) p.push_back(s.FragmentA(j, bf16));
  WgmmaAccumulator o = k.WgmmaAcc(kTile);
  k.WgmmaFence();
  for (int j = 0; j < kTile / 16; ++j)
    k.Wgmma(o, {.a_regs = p[j], .b = tb2, .k0 = 16 * j, .accumulate = j > 0});
  k.WgmmaCommit();
  k.WgmmaWait(0);

  WgmmaAccumulator o2 = k.WgmmaAcc(kTile);
  k.WgmmaFence();
  for (int j = 0; j < kTile / 16; ++j)
    k.Wgmma(o2, {.a_regs = p[j], .b = {tb2, /*mn_major=*/true}, .k0 = 16 * j, .accumulate = j > 0});
  k.WgmmaCommit();
  k.WgmmaWait(0);

  for (int p = 0; p < kTile / 4; ++p) {
    Value at = (o.Row(p) * kTile + o.Col(p)).To(i64);
    k.Store(d + at, o[2 * p]);
    k.Store(d + at + 1, o[2 * p + 1]);
    k.Store(d2 + at, o2[2 * p]);
    k.Store(d2 + at + 1, o2[2 * p + 1]);
  }
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("probe/wgmma_regs",
             "S = A*B1^T, then bf16(S)*B2^T and bf16(S)*B2 (MN-major B) with A from registers",
             BuildWgmmaRegs);
}  // namespace kiln::examples
