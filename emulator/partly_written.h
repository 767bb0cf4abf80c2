// The argument arrays a launch wrote in part (emu::Stats::partly_written): each pointer or tensor
// argument's bytes, from its address to the next argument's in the same allocation (or the
// allocation's end), against the words the launch wrote.
#pragma once

#include <vector>

#include "kiln/bundle/args.h"
#include "kiln/bundle/manifest.h"
#include "kiln/emulator.h"

namespace kiln::emu::detail {

// Parameters named in the manifest's attribute "writes_part" (comma-separated: a kernel that
// updates part of an array by design, as a KV cache's new rows) are left out.
std::vector<PartlyWritten> PartlyWrittenArgs(const Device& device, const rt::Manifest& m,
                                             rt::Dim3 grid, const std::vector<rt::Arg>& args);

}  // namespace kiln::emu::detail
