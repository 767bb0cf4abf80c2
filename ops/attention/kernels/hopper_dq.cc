// attention/hopper_dq: dQ of FlashAttention's backward for sm_90a (hopper_bwd_parts.h says the
// algorithm). A CTA per query tile of 64 * W rows of one head: a producer warp loads that tile of
// Q and dO once, then K and V tile by tile (causally up to the tile's last row's diagonal), each
// into a ring of its own. Consumer warpgroup w owns rows w * 64.. of the tile and, per key tile:
//   S = Q_w K^T and dP = dO_w V^T               (wgmma, both operands from shared memory)
//   P = 2^(S * scale log2 e - lse2), 0 where masked; dS = P * (dP - delta)
//   dQ_w += dS K                                (wgmma, dS from registers, K read MN-major)
// and at the end stores scale * dQ_w through its rows of Q's tile.
//
// Constraints (checked at build): 1 to 3 consumer warpgroups; a key tile of a multiple of 16 rows
// up to 128.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/hopper_bwd_parts.h"

namespace kiln::examples {
namespace {

using attention_sm90::BackwardParams;

absl::StatusOr<KernelDef> BuildDq(const std::string &name, AttentionShape a) {
  if (!a.warpgroups) a.warpgroups = 2;
  if (!a.block_n) a.block_n = a.d == 256 ? 32 : 64;  // D = 256: dQ's 128 registers beside S, dP
  if (!a.stages) a.stages = 2;
  const int D = a.d, W = a.warpgroups, BM = 64 * W, BN = a.block_n, SPANS = D / 64;
  const Scalar in = a.in;
  // (a block within 1024 threads, so that an out-of-range W is refused by its own rule below)
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (std::clamp(W, 1, 3) + 1))});
  // At D = 64, as hopper_dkdv's: the entry's register count pinned, or ptxas ignores the roles'
  // setmaxnreg (docs/perf/2026-12-01-setmaxnreg-pinned.md).
  if (D == 64) k.MinBlocksPerSm(1);
  if (W < 1 || W > 3) k.Fail(absl::StrCat("hopper_dq takes 1 to 3 consumer warpgroups, not ", W));
  if (BN % 16 || BN < 16 || BN > 128)
    k.Fail(absl::StrCat("a key tile of ", BN, " rows: a multiple of 16 up to 128"));
  if (a.persistent || a.split || a.per_sequence() || a.rows || a.two_ctas)
    k.Fail("hopper_dq runs [B, H, S, D] tensors or packed sequences, a CTA per query tile");
  RefuseForwardOptions(k, a, "attention/hopper_dq");
  if (k.failed()) return k.Build();  // (the code below assumes these)
  const BackwardParams p = attention_sm90::DeclareBackwardParams(k, a, BM, BN, /*dkdv=*/false);
  k.Grid(a.varlen ? "tiles*Hq" : absl::StrCat("S/", BM, "*Hq*B"));
  k.Attribute("attention_backward",
              absl::StrCat("d=", D, " causal=", a.causal, " block_m=", BM, " block_n=", BN));

  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B);
  SmemTile sdO = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B);
  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, a.stages);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, a.stages);
  Pipeline q_ring(k, 1, W), k_ring(k, a.stages, W), v_ring(k, a.stages, W);

  const attention_sm90::QueryTileWork w = attention_sm90::QueryTileOf(k, p, a, BM, BN);
  const Value &m0 = w.m0, &q_head = w.q_head, &kv_head = w.kv_head, &n_tiles = w.n_tiles;

  k.If(k.ThreadIdx() == 0, [&] {
    q_ring.Init();
    k_ring.Init();
    v_ring.Init();
  });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value tid) {
    k.If(tid == 0, [&] {
      Pipeline::Cursor q_at = q_ring.Start(), k_at = k_ring.Start(), v_at = v_ring.Start();
      Value row = w.Row(m0);
      q_ring.Produce(q_at, {{&p.tq, sQ, {0, row, 0, q_head}}, {&p.tdo, sdO, {0, row, 0, q_head}}});
      k.For(0, n_tiles, 1, [&](Value j) {
        k_ring.Produce(k_at, {{&p.tk, sK, {0, w.Row(j * BN), 0, kv_head}}});
        v_ring.Produce(v_at, {{&p.tv, sV, {0, w.Row(j * BN), 0, kv_head}}});
      });
    });
  });

  const int consumer_regs = std::min(240, (65536 / 128 - 24) / W / 8 * 8);
  k.Role({.first_thread = 128, .threads = 128 * W, .max_regs = consumer_regs}, [&](Value tid) {
    Value c = tid % 128, wg = ConsumerWarpgroup(a, tid), row0 = wg * 64;
    Value scale_log2 = p.scale * M_LOG2E;
    Pipeline::Cursor q_at = q_ring.Start(), k_at = k_ring.Start(), v_at = v_ring.Start();
    WgmmaAccumulator dq = k.WgmmaAcc(D);
    // Each thread's two rows: their lse2 and delta (rows past S: +inf and 0, P = 0).
    RowPair lse2, delta, limit;
    const Value &S = w.queries, &Skv = w.keys;
    for (int half = 0; half < 2; ++half) {
      Value row = m0 + row0 + dq.Row(half);
      if (a.varlen) {  // (a CTA past the sequences' tiles has none: the loads masked)
        Value at = q_head.To(i64) * p.Sp.To(i64) + w.Row(row).To(i64);
        lse2[half] = LoadGlobal(p.lse2 + at, 1, {.mask = row < S, .fill = INFINITY});
        delta[half] = LoadGlobal(p.delta + at, 1, {.mask = row < S, .fill = 0.0});
      } else {
        Value at = (q_head.To(i64) * p.Sp.To(i64) + Min(row, S - 1).To(i64));
        lse2[half] = Select(row < S, k.Load(p.lse2 + at), k.F32(INFINITY));
        delta[half] = Select(row < S, k.Load(p.delta + at), k.F32(0));
      }
      limit[half] = a.causal ? Min(Skv.To(s32), row.To(s32) + 1 + w.shift) : Skv.To(s32);
    }
    // S and dP, overwritten by each step's first wgmma (made outside the loop: see hopper_dkdv).
    WgmmaAccumulator s = k.WgmmaAcc(BN), dp = k.WgmmaAcc(BN);
    Value qs = q_ring.Acquire(q_at);
    k.For(0, n_tiles, 1, [&](Value j) {
      Value ks = k_ring.Acquire(k_at);
      // A packed sequence's last key tile holds the next sequence's rows past it: zeroed, as dP's
      // and dQ's GEMMs take 0 times them (ZeroRowsFrom).
      if (a.varlen) ZeroRowsFrom(k, sK.Stage(ks), BN, SPANS, in, Skv - j * BN, tid, 128 * W, W + 1);
      k.WgmmaFence();
      attention_sm90::IssueOverD(k, s, D, sQ, BM, row0, sK.Stage(ks), BN);
      Value vs = v_ring.Acquire(v_at);
      if (a.varlen) ZeroRowsFrom(k, sV.Stage(vs), BN, SPANS, in, Skv - j * BN, tid, 128 * W, W + 1);
      k.WgmmaFence();  // (its accumulator last written before the wait above)
      attention_sm90::IssueOverD(k, dp, D, sdO, BM, row0, sV.Stage(vs), BN);
      k.WgmmaWait(1);  // S is in
      MaskColumns(s, j * BN, limit, -INFINITY);
      for (int pair = 0; pair < BN / 4; ++pair)
        for (int e = 0; e < 2; ++e) {
          const int half = WgmmaAccumulator::RowSlot(pair);
          s[2 * pair + e] = Exp2(Fma(s[2 * pair + e], scale_log2, -lse2[half]));
        }
      k.WgmmaWait(0);  // dP is in
      v_ring.Release(vs, c);
      for (int pair = 0; pair < BN / 4; ++pair)
        for (int e = 0; e < 2; ++e) {
          const int half = WgmmaAccumulator::RowSlot(pair);
          dp[2 * pair + e] = s[2 * pair + e] * (dp[2 * pair + e] - delta[half]);
        }
      std::vector<std::vector<Value>> ds_frags;  // made before the fence that orders them
      for (int f = 0; f < BN / 16; ++f) ds_frags.push_back(dp.FragmentA(f, in));
      k.WgmmaFence();
      for (int f = 0; f < BN / 16; ++f)
        k.Wgmma(dq, {.a_regs = ds_frags[f], .b = {sK.Stage(ks), true, BN}, .k0 = f * 16});
      k.WgmmaCommit();
      k.WgmmaWait(0);
      k_ring.Release(ks, c);
    });
    // This warpgroup's rows of Q's tile are read by no wgmma now: dQ goes out through them.
    if (a.varlen)
      attention_sm90::StoreGradientRows(k, dq, p.scale, p.out[0], p.Hq, D, q_head, w.seq0,
                                        m0 + row0, S, k.I32(0), in);
    else
      attention_sm90::StoreGradientTile(k, dq, p.scale, sQ, BM, W, wg, c, 1, p.tout[0], m0 + row0,
                                        q_head, in);
    q_ring.Release(qs, c);
  });
  return k.Build();
}

ExampleFamily DqFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/hopper_dq",
      "FlashAttention backward for sm_90a, dQ: a CTA per query tile walks its key tiles (S and "
      "dP rebuilt, dS from registers into dQ); D 64/128/256, bf16/f16, causal, grouped-query heads",
      BuildDq);
  f.bundled = attention_sm90::BundledBackwardVariants({"", ".varlen"});
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_hopper_dq, DqFamily());
}  // namespace kiln::examples
