// The static checks of a built kernel, running nothing: what `kiln check NAME` prints for kiln's
// own kernels, for any kernel a program builds.
//
//   absl::StatusOr<kiln::KernelDef> def = k.Build();
//   absl::StatusOr<kiln::CheckReport> report = kiln::CheckKernel(*def);
//   for (const std::string& f : report->findings) std::cerr << f << "\n";
//
// This header includes no MLIR or LLVM header.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/kernel.h"

namespace kiln {

struct CheckReport {
  // Mistakes to fix, each naming its DSL line where it has one: the builder's findings
  // (KernelDef::findings(): budgets, tx bytes against the TMA boxes, arrival counts, stage reuse)
  // and, where ptxas refuses the kernel's PTX, ptxas's message.
  std::vector<std::string> findings;
  // What the kernel uses and how ptxas took it, one item each: shared memory against the target's
  // budget, ptxas's registers, spill bytes, setmaxnreg ignored, wgmmas serialised, a wgmma.fence
  // added; "registers not checked" where there is no CUDA toolkit.
  std::vector<std::string> resources;

  bool ok() const { return findings.empty(); }
  std::string Resources() const;  // `resources` joined by "; "
};

// Builds nothing and launches nothing. An error status is the toolkit's own failure (ptxas past
// its time limit, or failing without a message), never a finding.
absl::StatusOr<CheckReport> CheckKernel(const KernelDef& kernel);

}  // namespace kiln
