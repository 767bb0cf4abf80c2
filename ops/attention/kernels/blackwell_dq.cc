// attention/blackwell_dq: dQ of FlashAttention's backward for sm_100a (the algorithm:
// hopper_bwd_parts.h), on tcgen05 with S, dP and dQ in tensor memory. A CTA per query tile of 128
// rows of one head (TMEM lane r: row r), walking its key tiles of 64 (causally up to the tile's
// last row's diagonal), as attention/hopper_dq does:
//   warp 4      loads Q and dO once, then K and V tile by tile (two rings);
//   warp 5      one thread issues the MMAs: S = Q K^T (columns [0, 64)) and dP = dO V^T
//               ([64, 128)), then, once dS is in shared memory, dQ += dS K ([128, 128 + D), K
//               read MN-major);
//   warps 0-3   thread r takes row r: S and dP out of tensor memory, P = 2^(S scale log2 e - lse2)
//               (0 where masked) and dS = P (dP - delta) rounded into a shared tile; at the end
//               scale * dQ out of tensor memory, through Q's tile and TMA stores.
// The next S and dP are issued once the softmax has read this tile's (st_free), so they run under
// its softmax; dS's tile is rewritten once the MMA that read it has completed (p_free). D 64 or
// 128 (shared memory: at D = 256 Q, dO and the K and V rings would not fit).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/blackwell_bwd_parts.h"
#include "ops/attention/kernels/hopper_bwd_parts.h"

