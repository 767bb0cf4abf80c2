// `kiln bundle [--dir D] [NAME...]`: write bundles (manifest + PTX).
#include <filesystem>
#include <iostream>
#include <set>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

int WriteBundles(const std::vector<std::string>& args) {
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  const std::vector<std::string>& names = *named;
  const std::string dir = absl::GetFlag(FLAGS_dir);
  int with_findings = 0;  // kiln check runs on every kernel bundled: a finding fails the step
  for (const std::string& name : names) {
    std::vector<std::string> findings;
    absl::StatusOr<Bundle> b = GetBundle(name, &findings);
    if (!b.ok()) return Fail(b.status());
    if (absl::Status s = kiln::rt::WriteBundle(dir, *b); !s.ok()) return Fail(s);
    if (b->manifest.Attribute("planted")) continue;  // planted bugs are meant to be found
    for (const std::string& f : findings) std::cerr << "kiln check: " << name << ": " << f << "\n";
    with_findings += findings.empty() ? 0 : 1;
  }
  std::cerr << "kiln: wrote " << names.size() << " bundles to " << dir << "\n";
  if (with_findings) {
    std::cerr << "kiln: " << with_findings << " kernels have static findings (kiln check)\n";
    return 1;
  }
  if (args.empty() && Compiling()) {
    // The directory mirrors the registry: drop bundles (a manifest that parses, and its PTX) of
    // kernels no longer registered. Nothing else in the directory is touched.
    absl::StatusOr<std::vector<std::string>> present = kiln::rt::ListBundles(dir);
    if (!present.ok()) {  // the bundles were written; only the tidying is skipped
      std::cerr << "kiln: not removing stale bundles from " << dir << ": "
                << present.status().message() << "\n";
      return 0;
    }
    const std::set<std::string> keep(names.begin(), names.end());
    int removed = 0;
    for (const std::string& name : *present) {
      if (keep.count(name)) continue;
      std::error_code ec;
      for (const char* ext : {".manifest", ".ptx"})
        std::filesystem::remove(absl::StrCat(dir, "/", kiln::rt::BundleStem(name), ext), ec);
      ++removed;
    }
    if (removed)
      std::cerr << "kiln: removed " << removed << " bundles of kernels no longer registered\n";
  }
  return 0;
}

}  // namespace kiln::cli
