// attention/hopper on the emulator at small ragged sizes (its PTX as the compiler emitted it),
// against the harness's fp64 reference of every row; and the entry point's plan and errors.
#include <string>

#include "examples/attention_check.h"
#include "examples/registry.h"
#include "gtest/gtest.h"
#include "kiln/lowering.h"

namespace kiln::examples {
namespace {

rt::Bundle BundleOf(const std::string& name) {
  absl::StatusOr<KernelDef> def = Find(name)->build();
  EXPECT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  return {def->manifest(), *ptx};
}

struct Case {
  rt::AttentionSize size;
  rt::AttentionOptions options;
};

void ExpectCorrect(const Case& c, uint64_t seed = 3) {
  absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(c.size, c.options, {16, 16, 16, 16, 16}, 90);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const rt::Bundle b = BundleOf(plan->kernel);
  const std::string shape = AttentionShapeName(c.size, c.options.causal);
  absl::StatusOr<AttentionResult> r = RunAttentionEmulated(b, c.size, c.options, seed);
  ASSERT_TRUE(r.ok()) << plan->kernel << " " << shape << ": " << r.status();
  EXPECT_TRUE(r->passed) << plan->kernel << " " << shape << ": " << r->failure;
  EXPECT_EQ(r->rows_checked, c.size.b * c.size.hq * c.size.s);
}

// Ragged query and key tiles (130 = one tile and 2 rows; 70 keys, not a multiple of the key
// tile), grouped-query heads, a shorter query than key sequence (the causal diagonal shifted) and
// a longer one (rows that see no key: O = 0, lse = -inf).
class EmulatedAttention : public ::testing::TestWithParam<int> {};

TEST_P(EmulatedAttention, RaggedLengthsAndGroupedHeads) {
  const int d = GetParam();
  for (bool causal : {false, true}) {
    ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 130, .d = d}, {.causal = causal}});
    ExpectCorrect({{.b = 2, .hq = 1, .hkv = 1, .s = 1, .skv = 70, .d = d}, {.causal = causal}});
    ExpectCorrect({{.b = 1, .hq = 1, .hkv = 1, .s = 150, .skv = 20, .d = d}, {.causal = causal}});
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, EmulatedAttention, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

TEST(EmulatedAttention, Fp16AndAScaleOfItsOwn) {
  ExpectCorrect({{.b = 1, .hq = 3, .hkv = 3, .s = 200, .skv = 260, .d = 128},
                 {.dtype = "f16", .causal = true, .scale = 0.3f}});
}

// The check would notice a kernel computing something else: the same output checked as if it
// were causal fails.
TEST(EmulatedAttention, AWrongMaskFailsTheCheck) {
  const rt::AttentionSize z{.b = 1, .hq = 1, .hkv = 1, .s = 70, .skv = 70, .d = 64};
  absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(z, {}, {16, 16, 16, 16, 16}, 90);
  ASSERT_TRUE(plan.ok());
  rt::Bundle b = BundleOf(plan->kernel);
  // Run the non-causal kernel but describe the problem as causal: the harness picks the causal
  // kernel by name, so rename the bundle to it.
  b.manifest.name = "attention/hopper.d64.causal";
  absl::StatusOr<AttentionResult> r = RunAttentionEmulated(b, z, {.causal = true}, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed) << "error " << r->rel_error;
}

TEST(AttentionPlan, NamesTheKernelAndRefusesBadCalls) {
  const rt::AttentionOperands ok{16, 16, 16, 16, 16};
  absl::StatusOr<rt::AttentionPlan> p =
      rt::PlanAttention({.b = 2, .hq = 8, .hkv = 2, .s = 100, .skv = 300, .d = 256}, {.dtype = "f16", .causal = true}, ok, 90);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kernel, "attention/hopper.d256.f16.causal");
  EXPECT_FLOAT_EQ(p->scale, 1.0f / 16);
  auto error = [&](rt::AttentionSize z, rt::AttentionOptions o, rt::AttentionOperands ops, int cc) {
    absl::StatusOr<rt::AttentionPlan> r = rt::PlanAttention(z, o, ops, cc);
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  EXPECT_NE(error({.d = 96}, {}, ok, 90).find("D = 96"), std::string::npos);
  EXPECT_NE(error({.hq = 6, .hkv = 4}, {}, ok, 90).find("not a multiple of Hkv = 4"), std::string::npos);
  EXPECT_NE(error({.s = 0}, {}, ok, 90).find("at least 1"), std::string::npos);
  EXPECT_NE(error({}, {.dtype = "f32"}, ok, 90).find("type 'f32'"), std::string::npos);
  EXPECT_NE(error({}, {.scale = -1}, ok, 90).find("scale"), std::string::npos);
  EXPECT_NE(error({}, {}, {16, 16, 24, 16, 16}, 90).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(error({}, {}, {16, 16, 16, 16, 0}, 90).find("device pointers"), std::string::npos);
  EXPECT_NE(error({}, {}, ok, 80).find("sm_80"), std::string::npos);
}

}  // namespace
}  // namespace kiln::examples
