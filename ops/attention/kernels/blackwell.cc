// attention/blackwell: FlashAttention forward for sm_100a, the algorithm of attention/hopper on
// tcgen05, with S and O in tensor memory. One CTA computes 128 query rows of one head:
//   warp 4      streams Q once and K, V tile by tile through two TMA rings;
//   warp 5      issues the MMAs from one thread: S = Q K_j^T into TMEM columns [0, BN), and
//               O += P_j V_j into columns [BN, BN + D) with V read MN-major;
//   warps 0-3   run the softmax, thread r owning query row r (TMEM lane r): S_j out of tensor
//               memory, the online softmax in registers (exp2 with the scale folded into one FMA,
//               one row per thread so no shuffles), O rescaled in tensor memory once P_{j-1} V_{j-1}
//               has landed, P_j to shared memory for the next MMA; then O / sum through shared
//               memory and a clipped TMA store, and the log-sum-exp.
// S_{j+1} is issued as soon as the softmax has read S_j, so it runs under the softmax of tile j.
// Ragged tiles are masked, not padded, as on Hopper. Tensors, heads and masks:
// ops/attention/kernels/common.h.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "ops/attention/kernels/common.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildBlackwellAttention(const std::string& name, AttentionShape a) {
  const int D = a.d, BM = 128, BN = D == 256 ? 64 : 128, SPANS = D / 64, STAGES = 2, CHUNK = 32;
  const Scalar in = a.in;
  Kernel k(name, sm100a(), {192});
  if (a.warpgroups || a.block_n || a.stages || a.persistent || a.lazy_rescale >= 0)
    k.Fail("attention/blackwell has one tiling; it takes no wg/bn/st/persist/lazy/eager option");
  const AttentionParams p = DeclareAttentionParams(k, a, BM, BN, /*o_rows=*/BM);
  const Value &B = p.B, &Hq = p.Hq, &Hkv = p.Hkv, &S = p.S, &Skv = p.Skv, &scale = p.scale, &lse = p.lse;
  const TensorMap &tq = p.tq, &tk = p.tk, &tv = p.tv, &to = p.to;
  k.Grid(absl::StrCat("S/", BM), "Hq", "B");
  k.Attribute("attention", absl::StrCat("d=", D, " causal=", a.causal, " in=", in == f16 ? "f16" : "bf16", " block_m=", BM,
                                        " block_n=", BN));

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
  Value h = k.BlockIdx(1), b = k.BlockIdx(2);
  Value q_head = b * Hq + h, kv_head = b * Hkv + h / (Hq / Hkv);
  Value m0 = m_tile * BM;
  Value shift = Skv.To(s32) - S.To(s32);  // query i sees keys j <= i + shift
  Value n_end = a.causal ? Max(Min(Skv.To(s32), (m0 + BM).To(s32) + shift), 0).To(i32) : Skv;
  Value n_tiles = (n_end + (BN - 1)) / BN;
  Value warp = k.WarpId();

  k.If(k.ThreadIdx() == 0, [&] {
    q_full.Init(1);
    s_full.Init(1);      // a commit: S_j computed
    s_free.Init(BM);     // every softmax thread has read S_j
    p_full.Init(BM);     // every softmax thread has written P_j and rescaled O
    o_ready.Init(1);     // a commit: O += P_j V_j done (and P's buffer free)
    k_ring.Init();
    v_ring.Init();
  });
  k.If(warp == 5, [&] { k.TmemAlloc(tmem); });
  k.SyncThreads();
  k.TcgenFenceAfterSync();

  k.If(warp == 4, [&] {
    k.If(k.ElectOne(), [&] {
      q_full.ArriveExpectTx({&tq});
      k.TmaLoad(tq, sQ, q_full, {0, m0, 0, q_head});
      Pipeline::Cursor k_at = k_ring.Start(), v_at = v_ring.Start();
      k.For(0, n_tiles, 1, [&](Value j) {
        k_ring.Produce(k_at, {{&tk, sK, {0, j * BN, 0, kv_head}}});
        v_ring.Produce(v_at, {{&tv, sV, {0, j * BN, 0, kv_head}}});
      });
    });
  });

  k.If(warp == 5, [&] {
    k.If(k.ElectOne(), [&] {
      Pipeline::Cursor k_at = k_ring.Start(), v_at = v_ring.Start();
      auto issue_s = [&] {
        Value ks = k_ring.Acquire(k_at);
        k.TcgenFenceAfterSync();
        for (int kk = 0; kk < D; kk += 16)
          k.TcgenMma(tmem, 0, sQ, kk / 64 * BM, sK.Stage(ks), kk / 64 * BN, kk % 64, Operand(kk > 0 ? 1 : 0), BM, BN);
        k.TcgenCommit(s_full);
        k.TcgenCommit(k_ring.EmptyBarrier(ks));  // the stage is free once these MMAs complete
      };
      k.If(n_tiles > 0, [&] {
        q_full.Wait(0);
        issue_s();
      });
      k.For(0, n_tiles, 1, [&](Value j) {
        k.If(j + 1 < n_tiles, [&] {
          s_free.Wait(j % 2);  // the softmax has S_j in registers: S_{j+1} may overwrite it
          issue_s();
        });
        p_full.Wait(j % 2);
        Value vs = v_ring.Acquire(v_at);
        k.TcgenFenceAfterSync();
        for (int kk = 0; kk < BN; kk += 16)
          k.TcgenMma(tmem, BN, sP, kk / 64 * BM, kk % 64, Kernel::WgmmaTile{sV.Stage(vs), /*mn_major=*/true, BN}, 0, kk,
                     kk > 0 ? Operand(1) : Operand(j > 0), BM, D);
        k.TcgenCommit(o_ready);
        k.TcgenCommit(v_ring.EmptyBarrier(vs));
      });
    });
  });

  k.If(warp < 4, [&] {
    Value r = k.ThreadIdx(), lane0 = warp * 32, row = m0 + r;
    Value scale_log2 = scale * M_LOG2E;
    // The keys row r sees: below `limit`.
    Value limit = a.causal ? Min(Skv.To(s32), row.To(s32) + 1 + shift) : Skv.To(s32);
    Regs row_max = k.Registers(Type::Of(f32), 1), row_sum = k.Registers(Type::Of(f32), 1);
    row_max[0] = k.F32(-INFINITY);
    k.For(0, n_tiles, 1, [&](Value j) {
      s_full.Wait(j % 2);
      k.TcgenFenceAfterSync();
      std::vector<Value> s;
      for (int c = 0; c < BN; c += CHUNK)
        for (Value x : k.TcgenLoad(tmem, lane0, c, CHUNK)) s.push_back(x);
      k.TcgenFenceBeforeSync();
      s_free.Arrive();
      // Mask (only a tile that reaches past the row's last key: the diagonal's, or Skv's), the new
      // maximum (scaled, log2 units), alpha = exp2(old - new), P and its sum.
      Value n0 = (j * BN).To(s32), tile_max = k.F32(-INFINITY);
      s = k.IfElse(
          n0 + BN > limit,
          [&] {
            std::vector<Value> masked = s;
            for (int c = 0; c < BN; ++c) masked[c] = Select(n0 + c < limit, s[c], k.F32(-INFINITY));
            return masked;
          },
          [&] { return s; });
      for (int c = 0; c < BN; ++c) tile_max = Max(tile_max, s[c]);
      Value new_max = Max(row_max[0], tile_max * scale_log2);
      Value base = Select(new_max == k.F32(-INFINITY), k.F32(0), new_max);  // a row that saw only -inf
      Value alpha = Exp2(row_max[0] - base), sum = k.F32(0);
      row_max[0] = new_max;
      for (int c = 0; c < BN; ++c) {
        s[c] = Exp2(Fma(s[c], scale_log2, -base));
        sum = sum + s[c];
      }
      row_sum[0] = Fma(row_sum[0], alpha, sum);
      // O += P_{j-1} V_{j-1} has landed: rescale O in tensor memory, and P's buffer is free.
      k.If(j > 0, [&] {
        o_ready.Wait((j + 1) % 2);
        k.TcgenFenceAfterSync();
        for (int c = 0; c < D; c += CHUNK) {
          std::vector<Value> o = k.TcgenLoad(tmem, lane0, BN + c, CHUNK);
          for (Value& x : o) x = x * alpha;
          k.TcgenStore(tmem, lane0, BN + c, o);
        }
      });
      for (int c = 0; c < BN; c += 2)
        k.Store(sP.At(c / 64 * BM + r, c % 64), in == f16 ? PackF16x2(s[c], s[c + 1]) : PackBf16x2(s[c], s[c + 1]));
      k.FenceProxyAsync();  // P is read by the MMA (the async proxy)
      k.TcgenFenceBeforeSync();
      p_full.Arrive();
    });

    // O / sum through Q's tile (every MMA reading Q has completed once the last O is in; with no
    // key tile, Q's load must have landed before it is overwritten), a clipped TMA store, and lse.
    Value total = row_sum[0];
    Value inv = Select(total > 0.0, Rcp(total), k.F32(0));
    q_full.Wait(0);
    auto store_o = [&](int c, const std::vector<Value>& o) {
      for (int e = 0; e < CHUNK; e += 2)
        k.Store(sQ.At((c + e) / 64 * BM + r, (c + e) % 64),
                in == f16 ? PackF16x2(o[e] * inv, o[e + 1] * inv) : PackBf16x2(o[e] * inv, o[e + 1] * inv));
    };
    k.If(n_tiles > 0, [&] {
      o_ready.Wait((n_tiles + 1) % 2);
      k.TcgenFenceAfterSync();
      for (int c = 0; c < D; c += CHUNK) store_o(c, k.TcgenLoad(tmem, lane0, BN + c, CHUNK));
    }, [&] {  // a row tile that sees no key: O = 0
      for (int c = 0; c < D; c += CHUNK) store_o(c, std::vector<Value>(CHUNK, k.F32(0)));
    });
    Value lse_value = Select(total > 0.0, (row_max[0] + Log2(total)) * M_LN2, k.F32(-INFINITY));
    k.If(row < S, [&] { k.Store(lse + (q_head.To(i64) * S.To(i64) + row.To(i64)), lse_value); });
    k.FenceProxyAsync();
    k.NamedBarrier(1, BM);
    k.If(r == 0, [&] {
      for (int span = 0; span < SPANS; ++span) k.TmaStore(to, sQ.Rows(span * BM, BM), {0, m0, span, q_head});
      k.BulkCommit();
      k.BulkWait(0, /*smem_reads_only=*/true);  // the CTA may end while O lands (as on Hopper)
    });
  });

  k.TcgenFenceBeforeSync();
  k.SyncThreads();
  k.If(warp == 5, [&] { k.TmemFree(tmem); });
  return k.Build();
}

ExampleFamily BlackwellAttentionFamily() {
  return AttentionFamilyOf("attention/blackwell",
                           "FlashAttention forward for sm_100a: S and O in tensor memory, a TMA warp, an MMA warp, a "
                           "softmax warpgroup (a row a thread) that rescales O in tensor memory; head dims 64/128/256, "
                           "bf16/f16, causal",
                           BuildBlackwellAttention);
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_blackwell, BlackwellAttentionFamily());
}  // namespace kiln::examples
