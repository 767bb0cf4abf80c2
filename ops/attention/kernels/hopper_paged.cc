// attention/hopper's producer over a paged cache (hopper_producer.cc walks the tiles): each key
// tile's pages through their block-table entries, as TMA boxes or (the gather option) copied by
// the producer warpgroup's threads, and the table entries asked of L2 before the wait.
#include <algorithm>
#include <vector>

#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples::attention_sm90 {
namespace {

// A paged key tile is a box a page (of every span, or of one span a box where the ring holds it
// span by span), or the whole tile in pages of BN or more, each at its page's cache rows. The first
// key of each box of the tile at n0; past the sequence's last key, that key (its page is valid, and
// the consumers mask those keys).
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

// The boxes of one ring's key tile, `slots` the cache rows of its boxes: a box a page and span
// where the ring holds the tile span by span ([span][BN rows]), a box a page where it holds it
// page by page ([page][span][page rows]: V in pages shorter than the key tile) or in 8-row groups
// of every span (K there: GroupedPagesMap's coordinates); common.cc's maps have the boxes' spans.
std::vector<TmaCopy> PagedCopies(HopperAttention& h, const TensorMap& map, const SmemTile& ring,
                                 const QueryTile& q, const std::vector<Value>& slots,
                                 bool page_by_page, bool in_groups = false) {
  const int rows = std::min(h.a.page, h.BN);
  std::vector<TmaCopy> copies;
  for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
    if (in_groups) {  // (a clamped box's slot may sit inside a group: its keys are masked)
      copies.push_back({&map,
                        ring.Rows(i * h.SPANS * rows, h.SPANS * rows),
                        {0, 0, 0, slots[i] / 8, q.kv_head % h.p.Hkv}});
      continue;
    }
    if (page_by_page) {
      copies.push_back({&map,
                        ring.Rows(i * h.SPANS * rows, h.SPANS * rows),
                        {0, slots[i], 0, q.kv_head % h.p.Hkv}});
      continue;
    }
    for (int span = 0; span < h.SPANS; ++span)
      copies.push_back({&map,
                        ring.Rows(span * h.BN + i * rows, rows),
                        {0, slots[i], span, q.kv_head % h.p.Hkv}});
  }
  return copies;
}

}  // namespace

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
    const bool v_pages = h.v_block < h.BN;
    if (!rings_apart) {
      h.k_ring.Produce(k_at, PagedCopies(h, h.p.tk, h.sK, q, slots, false, h.k_groups));
      h.v_ring.Produce(v_at, PagedCopies(h, h.p.tv, h.sV, q, slots, v_pages));
      return;
    }
    k.If(t == 0, [&] {
      h.k_ring.Produce(k_at, PagedCopies(h, h.p.tk, h.sK, q, slots, false, h.k_groups));
    });
    k.If(t == 32, [&] { h.v_ring.Produce(v_at, PagedCopies(h, h.p.tv, h.sV, q, slots, v_pages)); });
  });
}

// Pages of 16 gathered (HopperAttention::gathers): the producer warpgroup's 128 threads copy the
// rows by cp.async, 16 bytes each, as FlashAttention-3 and FlashInfer copy small pages, instead
// of a TMA box a page and 64 columns: an option, not the plan's pick, which keeps the boxes
// (docs/perf/2026-11-28-decode-split-kv.md, "Pages of 16 gathered by threads"). A row's chunks go
// to consecutive threads, so a warp reads whole rows; the rows of one pass of the 128 threads lie
// in one page. Lane l holds the block-table entry of the key tile's page l % pages, loaded a tile
// ahead and passed on by shuffles. Rows past the sequence's last key copy nothing and land as zeros
// (the consumers mask their scores).
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
      return [&, cache, ring](Value stage) {
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

}  // namespace kiln::examples::attention_sm90
