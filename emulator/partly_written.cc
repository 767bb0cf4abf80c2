#include "emulator/partly_written.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kiln::emu::detail {

std::vector<PartlyWritten> PartlyWrittenArgs(const Device& device, const rt::Manifest& m,
                                             rt::Dim3 grid, const std::vector<rt::Arg>& args) {
  std::set<std::string> by_design;
  if (const std::string* names = m.Attribute("writes_part"))
    for (absl::string_view name : absl::StrSplit(*names, ',', absl::SkipEmpty()))
      by_design.insert(std::string(name));
  // Each allocation's arguments by address (the first argument at an address speaks for it).
  std::map<uint64_t, std::map<uint64_t, size_t>> spans;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind() != rt::Arg::Kind::kPointer && args[i].kind() != rt::Arg::Kind::kTensorMap)
      continue;
    const uint64_t base = device.AllocationOf(args[i].address());
    if (base) spans[base].emplace(args[i].address(), i);
  }
  std::vector<PartlyWritten> out;
  for (const auto& [base, by_address] : spans) {
    for (auto it = by_address.begin(); it != by_address.end(); ++it) {
      const auto [from, i] = *it;
      const std::string name = i < m.params.size() ? m.params[i].name : "";
      if (by_design.count(name)) continue;
      const bool whole = std::next(it) == by_address.end() && from == base;
      const uint64_t to =
          std::next(it) == by_address.end() ? device.AllocationEnd(base) : std::next(it)->first;
      const Device::Coverage c = device.WrittenByLaunch(from, to);
      if (c.written == 0 || c.first_unwritten >= c.bytes) continue;
      PartlyWritten p{.arg = static_cast<int>(i),
                      .bytes = c.bytes,
                      .written = c.written,
                      .first_unwritten = c.first_unwritten};
      // A kernel with no Kernel::Grid has the rule 1, 1, 1: one CTA unless the caller gives a grid.
      const bool no_rule = m.grid_source.empty() && m.grid[0].ToString() == "1" &&
                           m.grid[1].ToString() == "1" && m.grid[2].ToString() == "1";
      p.message = absl::StrFormat(
          "%s: %s: the array of parameter '%s' was written in part: %d of its %d bytes%s, the "
          "first one left as it was at byte %d. The launch ran %dx%dx%d CTAs of %dx%dx%d "
          "threads: if the kernel should write all of it, %s or its bounds cover too little",
          m.source, m.name, name, p.written, p.bytes,
          whole ? "" : " (to the next argument's address or its allocation's end)",
          p.first_unwritten, grid.x, grid.y, grid.z, m.block.x, m.block.y, m.block.z,
          no_rule ? "its grid (the kernel has no grid rule, Kernel::Grid, so a launch without a "
                    "grid runs one CTA)"
          : m.grid_source.empty()
              ? "its grid rule"
              : absl::StrCat("its grid rule (", m.grid_source, ": ", m.grid[0].ToString(), ", ",
                             m.grid[1].ToString(), ", ", m.grid[2].ToString(), ")"));
      out.push_back(std::move(p));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const PartlyWritten& a, const PartlyWritten& b) { return a.arg < b.arg; });
  return out;
}

}  // namespace kiln::emu::detail
