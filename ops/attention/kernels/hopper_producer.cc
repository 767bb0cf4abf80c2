// attention/hopper's producer warp (hopper.cc says the algorithm): one thread (two, or all 128
// of the warpgroup where they copy pages themselves: RunProducer) takes the CTA's tiles (the next
// from the persistent kernel's counter, or the CTA's own), hands each tile number to the consumers
// beside its Q stage, loads that Q once, then K and V tile by tile, each into its own ring so S = Q
// K^T can start while V is still in flight.
#include <algorithm>
#include <vector>

#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples::attention_sm90 {
namespace {

// A paged key tile is a box per span and per page (or the whole tile, in pages of BN or more),
// each at its page's cache rows. The first key of each box of the tile at n0; past the sequence's
// last key, that key (its page is valid, and the consumers mask those keys).
std::vector<Value> BoxKeys(HopperAttention& h, const QueryTile& q, const Value& n0) {
  const int rows = std::min(h.a.page, h.BN);
  Value last = Max(q.skv, h.k.I32(1)) - 1;  // (i32 compares unsigned: skv - 1 would wrap at 0)
  std::vector<Value> keys;
  for (int r = 0; r < h.BN; r += rows) keys.push_back(Min(n0 + r, last));
  return keys;
}

// The block-table entries of those keys' pages, each load issued here and first used a key tile
// later (PagedTiles), so that its latency passes under the waits for ring stages.
std::vector<Value> PageEntries(HopperAttention& h, const QueryTile& q, const Value& n0) {
  std::vector<Value> entries;
  for (const Value& key : BoxKeys(h, q, n0))
    entries.push_back(h.k.Load(h.p.block_table + (q.b * h.p.max_pages + key / h.a.page).To(i64)));
  return entries;
}

// The boxes of one ring's key tile, `slots` the cache rows of its boxes.
std::vector<TmaCopy> PagedCopies(HopperAttention& h, const TensorMap& map, const SmemTile& ring,
                                 const QueryTile& q, const std::vector<Value>& slots) {
  const int rows = std::min(h.a.page, h.BN);
  std::vector<TmaCopy> copies;
  for (size_t i = 0; i < slots.size(); ++i)
    for (int span = 0; span < h.SPANS; ++span)
      copies.push_back({&map,
                        ring.Rows(span * h.BN + static_cast<int>(i) * rows, rows),
                        {0, slots[i], span, q.kv_head % h.p.Hkv}});
  return copies;
}

// A query tile's paged K and V tiles: each key tile's block-table entries loaded a tile ahead
// (once for K and V), the tile's own turned into cache rows when its boxes go out
// (docs/perf/2026-11-28-paged-prefill.md).
void PagedTiles(HopperAttention& h, const QueryTile& q, Pipeline::Cursor& k_at,
                Pipeline::Cursor& v_at, const Value& t, bool rings_apart) {
  Kernel& k = h.k;
  const std::vector<Value> first = PageEntries(h, q, q.n_first * h.BN);
  Regs ahead = k.Registers(Type::Of(i32), static_cast<int>(first.size()));
  for (size_t i = 0; i < first.size(); ++i) ahead[i] = first[i];
  k.For(0, q.n_tiles, 1, [&](Value j) {
    Value n0 = (q.n_first + j) * h.BN;
    const std::vector<Value> keys = BoxKeys(h, q, n0);
    std::vector<Value> slots;
    for (size_t i = 0; i < keys.size(); ++i)
      slots.push_back(ahead[i] * h.a.page + keys[i] % h.a.page);
    const std::vector<Value> next = PageEntries(h, q, n0 + h.BN);  // (clamped: always valid)
    for (size_t i = 0; i < next.size(); ++i) ahead[i] = next[i];
    if (!rings_apart) {
      h.k_ring.Produce(k_at, PagedCopies(h, h.p.tk, h.sK, q, slots));
      h.v_ring.Produce(v_at, PagedCopies(h, h.p.tv, h.sV, q, slots));
      return;
    }
    k.If(t == 0, [&] { h.k_ring.Produce(k_at, PagedCopies(h, h.p.tk, h.sK, q, slots)); });
    k.If(t == 32, [&] { h.v_ring.Produce(v_at, PagedCopies(h, h.p.tv, h.sV, q, slots)); });
  });
}

// Pages of 16 gathered (HopperAttention::gathers): the producer warpgroup's 128 threads copy the
// rows by cp.async, 16 bytes each, as FlashAttention-3 and FlashInfer copy small pages, instead
// of a TMA box a page and 64 columns. It measured level with the boxes, so it is an option, not
// the plan's pick (docs/perf/2026-11-28-decode-split-kv.md, "Pages of 16 gathered by threads"). A
// row's chunks go to consecutive threads, so a warp reads whole rows; the rows of one pass of the
// 128 threads lie in one page. Lane l holds the block-table entry of the key tile's page l % pages,
// loaded a tile ahead and passed on by shuffles. Rows past the sequence's last key copy nothing and
// land as zeros (the consumers mask their scores).
void GatheredTiles(HopperAttention& h, const QueryTile& q, Pipeline::Cursor& k_at,
                   Pipeline::Cursor& v_at, const Value& t) {
  Kernel& k = h.k;
  const int page = h.a.page, pages = h.BN / page, chunks = h.D / 8, per_pass = 128 / chunks;
  Value chunk = t % chunks, first_row = t / chunks;
  Value last_page = (Max(q.skv, h.k.I32(1)) - 1) / page;  // (as BoxKeys' last key)
  // In elements: a cache row (every KV head's), and this thread's 16 bytes of its first row of a
  // page. A page's rows after that are whole cache rows on.
  Value row = h.p.Hkv * h.D;
  Value mine_in_page = first_row % page * row + (q.kv_head % h.p.Hkv) * h.D + chunk * 8;
  Value pass_step = (row * per_pass).To(i64);
  auto entry = [&](const Value& n0) {  // this lane's page of the tile at n0 (clamped: valid)
    Value at = Min(n0 / page + t % 32 % pages, last_page);
    return k.Load(h.p.block_table + (q.b * h.p.max_pages + at).To(i64));
  };
  Regs ahead = k.Registers(Type::Of(i32), 1);
  ahead[0] = entry(q.n_first * h.BN);
  k.For(0, q.n_tiles, 1, [&](Value j) {
    Value n0 = (q.n_first + j) * h.BN;
    Value entries = ahead[0];
    ahead[0] = entry(n0 + h.BN);
    Value first_key = n0 + first_row;  // this thread's rows copy while their keys are < skv
    auto gather = [&](const Value& cache, const SmemTile& ring) {
      return [&, cache](Value stage) {
        SmemTile dst = ring.Stage(stage);
        for (int pg = 0; pg < pages; ++pg) {
          // The page's first row for this thread: its entry from lane pg, once for its passes.
          Value src =
              cache + ShflIdx(entries, pg).To(i64) * (row * page).To(i64) + mine_in_page.To(i64);
          for (int r = 0; r < page; r += per_pass) {
            const int tile_row = pg * page + r;
            k.CpAsync(dst, chunk / 8 * h.BN + first_row + tile_row, chunk % 8 * 8,
                      r ? src + pass_step * (r / per_pass) : src, 16, AmpereOps::CacheAt::kL2, 0,
                      Select(first_key + tile_row < q.skv, k.I32(16), k.I32(0)));
          }
        }
      };
    };
    h.k_ring.ProduceByThreads(k_at, gather(h.p.k_ptr, h.sK));
    h.v_ring.ProduceByThreads(v_at, gather(h.p.v_ptr, h.sV));
  });
}

}  // namespace

