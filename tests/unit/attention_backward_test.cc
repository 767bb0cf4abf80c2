// The attention backward (attention/bwd_prep, hopper_dkdv, hopper_dq) on the emulator at small
// ragged sizes against the harness's fp64 reference of every head's gradients, run twice for the
// same bytes; and the entry point's plan and errors.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/attention_grad_check.h"
#include "tests/unit/built_bundle.h"

namespace kiln::examples {
namespace {

void ExpectCorrect(const rt::AttentionSize& z, const rt::AttentionOptions& o, uint64_t seed = 5,
                   const std::vector<int64_t>& lengths = {}, int compute_capability = 90) {
  absl::StatusOr<AttentionGradResult> r =
      RunAttentionBackwardEmulated(BuiltBundle, z, o, seed, lengths, compute_capability);
  const std::string what =
      absl::StrCat("b", z.b, " hq", z.hq, " hkv", z.hkv, " s", z.s, " skv", z.skv, " d", z.d,
                   o.causal ? " causal" : "", " ", o.dtype, lengths.empty() ? "" : " varlen");
  ASSERT_TRUE(r.ok()) << what << ": " << r.status();
  EXPECT_TRUE(r->passed) << r->kernels << " " << what << ": " << r->failure;
  EXPECT_EQ(r->heads_checked, z.b * z.hq) << what;
  EXPECT_EQ(r->runs_identical, 1) << what;
}

// Ragged query and key tiles (130 rows: two tiles and 2 rows; 70 keys: a part of one key tile),
// grouped-query heads (dK and dV summed over two query heads), S < Skv (the causal diagonal
// shifted right: every key tile seen) and S > Skv (rows that see no key: lse = -inf, no
// gradient from them), one key (dS = 0: what is left is rounding), f16.
class EmulatedAttentionBackward : public ::testing::TestWithParam<int> {};

TEST_P(EmulatedAttentionBackward, RaggedLengthsAndGroupedHeads) {
  const int d = GetParam();
  for (bool causal : {false, true}) {
    ExpectCorrect({.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 130, .d = d}, {.causal = causal});
    ExpectCorrect({.b = 2, .hq = 1, .hkv = 1, .s = 20, .skv = 70, .d = d}, {.causal = causal});
  }
  ExpectCorrect({.b = 1, .hq = 1, .hkv = 1, .s = 150, .skv = 40, .d = d}, {.causal = true});
  ExpectCorrect({.b = 2, .hq = 2, .hkv = 1, .s = 1, .skv = 1, .d = d}, {});  // dQ = dK = 0
  ExpectCorrect({.b = 1, .hq = 2, .hkv = 2, .s = 65, .skv = 65, .d = d},
                {.dtype = "f16", .causal = true});
  // (Those added dQ by atomics, attention/hopper_dkdv.dqadd.) dQ from a kernel of its own
  // (attention/hopper_dq), the same bytes run to run.
  ExpectCorrect({.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 100, .d = d},
                {.causal = true, .deterministic = true});
  ExpectCorrect({.b = 1, .hq = 1, .hkv = 1, .s = 20, .skv = 70, .d = d}, {.deterministic = true});
}

INSTANTIATE_TEST_SUITE_P(HeadDims, EmulatedAttentionBackward, ::testing::Values(64, 128),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

// D = 256: hopper_dkdv's warpgroups split D and share their P^T and dS^T through shared memory;
// hopper_dq walks key tiles of 32. Ragged tiles both ways, grouped heads, rows that see no key.
TEST(EmulatedAttentionBackwardD256, SplitHeadDimension) {
  ExpectCorrect({.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 70, .d = 256}, {.causal = true});
  ExpectCorrect({.b = 1, .hq = 1, .hkv = 1, .s = 100, .skv = 40, .d = 256}, {.causal = true});
  ExpectCorrect({.b = 1, .hq = 1, .hkv = 1, .s = 65, .skv = 130, .d = 256}, {.dtype = "f16"});
}

// Packed sequences: a sequence's last, partial tile reads the next one's rows (masked, and its
// gradients stored only within its own), a one-token sequence, grouped heads, each causal mask
// its own; D = 128 and 256 (its warpgroups split D) once each.
TEST(EmulatedAttentionBackwardVarlen, PackedSequences) {
  auto check = [](std::vector<int64_t> lengths, int64_t hq, int64_t hkv, int64_t d, bool causal) {
    absl::StatusOr<rt::AttentionSize> z = VarlenSize({.hq = hq, .hkv = hkv, .d = d}, lengths);
    ASSERT_TRUE(z.ok()) << z.status();
    ExpectCorrect(*z, {.causal = causal}, 5, lengths);
  };
  check({70, 1, 130}, 2, 1, 64, true);
  check({70, 1, 130}, 2, 1, 64, false);
  check({100, 30}, 2, 2, 128, true);
  check({65, 20}, 1, 1, 256, true);
}

// sm_100a (attention/blackwell_dkdv, blackwell_dq; tcgen05, tensor memory): ragged tiles both
// ways, grouped heads, rows that see no key, f16.
TEST(EmulatedAttentionBackwardBlackwell, TensorMemoryKernels) {
  for (int d : {64, 128})
    ExpectCorrect({.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 70, .d = d}, {.causal = true}, 5, {},
                  100);
  ExpectCorrect({.b = 2, .hq = 1, .hkv = 1, .s = 100, .skv = 150, .d = 64}, {}, 5, {}, 100);
  ExpectCorrect({.b = 1, .hq = 1, .hkv = 1, .s = 65, .skv = 65, .d = 64},
                {.dtype = "f16", .causal = true}, 5, {}, 100);
}

TEST(AttentionBackwardPlan, NamesItsKernelsAndRefusesWhatItCannotRun) {
  const rt::AttentionGradOperands ops = {16, 16, 16, 16, 16, 16, 16, 16, 16};
  absl::StatusOr<rt::AttentionBackwardPlan> plan = rt::PlanAttentionBackward(
      {.b = 1, .hq = 4, .hkv = 2, .s = 100, .skv = 100, .d = 128}, {.causal = true}, ops, 90);
  ASSERT_TRUE(plan.ok()) << plan.status();  // dQ by atomics where they run
  EXPECT_EQ(plan->dkdv, "attention/hopper_dkdv.d128.causal.dqadd");
  EXPECT_EQ(plan->dq, "attention/bwd_dq_convert");
  EXPECT_EQ(plan->padded_rows, 128);
  plan = rt::PlanAttentionBackward({.b = 1, .hq = 4, .hkv = 2, .s = 100, .skv = 100, .d = 128},
                                   {.causal = true, .deterministic = true}, ops, 90);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->dkdv, "attention/hopper_dkdv.d128.causal");
  EXPECT_EQ(plan->dq, "attention/hopper_dq.d128.causal");
  plan = rt::PlanAttentionBackward({.b = 1, .hq = 4, .hkv = 2, .s = 100, .skv = 100, .d = 64},
                                   {.dq_atomics = true, .deterministic = true}, ops, 90);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("give one"), std::string::npos) << plan.status();
  auto error = [&](rt::AttentionSize z, rt::AttentionGradOperands o, int cc = 90) {
    absl::StatusOr<rt::AttentionBackwardPlan> p = rt::PlanAttentionBackward(z, {}, o, cc);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  const rt::AttentionSize z = {.b = 1, .hq = 4, .hkv = 2, .s = 100, .skv = 100, .d = 128};
  rt::AttentionSize d256 = z;
  d256.d = 256;
  plan = rt::PlanAttentionBackward(d256, {}, ops, 90);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->dkdv, "attention/hopper_dkdv.d256");  // deterministic: no atomics at D = 256
  EXPECT_FALSE(plan->dq_add);
  plan = rt::PlanAttentionBackward(d256, {.dq_atomics = true}, ops, 90);
  EXPECT_NE(plan.status().message().find("dq_atomics"), std::string::npos) << plan.status();
  rt::AttentionSize d96 = z;
  d96.d = 96;
  EXPECT_NE(error(d96, ops).find("D = 96"), std::string::npos) << error(d96, ops);
  rt::AttentionGradOperands unaligned = ops;
  unaligned.dk = 24;
  EXPECT_NE(error(z, unaligned).find("16-byte aligned"), std::string::npos);
  rt::AttentionGradOperands no_grad = ops;
  no_grad.d_o = 0;
  EXPECT_NE(error(z, no_grad).find("dO, dQ, dK and dV need device pointers"), std::string::npos);
  EXPECT_NE(error(z, ops, 120).find("sm_90a"), std::string::npos) << error(z, ops, 120);
  plan = rt::PlanAttentionBackward(z, {.causal = true}, ops, 100);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->dkdv, "attention/blackwell_dkdv.d128.causal");
  EXPECT_EQ(plan->dq, "attention/blackwell_dq.d128.causal");
  EXPECT_EQ(plan->prep, "attention/bwd_prep.sm100a");
  EXPECT_NE(error(d256, ops, 100).find("sm_100a"), std::string::npos) << error(d256, ops, 100);
  rt::AttentionSize rows = z;
  rows.rows = true;
  EXPECT_NE(error(rows, ops).find("dense"), std::string::npos) << error(rows, ops);
}

}  // namespace
}  // namespace kiln::examples
