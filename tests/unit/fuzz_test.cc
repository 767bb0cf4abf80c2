// Hostile inputs for the loaders: seeded random mutations (flipped, dropped, repeated, inserted
// bytes, truncation) of real bundles' manifests and PTX and of a tuning table, each fed to its
// parser. Every case must end in a value or an absl::Status: no crash, no hang, no read out of
// bounds (run under AddressSanitizer by the sanitizer job). The count and time go to the log.
#include <array>
#include <chrono>
#include <climits>
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
#include "kiln/ops/attention.h"
#include "kiln/ops/attention_backward.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/gemm_table.h"
#include "kiln/ops/grouped_gemm.h"

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
  Fuzz("disk-cache entry", entries, 3000, [&](const std::string& entry) {
    const size_t cut = entry.find('\0');  // none left: the PTX file is missing
    // Filed under the name its manifest gives (a manifest filed under another is refused).
    absl::StatusOr<rt::Manifest> m = rt::Manifest::Parse(entry.substr(0, cut));
    const std::string name = m.ok() ? m->name : first->name,
                      stem = dir + "/" + rt::BundleStem(name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(stem + ".manifest", std::ios::binary) << entry.substr(0, cut);
    if (cut != std::string::npos)
      std::ofstream(stem + ".ptx", std::ios::binary) << entry.substr(cut + 1);
    return rt::ReadBundle(dir, name).ok();
  });
  std::filesystem::remove_all(dir);
}

