// attention/hopper on the emulator at small ragged sizes (its PTX as the compiler emitted it),
// against the harness's fp64 reference of every row; and the entry point's plan and errors.
#include <bit>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

#include "ops/attention/attention_check.h"
#include "ops/attention/harness_memory.h"
#include "examples/registry.h"
#include "gtest/gtest.h"
#include "tests/unit/built_bundle.h"
#include "kiln/lowering.h"

namespace kiln::examples {
namespace {

struct Case {
  rt::AttentionSize size;
  rt::AttentionOptions options;
};

void ExpectCorrect(const Case& c, uint64_t seed = 3, int compute_capability = 90, int64_t page = 0) {
  absl::StatusOr<rt::AttentionPlan> plan =
      rt::PlanAttention(PagedSize(c.size, page), c.options, {16, 16, 16, 16, 16, 16, 16}, compute_capability);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const rt::Bundle b = CachedBundle(plan->kernel);
  std::optional<rt::Bundle> combine;
  if (plan->splits > 1) combine = CachedBundle(plan->combine);
  const std::string shape = AttentionShapeName(c.size, c.options.causal);
  absl::StatusOr<AttentionResult> r =
      RunAttentionEmulated(b, c.size, c.options, seed, combine ? &*combine : nullptr, page);
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

// Decode (PlanDecode, on sm_90 and sm_100): the query heads of a KV head packed as one
// tile's rows, the keys split in parts merged by attention/combine (.sm100a): parts of 2 key tiles,
// a last part shorter than the rest, several query rows a head (no mask), f16, a causal S = 1
// (every key seen), and more parts than the combine reads at once.
void ExpectDecodeSplitsTheKeys(int d, int compute_capability) {
  const int64_t tile = d == 256 ? 64 : 128;
  const Case cases[] = {
      {{.b = 1, .hq = 4, .hkv = 1, .s = 1, .skv = 4 * tile + 5, .d = d}, {.causal = true}},
      {{.b = 2, .hq = 8, .hkv = 2, .s = 3, .skv = 7 * tile - 9, .d = d}, {}},
      {{.b = 1, .hq = 2, .hkv = 2, .s = 1, .skv = 4 * tile + 1, .d = d}, {.dtype = "f16"}},
      // 18 parts of 2 key tiles: the merge reads its parts 16 at a time, so one group is whole
      // and one has two, whose sums are rescaled to the second group's maximum where it is larger.
      {{.b = 1, .hq = 4, .hkv = 1, .s = 1, .skv = 36 * tile - 5, .d = d}, {}}};
  for (const Case& c : cases) {
    absl::StatusOr<rt::AttentionPlan> plan =
        rt::PlanAttention(c.size, c.options, {16, 16, 16, 16, 16}, compute_capability);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GT(plan->splits, 1) << plan->kernel;
    if (c.size.skv > 32 * tile) EXPECT_EQ(plan->splits, 18) << plan->kernel;
    EXPECT_NE(plan->kernel.find(".split"), std::string::npos) << plan->kernel;
    if (compute_capability == 100) {
      EXPECT_NE(plan->kernel.find("attention/blackwell"), std::string::npos) << plan->kernel;
      EXPECT_NE(plan->combine.find(".sm100a"), std::string::npos) << plan->combine;
    }
    ExpectCorrect(c, 3, compute_capability);
  }
}

TEST_P(EmulatedAttention, DecodePacksTheHeadsOfAKvHeadAndSplitsTheKeys) {
  ExpectDecodeSplitsTheKeys(GetParam(), 90);
}

// The same through a paged cache (pages shuffled; rows past Skv hold NaN): pages smaller than a
// key tile (several boxes a tile), and larger, with a last page partly used.
TEST_P(EmulatedAttention, DecodeThroughAPagedCache) {
  const int d = GetParam();
  for (int64_t page : {16, 256}) {
    ExpectCorrect({{.b = 2, .hq = 8, .hkv = 2, .s = 1, .skv = 300, .d = d}, {}}, 3, 90, page);
    ExpectCorrect({{.b = 1, .hq = 4, .hkv = 1, .s = 2, .skv = 517, .d = d}, {}}, 4, 90, page);
  }
}

// Prefill over a paged cache (PlanCachePrefill: more query rows than a decode tile holds): a CTA
// per query tile (causal at D = 128: a CTA per SM, several tiles each on the emulator's three),
// causal with each sequence's diagonal at its length (a chunk of 100 new rows over 300 keys), and
// without a mask (over pages of 64 at D = 128, a CTA per SM whose tiles run as one stream); pages
// shuffled, rows past Skv NaN. (At D = 64 over pages of 16 the plan takes three K/V stages.)
TEST_P(EmulatedAttention, PrefillThroughAPagedCache) {
  const int d = GetParam();
  for (int64_t page : {16, 64}) {
    const Case c{{.b = 2, .hq = 4, .hkv = 2, .s = 100, .skv = 300, .d = d}, {.causal = true}};
    EXPECT_EQ(rt::PlanAttention(PagedSize(c.size, page), c.options, {16, 16, 16, 16, 16, 16, 16}, 90)
                  ->kernel,
              absl::StrCat("attention/hopper.d", d, ".causal", d == 64 && page == 16 ? ".st3" : "",
                           d == 128 ? ".persist" : "", ".page", page));
    ExpectCorrect(c, 3, 90, page);
  }
  ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 130, .d = d}, {}}, 4, 90, 32);
  // (At D = 128 over pages of 64, a CTA per SM whose tiles run as one stream of steps: V's rows
  // past each tile's length zeroed in the step that also starts the next tile.)
  const Case streamed{{.b = 2, .hq = 4, .hkv = 2, .s = 300, .skv = 300, .d = d}, {}};
  EXPECT_EQ(
      rt::PlanAttention(PagedSize(streamed.size, 64), {}, {16, 16, 16, 16, 16, 16, 16}, 90)->kernel,
      absl::StrCat("attention/hopper.d", d, d == 128 ? ".bn128.persist" : "", ".page64"));
  ExpectCorrect(streamed, 5, 90, 64);
  if (d == 128) {  // (pages of 16 too, their producer at 40 registers)
    EXPECT_EQ(
        rt::PlanAttention(PagedSize(streamed.size, 16), {}, {16, 16, 16, 16, 16, 16, 16}, 90)->kernel,
        "attention/hopper.d128.bn128.persist.page16");
    ExpectCorrect(streamed, 6, 90, 16);
  }
}