namespace kiln::examples {
namespace {

using attention_sm90::BackwardParams;
using attention_sm90::QueryTileWork;

constexpr int kRows = 128, kKeys = 64, kStages = 2;

struct BlackwellDq {
  Kernel& k;
  AttentionShape a;
  int D, SPANS;
  BackwardParams p;
  QueryTileWork w;
  SmemTile sQ, sdO, sK, sV, sdS;
  Barrier q_full, st_full, st_free, p_full, p_free;
  Pipeline &k_ring, &v_ring;
  Tmem tmem;
};

// Warp 4: Q and dO once, then K and V tile by tile.
void LoadWarp(BlackwellDq& b) {
  Kernel& k = b.k;
  const BackwardParams& p = b.p;
  k.If(k.ElectOne(), [&] {
    b.q_full.ArriveExpectTx({&p.tq, &p.tdo});
    k.TmaLoad(p.tq, b.sQ, b.q_full, {0, b.w.m0, 0, b.w.q_head});
    k.TmaLoad(p.tdo, b.sdO, b.q_full, {0, b.w.m0, 0, b.w.q_head});
    Pipeline::Cursor k_at = b.k_ring.Start(), v_at = b.v_ring.Start();
    k.For(0, b.w.n_tiles, 1, [&](Value j) {
      b.k_ring.Produce(k_at, {{&p.tk, b.sK, {0, j * kKeys, 0, b.w.kv_head}}});
      b.v_ring.Produce(v_at, {{&p.tv, b.sV, {0, j * kKeys, 0, b.w.kv_head}}});
    });
  });
}

// Warp 5, one thread: S and dP of key tile 0; then per tile j, S and dP of tile j + 1 once the
// softmax has read tile j's (so they run under its softmax), and dQ of tile j once its dS is in.
void MmaWarp(BlackwellDq& b) {
  Kernel& k = b.k;
  const int D = b.D;
  k.If(k.ElectOne(), [&] {
    Pipeline::Cursor k_at = b.k_ring.Start(), v_at = b.v_ring.Start();
    Regs k_stage = k.Registers(Type::Of(i32), 1);  // tile j's K stage
    auto issue_s = [&] {                           // the next tile's: its stages acquired
      Value ks = b.k_ring.Acquire(k_at), vs = b.v_ring.Acquire(v_at);
      k_stage[0] = ks;
      k.TcgenFenceAfterSync();
      for (int x = 0; x < 2; ++x)  // S from Q and K, dP from dO and V
        for (int kk = 0; kk < D; kk += 16)
          k.TcgenMma(b.tmem, {.m = kRows,
                              .n = kKeys,
                              .d_column = x * kKeys,
                              .a = x ? b.sdO : b.sQ,
                              .a_row0 = kk / 64 * kRows,
                              .b = x ? b.sV.Stage(vs) : b.sK.Stage(ks),
                              .b_row0 = kk / 64 * kKeys,
                              .k0 = kk % 64,
                              .accumulate = kk > 0 ? 1 : 0});
      k.TcgenCommit(b.st_full);
      k.TcgenCommit(b.v_ring.EmptyBarrier(vs));  // V is read by dP only
    };
    k.If(b.w.n_tiles > 0, [&] {
      b.q_full.Wait(0);
      issue_s();
    });
    k.For(0, b.w.n_tiles, 1, [&](Value j) {
      Value ks = k_stage[0];
      k.If(j + 1 < b.w.n_tiles, [&] {
        b.st_free.Wait(j % 2);  // the softmax has read S and dP of tile j
        issue_s();
      });
      b.p_full.Wait(j % 2);
      k.TcgenFenceAfterSync();
      for (int kk = 0; kk < kKeys; kk += 16)
        k.TcgenMma(b.tmem, {.m = kRows,
                            .n = D,
                            .d_column = 2 * kKeys,
                            .a = b.sdS,
                            .b = {b.sK.Stage(ks), true, kKeys},
                            .k0 = kk,
                            .b_k0 = kk,
                            .accumulate = kk > 0 ? Operand(1) : Operand(j > 0)});
      k.TcgenCommit(b.p_free);
      k.TcgenCommit(b.k_ring.EmptyBarrier(ks));
    });
  });
}

// Warps 0-3, thread r (row m0 + r): dS of each key tile, then dQ out.
void SoftmaxWarps(BlackwellDq& b) {
  Kernel& k = b.k;
  const BackwardParams& p = b.p;
  const QueryTileWork& w = b.w;
  Value r = k.ThreadIdx(), lane0 = k.WarpId() * 32, row = w.m0 + r;
  Value scale_log2 = p.scale * M_LOG2E;
  // The row's lse2 and delta (rows past S: +inf and 0, so P = 0), and the keys it sees.
  Value at = w.q_head.To(i64) * p.Sp.To(i64) + Min(row, w.queries - 1).To(i64);
  Value lse2 = Select(row < w.queries, k.Load(p.lse2 + at), k.F32(INFINITY));
  Value delta = Select(row < w.queries, k.Load(p.delta + at), k.F32(0));
  Value limit = b.a.causal ? Min(w.keys.To(s32), row.To(s32) + 1 + w.shift) : w.keys.To(s32);
  k.For(0, w.n_tiles, 1, [&](Value j) {
    b.st_full.Wait(j % 2);
    k.TcgenFenceAfterSync();
    std::vector<Value> s = k.TcgenLoad(b.tmem, lane0, 0, kKeys);
    std::vector<Value> dp = k.TcgenLoad(b.tmem, lane0, kKeys, kKeys);
    k.TcgenFenceBeforeSync();
    b.st_free.Arrive();
    MaskColumns(s, (j * kKeys).To(s32), limit, -INFINITY);
    for (int c = 0; c < kKeys; ++c) {
      s[c] = Exp2(Fma(s[c], scale_log2, -lse2));  // P (0 where masked: 2^-inf)
      dp[c] = s[c] * (dp[c] - delta);             // dS
    }
    k.If(j > 0, [&] { b.p_free.Wait((j + 1) % 2); });  // tile j - 1's MMA read dS
    const std::vector<Value> packed = PackPairs(dp, b.a.in);
    for (int c = 0; c < kKeys; c += 2) k.Store(b.sdS.At(r, c), packed[c / 2]);
    k.FenceProxyAsync();  // dS is read by the MMA
    k.TcgenFenceBeforeSync();
    b.p_full.Arrive();
  });
  // scale * dQ through Q's tile: every MMA has completed once the last p_free has (with no key
  // tile, Q must have landed before it is overwritten, and dQ = 0).
  b.q_full.Wait(0);
  auto put = [&](int c0, std::vector<Value> v) {
    ScaleRow(v, p.scale);
    const std::vector<Value> packed = PackPairs(v, b.a.in);
    for (int c = 0; c < 32; c += 2)
      k.Store(b.sQ.At((c0 + c) / 64 * kRows + r, (c0 + c) % 64), packed[c / 2]);
  };
  k.If(
      w.n_tiles > 0,
      [&] {
        b.p_free.Wait((w.n_tiles + 1) % 2);
        k.TcgenFenceAfterSync();
        for (int c = 0; c < b.D; c += 32) put(c, k.TcgenLoad(b.tmem, lane0, 2 * kKeys + c, 32));
      },
      [&] {
        for (int c = 0; c < b.D; c += 32) put(c, std::vector<Value>(32, k.F32(0)));
      });
  k.FenceProxyAsync();
  k.NamedBarrier(1, kRows);
  k.If(r == 0, [&] {
    for (int span = 0; span < b.SPANS; ++span)
      for (int half = 0; half < 2; ++half)
        k.TmaStore(p.tout[0], b.sQ.Rows(span * kRows + half * 64, 64),
                   {0, w.m0 + half * 64, span, w.q_head});
    k.BulkCommit();
    k.BulkWait(0);
  });
}

absl::StatusOr<KernelDef> BuildBlackwellDq(const std::string& name, AttentionShape a) {
  const int D = a.d, SPANS = D / 64;
  Kernel k(name, sm100a(), {192});
  if (D == 256) k.Fail("attention/blackwell_dq takes D = 64 or 128 (shared memory)");
  if (a.warpgroups || a.block_n || a.stages || a.persistent || a.split || a.per_sequence() ||
      a.varlen || a.rows || a.dq_add || a.two_ctas || a.uniform_warpgroup >= 0)
    k.Fail("attention/blackwell_dq has one tiling and dense [B, H, S, D] tensors");
  RefuseForwardOptions(k, a, "attention/blackwell_dq");
  const BackwardParams p = attention_sm90::DeclareBackwardParams(k, a, kRows, kKeys, false);
  k.Grid(absl::StrCat("S/", kRows, "*Hq*B"));
  k.Attribute("attention_backward",
              absl::StrCat("d=", D, " causal=", a.causal, " block_m=", kRows, " block_n=", kKeys));
  SmemTile sQ = k.SmemSwizzled(a.in, SPANS * kRows, 64, Swizzle::k128B);
  SmemTile sdO = k.SmemSwizzled(a.in, SPANS * kRows, 64, Swizzle::k128B);
  SmemTile sK = k.SmemSwizzled(a.in, SPANS * kKeys, 64, Swizzle::k128B, kStages);
  SmemTile sV = k.SmemSwizzled(a.in, SPANS * kKeys, 64, Swizzle::k128B, kStages);
  SmemTile sdS = k.SmemSwizzled(a.in, kRows, kKeys, Swizzle::k128B);  // dS [rows, keys]
  Barriers bars = k.SmemBarriers(5);
  Pipeline k_ring(k, kStages, 1), v_ring(k, kStages, 1);
  Tmem tmem = k.TensorMemory(2 * kKeys + D <= 256 ? 256 : 512);
  BlackwellDq b{k,       a,       D,
                SPANS,   p,       attention_sm90::QueryTileOf(k, p, a, kRows, kKeys),
                sQ,      sdO,     sK,
                sV,      sdS,     bars[0],
                bars[1], bars[2], bars[3],
                bars[4], k_ring,  v_ring,
                tmem};
  attention_sm100::RunBackwardRoles(
      k, tmem,
      [&] {
        b.q_full.Init(1);
        b.st_full.Init(1);      // a commit: S and dP computed
        b.st_free.Init(kRows);  // every softmax thread has read them
        b.p_full.Init(kRows);   // every softmax thread has written its dS row
        b.p_free.Init(1);       // a commit: the step's dQ MMA done (dS's tile free)
        k_ring.Init();
        v_ring.Init();
      },
      [&] { LoadWarp(b); }, [&] { MmaWarp(b); }, [&] { SoftmaxWarps(b); });
  return k.Build();
}

ExampleFamily BlackwellDqFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/blackwell_dq",
      "FlashAttention backward for sm_100a, dQ: a CTA per 128-row query tile, S, dP and dQ in "
      "tensor memory, a TMA warp, an MMA warp, a warpgroup a row a thread; D 64/128, "
      "bf16/f16, causal, grouped-query heads",
      BuildBlackwellDq);
  f.bundled = attention_sm100::BlackwellBackwardVariants();
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_blackwell_dq, BlackwellDqFamily());
}  // namespace kiln::examples
