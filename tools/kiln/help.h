// `kiln --help` and `kiln COMMAND --help`: each command's usage and the flags it reads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::cli {

// Every command's synopsis, a line each, and how to ask for one command's flags.
std::string Overview();
// "kiln: unknown command 'X'; did you mean 'Y'?" and the overview (Y: the nearest command).
std::string UnknownCommand(const std::string& command);
// Where argv asks for help (--help or -h): prints the overview, or the named command's usage and
// flags, and returns the exit code (0; 2 for an unknown command). Else nullopt.
std::optional<int> HandleHelp(int argc, char** argv);
// The flags given (by name, without dashes) that `command` does not read: refused rather than
// dropped, naming the ones it takes.
absl::Status CheckFlagsOf(const std::string& command, const std::vector<std::string>& given);
// absl's own parse flags (a flag file, flags from the environment), which every command takes
// and which may be given more than once.
bool AbslParseFlag(const std::string& name);

}  // namespace kiln::cli
