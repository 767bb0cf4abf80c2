// attention/blackwell_dkdv: dK and dV of FlashAttention's backward for sm_100a (the algorithm:
// hopper_bwd_parts.h), on tcgen05 with S^T, dP^T, dV and dK in tensor memory. A CTA per key tile
// of 128 keys of one KV head (TMEM lane r: key r), walking the query tiles of 64 rows that see
// it over every query head of the group, as attention/hopper_dkdv does:
//   warp 4      loads K and V once, then Q with its rows' lse2 and dO with their delta (rings);
//   warp 5      one thread issues the MMAs: S^T = K Q^T (columns [0, 64)) and dP^T = V dO^T
//               ([64, 128)), then, once P^T and dS^T are in shared memory, dV += P^T dO
//               ([128, 128 + D)) and dK += dS^T Q ([128 + D, 128 + 2D)), dO and Q read MN-major;
//   warps 0-3   thread r takes key r: S^T and dP^T out of tensor memory, P^T = 2^(S^T scale log2 e
//               - lse2) (0 where masked) and dS^T = P^T (dP^T - delta) rounded into shared tiles;
//               at the end scale * dK and dV out of tensor memory, through K's and V's tiles and
//               TMA stores.
// S^T and dP^T of the next step are issued once the softmax has read this one's (st_free), so
// they run under its softmax; P^T's tiles are rewritten once the MMAs that read them have
// completed (p_free). Deterministic: no adds
// into memory another CTA writes.
//
// D 64 or 128 (S^T, dP^T, dV and dK fill 128 + 2D of the 512 columns); dense [B, H, S, D] tensors.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/blackwell_bwd_parts.h"
#include "ops/attention/kernels/hopper_bwd_parts.h"