// A paged prefill over a dense copy of its pages (attention/dense_from_pages, then the dense
// plan's tiling over sequences of their own lengths), asked for by naming that ".lens" kernel:
// pages shuffled, rows past Skv NaN, the copy's scratch poisoned, ragged lengths.
TEST_P(EmulatedAttention, PrefillOverADenseCopyOfItsPages) {
  const int d = GetParam();
  const rt::AttentionOperands ops{16, 16, 16, 16, 16, 16, 16};
  for (bool causal : {false, true}) {
    Case c{{.b = 2, .hq = 4, .hkv = 2, .s = 100, .skv = 150, .d = d}, {.causal = causal}};
    const std::string dense = rt::PlanAttention(c.size, c.options, ops, 90)->kernel;
    c.options.kernel = dense + ".lens";
    absl::StatusOr<rt::AttentionPlan> plan =
        rt::PlanAttention(PagedSize(c.size, 16), c.options, ops, 90);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->copy_pages, absl::StrCat("attention/dense_from_pages.d", d));
    EXPECT_EQ(plan->kernel, dense + ".lens");
    EXPECT_EQ(plan->size.page, 0);
    EXPECT_TRUE(plan->size.lens);
    EXPECT_EQ(plan->paged.page, 16);
    const rt::Bundle copy = CachedBundle(plan->copy_pages);
    absl::StatusOr<AttentionResult> r = RunAttentionEmulated(CachedBundle(plan->kernel), c.size,
                                                             c.options, 7, nullptr, 16, &copy);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->passed) << PlannedKernels(*plan) << ": " << r->failure;
    EXPECT_EQ(r->rows_checked, c.size.b * c.size.hq * c.size.s);
  }
}

// attention/dense_from_pages alone: each sequence's keys up to its length (a length past Skv or
// negative reads as Skv) from its pages in table order, a table entry past the cache (or
// negative) as zeros, and nothing written past a sequence's length.
TEST(EmulatedAttention, DenseFromPagesCopiesEachSequencesKeysAndNoMore) {
  rt::AttentionPlan plan;
  plan.paged = {.b = 3, .hkv = 2, .skv = 48, .d = 64, .page = 16, .pages = 5, .max_pages = 3};
  const rt::AttentionSize& z = plan.paged;
  const int64_t row = z.hkv * z.d, cache = z.pages * z.page * row, dense = z.b * z.hkv * z.skv * z.d;
  const std::vector<int32_t> table = {4, 0, 2, 1, 7, 3, -1, 2, 0}, lens = {100, 40, -5};
  std::vector<uint16_t> kc(cache), vc(cache);
  for (int64_t i = 0; i < cache; ++i) kc[i] = static_cast<uint16_t>(i * 7 + 1), vc[i] = static_cast<uint16_t>(i * 3 + 2);
  emu::Device dev;
  auto put = [&](const void* host, size_t bytes) {
    absl::StatusOr<uint64_t> at = dev.Allocate(bytes);
    EXPECT_TRUE(at.ok() && dev.CopyIn(*at, host, bytes).ok());
    return *at;
  };
  const uint64_t kp = put(kc.data(), cache * 2), vp = put(vc.data(), cache * 2),
                 tp = put(table.data(), table.size() * 4), lp = put(lens.data(), lens.size() * 4);
  const uint64_t kd = *dev.AllocatePoisoned(dense * 2, 0xab), vd = *dev.AllocatePoisoned(dense * 2, 0xab);
  const rt::Bundle b = CachedBundle("attention/dense_from_pages.d64");
  absl::StatusOr<std::vector<rt::Arg>> args =
      rt::CopyPagesArgs(b.manifest, plan, {.k = kp, .v = vp, .seq_lens = lp, .block_table = tp}, kd, vd);
  ASSERT_TRUE(args.ok()) << args.status();
  absl::StatusOr<emu::Stats> st = emu::Launch(dev, b, *args, {.seed = 3});
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<uint16_t> kout(dense), vout(dense);
  ASSERT_TRUE(dev.CopyOut(kout.data(), kd, dense * 2).ok());
  ASSERT_TRUE(dev.CopyOut(vout.data(), vd, dense * 2).ok());
  int64_t copied = 0, zeros = 0, left = 0;
  for (int64_t bi = 0; bi < z.b; ++bi) {
    const int64_t len = bi == 1 ? 40 : z.skv;
    for (int64_t h = 0; h < z.hkv; ++h)
      for (int64_t j = 0; j < z.skv; ++j)
        for (int64_t e = 0; e < z.d; ++e) {
          const int64_t at = ((bi * z.hkv + h) * z.skv + j) * z.d + e;
          const uint32_t entry = static_cast<uint32_t>(table[bi * z.max_pages + j / z.page]);
          uint16_t want_k = 0xabab, want_v = 0xabab;
          if (j < len && entry < static_cast<uint32_t>(z.pages)) {
            const int64_t from = ((entry * z.page + j % z.page) * z.hkv + h) * z.d + e;
            want_k = kc[from], want_v = vc[from], ++copied;
          } else if (j < len) {
            want_k = want_v = 0, ++zeros;
          } else {
            ++left;
          }
          ASSERT_EQ(kout[at], want_k) << "K b" << bi << " h" << h << " key " << j << " col " << e;
          ASSERT_EQ(vout[at], want_v) << "V b" << bi << " h" << h << " key " << j << " col " << e;
        }
  }
  EXPECT_GT(copied, 0);
  EXPECT_EQ(zeros, 2 * 16 * z.hkv * z.d);  // b1's page 7 (keys 16-31), b2's page -1 (keys 0-15)
  EXPECT_EQ(left, 8 * z.hkv * z.d);        // b1's keys 40-47
}

