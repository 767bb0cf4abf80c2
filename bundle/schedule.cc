#include "kiln/bundle/schedule.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace kiln::rt {
namespace {

// Position d along the Hilbert curve filling an n x n square (n a power of two) -> (x, y).
void HilbertPoint(int64_t n, int64_t d, int64_t& x, int64_t& y) {
  x = y = 0;
  for (int64_t s = 1; s < n; s *= 2) {
    const int64_t rx = 1 & (d / 2), ry = 1 & (d ^ rx);
    if (ry == 0) {  // rotate the quadrant
      if (rx == 1) x = s - 1 - x, y = s - 1 - y;
      std::swap(x, y);
    }
    x += s * rx;
    y += s * ry;
    d /= 4;
  }
}

// The tiles of a tiles_m x tiles_n grid in Hilbert-curve order, each (m << 16 | n).
std::vector<int32_t> HilbertOrder(int64_t tiles_m, int64_t tiles_n) {
  int64_t side = 1;
  while (side < std::max(tiles_m, tiles_n)) side *= 2;
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(tiles_m * tiles_n));
  for (int64_t d = 0; d < side * side; ++d) {
    int64_t x, y;
    HilbertPoint(side, d, x, y);
    if (x < tiles_m && y < tiles_n) order.push_back(static_cast<int32_t>(x << 16 | y));
  }
  return order;
}

absl::Status CheckShape(int64_t tiles_m, int64_t tiles_n, int groups, int slots) {
  if (tiles_m <= 0 || tiles_n <= 0 || groups <= 0 || slots <= 0 || tiles_m >= (1 << 15) ||
      tiles_n >= (1 << 16))
    return absl::InvalidArgumentError(absl::StrCat("bad Hilbert schedule shape ", tiles_m, "x",
                                                   tiles_n, " over ", groups, " groups"));
  return absl::OkStatus();
}

// One unit of a work table: a tile's k-tiles [k0, k1), part `part` of `parts`.
struct Unit {
  int32_t tile;
  int64_t k0, k1;
  int part = 0, parts = 1;
};

}  // namespace

absl::StatusOr<std::vector<int32_t>> HilbertSchedule(int64_t tiles_m, int64_t tiles_n, int groups,
                                                     int slots) {
  if (absl::Status s = CheckShape(tiles_m, tiles_n, groups, slots); !s.ok()) return s;
  const int64_t tiles = tiles_m * tiles_n;
  if ((tiles + groups - 1) / groups >= slots)
    return absl::InvalidArgumentError(absl::StrCat(
        "a Hilbert schedule of ", tiles_m, "x", tiles_n, " tiles over ", groups,
        " CTA groups needs more than ", slots - 1, " tiles per group; use a larger tile"));
  std::vector<int32_t> table(static_cast<size_t>(groups) * slots, -1);
  std::vector<int> used(groups, 0);
  int64_t dealt = 0;
  for (int32_t tile : HilbertOrder(tiles_m, tiles_n)) {
    const int g = static_cast<int>(dealt++ % groups);
    table[static_cast<size_t>(g) * slots + used[g]++] = tile;
  }
  return table;
}

int64_t StreamSharers(int64_t tiles, int64_t k_tiles, int64_t groups) {
  // Fewer groups when the shares would be under 4 k-tiles, or a tile's parts over
  // kMostStreamedParts: the parts' sum costs round trips past the mainloop, which past that many
  // parts cost more than the CTAs they fill gain (docs/perf/2026-11-26-stream-k-of-one-tile.md).
  // Up to kMostStreamedPartsOverLongK where at most 4 tiles share a K of 1024 k-tiles or more:
  // summed in a tree, those parts cost less than the CTAs they fill
  // (docs/perf/2026-12-03-split-partials-in-a-tree.md).
  const int64_t most =
      tiles <= 4 && k_tiles >= 1024 ? kMostStreamedPartsOverLongK : kMostStreamedParts;
  return std::max<int64_t>(1, std::min({groups, tiles * k_tiles / 4, tiles * most}));
}

int64_t PartialRoundTrips(int64_t parts) {
  int64_t trips = 0;
  for (int64_t span = 1; span < parts; span *= kPartsSummedAtOnce) {
    // The last node of a level may have fewer children; the part that ends last may be in any
    // node, so a level costs its fullest node's children.
    const int64_t children = std::min<int64_t>(kPartsSummedAtOnce, (parts + span - 1) / span);
    trips += (children - 1) + (span > 1 ? 1 : 0);
  }
  return trips;
}

