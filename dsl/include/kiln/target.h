// The chips kiln compiles for: one struct holds every per-target setting.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

struct Target {
  std::string chip;        // sm_80, sm_90a, sm_100a: the PTX .target
  int ptx_version;         // e.g. 80 for PTX 8.0
  int smem_budget_bytes;   // largest dynamic shared memory a block may opt into
  int compute_capability;  // 80, 90, 100: what the device must report

  static absl::StatusOr<Target> Named(absl::string_view chip);
};

const Target& sm80();
const Target& sm90a();
const Target& sm100a();

}  // namespace kiln
