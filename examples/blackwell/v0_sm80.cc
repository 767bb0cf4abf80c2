// Seed 002 v0: the sm80 baseline its Blackwell series starts from. Seed 003 v7's kernel at a
// 128x128x64 tile (2x2 warps of 64x64), two cp.async stages, col ^ (row % 8) swizzle,
// ldmatrix.x4, mma.sync m16n8k16. (Upstream's current file uses three stages; the worklog's
// version, reproduced here, two.)
#include "examples/ampere/mma_pipeline.h"
#include "examples/registry.h"

namespace kiln::examples {
KILN_EXAMPLE_VARIANT(bw_v0, "blackwell/v0",
                     "seed 002 v0: sm80 baseline, 128x128x64, 2 cp.async stages, swizzle, mma.sync",
                     [] {
                       return BuildMmaPipeline({.name = "blackwell/v0",
                                                .bm = 128,
                                                .bn = 128,
                                                .stages = 2,
                                                .fragments_first = true,
                                                .peel_tail = true});
                     });
}  // namespace kiln::examples
