// The 8-bit GEMM entry point (e4m3 on the tile kernels, each stage's partial sums promoted with
// their scales) on the emulator at small ragged sizes, every scaling, against the harness's fp64
// product of the dequantized inputs; and the plan's errors.
#include "ops/gemm/gemm_fp8.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kiln/ops/gemm_choice.h"
#include "ops/gemm/fp8_check.h"
#include "tests/unit/built_bundle.h"

namespace kiln::examples {
namespace {

void ExpectCorrect(const rt::GemmSize& size, const std::string& scaling,
                   const std::string& out = "bf16", bool c_row_major = true,
                   const std::string& tile = "", int compute_capability = 90,
                   const std::string& a_type = "e4m3", const std::string& b_type = "e4m3") {
  const Fp8GemmProblem p{.size = size,
                         .scaling = scaling,
                         .out_type = out,
                         .c_row_major = c_row_major,
                         .tile = tile,
                         .compute_capability = compute_capability,
                         .a_type = a_type,
                         .b_type = b_type};
  absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 7);
  const std::string what =
      absl::StrCat(size.m, "x", size.n, "x", size.k, " ", a_type, "x", b_type, " ", scaling, " ",
                   out, c_row_major ? " row-major C " : " column-major C ", tile);
  ASSERT_TRUE(r.ok()) << what << ": " << r.status();
  EXPECT_TRUE(r->passed) << what << " (" << r->kernel << "): " << r->failure;
  // The quantization itself: e4m3 keeps 3 bits, so the product moves by a few percent.
  EXPECT_LT(r->quantized_error, 0.08) << what;
}

// Blockwise: a ragged M, N past a 128 block, K of 3 blocks and a partial one; the swapped problem
// (a row-major C: blockwise_t, B's scales per column) and the plain one (A's per row).
TEST(Fp8Gemm, BlockwiseRaggedBothOrientations) {
  ExpectCorrect({136, 200, 432}, "blockwise");
  ExpectCorrect({136, 200, 432}, "blockwise", "bf16", /*c_row_major=*/false);
}

// An e5m2 gradient by e4m3 (the backward pass's products): the wgmma's mixed types, each scaled to
// its own largest value; a row-major C swaps them into the kernel's B and A, a column-major one
// keeps them.
TEST(Fp8Gemm, AnE5m2OperandByAnE4m3One) {
  for (const char* scaling : {"tensorwise", "rowwise"})
    for (bool c_row_major : {true, false})
      ExpectCorrect({136, 200, 160}, scaling, "bf16", c_row_major, "", 90, "e5m2", "e4m3");
}

// The 128-column tiles, alone and in pairs sharing B (multicast): blockwise_t's scales a stage
// ahead over several tiles a CTA, blockwise's per row of A.
TEST(Fp8Gemm, WideTilesAloneAndInPairs) {
  for (const char* tile : {"gemm/bf16_sm90_n128c2", "gemm/bf16_sm90_n128"}) {
    ExpectCorrect({264, 136, 528}, "blockwise", "bf16", true, tile);
    ExpectCorrect({136, 264, 528}, "blockwise", "bf16", false, tile);
  }
}

// A row-major C stored by the tile (c_row: M past 128, A's scales per row, two stages ahead):
// ragged M and K (an odd count of k-tiles), N no multiple of 8 (C from registers), an f32 C, and
// K split in parts of odd lengths.
TEST(Fp8Gemm, RowMajorCStoredByTheTile) {
  ExpectCorrect({264, 200, 1200}, "blockwise");
  ExpectCorrect({300, 100, 400}, "blockwise");
  ExpectCorrect({264, 136, 528}, "blockwise", "f32");
  ExpectCorrect({256, 128, 4992}, "blockwise");
}

// Fused epilogues after the scales: stored by the tile (blockwise past 128 rows, the terms' C_in
// and residual read row-major), computed as C^T (tensorwise: bias_col becomes the kernel's
// bias_row), and C_in and the residual staged by TMA into a 128-column tile's C buffer.
void ExpectFused(const rt::GemmSize& size, const std::string& scaling, const std::string& terms,
                 const std::string& tile = "") {
  const Fp8GemmProblem p{.size = size, .scaling = scaling, .tile = tile, .epilogue = terms};
  absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 11);
  const std::string what =
      absl::StrCat(size.m, "x", size.n, "x", size.k, " ", scaling, " ", terms, " ", tile);
  ASSERT_TRUE(r.ok()) << what << ": " << r.status();
  EXPECT_TRUE(r->passed) << what << " (" << r->kernel << "): " << r->failure;
  EXPECT_NE(r->kernel.find(terms == "bias_col.relu" ? "bias_row.relu" : terms), std::string::npos)
      << r->kernel;
}
TEST(Fp8Gemm, FusedEpilogues) {
  ExpectFused({264, 200, 432}, "blockwise", "scale.bias_col.gelu.residual");
  ExpectFused({72, 136, 256}, "tensorwise", "bias_col.relu");
  ExpectFused({136, 264, 256}, "rowwise", "scale.residual", "gemm/bf16_sm90_n128");
}

