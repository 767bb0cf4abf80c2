// attention/hopper_dkdv: dK and dV of FlashAttention's backward for sm_90a (hopper_bwd_parts.h
// says the algorithm). A CTA per key tile of 64 * W keys of one KV head: a producer warp loads
// that tile of K and V once, then for each query head sharing the KV head, each query tile of 64
// rows that sees the key tile (causally: from the first whose last row reaches it), Q with its
// rows' lse2 and dO with their delta, each pair into a ring of its own. Consumer warpgroup w owns
// keys w * 64.. of the tile and, per query tile:
//   S^T = K_w Q^T and dP^T = V_w dO^T          (wgmma, both operands from shared memory)
//   P^T = 2^(S^T * scale log2 e - lse2), 0 where masked; dS^T = P^T * (dP^T - delta)
//   dV_w += P^T dO and dK_w += dS^T Q          (wgmma, P^T and dS^T from registers)
// and at the end stores scale * dK_w and dV_w through its rows of K's and V's tiles.
//
// With "dqadd", also the tile's part of dQ: each warpgroup writes its dS^T to shared memory (a
// ring of two, one a step), the warpgroups meet, and dQ_part = dS K (wgmma, dS read MN-major from
// shared memory, K MN-major) is staged in shared memory and added in f32 into dQacc by one TMA
// reduction (cp.reduce.async.bulk .add, atomic per element); dK's wgmma reads dS^T there
// too. D = 128: warpgroup w takes D's columns 64w..; D = 64: the warpgroups take turns, a step
// each. StepGradients says in which order a step issues its gradient GEMMs.
//
// Constraints (checked at build): 1 or 2 consumer warpgroups (dqadd: 2). D 64 or 128; at D = 256
// dK and dV would not fit a warpgroup's registers beside S^T and dP^T, so BuildDkDvSplitD
// (hopper_dkdv_split.cc) builds it, its warpgroups splitting D.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"
#include "kiln/rows.h"
#include "ops/attention/kernels/hopper_bwd_parts.h"

