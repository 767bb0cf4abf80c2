// The harness of the op probes (examples/probes/): runs a probe kernel on known random inputs,
// on a GPU or in kiln's emulator, and compares every output with a reference computed here on
// the host: exact ops bit for bit, approximate ones within the PTX ISA's stated error (with a
// small margin), conversions against a nearest-value search over every code of the format.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"

namespace kiln::examples {

bool IsProbe(const std::string& name);

struct ProbeResult {
  std::string name;
  int64_t elements = 0;               // threads' worth of inputs the probe ran on
  int64_t checked = 0;                // values compared
  std::vector<std::string> failures;  // the first few, each naming the op and element
  int64_t failed = 0;
  bool passed() const { return failed == 0 && checked > 0; }
};

struct ProbeOptions {
  int64_t elements = 0;  // 0: the probe's default (ragged where it allows it)
  uint64_t seed = 1;     // the inputs
};

absl::StatusOr<ProbeResult> RunProbe(const rt::Bundle& bundle, const ProbeOptions& options);
// The same on the emulator; `schedule_seed` orders the emulated threads.
absl::StatusOr<ProbeResult> EmulateProbe(const rt::Bundle& bundle, const ProbeOptions& options,
                                         uint64_t schedule_seed = 1);

std::string ProbeReport(const ProbeResult& r);  // one line, then the failures

}  // namespace kiln::examples
