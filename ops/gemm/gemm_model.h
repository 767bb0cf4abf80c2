// The choice rule's two models of a tile kernel's time (docs/GEMM_CHOICE.md), over the figures of
// a tuning table: up to weight_bound_rows the time streaming B (StreamUs), past them the share of
// the machine's time doing useful work (Efficiency).
#pragma once

#include <vector>

#include "kiln/ops/gemm_table.h"
#include "kiln/ops/gemm_tiles.h"

namespace kiln::rt {

// A tile kernel as the models weigh it: its geometry (gemm_tiles.h) and its table weights.
struct Candidate {
  const Sm90Tile* tile;
  const TileWeights* weights;
  const char* kernel() const { return tile->kernel; }
  int tile_m() const { return tile->tile_m(); }
  int tile_n() const { return tile->tile_n(); }
  int in_flight() const { return tile->in_flight(); }
};
// The table's tiles in its order.
std::vector<Candidate> CandidatesOf(const GemmRules& rules);

// The splits the rule weighs, and kiln tune times, for the tile kernels (1 whole tiles, 0
// stream-K, S split-K; 8 and 16 only where Weighed allows).
inline constexpr int kSplits[] = {1, 0, 2, 4, 8, 16};

int64_t TilesOf(const Sm90Tile& t, const GemmSize& s);  // tiles covering M x N, rounded up

// Whether the rule weighs (and kiln tune times) the tile in `split` parts at this size.
bool Weighed(const Candidate& c, const GemmSize& s, int split);
// Whether stream-K is weighed for it here.
bool StreamsWell(const Candidate& c, const GemmSize& s);
// MN-major operands are read in 64-wide blocks of the tile's M and N.
bool ReadsMnMajor(const Sm90Tile& t);

// Past weight_bound_rows: the share of the machine's time doing useful work.
double Efficiency(const GemmModel& m, const Candidate& c, const GemmSize& s, int split,
                  bool aligned_rows);
// Up to weight_bound_rows: microseconds streaming B, split-K or whole tiles.
double StreamUs(const GemmModel& m, const Candidate& c, const GemmSize& s, int split);

}  // namespace kiln::rt