absl::StatusOr<WorkTable> WorkSchedule(int64_t tiles_m, int64_t tiles_n, int64_t k_tiles,
                                       int64_t split, int groups, int slots) {
  if (absl::Status s = CheckShape(tiles_m, tiles_n, groups, slots); !s.ok()) return s;
  if (k_tiles <= 0 || k_tiles >= (1 << 15) || split < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("bad work schedule: ", k_tiles, " k-tiles split ", split,
                     " (k-tiles 1..32767, split 0 for stream-K or >= 1)"));
  const std::vector<int32_t> order = HilbertOrder(tiles_m, tiles_n);
  const int64_t tiles = static_cast<int64_t>(order.size());
  std::vector<std::vector<Unit>> per_group(groups);
  if (split >= 1) {  // split-K: each tile's parts on consecutive groups
    const int64_t parts = std::min(split, k_tiles);
    int64_t dealt = 0;
    for (int32_t tile : order)
      for (int64_t p = 0; p < parts; ++p)
        per_group[dealt++ % groups].push_back({tile, p * k_tiles / parts, (p + 1) * k_tiles / parts,
                                               static_cast<int>(p), static_cast<int>(parts)});
  } else {  // stream-K: whole tiles while they fill every group, the rest cut evenly
    int64_t whole = tiles / groups * groups;  // full waves
    if (whole != tiles && whole >= groups)
      whole -= groups;  // the last joins the stream: shares of a tile or more
    for (int64_t i = 0; i < whole; ++i) per_group[i % groups].push_back({order[i], 0, k_tiles});
    // The k-tiles of `tiles` as one run cut evenly among groups first.. first + count - 1, each
    // group's share split where tiles end; a tile's pieces numbered in k order.
    auto stream = [&](const std::vector<int32_t>& streamed, int first, int count) {
      const int64_t run = static_cast<int64_t>(streamed.size()) * k_tiles;
      const int64_t sharers = StreamSharers(static_cast<int64_t>(streamed.size()), k_tiles, count);
      std::vector<Unit> pieces;
      std::vector<int> owner;
      for (int64_t g = 0; g < sharers; ++g)
        for (int64_t at = g * run / sharers, end = (g + 1) * run / sharers; at < end;) {
          const int64_t t = at / k_tiles, stop = std::min(end, (t + 1) * k_tiles);
          pieces.push_back({streamed[t], at - t * k_tiles, stop - t * k_tiles});
          owner.push_back(first + static_cast<int>(g));
          at = stop;
        }
      for (size_t i = 0; i < pieces.size();) {
        size_t j = i;
        while (j < pieces.size() && pieces[j].tile == pieces[i].tile) ++j;
        for (size_t q = i; q < j; ++q)
          pieces[q].part = static_cast<int>(q - i), pieces[q].parts = static_cast<int>(j - i);
        i = j;
      }
      for (size_t i = 0; i < pieces.size(); ++i) per_group[owner[i]].push_back(pieces[i]);
    };
    if (whole == 0 && tiles_m > 1 && groups % tiles_m == 0) {
      // Every tile streamed (few rows of tiles, as at small M): each row of tiles gets its own
      // groups, so that the rows' tiles of one column run side by side at the same k and read
      // their shared columns of B once.
      for (int64_t r = 0; r < tiles_m; ++r) {
        std::vector<int32_t> row;
        for (int64_t n = 0; n < tiles_n; ++n) row.push_back(static_cast<int32_t>(r << 16 | n));
        stream(row, static_cast<int>(r * (groups / tiles_m)), static_cast<int>(groups / tiles_m));
      }
    } else {
      stream(std::vector<int32_t>(order.begin() + whole, order.end()), 0, groups);
    }
  }
  size_t most = 0;
  for (const std::vector<Unit>& units : per_group) most = std::max(most, units.size());
  if (static_cast<int64_t>(most) >= slots)
    return absl::InvalidArgumentError(
        absl::StrCat("a work schedule of ", tiles_m, "x", tiles_n, " tiles of ", k_tiles,
                     " k-tiles (split ", split, ") over ", groups, " CTA groups needs more than ",
                     slots - 1, " units per group; use a larger tile or a smaller split"));
  const int row = static_cast<int>(most) + 1;  // every row ends with its end mark
  WorkTable table;
  table.words.assign((1 + static_cast<size_t>(groups) * row) * kWorkWords, 0);
  table.words[0] = row;
  std::map<int32_t, int64_t> first_slot;  // by tile
  for (int g = 0; g < groups; ++g) {
    const std::vector<Unit>& units = per_group[g];
    for (size_t u = 0; u <= units.size(); ++u) {
      int32_t* w = &table.words[(1 + static_cast<size_t>(g) * row + u) * kWorkWords];
      if (u == units.size()) {
        w[0] = -1;
        break;
      }
      const Unit& x = units[u];
      int64_t slot = -1;
      if (x.parts > 1) {
        auto [it, fresh] = first_slot.try_emplace(x.tile, table.partials);
        if (fresh) table.partials += x.parts;
        slot = it->second;
      }
      w[0] = x.tile;
      w[1] = static_cast<int32_t>(x.k0 << 16 | x.k1);
      w[2] = static_cast<int32_t>(slot);
      w[3] = x.part << 16 | x.parts;
    }
  }
  return table;
}

absl::StatusOr<WorkTable> BuildScheduleTable(const ScheduleTableParam& t, const Symbols& symbols) {
  const int64_t tiles_m = t.tiles_m.Value(symbols, 0), tiles_n = t.tiles_n.Value(symbols, 0);
  // Said in the rules' terms (the sizes they read), before the table's own shape checks.
  if (tiles_m <= 0 || tiles_n <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "its tiles, ", t.tiles_m.ToString(), " by ", t.tiles_n.ToString(), ", come to ", tiles_m,
        " by ", tiles_n, ": a table needs at least one tile each way (a size of 0 or below?)"));
  const int64_t k_tiles = t.work() ? t.k_tiles.Value(symbols, 0) : 1;
  if (k_tiles <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "its k-tiles, ", t.k_tiles.ToString(), ", come to ", k_tiles,
        ": each tile needs at least one (a K of 0 has no product to accumulate here)"));
  if (t.split.empty()) {
    absl::StatusOr<std::vector<int32_t>> tiles =
        HilbertSchedule(tiles_m, tiles_n, t.groups, t.slots);
    if (!tiles.ok()) return tiles.status();
    return WorkTable{*std::move(tiles), 0};
  }
  auto split = symbols.find(t.split);
  if (split == symbols.end())
    return absl::InvalidArgumentError(
        absl::StrCat("the work schedule's split, integer parameter '", t.split, "', has no value"));
  return WorkSchedule(tiles_m, tiles_n, k_tiles, split->second, t.groups, t.slots);
}
}  // namespace kiln::rt