// 192x128 tiles, three consumer warpgroups (their own named barriers, the C buffers and a ring
// that fits beside them): blockwise stored by the tile over three row tiles, the last ragged, with
// K split in parts; tensorwise computed as C^T, streamed; rowwise with a residual staged by TMA.
TEST(Fp8Gemm, ThreeConsumerWarpgroups) {
  const char* tile = "gemm/bf16_sm90_m192";
  ExpectCorrect({400, 136, 528}, "blockwise", "bf16", true, tile);
  for (const Fp8GemmProblem& p :
       {Fp8GemmProblem{.size = {400, 136, 1024}, .scaling = "blockwise", .tile = tile, .split = 2},
        Fp8GemmProblem{.size = {136, 400, 640}, .scaling = "tensorwise", .tile = tile, .split = 0}}) {
    absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 5);
    ASSERT_TRUE(r.ok()) << p.scaling << ": " << r.status();
    EXPECT_TRUE(r->passed) << r->kernel << " (" << r->why << "): " << r->failure;
    EXPECT_EQ(r->kernel.rfind(tile, 0), 0u) << r->kernel;
  }
  ExpectFused({136, 264, 256}, "rowwise", "scale.residual", tile);
}

// 128x192 tiles in pairs sharing B (two consumer warpgroups of 96 accumulator registers and as
// many partial ones), tensorwise and rowwise only: ragged whole tiles, streamed, and a residual;
// blockwise is refused by name.
TEST(Fp8Gemm, TilesOf192Columns) {
  const char* tile = "gemm/bf16_sm90_n192";
  ExpectCorrect({264, 400, 640}, "tensorwise", "bf16", false, tile);
  const Fp8GemmProblem streamed{
      .size = {136, 520, 1152}, .scaling = "rowwise", .tile = tile, .split = 0};
  absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, streamed, 5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed) << r->kernel << " (" << r->why << "): " << r->failure;
  EXPECT_EQ(r->kernel.rfind(tile, 0), 0u) << r->kernel;
  ExpectFused({136, 264, 256}, "tensorwise", "residual", tile);
  rt::GemmOptions blockwise{.in_type = "e4m3", .scaling = "blockwise", .fp8_tile = tile};
  const rt::GemmOperands ok{.a = 256, .b = 256, .c = 256, .scale_a = 256, .scale_b = 256};
  absl::StatusOr<rt::GemmPlan> p = rt::PlanGemm({256, 384, 256}, blockwise, ok, 90);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("tensorwise and rowwise scales only"), std::string::npos)
      << p.status();
}

// Blackwell (sm_100): the tcgen05 kind::f8f6f4 kernel, its two tensor-memory buffers in turn
// over an even and an odd count of k-tiles, ragged M, N (no multiple of 8) and K.
TEST(Fp8Gemm, BlackwellBlockwise) {
  for (const rt::GemmSize& size :
       {rt::GemmSize{136, 200, 432}, rt::GemmSize{300, 100, 400}, rt::GemmSize{64, 128, 1152}})
    ExpectCorrect(size, "blockwise", "bf16", true, "", 100);
}