// The "gather" variants (pages of 16 copied by the producer's threads with cp.async, arriving on
// the stage as they land): decode at every D, prefill at D = 128; pages shuffled, rows past Skv
// NaN, the last key tile partly past the sequence (decode: one key in it).
TEST(EmulatedAttentionGather, CopiesPagesOf16ByThreads) {
  for (int d : {64, 128, 256}) {
    const Case c{{.b = 2, .hq = 8, .hkv = 2, .s = 1, .skv = 257, .d = d}, {}};
    absl::StatusOr<rt::AttentionPlan> plan =
        rt::PlanAttention(PagedSize(c.size, 16), c.options, {16, 16, 16, 16, 16, 16, 16}, 90);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::optional<rt::Bundle> combine;
    if (plan->splits > 1) combine = CachedBundle(plan->combine);
    rt::Bundle gather = CachedBundle(plan->kernel + ".gather");
    gather.manifest.name = plan->kernel;  // (in the plan's place: the harness runs the plan's)
    absl::StatusOr<AttentionResult> r = RunAttentionEmulated(gather, c.size, c.options, 5,
                                                             combine ? &*combine : nullptr, 16);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->passed) << plan->kernel << ".gather: " << r->failure;
  }
  const Case c{{.b = 2, .hq = 4, .hkv = 2, .s = 100, .skv = 300, .d = 128}, {.causal = true}};
  rt::Bundle gather = CachedBundle("attention/hopper.d128.causal.page16.gather");
  gather.manifest.name = "attention/hopper.d128.causal.persist.page16";  // (the plan's: a CTA per SM)
  absl::StatusOr<AttentionResult> r = RunAttentionEmulated(gather, c.size, c.options, 5, nullptr, 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed) << r->failure;
  EXPECT_EQ(r->rows_checked, c.size.b * c.size.hq * c.size.s);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, EmulatedAttention, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

// attention/blackwell (sm_100a, S and O in tensor memory), the same cases: the emulator is where
// it runs here.
class EmulatedBlackwellAttention : public ::testing::TestWithParam<int> {};

TEST_P(EmulatedBlackwellAttention, RaggedLengthsAndGroupedHeads) {
  const int d = GetParam();
  for (bool causal : {false, true}) {
    ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 130, .d = d}, {.causal = causal}}, 3, 100);
    ExpectCorrect({{.b = 2, .hq = 1, .hkv = 1, .s = 1, .skv = 70, .d = d}, {.causal = causal}}, 3, 100);
    ExpectCorrect({{.b = 1, .hq = 1, .hkv = 1, .s = 150, .skv = 20, .d = d}, {.causal = causal}}, 3, 100);
  }
  ExpectCorrect({{.b = 1, .hq = 2, .hkv = 2, .s = 60, .skv = 300, .d = d}, {.dtype = "f16", .causal = true}}, 4, 100);
}

// The same on sm_100: attention/blackwell's split, merged by attention/combine.sm100a.
TEST_P(EmulatedBlackwellAttention, DecodePacksTheHeadsOfAKvHeadAndSplitsTheKeys) {
  ExpectDecodeSplitsTheKeys(GetParam(), 100);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, EmulatedBlackwellAttention, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

// The Hopper kernel's other tilings (three consumer warpgroups, 176-key tiles, deeper rings) at
// ragged sizes, through the entry point's kernel override.
TEST(EmulatedAttention, OtherTilings) {
  for (const char* tiling :
       {"wg2", "bn176", "bn64.st3", "wg3.bn192", "persist", "wg2.persist", "wg1.bn64.st2.cta2",
        "wgtid",  // (the warpgroup index from the thread index; D = 64 takes lane 0's)
        "ctadiag"})  // (causally every warpgroup to the tile's last diagonal; D = 64 stops at its own)
    for (bool causal : {false, true}) {
      rt::AttentionOptions o{.causal = causal};
      o.kernel = absl::StrCat("attention/hopper.d64", causal ? ".causal" : "", ".", tiling);
      ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 200, .skv = 600, .d = 64}, o});  // rings wrap twice
    }
  rt::AttentionOptions o;
  o.kernel = "attention/hopper.d128.bn176";
  ExpectCorrect({{.b = 1, .hq = 1, .hkv = 1, .s = 130, .skv = 400, .d = 128}, o});
  // Persistent CTAs without a mask at D = 128: each CTA's six tiles run as one stream of steps
  // (a tile's epilogue inside the next tile's first step), ragged in both lengths.
  o.kernel = "attention/hopper.d128.persist";
  ExpectCorrect({{.b = 2, .hq = 3, .hkv = 1, .s = 300, .skv = 200, .d = 128}, o});
  // Persistent CTAs at D = 256 (one Q stage: each tile's stage comes back after its store), the
  // three SMs of the emulated GPU walking six query tiles; the warpgroup index from lane 0 (D = 256
  // takes the thread index's).
  o.kernel = "attention/hopper.d256.causal.persist.wgshfl";
  o.causal = true;
  ExpectCorrect({{.b = 2, .hq = 3, .hkv = 1, .s = 140, .skv = 140, .d = 256}, o});
}

