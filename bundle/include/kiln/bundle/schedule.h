// Tile orders built on the host and handed to persistent kernels as a table.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"

namespace kiln::rt {

// Walks a Hilbert curve over a tiles_m x tiles_n grid of C tiles and deals the tiles round-robin
// to `groups` persistent CTA groups, so that tiles running at the same time are neighbours on the
// curve (and share rows of A and columns of B in L2). Returns groups x slots entries,
// (m << 16 | n) per tile and -1 after each group's last; fails when a group needs more than
// `slots` entries.
absl::StatusOr<std::vector<int32_t>> HilbertSchedule(int64_t tiles_m, int64_t tiles_n, int groups,
                                                     int slots);

// A work table: the tiles' k-tiles dealt as units of (tile, k range), so that a tile's K can be
// split over several CTA groups (split-K, stream-K). A header of kWorkWords words whose first is
// the slots in each group's row (its most units + 1, at most `slots`), then the groups' rows,
// each slot kWorkWords words:
//   [0] m index << 16 | n index, -1 after the group's last unit;
//   [1] first k-tile << 16 | k-tile past the last;
//   [2] -1 for a whole tile, else the tile's first partial slot: its parts own slots
//       [2] .. [2] + parts - 1 (and the tile's counter is slot [2]'s);
//   [3] part << 16 | parts (parts in k order: part 0 holds the lowest k).
// `split` >= 1 cuts each tile's K into min(split, k_tiles) near-equal parts (split-K; 1 keeps tiles
// whole), dealt round-robin in Hilbert order with a tile's parts on neighbouring groups. `split`
// 0 is stream-K: whole tiles dealt round-robin while they fill every group; the rest (the last
// wave, with one full wave before it, so that no group's share is under a tile) as one run of
// k-tiles cut evenly among the groups, each group's run split where tiles end (where every tile
// streams and the rows of tiles divide the groups, each row over its own groups, so that one
// column's tiles run side by side at the same k and read their columns of B once). Either way a
// tile's parts are summed in a fixed tree of up to kPartsSummedAtOnce children a node, each node
// by whichever child finishes last: deterministic. Stream-K cuts a tile into at most
// kMostStreamedParts parts (and shares of 4 k-tiles at least), since each level of the tree is a
// round trip of the last part's.
inline constexpr int kWorkWords = 4;
inline constexpr int64_t kMostStreamedParts = 16, kMostStreamedPartsOverLongK = 64;
inline constexpr int kPartsSummedAtOnce = 4;
// The partials the part that ends last reads, one after another, plus the levels it counts at
// after the first: what a split tile's sum costs past its mainloop, in partial round trips
// (parts - 1 up to kPartsSummedAtOnce parts).
int64_t PartialRoundTrips(int64_t parts);
struct WorkTable {
  std::vector<int32_t> words;  // the header, then groups x row slots x kWorkWords
  // A work table's group g, slot u.
  const int32_t* Entry(int g, int u) const {
    return &words[(1 + static_cast<size_t>(g) * words[0] + u) * kWorkWords];
  }
  int64_t partials = 0;  // partial slots used (workspace sizes are per slot)
};
absl::StatusOr<WorkTable> WorkSchedule(int64_t tiles_m, int64_t tiles_n, int64_t k_tiles,
                                       int64_t split, int groups, int slots);
// How many groups stream-K cuts a run of `tiles` tiles of `k_tiles` k-tiles among (at most
// `groups`): shares of 4 k-tiles at least, and at most kMostStreamedParts parts a tile
// (kMostStreamedPartsOverLongK where at most 4 tiles share 1024 k-tiles or more). The compute
// model (gemm_choice.cc) weighs stream-K by the same count.
int64_t StreamSharers(int64_t tiles, int64_t k_tiles, int64_t groups);

// What a schedule table parameter holds for a launch's integers: a tile table (HilbertSchedule)
// or, when the parameter has k_tiles and a split symbol, a work table.
absl::StatusOr<WorkTable> BuildScheduleTable(const ScheduleTableParam& t, const Symbols& symbols);

}  // namespace kiln::rt
