// `kiln check [NAME...]`: the static checks, running nothing.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

#ifdef KILN_HAVE_COMPILER
// The static checks, without running anything: the builder's own (types, tiles against their
// tensor maps, descriptors from the tiles, shared memory, tensor memory and setmaxnreg budgets,
// every allocation freed) and, over the built kernel, the transaction bytes each barrier is
// announced against the TMA boxes that complete on it; then ptxas's registers and spills where
// the toolkit is installed. Returns 1 if any kernel has a finding.
int CheckKernels(const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_bundles).empty())
    return Fail(absl::InvalidArgumentError(
        "kiln check builds each kernel from its source and checks it there: it reads no bundle "
        "(--bundles). A bundle runs on the emulator: kiln emulate --bundles D NAME"));
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  int failing = 0;
  for (const std::string& name : *named) {
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (absl::IsNotFound(def.status())) return Fail(def.status());  // a name, not a finding
    if (!def.ok()) {
      std::cout << name << ": " << def.status().message() << "\n";
      ++failing;
      continue;
    }
    const kiln::rt::Manifest& m = def->manifest();
    std::string summary =
        absl::StrFormat("smem %d of %d bytes", m.smem_bytes, def->target().smem_budget_bytes);
    if (kiln::HaveToolkit()) {
      absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def);
      absl::StatusOr<kiln::PtxasResult> cubin =
          ptx.ok() ? kiln::RunPtxas(*ptx, def->target().chip)
                   : absl::StatusOr<kiln::PtxasResult>(ptx.status());
      if (!cubin.ok()) {
        std::cout << name << ": " << cubin.status().message() << "\n";
        ++failing;
        continue;
      }
      // "Used 90 registers, ..." and "N bytes spill stores, M bytes spill loads".
      for (absl::string_view line : absl::StrSplit(cubin->log, '\n')) {
        if (size_t at = line.find("Used "); at != absl::string_view::npos)
          absl::StrAppend(&summary, "; ", line.substr(at, line.find(',', at) - at));
        if (size_t at = line.find("bytes spill stores");
            at != absl::string_view::npos &&
            line.find(" 0 bytes spill stores") == absl::string_view::npos)
          absl::StrAppend(&summary, "; ",
                          absl::StripAsciiWhitespace(line.substr(line.find_last_of(',', at) + 1)));
      }
    }
    if (def->findings().empty()) {
      std::cout << name << ": ok (" << summary << ")\n";
      continue;
    }
    ++failing;
    for (const std::string& f : def->findings()) std::cout << name << ": " << f << "\n";
  }
  if (failing) std::cout << failing << " of " << named->size() << " kernels have findings\n";
  return failing ? 1 : 0;
}
#endif

}  // namespace kiln::cli