namespace kiln::examples {
namespace {

using attention_sm90::BackwardParams;
using attention_sm90::KeyTileWork;

constexpr int kKeys = 128, kQueries = 64, kStages = 2;

struct BlackwellDkDv {
  Kernel& k;
  AttentionShape a;
  int D, SPANS;
  BackwardParams p;
  KeyTileWork w;
  SmemTile sK, sV, sQ, sdO, sLse, sDelta, sP, sdS;
  Barrier kv_full, st_full, st_free, p_full, p_free;
  Pipeline &q_ring, &do_ring;
  Tmem tmem;
};

// Warp 4: K and V once, then each query tile's Q (with lse2) and dO (with delta).
void LoadWarp(BlackwellDkDv& b) {
  Kernel& k = b.k;
  const BackwardParams& p = b.p;
  k.If(k.ElectOne(), [&] {
    Value key_row = b.w.Row(b.w.n0);
    b.kv_full.ArriveExpectTx({&p.tk, &p.tv});
    k.TmaLoad(p.tk, b.sK, b.kv_full, {0, key_row, 0, b.w.kv_head});
    k.TmaLoad(p.tv, b.sV, b.kv_full, {0, key_row, 0, b.w.kv_head});
    Pipeline::Cursor q_at = b.q_ring.Start(), do_at = b.do_ring.Start();
    attention_sm90::EachQueryTile(k, b.w, kQueries, [&](Value q_head, Value m0) {
      Value row = b.w.Row(m0), values = attention_sm90::RowValuesStart(b.a, row);
      b.q_ring.Produce(q_at,
                       {{&p.tq, b.sQ, {0, row, 0, q_head}}, {&p.tlse2, b.sLse, {values, q_head}}});
      b.do_ring.Produce(
          do_at, {{&p.tdo, b.sdO, {0, row, 0, q_head}}, {&p.tdelta, b.sDelta, {values, q_head}}});
    });
  });
}

// Warp 5, one thread, over the steps (the query tiles of every head of the group, in the order
// the loads come): S^T and dP^T of step 0; then per step j, S^T and dP^T of step j + 1 once the
// softmax has read step j's (so they run under its softmax), and dV and dK of step j once its
// P^T and dS^T are in.
void MmaWarp(BlackwellDkDv& b) {
  Kernel& k = b.k;
  const int D = b.D;
  const KeyTileWork& w = b.w;
  k.If(k.ElectOne(), [&] {
    Pipeline::Cursor q_at = b.q_ring.Start(), do_at = b.do_ring.Start();
    Regs stage = k.Registers(Type::Of(i32), 2);  // step j's Q and dO stages
    auto issue_s = [&] {                         // the next step's: its stages acquired
      Value qs = b.q_ring.Acquire(q_at), ds = b.do_ring.Acquire(do_at);
      stage[0] = qs, stage[1] = ds;
      k.TcgenFenceAfterSync();
      for (int x = 0; x < 2; ++x)  // S^T from K and Q, dP^T from V and dO
        for (int kk = 0; kk < D; kk += 16)
          k.TcgenMma(b.tmem, {.m = kKeys,
                              .n = kQueries,
                              .d_column = x * kQueries,
                              .a = x ? b.sV : b.sK,
                              .a_row0 = kk / 64 * kKeys,
                              .b = x ? b.sdO.Stage(ds) : b.sQ.Stage(qs),
                              .b_row0 = kk / 64 * kQueries,
                              .k0 = kk % 64,
                              .accumulate = kk > 0 ? 1 : 0});
      k.TcgenCommit(b.st_full);
    };
    Value steps = w.group * Max(w.m_tiles.To(s32) - w.m_first.To(s32), 0).To(i32);
    k.If(steps > 0, [&] {
      b.kv_full.Wait(0);
      issue_s();
    });
    k.For(0, steps, 1, [&](Value j) {
      Value qs = stage[0], ds = stage[1];
      k.If(j + 1 < steps, [&] {
        b.st_free.Wait(j % 2);  // the softmax has read S^T and dP^T of step j
        issue_s();
      });
      b.p_full.Wait(j % 2);
      k.TcgenFenceAfterSync();
      for (int x = 0; x < 2; ++x)  // dV += P^T dO, dK += dS^T Q
        for (int kk = 0; kk < kQueries; kk += 16)
          k.TcgenMma(b.tmem, {.m = kKeys,
                              .n = D,
                              .d_column = 2 * kQueries + x * D,
                              .a = x ? b.sdS : b.sP,
                              .b = {x ? b.sQ.Stage(qs) : b.sdO.Stage(ds), true, kQueries},
                              .k0 = kk,
                              .b_k0 = kk,
                              .accumulate = kk > 0 ? Operand(1) : Operand(j > 0)});
      k.TcgenCommit(b.p_free);
      k.TcgenCommit(b.q_ring.EmptyBarrier(qs));
      k.TcgenCommit(b.do_ring.EmptyBarrier(ds));
    });
  });
}

// Warps 0-3, thread r (key n0 + r): P^T and dS^T of each step, then dK and dV out.
void SoftmaxWarps(BlackwellDkDv& b) {
  Kernel& k = b.k;
  const BackwardParams& p = b.p;
  const KeyTileWork& w = b.w;
  Value r = k.ThreadIdx(), lane0 = k.WarpId() * 32, key = (w.n0 + r).To(s32);
  Value scale_log2 = p.scale * M_LOG2E;
  Pipeline::Cursor q_at = b.q_ring.Start(), do_at = b.do_ring.Start();
  Regs step = k.Registers(Type::Of(i32), 1);
  step[0] = k.I32(0);
  attention_sm90::EachQueryTile(k, w, kQueries, [&](Value, Value m0) {
    Value j = step[0];
    Value qs = b.q_ring.Acquire(q_at), ds = b.do_ring.Acquire(do_at);  // lse2 and delta are in
    b.st_full.Wait(j % 2);
    k.TcgenFenceAfterSync();
    std::vector<Value> s = k.TcgenLoad(b.tmem, lane0, 0, kQueries);
    std::vector<Value> dp = k.TcgenLoad(b.tmem, lane0, kQueries, kQueries);
    k.TcgenFenceBeforeSync();
    b.st_free.Arrive();
    Value off = attention_sm90::RowValuesOffset(b.a, w.Row(m0));
    for (int c = 0; c < kQueries; ++c) {
      Value at = off.valid() ? off + c : k.I32(c);
      Value query = (m0 + c).To(s32);
      Value seen = key < w.keys.To(s32);
      if (b.a.causal) seen = seen & (key <= query + w.shift);
      Value lse2 = k.Load(b.sLse.Stage(qs).At(0, at)), delta = k.Load(b.sDelta.Stage(ds).At(0, at));
      s[c] = Select(seen, Exp2(Fma(s[c], scale_log2, -lse2)), k.F32(0));  // P^T
      dp[c] = s[c] * (dp[c] - delta);                                     // dS^T
    }
    k.If(j > 0, [&] { b.p_free.Wait((j + 1) % 2); });  // step j - 1's MMAs read the tiles
    const std::vector<Value> pp = PackPairs(s, b.a.in), dsp = PackPairs(dp, b.a.in);
    for (int c = 0; c < kQueries; c += 2) {
      k.Store(b.sP.At(r, c), pp[c / 2]);
      k.Store(b.sdS.At(r, c), dsp[c / 2]);
    }
    k.FenceProxyAsync();  // P^T and dS^T are read by the MMAs, lse2 and delta rewritten by TMA
    k.TcgenFenceBeforeSync();
    b.p_full.Arrive();
    step[0] = j + 1;
  });
  // dK and dV through K's and V's tiles: every MMA has completed once the last p_free has (with
  // no step, K and V must have landed before they are overwritten; the columns were never
  // written: zeros).
  Value steps = step[0];
  b.kv_full.Wait(0);
  for (int x = 0; x < 2; ++x) {
    const SmemTile& staging = x ? b.sV : b.sK;
    auto put = [&](int c0, std::vector<Value> v) {
      if (!x) ScaleRow(v, p.scale);
      const std::vector<Value> packed = PackPairs(v, b.a.in);
      for (int c = 0; c < 32; c += 2)
        k.Store(staging.At((c0 + c) / 64 * kKeys + r, (c0 + c) % 64), packed[c / 2]);
    };
    k.If(
        steps > 0,
        [&] {
          b.p_free.Wait((steps + 1) % 2);
          k.TcgenFenceAfterSync();
          for (int c = 0; c < b.D; c += 32)
            put(c, k.TcgenLoad(b.tmem, lane0, 2 * kQueries + (1 - x) * b.D + c, 32));
        },
        [&] {
          for (int c = 0; c < b.D; c += 32) put(c, std::vector<Value>(32, k.F32(0)));
        });
  }
  k.FenceProxyAsync();
  k.NamedBarrier(1, kKeys);
  k.If(r == 0, [&] {
    for (int x = 0; x < 2; ++x)
      for (int span = 0; span < b.SPANS; ++span)
        for (int half = 0; half < 2; ++half)
          k.TmaStore(p.tout[x], (x ? b.sV : b.sK).Rows(span * kKeys + half * 64, 64),
                     {0, w.n0 + half * 64, span, w.kv_head});
    k.BulkCommit();
    k.BulkWait(0);
  });
}

absl::StatusOr<KernelDef> BuildBlackwellDkDv(const std::string& name, AttentionShape a) {
  const int D = a.d, SPANS = D / 64;
  Kernel k(name, sm100a(), {192});
  if (D == 256) k.Fail("attention/blackwell_dkdv takes D = 64 or 128 (tensor memory: 128 + 2D)");
  if (a.warpgroups || a.block_n || a.stages || a.persistent || a.split || a.per_sequence() ||
      a.varlen || a.rows || a.dq_add || a.two_ctas || a.uniform_warpgroup >= 0)
    k.Fail("attention/blackwell_dkdv has one tiling and dense [B, H, S, D] tensors");
  RefuseForwardOptions(k, a, "attention/blackwell_dkdv");
  const BackwardParams p = attention_sm90::DeclareBackwardParams(k, a, kQueries, kKeys, true);
  k.Grid(absl::StrCat("Skv/", kKeys, "*Hkv*B"));
  k.Attribute("attention_backward",
              absl::StrCat("d=", D, " causal=", a.causal, " block_n=", kKeys));
  const int row_values = attention_sm90::kRowValuesBox;
  SmemTile sK = k.SmemSwizzled(a.in, SPANS * kKeys, 64, Swizzle::k128B);
  SmemTile sV = k.SmemSwizzled(a.in, SPANS * kKeys, 64, Swizzle::k128B);
  SmemTile sQ = k.SmemSwizzled(a.in, SPANS * kQueries, 64, Swizzle::k128B, kStages);
  SmemTile sdO = k.SmemSwizzled(a.in, SPANS * kQueries, 64, Swizzle::k128B, kStages);
  SmemTile sLse = k.Smem(f32, 1, row_values, SmemLayout{.stages = kStages});
  SmemTile sDelta = k.Smem(f32, 1, row_values, SmemLayout{.stages = kStages});
  SmemTile sP = k.SmemSwizzled(a.in, kKeys, kQueries, Swizzle::k128B);  // P^T [keys, queries]
  SmemTile sdS = k.SmemSwizzled(a.in, kKeys, kQueries, Swizzle::k128B);
  Barriers bars = k.SmemBarriers(5);
  Pipeline q_ring(k, kStages, 1), do_ring(k, kStages, 1);
  Tmem tmem = k.TensorMemory(2 * kQueries + 2 * D <= 256 ? 256 : 512);
  BlackwellDkDv b{k,       a,       D,
                  SPANS,   p,       attention_sm90::KeyTileOf(k, p, a, kKeys, kQueries),
                  sK,      sV,      sQ,
                  sdO,     sLse,    sDelta,
                  sP,      sdS,     bars[0],
                  bars[1], bars[2], bars[3],
                  bars[4], q_ring,  do_ring,
                  tmem};
  attention_sm100::RunBackwardRoles(
      k, tmem,
      [&] {
        b.kv_full.Init(1);
        b.st_full.Init(1);      // a commit: S^T and dP^T computed
        b.st_free.Init(kKeys);  // every softmax thread has read them
        b.p_full.Init(kKeys);   // every softmax thread has written its P^T and dS^T rows
        b.p_free.Init(1);       // a commit: dV and dK of the step done (the tiles free)
        q_ring.Init();
        do_ring.Init();
      },
      [&] { LoadWarp(b); }, [&] { MmaWarp(b); }, [&] { SoftmaxWarps(b); });
  return k.Build();
}

ExampleFamily BlackwellDkDvFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/blackwell_dkdv",
      "FlashAttention backward for sm_100a, dK and dV: a CTA per 128-key tile, S^T, dP^T, dV and "
      "dK in tensor memory, a TMA warp, an MMA warp, a warpgroup a key a thread; D 64/128, "
      "bf16/f16, causal, grouped-query heads",
      BuildBlackwellDkDv);
  f.bundled = attention_sm100::BlackwellBackwardVariants();
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_blackwell_dkdv, BlackwellDkDvFamily());
}  // namespace kiln::examples