// Causally each consumer warpgroup stops at its own rows' diagonal (wgdiag): at D = 64 (three
// warpgroups of 64 rows, key tiles of 128) the first warpgroup passes the last key tile of most
// query tiles; a warpgroup that stopped a tile early would miss keys its rows see. Query tiles
// ragged, the diagonal shifted by a longer key sequence, grouped heads, a CTA per tile and
// persistent; at D = 256 (64-key tiles) two warpgroups.
TEST(EmulatedAttention, EachWarpgroupStopsAtItsOwnDiagonal) {
  for (const char* name : {"attention/hopper.d64.causal.wgdiag",
                           "attention/hopper.d64.causal.persist.wgdiag"}) {
    rt::AttentionOptions o{.causal = true, .kernel = name};
    ExpectCorrect({{.b = 1, .hq = 4, .hkv = 2, .s = 450, .skv = 517, .d = 64}, o});
  }
  rt::AttentionOptions o{.causal = true, .kernel = "attention/hopper.d256.causal.wgdiag"};
  ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 200, .skv = 200, .d = 256}, o});
  // Over a paged cache whose rows past the length are NaN: in the query tile of rows 384-575 (of
  // 600) the first two warpgroups stop a key tile early, so the third, first in turn to read the
  // last V stage, zeroes its rows past 600 (the first warpgroup zeroing it left them NaN).
  o.kernel = "attention/hopper.d64.causal.page16.wgdiag";
  ExpectCorrect({{.b = 1, .hq = 2, .hkv = 2, .s = 600, .skv = 600, .d = 64}, o}, 3, 90, 16);
  // Packed sequences, each causal mask its own, the next sequence's rows past each length (run
  // under the plan's name, as the harness checks it).
  for (const char* walk : {".persist", ""}) {
    rt::Bundle b = CachedBundle(absl::StrCat("attention/hopper.d64.causal", walk, ".varlen.wgdiag"));
    b.manifest.name = "attention/hopper.d64.causal.persist.varlen";
    absl::StatusOr<AttentionResult> r =
        RunVarlenAttentionEmulated(b, {.hq = 2, .hkv = 1, .d = 64}, {300, 600, 7}, {.causal = true}, 2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->passed) << walk << ": " << r->failure;
  }
}

// A planted mistake in a persistent Hopper kernel whose CTAs each run two tiles (six tiles, the
// emulated GPU's three SMs): the D = 256 kernel's producer refills its one Q stage without
// waiting for the consumers to free it (the wait of hopper_producer.cc:25 skipped in the PTX).
// The emulator reports it at a DSL line of the kernel.
// The line of the producer's source that fills a Q stage (its .loc in the PTX), read from the
// source so that edits above it do not move the plant.
int QStageProduceLine() {
  std::ifstream source(std::string(KILN_SOURCE_DIR) + "/ops/attention/kernels/hopper_producer.cc");
  std::string line;
  for (int n = 1; std::getline(source, line); ++n)
    if (line.find("q_ring.Produce") != std::string::npos) return n;
  return -1;
}

// The checks tell NaN a kernel wrote from elements that still hold the poison's bits (0xff
// bytes), in 16-bit outputs of either type and in f32 lse.
TEST(AttentionCheck, NanWrittenIsToldFromNanNeverWritten) {
  NanCount n;
  n.Add16(0xffff, /*half=*/false), n.Add16(0xffff, /*half=*/true);  // the poison: never written
  n.Add16(0x7fc0, false), n.Add16(0x7e00, true);                       // NaN written
  n.Add16(0x3f80, false);                                              // 1.0
  n.Add32(std::bit_cast<float>(0xffffffffu)), n.Add32(std::bit_cast<float>(0x7fffffffu));
  n.Add32(-1.0f), n.Add32(-INFINITY);  // an lse of -inf is a row that sees no key
  EXPECT_EQ(n.never_written, 3);
  EXPECT_EQ(n.written, 3);
  EXPECT_EQ(n.Describe("O and lse").rfind("6 elements of O and lse NaN: 3 never written (still "
                                          "the poison's bits), 3 written as NaN (",
                                          0),
            0u)
      << n.Describe("O and lse");
  // An O of inf (either sign) is never right: counted with the NaN a kernel wrote.
  n.Add16(0x7f80, false), n.Add16(0xfc00, true);
  EXPECT_EQ(n.infinite, 2);
  EXPECT_EQ(n.Describe("O and lse").rfind("8 elements of O and lse NaN or inf: 3 never written (still "
                                          "the poison's bits), 5 written as NaN or inf (",
                                          0),
            0u)
      << n.Describe("O and lse");
  EXPECT_FALSE(NanCount());
}

// The build of the attention kernel `name` (NotFound where no family has it).
absl::StatusOr<KernelDef> BuildNamed(const std::string& name) {
  const Example* e = Find(name);
  return e ? e->build() : absl::StatusOr<KernelDef>(absl::NotFoundError(name));
}

// A name that sets one thing twice is refused, naming both options, rather than read as its
// last option; options of different slots still combine.
TEST(AttentionOptions, AnOptionSetTwiceIsAMessage) {
  const std::pair<const char*, const char*> cases[] = {
      {"attention/hopper.d64.lazy.eager", "'lazy' and 'eager'"},
      {"attention/hopper.d64.wg2.wg3", "'wg2' and 'wg3'"},
      {"attention/hopper.d64.causal.causal", "'causal' given twice"},
      {"attention/hopper.d64.d128", "'d64' and 'd128'"},
      {"attention/hopper.d128.page16.page32", "'page16' and 'page32'"},
      {"attention/hopper_dq.d64.wgtid.wgshfl", "'wgtid' and 'wgshfl'"},
      {"attention/hopper.d64.causal.wgdiag.ctadiag", "'wgdiag' and 'ctadiag'"}};
  for (const auto& [name, words] : cases) {
    absl::StatusOr<KernelDef> def = BuildNamed(name);
    ASSERT_FALSE(def.ok()) << name;
    EXPECT_NE(def.status().message().find(words), std::string::npos) << def.status();
  }
  EXPECT_TRUE(BuildNamed("attention/hopper.d64.wg1.bn64.st2.lazy.wgtid.split").ok());
}

