// GEMM tuning tables (kiln/ops/gemm_table.h): the built-in ones parse and cover every tile
// kernel, a bad line is an error naming it, the choice rule reads a table's figures, and a table
// written back keeps its records.
#include "kiln/ops/gemm_table.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/ops/gemm_choice.h"
#include "kiln/ops/gemm_tiles.h"

namespace kiln::rt {
namespace {

constexpr const char* kModel =
    "sm_90 model weight_bound_rows=128 partial_cost=8 stream_bytes_per_us=3e6 "
    "stream_cap_bytes_per_us=2.6e6 idle_latency_us=1 launch_us=5 partial_us=4\n";

TEST(GemmTable, BuiltInTablesParseAndWeighEveryTileKernel) {
  ASSERT_TRUE(GemmTuneCache::BuiltInStatus().ok()) << GemmTuneCache::BuiltInStatus();
  const GemmRules* sm90 = GemmTuneCache::BuiltIn().Rules(90);
  ASSERT_NE(sm90, nullptr);
  ASSERT_TRUE(sm90->model.has_value());
  for (const Sm90Tile& t : kSm90Tiles) {
    bool weighed = false;
    for (const TileWeights& w : sm90->tiles) weighed |= w.kernel == t.kernel;
    EXPECT_TRUE(weighed) << t.kernel << " has no tile record in ops/gemm/tables/sm_90.tune";
  }
  EXPECT_FALSE(sm90->regions.empty());
  ASSERT_NE(GemmTuneCache::BuiltIn().Rules(80), nullptr);  // the table for GPUs without their own
  EXPECT_EQ(GemmTuneCache::BuiltIn().Rules(75), nullptr);
}

// Each bad record is an error naming the table, the line and what is wrong.
// The plan checks a tune table's pick with IsGemmCandidate, which must say what GemmCandidates
// lists (both walk one generator, stopping at the first match): every listed kernel and split,
// and nothing else, over sizes that reach each branch; and a few answers by name.
TEST(GemmTable, IsGemmCandidateAgreesWithTheList) {
  std::vector<std::string> names = {"gemm/bf16_strided", "gemm/bf16_skinny",
                                    "gemm/bf16_skinny_sm90", "gemm/bf16_sm90_n128c2"};
  for (const Sm90Tile& t : kSm90Tiles) names.push_back(t.kernel);
  for (const char* k : kRegionKernels) names.push_back(k);
  int listed = 0;
  for (int cc : {80, 90, 100})
    for (int64_t m : {1, 3, 16, 17, 64, 65, 128, 256, 4096})
      for (int64_t n : {64, 2112, 4096, 28672})
        for (int64_t k : {12, 64, 4096, 16384}) {
          const GemmSize s{m, n, k};
          const std::vector<GemmChoice> list = GemmCandidates(s, cc);
          for (const std::string& name : names)
            for (int split : {1, 0, 2, 3, 4, 8, 16}) {
              const bool in_list = std::any_of(list.begin(), list.end(), [&](const GemmChoice& c) {
                return c.kernel == name && c.split == split;
              });
              listed += in_list;
              EXPECT_EQ(IsGemmCandidate(s, cc, name, split), in_list)
                  << name << " split " << split << " at " << m << "x" << n << "x" << k << " sm_"
                  << cc;
            }
        }
  EXPECT_GT(listed, 1000);  // (the sizes reach the lists' kernels)
  EXPECT_TRUE(IsGemmCandidate({4096, 4096, 4096}, 90, "gemm/bf16_sm90_n128", 1));
  EXPECT_FALSE(IsGemmCandidate({4096, 4096, 4096}, 90, "gemm/bf16_skinny_sm90", 1));
  EXPECT_TRUE(IsGemmCandidate({16, 4096, 4096}, 90, "gemm/bf16_mma16_sm90", 1));
  EXPECT_FALSE(IsGemmCandidate({16, 4096, 4096}, 90, "gemm/bf16_mma16_sm90", 2));
  EXPECT_TRUE(IsGemmCandidate({64, 64, 12}, 90, "gemm/bf16_strided", 1));  // K % 8: strided alone
  EXPECT_FALSE(IsGemmCandidate({64, 64, 64}, 90, "gemm/bf16_strided", 1));
}

TEST(GemmTable, BadRecordsNameTheirLine) {
  const struct {
    std::string text, says;
  } cases[] = {
      {"sm_90 tile gemm/bf16_sm90 sped=1\n", "'sped=1' is no key=value"},
      {"sm_90 tile gemm/bf16_sm90 speed_unaligned=1\n", "needs speed="},
      {"sm_90 tile gemm/bf16_sm90 speed=fast\n", "not a value for speed"},
      {"sm_90 tile gemm/bf16_sm90_n200 speed=1\n", "no tile kernel of sm_90"},
      {"sm_80 tile gemm/bf16_sm90 speed=1\n", "no tile kernel of sm_80"},
      {"sm_90 tile gemm/bf16_sm90 speed=1\nsm_90 tile gemm/bf16_sm90 speed=1\n", "weighed twice"},
      {"sm_90 region gemm/bf16_skinny_sm90 m=4:2\n", "not a value for m"},
      {"sm_90 region gemm/bf16_sm90 m=1:4\n", "none of the kernels a region can name"},
      {"sm_90 region gemm/bf16_skinny_sm90 only=a_mn\n", "not a value for only"},
      {std::string(kModel) + kModel, "a second model record"},
      {"sm_90 model partial_cost=8\n",
       "needs idle_latency_us=..., launch_us=..., partial_us=..., stream_bytes_per_us=..., "
       "stream_cap_bytes_per_us=..., weight_bound_rows=..."},
      {"sm_90 nonsense\n", "not 'sm_<cc> M N K kernel split ms'"},
      {"sm_90 fp8 blockwise_x 128 7168 16384 gemm/bf16_sm90_m64 1 0.05\n",
       "not 'sm_<cc> fp8 tensorwise|rowwise|blockwise|blockwise_t|blockwise.c_row M N K"},
      {"sm_90 fp8 tensorwise 128 7168 16384 gemm/bf16_sm90_m64 1\n", "not 'sm_<cc> fp8"},
      {"gpu tile gemm/bf16_sm90 speed=1\n", "a record starts sm_<cc>"},
      // (a time that wins every comparison or none, a size no call has)
      {"sm_90 256 256 256 gemm/bf16_sm90 1 nan\n", "ms a positive finite time"},
      {"sm_90 256 256 256 gemm/bf16_sm90 1 0\n", "ms a positive finite time"},
      {"sm_90 -256 256 256 gemm/bf16_sm90 1 0.01\n", "M, N, K must be at least 1"},
      {"sm_90 fp8 tensorwise 128 7168 16384 gemm/bf16_sm90_m64 1 inf\n", "positive finite"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<GemmTuneCache> t = GemmTuneCache::Parse("# a comment\n" + c.text, "t.tune");
    ASSERT_FALSE(t.ok()) << c.text;
    const std::string message(t.status().message());
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_TRUE(message.rfind("t.tune:2: ", 0) == 0 || message.rfind("t.tune:3: ", 0) == 0)
        << message;
  }
}

// A tune cache's entry that cannot run the call (a kernel not among the size's candidates) is
// not taken, and the choice says so rather than dropping it without a word; a directory named as
// the cache is refused.
TEST(GemmTable, AnEntryThatCannotRunIsNamedInTheChoice) {
  absl::StatusOr<GemmTuneCache> t =
      GemmTuneCache::Parse("sm_90 256 256 256 gemm/nosuch 1 0.0100\n", "t.tune");
  ASSERT_TRUE(t.ok()) << t.status();
  const GemmChoice c = ChooseGemm({256, 256, 256}, 90, {}, &*t);
  EXPECT_NE(c.kernel, "gemm/nosuch");
  EXPECT_NE(c.why.find("the tune cache's entry here (gemm/nosuch"), std::string::npos) << c.why;
  EXPECT_NE(GemmTuneCache::Read(::testing::TempDir()).status().message().find("is a directory"),
            absl::string_view::npos);
  // A candidate kernel at a split kiln tune does not time: the split is named as what is off.
  absl::StatusOr<GemmTuneCache> split =
      GemmTuneCache::Parse("sm_90 4096 4096 4096 gemm/bf16_sm90 3 0.0100\n", "t.tune");
  ASSERT_TRUE(split.ok()) << split.status();
  const GemmChoice s = ChooseGemm({4096, 4096, 4096}, 90, {}, &*split);
  EXPECT_NE(s.why.find("(gemm/bf16_sm90, split-K 3) is not among the splits kiln tune times for it "
                       "here (whole tiles"),
            std::string::npos)
      << s.why;
}

// A file of one tile line, given at run time, changes the built-in rule by that line: the model
// and the other tiles stay (it had replaced the rule, which then had no model, and every size fell
// to the strided kernel as if nothing were tuned).
TEST(GemmTable, AFileOfOneLineAddsToTheBuiltInRule) {
  const std::string path = ::testing::TempDir() + "/kiln_one_line.tune";
  std::ofstream(path) << "sm_90 tile gemm/bf16_sm90 speed=1.0 speed_unaligned=1.0\n";
  absl::StatusOr<GemmTuneCache> t = GemmTuneCache::Read(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE(t->Rules(90), nullptr);
  EXPECT_TRUE(t->Rules(90)->model.has_value());
  EXPECT_EQ(ChooseGemm({2048, 2048, 64}, 90, {}, &*t).kernel,
            ChooseGemm({2048, 2048, 64}, 90).kernel);
  EXPECT_EQ(ChooseGemm({4096, 4096, 4096}, 90, {}, &*t).kernel, "gemm/bf16_sm90");
  std::remove(path.c_str());
}

// A table with records for the GPU replaces the built-in ones: its figures decide.
TEST(GemmTable, TheRuleReadsTheTablesFigures) {
  const GemmSize square{4096, 4096, 4096};
  ASSERT_EQ(ChooseGemm(square, 90).kernel, "gemm/bf16_sm90");
  // The built-in table's measured lines win at their sizes (DeepGEMM's N 2112, K 7168).
  EXPECT_EQ(ChooseGemm({64, 2112, 7168}, 90).kernel, "gemm/bf16_k128n32_sm90");
  EXPECT_EQ(ChooseGemm({128, 2112, 7168}, 90).split, 2);
  auto choose = [&](const std::string& text, const GemmSize& s, const GemmOptions& o = {}) {
    absl::StatusOr<GemmTuneCache> t = GemmTuneCache::Parse(text, "t.tune");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? ChooseGemm(s, 90, o, &*t) : GemmChoice{};
  };
  const std::string two =
      std::string(kModel) +
      "sm_90 tile gemm/bf16_sm90 speed=1.0 speed_unaligned=1.0\n"
      "sm_90 tile gemm/bf16_sm90_n128 speed=SPEED speed_unaligned=0.5 weight_bound=1\n";
  auto with_speed = [&](const std::string& speed) {
    std::string text = two;
    text.replace(text.find("SPEED"), 5, speed);
    return text;
  };
  EXPECT_EQ(choose(with_speed("0.9"), square).kernel, "gemm/bf16_sm90");
  EXPECT_EQ(choose(with_speed("1.5"), square).kernel, "gemm/bf16_sm90_n128");
  // A region takes its kernel outright, where the kernel reads the operands as given.
  const std::string skinny = with_speed("0.9") + "sm_90 region gemm/bf16_skinny_sm90 m=1:64\n";
  EXPECT_EQ(choose(with_speed("0.9"), {32, 4096, 4096}).kernel.find("skinny"), std::string::npos);
  EXPECT_EQ(choose(skinny, {32, 4096, 4096}).kernel, "gemm/bf16_skinny_sm90");
  EXPECT_EQ(choose(skinny, {32, 4096, 4096}, {.b_mn = true}).kernel.find("skinny"),
            std::string::npos);  // it reads K-major B only
  // The bandwidth model's constants: past weight_bound_rows the compute model, whose speeds here
  // favour the 128x128 tiles.
  std::string bound = with_speed("1.5");
  bound.replace(bound.find("weight_bound_rows=128"), 21, "weight_bound_rows=0");
  EXPECT_NE(choose(with_speed("1.5"), {64, 4096, 4096}).why.find("weight read"), std::string::npos);
  EXPECT_EQ(choose(bound, {64, 4096, 4096}).why.find("weight read"), std::string::npos);
  // Without tiles for the GPU, the strided kernel; a table for another GPU leaves sm_90's alone.
  EXPECT_EQ(choose("sm_90 region gemm/bf16_skinny_sm90 m=1:2\n", square).kernel,
            "gemm/bf16_strided");
  EXPECT_EQ(choose("sm_80 region gemm/bf16_skinny m=1:2\n", square).kernel, "gemm/bf16_sm90");
  // A measured entry naming the pairs sharing B stands only where the call needs no variant of
  // theirs but the plain one, which is all that is bundled of them for bf16 and f16 inputs
  // (docs/perf/2026-12-03-split-partials-in-a-tree.md).
  const std::string pairs = with_speed("0.9") + "sm_90 256 256 65536 gemm/bf16_sm90_n128c2 16 0.0410\n";
  EXPECT_EQ(choose(pairs, {256, 256, 65536}).why.rfind("the fastest kiln tune measured", 0), 0u);
  EXPECT_EQ(choose(pairs, {256, 256, 65536}, {.epilogue = "relu"}).kernel.find("n128c2"), std::string::npos);
}

// kiln tune's fitted speeds: at 4096x4096x4096 both the 256x256 pairs and the 128x128 tiles fill
// whole waves, so a tile's fitted speed is the widest's time over its own.
TEST(GemmTable, FittedSpeedIsTheModelsSpeedForTheMeasuredTime) {
  const GemmSize square{4096, 4096, 4096};
  std::optional<double> same = FittedTileSpeed(square, 90, "gemm/bf16_sm90", 1.0, 1.0);
  ASSERT_TRUE(same.has_value());
  EXPECT_DOUBLE_EQ(*same, 1.0);
  std::optional<double> n128 = FittedTileSpeed(square, 90, "gemm/bf16_sm90_n128", 1.0 / 0.9, 1.0);
  ASSERT_TRUE(n128.has_value());
  EXPECT_NEAR(*n128, 0.9, 1e-12);
  // 128x80 tiles pad N = 4096 to 4160: the model knows, so the same time fits a higher speed.
  std::optional<double> n80 = FittedTileSpeed(square, 90, "gemm/bf16_sm90_n80", 1.0 / 0.9, 1.0);
  ASSERT_TRUE(n80.has_value());
  EXPECT_GT(*n80, 0.9);
  EXPECT_FALSE(FittedTileSpeed({64, 4096, 4096}, 90, "gemm/bf16_sm90_n128", 1, 1));  // weight-bound
  EXPECT_FALSE(FittedTileSpeed(square, 90, "gemm/bf16_mma16_sm90", 1, 1));           // no tile
  EXPECT_FALSE(FittedTileSpeed(square, 80, "gemm/bf16_sm90_n128", 1, 1));  // no tiles there
}

// kiln tune rewrites a table: its comments and records stay, measured lines follow, and
// rewriting is stable.
TEST(GemmTable, WrittenBackKeepsRecordsAndComments) {
  const std::string path = ::testing::TempDir() + "/kiln_table_test.tune";
  std::remove(path.c_str());
  absl::StatusOr<GemmTuneCache> t = GemmTuneCache::Parse(
      std::string("# why these figures\n") + kModel +
          "sm_90 tile gemm/bf16_sm90 speed=1\nsm_90 region gemm/bf16_tma8_sm90 m=3:8\n",
      "t.tune");
  ASSERT_TRUE(t.ok()) << t.status();
  t->Set(90, {64, 4096, 4096}, "gemm/bf16_sm90_m64", 2, 0.05);
  t->SetFp8(90, "blockwise_t", {7168, 128, 16384}, "gemm/bf16_sm90_n128", 2, 0.0559);
  ASSERT_TRUE(t->Write(path).ok());
  absl::StatusOr<GemmTuneCache> back = GemmTuneCache::Read(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_NE(back->Rules(90), nullptr);
  // Read from a file, the records add to the built-in table's: the given model, tile weights in
  // place of the same kernel's, the given region first.
  const GemmRules& built_in = *GemmTuneCache::BuiltIn().Rules(90);
  EXPECT_EQ(back->Rules(90)->tiles.size(), built_in.tiles.size());
  EXPECT_EQ(back->Rules(90)->regions.size(), built_in.regions.size() + 1);
  EXPECT_EQ(back->Rules(90)->regions.front().kernel, "gemm/bf16_tma8_sm90");
  EXPECT_EQ(back->Rules(90)->regions.front().m.hi, 8);
  EXPECT_EQ(back->Rules(90)->model->stream_cap_bytes_per_us, 2.6e6);
  for (const TileWeights& w : back->Rules(90)->tiles)
    if (w.kernel == "gemm/bf16_sm90") EXPECT_EQ(w.speed, 1);
  ASSERT_NE(back->Find(90, {64, 4096, 4096}), nullptr);
  EXPECT_EQ(back->Find(90, {64, 4096, 4096})->split, 2);
  // The 8-bit entry apart from the 16-bit ones: its scaling is part of its key.
  const GemmChoice* fp8 = back->FindFp8(90, "blockwise_t", {7168, 128, 16384});
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(fp8->kernel, "gemm/bf16_sm90_n128");
  EXPECT_EQ(fp8->split, 2);
  EXPECT_EQ(back->FindFp8(90, "tensorwise", {7168, 128, 16384}), nullptr);
  EXPECT_EQ(back->Find(90, {7168, 128, 16384}), nullptr);
  auto text = [](const std::string& p) {
    std::stringstream s;
    s << std::ifstream(p).rdbuf();
    return s.str();
  };
  const std::string once = text(path);
  EXPECT_EQ(once.rfind("# why these figures\n", 0), 0u) << once;
  ASSERT_TRUE(back->Write(path).ok());
  EXPECT_EQ(text(path), once);
}

}  // namespace
}  // namespace kiln::rt
