// The host API's compile step (kiln/compile.h): a kernel compiled once is read back from the disk
// cache, any change to the kernel is a new key, and a cache that cannot be used never fails a
// compile.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/compile.h"
#include "kiln/kernel.h"
#include "kiln/lowering.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// y = a * x over n elements; `scale` changes the kernel's IR.
KernelDef Scale(double scale) {
  Kernel k("test/scale", sm80(), {128});
  Value x = k.PtrParam("x", f32), y = k.PtrParam("y", f32);
  Value n = k.I32Param("n");
  k.Grid("n/128");
  Value i = k.BlockIdx() * 128 + k.ThreadIdx();
  k.If(i < n, [&] { k.Store(y + i, k.Load(x + i) * scale); });
  absl::StatusOr<KernelDef> def = k.Build();
  EXPECT_TRUE(def.ok()) << def.status();
  return *std::move(def);
}

class CompileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("kiln-cache-test-" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CompileOptions Options() const { return {.cache_dir = dir_}; }
  std::string dir_;
};

TEST_F(CompileCache, SecondCompileReadsTheFirstOnesPtx) {
  absl::StatusOr<CompiledKernel> cold = Compile(Scale(2.0), Options());
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_FALSE(cold->from_cache);
  EXPECT_TRUE(cold->cache_warning.empty()) << cold->cache_warning;
  EXPECT_NE(cold->bundle.ptx.find(".entry test_scale"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(fs::path(dir_) / cold->key));

  absl::StatusOr<CompiledKernel> warm = Compile(Scale(2.0), Options());
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_TRUE(warm->from_cache);
  EXPECT_EQ(warm->key, cold->key);
  EXPECT_EQ(warm->bundle.ptx, cold->bundle.ptx);
  EXPECT_EQ(warm->bundle.manifest.Serialize(), cold->bundle.manifest.Serialize());
}

TEST_F(CompileCache, AChangedKernelIsANewKey) {
  absl::StatusOr<CompiledKernel> a = Compile(Scale(2.0), Options());
  absl::StatusOr<CompiledKernel> b = Compile(Scale(3.0), Options());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE(b->from_cache);
  EXPECT_NE(a->bundle.ptx, b->bundle.ptx);
  EXPECT_EQ(CacheKey(Scale(3.0)), b->key);
}

TEST_F(CompileCache, ADamagedEntryIsCompiledAgain) {
  absl::StatusOr<CompiledKernel> cold = Compile(Scale(2.0), Options());
  ASSERT_TRUE(cold.ok());
  for (const auto& f : fs::directory_iterator(fs::path(dir_) / cold->key))
    if (f.path().extension() == ".ptx") std::ofstream(f.path(), std::ios::trunc);  // emptied
  absl::StatusOr<CompiledKernel> again = Compile(Scale(2.0), Options());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->bundle.ptx, cold->bundle.ptx);
}

// A PTX cut short (a crash mid-write elsewhere, a full disk) no longer matches its hash: the entry
// is built again and replaced, and the compile after that reads the whole one.
TEST_F(CompileCache, ATruncatedEntryIsRebuiltAndReplaced) {
  absl::StatusOr<CompiledKernel> cold = Compile(Scale(2.0), Options());
  ASSERT_TRUE(cold.ok());
  for (const auto& f : fs::directory_iterator(fs::path(dir_) / cold->key))
    if (f.path().extension() == ".ptx") fs::resize_file(f.path(), cold->bundle.ptx.size() / 2);
  absl::StatusOr<CompiledKernel> again = Compile(Scale(2.0), Options());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->bundle.ptx, cold->bundle.ptx);
  absl::StatusOr<CompiledKernel> warm = Compile(Scale(2.0), Options());
  ASSERT_TRUE(warm.ok());
  EXPECT_TRUE(warm->from_cache);
  EXPECT_EQ(warm->bundle.ptx, cold->bundle.ptx);
}

