// attention/hopper's producer warp (hopper.cc says the algorithm): one thread takes the CTA's
// tiles (the next from the persistent kernel's counter, or the CTA's own), hands each tile number
// to the consumers beside its Q stage, loads that Q once, then K and V tile by tile, each into its
// own ring so S = Q K^T can start while V is still in flight.
#include "ops/attention/kernels/hopper_parts.h"

namespace kiln::examples::attention_sm90 {

void RunProducer(HopperAttention& h, const Value& t) {
  Kernel& k = h.k;
  const AttentionShape& a = h.a;
  const Value& tiles = h.tiles;
  const Value& tile_count = h.tile_count;
  k.If(t == 0, [&] {
    Pipeline::Cursor q_at = h.q_ring.Start(), k_at = h.k_ring.Start(), v_at = h.v_ring.Start();
    Regs n = k.Registers(Type::Of(i32), 1), now = k.Registers(Type::Of(i32), 1);
    k.While(
        [&] {
          Value next =
              a.persistent ? AtomicAdd(tiles, 1) : Select(n[0] == 0, k.BlockIdx(0), tile_count);
          auto publish = [&] {
            k.Store(h.tile_slots.At(0, n[0] % 4), next);
            QueryTile q =
                h.TileOf(Select(next < tile_count, next, k.I32(0)));  // the end: a Q nobody reads
            h.q_ring.Produce(q_at, {{&h.p.tq, h.sQ, {0, q.m0, 0, q.q_head}}});
            // A CTA per tile waits for its Q from DRAM at its start: bring the Q of the tile a
            // wave later (an H100's SMs' worth of CTAs ahead) into L2 meanwhile.
            const int wave = 132;
            if (!a.persistent)
              k.If(next + wave < tile_count, [&] {
                QueryTile ahead = h.TileOf(next + wave);
                k.TmaPrefetchL2(h.p.tq, {0, ahead.m0, 0, ahead.q_head});
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
          QueryTile q = h.TileOf(now[0]);
          k.For(0, q.n_tiles, 1, [&](Value j) {
            Value n0 = (q.n_first + j) * h.BN;
            h.k_ring.Produce(k_at, {{&h.p.tk, h.sK, {0, n0, 0, q.kv_head}}});
            h.v_ring.Produce(v_at, {{&h.p.tv, h.sV, {0, n0, 0, q.kv_head}}});
          });
        });
    if (a.persistent)  // every CTA has taken its last number: the last one resets the counter
      k.If(AtomicAdd(tiles + 1, 1) == k.GridDim(0) - 1, [&] {
        k.Store(tiles, k.I32(0));
        k.Store(tiles + 1, k.I32(0));
      });
  });
}

}  // namespace kiln::examples::attention_sm90