// Tensorwise and rowwise in 128-row tiles accumulate two stages' groups before promoting them:
// units of 10 k-tiles (the first stage, four pairs, one left), split in 3 uneven parts, and
// streamed.
TEST(Fp8Gemm, StagesPromotedInTwos) {
  for (int split : {1, 3, 0}) {
    const Fp8GemmProblem p{.size = {136, 200, 1280},
                           .scaling = split == 3 ? "rowwise" : "tensorwise",
                           .tile = "gemm/bf16_sm90_n128",
                           .split = split};
    absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 3);
    ASSERT_TRUE(r.ok()) << split << ": " << r.status();
    EXPECT_TRUE(r->passed) << r->kernel << ", " << r->why << ": " << r->failure;
  }
}

// MXFP8 on Blackwell (gemm/mxfp8_sm100): UE8M0 scales per 1 x 32 of A and B, applied by
// tcgen05.mma kind::mxf8f6f4.block_scale from tensor memory. Ragged M, N and K (the last k-tile's
// word of scales part padding), and more k-tiles than stages (the scale slots reused).
TEST(Fp8Gemm, BlackwellMxfp8) {
  for (const rt::GemmSize& size : {rt::GemmSize{136, 200, 432}, rt::GemmSize{300, 100, 656}})
    ExpectCorrect(size, "mxfp8", "bf16", true, "", 100);
}

// MXFP8's plan: sm_100 only, its scales' rows whole 32-bit words, at least a word per k-tile.
TEST(Fp8Gemm, Mxfp8PlanErrors) {
  const rt::GemmOperands ok{
      .a = 256, .b = 256, .c = 256, .c_row_major = true, .scale_a = 256, .scale_b = 256};
  const rt::GemmOptions mx{.in_type = "e4m3", .scaling = "mxfp8"};
  auto error = [](absl::StatusOr<rt::GemmPlan> p) {
    return p.ok() ? p->choice.kernel : std::string(p.status().message());
  };
  EXPECT_EQ(error(rt::PlanGemm({128, 128, 256}, mx, ok, 100)), "gemm/mxfp8_sm100");
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mx, ok, 90)).find("applied by sm_100"),
            std::string::npos);
  rt::GemmOperands narrow = ok;
  narrow.sa_row = 4, narrow.sa_k = 1;  // K = 256 takes two words a row
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mx, narrow, 100)).find("at least 4 * ceil"),
            std::string::npos);
  rt::GemmOperands odd = ok;
  odd.sb_row = 10, odd.sb_k = 1;
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mx, odd, 100)).find("scale_b has rows of 10"),
            std::string::npos);
  rt::GemmOperands unaligned = ok;
  unaligned.scale_a = 258;
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mx, unaligned, 100)).find("unaligned pointer"),
            std::string::npos);
  rt::GemmOperands strided = ok;
  strided.ldc = 256;  // C packed: ldc is N
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mx, strided, 100))
                .find("gemm/mxfp8_sm100 stores C packed"),
            std::string::npos);
  rt::GemmOptions fused = mx;
  fused.epilogue = "relu";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, fused, ok, 100)).find("no epilogue terms"),
            std::string::npos);
}