// A tiling option a kernel cannot take is its message, with the DSL line of the check, and no
// crash: the builders stop after their option checks (a key tile of 100 rows once reached code
// that assumes a multiple of 16), and the backward kernels refuse the key tiles they do not take.
TEST(AttentionOptions, ATilingAKernelCannotTakeIsAMessage) {
  const std::pair<const char*, const char*> cases[] = {
      {"attention/hopper.d64.bn100", "hopper.cc"},
      {"attention/hopper.d128.bn17", "hopper.cc"},
      {"attention/hopper_dkdv.d64.bn7", "hopper_dkdv.cc"},
      {"attention/hopper_dkdv.d256.bn7", "hopper_dkdv_split.cc"},
      {"attention/hopper_dq.d64.bn100", "hopper_dq.cc"}};
  for (const auto& [name, file] : cases) {
    absl::StatusOr<KernelDef> def = BuildNamed(name);
    ASSERT_FALSE(def.ok()) << name;
    ASSERT_FALSE(absl::IsNotFound(def.status())) << def.status();
    EXPECT_NE(def.status().message().find(file), std::string::npos) << def.status();
    EXPECT_NE(def.status().message().find("key tile"), std::string::npos) << def.status();
  }
}

TEST(EmulatedAttention, AQStageRefilledBeforeItsReleaseIsCaught) {
  rt::Bundle b = BundleWithLines("attention/hopper.d256.causal.persist");
  const std::string file = "\"ops/attention/kernels/hopper_producer.cc\"";
  const size_t file_at = b.ptx.find(file);
  ASSERT_NE(file_at, std::string::npos);
  const size_t index_at = b.ptx.rfind(".file\t", file_at) + 6;
  const std::string index = b.ptx.substr(index_at, b.ptx.find(' ', index_at) - index_at);
  const int line = QStageProduceLine();
  ASSERT_GT(line, 0);
  const size_t loc = b.ptx.find(absl::StrCat(".loc\t", index, " ", line, " "));
  ASSERT_NE(loc, std::string::npos);
  const size_t wait = b.ptx.find("mbarrier.try_wait.parity.shared::cta.b64 done,", loc);
  ASSERT_NE(wait, std::string::npos);
  b.ptx.replace(wait, b.ptx.find(';', wait) + 1 - wait, "setp.eq.u32 done, 1, 1;");
  rt::AttentionOptions o{.causal = true};
  o.kernel = "attention/hopper.d256.causal.persist";
  absl::StatusOr<AttentionResult> r =
      RunAttentionEmulated(b, {.b = 2, .hq = 3, .hkv = 1, .s = 128, .skv = 128, .d = 256}, o, 3);
  ASSERT_FALSE(r.ok() && r->passed) << "the early refill went unseen";
  const std::string report(r.ok() ? r->failure : r.status().message());
  EXPECT_EQ(report.rfind("ops/attention/kernels/", 0), 0u) << report;  // a DSL line first
}

// Wrong results with no protocol mistake name their place: the first wrong element, its query
// tile, the block, thread and instruction that wrote it (for O, the TMA store and the shared
// write behind it), and the earliest-written wrong one. Planted in the PTX of the persistent
// D = 128 kernel: O left undivided by its row's sum (rcp replaced by a move), and lse left in
// log2 units (its factor ln 2 replaced by 1).
TEST(EmulatedAttention, AWrongResultNamesItsPlace) {
  struct Plant {
    std::string from, to, element;
  };
  for (const Plant& p : {Plant{"rcp.rn.f32", "mov.b32", "the first wrong element: O[0][0][0][0]"},
                         Plant{"0f3F317218", "0f3F800000", "the first wrong element: lse[0][0][0]"}}) {
    rt::Bundle b = BundleWithLines("attention/hopper.d128.persist");
    size_t count = 0;
    for (size_t at = b.ptx.find(p.from); at != std::string::npos; at = b.ptx.find(p.from, at + 1), ++count)
      b.ptx.replace(at, p.from.size(), p.to);
    ASSERT_GT(count, 0u) << p.from;
    rt::AttentionOptions o;
    o.kernel = "attention/hopper.d128.persist";
    absl::StatusOr<AttentionResult> r =
        RunAttentionEmulated(b, {.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 130, .d = 128}, o, 3);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->passed) << p.from;
    std::cout << "  " << p.from << " -> " << p.to << ": " << r->failure << "\n";
    for (const std::string& part : {p.element, std::string("query tile 0 of 128 rows"), std::string("written by block"),
                                    std::string("ops/attention/kernels/"), std::string("the wrong element written first: ")})
      EXPECT_NE(r->failure.find(part), std::string::npos) << part << " not in: " << r->failure;
  }
}

// The forward's own options are refused where they would be ignored: wgdiag without a mask or
// with split-KV, lazy or wgdiag by the backward's kernels and Blackwell's.
TEST(AttentionOptions, AForwardOptionElsewhereIsAMessage) {
  const std::pair<const char*, const char*> cases[] = {
      {"attention/hopper.d64.wgdiag", "causal"},
      {"attention/hopper.d64.causal.split.wgdiag", "no split"},
      {"attention/hopper.d128.causal.wg1.wgdiag", "two or three"},
      {"attention/hopper_dkdv.d64.wgdiag", "attention/hopper_dkdv takes no"},
      {"attention/hopper_dq.d128.lazy", "attention/hopper_dq takes no"},
      {"attention/blackwell.d64.causal.wgdiag", "wgdiag"},
      {"attention/blackwell_dq.d64.wgtid", "one tiling"}};
  for (const auto& [name, words] : cases) {
    absl::StatusOr<KernelDef> def = BuildNamed(name);
    ASSERT_FALSE(def.ok()) << name;
    EXPECT_NE(def.status().message().find(words), std::string::npos) << def.status();
  }
}

