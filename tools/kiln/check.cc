// `kiln check [NAME...]`: the static checks, running nothing.
#include <iostream>

#include "absl/flags/flag.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"
#ifdef KILN_HAVE_COMPILER
#include "kiln/check.h"  // (the compiler's: a runtime-only build has no lowering library)
#endif

namespace kiln::cli {

#ifdef KILN_HAVE_COMPILER
// The static checks of kiln/check.h over kiln's registered kernels, running nothing. Returns 1 if
// any kernel has a finding.
int CheckKernels(const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_bundles).empty())
    return Fail(absl::InvalidArgumentError(
        "kiln check builds each kernel from its source and checks it there: it reads no bundle "
        "(--bundles). A bundled GEMM, row op or probe runs on the emulator with `kiln emulate "
        "--bundles D NAME`; a kernel of your own program is checked there by "
        "kiln::CheckKernel(def) (kiln/check.h) and runs on the emulator from your program "
        "(kiln::emu::Launch) "
        "or from Python (kiln.load), docs/EMULATOR.md"));
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  int failing = 0;
  // Over every kernel, the planted bugs (kernels wrong on purpose, for the checks to find) do not
  // fail the run: their findings are expected, and some are for the emulator to find, not these
  // static checks. Named, a planted kernel is checked as any other.
  const bool all = args.empty();
  for (const std::string& name : *named) {
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (absl::IsNotFound(def.status())) return Fail(def.status());  // a name, not a finding
    if (!def.ok()) {
      std::cout << name << ": " << def.status().message() << "\n";
      ++failing;
      continue;
    }
    absl::StatusOr<kiln::CheckReport> report = kiln::CheckKernel(*def);
    if (!report.ok()) return Fail(report.status());
    const std::string summary = report->Resources();
    const bool planted = all && def->manifest().Attribute("planted") != nullptr;
    if (report->ok()) {
      std::cout << name << ": "
                << (planted ? "no static finding (its planted bug is the emulator's to find)"
                            : "ok")
                << " (" << summary << ")\n";
      continue;
    }
    failing += !planted;
    for (const std::string& f : report->findings)
      std::cout << name << ": " << (planted ? "found as planted: " : "") << f << "\n";
  }
  if (failing) std::cout << failing << " of " << named->size() << " kernels have findings\n";
  return failing ? 1 : 0;
}
#endif

}  // namespace kiln::cli