// Planted mistakes in gemm/mxfp8_sm100's PTX, each reported by the emulator as what it is: the
// scaling warps' tcgen05.fence::before_thread_sync dropped (their stores may still be in flight
// when the MMA reads them), and their wait for a slot's MMAs to finish skipped (the warps race
// ahead: a store over scales an MMA still reads, or quarters that hold different k-tiles').
TEST(Fp8Gemm, Mxfp8PlantedMistakes) {
  const rt::Bundle* built = BuiltBundle("gemm/mxfp8_sm100");
  ASSERT_NE(built, nullptr);
  struct Planted {
    std::string from, to, expect;
  };
  // The scaling warps' wait for a slot's MMAs is the kernel's fourth (kiln_wait_3); its try_wait
  // is replaced by a `done` that is always true.
  const std::string label = "kiln_wait_3:\n";
  const size_t label_at = built->ptx.find(label);
  ASSERT_NE(label_at, std::string::npos) << label;
  const size_t wait_at = label_at + label.size();
  const std::string wait = built->ptx.substr(wait_at, built->ptx.find('\n', wait_at) - wait_at);
  ASSERT_NE(wait.find("mbarrier.try_wait"), std::string::npos) << wait;
  const std::string skipped = "setp.eq.u32 done, 1, 1;";
  for (const Planted& p : {Planted{"tcgen05.fence::before_thread_sync;", "",
                                   "has run no tcgen05.fence::before_thread_sync"},
                           Planted{wait, skipped, "scale factors"}}) {
    rt::Bundle b = *built;
    ASSERT_NE(b.ptx.find(p.from), std::string::npos) << p.from;
    for (size_t at = b.ptx.find(p.from); at != std::string::npos;
         at = b.ptx.find(p.from, at + p.to.size()))
      b.ptx.replace(at, p.from.size(), p.to);
    std::vector<std::string> reports;
    bool caught = false;
    for (uint64_t seed = 0; seed < 6 && !caught; ++seed) {
      absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(
          [&](const std::string& name) {
            return name == "gemm/mxfp8_sm100" ? &b : BuiltBundle(name);
          },
          {.size = {128, 128, 1024}, .scaling = "mxfp8", .compute_capability = 100}, seed);
      const std::string report =
          r.ok() ? (r->passed ? "passed" : r->failure) : std::string(r.status().message());
      caught = report.find(p.expect) != std::string::npos;
      if (caught) std::cout << "  caught: " << report << "\n";
      reports.push_back(report);
    }
    EXPECT_TRUE(caught) << p.expect << ":\n" << absl::StrJoin(reports, "\n");
  }
}

// K split over parts (few tiles, long K): each part promotes its own stages, then they are summed.
TEST(Fp8Gemm, BlockwiseSplitK) { ExpectCorrect({8, 256, 4096}, "blockwise"); }

TEST(Fp8Gemm, TensorwiseAndRowwise) {
  ExpectCorrect({72, 96, 256}, "tensorwise");
  ExpectCorrect({72, 96, 256}, "rowwise", "f32");
}

