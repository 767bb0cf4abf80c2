// Hostile inputs for the loaders: seeded random mutations (flipped, dropped, repeated, inserted
// bytes, truncation) of real bundles' manifests and PTX and of a tuning table, each fed to its
// parser. Every case must end in a value or an absl::Status: no crash, no hang, no read out of
// bounds (run under AddressSanitizer by the sanitizer job). The count and time go to the log.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "emulator/ptx.h"
#include "gtest/gtest.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm_table.h"

namespace kiln {
// The seeds: tests/data/fuzz/*, compiled in by tests/CMakeLists.txt ({name, text}, then nulls).
extern const char* const kFuzzSeeds[][2];

namespace {

std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = rng() % s.size(), span = 1 + rng() % std::min<size_t>(16, s.size() - at);
    switch (rng() % 6) {
      case 0: s[at] = static_cast<char>(rng()); break;                      // a flipped byte
      case 1: s.erase(at, span); break;                                     // dropped bytes
      case 2: s.insert(at, s.substr(at, span)); break;                      // repeated bytes
      case 3: s.insert(at, 1, " \n:*/,0-9x"[rng() % 10]); break;            // a separator
      case 4: s.resize(at); break;                                          // truncated
      case 5: s.replace(at, span, std::to_string(static_cast<int64_t>(rng()))); break;  // a number
    }
  }
  return s;
}

std::vector<std::string> SeedsEndingIn(const std::string& suffix) {
  std::vector<std::string> seeds;
  for (int i = 0; kFuzzSeeds[i][0]; ++i) {
    const std::string name = kFuzzSeeds[i][0];
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(),
                                                     suffix) == 0)
      seeds.push_back(kFuzzSeeds[i][1]);
  }
  return seeds;
}

// Runs `parse` on `cases` mutations of the seeds; returns how many parsed.
template <typename Parse>
int Fuzz(const char* what, const std::vector<std::string>& seeds, int cases, const Parse& parse) {
  std::mt19937_64 rng(20261128);
  const auto start = std::chrono::steady_clock::now();
  int parsed = 0;
  for (const std::string& seed : seeds) EXPECT_TRUE(parse(seed)) << what << ": a seed must parse";
  for (int i = 0; i < cases; ++i) parsed += parse(Mutate(seeds[i % seeds.size()], rng));
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz %s: %d cases in %.1f s, %d parsed, %d refused with a status\n", what, cases, s,
              parsed, cases - parsed);
  return parsed;
}

TEST(Fuzz, ManifestsParseOrAreRefused) {
  const std::vector<std::string> seeds = SeedsEndingIn(".manifest");
  ASSERT_FALSE(seeds.empty());
  Fuzz("manifest", seeds, 60000, [](const std::string& text) {
    absl::StatusOr<rt::Manifest> m = rt::Manifest::Parse(text);
    if (m.ok()) (void)m->Serialize();
    return m.ok();
  });
}

TEST(Fuzz, PtxParsesOrIsRefused) {
  const std::vector<std::string> seeds = SeedsEndingIn(".ptx");
  ASSERT_FALSE(seeds.empty());
  Fuzz("ptx", seeds, 20000,
       [](const std::string& text) { return emu::ptx::Parse(text).ok(); });
}

TEST(Fuzz, TuningTablesParseOrAreRefused) {
  const std::vector<std::string> seeds = SeedsEndingIn(".tune");
  ASSERT_FALSE(seeds.empty());
  Fuzz("tune table", seeds, 30000, [](const std::string& text) {
    return rt::GemmTuneCache::Parse(text, "fuzz.tune").ok();
  });
}

// A disk-cache entry (tests/unit/compile_test.cc has the cache's own tests) is a bundle directory
// the compile cache reads with rt::ReadBundle before it checks the PTX's hash: damaged entries
// (either file mutated, truncated, emptied or missing) read back or are refused with a status.
TEST(Fuzz, DiskCacheEntriesReadOrAreRefused) {
  const std::vector<std::string> manifests = SeedsEndingIn(".manifest"), ptx = SeedsEndingIn(".ptx");
  ASSERT_FALSE(manifests.empty());
  ASSERT_FALSE(ptx.empty());
  const std::string dir = ::testing::TempDir() + "/kiln_fuzz_cache_entry";
  std::vector<std::string> entries;  // manifest, then PTX, joined by a NUL the cases keep apart
  for (size_t i = 0; i < manifests.size(); ++i)
    entries.push_back(manifests[i] + std::string(1, '\0') + ptx[i % ptx.size()]);
  absl::StatusOr<rt::Manifest> first = rt::Manifest::Parse(manifests[0]);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string name = first->name, stem = dir + "/" + rt::BundleStem(name);
  Fuzz("disk-cache entry", entries, 3000, [&](const std::string& entry) {
    const size_t cut = entry.find('\0');  // none left: the PTX file is missing
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(stem + ".manifest", std::ios::binary) << entry.substr(0, cut);
    if (cut != std::string::npos)
      std::ofstream(stem + ".ptx", std::ios::binary) << entry.substr(cut + 1);
    return rt::ReadBundle(dir, name).ok();
  });
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
