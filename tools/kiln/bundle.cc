// `kiln bundle [--dir D] [--shard I/N | --prune] [NAME...]`: write bundles (manifest + PTX).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {
namespace {

struct Shard {
  int index = 0;
  int count = 1;
};

absl::StatusOr<Shard> ParseShard(const std::string& text) {
  if (text.empty()) return Shard{};
  std::vector<std::string> p = absl::StrSplit(text, '/');
  Shard s;
  if (p.size() != 2 || !absl::SimpleAtoi(p[0], &s.index) || !absl::SimpleAtoi(p[1], &s.count) ||
      s.count < 1 || s.index < 0 || s.index >= s.count)
    return absl::InvalidArgumentError(
        absl::StrCat("--shard ", text, ": give I/N with 0 <= I < N, e.g. 0/2"));
  return s;
}

// The directory mirrors the registry: drop bundles (a manifest that parses, and its PTX) of
// kernels no longer registered, in the families kiln registers (the name before its '/': gemm,
// attention, ops, ...). A bundle of another family (a user's own kernel) and anything else in the
// directory is left (a manifest that does not parse is named). False where the directory could not
// be read.
bool DropStale(const std::string& dir, const std::vector<std::string>& registered) {
  std::vector<std::string> unreadable;
  absl::StatusOr<std::vector<std::string>> present = kiln::rt::ListBundles(dir, &unreadable);
  for (const std::string& u : unreadable) std::cerr << "kiln: left as it is: " << u << "\n";
  if (!present.ok()) {
    std::cerr << "kiln: not removing stale bundles from " << dir << ": "
              << present.status().message() << "\n";
    return false;
  }
  const std::set<std::string> keep(registered.begin(), registered.end());
  auto family = [](const std::string& name) { return name.substr(0, name.find('/')); };
  std::set<std::string> families;
  for (const std::string& name : registered) families.insert(family(name));
  int removed = 0;
  for (const std::string& name : *present) {
    if (keep.count(name) || !families.count(family(name))) continue;
    std::error_code ec;
    for (const char* ext : {".manifest", ".ptx"})
      std::filesystem::remove(absl::StrCat(dir, "/", kiln::rt::BundleStem(name), ext), ec);
    ++removed;
  }
  if (removed)
    std::cerr << "kiln: removed " << removed << (removed == 1 ? " bundle" : " bundles")
              << " of kernels no longer registered\n";
  return true;
}

// The family variants bundled in `dir` (a GEMM's other types or epilogues, which `kiln bundle
// NAME` wrote there and the registry does not list) are rewritten from today's builders, once
// every shard has written the registry's (so no shard races another over them), and kept by the
// pruning: none goes stale, and none is dropped that an error message had asked for. A variant
// its family no longer builds is dropped with its reason; another failure (the cache, the disk)
// leaves its files and warns; static findings are warnings (kiln check names them). Returns
// `registered` with the variants kept.
std::vector<std::string> RefreshVariants(const std::string& dir,
                                         std::vector<std::string> registered,
                                         const std::string& cache) {
#ifdef KILN_HAVE_COMPILER
  std::vector<std::string> unreadable;  // (named by DropStale, which leaves them)
  absl::StatusOr<std::vector<std::string>> present = kiln::rt::ListBundles(dir, &unreadable);
  if (!present.ok()) return registered;
  const std::set<std::string> listed(registered.begin(), registered.end());
  for (const std::string& name : *present) {
    if (listed.count(name) || !kiln::examples::Find(name)) continue;
    std::vector<std::string> findings;
    absl::StatusOr<Bundle> b = GetBundle(name, &findings, cache);
    if (!b.ok() && (absl::IsInvalidArgument(b.status()) || absl::IsNotFound(b.status()))) {
      std::cerr << "kiln: dropping " << name << " from " << dir << ": " << b.status().message()
                << "\n";
      std::error_code ec;
      for (const char* ext : {".manifest", ".ptx"})
        std::filesystem::remove(absl::StrCat(dir, "/", kiln::rt::BundleStem(name), ext), ec);
      continue;
    }
    absl::Status written = b.ok() ? kiln::rt::WriteBundle(dir, *b) : b.status();
    if (!written.ok())
      std::cerr << "kiln: " << name << " in " << dir << " left as it was: " << written.message()
                << "\n";
    for (const std::string& f : findings) std::cerr << "kiln check: " << name << ": " << f << "\n";
    registered.push_back(name);
  }
#endif
  return registered;
}

}  // namespace