TEST(Fp8Gemm, PlanErrorsNameTheProblem) {
  const rt::GemmOperands ok{
      .a = 256, .b = 256, .c = 256, .c_row_major = true, .scale_a = 256, .scale_b = 256};
  const rt::GemmOptions fp8{.in_type = "e4m3", .scaling = "blockwise"};
  auto error = [](absl::StatusOr<rt::GemmPlan> p) {
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  EXPECT_NE(error(rt::PlanGemm({128, 128, 200}, fp8, ok, 90)).find("multiples of 16"),
            std::string::npos);
  rt::GemmOperands col = ok;
  col.a_col_major = true;
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, fp8, col, 90)).find("K-major"), std::string::npos);
  rt::GemmOperands unscaled = ok;
  unscaled.scale_b = 0;
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, fp8, unscaled, 90)).find("scale_b"),
            std::string::npos);
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, fp8, ok, 80)).find("sm_90"), std::string::npos);
  rt::GemmOptions tensorwise = fp8;
  tensorwise.scaling = "tensorwise";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, tensorwise, ok, 100)).find("on sm_100 take"),
            std::string::npos);
  rt::GemmOptions tiled = fp8;
  tiled.fp8_tile = "gemm/bf16_sm90_n128";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, tiled, ok, 100)).find("sm_100 runs"),
            std::string::npos);
  auto kernel_of = [](absl::StatusOr<rt::GemmPlan> p) {
    return p.ok() ? p->choice.kernel : std::string(p.status().message());
  };
  auto kernel = [&](const rt::GemmSize& size) {
    absl::StatusOr<rt::GemmPlan> p = rt::PlanGemm(size, fp8, ok, 90);
    return p.ok() ? p->choice.kernel : std::string(p.status().message());
  };
  EXPECT_NE(kernel({4096, 4096, 4096}).find(".c_row.blockwise"), std::string::npos);
  // An e5m2 A by an e4m3 B: the kernel's types swap with the operands for a row-major C.
  rt::GemmOptions mixed = fp8;
  mixed.in_type = "e5m2", mixed.in_type_b = "e4m3", mixed.scaling = "tensorwise";
  EXPECT_NE(kernel_of(rt::PlanGemm({4096, 4096, 4096}, mixed, ok, 90)).find(".e4m3xe5m2-bf16."),
            std::string::npos);
  rt::GemmOperands col_c = ok;
  col_c.c_row_major = false;
  EXPECT_NE(kernel_of(rt::PlanGemm({4096, 4096, 4096}, mixed, col_c, 90)).find(".e5m2xe4m3-bf16."),
            std::string::npos);
  rt::GemmOptions mixed_blocks = mixed;
  mixed_blocks.scaling = "blockwise";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, mixed_blocks, ok, 100)).find("takes e4m3 A and B"),
            std::string::npos);
  rt::GemmOptions half_b = mixed;
  half_b.in_type = "bf16", half_b.scaling = "";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, half_b, ok, 90)).find("for 8-bit A and B"),
            std::string::npos);
  EXPECT_NE(kernel({128, 7168, 4096}).find(".blockwise_t"), std::string::npos);
  rt::GemmOperands short_ldc = ok;
  short_ldc.ldc = 100;
  EXPECT_NE(error(rt::PlanGemm({256, 128, 256}, fp8, short_ldc, 90)).find("ldc = 100"),
            std::string::npos);
  rt::GemmOptions no_scaling = fp8;
  no_scaling.scaling = "";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, no_scaling, ok, 90)).find("need a scaling"),
            std::string::npos);
  rt::GemmOptions fused = fp8;
  fused.epilogue = "swiglu";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, fused, ok, 90)).find("16-bit inputs only"),
            std::string::npos);
  fused.epilogue = "residual";
  rt::GemmOperands strided = ok;
  strided.residual = 256, strided.ldc = 256;
  EXPECT_NE(error(rt::PlanGemm({256, 128, 256}, fused, strided, 90)).find("packed"),
            std::string::npos);
  rt::GemmOptions bf16_scaled;
  bf16_scaled.scaling = "rowwise";
  EXPECT_NE(error(rt::PlanGemm({128, 128, 256}, bf16_scaled, ok, 90)).find("8-bit inputs"),
            std::string::npos);
}