// Causal tiles are numbered in groups of at most 16 heads, the longest of the group first, and a
// CTA per tile prefetches the Q of the tile 132 on: 70 heads of two query tiles (140 tiles) make
// four whole groups and a last one of six heads, and the first eight tiles prefetch.
TEST(EmulatedAttention, CausalHeadGroupsAndTheQPrefetch) {
  ExpectCorrect({{.b = 5, .hq = 14, .hkv = 7, .s = 130, .skv = 130, .d = 64}, {.causal = true}});
}

// The rows layout [B, S, H, D] (torch's), each position's row of heads padded with NaN (the
// harness's RowsSize: a read past the heads would show in O, a write past them in the pad): two
// batches whose boxes the maps clip at each batch's last row, through the kernels the plan picks
// (a persistent CTA per SM at D = 128, two warpgroups a tile for short causal D = 64, D = 256).
TEST(EmulatedAttention, TheRowsLayout) {
  ExpectCorrect({{.b = 2, .hq = 4, .hkv = 2, .s = 130, .skv = 200, .d = 128, .rows = true}, {}});
  ExpectCorrect(
      {{.b = 2, .hq = 2, .hkv = 1, .s = 100, .skv = 100, .d = 64, .rows = true}, {.causal = true}});
  ExpectCorrect({{.b = 2, .hq = 2, .hkv = 2, .s = 70, .skv = 90, .d = 256, .rows = true},
                 {.dtype = "f16", .causal = true}});
}

TEST(EmulatedAttention, Fp16AndAScaleOfItsOwn) {
  ExpectCorrect({{.b = 1, .hq = 3, .hkv = 3, .s = 200, .skv = 260, .d = 128},
                 {.dtype = "f16", .causal = true, .scale = 0.3f}});
}

// Lazy rescaling (the persistent kernels' default): at scale 2 a row's scores spread over hundreds
// of log2 units, so later key tiles pass the row's reference by more than 2^8 and O must be
// rescaled then; at scale 0.02 never after the first tile. The same problems eagerly rescaled.
TEST(EmulatedAttention, LazyRescaleWhereTheMaximumMovesAndWhereItDoesNot) {
  for (const char* kernel : {"attention/hopper.d128.persist", "attention/hopper.d128.persist.eager"})
    for (float scale : {2.0f, 0.02f}) {
      rt::AttentionOptions o{.scale = scale};
      o.kernel = kernel;
      ExpectCorrect({{.b = 1, .hq = 2, .hkv = 1, .s = 130, .skv = 600, .d = 128}, o});
    }
}

// The check would notice a kernel computing something else: the same output checked as if it
// were causal fails.
TEST(EmulatedAttention, AWrongMaskFailsTheCheck) {
  const rt::AttentionSize z{.b = 1, .hq = 1, .hkv = 1, .s = 70, .skv = 70, .d = 64};
  absl::StatusOr<rt::AttentionPlan> plan = rt::PlanAttention(z, {}, {16, 16, 16, 16, 16}, 90);
  ASSERT_TRUE(plan.ok());
  rt::Bundle b = CachedBundle(plan->kernel);
  // Run the non-causal kernel but describe the problem as causal: the harness picks the causal
  // kernel by name, so rename the bundle to it.
  b.manifest.name = rt::PlanAttention(z, {.causal = true}, {16, 16, 16, 16, 16}, 90)->kernel;
  absl::StatusOr<AttentionResult> r = RunAttentionEmulated(b, z, {.causal = true}, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed) << "error " << r->rel_error;
}

// Packed sequences through the harness (`kiln attention --varlen`): lengths that end inside a
// tile (O row by row), one of a single token, two whole 192-row tiles (O in TMA boxes), each row
// against its own sequence's reference; and the check fails the non-causal kernel run as the
// causal one.
TEST(EmulatedAttention, PackedSequencesThroughTheHarness) {
  const std::vector<int64_t> lengths = {7, 130, 1, 384, 64};
  const rt::AttentionSize heads{.hq = 4, .hkv = 2, .d = 64};
  // The plan's persistent CTAs (tiles from a counter, those past the last sequence's seeing no
  // key) and a CTA per tile (the kernel's form at D = 256), named as the plan names it.
  for (const char* walk : {".persist", ""})
    for (bool causal : {false, true}) {
      const std::string kind = causal ? ".causal" : "";
      rt::Bundle b = CachedBundle(absl::StrCat("attention/hopper.d64", kind, walk, ".varlen"));
      b.manifest.name = absl::StrCat("attention/hopper.d64", kind, ".persist.varlen");
      absl::StatusOr<AttentionResult> r = RunVarlenAttentionEmulated(b, heads, lengths, {.causal = causal}, 2);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->passed) << walk << ": " << r->failure;
      EXPECT_EQ(r->rows_checked, 586 * 4);
    }
  rt::Bundle wrong = CachedBundle("attention/hopper.d64.persist.varlen");
  wrong.manifest.name = "attention/hopper.d64.causal.persist.varlen";
  absl::StatusOr<AttentionResult> r = RunVarlenAttentionEmulated(wrong, heads, lengths, {.causal = true}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed) << "error " << r->rel_error;
}

// The persistent walk's orders at D = 128 (PackedTileOf): without a mask each head's ranks in
// turn; causally groups of sequences whose K and V fit in L2, here 4 of the 5 and then the last
// alone (16 KV heads of 2 ranks), the ranks past a sequence's tiles passed over by the producer.
TEST(EmulatedAttention, PackedSequencesInTheirL2Order) {
  const std::vector<int64_t> lengths = {7, 130, 1, 64, 256};
  for (bool causal : {false, true}) {
    const std::string name =
        absl::StrCat("attention/hopper.d128", causal ? ".causal" : "", ".persist.varlen");
    absl::StatusOr<AttentionResult> r = RunVarlenAttentionEmulated(
        CachedBundle(name), {.hq = 16, .hkv = 16, .d = 128}, lengths, {.causal = causal}, 3);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->passed) << name << ": " << r->failure;
    EXPECT_GT(r->rows_checked, 100);  // (and all of O and lse scanned for the poison)
  }
}

