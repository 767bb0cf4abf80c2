// The GEMM entry point's persistent tile kernels on Hopper: each one's CTA tile, ring depth and
// cluster, written once for the kernels' builder (ops/gemm/kernels/tile_kernels.cc) and the choice
// rule's model (ops/gemm/gemm_choice.cc), which weighs a tile by what follows from them.
#pragma once

#include <string_view>

namespace kiln::rt {

// Every tile kernel runs this many CTAs, each walking its share of a work table.
inline constexpr int kTileKernelCtas = 128;

struct Sm90Tile {
  const char* kernel;
  int cta_m, cta_n;  // one CTA's tile (64 rows per consumer warpgroup)
  int stages;        // the ring's depth, in stages of 64 k
  int cluster;       // CTAs along M sharing B by multicast

  int tile_m() const { return cta_m * cluster; }  // a cluster's tile, as the work table holds it
  int tile_n() const { return cta_n; }
  int in_flight() const { return kTileKernelCtas / cluster; }   // tiles in flight at once
  int ring_b_bytes() const { return stages * cta_n * 64 * 2; }  // B's bf16 bytes in the ring
};

inline constexpr Sm90Tile kSm90Tiles[] = {
    {"gemm/bf16_sm90", 128, 256, 4, 2},       {"gemm/bf16_sm90_n128", 128, 128, 6, 1},
    {"gemm/bf16_sm90_m64", 64, 128, 8, 1},    {"gemm/bf16_sm90_n64", 128, 64, 8, 1},
    {"gemm/bf16_sm90_n80", 128, 80, 7, 1},    {"gemm/bf16_sm90_n96", 128, 96, 7, 1},
    {"gemm/bf16_sm90_n160", 128, 160, 5, 2},  {"gemm/bf16_sm90_m64n64", 64, 64, 13, 2},
    {"gemm/bf16_sm90_m64n32", 64, 32, 17, 1}, {"gemm/bf16_sm90_m64n48", 64, 48, 15, 1},
    {"gemm/bf16_sm90_m64n16", 64, 16, 22, 1}, {"gemm/bf16_sm90_m64n80", 64, 80, 11, 1},
    {"gemm/bf16_sm90_n192", 128, 192, 5, 2},
};
// Tiles for 8-bit inputs alone, which the 16-bit choice rule does not weigh.
inline constexpr Sm90Tile kSm90Fp8Tiles[] = {{"gemm/bf16_sm90_n128c2", 128, 128, 6, 2},
                                             {"gemm/bf16_sm90_m192", 192, 128, 5, 1}};

// Whether a CTA tile takes 8-bit inputs, scaled blockwise (per 128x128 block of B; blockwise_t's
// per-column B scales pass through a buffer of 128 columns) or not: its partial accumulator
// doubles the registers a column takes, so at most 128 columns that divide 128, or 128x192 in two
// consumer warpgroups (96 + 96 registers, within the 240 the pinned entry count gives), whose
// columns hold no whole blocks of B's scales. The kernels' builder and the 8-bit plan both ask.
constexpr bool TakesFp8(int cta_m, int cta_n, bool blockwise) {
  if (cta_n <= 128) return 128 % cta_n == 0;
  return cta_n == 192 && cta_m == 128 && !blockwise;
}

// The entry point's other kernels, which the choice rule takes outright where a region of its
// table holds the size (kiln/ops/gemm_table.h).
inline constexpr const char* kRegionKernels[] = {
    "gemm/bf16_skinny",       "gemm/bf16_skinny_sm90", "gemm/bf16_mma16_sm90",
    "gemm/bf16_tma16_sm90",   "gemm/bf16_tma8_sm90",   "gemm/bf16_k128n32_sm90",
    "gemm/bf16_k128n64_sm90",
};

// Whether a tile kernel has that name (for compile-time checks: a pointer's comparison with null
// is no constant expression under the sanitizers).
constexpr bool HasSm90Tile(std::string_view kernel) {
  for (const Sm90Tile& t : kSm90Tiles)
    if (kernel == t.kernel) return true;
  for (const Sm90Tile& t : kSm90Fp8Tiles)
    if (kernel == t.kernel) return true;
  return false;
}

// The tile kernel of that name (either list), or nullptr.
constexpr const Sm90Tile* FindSm90Tile(std::string_view kernel) {
  for (const Sm90Tile& t : kSm90Tiles)
    if (kernel == t.kernel) return &t;
  for (const Sm90Tile& t : kSm90Fp8Tiles)
    if (kernel == t.kernel) return &t;
  return nullptr;
}

}  // namespace kiln::rt
