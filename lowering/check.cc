// CheckKernel (kiln/check.h): the builder's findings and what ptxas says of the kernel's PTX.
#include "kiln/check.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kiln/lowering.h"

namespace kiln {
namespace {

// One item for each line of ptxas -v's log that says something of the kernel's resources:
// "Used 90 registers", "N bytes spill stores, M bytes spill loads" (when not zero), and ptxas's
// warnings that change how the kernel runs.
void ReadPtxasLog(absl::string_view log, std::vector<std::string>& resources) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (size_t at = line.find("Used "); at != absl::string_view::npos)
      resources.push_back(std::string(line.substr(at, line.find(',', at) - at)));
    if (size_t at = line.find("bytes spill stores");
        at != absl::string_view::npos &&
        line.find(" 0 bytes spill stores") == absl::string_view::npos)
      resources.push_back(
          std::string(absl::StripAsciiWhitespace(line.substr(line.find_last_of(',', at) + 1))));
    // ptxas's C7508: the roles' setmaxnreg does nothing (docs/NOTES.md).
    if (line.find("'setmaxnreg' ignored") != absl::string_view::npos)
      resources.push_back(
          "ptxas ignores setmaxnreg (the entry's register count is open: MinBlocksPerSm(1) fixes "
          "it, where the roles' budgets hold what ptxas uses now)");
    // ptxas's C7510-C7520: it waits for each wgmma before the next one (the tensor cores then
    // run one at a time); its reason follows "serialized".
    constexpr absl::string_view kSerialized = "wgmma.mma_async instructions are serialized";
    if (size_t at = line.find(kSerialized); at != absl::string_view::npos) {
      absl::string_view why = line.substr(at + kSerialized.size());
      why = why.substr(0, why.find(" in the function"));
      resources.push_back(absl::StrCat("ptxas serializes the wgmmas", why));
    }
    // ptxas's C7519: registers a wgmma uses were written since the last wgmma.fence.
    if (line.find("warpgroup.arrive is injected") != absl::string_view::npos)
      resources.push_back(
          "ptxas adds a wgmma.fence (registers a wgmma uses were written since the last "
          "WgmmaFence)");
  }
}

}  // namespace

std::string CheckReport::Resources() const { return absl::StrJoin(resources, "; "); }

absl::StatusOr<CheckReport> CheckKernel(const KernelDef& kernel) {
  CheckReport report;
  report.findings = kernel.findings();
  const rt::Manifest& m = kernel.manifest();
  report.resources.push_back(
      absl::StrFormat("smem %d of %d bytes", m.smem_bytes, kernel.target().smem_budget_bytes));
  if (!m.smem_extra.factors.empty())  // SmemDynamic: sized and checked at each launch
    report.resources.back() +=
        absl::StrCat(" planned, and ", m.smem_extra.ToString(), " bytes sized at launch");
  if (!HaveToolkit()) {
    report.resources.push_back("registers not checked: no ptxas (set KILN_CUDA_HOME)");
    return report;
  }
  absl::StatusOr<std::string> ptx = EmitPtx(kernel);
  if (!ptx.ok()) {
    report.findings.push_back(std::string(ptx.status().message()));
    return report;
  }
  absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, kernel.target().chip);
  // ptxas stopped at its time limit or failing silently is the tool's error, not a finding.
  if (!cubin.ok() && (absl::IsDeadlineExceeded(cubin.status()) ||
                      absl::IsInternal(cubin.status()) || absl::IsUnavailable(cubin.status())))
    return cubin.status();
  if (!cubin.ok()) {
    report.findings.push_back(std::string(cubin.status().message()));
    return report;
  }
  ReadPtxasLog(cubin->log, report.resources);
  return report;
}

}  // namespace kiln
