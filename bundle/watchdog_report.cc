#include "kiln/bundle/watchdog_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::rt {

std::optional<absl::Status> WatchdogReport(const std::string& kernel,
                                           const std::vector<std::string>& sites, int ms,
                                           const WatchdogFields& f) {
  if (f.fired < 1 || f.fired > 4) return std::nullopt;
  const std::string line = f.site < sites.size() ? sites[f.site] : absl::StrCat("site #", f.site);
  if (f.fired != 1) {  // a shared tile's run-time index (dsl/watchdog.h: the index, its extent)
    const int32_t index = static_cast<int32_t>(f.a);
    const std::string what =
        f.fired == 2 ? absl::StrFormat("row %d of a shared tile of %u rows", index, f.b)
        : f.fired == 3
            ? absl::StrFormat("column %d of a shared tile whose rows hold %u elements", index, f.b)
            : absl::StrFormat("stage %d of a ring of %u stages", index, f.b);
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: %s: the debug mode stopped the launch: thread %d of block (%d,%d,%d) indexed %s "
        "(past it, the access lands in other bytes)",
        line, kernel, f.tid, f.ctaid[0], f.ctaid[1], f.ctaid[2], what));
  }
  // A wait: a is the mbarrier's shared address, b the parity waited for.
  return absl::DeadlineExceededError(absl::StrFormat(
      "%s: %s: the watchdog stopped the launch: thread %d of block (%d,%d,%d) waited over %d ms "
      "for the phase of parity %d of the mbarrier at shared address 0x%x (a missing arrival or "
      "transaction bytes, a wrong phase, or a stage released too early)",
      line, kernel, f.tid, f.ctaid[0], f.ctaid[1], f.ctaid[2], ms, f.b & 1, f.a));
}

}  // namespace kiln::rt
