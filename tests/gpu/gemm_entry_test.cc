// The host API's GEMM entry point (kiln/ops/gemm.h): its plans and errors here, and on a GPU
// (with KILN_BUNDLE_DIR) its results against an fp64 product computed in this file, through
// row- and column-major C, padded leading dimensions and epilogues.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/host_data.h"
#include "gtest/gtest.h"
#include "kiln/runtime/driver.h"
#include "kiln/ops/gemm.h"

namespace kiln::rt {
namespace {

constexpr cu::CUdeviceptr kAligned = 0x10000;  // a plausible device address, for plans only
const GemmOperands kPacked = {.a = kAligned, .b = kAligned, .c = kAligned};

std::string PlanError(const GemmSize& s, const GemmOptions& opt, const GemmOperands& o) {
  absl::StatusOr<GemmPlan> p = PlanGemm(s, opt, o, 90);
  return p.ok() ? "" : std::string(p.status().message());
}

TEST(GemmEntryPoint, PlansARowMajorCAsTheTransposedProduct) {
  GemmOperands o = kPacked;
  o.c_row_major = true;
  o.bias = kAligned;
  absl::StatusOr<GemmPlan> p = PlanGemm({128, 4096, 14336}, {.epilogue = "gelu,bias_row"}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->swapped);
  EXPECT_EQ(p->size.m, 4096);  // N x M as the kernel sees it
  EXPECT_EQ(p->size.n, 128);
  // The bias per row of C is per column of C^T.
  EXPECT_EQ(p->choice.kernel.substr(p->choice.kernel.find('.')), ".bf16-bf16.bias_col.gelu");
  absl::StatusOr<GemmPlan> col = PlanGemm({4096, 4096, 4096}, {}, kPacked, 90);
  ASSERT_TRUE(col.ok()) << col.status();
  EXPECT_FALSE(col->swapped);
  EXPECT_EQ(col->choice.kernel, "gemm/bf16_sm90");
}

// Up to 16 rows, the mma.sync kernel reads A and B in packed 16-byte chunks and stores C packed:
// with a padded operand the planner leaves it for a kernel that strides them.
TEST(GemmEntryPoint, TheMma16KernelOnlyOverPackedOperands) {
  absl::StatusOr<GemmPlan> p = PlanGemm({16, 3072, 4096}, {}, kPacked, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_mma16_sm90");
  for (GemmOperands o : {GemmOperands{.a = kAligned, .b = kAligned, .c = kAligned, .lda = 4104},
                         GemmOperands{.a = kAligned, .b = kAligned, .c = kAligned, .ldb = 4112},
                         GemmOperands{.a = kAligned, .b = kAligned, .c = kAligned, .ldc = 24}}) {
    p = PlanGemm({16, 3072, 4096}, {}, o, 90);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->choice.kernel.find("mma16"), std::string::npos) << p->choice.kernel;
  }
  // A off 16 bytes is copied first for any kernel on sm_90, and the copy is packed.
  p = PlanGemm({16, 3072, 4096}, {}, {.a = kAligned + 8, .b = kAligned, .c = kAligned}, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_mma16_sm90");
  EXPECT_EQ(p->restrided_lda, 4096);
}

// A column-major C of one column (y = W x, the matrix as A) is computed as its transpose, one row
// for the skinny kernel, the bias per row of C per column of C^T, whatever ldc the caller gave;
// not where A or B is MN-major, nor where K packs rows off 16 bytes (the skinny kernel's reads).
TEST(GemmEntryPoint, OneColumnOfCIsComputedAsItsTranspose) {
  GemmOperands o = kPacked;
  o.bias = kAligned;
  o.ldc = 8200;
  absl::StatusOr<GemmPlan> p = PlanGemm({8192, 1, 8192}, {.epilogue = "bias_row,gelu"}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->swapped);
  EXPECT_EQ(p->size.m, 1);
  EXPECT_EQ(p->size.n, 8192);
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_skinny_sm90.bf16-bf16.bias_col.gelu");
  EXPECT_NE(p->choice.why.find("C of one column"), std::string::npos) << p->choice.why;
  GemmOperands mn = kPacked;
  mn.a_col_major = true;
  p = PlanGemm({8192, 1, 8192}, {}, mn, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->swapped);
  p = PlanGemm({8192, 1, 8188}, {}, kPacked, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->swapped);
  EXPECT_FALSE(p->c_row);
  EXPECT_NE(PlanError({8192, 1, 8192}, {}, {.a = kAligned, .b = kAligned, .c = kAligned, .ldc = 100}), "");
}

// 2-4 columns, packed: the same transpose, the skinny kernel storing C^T row-major (its c_row
// variant), so that the caller's column-major C comes out as it is.
TEST(GemmEntryPoint, FewColumnsOfCAreComputedAsTheTransposeStoredRowMajor) {
  GemmOperands o = kPacked;
  o.bias = kAligned;
  absl::StatusOr<GemmPlan> p = PlanGemm({4096, 3, 4096}, {.epilogue = "bias_row,gelu"}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->swapped);
  EXPECT_TRUE(p->c_row);
  EXPECT_EQ(p->size.m, 3);
  EXPECT_EQ(p->size.n, 4096);
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_skinny_sm90.bf16-bf16.c_row.bias_col.gelu");
  EXPECT_NE(p->choice.why.find("C of 3 columns"), std::string::npos) << p->choice.why;
  o.ldc = 2048;  // packed, said
  // (row-major C, swapped) of a plan that must succeed; a failed plan fails the test instead.
  auto how = [](GemmSize size, const GemmOperands& ops) {
    absl::StatusOr<GemmPlan> q = PlanGemm(size, {}, ops, 90);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? std::pair{q->c_row, q->swapped} : std::pair{false, false};
  };
  EXPECT_TRUE(how({2048, 4, 8192}, o).first);
  EXPECT_TRUE(how({16384, 2, 4096}, kPacked).first);  // 2 columns at any size
  // Not with a padded C, A or B, past 4 columns, with at most 4 rows, MN-major A, K off 8, 3-4
  // columns of A past 2^24 elements, or A off 16 bytes.
  GemmOperands skewed = kPacked;
  skewed.a = kAligned + 8;
  EXPECT_FALSE(how({4096, 2, 4096}, skewed).first);
  EXPECT_FALSE(how({4096, 1, 4096}, skewed).second);
  for (auto [size, ldc, lda, a_col] : {std::tuple{GemmSize{4096, 2, 4096}, 4104, 0, false},
                                       std::tuple{GemmSize{4096, 2, 4096}, 0, 4104, false},
                                       std::tuple{GemmSize{4096, 5, 4096}, 0, 0, false},
                                       std::tuple{GemmSize{4, 2, 4096}, 0, 0, false},
                                       std::tuple{GemmSize{4096, 2, 4096}, 0, 0, true},
                                       std::tuple{GemmSize{4096, 2, 4100}, 0, 0, false},
                                       std::tuple{GemmSize{16384, 3, 4096}, 0, 0, false}}) {
    GemmOperands x = kPacked;
    x.ldc = ldc, x.lda = lda, x.a_col_major = a_col;
    absl::StatusOr<GemmPlan> q = PlanGemm(size, {}, x, 90);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_FALSE(q->c_row) << size.m << "x" << size.n << "x" << size.k << " " << q->choice.kernel;
    EXPECT_EQ(q->choice.kernel.find(".c_row"), std::string::npos) << q->choice.kernel;
  }
}

// The rule weighs the tiles' speeds for rows off 128 bytes by the rows the kernel reads: packed
// K = 5000 is off, the same K in rows padded to 5056 or copied into rows of 64 elements is not,
// a pointer off 128 bytes is again (docs/PERF.md, "Rows off 128 bytes").
TEST(GemmEntryPoint, RowsOff128BytesAreJudgedByTheLeadingDimensionsAndPointers) {
  const GemmSize s{5000, 5000, 5000};
  absl::StatusOr<GemmPlan> packed = PlanGemm(s, {}, kPacked, 90);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->choice.kernel, "gemm/bf16_sm90");
  EXPECT_NE(packed->choice.why.find("rows off 128 bytes"), std::string::npos) << packed->choice.why;
  GemmOperands padded = kPacked;
  padded.lda = padded.ldb = 5056;
  absl::StatusOr<GemmPlan> p = PlanGemm(s, {}, padded, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_sm90_n160");
  EXPECT_EQ(p->choice.why.find("rows off 128 bytes"), std::string::npos) << p->choice.why;
  padded.b = kAligned + 64;  // 16-byte aligned, so read as given, but off 128
  p = PlanGemm(s, {}, padded, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(p->choice.why.find("rows off 128 bytes"), std::string::npos) << p->choice.why;
}

TEST(GemmEntryPoint, MnMajorOperandsPickTheTransposedVariants) {
  GemmOperands o = kPacked;
  o.a_col_major = o.b_row_major = true;
  absl::StatusOr<GemmPlan> p = PlanGemm({4096, 4096, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_sm90.bf16-bf16.a_mn.b_mn");
  o.b_row_major = false;
  o.c_row_major = true;  // C^T = B^T A^T: the kernel's B is A^T, MN-major; its A is B^T, K-major
  p = PlanGemm({4096, 4096, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_sm90.bf16-bf16.b_mn");
  o.c_row_major = false;
  // A packed column-major A of M = 2 rows has 4-byte columns, which TMA cannot stride over: A is
  // first copied into columns of 8 (gemm/restride16), then a tile kernel reads the copy.
  p = PlanGemm({2, 4096, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel.rfind("gemm/bf16_sm90", 0), 0u) << p->choice.kernel;
  EXPECT_NE(p->choice.kernel.find(".a_mn"), std::string::npos) << p->choice.kernel;
  EXPECT_EQ(p->restrided_lda, 8);
  EXPECT_EQ(p->restrided_ldb, 0);
  EXPECT_NE(p->choice.why.find("A first copied into rows 16 bytes apart"), std::string::npos) << p->choice.why;
  // So is a leading dimension TMA cannot stride (264 bytes), into M's 128.
  o.lda = 132;
  p = PlanGemm({128, 4096, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->restrided_lda, 128);
  // Elsewhere than sm_90 the strided kernel takes it as it is.
  p = PlanGemm({128, 4096, 4096}, {}, o, 80);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_strided");
  EXPECT_EQ(p->restrided_lda, 0);
  o.lda = 0;
  o.a_col_major = false;
  o.b_row_major = true;
  // M = 1 would be the skinny kernel's, which reads K-major only: the wide-stage kernel's row-major-B
  // variant where its blocks make one wave, else a tile kernel's.
  p = PlanGemm({1, 4096, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_k128n32_sm90.bf16-bf16.b_mn");
  p = PlanGemm({1, 6144, 4096}, {}, o, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel.rfind("gemm/bf16_sm90", 0), 0u) << p->choice.kernel;
  EXPECT_NE(p->choice.kernel.find(".b_mn"), std::string::npos) << p->choice.kernel;
  o.a_col_major = true;
  o.b_row_major = false;
  o.lda = 100;
  EXPECT_NE(PlanError({128, 64, 64}, {}, o).find("lda = 100 is less than M = 128"), std::string::npos);
}

TEST(GemmEntryPoint, BadCallsSayWhatIsWrong) {
  const GemmSize s{256, 256, 256};
  EXPECT_NE(PlanError({0, 1, 1}, {}, kPacked).find("at least 1"), std::string::npos);
  EXPECT_NE(PlanError(s, {.in_type = "f32"}, kPacked).find("input type 'f32'"), std::string::npos);
  EXPECT_NE(PlanError(s, {.out_type = "f8"}, kPacked).find("output type 'f8'"), std::string::npos);
  EXPECT_NE(PlanError(s, {.epilogue = "relu,gelu"}, kPacked).find("one bias and one activation"), std::string::npos);
  EXPECT_NE(PlanError(s, {.epilogue = "bias_col"}, kPacked).find("'bias_col' needs bias"), std::string::npos);
  GemmOperands scaled = kPacked;  // beta scales C_in: none given is an error
  scaled.beta = 0.5f;
  EXPECT_NE(PlanError(s, {.epilogue = "scale"}, scaled).find("needs C_in (beta = 0.5"), std::string::npos);
  // alpha alone reads no C_in: planned (RunGemm computes it in its epilogue pass)
  EXPECT_EQ(PlanError(s, {.epilogue = "scale"}, kPacked), "");
  // alpha or beta without the term that reads them: an error, not C = A B
  GemmOperands alpha2 = kPacked;
  alpha2.alpha = 2;
  EXPECT_NE(PlanError(s, {}, alpha2).find("read with the epilogue's 'scale' term only"), std::string::npos);
  EXPECT_NE(std::string(PlanGemm(s, {}, kPacked, 75).status().message()).find("sm_80 and later"),
            std::string::npos);
  EXPECT_NE(PlanError(s, {}, {.a = kAligned, .c = kAligned}).find("need device pointers"), std::string::npos);
  // The tile kernels read C_in and residual through TMA; the kernels storing C from registers
  // (f32) load them element by element, from any address.
  GemmOperands off = kPacked;
  off.c_in = kAligned + 8, off.residual = kAligned;
  EXPECT_NE(PlanError(s, {.epilogue = "scale,residual"}, off).find("C_in and residual through TMA"), std::string::npos);
  EXPECT_EQ(PlanError(s, {.epilogue = "residual"}, off), "");
  EXPECT_EQ(PlanError(s, {.out_type = "f32", .epilogue = "scale,residual"}, off), "");
  GemmOperands o = kPacked;
  o.lda = 200;
  EXPECT_NE(PlanError(s, {}, o).find("lda = 200 is less than K = 256"), std::string::npos);
  // Operands TMA cannot read as given are copied first: a stride of 520 bytes, a pointer off 16
  // bytes; and packed for the skinny kernel, which reads packed rows only.
  auto restrided = [&](const GemmSize& size, const GemmOperands& ops) {
    absl::StatusOr<GemmPlan> p = PlanGemm(size, {}, ops, 90);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::pair{p->restrided_lda, p->restrided_ldb} : std::pair<int64_t, int64_t>{-1, -1};
  };
  o.lda = 260;
  EXPECT_EQ(restrided(s, o), (std::pair<int64_t, int64_t>{256, 0}));
  o.lda = 264;
  EXPECT_EQ(restrided(s, o), (std::pair<int64_t, int64_t>{0, 0}));
  o.lda = 4104;
  EXPECT_EQ(restrided({1, 4096, 4096}, o), (std::pair<int64_t, int64_t>{4096, 0}));  // skinny
  EXPECT_EQ(restrided({4, 8192, 4096}, o), (std::pair<int64_t, int64_t>{0, 0}));     // the tiles read it
  o.lda = 264;
  o.a = kAligned + 8;
  EXPECT_EQ(restrided(s, o), (std::pair<int64_t, int64_t>{256, 0}));
  GemmOperands skewed = kPacked;
  skewed.b = kAligned + 2;
  EXPECT_EQ(restrided({1, 4096, 4096}, skewed), (std::pair<int64_t, int64_t>{0, 4096}));
  // A problem of at most 2^24 flops and K <= 128 keeps its operands: the strided kernel reads them
  // as they are.
  absl::StatusOr<GemmPlan> small = PlanGemm({2, 256, 128}, {}, skewed, 90);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->choice.kernel, "gemm/bf16_strided");
  EXPECT_EQ(small->restrided_ldb, 0);
  // A tile kernel stores a padded C through its C map; one that stores C from registers takes it
  // packed (at M = 100, no C map; or with C_in laid out like C), so the strided kernel runs those.
  GemmOperands padded_c = kPacked;
  padded_c.ldc = 264;
  EXPECT_EQ(PlanError(s, {}, padded_c), "");
  absl::StatusOr<GemmPlan> unmapped = PlanGemm({100, 256, 256}, {}, padded_c, 90);
  ASSERT_TRUE(unmapped.ok()) << unmapped.status();
  EXPECT_EQ(unmapped->choice.kernel.rfind("gemm/bf16_strided", 0), 0u) << unmapped->choice.kernel;
  padded_c.c_in = kAligned;
  absl::StatusOr<GemmPlan> with_c_in = PlanGemm(s, {.epilogue = "scale"}, padded_c, 90);
  ASSERT_TRUE(with_c_in.ok()) << with_c_in.status();
  EXPECT_EQ(with_c_in->choice.kernel.rfind("gemm/bf16_strided", 0), 0u) << with_c_in->choice.kernel;
  // K no multiple of 8: A and B copied into rows of 64 (TMA reads zeros past K = 60), then a tile
  // kernel; a small problem or another GPU than sm_90: the strided kernel, which takes any strides.
  GemmOperands odd = kPacked;
  odd.lda = 61;
  absl::StatusOr<GemmPlan> p = PlanGemm({1000, 700, 60}, {}, odd, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel.rfind("gemm/bf16_sm90", 0), 0u) << p->choice.kernel;
  EXPECT_EQ(p->restrided_lda, 64);
  EXPECT_EQ(p->restrided_ldb, 64);
  p = PlanGemm({100, 7, 60}, {}, odd, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_strided");
  // As small, but K past 128: copied all the same (the strided kernel would walk the long K on
  // two CTAs: 1x227x2178 took 106 us there, 17 copied; docs/PERF.md, "Small problems with a long K").
  p = PlanGemm({1, 227, 2178}, {}, kPacked, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel.rfind("gemm/bf16_sm90", 0), 0u) << p->choice.kernel;
  EXPECT_EQ(p->restrided_lda, 2184);
  EXPECT_EQ(p->restrided_ldb, 2184);
  p = PlanGemm({1024, 4096, 7}, {}, kPacked, 90);  // K <= 32: one k-step of the strided kernel
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_strided");
  EXPECT_EQ(p->restrided_lda, 0);
  p = PlanGemm({1000, 700, 60}, {}, odd, 89);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_strided");
  EXPECT_TRUE(ReadsAnyStrides(p->choice.kernel));
  EXPECT_FALSE(ReadsAnyStrides(ChooseGemm({100, 8, 64}, 90).kernel));  // a tile kernel: TMA strides
}

// C stored from registers (M no multiple of 8) with C_in or a residual: the 128x128 tiles, whose
// registers keep more of the epilogue's loads in flight, in place of the 256-row pairs.
TEST(GemmEntryPoint, EpiloguesReadingMatricesFromRegistersTakeThe128x128Tiles) {
  const GemmSize s{4095, 4096, 4096};
  EXPECT_EQ(ChooseGemm(s, 90).kernel, "gemm/bf16_sm90.bf16-bf16.any_m");
  const GemmChoice fused = ChooseGemm(s, 90, {.epilogue = "scale.residual"});
  EXPECT_EQ(fused.kernel, "gemm/bf16_sm90_n128.bf16-bf16.any_m.scale.residual") << fused.why;
  EXPECT_EQ(fused.split, 1);
  EXPECT_EQ(ChooseGemm(s, 90, {.epilogue = "bias_col.gelu"}).kernel, "gemm/bf16_sm90.bf16-bf16.any_m.bias_col.gelu");
  EXPECT_EQ(ChooseGemm({4096, 4096, 4096}, 90, {.epilogue = "scale.residual"}).kernel,
            "gemm/bf16_sm90.bf16-bf16.scale.residual");  // C through its map: C_in and residual by TMA
}

TEST(GemmTuneCache, WrittenReadBackAndPreferredOverTheRule) {
  const std::string path = ::testing::TempDir() + "/kiln_tune_test.txt";
  std::remove(path.c_str());
  absl::StatusOr<GemmTuneCache> empty = GemmTuneCache::Read(path);  // absent: empty
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
  absl::StatusOr<GemmTuneCache> absent = GemmTuneCache::ReadExisting(path);  // to a reader of choices: an error
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("cannot open it"), std::string::npos) << absent.status();
  GemmTuneCache cache;
  cache.Set(90, {256, 10240, 8192}, "gemm/bf16_sm90_n128", 0, 0.21);
  cache.Set(90, {256, 10240, 8192}, "gemm/bf16_sm90_n64", 2, 0.20);  // a later measurement replaces it
  cache.Set(90, {1024, 4096, 4096}, "gemm/bf16_skinny", 1, 0.5);  // not a candidate past M = 64: ignored
  ASSERT_TRUE(cache.Write(path).ok());
  absl::StatusOr<GemmTuneCache> back = GemmTuneCache::Read(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), 2u);
  const GemmChoice rule = ChooseGemm({256, 10240, 8192}, 90);
  EXPECT_FALSE(rule.kernel == "gemm/bf16_sm90_n64" && rule.split == 2) << "the rule already picks the tuned entry";
  const GemmChoice tuned = ChooseGemm({256, 10240, 8192}, 90, {.epilogue = "relu"}, &*back);
  EXPECT_EQ(tuned.kernel, "gemm/bf16_sm90_n64.bf16-bf16.relu");
  EXPECT_EQ(tuned.split, 2);
  EXPECT_NE(tuned.why.find("kiln tune"), std::string::npos);
  EXPECT_EQ(ChooseGemm({256, 10240, 8192}, 80, {}, &*back).kernel, "gemm/bf16_strided");  // another GPU's entry
  EXPECT_EQ(ChooseGemm({1024, 4096, 4096}, 90, {}, &*back).kernel, ChooseGemm({1024, 4096, 4096}, 90).kernel);
  // The mma.sync kernel measured fastest over packed operands is not taken over padded ones.
  GemmTuneCache small;
  small.Set(90, {8, 8192, 4096}, "gemm/bf16_mma16_sm90", 1, 0.02);
  EXPECT_EQ(ChooseGemm({8, 8192, 4096}, 90, {}, &small).kernel, "gemm/bf16_mma16_sm90");
  EXPECT_NE(ChooseGemm({8, 8192, 4096}, 90, {.packed = false}, &small).kernel, "gemm/bf16_mma16_sm90");
  {
    std::ofstream bad(path, std::ios::app);
    bad << "sm_90 64 64 gemm/bf16_sm90 0.1\n";
  }
  absl::StatusOr<GemmTuneCache> broken = GemmTuneCache::Read(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find(":4: not 'sm_<cc> M N K kernel split ms'"), std::string::npos) << broken.status();
}

// ---- on the GPU

struct Case {
  GemmSize size;
  GemmOptions options;
  bool row_major_c = false;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // added to the packed leading dimensions
  bool a_col_major = false, b_row_major = false;
  int64_t skew_a = 0;  // A starts this many elements into its buffer (off 16 bytes: restrided)
};

float Decode(const std::vector<uint16_t>& v, size_t i, const std::string& type) {
  return type == "f16" ? examples::HalfToFloat(v[i]) : examples::Bf16ToFloat(v[i]);
}

void RunCase(const Case& c, const char* dir) {
  const GemmSize& s = c.size;
  const std::string& in = c.options.in_type, out = c.options.out_type;
  const bool half = in == "f16", f32_out = out == "f32";
  const int64_t lda = (c.a_col_major ? s.m : s.k) + c.pad_a, ldb = (c.b_row_major ? s.n : s.k) + c.pad_b;
  const int64_t ldc = (c.row_major_c ? s.n : s.m) + c.pad_c;
  const int64_t c_cols = c.row_major_c ? s.m : s.n;  // what ldc counts
  const std::vector<uint16_t> a = examples::RandomNormal16((c.a_col_major ? s.k : s.m) * lda + c.skew_a, 11, half),
                              b = examples::RandomNormal16((c.b_row_major ? s.k : s.n) * ldb, 12, half);
  auto a_at = [&](int64_t i, int64_t kk) { return c.skew_a + (c.a_col_major ? kk * lda + i : i * lda + kk); };
  auto b_at = [&](int64_t kk, int64_t j) { return c.b_row_major ? kk * ldb + j : j * ldb + kk; };
  // The epilogue's inputs, in the output type (f32 ones from bf16 draws).
  const std::vector<uint16_t> side = examples::RandomNormal16(ldc * c_cols + s.m + s.n, 13, out == "f16");
  auto side_value = [&](size_t i) { return out == "f16" ? examples::HalfToFloat(side[i]) : examples::Bf16ToFloat(side[i]); };
  const size_t out_bytes = f32_out ? 4 : 2;
  std::vector<uint8_t> side_bytes(side.size() * out_bytes);
  for (size_t i = 0; i < side.size(); ++i) {
    if (f32_out) {
      const float f = side_value(i);
      std::memcpy(&side_bytes[i * 4], &f, 4);
    } else {
      std::memcpy(&side_bytes[i * 2], &side[i], 2);
    }
  }
  auto upload = [](const void* data, size_t bytes) {
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes);
    EXPECT_TRUE(buf.ok()) << buf.status();
    if (data) EXPECT_TRUE(buf->CopyFromHost(data, bytes).ok());
    return *std::move(buf);
  };
  DeviceBuffer da = upload(a.data(), a.size() * 2), db = upload(b.data(), b.size() * 2),
               dc = upload(nullptr, ldc * c_cols * out_bytes), dside = upload(side_bytes.data(), side_bytes.size());
  ASSERT_TRUE(dc.Fill(0xff).ok());  // NaN until written
  // C_in shares the side buffer with the residual (the same values: each term still counts, as
  // beta = 0.5 and the residual's weight 1 differ); bias after them.
  const std::string& ep = c.options.epilogue;
  const bool scale = ep.find("scale") != std::string::npos, residual = ep.find("residual") != std::string::npos;
  const char bias = ep.find("bias_row") != std::string::npos ? 'r' : ep.find("bias_col") != std::string::npos ? 'c' : 0;
  GemmOperands o{.a = da.ptr() + 2 * c.skew_a, .b = db.ptr(), .c = dc.ptr(), .lda = lda, .ldb = ldb, .ldc = ldc,
                 .c_row_major = c.row_major_c, .a_col_major = c.a_col_major, .b_row_major = c.b_row_major,
                 .alpha = scale ? static_cast<float>(1 / std::sqrt(double(s.k))) : 1.0f,
                 .beta = scale ? 0.5f : 0.0f};  // (read with "scale" only; without it an error)
  if (scale) o.c_in = dside.ptr();
  if (residual) o.residual = dside.ptr();
  const size_t bias_at = ldc * c_cols;
  if (bias) o.bias = dside.ptr() + bias_at * out_bytes;
  GemmRunner runner(dir);
  absl::Status st = runner.Run(s, c.options, o);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(Synchronize().ok());
  std::vector<uint8_t> got(ldc * c_cols * out_bytes);
  ASSERT_TRUE(dc.CopyToHost(got.data(), got.size()).ok());

  double err2 = 0, ref2 = 0;
  int64_t nans = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double x = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) x += double(Decode(a, a_at(i, kk), in)) * Decode(b, b_at(kk, j), in);
      const size_t at = c.row_major_c ? i * ldc + j : j * ldc + i;
      if (scale) x = double(o.alpha) * x + 0.5 * side_value(at);
      if (bias) x += side_value(bias_at + (bias == 'r' ? i : j));
      if (ep.find("relu") != std::string::npos) x = std::max(x, 0.0);
      if (ep.find("gelu") != std::string::npos) x = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      if (ep.find("silu") != std::string::npos) x = x / (1 + std::exp(-x));
      if (residual) x += side_value(at);
      double y;
      if (f32_out) {
        float f;
        std::memcpy(&f, &got[at * 4], 4);
        y = f;
      } else {
        uint16_t h;
        std::memcpy(&h, &got[at * 2], 2);
        y = out == "f16" ? examples::HalfToFloat(h) : examples::Bf16ToFloat(h);
      }
      if (!std::isfinite(y)) ++nans;
      err2 += (y - x) * (y - x), ref2 += x * x;
    }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  EXPECT_EQ(nans, 0) << s.m << "x" << s.n << "x" << s.k;
  EXPECT_LT(rel, f32_out ? 1e-4 : 1e-2) << s.m << "x" << s.n << "x" << s.k << " " << c.options.epilogue;
}

// A device buffer of `bytes`; a failed allocation fails the test.
DeviceBuffer Allocated(size_t bytes) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes);
  EXPECT_TRUE(buf.ok()) << buf.status();
  return buf.ok() ? *std::move(buf) : DeviceBuffer();
}

// C (m x n, row-major bf16) against fp64 alpha * A B^T, A m x k with rows lda apart and B n x k
// (K-major): the norm-relative error and how many of C's elements are NaN or inf.
struct Fp64Check {
  double relative_error = 0;
  int64_t not_finite = 0;
};
Fp64Check AgainstFp64(const std::vector<uint16_t>& a, int64_t lda, const std::vector<uint16_t>& b,
                      const std::vector<uint16_t>& c, int64_t m, int64_t n, int64_t k,
                      double alpha = 1) {
  double err2 = 0, ref2 = 0;
  Fp64Check r;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        ref += double(examples::Bf16ToFloat(a[i * lda + kk])) * examples::Bf16ToFloat(b[j * k + kk]);
      ref *= alpha;
      const double y = examples::Bf16ToFloat(c[i * n + j]);
      if (!std::isfinite(y)) ++r.not_finite;
      err2 += (y - ref) * (y - ref), ref2 += ref * ref;
    }
  r.relative_error = std::sqrt(err2 / std::max(ref2, 1e-30));
  return r;
}

// Programmatic dependent launch: the entry point's kernels start while the kernel before them in
// the stream ends, and wait for it before they read. A chain of calls on one stream, each reading
// the one before's output (x_{i+1} = x_i W_i^T, C row-major as the next A), checks that wait: each
// layer's result against fp64 from the GPU's own input to it.
TEST(GemmEntryPointGpu, ChainedCallsOnOneStreamReadTheCallBefore) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) GTEST_SKIP() << "no GPU here: " << d.status().message();
  const char* dir = std::getenv("KILN_BUNDLE_DIR");
  if (!dir) GTEST_SKIP() << "set KILN_BUNDLE_DIR to a bundle directory to run the kernels";
  const int64_t m = 16, n = 2048, layers = 4;
  std::vector<std::vector<uint16_t>> w;
  std::vector<DeviceBuffer> dw, dx;
  for (int64_t i = 0; i < layers; ++i) {
    w.push_back(examples::RandomNormal16(n * n, 30 + i, false));
    dw.push_back(Allocated(n * n * 2));
    ASSERT_TRUE(dw.back().CopyFromHost(w.back().data(), n * n * 2).ok());
  }
  const std::vector<uint16_t> x0 = examples::RandomNormal16(m * n, 29, false);
  for (int64_t i = 0; i <= layers; ++i) {
    dx.push_back(Allocated(m * n * 2));
    ASSERT_TRUE((i == 0 ? dx[0].CopyFromHost(x0.data(), m * n * 2) : dx[i].Fill(0xff)).ok());  // NaN until written
  }
  GemmRunner runner(dir);
  for (int64_t i = 0; i < layers; ++i) {
    absl::Status st = runner.Run({m, n, n}, {}, {.a = dx[i].ptr(), .b = dw[i].ptr(), .c = dx[i + 1].ptr(), .c_row_major = true});
    ASSERT_TRUE(st.ok()) << st;
  }
  ASSERT_TRUE(Synchronize().ok());
  std::vector<std::vector<uint16_t>> x(layers + 1, std::vector<uint16_t>(m * n));
  for (int64_t i = 0; i <= layers; ++i) ASSERT_TRUE(dx[i].CopyToHost(x[i].data(), m * n * 2).ok());
  for (int64_t i = 0; i < layers; ++i) {
    const Fp64Check c = AgainstFp64(x[i], n, w[i], x[i + 1], m, n, n);
    EXPECT_EQ(c.not_finite, 0) << "layer " << i;
    EXPECT_LT(c.relative_error, 1e-2) << "layer " << i;
  }
}

// A runner repeats a call it made before from its prepared launches (LaunchMemo): the repeat reads
// the inputs as they are now, and a call that differs in a scalar, a leading dimension or an
// address is planned anew. Each call's C is poisoned first and checked against fp64.
TEST(GemmEntryPointGpu, RepeatedCallsReplayAndDifferentCallsDoNot) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) GTEST_SKIP() << "no GPU here: " << d.status().message();
  const char* dir = std::getenv("KILN_BUNDLE_DIR");
  if (!dir) GTEST_SKIP() << "set KILN_BUNDLE_DIR to a bundle directory to run the kernels";
  // 200 x 136 x 3000: split-K tiles (a workspace); lda 3004 leaves A's rows off 16 bytes (the
  // restrided copy, a scratch buffer).
  const int64_t m = 200, n = 136, k = 3000, lda = 3004;
  DeviceBuffer da = Allocated(m * lda * 2), db = Allocated(n * k * 2), dc = Allocated(m * n * 2),
               dc2 = Allocated(m * n * 2);
  const std::vector<uint16_t> b = examples::RandomNormal16(n * k, 41, false);
  ASSERT_TRUE(db.CopyFromHost(b.data(), b.size() * 2).ok());
  GemmRunner runner(dir);
  // C (row-major) = alpha * A B^T with A's rows lda apart, checked from the host copies.
  auto check = [&](const std::vector<uint16_t>& a, int64_t a_ld, const DeviceBuffer& c, float alpha,
                   const std::string& what) {
    std::vector<uint16_t> got(m * n);
    ASSERT_TRUE(Synchronize().ok()) << what;
    ASSERT_TRUE(c.CopyToHost(got.data(), got.size() * 2).ok()) << what;
    const Fp64Check r = AgainstFp64(a, a_ld, b, got, m, n, k, alpha);
    EXPECT_EQ(r.not_finite, 0) << what;
    EXPECT_LT(r.relative_error, 1e-2) << what;
  };
  auto run = [&](const std::vector<uint16_t>& a, int64_t a_ld, DeviceBuffer& c, float alpha,
                 const std::string& what) {
    ASSERT_TRUE(da.CopyFromHost(a.data(), a.size() * 2).ok());
    ASSERT_TRUE(c.Fill(0xff).ok());  // NaN until written
    GemmOptions o;
    if (alpha != 1) o.epilogue = "scale";
    absl::Status st = runner.Run({m, n, k}, o,
                                 {.a = da.ptr(), .b = db.ptr(), .c = c.ptr(), .lda = a_ld,
                                  .c_row_major = true, .alpha = alpha});
    ASSERT_TRUE(st.ok()) << what << ": " << st;
    check(a, a_ld, c, alpha, what);
  };
  for (int64_t a_ld : {k, lda}) {
    const std::string at = absl::StrCat("lda ", a_ld, ": ");
    run(examples::RandomNormal16(m * a_ld, 42, false), a_ld, dc, 1, at + "first call");
    run(examples::RandomNormal16(m * a_ld, 43, false), a_ld, dc, 1, at + "the same call, new A");
    run(examples::RandomNormal16(m * a_ld, 44, false), a_ld, dc, 1, at + "and again");
    run(examples::RandomNormal16(m * a_ld, 45, false), a_ld, dc, 2, at + "alpha 2");
    run(examples::RandomNormal16(m * a_ld, 46, false), a_ld, dc2, 1, at + "another C");
  }
}

