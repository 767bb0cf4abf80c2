#include "kiln/bundle/source_path.h"

#include <cstdlib>
#include <filesystem>
#include <optional>

namespace kiln::rt {
namespace {
std::string& SourceRoot() {
  static std::string root = [] {
    const char* env = std::getenv("KILN_SOURCE_ROOT");
    return std::string(env ? env : "");
  }();
  return root;
}

// `file` relative to `dir` where it lies inside it.
std::optional<std::string> Inside(const std::string& file, std::string dir) {
  if (dir.empty()) return std::nullopt;
  if (dir.back() != '/') dir += '/';
  if (file.rfind(dir, 0) != 0) return std::nullopt;
  return file.substr(dir.size());
}
}  // namespace

void SetSourceRoot(const std::string& dir) {
  SourceRoot() = dir.empty() ? "" : std::filesystem::absolute(dir).lexically_normal().string();
}

std::string SourcePath(const std::string& file) {
  std::optional<std::string> rel = Inside(file, SourceRoot());
#ifdef KILN_SOURCE_DIR
  if (!rel) rel = Inside(file, KILN_SOURCE_DIR);
#endif
  if (!rel && !file.empty() && file[0] == '/') {
    std::error_code error;
    const std::filesystem::path cwd = std::filesystem::current_path(error);
    rel = error ? std::nullopt : Inside(file, cwd.string());
    if (!rel) rel = std::filesystem::path(file).filename().string();
  }
  return rel ? *rel : file;
}

}  // namespace kiln::rt
