// attention/hopper: FlashAttention forward for sm_90a. O = softmax(scale * Q K^T) V per head, and
// the log-sum-exp of each row, with the FA3 structure: a producer warp streams Q once and K, V
// through two TMA pipelines; one to three consumer warpgroups (64 query rows each, setmaxnreg) run
// S = Q K^T from shared memory, an online softmax in registers (exp2 with the scale folded into
// one FMA), and O += P V with P taken straight from S's registers (wgmma A from registers, V read
// MN-major). The last tile of a ragged Q or KV is masked, not padded: TMA zero-fills the loads
// past S or Skv, the scores past Skv are -inf, the store of O is clipped at S.
//
// Algorithm: the CTA (one per query tile, or one per SM taking tiles from a counter) walks query
// tiles of 64 rows a consumer warpgroup. For each, the producer loads Q into a ring of one or two
// stages and K, V tile by tile into their own rings. Each consumer warpgroup runs the steps of
// the tile: in step j it issues S = Q K_j and O += P_{j-1} V_{j-1} together, in its turn of a
// ring of named barriers (so one warpgroup's softmax runs under the others' GEMMs), runs the
// online softmax of S_j, rescales O once the P V has retired and keeps P as the next wgmma's A
// fragments. A tile ends with its rows' lse, O / sum through its Q stage and a clipped TMA store.
//
// Decode ("split", planned by rt::PlanAttention's PlanDecode): one warpgroup over a KV head's query
// heads packed as one tile's rows, the key tiles of each query tile split in P parts, a CTA each,
// each writing its O and lse as a head of their own; the last part of a tile to finish merges
// them (SplitFold: hopper_epilogue.cc), or, where the launcher does not ask, attention/combine
// does (docs/perf/2026-11-28-decode-split-kv.md, "The merge in the last part"); "lens" gives each
// sequence its own length and "pageN" reads K and V from a paged cache (common.h).
//
// Constraints (checked at build): 1 to 3 consumer warpgroups; a key tile of a multiple of 16 rows
// up to 256; a head dimension of 64, 128 or 256 (ParseAttention); split a CTA per tile, lens and
// pages split without a mask only, pages and key tiles one a multiple of the other.
// Tensors, heads and masks: ops/attention/kernels/common.h.
//
// The pieces: this file declares the kernel (parameters, the work, shared memory, the rings) and
// its roles; hopper_producer.cc is the producer warp; hopper_consumer.cc the consumers' walk over
// their tiles and a tile's steps; hopper_softmax.cc the online softmax; hopper_epilogue.cc a
// tile's end. hopper_parts.h holds what they share.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"
#include "ops/attention/kernels/common.h"
#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples {
namespace attention_sm90 {

// The K and V bytes whose tiles are dealt together so that they stay in L2 (the dense causal
// walk's head groups, the packed causal walk's sequence groups).
constexpr int kL2GroupBytes = 8 << 20;

// Causal tiles differ in length, and a CTA per tile is dispatched in tile order: heads are taken
// in groups whose K and V fit in L2 together (8 MB), and within a group the longest tiles of all
// its heads come first, so that the launch ends on the shortest tiles of a group rather than on
// the last head's longest (docs/perf/2026-11-24-attention.md, step 8). Without a mask,
// head-major.
QueryTile HopperAttention::TileOf(Value t) const {
  if (a.varlen) return PackedTileOf(t);
  const Value &B = p.B, &Hq = p.Hq, &Hkv = p.Hkv, &Skv = p.Skv;
  Value part;  // split: tiles t, t + (the tiles of all heads), ... are the parts of one tile
  if (a.split) {
    Value whole = m_tiles * Hq * B;
    part = t / whole;
    t = t % whole;
  }
  Value q_head = t / m_tiles, m = t % m_tiles;
  if (a.causal) {
    Value g0 = t / (group_heads * m_tiles) * group_heads;  // the group's first head
    Value in_group = Min(group_heads, Hq * B - g0);        // fewer in the last group
    Value i = t - g0 * m_tiles;
    q_head = g0 + i % in_group;
    m = i / in_group;  // 0: the longest
  }
  Value h = q_head % Hq, b = q_head / Hq;
  Value m0 = (a.causal ? m_tiles - 1 - m : m) * BM;
  // A sequence of its own length: at most Skv (a longer one would read the next's rows; i32 is
  // unsigned here, so a negative one reads as longer).
  Value skv = a.per_sequence() ? Min(k.Load(p.seq_lens + b.To(i64)), Skv) : Skv;
  // Causally each sequence's last query row sees its last key (a chunk of a prefill whose earlier
  // keys are in the cache: bottom-right aligned to its own length).
  Value diagonal = a.per_sequence() ? skv.To(s32) - p.S.To(s32) : shift;
  Value n_end = a.causal ? Max(Min(skv.To(s32), (m0 + BM).To(s32) + diagonal), 0).To(i32) : skv;
  Value n_tiles = (n_end + (BN - 1)) / BN, kv_head = b * Hkv + h / (Hq / Hkv);
  if (streams && a.per_sequence()) n_tiles = Max(n_tiles, k.I32(1));  // (its keys all masked)
  Value zero = k.I32(0);
  if (!a.split)
    return QueryTile{m0, q_head, kv_head, n_tiles, zero, q_head, skv, b, zero, p.S, diagonal};
  // Part `part` of P: its share of the key tiles (none for the last parts where P does not divide
  // them: they write O = 0 and lse = -inf, which the combine weighs 0).
  Value per = (n_tiles + (p.P - 1)) / p.P, first = Min(part * per, n_tiles);
  return QueryTile{
      m0,   q_head, kv_head, Min(n_tiles - first, per), first, part * (B * Hq) + q_head, skv, b,
      zero, p.S,    diagonal};
}

// Packed sequences: tile number t is head t % Hq of the sequences' (t / Hq)-th query tile, their
// tiles numbered sequence by sequence; or (`ranked`: the persistent walk) by rank (B times the
// most tiles of a sequence), where the missing ranks of shorter sequences see no key and store
// nothing (the producer passes them over).
QueryTile HopperAttention::PackedTileOf(Value t) const {
  const Value &Hq = p.Hq, &Hkv = p.Hkv;
  Value h = t % Hq;
  PackedTile tile;
  if (!ranked) {
    tile = FindPackedTile(k, p.cu_seqlens, p.T, p.B, t / Hq, BM);
  } else if (a.causal) {
    // The longest of every sequence first, over groups of sequences whose K and V fit in L2
    // together (as the dense walk's head groups): rank by rank within a group, its sequences' heads
    // side by side. (A number past them all reads an in-bounds place, the last sequence's: its
    // callers stop at tile_count.)
    Value ranks = Max(most_tiles, k.I32(1)), n = t / Hq;
    Value group =  // (kL2GroupBytes over the K and V of a sequence at most, 16-bit)
        Max(Min(k.I32(kL2GroupBytes / (BM * D * 4)) / ranks / Hkv, p.B), k.I32(1));
    Value g0 = n / (group * ranks) * group, in_group = Max(Min(group, p.B - g0), k.I32(1));
    Value i = n - g0 * ranks;
    tile =
        PackedTileOfRank(k, p.cu_seqlens, p.T, Min(g0 + i % in_group, p.B - 1), i / in_group, BM);
  } else {
    // Without a mask no tile is longer than another: a sequence's heads in turn, each head's
    // ranks one after the other, so that the tiles in flight read the same K and V from L2, as
    // the dense walk's do (head-major). (A number past them all reads an in-bounds place, the
    // last sequence's: its callers stop at tile_count.)
    Value ranks = Max(most_tiles, k.I32(1)), per_sequence = Hq * ranks, w = t % per_sequence;
    h = w / ranks;
    tile = PackedTileOfRank(k, p.cu_seqlens, p.T, Min(t / per_sequence, p.B - 1), w % ranks, BM);
  }
  const Value &b = tile.b, &seq0 = tile.seq0, &len = tile.len;
  Value last = (len + (BM - 1)) / BM - 1;  // (found: tile <= last)
  // Causally the longest first: by rank already, else from the sequence's last tile.
  Value m0 =
      (a.causal && !ranked ? Select(tile.found, last - tile.tile, k.I32(0)) : tile.tile) * BM;
  Value n_end = a.causal ? Min(len, m0 + BM) : len;  // (its own diagonal: S = Skv a sequence)
  Value n_tiles = (n_end + (BN - 1)) / BN, zero = k.I32(0);
  return QueryTile{m0, h, h / (Hq / Hkv), n_tiles, zero, h, len, b, seq0, len, shift};
}

}  // namespace attention_sm90

