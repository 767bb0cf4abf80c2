#include "kiln/runtime/schedule.h"

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

}  // namespace

absl::StatusOr<std::vector<int32_t>> HilbertSchedule(int64_t tiles_m, int64_t tiles_n, int groups,
                                                     int slots) {
  if (tiles_m <= 0 || tiles_n <= 0 || groups <= 0 || slots <= 0 || tiles_m >= (1 << 15) ||
      tiles_n >= (1 << 16))
    return absl::InvalidArgumentError(absl::StrCat("bad Hilbert schedule shape ", tiles_m, "x",
                                                   tiles_n, " over ", groups, " groups"));
  const int64_t tiles = tiles_m * tiles_n;
  if ((tiles + groups - 1) / groups >= slots)
    return absl::InvalidArgumentError(absl::StrCat(
        "a Hilbert schedule of ", tiles_m, "x", tiles_n, " tiles over ", groups,
        " CTA groups needs more than ", slots - 1, " tiles per group; use a larger tile"));
  int64_t side = 1;
  while (side < std::max(tiles_m, tiles_n)) side *= 2;
  std::vector<int32_t> table(static_cast<size_t>(groups) * slots, -1);
  std::vector<int> used(groups, 0);
  int64_t dealt = 0;
  for (int64_t d = 0; d < side * side; ++d) {
    int64_t x, y;
    HilbertPoint(side, d, x, y);
    if (x >= tiles_m || y >= tiles_n) continue;
    const int g = static_cast<int>(dealt++ % groups);
    table[static_cast<size_t>(g) * slots + used[g]++] = static_cast<int32_t>(x << 16 | y);
  }
  return table;
}

}  // namespace kiln::rt