// The rule's tiles (docs/perf/2026-11-29-fp8-tile-rule.md), on the problem the kernel sees: C^T's
// for a row-major C, so the kernel's N is the tokens.
TEST(Fp8Gemm, TheRulesTileAndSplit) {
  const rt::GemmOperands ok{
      .a = 256, .b = 256, .c = 256, .c_row_major = true, .scale_a = 256, .scale_b = 256};
  auto choice = [&](const rt::GemmSize& size, const char* scaling) {
    absl::StatusOr<rt::GemmPlan> p =
        rt::PlanGemm(size, {.in_type = "e4m3", .scaling = scaling}, ok, 90);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? absl::StrCat(p->choice.kernel, " ", rt::SplitName(p->choice.split)) : "";
  };
  // 128 tokens: 112 tiles of 64x128, one wave, whole.
  EXPECT_EQ(choice({128, 7168, 16384}, "tensorwise"),
            "gemm/bf16_sm90_m64.e4m3-bf16.tensorwise whole tiles");
  // 64 tokens: 64-row pairs while they take at most two waves, else 128x64 tiles.
  EXPECT_EQ(choice({64, 2112, 7168}, "rowwise"),
            "gemm/bf16_sm90_m64n64.e4m3-bf16.rowwise split-K 3");
  EXPECT_EQ(choice({64, 32768, 512}, "tensorwise"),
            "gemm/bf16_sm90_n64.e4m3-bf16.tensorwise whole tiles");
  // 128x128 tiles: whole, or streamed where the last wave is under three quarters full.
  EXPECT_EQ(choice({4096, 4096, 4096}, "tensorwise"),
            "gemm/bf16_sm90_n128.e4m3-bf16.tensorwise whole tiles");
  EXPECT_EQ(choice({1024, 2112, 7168}, "tensorwise"),
            "gemm/bf16_sm90_n128.e4m3-bf16.tensorwise stream-K");
  EXPECT_EQ(choice({4096, 7168, 7168}, "blockwise"),
            "gemm/bf16_sm90_n128.e4m3-bf16.c_row.blockwise whole tiles");
  // 192x128 tiles where their whole waves take a twentieth less time: 4096 x 2112 is 544 tiles
  // of 128x128 (five waves of 128 CTAs) or 374 of 192x128 (three, 4.5 in 128x128's time); the
  // swapped 2112 x 4096 352 (three). Not at 4096^3 (eight waves or six: nine).
  EXPECT_EQ(choice({4096, 2112, 7168}, "blockwise"),
            "gemm/bf16_sm90_m192.e4m3-bf16.c_row.blockwise whole tiles");
  EXPECT_EQ(choice({4096, 2112, 7168}, "tensorwise"),
            "gemm/bf16_sm90_m192.e4m3-bf16.tensorwise whole tiles");
  EXPECT_EQ(choice({4096, 4096, 4096}, "blockwise"),
            "gemm/bf16_sm90_n128.e4m3-bf16.c_row.blockwise whole tiles");
  // 128x192 pairs, tensorwise and rowwise, where each CTA takes 8 of them or more and their waves
  // take less time at 1.3 waves of 128x128 tiles each: 8192^3 is 1376 of them (22 waves: 28.6)
  // or 4096 of 128x128 (32 waves); 4096^3 only 5.5 waves of them.
  EXPECT_EQ(choice({8192, 8192, 8192}, "tensorwise"),
            "gemm/bf16_sm90_n192.e4m3-bf16.tensorwise whole tiles");
  EXPECT_EQ(choice({4096, 7168, 7168}, "rowwise"),
            "gemm/bf16_sm90_n192.e4m3-bf16.rowwise whole tiles");
  EXPECT_EQ(choice({8192, 8192, 8192}, "blockwise"),
            "gemm/bf16_sm90_n128.e4m3-bf16.c_row.blockwise whole tiles");
}

// What `kiln tune --dtype e4m3` times: every tile whole and streamed, split-K while the parts fit
// one wave (at least 4 k-tiles a part).
TEST(Fp8Gemm, TheSweepsCandidates) {
  const std::vector<rt::GemmChoice> all = rt::Fp8TileCandidates({7168, 128, 16384}, "tensorwise");
  auto has = [&](const std::string& tile, int split) {
    return std::any_of(all.begin(), all.end(), [&](const rt::GemmChoice& c) {
      return c.kernel == "gemm/bf16_sm90_" + tile && c.split == split;
    });
  };
  for (const char* tile : {"n128c2", "n128", "m64", "n64", "m64n64", "m64n32", "m192", "n192"})
    EXPECT_TRUE(has(tile, 1) && has(tile, 0)) << tile;
  EXPECT_TRUE(has("n128c2", 2));   // 28 tiles in pairs: 56 parts over 64 groups
  EXPECT_FALSE(has("n128c2", 3));  // 84 parts: past one wave
  EXPECT_FALSE(has("m64n64", 2));  // 56 tiles: 112 parts over 64 groups
  EXPECT_TRUE(rt::Fp8TileCandidates({7168, 128, 384}, "tensorwise").size() == 16);  // none split
  // 128x192 tiles take no blockwise scales (B's blocks of 128 columns).
  EXPECT_TRUE(rt::Fp8TileCandidates({7168, 128, 384}, "blockwise").size() == 14);
}

