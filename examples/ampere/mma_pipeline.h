// The cp.async + ldmatrix + mma.sync kernel of seed 003 v5-v8 and seed 002's sm80 baseline
// (blackwell/v0), with each version's switches.
#pragma once

#include "kiln/kernel.h"

namespace kiln::examples {

struct MmaPipeline {
  const char* name;
  int bm, bn;
  int stages;            // 1: cp.async + wait_all; 2+: commit / wait_group ring
  bool fragments_first;  // load every ldmatrix fragment of the k-tile before the mmas (v6+)
  bool peel_tail;        // last stages outside the loop, no guarded loads (v7+); needs
                         // K >= (stages - 1) * 64, which K % 64 == 0 gives for two stages
  int group_m = 0;       // GROUP_M block order (v8); 0: row-major
};
absl::StatusOr<KernelDef> BuildMmaPipeline(const MmaPipeline& p);

}  // namespace kiln::examples