TEST(GemmEntryPointGpu, MatchesFp64ThroughLayoutsPaddingAndEpilogues) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) GTEST_SKIP() << "no GPU here: " << d.status().message();
  const char* dir = std::getenv("KILN_BUNDLE_DIR");
  if (!dir) GTEST_SKIP() << "set KILN_BUNDLE_DIR to a bundle directory to run the kernels";
  RunCase({.size = {264, 300, 200}}, dir);                                           // the 128x64 tiles, ragged
  RunCase({.size = {1024, 1000, 512}, .row_major_c = true, .pad_a = 8, .pad_b = 16}, dir);  // swapped, padded A and B
  RunCase({.size = {512, 384, 256}, .pad_a = 24, .pad_c = 40}, dir);                 // a padded C map
  // A row-major C with a bias per row: per column of the C^T the kernel computes.
  RunCase({.size = {300, 264, 200}, .options = {.epilogue = "scale,bias_row,gelu,residual"}, .row_major_c = true}, dir);
  RunCase({.size = {131, 200, 88}, .options = {.out_type = "f32", .epilogue = "scale,silu"}}, dir);  // any M
  RunCase({.size = {3, 4096, 256}, .options = {.in_type = "f16", .out_type = "f16", .epilogue = "bias_row,relu"}}, dir);
  // Operands TMA cannot stride as given, copied first into rows 16 bytes apart (gemm/restride16):
  // K % 8 != 0 with odd leading dimensions, a long odd K, small M, a row-major C, A off 16 bytes.
  // (A small one, of at most 2^24 flops and K <= 128, or K <= 32, runs the strided kernel on them
  // as they are.)
  RunCase({.size = {100, 7, 60}, .pad_a = 1, .pad_b = 3}, dir);  // small: the strided kernel
  RunCase({.size = {1000, 70, 60}, .pad_a = 1, .pad_b = 3}, dir);
  RunCase({.size = {300, 520, 4095}}, dir);
  RunCase({.size = {2, 4096, 2049}}, dir);
  RunCase({.size = {64, 4000, 100}, .options = {.in_type = "f16", .out_type = "f16", .epilogue = "bias_row,relu"}}, dir);
  RunCase({.size = {130, 2000, 99}, .row_major_c = true}, dir);
  RunCase({.size = {256, 512, 512}, .skew_a = 3}, dir);
  RunCase({.size = {1, 4096, 1024}, .pad_a = 8}, dir);  // the skinny kernel reads packed rows: A packed first
  RunCase({.size = {3, 4096, 1024}, .pad_a = 8}, dir);  // the same at M = 3
  RunCase({.size = {3, 6144, 1024}, .pad_a = 8}, dir);  // 2-4 rows past N = 4096: the 64x48 tiles, A read as given
  RunCase({.size = {1001, 520, 64}, .a_col_major = true}, dir);  // M % 8 != 0 column-major: any_m.a_mn
  // MN-major A (column-major) and B (row-major): the a_mn / b_mn variants, and the reference.
  RunCase({.size = {512, 384, 256}, .pad_a = 8, .a_col_major = true, .b_row_major = true}, dir);
  RunCase({.size = {264, 300, 200}, .row_major_c = true, .a_col_major = true}, dir);  // swapped: the kernel's B
  RunCase({.size = {131, 256, 136}, .b_row_major = true}, dir);                        // any M
  RunCase({.size = {128, 300, 256}, .pad_b = 4, .b_row_major = true}, dir);  // N = 300, ldb = 304
  RunCase({.size = {100, 7, 60}, .a_col_major = true, .b_row_major = true}, dir);
  // One column of C, computed transposed (the skinny kernel), with a padded ldc and each term.
  RunCase({.size = {1000, 1, 520}, .options = {.epilogue = "scale,bias_row,gelu,residual"}, .pad_c = 8}, dir);
  RunCase({.size = {300, 1, 4096}, .options = {.in_type = "f16", .out_type = "f16", .epilogue = "bias_col,relu"}}, dir);
  // 2-4 columns, packed: C^T = B^T A^T stored row-major by the skinny kernel's c_row variants.
  RunCase({.size = {1000, 3, 520}, .options = {.epilogue = "scale,bias_row,gelu,residual"}}, dir);
  RunCase({.size = {4096, 2, 4096}, .options = {.in_type = "f16", .out_type = "f16", .epilogue = "bias_col,relu"}}, dir);
  RunCase({.size = {777, 4, 1024}}, dir);
  RunCase({.size = {2048, 4, 8192}, .options = {.out_type = "f32", .epilogue = "scale,silu"}}, dir);
  RunCase({.size = {16384, 3, 4096}}, dir);  // A past 2^24 elements: the 64x32 tiles
  RunCase({.size = {16384, 2, 4096}, .options = {.in_type = "f16", .out_type = "f16"}}, dir);  // 2 columns: C^T
  RunCase({.size = {1000, 3, 520}, .pad_c = 8}, dir);  // C padded: the tiles
}

}  // namespace
}  // namespace kiln::rt
