// attention/blackwell: FlashAttention forward for sm_100a, the algorithm of attention/hopper on
// tcgen05, with S and O in tensor memory. One CTA computes 128 query rows of one head:
//   warp 4      streams Q once and K, V tile by tile through two TMA rings;
//   warp 5      issues the MMAs from one thread: S = Q K_j^T into TMEM columns [0, BN), and
//               O += P_j V_j into columns [BN, BN + D) with V read MN-major;
//   warps 0-3   run the softmax, thread r owning query row r (TMEM lane r): S_j out of tensor
//               memory, the online softmax in registers (exp2 with the scale folded into one
//               FMA, one row per thread so no shuffles), O rescaled in tensor memory once
//               P_{j-1} V_{j-1} has landed, P_j to shared memory for the next MMA; then O / sum
//               through shared memory and a clipped TMA store, and the log-sum-exp.
// S_{j+1} is issued as soon as the softmax has read S_j, so it runs under the softmax of tile j.
// Ragged tiles are masked, not padded, as on Hopper. Tensors, heads and masks:
// ops/attention/kernels/common.h.
//
// Decode ("split", planned by rt::PlanAttention on sm_100): the query heads of a KV head packed as
// one tile's rows (the plan's view of Q, O and lse), the key tiles of each query tile split in P
// parts, a CTA each (grid z: B * P), each writing its O and lse as head p * B * Hq + head for
// attention/combine.sm100a to merge, as attention/hopper's split does.
//
// The pieces: BuildBlackwellAttention declares the kernel and runs the roles (LoadWarp, MmaWarp,
// SoftmaxWarps); SoftmaxTile is the softmax warps' step, StoreRows their end.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/common.h"