// A prefetch gives no thread a value, and L2 is where the previous kernel's writes land, so it
// cannot read around them. Where the ring holds the whole part it measured no faster or slower
// (docs/perf/2026-11-28-decode-split-kv.md, "Timed with cold caches"). Kernels with lengths or a
// block table (global memory) cannot place their tiles before the wait.
void PrefetchBeforeTheWait(HopperAttention& h) {
  Kernel& k = h.k;
  k.If(k.ThreadIdx() == 0, [&] {
    QueryTile q = h.TileOf(k.BlockIdx(0));
    k.If(q.n_tiles > h.STAGES, [&] {
      for (int s = 0; s < h.STAGES; ++s) {
        Value n0 = (q.n_first + s) * h.BN;
        k.TmaPrefetchL2(h.p.tk, h.p.Box(q.seq0 + n0, 0, q.kv_head, h.p.Hkv));
        k.TmaPrefetchL2(h.p.tv, h.p.Box(q.seq0 + n0, 0, q.kv_head, h.p.Hkv));
      }
    });
  });
}

// A split part over sequences of their own lengths (lens, pageN) learns its keys from seq_lens,
// and then its pages from the block table, two loads in a row at its start. Neither may be read
// before the wait, but both may be asked of L2: seq_lens[b], and the table entries of the part's
// first key tiles, placed as if its sequence had Skv keys (where it has fewer, a wasted line).
void PrefetchTablesBeforeTheWait(HopperAttention& h) {
  Kernel& k = h.k;
  const AttentionParams& p = h.p;
  k.If(k.ThreadIdx() == 0, [&] {
    Value whole = h.m_tiles * p.Hq * p.B, t = k.BlockIdx(0);
    Value part = t / whole, b = t % whole / h.m_tiles / p.Hq;
    PrefetchL2(p.seq_lens + b.To(i64));
    if (!h.a.page) return;
    Value n_tiles = (p.Skv + (h.BN - 1)) / h.BN, per = (n_tiles + (p.P - 1)) / p.P;
    Value first = Min(part * per, n_tiles) * h.BN / h.a.page;
    Value row = p.block_table + (b * p.max_pages).To(i64);
    const int line = 32;  // table entries a 128-byte line
    PrefetchL2(row + Min(first, p.max_pages - 1).To(i64));
    PrefetchL2(row + Min(first + line, p.max_pages - 1).To(i64));
  });
}

