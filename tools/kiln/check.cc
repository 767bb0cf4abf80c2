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
        "(--bundles). A bundled GEMM, row op or probe runs on the emulator with `kiln emulate "
        "--bundles D NAME`; a kernel of your own program is checked there by its "
        "KernelDef::findings() and runs on the emulator from your program (kiln::emu::Launch) "
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
    const kiln::rt::Manifest& m = def->manifest();
    std::string summary =
        absl::StrFormat("smem %d of %d bytes", m.smem_bytes, def->target().smem_budget_bytes);
    if (!kiln::HaveToolkit()) {
      absl::StrAppend(&summary, "; registers not checked: no ptxas (set KILN_CUDA_HOME)");
    } else {
      absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def);
      absl::StatusOr<kiln::PtxasResult> cubin =
          ptx.ok() ? kiln::RunPtxas(*ptx, def->target().chip)
                   : absl::StatusOr<kiln::PtxasResult>(ptx.status());
      // ptxas stopped at its time limit or failing silently is the tool's error, not a finding.
      if (ptx.ok() && !cubin.ok() &&
          (absl::IsDeadlineExceeded(cubin.status()) || absl::IsInternal(cubin.status()) ||
           absl::IsUnavailable(cubin.status())))
        return Fail(cubin.status());
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
        // ptxas's C7508: the roles' setmaxnreg does nothing (docs/NOTES.md).
        if (line.find("'setmaxnreg' ignored") != absl::string_view::npos)
          absl::StrAppend(&summary,
                          "; ptxas ignores setmaxnreg (the entry's register count is open: "
                          "MinBlocksPerSm(1) fixes it, where the roles' budgets hold what ptxas "
                          "uses now)");
        // ptxas's C7510-C7520: it waits for each wgmma before the next one (the tensor cores
        // then run one at a time); its reason follows "serialized".
        constexpr absl::string_view kSerialized = "wgmma.mma_async instructions are serialized";
        if (size_t at = line.find(kSerialized); at != absl::string_view::npos) {
          absl::string_view why = line.substr(at + kSerialized.size());
          why = why.substr(0, why.find(" in the function"));
          absl::StrAppend(&summary, "; ptxas serializes the wgmmas", why);
        }
        // ptxas's C7519: registers a wgmma uses were written since the last wgmma.fence.
        if (line.find("warpgroup.arrive is injected") != absl::string_view::npos)
          absl::StrAppend(&summary,
                          "; ptxas adds a wgmma.fence (registers a wgmma uses were written since "
                          "the last WgmmaFence)");
      }
    }
    const bool planted = all && m.Attribute("planted") != nullptr;
    if (def->findings().empty()) {
      std::cout << name << ": "
                << (planted ? "no static finding (its planted bug is the emulator's to find)"
                            : "ok")
                << " (" << summary << ")\n";
      continue;
    }
    failing += !planted;
    for (const std::string& f : def->findings())
      std::cout << name << ": " << (planted ? "found as planted: " : "") << f << "\n";
  }
  if (failing) std::cout << failing << " of " << named->size() << " kernels have findings\n";
  return failing ? 1 : 0;
}
#endif

}  // namespace kiln::cli