// Seeded damage to one file of an entry (a byte changed, the file cut short, bytes appended):
// whatever the cache reads back is this kernel's bundle, whole, or the kernel is compiled again;
// never a crash (this test also runs under ASan and UBSan) nor another bundle.
TEST_F(CompileCache, ARandomlyDamagedEntryNeverLoadsAnotherBundle) {
  absl::StatusOr<CompiledKernel> cold = Compile(Scale(2.0), Options());
  ASSERT_TRUE(cold.ok());
  std::mt19937_64 rng(42);
  int rebuilt = 0;
  constexpr int kCases = 100;
  for (int n = 0; n < kCases; ++n) {
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(fs::path(dir_) / cold->key)) files.push_back(f.path());
    ASSERT_FALSE(files.empty());
    std::sort(files.begin(), files.end());
    const fs::path file = files[rng() % files.size()];
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    switch (rng() % 3) {
      case 0:
        if (!bytes.empty()) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1: bytes.resize(bytes.empty() ? 0 : rng() % bytes.size()); break;
      default: for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(rng())); break;
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    absl::StatusOr<CompiledKernel> again = Compile(Scale(2.0), Options());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->bundle.ptx, cold->bundle.ptx) << file << " case " << n;
    EXPECT_EQ(again->bundle.manifest.Serialize(), cold->bundle.manifest.Serialize()) << file << " case " << n;
    rebuilt += again->from_cache ? 0 : 1;
  }
  EXPECT_GT(rebuilt, kCases / 2);  // most damage is seen and the entry rebuilt
}

TEST_F(CompileCache, AnUnusableCacheOnlyWarns) {
  std::ofstream(dir_) << "a file where the cache directory should be";
  absl::StatusOr<CompiledKernel> c = Compile(Scale(2.0), Options());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->from_cache);
  EXPECT_NE(c->cache_warning.find(dir_), std::string::npos) << c->cache_warning;
  EXPECT_FALSE(c->bundle.ptx.empty());
}

// Compile's PTX carries line tables by default (the emulator's and the watchdog's messages name
// the building program's lines); without them it is EmitPtx's, under another key.
TEST_F(CompileCache, LineTablesByDefaultUnderTheirOwnKey) {
  absl::StatusOr<CompiledKernel> with = Compile(Scale(2.0), Options());
  CompileOptions plain = Options();
  plain.line_info = false;
  absl::StatusOr<CompiledKernel> without = Compile(Scale(2.0), plain);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_NE(with->bundle.ptx.find(".loc"), std::string::npos);
  EXPECT_NE(with->bundle.ptx.find("tests/unit/compile_test.cc"), std::string::npos);
  EXPECT_EQ(without->bundle.ptx.find(".loc"), std::string::npos);
  EXPECT_NE(with->key, without->key);
  EXPECT_FALSE(without->from_cache);
  absl::StatusOr<std::string> plain_ptx = EmitPtx(Scale(2.0));
  ASSERT_TRUE(plain_ptx.ok());
  EXPECT_EQ(without->bundle.ptx, *plain_ptx);
}

TEST_F(CompileCache, NoDirectoryMeansNoCache) {
  CompileOptions none{.cache_dir = ""};
  absl::StatusOr<CompiledKernel> a = Compile(Scale(2.0), none);
  absl::StatusOr<CompiledKernel> b = Compile(Scale(2.0), none);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->from_cache);
  EXPECT_FALSE(b->from_cache);
  EXPECT_FALSE(fs::exists(dir_));
}

TEST(CompileCacheDir, FollowsTheEnvironment) {
  setenv("KILN_CACHE_DIR", "/tmp/somewhere", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/somewhere");
  setenv("KILN_CACHE_DIR", "", 1);
  EXPECT_EQ(DefaultCacheDir(), "");  // set but empty: no cache
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(DefaultCacheDir(), "/tmp/xdg/kiln");
  unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace kiln
