// How manifests and messages name a source file: relative to the program's source root
// (SetSourceRoot, else the environment's KILN_SOURCE_ROOT) or to kiln's own tree when inside one,
// else to the working directory when inside it, else the file's name alone. So a bundle holds no
// absolute path of the machine that built it, and a message names a file as its author knows it.
#pragma once

#include <string>

namespace kiln::rt {

std::string SourcePath(const std::string& file);
// The directory a program's own sources are named relative to (e.g. its CMAKE_SOURCE_DIR).
void SetSourceRoot(const std::string& dir);

}  // namespace kiln::rt
