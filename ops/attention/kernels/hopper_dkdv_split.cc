// attention/hopper_dkdv at D = 256 (hopper_bwd_parts.h says the algorithm). dK and dV of 64 keys
// by 256 columns take 256 registers a thread in one warpgroup, so here the two consumer
// warpgroups share a key tile of 64 and split D: warpgroup w holds dK's and dV's columns 128w...
// A producer warp loads the tile of K and V once, then walks the query tiles of 64 rows that see
// it as hopper_dkdv does (each query head of the group, Q with lse2, dO with delta, two rings).
// Per query tile, warpgroup w takes the queries 32w..:
//   S^T = K Q_w^T and dP^T = V dO_w^T            (wgmma, 64 keys x 32 queries over all of D)
//   P^T and dS^T as hopper_dkdv makes them, rounded into shared tiles [64 keys, 64 queries]
// the warpgroups meet, and each adds
//   dV_w += P^T dO[:, 128w..] and dK_w += dS^T Q[:, 128w..]   (wgmma, A from those tiles)
// The tiles are a ring of two: a warpgroup writes one again only after both have met at the next
// step, by which time both have waited for the wgmmas that read it. At the end each warpgroup
// stores scale * dK_w and dV_w through its spans of K's and V's tiles.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/hopper_bwd_parts.h"