namespace kiln::examples {
namespace {

using attention_sm90::BackwardParams;

constexpr int kQueryRows = 64;  // a query tile: the N of S^T's wgmma
constexpr int kProducerRegs = 24;

// dqadd: this warpgroup's 64 columns of the step's dQ part, dS (dS^T in `ds_t`, [keys, 64
// queries], read MN-major) times K (all `keys` rows, read MN-major), issued as a wgmma group of
// its own. D = 128: columns 64 * wg..; D = 64: all of them, by the warpgroup whose turn it is
// (the caller's test).
void IssueDq(Kernel& k, const WgmmaAccumulator& dq, const SmemTile& ds_t, const SmemTile& sK,
             int keys, const Value& chunk) {
  for (int kk = 0; kk < keys; kk += 16)
    k.Wgmma(dq, {.a = {ds_t, true, keys},
                 .b = {sK, true, keys},
                 .b_row0 = chunk * 64,
                 .k0 = kk,
                 .accumulate = kk > 0});
  k.WgmmaCommit();
}

// dqadd: the dQ part (its group waited for) added into dQacc at the query tile's rows (its padded
// rows too: their dS is 0) through `staging` (this warpgroup's 64 x 64 f32) and one TMA
// reduction, which runs on under the next step. Thread `c` of 128.
void AddDq(Kernel& k, const BackwardParams& p, const WgmmaAccumulator& dq, const SmemTile& staging,
           const Value& chunk, const Value& wg, const Value& c, const Value& q_head,
           const Value& m0) {
  // The staging tile is free once the last reduction has read it (its issuing thread waits,
  // then the warpgroup meets); filled, fenced for the async proxy, met again, added.
  k.If(c == 0, [&] { k.BulkWait(0, /*smem_reads_only=*/true); });
  k.NamedBarrier(wg + 1, 128);
  for (int pair = 0; pair < 16; ++pair)
    k.Store(staging.At(dq.Row(pair), dq.Col(pair)), k.Vector({dq[2 * pair], dq[2 * pair + 1]}));
  k.FenceProxyAsync();
  k.NamedBarrier(wg + 1, 128);
  k.If(c == 0, [&] {
    k.TmaReduceAdd(p.tdq_acc, staging, {chunk * 64, q_head * p.Sp + m0});
    k.BulkCommit();
  });
}

// What one step's gradient GEMMs read and write (a consumer warpgroup's view).
struct StepGemms {
  // st: P^T, then (dqadd) 64 columns of the dQ part, P^T being in fragments by then (registers
  // of their own would stay live across the loop: hopper_dq's note).
  const WgmmaAccumulator *dk, *dv, *st, *dpt;
  SmemTile sdS, sdQ, sK, q_stage, do_stage;  // sdS: this step's dS^T buffer
  Value wg, c, row0, buf, q_head, m0;
};

// dV += P^T dO and dK += dS^T Q (and, with dqadd, the dQ part added) once P^T (in st) and dS^T
// (in dpt) are in. `dv_first` issues dV's group before dS^T goes through shared memory (it needs
// nothing of the other warpgroup) and dQ's group before dK's, so that dQ's part is staged and
// added while dK's group runs (wait 1), as FlashAttention-3 orders the step; otherwise dV's and
// dK's wgmmas form one group and dQ's comes last (wait 0). The better order differs by kernel
// (docs/perf/2026-12-02-backward-step-order.md).
void StepGradients(Kernel& k, const BackwardParams& p, const AttentionShape& a, const StepGemms& g,
                   bool dv_first) {
  const int BM = kQueryRows, BN = 64 * a.warpgroups, spans = a.d / 64;
  const Scalar in = a.in;
  Value chunk = spans == 2 ? g.wg : k.I32(0);
  auto if_mine = [&](const std::function<void()>& body) {  // D = 64: whose turn dQ is
    if (spans == 2)
      body();
    else
      k.If(g.wg == g.buf, body);
  };
  std::vector<Value> packed;  // dS^T rounded, dqadd
  auto pack_ds = [&] {
    if (a.dq_add && packed.empty()) packed = PackPairs(*g.dpt, in);
  };
  auto share_ds = [&] {  // dS^T rounded into its buffer; both warpgroups' rows in
    if (!a.dq_add) return;
    pack_ds();
    for (int pair = 0; pair < BM / 4; ++pair)
      k.Store(g.sdS.At(g.row0 + g.dpt->Row(pair), g.dpt->Col(pair)), packed[pair]);
    k.FenceProxyAsync();
    k.NamedBarrier(a.warpgroups + 1, 128 * a.warpgroups);
  };
  // P^T and dS^T as A fragments, made before the fence that orders them for the wgmmas.
  // (dqadd: dS^T is read from its buffer, where dQ's wgmma reads it too.)
  std::vector<std::vector<Value>> p_frags, ds_frags;
  auto make_frags = [&] {
    for (int f = 0; f < BM / 16; ++f) {
      p_frags.push_back(g.st->FragmentA(f, in));
      if (!a.dq_add) ds_frags.push_back(g.dpt->FragmentA(f, in));
    }
    k.WgmmaFence();
  };
  auto issue_dv = [&] {
    for (int f = 0; f < BM / 16; ++f)
      k.Wgmma(*g.dv, {.a_regs = p_frags[f], .b = {g.do_stage, true, BM}, .k0 = f * 16});
  };
  auto issue_dk = [&] {
    for (int f = 0; f < BM / 16; ++f)
      if (a.dq_add)
        k.Wgmma(*g.dk, {.a = g.sdS, .a_row0 = g.row0, .b = {g.q_stage, true, BM}, .k0 = f * 16});
      else
        k.Wgmma(*g.dk, {.a_regs = ds_frags[f], .b = {g.q_stage, true, BM}, .k0 = f * 16});
  };
  auto issue_dq = [&] { IssueDq(k, *g.st, g.sdS, g.sK, BN, chunk); };
  auto add_dq = [&] { AddDq(k, p, *g.st, g.sdQ.Stage(g.wg), chunk, g.wg, g.c, g.q_head, g.m0); };
  if (dv_first) {
    pack_ds();  // (dS^T's f32 registers free before dV's group holds P^T's fragments)
    make_frags();
    issue_dv();
    if (a.dq_add) {
      k.WgmmaCommit();
      share_ds();
      k.WgmmaFence();
      if_mine(issue_dq);
    }
    issue_dk();
    k.WgmmaCommit();
    if (a.dq_add) {
      k.WgmmaWait(1);  // dV's and dQ's groups are in; dK's runs on
      if_mine(add_dq);
    }
  } else {
    share_ds();
    make_frags();
    issue_dv();
    issue_dk();
    k.WgmmaCommit();
    if (a.dq_add)
      if_mine([&] {
        issue_dq();
        k.WgmmaWait(0);
        add_dq();
      });
  }
  k.WgmmaWait(0);
}

absl::StatusOr<KernelDef> BuildDkDv(const std::string& name, AttentionShape a) {
  if (a.d == 256) return attention_sm90::BuildDkDvSplitD(name, a);
  if (!a.warpgroups) a.warpgroups = 2;
  if (!a.stages) a.stages = 2;
  const int D = a.d, W = a.warpgroups, BN = 64 * W, BM = kQueryRows, SPANS = D / 64;
  const Scalar in = a.in;
  // (a block within 1024 threads, so that an out-of-range W is refused by its own rule below)
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (std::clamp(W, 1, 3) + 1))});
  // At D = 64 the consumers need fewer registers than their launch share, and ptxas, left to
  // choose the entry's count, ignores every setmaxnreg (kiln check's C7508 finding): pin it
  // (docs/perf/2026-12-01-setmaxnreg-pinned.md).
  if (D == 64) k.MinBlocksPerSm(1);
  if (W < 1 || W > 2) k.Fail(absl::StrCat("hopper_dkdv takes 1 or 2 consumer warpgroups, not ", W));
  if (a.persistent || a.split || a.per_sequence() || a.rows || a.two_ctas)
    k.Fail("hopper_dkdv runs [B, H, S, D] tensors or packed sequences, a CTA per key tile");
  RefuseForwardOptions(k, a, "attention/hopper_dkdv");
  if (a.varlen && a.dq_add) k.Fail("hopper_dkdv.dqadd runs dense tensors (no varlen)");
  if (a.block_n && a.block_n != BN)
    k.Fail(absl::StrCat("hopper_dkdv's key tile is 64 rows a consumer warpgroup (", BN,
                        " here): no bn", a.block_n));
  if (k.failed()) return k.Build();  // (the code below assumes these)
  const BackwardParams p = attention_sm90::DeclareBackwardParams(k, a, BM, BN, /*dkdv=*/true);
  k.Grid(a.varlen ? "tiles*Hkv" : absl::StrCat("Skv/", BN, "*Hkv*B"));
  k.Attribute("attention_backward", absl::StrCat("d=", D, " causal=", a.causal, " block_n=", BN));

  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B);
  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, a.stages);
  SmemTile sdO = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, a.stages);
  const int row_values = attention_sm90::kRowValuesBox;  // (lse2 and delta: a box's)
  SmemTile sLse = k.Smem(f32, 1, row_values, SmemLayout{.stages = a.stages});
  SmemTile sDelta = k.Smem(f32, 1, row_values, SmemLayout{.stages = a.stages});
  SmemTile sdS, sdQ;  // dqadd: dS^T, [keys, queries], a ring of two; each warpgroup's dQ part
  if (a.dq_add) {
    sdS = k.SmemSwizzled(in, BN, BM, Swizzle::k128B, 2);
    sdQ = k.Smem(f32, 64, 64, SmemLayout{.stages = W});  // a stage per warpgroup
  }
  if (a.dq_add && W != 2) k.Fail("hopper_dkdv.dqadd takes 2 consumer warpgroups");
  Pipeline kv_ring(k, 1, W), q_ring(k, a.stages, W), do_ring(k, a.stages, W);

  const attention_sm90::KeyTileWork w = attention_sm90::KeyTileOf(k, p, a, BN, BM);
  const Value &n0 = w.n0, &kv_head = w.kv_head;

  k.If(k.ThreadIdx() == 0, [&] {
    kv_ring.Init();
    q_ring.Init();
    do_ring.Init();
  });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128, .max_regs = kProducerRegs}, [&](Value tid) {
    k.If(tid == 0, [&] {
      attention_sm90::ProduceDkDv(k, p, a, w, BM, {sK, sV, sQ, sdO, sLse, sDelta}, kv_ring, q_ring,
                                  do_ring);
    });
  });

  const int consumer_regs = std::min(240, (65536 / 128 - kProducerRegs) / W / 8 * 8);
  k.Role({.first_thread = 128, .threads = 128 * W, .max_regs = consumer_regs}, [&](Value tid) {
    Value c = tid % 128, wg = ConsumerWarpgroup(a, tid), row0 = wg * 64;
    Value scale_log2 = p.scale * M_LOG2E;
    Pipeline::Cursor kv_at = kv_ring.Start(), q_at = q_ring.Start(), do_at = do_ring.Start();
    WgmmaAccumulator dk = k.WgmmaAcc(D), dv = k.WgmmaAcc(D);
    // S^T and dP^T, overwritten by each step's first wgmma (made here: registers made inside the
    // loop would be zeroed between its fence and its wgmma, which ptxas then serialises).
    WgmmaAccumulator st = k.WgmmaAcc(BM), dpt = k.WgmmaAcc(BM);
    Regs step = k.Registers(Type::Of(i32), 1);  // dqadd: which dS^T buffer, whose turn
    Value kvs = kv_ring.Acquire(kv_at);
    attention_sm90::EachQueryTile(k, w, BM, [&](Value q_head, Value m0) {
      Value qs = q_ring.Acquire(q_at);
      // A packed sequence's last query tile holds the next sequence's rows past it: zeroed, as
      // dK's and dV's GEMMs take 0 times them (ZeroRowsFrom).
      if (a.varlen) ZeroRowsFrom(k, sQ.Stage(qs), BM, SPANS, in, w.q_end - m0, tid, 128 * W, W + 1);
      k.WgmmaFence();
      attention_sm90::IssueOverD(k, st, D, sK, BN, row0, sQ.Stage(qs), BM);
      Value ds = do_ring.Acquire(do_at);
      if (a.varlen)
        ZeroRowsFrom(k, sdO.Stage(ds), BM, SPANS, in, w.q_end - m0, tid, 128 * W, W + 1);
      k.WgmmaFence();  // (its accumulator last written before the wait above)
      attention_sm90::IssueOverD(k, dpt, D, sV, BN, row0, sdO.Stage(ds), BM);
      k.WgmmaWait(1);  // S^T is in
      Value off = attention_sm90::RowValuesOffset(a, w.Row(m0));
      attention_sm90::ProbabilitiesT(k, st, sLse.Stage(qs), Value(), n0 + row0, m0, w.keys,
                                     a.causal ? w.shift : Value(), scale_log2, w.q_end, off);
      k.WgmmaWait(0);  // dP^T is in
      attention_sm90::ScoreGradsT(k, st, dpt, sDelta.Stage(ds), Value(), off, a.varlen);
      // dV's group first at D = 128 and under a causal mask; at D = 64 without one the old order
      // ran faster (docs/perf/2026-12-02-backward-step-order.md).
      Value buf = step[0] % 2;
      StepGradients(k, p, a,
                    {.dk = &dk,
                     .dv = &dv,
                     .st = &st,
                     .dpt = &dpt,
                     .sdS = a.dq_add ? sdS.Stage(buf) : SmemTile(),
                     .sdQ = sdQ,
                     .sK = sK,
                     .q_stage = sQ.Stage(qs),
                     .do_stage = sdO.Stage(ds),
                     .wg = wg,
                     .c = c,
                     .row0 = row0,
                     .buf = buf,
                     .q_head = q_head,
                     .m0 = m0},
                    /*dv_first=*/D == 128 || a.causal);
      step[0] = step[0] + 1;
      // The stages' lse2 and delta were read through the generic proxy by every thread: each
      // fences its reads before the next TMA writes, and the warpgroup meets before one thread
      // releases the stages.
      k.FenceProxyAsync();
      k.NamedBarrier(wg + 1, 128);
      q_ring.Release(qs, c);
      do_ring.Release(ds, c);
    });
    // This warpgroup's rows of K's and V's tiles are read by no wgmma now (with dqadd, once the
    // other warpgroup's last dQ wgmma, which reads all of K, has retired): dK and dV go out
    // through them.
    if (a.dq_add) k.NamedBarrier(W + 1, 128 * W);
    if (a.varlen) {
      for (int x = 0; x < 2; ++x)
        attention_sm90::StoreGradientRows(k, x ? dv : dk, x ? Value() : p.scale, p.out[x], p.Hkv, D,
                                          kv_head, w.seq0, n0 + row0, w.keys, k.I32(0), in);
    } else {
      attention_sm90::StoreGradientTile(k, dk, p.scale, sK, BN, W, wg, c, 1, p.tout[0], n0 + row0,
                                        kv_head, in);
      attention_sm90::StoreGradientTile(k, dv, Value(), sV, BN, W, wg, c, 1, p.tout[1], n0 + row0,
                                        kv_head, in);
    }
    kv_ring.Release(kvs, c);
  });
  return k.Build();
}

ExampleFamily DkDvFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/hopper_dkdv",
      "FlashAttention backward for sm_90a, dK and dV: a CTA per key tile walks the query tiles "
      "that see it (S^T and dP^T rebuilt, P^T and dS^T from registers into dV and dK; at D 256 "
      "the warpgroups split D); D 64/128/256, "
      "bf16/f16, causal, grouped-query heads",
      BuildDkDv);
  f.bundled = attention_sm90::BundledBackwardVariants({"", ".dqadd", ".varlen"});
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_hopper_dkdv, DkDvFamily());
}  // namespace kiln::examples