namespace {

using attention_sm90::HopperAttention;

// The default tiling per head dimension (docs/perf/2026-11-24-attention.md says how each was
// chosen).
AttentionShape WithDefaults(AttentionShape a) {
  if (!a.warpgroups) a.warpgroups = a.d == 64 ? 3 : 2;  // 192 query rows: longer GEMMs per turn
  if (!a.block_n)
    a.block_n = a.d == 256 ? 64 : a.d == 128 && !a.causal && !a.persistent ? 176 : 128;
  if (!a.stages) a.stages = 2;
  // Lazy rescaling where it measured faster: the persistent kernels but causal D = 64, whose
  // spills it grows (docs/perf/2026-11-24-attention.md, step 13); a CTA per tile ran slower with
  // it.
  if (a.lazy_rescale < 0) a.lazy_rescale = a.persistent && !(a.d == 64 && a.causal);
  // One consumer warpgroup (decode) keeps the thread index's warpgroup; the others take
  // ConsumerWarpgroup's default (docs/perf/2026-12-01-warp-uniform-warpgroup-index.md).
  if (a.uniform_warpgroup < 0 && a.warpgroups == 1) a.uniform_warpgroup = 0;
  // Causally, where a key tile is narrower than the query tile, the first warpgroups' diagonals
  // end whole key tiles before the tile's: each stops at its own where its PERF entry found it
  // faster, the three-warpgroup tiles; not where the warpgroup index is the thread index's, whose
  // per-warpgroup trip count ptxas cannot prove uniform
  // (docs/perf/2026-12-02-causal-warpgroup-diagonals.md).
  if (a.own_diagonal < 0)
    a.own_diagonal = a.causal && a.d == 64 && a.warpgroups > 1 && a.block_n < 64 * a.warpgroups &&
                     WarpUniformIndex(a) && !a.split;
  return a;
}

// The options a kernel cannot combine, each a build error at its line.
void RefuseTilingsItCannotRun(Kernel& k, const AttentionShape& a) {
  const int W = a.warpgroups, BN = a.block_n;
  if (W < 1 || W > 3) k.Fail(absl::StrCat("attention takes 1 to 3 consumer warpgroups, not ", W));
  if (a.split && a.persistent) k.Fail("split-KV runs a CTA per part: no persist");
  if (a.per_sequence() && a.split && a.causal)
    k.Fail("lens and pageN split the keys without a mask only (a CTA per part of a tile)");
  if (a.varlen && (a.split || a.per_sequence()))
    k.Fail("varlen runs a CTA per tile of packed sequences, or persist: no split, lens or pages");
  if (a.rows && (a.split || a.varlen || a.per_sequence()))
    k.Fail("the rows layout runs a CTA per tile or persist: no split, lens, pages or varlen");
  if (a.page && (a.page % BN && BN % a.page))
    k.Fail(absl::StrCat("pages of ", a.page, " tokens and key tiles of ", BN,
                        ": one must divide the other"));
  if (a.page_gather && a.persistent)
    k.Fail("gather copies pages by the producer's 128 threads, a CTA per tile: no persist");
  if (a.page_gather && !GathersPages(a, BN))
    k.Fail(absl::StrCat("gather copies pages of 16 tokens, fewer than a key tile, not pages of ",
                        a.page, " into key tiles of ", BN));
  if (a.own_diagonal == 1 && (!a.causal || W < 2 || a.split))
    k.Fail(
        "wgdiag ends each consumer warpgroup's GEMMs at its own diagonal: causal, two or three "
        "consumer warpgroups, no split");
  if (BN % 16 || BN < 16 || BN > 256)
    k.Fail(absl::StrCat("a key tile of ", BN, " rows: a multiple of 16 up to 256"));
}

absl::StatusOr<KernelDef> BuildAttention(const std::string& name, AttentionShape a) {
  a = WithDefaults(a);
  const int D = a.d, W = a.warpgroups, BM = 64 * W, BN = a.block_n, SPANS = D / 64;
  const int STAGES = a.stages, K_STAGES = a.k_stages ? a.k_stages : STAGES;
  const Scalar in = a.in;
  // (a block within 1024 threads, so that an out-of-range W is refused by its own rule below)
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (std::clamp(W, 1, 3) + 1))});
  if (a.two_ctas) k.MinBlocksPerSm(2);  // (before the roles: their setmaxnreg counts from it)
  RefuseTilingsItCannotRun(k, a);
  if (k.failed()) return k.Build();  // (the code below assumes these)
  const AttentionParams p = DeclareAttentionParams(k, a, BM, BN, /*o_rows=*/64);
  const Value &B = p.B, &Hq = p.Hq, &S = p.S, &Skv = p.Skv;

  // The work: query tiles t of BM rows, head-major or in head groups, the longest first (causal
  // tiles end at their diagonal; HopperAttention::TileOf). A persistent CTA (one per SM) takes
  // its next tile from a counter in global memory, so a tile's loads start under the previous
  // tile's epilogue, SMs that run faster take more tiles, and the shortest tiles come last; the
  // CTA that finishes last puts the counter back to zero for the next launch. Without "persist",
  // a CTA per tile.
  Value tiles;  // {next tile, CTAs done}: the persistent kernel's counter
  if (a.persistent) tiles = k.WorkspaceParam("tile_counter", i32, "", 8);
  Value m_tiles = (S + (BM - 1)) / BM;
  Value tile_count = m_tiles * Hq * B * (a.split ? p.P : k.I32(1));
  if (a.varlen) tile_count = p.query_tiles * Hq;
  if (a.persistent)
    k.Grid("sms");
  else if (a.varlen)
    k.Grid("tiles*Hq");
  else
    k.Grid(absl::StrCat("S/", BM, "*Hq*B", a.split ? "*P" : ""));
  k.Attribute("attention",
              absl::StrCat("d=", D, " causal=", a.causal, " in=", in == f16 ? "f16" : "bf16",
                           " block_m=", BM, " block_n=", BN, " stages=", STAGES,
                           a.k_stages ? absl::StrCat(" k_stages=", K_STAGES) : "",
                           " persistent=", a.persistent, " lazy_rescale=", a.lazy_rescale,
                           " own_diagonal=", a.own_diagonal, " split=", a.split, " rows=", a.rows));

  // Shared memory: Q (span j in rows BM*j..), then rings of K and V tiles (span j in rows BN*j..,
  // or, over pages shorter than the tile, page by page: HopperAttention::k_groups and v_block).
  // Q is a ring too, of two stages where they fit: the next tile's Q lands while this one runs.
  // O goes out through its tile's Q stage, which is released once the TMA store has read it.
  const int q_stages =
      128 * SPANS * (2 * BM + (K_STAGES + STAGES) * BN) <= 226 * 1024 ? 2 : 1;  // 1 KB: barriers
  SmemTile sQ = k.SmemSwizzled(in, SPANS * BM, 64, Swizzle::k128B, q_stages);
  SmemTile sK = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, K_STAGES);
  SmemTile sV = k.SmemSwizzled(in, SPANS * BN, 64, Swizzle::k128B, STAGES);
  Pipeline q_ring(k, q_stages, /*consumers=*/W), k_ring(k, K_STAGES, /*consumers=*/W),
      v_ring(k, STAGES, /*consumers=*/W);

  Value shift = Skv.To(s32) - S.To(s32);   // query i sees keys j <= i + shift
  const int kv_bytes_per_key = D * 2 * 2;  // K and V, 16-bit
  Value group_heads = Max(
      Min(k.I32(attention_sm90::kL2GroupBytes / kv_bytes_per_key) / Max(Skv, k.I32(1)), k.I32(16)),
      k.I32(1));
  // The producer hands each tile number to the consumers in a slot beside its Q stage: slot n % 4
  // for the CTA's n-th tile, written before the stage's full barrier is armed (its arrive
  // releases the write) and read once it completes. The slot's previous tile, n - 4, was read
  // before Q stage n - 3 was released, which the producer waited for. A number past the last
  // tile ends the walk.
  SmemTile tile_slots = k.Smem(i32, 1, 4);
  HopperAttention h{k,        a,      D,      W,      BM,      BN,          SPANS,     STAGES,
                    q_stages, in,     p,      tiles,  m_tiles, tile_count,  sQ,        sK,
                    sV,       q_ring, k_ring, v_ring, shift,   group_heads, tile_slots};
  // The persistent walk over packed sequences deals their tiles by rank (PackedTileOf): B
  // times the longest sequence's tiles, which warp 0 counts before the block's barrier below.
  SmemTile most_tiles;
  if (a.varlen && a.persistent) {
    h.ranked = true;
    most_tiles = k.Smem(i32, 1, 1);
    MostPackedTiles(k, p.cu_seqlens, p.T, p.B, BM, most_tiles);
  }
  // The merge in the last part of each tile (SplitFold), where `fold` is 1: with one consumer
  // warpgroup, whose threads are the part's (with more, the launcher runs attention/combine).
  if (a.split && W == 1) {
    h.fold.on = k.I32Param("fold");
    h.fold.o_parts = k.PtrParam("O_parts", in);
    h.fold.o_out = k.PtrParam("O_out", in);
    h.fold.lse_out = k.PtrParam("lse_out", f32);
    h.fold.counters =
        k.WorkspaceParam("counters", i32, "", int64_t{attention_sm90::kFoldTiles} * 4);
    h.fold.slot = k.Smem(i32, 1, 1);
  }

  // "gather": the producer warpgroup's 128 threads copy K's and V's rows by cp.async.
  h.gathers = GathersPages(a, BN);
  h.v_block = a.page && !h.gathers ? std::min(a.page, BN) : BN;
  h.k_groups = PagedKInGroups(a, BN);
  if (h.gathers) {
    k_ring.FillByThreads(128);
    v_ring.FillByThreads(128);
  }
  k.If(k.ThreadIdx() == 0, [&] {
    for (const TensorMap* map : {&p.tq, &p.tk, &p.tv, &p.to})
      k.TmaPrefetchDescriptor(*map);  // under the setup
    q_ring.Init();
    k_ring.Init();
    v_ring.Init();
  });
  // Split-KV decode is launched while the kernel before it ends (programmatic dependent launch:
  // attention/combine lets the next kernel launch from its start): the set-up above overlaps that
  // kernel's tail, and every thread waits here for its writes before it touches global memory.
  if (a.split && !a.per_sequence()) attention_sm90::PrefetchBeforeTheWait(h);
  if (a.split && a.per_sequence()) attention_sm90::PrefetchTablesBeforeTheWait(h);
  if (a.split) k.WaitForPriorGrids();
  k.SyncThreads();
  if (h.ranked) {
    h.most_tiles = k.Load(most_tiles.At(0, 0));
    h.tile_count = h.most_tiles * p.B * Hq;
  }

  // The register split, within what the block is launched with (k.LaunchRegs() a thread):
  // setmaxnreg only moves registers between its warpgroups
  // (docs/perf/2026-11-28-decode-split-kv.md, "The producer's registers"). The producer takes 24,
  // or 32 with three consumer warpgroups (their share stays whole), or 56 where its threads gather
  // pages (with fewer they spill their addresses), or 40 where a prefill's key tile takes a box a
  // page (pages smaller than the tile: its page numbers spill at 24) and two consumer warpgroups
  // at D = 128 run within 232 (docs/perf/2026-11-28-paged-prefill.md, "Pages of 16: the
  // producer's registers, and a third stage at D = 64"), persistent ones without a mask too
  // (docs/perf/2026-12-03-rows-zeroed-in-a-loop.md, second section; causal persistent ones keep
  // 24 there); the consumers the rest, at most 240.
  // Where two Q stages fit, the persistent CTA without a mask runs its tiles as one stream of
  // steps: a tile's last P V goes out with the next tile's first S, and the tile's epilogue runs
  // in that step's softmax slot, under the other warpgroups' GEMMs
  // (docs/perf/2026-11-24-attention.md, step 12). With one Q stage the next Q can land only once
  // O has left through the stage. Every tile of the stream sees a key tile: a sequence of its own
  // length 0 takes one masked key tile (HopperAttention::streams). Packed sequences run tile by
  // tile, as their PERF entry found best (docs/perf/2026-12-02-packed-tiles-in-l2-order.md).
  h.streams = a.persistent && q_stages == 2 && !a.causal && !a.varlen;
  const int launched = k.LaunchRegs();
  const bool many_boxes =
      a.page && a.page < BN && !a.split && W == 2 && D == 128 && !(a.persistent && a.causal);
  const int producer_regs = h.gathers ? 56 : W == 3 ? 32 : many_boxes ? 40 : 24;
  k.Role({.first_thread = 0, .threads = 128, .max_regs = producer_regs},
         [&](Value t) { attention_sm90::RunProducer(h, t); });
  const int consumer_regs = std::min(240, (launched * (W + 1) - producer_regs) / W / 8 * 8);
  k.Role({.first_thread = 128, .threads = 128 * W, .max_regs = consumer_regs},
         [&](Value t) { attention_sm90::RunConsumers(h, t, h.streams); });
  return k.Build();
}

