// attention/hopper: FlashAttention forward for sm_90a. O = softmax(scale * Q K^T) V per head, and
// the log-sum-exp of each row, with the FA3 structure: a producer warp streams Q once and K, V
// through two TMA pipelines; two or three consumer warpgroups (64 query rows each, setmaxnreg) run
// S = Q K^T from shared memory, an online softmax in registers (exp2 with the scale folded into
// one FMA), and O += P V with P taken straight from S's registers (wgmma A from registers, V read
// MN-major). The last tile of a ragged Q or KV is masked, not padded: TMA zero-fills the loads
// past S or Skv, the scores past Skv are -inf, the store of O is clipped at S.
//
// Tensors, heads and masks: ops/attention/kernels/common.h.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "ops/attention/kernels/common.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"
#include "kiln/warp.h"

namespace kiln::examples {
namespace {

// The default tiling per head dimension (docs/perf/2026-11-24-attention.md says how each was chosen).
AttentionShape WithDefaults(AttentionShape a) {
  if (!a.warpgroups) a.warpgroups = a.d == 64 ? 3 : 2;  // 192 query rows: longer GEMMs per turn
  if (!a.block_n) a.block_n = a.d == 256 ? 64 : a.d == 128 && !a.causal && !a.persistent ? 176 : 128;
  if (!a.stages) a.stages = 2;
  // Lazy rescaling where it measured faster: the persistent kernels but causal D = 64, whose
  // spills it grows (docs/perf/2026-11-24-attention.md, step 13); a CTA per tile ran slower with it.
  if (a.lazy_rescale < 0) a.lazy_rescale = a.persistent && !(a.d == 64 && a.causal);
  return a;
}

// How far past a row's reference maximum (in log2 units) a lazily rescaled row's scores may go
// before the reference moves: P = 2^(score - reference) <= 2^8.
constexpr double kLazySlack = 8.0;

absl::StatusOr<KernelDef> BuildAttention(const std::string& name, AttentionShape a) {
  a = WithDefaults(a);
  const int D = a.d, W = a.warpgroups, BM = 64 * W, BN = a.block_n, SPANS = D / 64, STAGES = a.stages;
  const Scalar in = a.in;
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (W + 1))});
  if (W < 2 || W > 3) k.Fail(absl::StrCat("attention takes 2 or 3 consumer warpgroups, not ", W));
  if (BN % 16 || BN < 16 || BN > 256) k.Fail(absl::StrCat("a key tile of ", BN, " rows: a multiple of 16 up to 256"));
  const AttentionParams p = DeclareAttentionParams(k, a, BM, BN, /*o_rows=*/64);
  const Value &B = p.B, &Hq = p.Hq, &Hkv = p.Hkv, &S = p.S, &Skv = p.Skv, &scale = p.scale, &lse = p.lse;
  const TensorMap &tq = p.tq, &tk = p.tk, &tv = p.tv, &to = p.to;

  // The work: query tiles t of BM rows, head-major or in head groups, the longest first (causal
  // tiles end at their diagonal). A persistent CTA (one per SM) takes its next tile from a counter
  // in global memory, so a tile's loads start under the previous tile's epilogue, SMs that run
  // faster take more tiles, and the shortest tiles come last; the CTA that finishes last puts the
  // counter back to zero for the next launch. Without "persist", a CTA per tile.
  Value tiles;  // {next tile, CTAs done}: the persistent kernel's counter
  if (a.persistent) tiles = k.WorkspaceParam("tiles", i32, "", 8);
  Value m_tiles = (S + (BM - 1)) / BM;
  Value tile_count = m_tiles * Hq * B;
  if (a.persistent)
    k.Grid("sms");
  else
    k.Grid(absl::StrCat("S/", BM, "*Hq*B"));
  k.Attribute("attention", absl::StrCat("d=", D, " causal=", a.causal, " in=", in == f16 ? "f16" : "bf16", " block_m=", BM,
                                        " block_n=", BN, " stages=", STAGES, " persistent=", a.persistent,
                                        " lazy_rescale=", a.lazy_rescale));

  // Shared memory: Q (span j in rows BM*j..), then rings of K and V tiles (span j in rows BN*j..).
  // Q is a ring too, of two stages where they fit: the next tile's Q lands while this one runs.
  // O goes out through its tile's Q stage, which is released once the TMA store has read it.
  const int q_stages = 128 * SPANS * (2 * BM + 2 * STAGES * BN) <= 226 * 1024 ? 2 : 1;  // 1 KB for the barriers
  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, q_stages);
  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, STAGES);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, STAGES);
  Pipeline q_ring(k, q_stages, /*consumers=*/W), k_ring(k, STAGES, /*consumers=*/W), v_ring(k, STAGES, /*consumers=*/W);

  // Tile t: its first query row, head and KV head, and the key tiles it sees (all of Skv, or
  // causally up to its last row's diagonal; none if that is negative).
  Value shift = Skv.To(s32) - S.To(s32);  // query i sees keys j <= i + shift
  struct QueryTile {
    Value m0, q_head, kv_head, n_tiles;
  };
  // Causal tiles differ in length, and a CTA per tile is dispatched in tile order: heads are
  // taken in groups whose K and V fit in L2 together (8 MB), and within a group the longest tiles
  // of all its heads come first, so that the launch ends on the shortest tiles of a group rather
  // than on the last head's longest (docs/perf/2026-11-24-attention.md, step 8).
  // Without a mask, head-major.
  const int kv_bytes_per_key = D * 2 * 2;  // K and V, 16-bit
  Value group_heads = Max(Min(k.I32((8 << 20) / kv_bytes_per_key) / Max(Skv, k.I32(1)), k.I32(16)), k.I32(1));
  auto tile_of = [&](Value t) {
    Value q_head = t / m_tiles, m = t % m_tiles;
    if (a.causal) {
      Value g0 = t / (group_heads * m_tiles) * group_heads;  // the group's first head
      Value in_group = Min(group_heads, Hq * B - g0);          // fewer in the last group
      Value i = t - g0 * m_tiles;
      q_head = g0 + i % in_group;
      m = i / in_group;  // 0: the longest
    }
    Value h = q_head % Hq, b = q_head / Hq;
    Value m0 = (a.causal ? m_tiles - 1 - m : m) * BM;
    Value n_end = a.causal ? Max(Min(Skv.To(s32), (m0 + BM).To(s32) + shift), 0).To(i32) : Skv;
    return QueryTile{m0, q_head, b * Hkv + h / (Hq / Hkv), (n_end + (BN - 1)) / BN};
  };
  // The producer hands each tile number to the consumers in a slot beside its Q stage: slot n % 4
  // for the CTA's n-th tile, written before the stage's full barrier is armed (its arrive
  // releases the write) and read once it completes. The slot's previous tile, n - 4, was read
  // before Q stage n - 3 was released, which the producer waited for. A number past the last
  // tile ends the walk.
  SmemTile tile_slots = k.Smem(i32, 1, 4);

  k.If(k.ThreadIdx() == 0, [&] {
    for (const TensorMap* map : {&p.tq, &p.tk, &p.tv, &p.to}) k.TmaPrefetchDescriptor(*map);  // under the setup
    q_ring.Init();
    k_ring.Init();
    v_ring.Init();
  });
  k.SyncThreads();

  // Producer: per tile, Q once, then K and V tile by tile (each its own ring, so S = Q K^T can
  // start while V is still in flight).
  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      Pipeline::Cursor q_at = q_ring.Start(), k_at = k_ring.Start(), v_at = v_ring.Start();
      Regs n = k.Registers(Type::Of(i32), 1), now = k.Registers(Type::Of(i32), 1);
      k.While(
          [&] {
            Value next = a.persistent ? AtomicAdd(tiles, 1) : Select(n[0] == 0, k.BlockIdx(0), tile_count);
            auto publish = [&] {
              k.Store(tile_slots.At(0, n[0] % 4), next);
              QueryTile q = tile_of(Select(next < tile_count, next, k.I32(0)));  // the end: a Q nobody reads
              q_ring.Produce(q_at, {{&tq, sQ, {0, q.m0, 0, q.q_head}}});
              // A CTA per tile waits for its Q from DRAM at its start: bring the Q of the tile a
              // wave later (an H100's SMs' worth of CTAs ahead) into L2 meanwhile.
              const int wave = 132;
              if (!a.persistent)
                k.If(next + wave < tile_count, [&] {
                  QueryTile ahead = tile_of(next + wave);
                  k.TmaPrefetchL2(tq, {0, ahead.m0, 0, ahead.q_head});
                });
            };
            if (a.persistent)
              publish();
            else
              k.If(next < tile_count, publish);  // a CTA per tile: its consumers stop after one
            n[0] = n[0] + 1;
            now[0] = next;
            return next < tile_count;
          },
          [&] {
            QueryTile q = tile_of(now[0]);
            k.For(0, q.n_tiles, 1, [&](Value j) {
              k_ring.Produce(k_at, {{&tk, sK, {0, j * BN, 0, q.kv_head}}});
              v_ring.Produce(v_at, {{&tv, sV, {0, j * BN, 0, q.kv_head}}});
            });
          });
      if (a.persistent)  // every CTA has taken its last number: the last one resets the counter
        k.If(AtomicAdd(tiles + 1, 1) == k.GridDim(0) - 1, [&] {
          k.Store(tiles, k.I32(0));
          k.Store(tiles + 1, k.I32(0));
        });
    });
  });

  // The register file split: 24 per producer thread, the rest (a multiple of 8) to the consumers.
  const int consumer_regs = std::min(240, (65536 / 128 - 24) / W / 8 * 8);
  // Where two Q stages fit, the persistent CTA without a mask runs its tiles as one stream of
  // steps: a tile's last P V goes out with the next tile's first S, and the tile's epilogue runs
  // in that step's softmax slot, under the other warpgroups' GEMMs
  // (docs/perf/2026-11-24-attention.md, step 12). With one Q stage the next Q can land only once
  // O has left through the stage.
  const bool stream_tiles = a.persistent && q_stages == 2 && !a.causal;
  k.Role({.first_thread = 128, .threads = 128 * W, .max_regs = consumer_regs}, [&](Value t) {
    Value c = t % 128, wg = t / 128, row0 = wg * 64;
    const double log2e = M_LOG2E;
    Value scale_log2 = scale * log2e;
    Pipeline::Cursor q_at = q_ring.Start(), k_at = k_ring.Start(), v_at = v_ring.Start();
    // The warpgroups take turns to issue their GEMMs, in a ring that runs on across tiles
    // (warpgroup w waits at named barrier 1 + w, then signals the next one's).
    auto my_turn = [&] { k.NamedBarrier(wg + 1, 256); };
    auto their_turn = [&] { k.NamedBarrierArrive((wg + 1) % W + 1, 256); };
    k.If(wg == W - 1, [&] { k.NamedBarrierArrive(1, 256); });  // warpgroup 0 issues first
    Regs n = k.Registers(Type::Of(i32), 1), now = k.Registers(Type::Of(i32), 2);  // {tile, Q stage}

    // The tile's state: its first query row (for the masks) and Q stage; the S and O accumulators;
    // per thread its two rows' running max (in scaled log2 units), its share of their sums, the
    // last rescale factor; P as the next wgmma's A fragments (bf16/f16 pairs, BN / 16 fragments).
    Value m0;
    SmemTile sQs;
    WgmmaAccumulator s, o;
    Regs row_max, row_sum, alpha, p_frag;
    auto fresh_state = [&] {
      s = k.WgmmaAcc(BN);
      o = k.WgmmaAcc(D);
      row_max = k.Registers(Type::Of(f32), 2);
      row_sum = k.Registers(Type::Of(f32), 2);
      row_max[0] = k.F32(-INFINITY);
      row_max[1] = k.F32(-INFINITY);
      alpha = k.Registers(Type::Of(f32), 2);
      p_frag = k.Registers(Type::Of(i32), BN / 4);
    };
    // The online softmax of one S tile: mask, new row maxima, P = exp2(S * scale_log2 - max)
    // written over S, the sums rescaled by alpha = exp2(old max - new max); O is rescaled by
    // alpha later (rescale_o), once the wgmma group adding to it has retired.
    auto softmax = [&](Value n0, bool masked) {
      Value limit[2];  // keys below this column are seen, per row half
      for (int half = 0; half < 2 && masked; ++half) {
        Value row = (m0 + row0 + s.Row(half)).To(s32);
        limit[half] = a.causal ? Min(Skv.To(s32), row + 1 + shift) : Skv.To(s32);
      }
      Value tile_max[2] = {k.F32(-INFINITY), k.F32(-INFINITY)};
      for (int p = 0; p < BN / 4; ++p)
        for (int e = 0; e < 2; ++e) {
          if (masked) {
            Value col = (n0 + s.Col(p) + e).To(s32);
            s[2 * p + e] = Select(col < limit[p % 2], s[2 * p + e], k.F32(-INFINITY));
          }
          tile_max[p % 2] = Max(tile_max[p % 2], s[2 * p + e]);
        }
      Value base[2];
      for (int half = 0; half < 2; ++half) {
        Value mx = tile_max[half];
        mx = Max(mx, ShflXor(mx, 1));  // the four threads of a row
        mx = Max(mx, ShflXor(mx, 2));
        Value new_max = Max(row_max[half], mx * scale_log2);
        // Lazily: the row keeps its reference unless the tile's maximum passes it by more than
        // 2^8, so P <= 256 (bf16/f16 keep its relative precision as for any P) and O's rescale
        // is mostly skipped; O and the sum share the reference, so O / sum is the same.
        if (a.lazy_rescale) new_max = Select(new_max <= row_max[half] + kLazySlack, row_max[half], new_max);
        base[half] = Select(new_max == k.F32(-INFINITY), k.F32(0), new_max);  // a row that saw only -inf
        alpha[half] = Exp2(row_max[half] - base[half]);
        row_max[half] = new_max;
      }
      Value sum[2] = {k.F32(0), k.F32(0)};
      for (int p = 0; p < BN / 4; ++p)
        for (int e = 0; e < 2; ++e) {
          Value pv = Exp2(Fma(s[2 * p + e], scale_log2, -base[p % 2]));
          s[2 * p + e] = pv;
          sum[p % 2] = sum[p % 2] + pv;
        }
      for (int half = 0; half < 2; ++half) row_sum[half] = Fma(row_sum[half], alpha[half], sum[half]);
    };
    auto rescale_o = [&] {
      auto scale_rows = [&] {
        for (int q = 0; q < D / 4; ++q)
          for (int e = 0; e < 2; ++e) o[2 * q + e] = o[2 * q + e] * alpha[q % 2];
      };
      if (!a.lazy_rescale) return scale_rows();
      // Only in warps where some row's reference moved (a warp-uniform branch).
      Value moved = Select((alpha[0] != 1.0) | (alpha[1] != 1.0), k.I32(1), k.I32(0));
      k.If(ReduxSync(moved, Reduce::kMax) != 0, scale_rows);
    };
    auto issue_s = [&](Value ks) {
      for (int kk = 0; kk < D; kk += 16)
        k.Wgmma(s, sQs, kk / 64 * BM + row0, sK.Stage(ks), kk / 64 * BN, kk % 64, /*scale_d=*/kk > 0);
      k.WgmmaCommit();
    };
    auto issue_pv = [&](Value vs) {
      for (int kk = 0; kk < BN; kk += 16)
        k.Wgmma(o, {p_frag[kk / 4], p_frag[kk / 4 + 1], p_frag[kk / 4 + 2], p_frag[kk / 4 + 3]}, {sV.Stage(vs), /*mn_major=*/true, BN}, 0, kk);
      k.WgmmaCommit();
    };
    // Masks only where a tile reaches past Skv or, causally, past its first row's diagonal.
    auto softmax_of = [&](Value n0) {
      Value needs_mask = (n0 + BN).To(s32) > (a.causal ? Min(Skv.To(s32), (m0 + 1).To(s32) + shift) : Skv.To(s32));
      k.If(needs_mask, [&] { softmax(n0, true); }, [&] { softmax(n0, false); });
    };
    auto pack_p = [&] {
      for (int f = 0; f < BN / 16; ++f) {
        std::vector<Value> frag = s.FragmentA(f, in);
        for (int r = 0; r < 4; ++r) p_frag[4 * f + r] = frag[r];
      }
    };
    // A tile's end, in two parts: the rows' lse stored and 1 / sum returned (from the sums and
    // maxima as they stand), then O / sum through this warpgroup's rows of the tile's Q stage (its
    // own wgmmas, the only readers, have retired) and a clipped TMA store; the stage is free for
    // the next Q once the store has read it.
    struct Inverse {
      Value of[2];
    };
    auto finish_rows = [&](Value tile_m0, Value q_head) {
      Inverse inv;
      for (int half = 0; half < 2; ++half) {
        Value total = row_sum[half];
        total = total + ShflXor(total, 1);
        total = total + ShflXor(total, 2);
        inv.of[half] = Select(total > 0.0, Rcp(total), k.F32(0));
        Value row = tile_m0 + row0 + o.Row(half);
        Value lse_value = Select(total > 0.0, (row_max[half] + Log2(total)) * M_LN2, k.F32(-INFINITY));
        k.If((c % 4 == 0) & (row < S), [&] { k.Store(lse + (q_head.To(i64) * S.To(i64) + row.To(i64)), lse_value); });
      }
      return inv;
    };
    auto store_o = [&](Value tile_m0, Value q_head, Value qs, const Inverse& inv) {
      SmemTile out = sQ.Stage(qs);
      for (int p = 0; p < D / 4; ++p) {
        const int span = p / 2 * 8 / 64;  // which 64 columns of D this pair lies in
        Value x = o[2 * p] * inv.of[p % 2], y = o[2 * p + 1] * inv.of[p % 2];
        k.Store(out.At(span * BM + row0 + o.Row(p), o.Col(p) - span * 64), in == f16 ? PackF16x2(x, y) : PackBf16x2(x, y));
      }
      k.FenceProxyAsync();
      k.NamedBarrier(wg + 1 + W, 128);
      for (int x = 0; x < W; ++x)
        k.If((c == 0) & (wg == x), [&] {
          for (int span = 0; span < SPANS; ++span)
            k.TmaStore(to, out.Rows(span * BM + x * 64, 64), {0, tile_m0 + x * 64, span, q_head});
          k.BulkCommit();
          k.BulkWait(0, /*smem_reads_only=*/true);
          q_ring.Release(qs, c);
        });
    };
    // The steps of one tile: in step j a warpgroup issues S = Q K_j and O += P_{j-1} V_{j-1}
    // together (FA3's order), runs the softmax of S_j while P_{j-1} V_{j-1} is still on the
    // tensor cores, then rescales O once that group retires. P lives in registers as the next
    // wgmma's A fragments, so S's accumulator is free for the next tile. The warpgroups take turns
    // to issue in the ring above, so one's softmax runs under the others' GEMMs.
    // V_{j-1}'s stage: acquired at the end of step j - 1 (a CTA per tile), or at the start of step
    // j in the persistent kernel, where a stage held in a register across its tile loop is no
    // longer known warp-uniform and its descriptors leave uniform registers
    // (docs/perf/2026-11-24-attention.md, step 7).
    const bool v_late = a.persistent;
    Regs v_held;  // the stage acquired at the end of the step before (a CTA per tile)
    auto v_stage = [&] { return v_late ? v_ring.Acquire(v_at) : v_held[0]; };
    // A step with both GEMMs: S of the key tile at n0, and the P V before it. `before_softmax`
    // runs once S is in, `after_pv` once the P V has retired.
    auto paired_step = [&](Value n0, const std::function<void()>& before_softmax, const std::function<void()>& after_pv) {
      my_turn();
      Value ks = k_ring.Acquire(k_at);
      Value vs = v_stage();
      k.WgmmaFence();
      issue_s(ks);
      issue_pv(vs);
      their_turn();
      k.WgmmaWait(1);  // S is in; the P V may still run
      k_ring.Release(ks, c);
      before_softmax();
      softmax_of(n0);
      k.WgmmaWait(0);
      v_ring.Release(vs, c);
      after_pv();
      pack_p();
    };
    auto later_steps = [&](Value n_tiles) {
      k.For(1, n_tiles, 1, [&](Value j) {
        paired_step(j * BN, [] {}, rescale_o);
        if (!v_late) v_held[0] = v_ring.Acquire(v_at);
      });
    };
    auto first_step = [&] {  // S_0 alone
      my_turn();
      Value ks = k_ring.Acquire(k_at);
      k.WgmmaFence();
      issue_s(ks);
      their_turn();
      k.WgmmaWait(0);
      k_ring.Release(ks, c);
      softmax_of(k.I32(0));
      pack_p();
    };
    auto last_pv = [&] {  // the tile's last P V alone
      my_turn();
      Value vs = v_stage();
      k.WgmmaFence();
      issue_pv(vs);
      their_turn();
      k.WgmmaWait(0);
      v_ring.Release(vs, c);
    };
    auto take = [&] {
      now[1] = q_ring.Acquire(q_at);
      now[0] = k.Load(tile_slots.At(0, n[0] % 4));
    };

    if (!stream_tiles) {
      k.While(
          [&] {
            Value more = n[0] == 0;
            if (a.persistent)
              take();
            else
              k.If(more, take);
            n[0] = n[0] + 1;
            return a.persistent ? now[0] < tile_count : more;
          },
          [&] {
            QueryTile tile = tile_of(now[0]);
            Value qs = now[1];
            m0 = tile.m0;
            fresh_state();  // zeroed for each tile
            sQs = sQ.Stage(qs);
            k.If(tile.n_tiles > 0, [&] {
              first_step();
              if (!v_late) {
                v_held = k.Registers(Type::Of(i32), 1);
                v_held[0] = v_ring.Acquire(v_at);
              }
              later_steps(tile.n_tiles);
              last_pv();
            });
            store_o(m0, tile.q_head, qs, finish_rows(m0, tile.q_head));
          });
    } else {
      // One stream of steps. The first tile starts alone; in each later one, step 0 issues S_0
      // with the tile before's last P V and runs that tile's epilogue under the other warpgroups'
      // GEMMs; the last tile's last P V goes alone. (Only without a mask, where every tile sees a
      // key: a branch per tile between the two kinds of step 0 would leave the rings' positions
      // in vector registers, and the wgmma descriptors with them.)
      Regs prev = k.Registers(Type::Of(i32), 2);  // the tile before: its number and Q stage
      auto start_tile = [&] {
        QueryTile tile = tile_of(now[0]);
        m0 = tile.m0;
        sQs = sQ.Stage(now[1]);
        return tile;
      };
      auto end_steps = [&] {
        prev[0] = now[0];
        prev[1] = now[1];
      };
      take();
      n[0] = n[0] + 1;
      k.If(now[0] < tile_count, [&] {
        fresh_state();
        QueryTile tile = start_tile();
        first_step();
        later_steps(tile.n_tiles);
        end_steps();
        k.While(
            [&] {
              take();
              n[0] = n[0] + 1;
              return now[0] < tile_count;
            },
            [&] {
              QueryTile tile = start_tile(), before;
              Inverse inv;
              paired_step(
                  k.I32(0),
                  [&] {  // the tile before's rows finished, the new tile's started
                    before = tile_of(prev[0]);
                    inv = finish_rows(before.m0, before.q_head);
                    for (int half = 0; half < 2; ++half) {
                      row_max[half] = k.F32(-INFINITY);
                      row_sum[half] = k.F32(0);
                    }
                  },
                  [&] {  // its O out, then zero for the new tile
                    store_o(before.m0, before.q_head, prev[1], inv);
                    for (int i = 0; i < D / 2; ++i) o[i] = k.F32(0);
                  });
              later_steps(tile.n_tiles);
              end_steps();
            });
        last_pv();
        QueryTile before = tile_of(prev[0]);
        store_o(before.m0, before.q_head, prev[1], finish_rows(before.m0, before.q_head));
      });
    }
    k.If(wg == 0, [&] { my_turn(); });  // takes the last warpgroup's last signal: barrier 1 ends balanced
  });
  return k.Build();
}

ExampleFamily AttentionFamily() {
  ExampleFamily f = AttentionFamilyOf("attention/hopper",
                                      "FlashAttention forward for sm_90a: TMA pipelines for K and V, two consumer "
                                      "warpgroups, online softmax in registers, P*V with P from registers; head dims "
                                      "64/128/256, bf16/f16, causal",
                                      BuildAttention);
  for (const char* v : {"d128", "d128.f16", "d128.bn160", "d128.f16.bn160", "d128.causal", "d128.f16.causal", "d64",
                        "d64.f16", "d64.causal", "d64.f16.causal"})  // the entry point's persistent picks
    f.bundled.push_back(absl::StrCat(v, ".persist"));
  for (const char* v : {"d64.causal", "d64.f16.causal"})  // and its pick for short causal tiles at D = 64
    f.bundled.push_back(absl::StrCat(v, ".wg2"));
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_hopper, AttentionFamily());
}  // namespace kiln::examples