int WriteBundles(const std::vector<std::string>& args) {
  absl::StatusOr<Shard> shard = ParseShard(absl::GetFlag(FLAGS_shard));
  if (!shard.ok()) return Fail(shard.status());
  const bool prune = absl::GetFlag(FLAGS_prune);
  if ((shard->count > 1 || prune) && !args.empty())
    return Fail(absl::InvalidArgumentError(
        "--shard and --prune work on the whole registry: name no kernel with them"));
  if (shard->count > 1 && prune)
    return Fail(absl::InvalidArgumentError("--shard writes and --prune drops: give one"));
  if ((shard->count > 1 || prune) && !Compiling())
    return Fail(absl::FailedPreconditionError(
        "--shard and --prune need the registry: this kiln reads --bundles, it compiles nothing"));
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty())
    return Fail(
        absl::InvalidArgumentError("kiln bundle: --dir is empty: name the directory to write"));
  // `kiln bundle --dir NAME` with the directory left out: the kernel's name became the directory
  // and the whole registry would go there.
  if (args.empty() && std::find(named->begin(), named->end(), dir) != named->end())
    return FailUsage(absl::InvalidArgumentError(
        absl::StrCat("kiln bundle: --dir ", dir,
                     " is a kernel's name, and no kernel is named: give the "
                     "directory first (kiln bundle --dir DIR ",
                     dir, "), or ./", dir, " to write every kernel there")));
  // --cache: kernels lower through the disk cache there, so that a build re-lowers only the
  // kernels that changed; no --cache lowers every one.
  const std::string cache = absl::GetFlag(FLAGS_cache) == "\x01" ? "" : absl::GetFlag(FLAGS_cache);
  if (prune)  // (pruning, with the variants' refresh, is the command's whole job)
    return DropStale(dir, RefreshVariants(dir, *std::move(named), cache)) ? 0 : 1;

  std::vector<std::string> names;
  for (size_t i = shard->index; i < named->size(); i += shard->count) names.push_back((*named)[i]);
  int with_findings = 0;  // kiln check runs on every kernel bundled: a finding fails the step
  for (const std::string& name : names) {
    std::vector<std::string> findings;
    absl::StatusOr<Bundle> b = GetBundle(name, &findings, cache);
    if (!b.ok()) return Fail(b.status());
    if (absl::Status s = kiln::rt::WriteBundle(dir, *b); !s.ok()) return Fail(s);
    if (b->manifest.Attribute("planted")) continue;  // planted bugs are meant to be found
    for (const std::string& f : findings) std::cerr << "kiln check: " << name << ": " << f << "\n";
    with_findings += findings.empty() ? 0 : 1;
  }
  std::cerr << "kiln: wrote " << names.size() << (names.size() == 1 ? " bundle" : " bundles")
            << " to " << dir << "\n";
  if (with_findings) {
    std::cerr << "kiln: " << with_findings << " kernels have static findings (kiln check)\n";
    return 1;
  }
  // A shard leaves the tidying to `--prune`: another shard may be writing the directory.
  // (The bundles were written: a directory it cannot tidy is a warning there.)
  if (args.empty() && shard->count == 1 && Compiling())
    DropStale(dir, RefreshVariants(dir, *std::move(named), cache));
  return 0;
}

}  // namespace kiln::cli
