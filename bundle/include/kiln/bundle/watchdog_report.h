// The GPU debug mode's record (Kernel::Watchdog): the words a thread that stops the launch writes
// (dsl/watchdog.cc) and the report made from them. The runtime reads the record from mapped host
// memory after the trap; the emulator reads it from its own device memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::rt {

struct WatchdogFields {  // in the order the debug mode's inline PTX writes them
  uint32_t fired, site, a, b, ctaid[3], tid;
};

// The report of a record that fired (a wait past `ms`, or a shared tile's run-time index past
// its extent), naming the DSL line of `sites[site]`; nothing where the record did not fire.
std::optional<absl::Status> WatchdogReport(const std::string& kernel,
                                           const std::vector<std::string>& sites, int ms,
                                           const WatchdogFields& f);

}  // namespace kiln::rt
