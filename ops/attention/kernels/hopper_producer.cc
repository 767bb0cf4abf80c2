// attention/hopper's producer warp (hopper.cc says the algorithm): one thread (two, or all 128
// of the warpgroup where they copy pages themselves: RunProducer) takes the CTA's tiles (the next
// from the persistent kernel's counter, or the CTA's own), hands each tile number to the consumers
// beside its Q stage, loads that Q once, then K and V tile by tile, each into its own ring so S = Q
// K^T can start while V is still in flight (from a paged cache: hopper_paged.cc).
#include <algorithm>
#include <functional>

#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples::attention_sm90 {

// A prefetch gives no thread a value, and L2 is where the previous kernel's writes land, so it
// cannot read around them. Only a part longer than its ring prefetches: where the ring holds the
// whole part there is nothing to gain (docs/perf/2026-11-28-decode-split-kv.md, "Timed with cold
// caches"). Kernels with lengths or a block table (global memory) cannot place their tiles before
// the wait: PrefetchTablesBeforeTheWait.
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

void RunProducer(HopperAttention& h, const Value& t) {
  Kernel& k = h.k;
  const AttentionShape& a = h.a;
  const Value& tiles = h.tiles;
  const Value& tile_count = h.tile_count;
  // Where a key tile's pages times D's spans reach 16 (pages of 16 at D = 128 and 256), thread 0
  // issues K's boxes and thread 32, of the next warp, which runs beside it, V's
  // (docs/perf/2026-11-28-decode-split-kv.md, "K and V issued by two warps"; the rule stays with
  // K a box a page: docs/perf/2026-11-28-paged-prefill.md, "K a box a page"); thread 0 alone
  // publishes the tile and loads Q. A CTA per tile: both walk the same one; persistent, thread 0
  // takes the tiles and thread 32 reads each from its slot once its Q stage is full, as the
  // consumers do (the slot's write is released by the stage's arrive). Where the warpgroup gathers
  // pages, all 128 threads walk it (t >= 0 always holds).
  const bool rings_apart = a.page && h.SPANS * (h.BN / std::min(a.page, h.BN)) >= 16;
  const bool follows = a.persistent && rings_apart;  // thread 32 follows thread 0's tiles
  k.If(h.gathers     ? t >= 0
       : rings_apart ? (t == 0) | (t == 32)
                     : t == 0,
       [&] {
         Pipeline::Cursor q_at = h.q_ring.Start(), k_at = h.k_ring.Start(), v_at = h.v_ring.Start();
         Regs n = k.Registers(Type::Of(i32), 1), now = k.Registers(Type::Of(i32), 1);
         // What only thread 0 does where thread 32 walks the tiles too.
         auto by_thread_0 = [&](const std::function<void()>& body) {
           if (follows)
             k.If(t == 0, body);
           else
             body();
         };
         Regs taken;  // (following: the tile thread 32 read)
         if (follows) taken = k.Registers(Type::Of(i32), 1);
         // The counter's next number; dealt by rank, the numbers of packed sequences' missing
         // ranks are passed over (they see no key, and hold no row).
         auto take = [&]() -> Value {
           if (!h.ranked) return AtomicAdd(tiles, 1);
           Regs pick = k.Registers(Type::Of(i32), 1);
           pick[0] = AtomicAdd(tiles, 1);
           k.While([&] { return (pick[0] < tile_count) & (h.TileOf(pick[0]).n_tiles == 0); },
                   [&] { pick[0] = AtomicAdd(tiles, 1); });
           return pick[0].Load();
         };
         k.While(
             [&] {
               if (follows) {
                 k.If(t == 0, [&] { taken[0] = AtomicAdd(tiles, 1); });
                 k.If(t != 0, [&] {
                   h.q_ring.Acquire(q_at);
                   taken[0] = k.Load(h.tile_slots.At(0, n[0] % 4));
                 });
               }
               Value next = follows        ? taken[0].Load()
                            : a.persistent ? take()
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
                 by_thread_0(publish);
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
         // Every CTA has taken its last number: the last one resets the counter. The takes are
         // relaxed atomics, so a fence on each side of the done count orders every CTA's last
         // take before the reset (fence-fence synchronisation: the resetter's count observes the
         // others'); without them the PTX model lets a straggler's take land after the reset.
         auto reset = [&] {
           k.FenceGpu();
           k.If(AtomicAdd(tiles + 1, 1) == k.GridDim(0) - 1, [&] {
             k.FenceGpu();
             k.Store(tiles, k.I32(0));
             k.Store(tiles + 1, k.I32(0));
           });
         };
         if (a.persistent) by_thread_0(reset);
       });
}

}  // namespace kiln::examples::attention_sm90