ExampleFamily AttentionFamily() {
  ExampleFamily f = AttentionFamilyOf(
      "attention/hopper",
      "FlashAttention forward for sm_90a: TMA pipelines for K and V, two consumer warpgroups, "
      "online softmax in registers, P*V with P from registers; head dims 64/128/256, bf16/f16, "
      "causal",
      BuildAttention);
  for (const char* v :
       {"d128", "d128.f16", "d128.bn160", "d128.f16.bn160", "d128.causal", "d128.f16.causal", "d64",
        "d64.f16", "d64.causal", "d64.f16.causal"})  // the entry point's persistent picks
    f.bundled.push_back(absl::StrCat(v, ".persist"));
  for (const char* v : {"d64.causal", "d64.f16.causal"})  // and its pick for short causal tiles
    f.bundled.push_back(absl::StrCat(v, ".wg2"));         // at D = 64
  for (const char* v : {"d64", "d64.f16"})                // and its decode kernels (PlanDecode)
    f.bundled.push_back(absl::StrCat(v, ".wg1.bn128.st4.split"));
  for (const char* v : {"d128", "d128.f16"})
    f.bundled.push_back(absl::StrCat(v, ".wg1.bn128.st3.split"));
  for (const char* v : {"d256", "d256.f16"})
    f.bundled.push_back(absl::StrCat(v, ".wg1.bn64.st2.split"));
  // Each in bf16 and f16: the element type follows the head dimension in the entry point's names
  // (d128.causal.lens, d128.f16.causal.lens).
  for (const char* t : {"", ".f16"}) {
    // Prefill over sequences of their own lengths and paged caches (PlanCachePrefill).
    for (const auto& [d, v] : {std::pair{"d64", ""},
                               {"d64", ".causal"},
                               {"d128", ".bn128"},
                               {"d128", ".causal.persist"},
                               {"d256", ""},
                               {"d256", ".causal"}})
      for (const char* form : {".lens", ".page16", ".page32", ".page64", ".page256"}) {
        // (three K/V stages at D = 64 over pages of 16: PlanCachePrefill)
        const bool st3 = absl::string_view(d) == "d64" && absl::string_view(form) == ".page16";
        f.bundled.push_back(absl::StrCat(d, t, v, st3 ? ".st3" : "", form));
      }
    for (const char* form : {".page16", ".page32", ".page64", ".page256"})  // (no mask, persistent)
      f.bundled.push_back(absl::StrCat("d128", t, ".bn128.persist", form));
    // Paged prefill over a dense copy of its pages: the dense plan's tilings over sequences of
    // their own lengths (PlanAttention; d128.causal.persist, d64.causal, d256 and d256.causal are
    // above).
    for (const char* v : {".bn160.persist", ".persist"})
      f.bundled.push_back(absl::StrCat("d128", t, v, ".lens"));
    for (const char* v : {".persist", ".causal.persist", ".causal.wg2"})
      f.bundled.push_back(absl::StrCat("d64", t, v, ".lens"));
    // Packed sequences (PlanAttention's for varlen).
    for (const char* d : {"d64", "d128", "d256"})
      for (const char* v : {".varlen", ".causal.varlen"})
        f.bundled.push_back(absl::StrCat(d, t, v));
    for (const char* d : {"d64", "d128"})
      for (const char* v : {".persist.varlen", ".causal.persist.varlen"})
        f.bundled.push_back(absl::StrCat(d, t, v));
    // Decode over sequences of their own lengths and paged caches (PlanDecode).
    for (const auto& [d, v] : {std::pair{"d64", ".wg1.bn128.st4"},
                               {"d128", ".wg1.bn128.st3"},
                               {"d256", ".wg1.bn64.st2"}})
      for (const char* form : {".lens", ".page16", ".page32", ".page64", ".page256"})
        f.bundled.push_back(absl::StrCat(d, t, v, form, ".split"));
  }
  // The rows layout [B, S, H, D]: each prefill kernel the entry point picks (PlanAttention).
  for (const char* t : {"", ".f16"}) {
    for (const char* v : {".causal.persist", ".persist", ".bn160.persist"})
      f.bundled.push_back(absl::StrCat("d128", t, v, ".rows"));
    for (const char* v : {".causal.persist", ".persist", ".causal.wg2", ".causal"})
      f.bundled.push_back(absl::StrCat("d64", t, v, ".rows"));
    for (const char* v : {"", ".causal"}) f.bundled.push_back(absl::StrCat("d256", t, v, ".rows"));
  }
  return f;
}

}  // namespace
KILN_EXAMPLE_FAMILY(attention_hopper, AttentionFamily());
}  // namespace kiln::examples