// A tune cache's 8-bit entry (kiln tune --dtype e4m3 --tune_cache F) wins over the rule for its
// size and scaling as the kernel sees them; the caller's tile wins over it.
TEST(Fp8Gemm, ATuneCachesEntryWins) {
  const rt::GemmOperands ok{
      .a = 256, .b = 256, .c = 256, .c_row_major = true, .scale_a = 256, .scale_b = 256};
  rt::GemmTuneCache tuned;
  tuned.SetFp8(90, "tensorwise", {7168, 128, 16384}, "gemm/bf16_sm90_n128", 0, 0.058);
  rt::GemmOptions o{.in_type = "e4m3", .scaling = "tensorwise"};
  absl::StatusOr<rt::GemmPlan> p = rt::PlanGemm({128, 7168, 16384}, o, ok, 90, &tuned);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_sm90_n128.e4m3-bf16.tensorwise");
  EXPECT_EQ(p->choice.split, 0);
  EXPECT_EQ(p->choice.why, "measured by kiln tune");
  o.scaling = "rowwise";  // another scaling: the rule's
  p = rt::PlanGemm({128, 7168, 16384}, o, ok, 90, &tuned);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(p->choice.why, "measured by kiln tune");
  o.scaling = "tensorwise", o.fp8_tile = "gemm/bf16_sm90_m64";
  p = rt::PlanGemm({128, 7168, 16384}, o, ok, 90, &tuned);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->choice.kernel, "gemm/bf16_sm90_m64.e4m3-bf16.tensorwise");
  // An entry's split out of the range the caller's is held to (a hand-edited cache) is refused.
  rt::GemmTuneCache edited;
  edited.SetFp8(90, "tensorwise", {7168, 128, 16384}, "gemm/bf16_sm90_n128", 99, 0.058);
  p = rt::PlanGemm({128, 7168, 16384}, {.in_type = "e4m3", .scaling = "tensorwise"}, ok, 90,
                   &edited);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("has split 99: 1 whole tiles, 2-16 split-K parts"),
            std::string::npos)
      << p.status();
  // As kiln tune records one: keyed by the rule's plan (blockwise: blockwise_t where swapped,
  // blockwise.c_row where the tile stores C row-major).
  for (const rt::GemmSize size : {rt::GemmSize{128, 7168, 4096}, rt::GemmSize{4096, 7168, 4096}}) {
    rt::GemmOptions blocks{.in_type = "e4m3", .scaling = "blockwise"};
    absl::StatusOr<rt::GemmPlan> rule = rt::PlanGemm(size, blocks, ok, 90);
    ASSERT_TRUE(rule.ok()) << rule.status();
    const std::string key = rt::Fp8TuneScaling("blockwise", *rule);
    EXPECT_EQ(key, size.m > 128 ? "blockwise.c_row" : "blockwise_t");
    tuned.SetFp8(90, key, rule->size, "gemm/bf16_sm90_n128c2", 3, 0.1);
    absl::StatusOr<rt::GemmPlan> measured = rt::PlanGemm(size, blocks, ok, 90, &tuned);
    ASSERT_TRUE(measured.ok()) << measured.status();
    EXPECT_EQ(measured->choice.kernel.rfind("gemm/bf16_sm90_n128c2.", 0), 0u)
        << measured->choice.kernel;
    EXPECT_EQ(measured->choice.split, 3);
  }
  tuned.SetFp8(90, "tensorwise", {7168, 128, 16384}, "gemm/bf16_sm90_n160", 1, 0.058);
  o.fp8_tile = "";
  p = rt::PlanGemm({128, 7168, 16384}, o, ok, 90, &tuned);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("names gemm/bf16_sm90_n160, which takes no 8-bit inputs"),
            std::string::npos)
      << p.status();
}

