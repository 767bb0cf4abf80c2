// A launch's three dimensions (grid, block or cluster), as a manifest records them, and a GEMM
// problem's sizes, as the GEMM kernels' integer parameters M, N, K carry them.
#pragma once

#include <cstdint>

namespace kiln::rt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  unsigned count() const { return x * y * z; }
};

struct GemmSize {
  int64_t m = 0, n = 0, k = 0;
};

}  // namespace kiln::rt