// Hostile calls for the planners: every field of a call valid most of the time and, one field in
// ten, at or past an edge (0, negative, ragged, past 32 bits, near INT64_MAX, a null or unaligned
// pointer, an unknown type or term), so that the plans' deeper checks run too. Every call must
// end in a plan naming a kernel or in a status with a message: no crash, no overflow trap.
TEST(Fuzz, PlannersAnswerEveryCallWithAPlanOrAStatus) {
  std::mt19937_64 rng(20261130);
  const int64_t edges[] = {-1, 0, 1, 2, 7, 63, 100, 4095, int64_t{1} << 31, int64_t{1} << 40,
                           INT64_MAX / 3, INT64_MAX};
  auto odd = [&] { return rng() % 10 == 0; };
  auto size = [&]() -> int64_t {  // a size a call may have, else an edge
    if (odd()) return edges[rng() % std::size(edges)];
    return rng() % 2 ? 1 + static_cast<int64_t>(rng() % 5000) : int64_t{1} << (rng() % 15);
  };
  auto valid_or_edge = [&](int64_t valid) { return odd() ? edges[rng() % std::size(edges)] : valid; };
  auto ptr = [&]() -> cu::CUdeviceptr {
    return odd() ? std::array<uint64_t, 3>{0, 258, 4}[rng() % 3] : 256 * (1 + rng() % 4);
  };
  auto pick = [&](std::initializer_list<const char*> usual, const char* unusual) {
    return std::string(odd() ? unusual : usual.begin()[rng() % usual.size()]);
  };
  // The test's own arithmetic on edge sizes saturates (the planners' must not overflow either).
  auto mul = [](int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
  };
  auto add = [](int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
  };
  int planned = 0, refused = 0;
  auto count = [&](const absl::Status& s, bool kernel_named) {
    if (s.ok()) {
      EXPECT_TRUE(kernel_named);
      ++planned;
    } else {
      EXPECT_FALSE(s.message().empty());
      ++refused;
    }
  };
  for (int i = 0; i < 20000; ++i) {
    const int cc = odd() ? std::array<int, 3>{75, 80, 100}[rng() % 3] : 90;
    rt::GemmOptions g;
    g.in_type = pick({"bf16", "f16", "e4m3", "e5m2"}, "f32");
    g.out_type = pick({"bf16", "f16", "f32"}, "e4m3");
    g.epilogue = pick({"", "", "bias_row", "bias_col", "relu", "scale.gelu", "swiglu", "rope",
                       "residual", "bias_col.silu.residual"},
                      rng() % 2 ? "nonsense" : "bias_col.bias_row");
    if (g.in_type[0] == 'e') g.scaling = pick({"tensorwise", "rowwise", "blockwise"}, "mxfp8");
    rt::GemmOperands o{.a = ptr(), .b = ptr(), .c = ptr()};
    o.lda = odd() ? size() : 0, o.ldb = odd() ? size() : 0, o.ldc = odd() ? size() : 0;
    o.a_col_major = rng() % 2, o.b_row_major = rng() % 2, o.c_row_major = rng() % 2;
    o.c_in = ptr(), o.bias = ptr(), o.residual = ptr(), o.scale_a = ptr(), o.scale_b = ptr();
    o.rope_angles = ptr(), o.rope_dim = valid_or_edge(128), o.rope_period = size();
    o.rope_rows = valid_or_edge(mul(o.rope_dim, 1 + rng() % 8));
    absl::StatusOr<rt::GemmPlan> gp = rt::PlanGemm({size(), size(), size()}, g, o, cc);
    count(gp.status(), gp.ok() && !gp->choice.kernel.empty());

    const int64_t hkv = valid_or_edge(int64_t{1} << (rng() % 4));
    rt::AttentionSize z{.b = valid_or_edge(1 + rng() % 4), .hq = valid_or_edge(mul(hkv, 1 << (rng() % 4))),
                        .hkv = hkv, .s = size(), .skv = size(),
                        .d = valid_or_edge(64 << (rng() % 3))};
    switch (rng() % 4) {  // dense, lengths, pages, packed
      case 1: z.lens = true; break;
      case 2:
        z.lens = true, z.page = valid_or_edge(16 << (rng() % 5));
        z.max_pages = valid_or_edge(z.page > 0 ? add(z.skv, z.page - 1) / z.page : 1);
        z.pages = valid_or_edge(mul(z.b, z.max_pages)), z.skv = mul(z.max_pages, z.page);
        break;
      case 3: z.varlen = true, z.total = valid_or_edge(mul(z.b, z.s)), z.skv = z.s; break;
    }
    z.rows = !z.lens && !z.varlen && rng() % 3 == 0;
    if (z.rows) z.q_stride = odd() ? size() : 0, z.kv_stride = odd() ? size() : 0;
    const rt::AttentionOptions a{.dtype = pick({"bf16", "f16"}, "f32"), .causal = rng() % 2 == 0,
                                 .scale = odd() ? -1.0f : 0.0f, .dq_atomics = rng() % 4 == 0};
    const rt::AttentionOperands ao{.q = ptr(), .k = ptr(), .v = ptr(), .o = ptr(), .lse = ptr(),
                                   .seq_lens = ptr(), .block_table = ptr(), .cu_seqlens = ptr()};
    absl::StatusOr<rt::AttentionPlan> ap = rt::PlanAttention(z, a, ao, cc);
    count(ap.status(), ap.ok() && !ap->kernel.empty());
    const rt::AttentionGradOperands go{.q = ptr(), .k = ptr(), .v = ptr(), .o = ptr(), .lse = ptr(),
                                       .d_o = ptr(), .dq = ptr(), .dk = ptr(), .dv = ptr(),
                                       .cu_seqlens = ptr()};
    absl::StatusOr<rt::AttentionBackwardPlan> bp = rt::PlanAttentionBackward(z, a, go, cc);
    count(bp.status(), bp.ok() && !bp->dkdv.empty());

    const rt::GroupedGemmSize gs{.rows = size(), .n = size(), .k = size(),
                                 .groups = static_cast<int>(odd() ? size() % 5000 : 1 + rng() % 300)};
    const rt::GroupedGemmOptions go_{.layout = rng() % 2 ? rt::GroupedLayout::kContiguous
                                                         : rt::GroupedLayout::kMasked,
                                     .in_type = pick({"bf16", "e4m3"}, "f16")};
    absl::StatusOr<std::string> gk = rt::ChooseGroupedKernel(gs, go_);
    count(gk.status(), gk.ok() && !gk->empty());
  }
  std::printf("fuzz planners: %d calls planned, %d refused with a status\n", planned, refused);
  EXPECT_GT(planned, 2000);  // the draws reach plans, not only the first checks
}

}  // namespace
}  // namespace kiln
