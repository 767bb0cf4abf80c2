// Tile orders built on the host and handed to persistent kernels as a table.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::rt {

// Walks a Hilbert curve over a tiles_m x tiles_n grid of C tiles and deals the tiles round-robin
// to `groups` persistent CTA groups, so that tiles running at the same time are neighbours on the
// curve (and share rows of A and columns of B in L2). Returns groups x slots entries,
// (m << 16 | n) per tile and -1 after each group's last; fails when a group needs more than
// `slots` entries.
absl::StatusOr<std::vector<int32_t>> HilbertSchedule(int64_t tiles_m, int64_t tiles_n, int groups,
                                                     int slots);

}  // namespace kiln::rt