// The caller's tile and split (kiln gemm --dtype e4m3 --kernel K --split S), for timing tiles.
TEST(Fp8Gemm, TheCallersTileAndSplit) {
  const rt::GemmOperands ok{
      .a = 256, .b = 256, .c = 256, .c_row_major = true, .scale_a = 256, .scale_b = 256};
  rt::GemmOptions o{
      .in_type = "e4m3", .scaling = "tensorwise", .fp8_tile = "gemm/bf16_sm90_n128c2"};
  absl::StatusOr<rt::GemmPlan> whole = rt::PlanGemm({128, 7168, 16384}, o, ok, 90);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->choice.split, 1);
  EXPECT_EQ(whole->choice.kernel, "gemm/bf16_sm90_n128c2.e4m3-bf16.tensorwise");
  o.fp8_split = 0;
  absl::StatusOr<rt::GemmPlan> streamed = rt::PlanGemm({128, 7168, 16384}, o, ok, 90);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->choice.split, 0);
  EXPECT_NE(streamed->choice.why.find("then stream-K as the caller asked"), std::string::npos);
  o.fp8_split = 17;
  absl::StatusOr<rt::GemmPlan> over = rt::PlanGemm({128, 7168, 16384}, o, ok, 90);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find(
                "fp8_split (kiln gemm --split) 17: 1 whole tiles, 2-16 split-K parts"),
            std::string::npos)
      << over.status();
  o.fp8_split = -2;
  absl::StatusOr<rt::GemmPlan> negative = rt::PlanGemm({128, 7168, 16384}, o, ok, 90);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("fp8_split (kiln gemm --split) -2: 1 whole tiles"),
            std::string::npos)
      << negative.status();
  // Where the rule splits K, the caller's split replaces it; named none, the rule's stands.
  rt::GemmOptions blocks{.in_type = "e4m3", .scaling = "blockwise"};
  absl::StatusOr<rt::GemmPlan> rule = rt::PlanGemm({8, 256, 4096}, blocks, ok, 90);
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_GT(rule->choice.split, 1);
  blocks.fp8_split = 1;
  absl::StatusOr<rt::GemmPlan> whole_k = rt::PlanGemm({8, 256, 4096}, blocks, ok, 90);
  ASSERT_TRUE(whole_k.ok()) << whole_k.status();
  EXPECT_EQ(whole_k->choice.split, 1);
  EXPECT_EQ(whole_k->choice.kernel, rule->choice.kernel);
  // sm_100 runs its one kernel whole: a split there is refused, not dropped.
  absl::StatusOr<rt::GemmPlan> sm100 = rt::PlanGemm({256, 256, 256}, blocks, ok, 100);
  ASSERT_FALSE(sm100.ok());
  EXPECT_NE(sm100.status().message().find("fp8_split applies to the sm_90 tile kernels"),
            std::string::npos)
      << sm100.status();
}

// Stream-K (the caller's split 0): units end inside a tile's stages, each part promotes its own,
// and the tile's parts are summed; tensorwise scales once after the sum, blockwise per stage.
TEST(Fp8Gemm, StreamK) {
  for (const char* scaling : {"tensorwise", "blockwise"}) {
    const Fp8GemmProblem p{
        .size = {136, 200, 640}, .scaling = scaling, .tile = "gemm/bf16_sm90_n128", .split = 0};
    absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 3);
    ASSERT_TRUE(r.ok()) << scaling << ": " << r.status();
    EXPECT_TRUE(r->passed) << scaling << " (" << r->kernel << ", " << r->why << "): " << r->failure;
    EXPECT_NE(r->why.find("stream-K"), std::string::npos) << r->why;
  }
}

// Tensorwise and rowwise in the small tiles run stages in pairs after a unit's first: units of an
// odd and an even count of k-tiles (a pair and a stage alone at the end), whole, split in K parts
// of uneven lengths, and streamed.
TEST(Fp8Gemm, StagesInPairsInSmallTiles) {
  for (const char* tile : {"gemm/bf16_sm90_m64", "gemm/bf16_sm90_m64n64"})
    for (int split : {1, 3, 0}) {
      const Fp8GemmProblem p{.size = {72, 200, split == 1 ? 640 : 1280},
                             .scaling = split == 3 ? "rowwise" : "tensorwise",
                             .tile = tile,
                             .split = split};
      absl::StatusOr<Fp8GemmResult> r = RunFp8GemmEmulated(BuiltBundle, p, 5);
      ASSERT_TRUE(r.ok()) << tile << " " << split << ": " << r.status();
      EXPECT_TRUE(r->passed) << r->kernel << ", " << r->why << ": " << r->failure;
    }
  ExpectCorrect({72, 200, 768}, "tensorwise", "bf16", true, "gemm/bf16_sm90_n64");
}

}  // namespace
}  // namespace kiln::examples