namespace kiln::examples {
namespace {

// What the kernel declared, as its roles read it.
struct BlackwellAttention {
  Kernel& k;
  AttentionShape a;
  int D, BM, BN, SPANS, STAGES, CHUNK;
  Scalar in;
  AttentionParams p;
  SmemTile sQ, sK, sV, sP;
  Barrier q_full, s_full, s_free, p_full, o_ready;
  Pipeline &k_ring, &v_ring;
  Tmem tmem;
  Value m0, q_head, kv_head;
  Value shift;  // query i sees keys j <= i + shift
  Value n_tiles, warp;
  // The CTA's key tiles are n_first .. n_first + n_tiles (0 .. but in a part of a split tile); its
  // O and lse go to head out_head (q_head but in a split tile).
  Value n_first, out_head;
};

// Warp 4: Q once, then K and V tile by tile.
void LoadWarp(BlackwellAttention& b) {
  Kernel& k = b.k;
  k.If(k.ElectOne(), [&] {
    b.q_full.ArriveExpectTx({&b.p.tq});
    k.TmaLoad(b.p.tq, b.sQ, b.q_full, {0, b.m0, 0, b.q_head});
    Pipeline::Cursor k_at = b.k_ring.Start(), v_at = b.v_ring.Start();
    k.For(0, b.n_tiles, 1, [&](Value j) {
      Value n0 = (b.n_first + j) * b.BN;
      b.k_ring.Produce(k_at, {{&b.p.tk, b.sK, {0, n0, 0, b.kv_head}}});
      b.v_ring.Produce(v_at, {{&b.p.tv, b.sV, {0, n0, 0, b.kv_head}}});
    });
    // Split-KV: attention/combine may launch once every part has issued its last loads (it waits
    // for the parts' writes itself).
    if (b.a.split) k.LaunchDependents();
  });
}

// Warp 5, one thread: S_0, then per key tile j S_{j+1} once the softmax has read S_j, and
// O += P_j V_j once P_j is in shared memory.
void MmaWarp(BlackwellAttention& b) {
  Kernel& k = b.k;
  const int D = b.D, BM = b.BM, BN = b.BN;
  k.If(k.ElectOne(), [&] {
    Pipeline::Cursor k_at = b.k_ring.Start(), v_at = b.v_ring.Start();
    auto issue_s = [&] {
      Value ks = b.k_ring.Acquire(k_at);
      k.TcgenFenceAfterSync();
      for (int kk = 0; kk < D; kk += 16)
        k.TcgenMma(b.tmem, {.m = BM,
                            .n = BN,
                            .a = b.sQ,
                            .a_row0 = kk / 64 * BM,
                            .b = b.sK.Stage(ks),
                            .b_row0 = kk / 64 * BN,
                            .k0 = kk % 64,
                            .accumulate = kk > 0 ? 1 : 0});
      k.TcgenCommit(b.s_full);
      k.TcgenCommit(b.k_ring.EmptyBarrier(ks));  // the stage is free once these MMAs complete
    };
    k.If(b.n_tiles > 0, [&] {
      b.q_full.Wait(0);
      issue_s();
    });
    k.For(0, b.n_tiles, 1, [&](Value j) {
      k.If(j + 1 < b.n_tiles, [&] {
        b.s_free.Wait(j % 2);  // the softmax has S_j in registers: S_{j+1} may overwrite it
        issue_s();
      });
      b.p_full.Wait(j % 2);
      Value vs = b.v_ring.Acquire(v_at);
      k.TcgenFenceAfterSync();
      for (int kk = 0; kk < BN; kk += 16)
        k.TcgenMma(b.tmem, {.m = BM,
                            .n = D,
                            .d_column = BN,
                            .a = b.sP,
                            .a_row0 = kk / 64 * BM,
                            .b = {b.sV.Stage(vs), /*mn_major=*/true, BN},
                            .k0 = kk % 64,
                            .b_k0 = kk,
                            .accumulate = kk > 0 ? Operand(1) : Operand(j > 0)});
      k.TcgenCommit(b.o_ready);
      k.TcgenCommit(b.v_ring.EmptyBarrier(vs));
    });
  });
}

// A softmax thread's row: r (its TMEM lane), its warp's first lane, its query row, the scale in
// log2 units, the keys it sees (below `limit`), its running maximum and sum.
struct SoftmaxRow {
  Value r, lane0, row, scale_log2, limit;
  Regs row_max, row_sum;
};

// Key tile j of the softmax warps: S_j out of tensor memory, the online softmax, O rescaled and
// P_j to shared memory.
void SoftmaxTile(BlackwellAttention& b, SoftmaxRow& t, Value j) {
  Kernel& k = b.k;
  const int BN = b.BN, CHUNK = b.CHUNK;
  b.s_full.Wait(j % 2);
  k.TcgenFenceAfterSync();
  std::vector<Value> s;
  for (int c = 0; c < BN; c += CHUNK)
    for (Value x : k.TcgenLoad(b.tmem, t.lane0, c, CHUNK)) s.push_back(x);
  k.TcgenFenceBeforeSync();
  b.s_free.Arrive();
  // Mask (only a tile that reaches past the row's last key: the diagonal's, or Skv's), the new
  // maximum (scaled, log2 units), alpha = exp2(old - new), P and its sum.
  Value n0 = ((b.n_first + j) * BN).To(s32);
  s = k.IfElse(
      n0 + BN > t.limit,
      [&] {
        std::vector<Value> masked = s;
        MaskColumns(masked, n0, t.limit, -INFINITY);
        return masked;
      },
      [&] { return s; });
  Value new_max = Max(t.row_max[0], RowMax(s) * t.scale_log2);
  // A row that saw only -inf:
  Value base = Select(new_max == k.F32(-INFINITY), k.F32(0), new_max);
  Value alpha = Exp2(t.row_max[0] - base);
  t.row_max[0] = new_max;
  t.row_sum[0] = Fma(t.row_sum[0], alpha, Exp2Row(s, t.scale_log2, base));  // P and its sum
  // O += P_{j-1} V_{j-1} has landed: rescale O in tensor memory, and P's buffer is free.
  k.If(j > 0, [&] {
    b.o_ready.Wait((j + 1) % 2);
    k.TcgenFenceAfterSync();
    for (int c = 0; c < b.D; c += CHUNK) {
      std::vector<Value> o = k.TcgenLoad(b.tmem, t.lane0, BN + c, CHUNK);
      ScaleRow(o, alpha);
      k.TcgenStore(b.tmem, t.lane0, BN + c, o);
    }
  });
  const std::vector<Value> p = PackPairs(s, b.in);
  for (int c = 0; c < BN; c += 2) k.Store(b.sP.At(c / 64 * b.BM + t.r, c % 64), p[c / 2]);
  k.FenceProxyAsync();  // P is read by the MMA (the async proxy)
  k.TcgenFenceBeforeSync();
  b.p_full.Arrive();
}

// O / sum through Q's tile (every MMA reading Q has completed once the last O is in; with no key
// tile, Q's load must have landed before it is overwritten), a clipped TMA store, and lse.
void StoreRows(BlackwellAttention& b, SoftmaxRow& t) {
  Kernel& k = b.k;
  const int D = b.D, BM = b.BM, BN = b.BN, CHUNK = b.CHUNK;
  const Value& S = b.p.S;
  const RowEnd end = EndOfRow(k, t.row_max[0], t.row_sum[0]);
  const Value& inv = end.inv;
  b.q_full.Wait(0);
  auto store_o = [&](int c, std::vector<Value> o) {
    ScaleRow(o, inv);  // O / sum
    const std::vector<Value> packed = PackPairs(o, b.in);
    for (int e = 0; e < CHUNK; e += 2)
      k.Store(b.sQ.At((c + e) / 64 * BM + t.r, (c + e) % 64), packed[e / 2]);
  };
  k.If(
      b.n_tiles > 0,
      [&] {
        b.o_ready.Wait((b.n_tiles + 1) % 2);
        k.TcgenFenceAfterSync();
        for (int c = 0; c < D; c += CHUNK) store_o(c, k.TcgenLoad(b.tmem, t.lane0, BN + c, CHUNK));
      },
      [&] {  // a row tile that sees no key: O = 0
        for (int c = 0; c < D; c += CHUNK) store_o(c, std::vector<Value>(CHUNK, k.F32(0)));
      });
  const Value& lse_value = end.lse;
  k.If(t.row < S,
       [&] { k.Store(b.p.lse + (b.out_head.To(i64) * S.To(i64) + t.row.To(i64)), lse_value); });
  k.FenceProxyAsync();
  k.NamedBarrier(1, BM);
  k.If(t.r == 0, [&] {
    for (int span = 0; span < b.SPANS; ++span)
      k.TmaStore(b.p.to, b.sQ.Rows(span * BM, BM), {0, b.m0, span, b.out_head});
    k.BulkCommit();
    k.BulkWait(0, /*smem_reads_only=*/true);  // the CTA may end while O lands (as on Hopper)
  });
}

// Warps 0-3: thread r owns query row m0 + r.
void SoftmaxWarps(BlackwellAttention& b) {
  Kernel& k = b.k;
  const Value& Skv = b.p.Skv;
  Value r = k.ThreadIdx(), lane0 = b.warp * 32, row = b.m0 + r;
  Value scale_log2 = b.p.scale * M_LOG2E;
  Value limit = b.a.causal ? Min(Skv.To(s32), row.To(s32) + 1 + b.shift) : Skv.To(s32);
  Regs row_max = k.Registers(Type::Of(f32), 1), row_sum = k.Registers(Type::Of(f32), 1);
  row_max[0] = k.F32(-INFINITY);
  SoftmaxRow t{r, lane0, row, scale_log2, limit, row_max, row_sum};
  k.For(0, b.n_tiles, 1, [&](Value j) { SoftmaxTile(b, t, j); });
  StoreRows(b, t);
}

absl::StatusOr<KernelDef> BuildBlackwellAttention(const std::string& name, AttentionShape a) {
  const int D = a.d, BM = 128, BN = D == 256 ? 64 : 128, SPANS = D / 64, STAGES = 2, CHUNK = 32;
  const Scalar in = a.in;
  Kernel k(name, sm100a(), {192});
  if (a.warpgroups || a.block_n || a.stages || a.k_stages || a.persistent || a.lazy_rescale >= 0 ||
      a.uniform_warpgroup >= 0 || a.own_diagonal >= 0 || a.per_sequence() || a.varlen || a.rows)
    k.Fail(
        "attention/blackwell has one tiling and the [B, H, S, D] layout; it takes no "
        "wg/bn/st/kst/persist/lazy/eager/wgshfl/wgtid/wgdiag/ctadiag/lens/page/varlen/rows option "
        "(split: yes)");
  const AttentionParams p = DeclareAttentionParams(k, a, BM, BN, /*o_rows=*/BM);
  const Value &Hq = p.Hq, &Hkv = p.Hkv, &S = p.S, &Skv = p.Skv;
  k.Grid(absl::StrCat("S/", BM), "Hq", a.split ? "B*P" : "B");
  k.Attribute("attention",
              absl::StrCat("d=", D, " causal=", a.causal, " in=", in == f16 ? "f16" : "bf16",
                           " block_m=", BM, " block_n=", BN, " split=", a.split));

  // Shared memory: Q (span j in rows BM*j..; O goes out through it at the end), rings of K and V
  // tiles (span j in rows BN*j..), and P (keys 64j.. in rows BM*j..), all K-major 128B-swizzled.
  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B);
  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, STAGES);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, STAGES);
  SmemTile sP = k.SmemSwizzled(in, BN / 64 * BM, 64, Swizzle::k128B);
  Barriers bars = k.SmemBarriers(5);
  Barrier q_full = bars[0], s_full = bars[1], s_free = bars[2], p_full = bars[3], o_ready = bars[4];
  Pipeline k_ring(k, STAGES, /*consumers=*/1), v_ring(k, STAGES, /*consumers=*/1);
  // Tensor memory: S in columns [0, BN), O in [BN, BN + D).
  const int tmem_columns = BN + D <= 256 ? 256 : 512;
  Tmem tmem = k.TensorMemory(tmem_columns);

  Value m_tiles = (S + (BM - 1)) / BM;
  Value m_tile = a.causal ? m_tiles - 1 - k.BlockIdx(0) : k.BlockIdx(0);
  // Split: grid z is b + B * part.
  Value h = k.BlockIdx(1), b = a.split ? k.BlockIdx(2) % p.B : k.BlockIdx(2);
  Value q_head = b * Hq + h, kv_head = b * Hkv + h / (Hq / Hkv);
  Value m0 = m_tile * BM;
  Value shift = Skv.To(s32) - S.To(s32);  // query i sees keys j <= i + shift
  Value n_end = a.causal ? Max(Min(Skv.To(s32), (m0 + BM).To(s32) + shift), 0).To(i32) : Skv;
  Value n_tiles = (n_end + (BN - 1)) / BN, n_first = k.I32(0), out_head = q_head;
  if (a.split) {  // part `part` of P: its share of the key tiles (none for the last parts where P
                  // does not divide them: O = 0 and lse = -inf, which the combine weighs 0)
    Value part = k.BlockIdx(2) / p.B, per = (n_tiles + (p.P - 1)) / p.P;
    n_first = Min(part * per, n_tiles);
    n_tiles = Min(n_tiles - n_first, per);
    out_head = part * (p.B * Hq) + q_head;
  }
  Value warp = k.WarpId();
  BlackwellAttention ba{k,       a,      D,       BM,     BN,      SPANS,   STAGES, CHUNK,
                        in,      p,      sQ,      sK,     sV,      sP,      q_full, s_full,
                        s_free,  p_full, o_ready, k_ring, v_ring,  tmem,    m0,     q_head,
                        kv_head, shift,  n_tiles, warp,   n_first, out_head};

  k.If(k.ThreadIdx() == 0, [&] {
    q_full.Init(1);
    s_full.Init(1);   // a commit: S_j computed
    s_free.Init(BM);  // every softmax thread has read S_j
    p_full.Init(BM);  // every softmax thread has written P_j and rescaled O
    o_ready.Init(1);  // a commit: O += P_j V_j done (and P's buffer free)
    k_ring.Init();
    v_ring.Init();
  });
  k.If(warp == 5, [&] { k.TmemAlloc(tmem); });
  k.SyncThreads();
  k.TcgenFenceAfterSync();

  k.If(warp == 4, [&] { LoadWarp(ba); });
  k.If(warp == 5, [&] { MmaWarp(ba); });
  k.If(warp < 4, [&] { SoftmaxWarps(ba); });

  k.TcgenFenceBeforeSync();
  k.SyncThreads();
  k.If(warp == 5, [&] { k.TmemFree(tmem); });
  return k.Build();
}

ExampleFamily BlackwellAttentionFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/blackwell",
      "FlashAttention forward for sm_100a: S and O in tensor memory, a TMA warp, an MMA warp, a "
      "softmax warpgroup (a row a thread) that rescales O in tensor memory; head dims 64/128/256, "
      "bf16/f16, causal; split-KV decode",
      BuildBlackwellAttention);
  for (const char* v : {"d64", "d64.f16", "d128", "d128.f16", "d256", "d256.f16"})
    f.bundled.push_back(absl::StrCat(v, ".split"));  // the entry point's decode on sm_100
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_blackwell, BlackwellAttentionFamily());
}  // namespace kiln::examples
