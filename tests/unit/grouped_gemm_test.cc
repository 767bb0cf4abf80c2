// Grouped GEMMs (kiln/ops/grouped_gemm.h) on the emulator at small ragged sizes, both layouts and
// both tiles: unequal groups, an empty group, one-token groups, rows no group owns (which must stay
// unwritten), against the harness's fp64 product; and the entry point's errors.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "ops/gemm/grouped_check.h"
#include "tests/unit/built_bundle.h"

namespace kiln::examples {
namespace {

void ExpectCorrect(const GroupedGemmProblem& p) {
  absl::StatusOr<GroupedGemmResult> r = RunGroupedGemmEmulated(BuiltBundle, p, 11);
  const std::string what =
      absl::StrCat(p.in_type, " ", rt::GroupedLayoutName(p.layout), " groups {",
                   absl::StrJoin(p.tokens, ","), "} N ", p.n, " K ", p.k, " ", p.kernel);
  ASSERT_TRUE(r.ok()) << what << ": " << r.status();
  EXPECT_TRUE(r->passed) << what << " (" << r->kernel << "): " << r->failure;
}

// Groups that end mid-tile (their last tile stored from registers, the whole ones through C's
// map), one empty, one of a token; N past one 128-row tile of w (the next expert's rows read, never
// stored); K with a partial 64-wide k-tile; spare rows after the last.
TEST(GroupedGemm, ContiguousUnequalGroups) {
  for (const char* kernel : {"gemm/grouped_sm90", "gemm/grouped_sm90_n64"})
    ExpectCorrect(
        {.tokens = {70, 0, 1, 300, 9}, .n = 136, .k = 88, .spare_rows = 5, .kernel = kernel});
}

// More groups than threads (each counts two), most empty, the rest of one token: more units than
// CTAs, so each walks several, its ring running on across groups, in bands of column tiles (the
// last one narrower).
TEST(GroupedGemm, ManyGroupsSeveralUnitsPerCta) {
  std::vector<int64_t> tokens(400, 0);
  for (size_t e = 0; e < tokens.size(); e += 3) tokens[e] = 1;
  ExpectCorrect({.tokens = tokens, .n = 136, .k = 64, .kernel = "gemm/grouped_sm90_n64"});
}

// Decode's fixed blocks: counts below the capacity, zero and full; the rows past a count unwritten.
TEST(GroupedGemm, MaskedCounts) {
  for (const char* kernel : {"gemm/grouped_masked_sm90", "gemm/grouped_masked_sm90_n64"})
    ExpectCorrect({.tokens = {3, 0, 72, 1},
                   .n = 72,
                   .k = 64,
                   .layout = rt::GroupedLayout::kMasked,
                   .capacity = 72,
                   .kernel = kernel});
}

// e4m3 with DeepGEMM's scales (the weights per 128 x 128 of each expert, the tokens per 1 x 128):
// each group's weights their own scale blocks, K of two blocks and a part, the same ragged groups;
// N of three 128-row blocks, so that a pair's second tile lies past N (its scales read inside).
TEST(GroupedGemm, Fp8BlockScaled) {
  for (const char* kernel : {"gemm/grouped_fp8_sm90", "gemm/grouped_fp8_sm90_n64"})
    ExpectCorrect({.tokens = {70, 0, 1, 150, 9},
                   .n = 384,
                   .k = 272,
                   .spare_rows = 3,
                   .in_type = "e4m3",
                   .kernel = kernel});
  ExpectCorrect({.tokens = {5, 0, 64},
                 .n = 128,
                 .k = 144,
                 .layout = rt::GroupedLayout::kMasked,
                 .capacity = 64,
                 .in_type = "e4m3"});
}

TEST(GroupedGemm, ErrorsNameTheProblem) {
  auto message = [](const rt::GroupedGemmSize& s, rt::GroupedGemmOptions o = {}) {
    absl::StatusOr<std::string> k = rt::ChooseGroupedKernel(s, o);
    return k.ok() ? std::string("ok") : std::string(k.status().message());
  };
  EXPECT_NE(message({.rows = 8, .n = 8, .k = 12, .groups = 2}).find("multiples of 8"),
            std::string::npos);
  EXPECT_NE(message({.rows = 8, .n = 12, .k = 8, .groups = 2}).find("N 12"), std::string::npos);
  EXPECT_NE(message({.rows = 8, .n = 8, .k = 8, .groups = 0}).find("groups must be 1 to"),
            std::string::npos);
  EXPECT_NE(
      message({.rows = 9, .n = 8, .k = 8, .groups = 2}, {.layout = rt::GroupedLayout::kMasked})
          .find("a multiple of 2"),
      std::string::npos);
  EXPECT_NE(message({.rows = 8, .n = 8, .k = 8, .groups = 2},
                    {.layout = rt::GroupedLayout::kMasked, .kernel = "gemm/grouped_sm90"})
                .find("no masked bf16 kernel 'gemm/grouped_sm90'"),
            std::string::npos);
  EXPECT_EQ(message({.rows = 4096, .n = 8, .k = 8, .groups = 128}), "ok");
  EXPECT_NE(
      message({.rows = 8, .n = 192, .k = 32, .groups = 2}, {.in_type = "e4m3"}).find("N of 128"),
      std::string::npos);
  EXPECT_NE(message({.rows = 8, .n = 8, .k = 8, .groups = 2}, {.in_type = "e5m2"})
                .find("in_type must be bf16 or e4m3"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::examples