void RunProducer(HopperAttention& h, const Value& t) {
  Kernel& k = h.k;
  const AttentionShape& a = h.a;
  const Value& tiles = h.tiles;
  const Value& tile_count = h.tile_count;
  // Pages much smaller than a key tile make many boxes a stage (16 or more: pages of 16 at D = 128
  // and 256): thread 0 issues K's and thread 32, of the next warp, which runs beside it, V's
  // (docs/perf/2026-11-28-decode-split-kv.md, "K and V issued by two warps"); thread 0 alone
  // publishes the tile and loads Q. Paged kernels run a CTA per tile: both walk the same one.
  // Where the warpgroup gathers pages, all 128 threads walk it (t >= 0 always holds).
  const bool rings_apart = a.page && h.SPANS * (h.BN / std::min(a.page, h.BN)) >= 16;
  k.If(h.gathers     ? t >= 0
       : rings_apart ? (t == 0) | (t == 32)
                     : t == 0,
       [&] {
         Pipeline::Cursor q_at = h.q_ring.Start(), k_at = h.k_ring.Start(), v_at = h.v_ring.Start();
         Regs n = k.Registers(Type::Of(i32), 1), now = k.Registers(Type::Of(i32), 1);
         k.While(
             [&] {
               Value next = a.persistent ? AtomicAdd(tiles, 1)
                                         : Select(n[0] == 0, k.BlockIdx(0), tile_count);
               auto publish = [&] {
                 k.Store(h.tile_slots.At(0, n[0] % 4), next);
                 QueryTile q = h.TileOf(
                     Select(next < tile_count, next, k.I32(0)));  // the end: a Q nobody reads
                 h.q_ring.Produce(q_at,
                                  {{&h.p.tq, h.sQ, h.p.Box(q.seq0 + q.m0, 0, q.q_head, h.p.Hq)}});
                 // A CTA per tile waits for its Q from DRAM at its start: bring the Q of the tile a
                 // wave later (an H100's SMs' worth of CTAs ahead) into L2 meanwhile.
                 const int wave = 132;
                 if (!a.persistent && !a.varlen)
                   k.If(next + wave < tile_count, [&] {
                     QueryTile ahead = h.TileOf(next + wave);
                     k.TmaPrefetchL2(h.p.tq,
                                     h.p.Box(ahead.seq0 + ahead.m0, 0, ahead.q_head, h.p.Hq));
                   });
               };
               if (a.persistent)
                 publish();
               else  // a CTA per tile: its consumers stop after one
                 k.If((next < tile_count) & (t == 0), publish);
               n[0] = n[0] + 1;
               now[0] = next;
               return next < tile_count;
             },
             [&] {
               QueryTile q = h.TileOf(now[0]);
               if (h.gathers) return GatheredTiles(h, q, k_at, v_at, t);
               if (a.page) return PagedTiles(h, q, k_at, v_at, t, rings_apart);
               k.For(0, q.n_tiles, 1, [&](Value j) {
                 Value n0 = (q.n_first + j) * h.BN;
                 h.k_ring.Produce(k_at,
                                  {{&h.p.tk, h.sK, h.p.Box(q.seq0 + n0, 0, q.kv_head, h.p.Hkv)}});
                 h.v_ring.Produce(v_at,
                                  {{&h.p.tv, h.sV, h.p.Box(q.seq0 + n0, 0, q.kv_head, h.p.Hkv)}});
               });
             });
         // Split-KV: attention/combine may launch once every part has issued its last loads (it
         // waits for the parts' writes itself).
         if (a.split) k.LaunchDependents();
         if (a.persistent)  // every CTA has taken its last number: the last one resets the counter
           k.If(AtomicAdd(tiles + 1, 1) == k.GridDim(0) - 1, [&] {
             k.Store(tiles, k.I32(0));
             k.Store(tiles + 1, k.I32(0));
           });
       });
}

}  // namespace kiln::examples::attention_sm90
