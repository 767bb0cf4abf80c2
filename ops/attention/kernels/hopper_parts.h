// What the pieces of attention/hopper share (hopper.cc says the algorithm and its constraints):
// the kernel as declared (shape, parameters, the work, shared memory, the rings), the query tile
// a tile number stands for, and the two roles. hopper.cc declares the kernel; hopper_producer.cc
// is the producer warp (hopper_paged.cc its paged cache); hopper_consumer.h the consumer
// warpgroups.
#pragma once

#include "kiln/ops/attention.h"
#include "kiln/pipeline.h"
#include "ops/attention/kernels/common.h"

namespace kiln::examples::attention_sm90 {

// Tile t: its first query row, head and KV head, and the key tiles it sees (all of Skv, or
// causally up to its last row's diagonal; none if that is negative): n_tiles from n_first (0 but
// in a part of a split tile). Its O and lse go to head out_head (q_head but in a split tile).
// skv: its sequence's keys (Skv, or seq_lens[b] where sequences have their own); b: its batch.
// seq0: its sequence's first row in packed tensors (0 but varlen); rows: its sequence's query
// rows (S, or its length varlen: none for a tile number past the sequences' tiles). shift: its
// causal diagonal, query i sees keys j <= i + shift (Skv - S, or skv - S where sequences have
// their own lengths).
struct QueryTile {
  Value m0, q_head, kv_head, n_tiles, n_first, out_head, skv, b, seq0, rows, shift;
};

// Split-KV decode with one consumer warpgroup: the last part of a tile to finish merges the
// tile's parts (where the launcher asks, `on`), so no combine kernel runs. The parts' O rows go to
// o_parts [P * B * Hq, S, D] (lse: AttentionParams::lse); each tile counts its finished parts in
// counters (zeroed once; the merging part puts its counter back to 0); `slot` hands the count to
// the warpgroup.
struct SplitFold {
  Value on, counters, o_parts, o_out, lse_out;
  SmemTile slot;
};
// The tiles a launch may fold (rt::kFoldedTiles): its counters.
inline constexpr int kFoldTiles = static_cast<int>(rt::kFoldedTiles);

// What the kernel declared, as its roles read it.
struct HopperAttention {
  Kernel& k;
  AttentionShape a;  // with the kernel's defaults filled in
  // Head dimension, consumer warpgroups, query and key tile rows, D's 64-column spans, the depth
  // of the K and V rings, and of Q's (2 where they fit, else 1).
  int D, W, BM, BN, SPANS, STAGES, q_stages;
  Scalar in;
  AttentionParams p;
  Value tiles;  // {next tile, CTAs done}: the persistent kernel's counter
  Value m_tiles, tile_count;
  SmemTile sQ, sK, sV;
  Pipeline &q_ring, &k_ring, &v_ring;
  Value shift;          // Skv - S: query i sees keys j <= i + shift (QueryTile::shift)
  Value group_heads;    // causal: the heads whose tiles are dispatched together
  SmemTile tile_slots;  // the tile numbers the producer hands to the consumers (hopper.cc)
  SplitFold fold;       // split only
  bool ranked = false;  // varlen: tiles dealt by rank (PackedTileOf)
  Value most_tiles;     // ranked: the most query tiles of any sequence (MostPackedTiles)
  // The persistent CTA runs its tiles as one stream of steps (hopper.cc), which needs a key tile
  // in every tile it runs: a sequence of its own length 0 takes one, all of it masked.
  bool streams = false;
  bool gathers = false;  // GathersPages: K and V rows by the producer's threads' cp.async
  // V's stage holds its key tile in blocks of v_block keys, each block's spans one after the
  // other ([block][span][v_block rows][64]): BN (the dense layout, [span][BN rows]), or a page
  // where TMA boxes bring pages shorter than the key tile, so that one box brings a page's every
  // span (docs/perf/2026-11-28-paged-prefill.md, "V a box a page").
  int v_block = 0;
  bool k_groups = false;  // K's stage in 8-row groups of every span (PagedKInGroups)

  // The tile number t stands for (hopper.cc: the order of the work).
  QueryTile TileOf(Value t) const;
  QueryTile PackedTileOf(Value t) const;  // varlen
};

// The producer warpgroup's role: thread `t` of 128 (one or two threads issue TMA boxes; where
// the kernel gathers pages, all 128 copy rows).
void RunProducer(HopperAttention& h, const Value& t);
// A query tile's key tiles from a paged cache (hopper_paged.cc): TMA boxes a page, issued by
// thread 0 (and, `rings_apart`, V's by thread 32), or copied by all 128 producer threads.
void PagedTiles(HopperAttention& h, const QueryTile& q, Pipeline::Cursor& k_at,
                Pipeline::Cursor& v_at, const Value& t, bool rings_apart);
void GatheredTiles(HopperAttention& h, const QueryTile& q, Pipeline::Cursor& k_at,
                   Pipeline::Cursor& v_at, const Value& t);
// Split-KV over dense K and V, before griddepcontrol.wait: thread 0 of a part longer than its ring
// asks for the ring's first K and V tiles into L2.
void PrefetchBeforeTheWait(HopperAttention& h);
// Split-KV over sequences of their own lengths, before the wait: thread 0 asks for the part's
// seq_lens entry and first block-table entries into L2.
void PrefetchTablesBeforeTheWait(HopperAttention& h);
// The consumer warpgroups' role: thread `t` of 128 * W.
void RunConsumers(HopperAttention& h, const Value& t, bool stream_tiles);

}  // namespace kiln::examples::attention_sm90
