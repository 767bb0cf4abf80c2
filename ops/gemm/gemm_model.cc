// The choice rule's models (gemm_model.h; docs/GEMM_CHOICE.md derives them).
#include "ops/gemm/gemm_model.h"

#include <algorithm>
#include <cmath>

#include "kiln/bundle/schedule.h"

namespace kiln::rt {

std::vector<Candidate> CandidatesOf(const GemmRules& rules) {
  std::vector<Candidate> c;
  for (const TileWeights& w : rules.tiles) c.push_back({FindSm90Tile(w.kernel), &w});
  return c;
}

int64_t TilesOf(const Sm90Tile& t, const GemmSize& s) {
  return ((s.m + t.tile_m() - 1) / t.tile_m()) * ((s.n + t.tile_n() - 1) / t.tile_n());
}

bool ReadsMnMajor(const Sm90Tile& t) { return t.tile_n() % 64 == 0 && t.tile_m() % 64 == 0; }

// Splits past 4 only where the tiles in 4 parts would leave over half the CTAs idle, in parts of 4
// k-tiles or more, and for tiles of 128x96 or less: there the last part's serial sum of the
// others' partials costs less than the idle CTAs (docs/perf/2026-11-26-few-tiles-long-k.md).
bool Weighed(const Candidate& c, const GemmSize& s, int split) {
  if (split > 4 && (c.tile_m() * c.tile_n() > 128 * 96 ||
                    2 * 4 * TilesOf(*c.tile, s) > c.in_flight() || 4 * split > (s.k + 63) / 64))
    return false;
  const int max_parts = c.weights->max_parts;
  return max_parts == 0 || (split >= 1 && split <= max_parts);
}

// Stream-K where the tiles fill fewer than two waves streams every tile in two or three parts;
// only the clustered tiles do that well (docs/perf/2026-11-25-stream-k-every-tile-streams.md).
bool StreamsWell(const Candidate& c, const GemmSize& s) {
  const bool clustered = c.tile->cluster > 1;
  return clustered || TilesOf(*c.tile, s) >= 2 * c.in_flight();
}

// Useful work over the busiest group's time: tiles padded past M and N are lost, and so are the
// in-flight slots the busiest group leaves the others idle for, and split tiles' partial round
// trips (partial_cost k-tiles each, PartialRoundTrips of them a tile:
// docs/perf/2026-11-23-split-k-and-stream-k.md,
// docs/perf/2026-11-25-split-partials-64-row-tile.md,
// docs/perf/2026-12-03-split-partials-in-a-tree.md).
double Efficiency(const GemmModel& m, const Candidate& c, const GemmSize& s, int split,
                  bool aligned_rows) {
  const int64_t tiles_m = (s.m + c.tile_m() - 1) / c.tile_m(),
                tiles_n = (s.n + c.tile_n() - 1) / c.tile_n();
  const int64_t tiles = tiles_m * tiles_n, k_tiles = (s.k + 63) / 64;
  const double padding =
      static_cast<double>(s.m) / (tiles_m * c.tile_m()) * s.n / (tiles_n * c.tile_n());
  const double useful = static_cast<double>(tiles * k_tiles) / c.in_flight();  // per group
  double busiest;  // the busiest group's time in k-tiles
  if (split == 0 && tiles >= c.in_flight()) {
    // Stream-K: even shares, a group's costing up to two partials.
    busiest = tiles % c.in_flight() == 0 ? useful : std::ceil(useful) + 2 * m.partial_cost;
  } else if (split == 0) {
    // Fewer tiles than groups: every tile cut among about sharers / tiles groups (StreamSharers),
    // its last part reading the others' partials in their tree
    // (docs/perf/2026-11-26-stream-k-of-few-tiles.md).
    const int64_t run = tiles * k_tiles, sharers = StreamSharers(tiles, k_tiles, c.in_flight());
    const int64_t pieces = std::max<int64_t>(2, (sharers + tiles - 1) / tiles);
    busiest = std::ceil(static_cast<double>(run) / sharers) +
              m.partial_cost * (PartialRoundTrips(pieces) + 1);
  } else {
    const int64_t parts = std::min<int64_t>(split, k_tiles), units = tiles * parts;
    const int64_t waves = (units + c.in_flight() - 1) / c.in_flight();
    busiest = waves * (std::ceil(static_cast<double>(k_tiles) / parts) +
                       m.partial_cost * PartialRoundTrips(parts));
  }
  const TileWeights& w = *c.weights;
  return padding * useful / busiest * (aligned_rows ? w.speed : w.speed_unaligned);
}

// A CTA streams B at R / (active CTAs + q), q = R * latency / (bytes its ring keeps in flight):
// Little's law with a latency that grows as the CTAs' loads queue at the memory. All of B comes no
// faster than the cap; the busiest CTA's bytes set the time; each wave of split tiles adds a
// partial round trip, and the partials' bytes move at R
// (docs/perf/2026-11-24-m64-64-row-tile-bandwidth-model.md, docs/perf/2026-11-25-partials-bytes.md,
// docs/perf/2026-11-25-narrow-tiles-m64.md). Stream-K is not weighed here (same entries).
double StreamUs(const GemmModel& m, const Candidate& c, const GemmSize& s, int split) {
  const int64_t tiles = TilesOf(*c.tile, s);
  const int64_t k_tiles = (s.k + 63) / 64;
  const int64_t parts = std::min<int64_t>(split, k_tiles), units = tiles * parts;
  const int64_t waves = (units + c.in_flight() - 1) / c.in_flight();
  const int64_t busiest = waves * ((k_tiles + parts - 1) / parts);  // k-tiles of the busiest CTA
  const int64_t active = std::min<int64_t>(units, c.in_flight());   // CTAs streaming
  // The CTAs of one column of tiles read the same B side by side (the schedule keeps them
  // together): the memory streams it once for them, L2 serves the rest.
  const int64_t tiles_m = (s.m + c.tile_m() - 1) / c.tile_m();
  const int64_t streams = (active + tiles_m - 1) / tiles_m;
  const int64_t partials = parts > 1 ? waves : 0;  // round trips
  // Every part but the last writes its rows of the tile in f32; the last reads them back.
  const double partial_bytes = static_cast<double>(tiles) * (parts - 1) *
                               std::min<int64_t>(c.tile_m(), s.m) * c.tile_n() * 4 * 2;
  const double queue = m.stream_bytes_per_us * m.idle_latency_us / c.tile->ring_b_bytes();
  const double busiest_bytes = static_cast<double>(busiest) * c.tile_n() * 64 * 2;
  const double all_bytes = static_cast<double>(s.n) * s.k * 2;
  return m.launch_us +
         std::max(busiest_bytes * (streams + queue) / m.stream_bytes_per_us,
                  all_bytes / m.stream_cap_bytes_per_us) +
         partials * m.partial_us + partial_bytes / m.stream_bytes_per_us;
}

}  // namespace kiln::rt