// tcgen05.st is asynchronous until the storing thread's tcgen05.wait::st: without the wait, the
// emulator reports the next use of those columns (P V's MMA into the rescaled O), naming the store.
TEST(EmulatedBlackwellAttention, AStoreToTensorMemoryWithoutItsWaitIsReported) {
  rt::Bundle b = BundleWithLines("attention/blackwell.d64");
  const std::string wait = "tcgen05.wait::st.sync.aligned;";
  ASSERT_NE(b.ptx.find(wait), std::string::npos);
  for (size_t at; (at = b.ptx.find(wait)) != std::string::npos;) b.ptx.replace(at, wait.size(), "");
  absl::StatusOr<AttentionResult> r =
      RunAttentionEmulated(b, {.b = 1, .hq = 1, .hkv = 1, .s = 100, .skv = 300, .d = 64}, {}, 1);
  ASSERT_FALSE(r.ok()) << "no report; the check " << (r->passed ? "passed" : "failed");
  EXPECT_NE(r.status().message().find("have not run tcgen05.wait::st"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("ops/attention/kernels/blackwell.cc:"), std::string::npos) << r.status();
}

// Packed sequences of close lengths take the persistent walk by rank; lengths far apart (most
// ranks empty) a CTA per tile; D = 256 a CTA per tile.
TEST(AttentionPlan, PackedSequencesPersistWhereTheirLengthsAreClose) {
  const rt::AttentionOperands ops{16, 16, 16, 16, 16, 0, 0, 16};
  auto kernel = [&](int64_t b, int64_t longest, int64_t total, int64_t d) {
    rt::AttentionSize z{.b = b, .hq = 16, .hkv = 4, .s = longest, .skv = longest, .d = d};
    z.varlen = true, z.total = total;
    absl::StatusOr<rt::AttentionPlan> p = rt::PlanAttention(z, {.causal = true}, ops, 90);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->kernel : "";
  };
  EXPECT_EQ(kernel(8, 2048, 8 * 2048, 128), "attention/hopper.d128.causal.persist.varlen");
  EXPECT_EQ(kernel(16, 32768, 76065, 128), "attention/hopper.d128.causal.varlen");
  EXPECT_EQ(kernel(8, 4096, 8 * 4096, 64), "attention/hopper.d64.causal.persist.varlen");
  EXPECT_EQ(kernel(8, 2048, 8 * 2048, 256), "attention/hopper.d256.causal.varlen");
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
  rt::AttentionOptions other;
  other.kernel = "attention/hopper.d64.wg3";  // a D = 128 problem
  EXPECT_NE(error({}, other, ok, 90).find("does not compute this problem"), std::string::npos);
  EXPECT_NE(error({}, other, ok, 90).find("(it lacks .d128; this problem takes no .d64)"),
            std::string::npos);
  other.kernel = "attention/hopper.d128.causal";  // not causal
  EXPECT_NE(error({}, other, ok, 90).find("does not compute this problem (this problem takes no "
                                          ".causal): it runs attention/hopper.d128"),
            std::string::npos);
  other.kernel = "attention/hopper.d128.wgx";
  EXPECT_NE(error({}, other, ok, 90).find("does not compute this problem"), std::string::npos);
  // A paged decode takes the gather variant of its kernel (its parts still planned), not another
  // page size's.
  const rt::AttentionOperands paged{16, 16, 16, 16, 16, 16, 16};
  const rt::AttentionSize decode = PagedSize({.b = 1, .hq = 32, .hkv = 8, .s = 1, .skv = 8192}, 16);
  other.kernel = "attention/hopper.d128.wg1.bn128.st3.page16.split.gather";
  absl::StatusOr<rt::AttentionPlan> gathered = rt::PlanAttention(decode, other, paged, 90);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(gathered->kernel, other.kernel);
  EXPECT_EQ(gathered->splits, rt::PlanAttention(decode, {}, paged, 90)->splits);
  EXPECT_GT(gathered->splits, 1);
  other.kernel = "attention/hopper.d128.wg1.bn128.st3.page32.split";
  EXPECT_NE(error(decode, other, paged, 90).find("does not compute this problem"), std::string::npos);
  // A paged prefill of at least kLeastCopiedRows query rows a key row over pages of 16 (32 at D of
  // 128 or less) copies its pages into dense K and V and runs the dense plan's tiling over them;
  // shorter ones, larger pages, copies past kMostCopiedBytes and decode run the paged kernels; an
  // override naming a paged kernel keeps it.
  auto paged_plan = [&](rt::AttentionSize z, int64_t page, rt::AttentionOptions o = {}) {
    absl::StatusOr<rt::AttentionPlan> r = rt::PlanAttention(PagedSize(z, page), o, paged, 90);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const rt::AttentionSize prefill{.b = 4, .hq = 32, .hkv = 8, .s = 4096, .skv = 4096};
  rt::AttentionPlan copied = paged_plan(prefill, 16);
  EXPECT_EQ(copied.copy_pages, "attention/dense_from_pages.d128");
  EXPECT_EQ(copied.kernel, "attention/hopper.d128.bn160.persist.lens");
  EXPECT_EQ(paged_plan(prefill, 16, {.causal = true}).kernel, "attention/hopper.d128.causal.persist.lens");
  EXPECT_EQ(rt::CopiedBytes(copied.paged), 4 * 8 * 4096 * 128 * 2);
  rt::AttentionSize chunk = prefill;
  chunk.s = rt::kLeastCopiedRows / 4 - 64;  // 4 query heads a KV head
  EXPECT_TRUE(paged_plan(chunk, 16).copy_pages.empty());
  chunk.s += 64;
  EXPECT_FALSE(paged_plan(chunk, 16).copy_pages.empty());
  EXPECT_FALSE(paged_plan(prefill, 32).copy_pages.empty());
  EXPECT_TRUE(paged_plan(prefill, 64).copy_pages.empty());
  rt::AttentionSize d256 = prefill;
  d256.d = 256;
  EXPECT_EQ(paged_plan(d256, 16).kernel, "attention/hopper.d256.lens");
  EXPECT_TRUE(paged_plan(d256, 32).copy_pages.empty());
  rt::AttentionSize huge = prefill;
  huge.b = rt::kMostCopiedBytes / (2 * 8 * 4096 * 128 * 2) + 1;
  EXPECT_TRUE(paged_plan(huge, 16).copy_pages.empty());
  EXPECT_TRUE(paged_plan(decode, 16).copy_pages.empty());
  rt::AttentionOptions paged_kernel;
  paged_kernel.kernel = "attention/hopper.d128.bn128.persist.page16";
  EXPECT_EQ(paged_plan(prefill, 16, paged_kernel).kernel, paged_kernel.kernel);
  EXPECT_TRUE(paged_plan(prefill, 16, paged_kernel).copy_pages.empty());
  rt::AttentionOptions copied_kernel;  // a copy asked for past what the copy's indices reach
  copied_kernel.kernel = "attention/hopper.d128.bn160.persist.lens";
  rt::AttentionSize past = prefill;
  past.b = 4097;  // 4097 x 8 x 4096 x 128 x 2 bytes: past 32 GiB
  EXPECT_NE(error(PagedSize(past, 16), copied_kernel, paged, 90).find("past the copy's 32 GiB"),
            std::string::npos);
  EXPECT_EQ(rt::PlanAttention({.s = 1024, .skv = 1024}, {}, ok, 100)->kernel, "attention/blackwell.d128");
  EXPECT_EQ(rt::PlanAttention({.hq = 8, .hkv = 2, .skv = 8192}, {}, ok, 100)->kernel,
            "attention/blackwell.d128.split");  // decode
  // Persistent CTAs at D = 128 and at D = 64 without a mask; 160-key tiles at D = 128 without a
  // mask where they pad the keys by under 2%.
  auto planned = [&](int64_t s, bool causal, int d = 128) {
    return rt::PlanAttention({.b = 1, .hq = 16, .hkv = 16, .s = s, .skv = s, .d = d}, {.causal = causal}, ok, 90)
        ->kernel;
  };
  EXPECT_EQ(planned(1024, false), "attention/hopper.d128.persist");          // 160: 1120 keys
  EXPECT_EQ(planned(2048, false), "attention/hopper.d128.bn160.persist");    // 160: 2080 keys
  EXPECT_EQ(planned(16384, false), "attention/hopper.d128.bn160.persist");
  EXPECT_EQ(planned(100, false), "attention/hopper.d128.persist");
  EXPECT_EQ(planned(16384, true), "attention/hopper.d128.causal.persist");
  EXPECT_EQ(planned(4096, false, 256), "attention/hopper.d256");
  other.kernel = "attention/hopper.d128";  // a persistent plan run by a CTA per tile: allowed
  EXPECT_TRUE(rt::PlanAttention({.s = 1024, .skv = 1024}, other, ok, 90).ok());
  other.kernel = "attention/hopper.d128.bn176.eager";  // and any tiling and rescale
  EXPECT_TRUE(rt::PlanAttention({.s = 1024, .skv = 1024}, other, ok, 90).ok());
  // D = 64: three consumer warpgroups, persistent without a mask; causal in two warpgroups for
  // tiles of fewer than 8 key tiles, persistent up to 40, then a CTA per tile.
  EXPECT_EQ(planned(1024, false, 64), "attention/hopper.d64.persist");
  EXPECT_EQ(planned(1024, true, 64), "attention/hopper.d64.causal.wg2");
  EXPECT_EQ(planned(2048, true, 64), "attention/hopper.d64.causal.persist");
  EXPECT_EQ(planned(8192, true, 64), "attention/hopper.d64.causal.persist");
  EXPECT_EQ(planned(16384, true, 64), "attention/hopper.d64.causal");
  // The rows layout: the prefill kernels' rows form, decode shapes included; strides of whole
  // rows of heads, in 16-byte steps.
  rt::AttentionSize rows{.b = 2, .hq = 16, .hkv = 16, .s = 4096, .skv = 4096, .d = 128, .rows = true};
  EXPECT_EQ(rt::PlanAttention(rows, {}, ok, 90)->kernel, "attention/hopper.d128.bn160.persist.rows");
  rows.s = 1, rows.hkv = 2;
  EXPECT_EQ(rt::PlanAttention(rows, {}, ok, 90)->kernel, "attention/hopper.d128.bn160.persist.rows");
  rows.q_stride = 16 * 128 - 8;
  EXPECT_NE(error(rows, {}, ok, 90).find("q_stride = 2040"), std::string::npos);
  rows.q_stride = 16 * 128 + 4;
  EXPECT_NE(error(rows, {}, ok, 90).find("multiple of 8"), std::string::npos);
  rows.q_stride = 0, rows.lens = true;
  EXPECT_NE(error(rows, {}, ok, 90).find("rows layout"), std::string::npos);
  rows.lens = false;
  EXPECT_NE(error(rows, {}, ok, 100).find("rows layout"), std::string::npos);
  rt::AttentionOptions three{.causal = true};  // a two-warpgroup plan run by three: allowed
  three.kernel = "attention/hopper.d64.causal";
  EXPECT_TRUE(rt::PlanAttention({.s = 1024, .skv = 1024, .d = 64}, three, ok, 90).ok());
}

}  // namespace
}  // namespace kiln::examples