namespace kiln::examples::attention_sm90 {
namespace {

constexpr int kKeys = 64, kQueryRows = 64, kWarpgroups = 2, kProducerRegs = 24;

// One warpgroup's accumulator (64 keys x its 32 queries) rounded into columns q0.. of `tile`.
void StoreHalf(Kernel& k, const WgmmaAccumulator& acc, const SmemTile& tile, const Value& q0,
               Scalar in) {
  const std::vector<Value> packed = PackPairs(acc, in);
  for (int pair = 0; pair < acc.n() / 4; ++pair)
    k.Store(tile.At(acc.Row(pair), q0 + acc.Col(pair)), packed[pair]);
}

}  // namespace

absl::StatusOr<KernelDef> BuildDkDvSplitD(const std::string& name, AttentionShape a) {
  if (!a.stages) a.stages = 2;
  const int D = a.d, W = kWarpgroups, BN = kKeys, BM = kQueryRows, SPANS = D / 64;
  const Scalar in = a.in;
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (W + 1))});
  if (a.warpgroups && a.warpgroups != W)
    k.Fail("hopper_dkdv at D = 256 takes 2 consumer warpgroups (they split D)");
  if (a.dq_add) k.Fail("hopper_dkdv.dqadd takes D = 64 or 128");
  if (a.persistent || a.split || a.per_sequence() || a.rows || a.two_ctas)
    k.Fail("hopper_dkdv runs [B, H, S, D] tensors or packed sequences, a CTA per key tile");
  RefuseForwardOptions(k, a, "attention/hopper_dkdv");
  if (a.block_n && a.block_n != BN)
    k.Fail(absl::StrCat("hopper_dkdv at D = 256 takes key tiles of ", BN, ": no bn", a.block_n));
  if (k.failed()) return k.Build();  // (the code below assumes these)
  const BackwardParams p = DeclareBackwardParams(k, a, BM, BN, /*dkdv=*/true);
  k.Grid(a.varlen ? "tiles*Hkv" : absl::StrCat("Skv/", BN, "*Hkv*B"));
  k.Attribute("attention_backward",
              absl::StrCat("d=", D, " causal=", a.causal, " block_n=", BN, " split_d=", W));

  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B);
  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, a.stages);
  SmemTile sdO = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, a.stages);
  const int row_values = kRowValuesBox;  // (lse2 and delta: a box's)
  SmemTile sLse = k.Smem(f32, 1, row_values, SmemLayout{.stages = a.stages});
  SmemTile sDelta = k.Smem(f32, 1, row_values, SmemLayout{.stages = a.stages});
  SmemTile sP = k.SmemSwizzled(in, BN, BM, Swizzle::k128B, 2);  // P^T [keys, queries], two
  SmemTile sdS = k.SmemSwizzled(in, BN, BM, Swizzle::k128B, 2);
  Pipeline kv_ring(k, 1, W), q_ring(k, a.stages, W), do_ring(k, a.stages, W);

  const KeyTileWork w = KeyTileOf(k, p, a, BN, BM);
  const Value &n0 = w.n0, &kv_head = w.kv_head;

  k.If(k.ThreadIdx() == 0, [&] {
    kv_ring.Init();
    q_ring.Init();
    do_ring.Init();
  });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128, .max_regs = kProducerRegs}, [&](Value tid) {
    k.If(tid == 0, [&] {
      ProduceDkDv(k, p, a, w, BM, {sK, sV, sQ, sdO, sLse, sDelta}, kv_ring, q_ring, do_ring);
    });
  });

  k.Role({.first_thread = 128, .threads = 128 * W, .max_regs = 240}, [&](Value tid) {
    Value c = tid % 128, wg = ConsumerWarpgroup(a, tid), q0 = wg * (BM / W);
    Value scale_log2 = p.scale * M_LOG2E;
    Pipeline::Cursor kv_at = kv_ring.Start(), q_at = q_ring.Start(), do_at = do_ring.Start();
    WgmmaAccumulator dk = k.WgmmaAcc(D / W), dv = k.WgmmaAcc(D / W);
    // S^T and dP^T of this warpgroup's queries, made outside the loop (see hopper_dkdv).
    WgmmaAccumulator st = k.WgmmaAcc(BM / W), dpt = k.WgmmaAcc(BM / W);
    Regs step = k.Registers(Type::Of(i32), 1);  // which buffer of sP and sdS
    Value kvs = kv_ring.Acquire(kv_at);
    EachQueryTile(k, w, BM, [&](Value q_head, Value m0) {
      Value qs = q_ring.Acquire(q_at);
      // The next packed sequence's rows past this one's, zeroed (as hopper_dkdv).
      if (a.varlen) ZeroRowsFrom(k, sQ.Stage(qs), BM, SPANS, in, w.q_end - m0, tid, 128 * W, W + 1);
      k.WgmmaFence();
      IssueOverD(k, st, D, sK, BN, k.I32(0), sQ.Stage(qs), BM, q0);
      Value ds = do_ring.Acquire(do_at);
      if (a.varlen)
        ZeroRowsFrom(k, sdO.Stage(ds), BM, SPANS, in, w.q_end - m0, tid, 128 * W, W + 1);
      k.WgmmaFence();
      IssueOverD(k, dpt, D, sV, BN, k.I32(0), sdO.Stage(ds), BM, q0);
      k.WgmmaWait(1);  // S^T is in
      Value off = RowValuesOffset(a, w.Row(m0));
      ProbabilitiesT(k, st, sLse.Stage(qs), q0, n0, m0, w.keys, a.causal ? w.shift : Value(),
                     scale_log2, w.q_end, off);
      k.WgmmaWait(0);  // dP^T is in
      ScoreGradsT(k, st, dpt, sDelta.Stage(ds), q0, off, a.varlen);
      Value buf = step[0] % 2;
      StoreHalf(k, st, sP.Stage(buf), q0, in);
      StoreHalf(k, dpt, sdS.Stage(buf), q0, in);
      k.FenceProxyAsync();  // the generic writes, before the wgmmas read them
      k.NamedBarrier(W + 1, 128 * W);
      k.WgmmaFence();
      for (int kk = 0; kk < BM; kk += 16)
        k.Wgmma(
            dv,
            {.a = sP.Stage(buf), .b = {sdO.Stage(ds), true, BM}, .b_row0 = wg * (D / W), .k0 = kk});
      for (int kk = 0; kk < BM; kk += 16)
        k.Wgmma(
            dk,
            {.a = sdS.Stage(buf), .b = {sQ.Stage(qs), true, BM}, .b_row0 = wg * (D / W), .k0 = kk});
      k.WgmmaCommit();
      k.WgmmaWait(0);
      step[0] = step[0] + 1;
      // lse2 and delta were read through the generic proxy: fenced, the warpgroup meets, one
      // thread releases (as hopper_dkdv).
      k.FenceProxyAsync();
      k.NamedBarrier(wg + 1, 128);
      q_ring.Release(qs, c);
      do_ring.Release(ds, c);
    });
    // Both warpgroups' last S^T and dP^T wgmmas, the only readers of K's and V's tiles, retired
    // before the last meeting: dK and dV go out through this warpgroup's spans of them.
    if (a.varlen) {
      for (int x = 0; x < 2; ++x)
        StoreGradientRows(k, x ? dv : dk, x ? Value() : p.scale, p.out[x], p.Hkv, D, kv_head,
                          w.seq0, n0, w.keys, wg * (D / W), in);
    } else {
      StoreGradientTile(k, dk, p.scale, sK, BN, W, wg, c, 1, p.tout[0], n0, kv_head, in,
                        /*split_d=*/true);
      StoreGradientTile(k, dv, Value(), sV, BN, W, wg, c, 1, p.tout[1], n0, kv_head, in,
                        /*split_d=*/true);
    }
    kv_ring.Release(kvs, c);
  });
  return k.Build();
}

}  // namespace kiln::examples::attention_sm90
