// The entry points' calls find their kernels in the build's bundles. A call the plan sends to a
// kernel the build does not bundle fails for the user with "no bundle" (the compiler writes it,
// which a runtime-only install has not); here it fails the test, naming the call. Each test plans
// and "launches" every form of call the host API and kiln's Python module take, on sm_90a.
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/attention.h"
#include "kiln/ops/attention_backward.h"
#include "kiln/ops/emulated_op_device.h"
#include "kiln/ops/gemm.h"
#include "kiln/ops/grouped_gemm.h"

namespace kiln {
namespace {

// Reads manifests from the build's bundle directory; launches nothing (records the names).
class BundleOnlyDevice : public rt::OpDevice {
 public:
  absl::StatusOr<const rt::Manifest*> ManifestOf(const std::string& kernel) override {
    if (auto it = read_.find(kernel); it != read_.end()) return &it->second.manifest;
    absl::StatusOr<rt::Bundle> b = rt::ReadBundle(KILN_TEST_BUNDLE_DIR, kernel);
    if (!b.ok()) return absl::NotFoundError(b.status().message());
    return &read_.emplace(kernel, *std::move(b)).first->second.manifest;
  }
  absl::Status Launch(const std::string& kernel, std::vector<rt::Arg>) override {
    launched.push_back(kernel);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Scratch(int, size_t) override { return 1 << 20; }
  std::vector<std::string> launched;

 private:
  std::map<std::string, rt::Bundle> read_;
};

// The public emulator device: a program without a GPU runs the GEMM entry point on the build's
// bundles, here at a ragged size with a bias and ReLU, against a double reference of the bf16
// inputs.
TEST(BundledCalls, TheEmulatedDeviceRunsTheGemmEntryPoint) {
  const int m = 37, n = 50, k = 24;
  auto bf16 = [](float f) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  auto f32 = [](uint16_t h) {
    const uint32_t u = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<uint16_t> a(m * k), b(k * n), bias(n);
  for (int i = 0; i < m * k; ++i) a[i] = bf16(std::sin(0.37f * i));
  for (int i = 0; i < k * n; ++i) b[i] = bf16(std::cos(0.11f * i));
  for (int j = 0; j < n; ++j) bias[j] = bf16(0.01f * j - 0.2f);
  emu::Device d;
  rt::EmulatedOpDevice device(d, KILN_TEST_BUNDLE_DIR);
  rt::GemmOperands o;
  o.a = *d.Upload(a.data(), a.size() * 2);  // row-major M x K
  o.b = *d.Upload(b.data(), b.size() * 2);  // column-major K x N (K contiguous)
  o.bias = *d.Upload(bias.data(), bias.size() * 2);
  o.c = *d.AllocatePoisoned(m * n * 2);  // column-major M x N
  absl::Status s = rt::RunGemm({m, n, k}, {.epilogue = "bias_col,relu"}, o, 90, device);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<uint16_t> c(m * n);
  ASSERT_TRUE(d.CopyOut(c.data(), o.c, c.size() * 2).ok());
  double err = 0, norm = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double want = f32(bias[j]);
      for (int kk = 0; kk < k; ++kk) want += double(f32(a[i * k + kk])) * f32(b[j * k + kk]);
      want = std::max(want, 0.0);
      const double got = f32(c[j * m + i]);
      ASSERT_TRUE(std::isfinite(got)) << i << "," << j;
      err += (got - want) * (got - want), norm += want * want;
    }
  EXPECT_LT(std::sqrt(err / norm), 1e-2);
  // A kernel no bundle holds: the message says how to write it.
  EXPECT_NE(std::string(device.ManifestOf("gemm/nope").status().message()).find("kiln bundle --dir"),
            std::string::npos);
}

// A C with padded columns (ldc past M) where the size's tile kernel takes C packed: the strided
// kernel runs it, writing no padding element; an operand off its element boundary is refused.
TEST(BundledCalls, APaddedCAndAMisalignedOperand) {
  const int m = 17, n = 33, k = 40, ldc = 24;
  std::vector<uint16_t> a(m * k), b(k * n);
  for (int i = 0; i < m * k; ++i) a[i] = 0x3f80 + (i % 7) * 0x20;  // bf16 1 .. 1.75
  for (int i = 0; i < k * n; ++i) b[i] = (i % 3 ? 0x3f00 : 0xbf00);  // +-0.5
  emu::Device d;
  rt::EmulatedOpDevice device(d, KILN_TEST_BUNDLE_DIR);
  rt::GemmOperands o;
  o.a = *d.Upload(a.data(), a.size() * 2);
  o.b = *d.Upload(b.data(), b.size() * 2);
  o.c = *d.AllocatePoisoned(ldc * n * 2);
  o.ldc = ldc;
  for (const char* epilogue : {"", "relu"}) {
    const absl::Status s = rt::RunGemm({m, n, k}, {.epilogue = epilogue}, o, 90, device);
    ASSERT_TRUE(s.ok()) << epilogue << ": " << s;
    std::vector<uint16_t> c(ldc * n);
    ASSERT_TRUE(d.CopyOut(c.data(), o.c, c.size() * 2).ok());
    auto f32 = [](uint16_t h) {
      const uint32_t u = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    };
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double want = 0;
        for (int kk = 0; kk < k; ++kk) want += double(f32(a[i * k + kk])) * f32(b[j * k + kk]);
        if (*epilogue) want = std::max(want, 0.0);
        EXPECT_NEAR(f32(c[j * ldc + i]), want, 0.02 * std::abs(want) + 0.02) << i << "," << j;
      }
      for (int i = m; i < ldc; ++i) EXPECT_TRUE(std::isnan(f32(c[j * ldc + i]))) << i << "," << j;
    }
  }
  rt::GemmOperands off = o;
  off.a += 1;
  const absl::Status s = rt::RunGemm({m, n, k}, {}, off, 90, device);
  EXPECT_NE(s.message().find("is not on a 2-byte boundary"), std::string::npos) << s;
}

// Every input and output type, storage order of A, B and C, and epilogue that kiln.gemm takes, at
// aligned, ragged and skinny sizes.
TEST(BundledCalls, EverySixteenBitGemm) {
  const std::vector<rt::GemmSize> sizes = {{4096, 4096, 4096}, {1000, 777, 300}, {7, 4096, 4096},
                                           {1, 1, 8},          {64, 14336, 4096}, {4095, 1024, 1000},
                                           {33, 1000, 72},     {300, 136, 16},   {2, 3000, 520}};
  // kiln.gemm's terms (a bias per column of C) and the host API's other bias.
  const std::vector<std::string> epilogues = {
      "",     "bias_col", "bias_row", "relu", "gelu", "silu", "residual", "scale", "bias_col.gelu",
      "bias_col.silu.residual", "scale.bias_col.relu.residual"};
  BundleOnlyDevice device;
  std::set<std::string> failures;
  int calls = 0;
  for (const std::string in : {"bf16", "f16"})
    for (const std::string out : {in, std::string("f32")})
      for (int layout = 0; layout < 8; ++layout)
        for (const std::string& epilogue : epilogues)
          for (const rt::GemmSize& size : sizes) {
            rt::GemmOperands o{.a = 256, .b = 256, .c = 256};
            o.a_col_major = layout & 1, o.b_row_major = layout & 2, o.c_row_major = layout & 4;
            if (absl::StrContains(epilogue, "scale")) o.c_in = 256, o.alpha = 0.5, o.beta = 2;
            if (absl::StrContains(epilogue, "bias")) o.bias = 256;
            if (absl::StrContains(epilogue, "residual")) o.residual = 256;
            const rt::GemmOptions options{.in_type = in, .out_type = out, .epilogue = epilogue};
            ++calls;
            if (absl::Status s = rt::RunGemm(size, options, o, 90, device); !s.ok())
              failures.insert(absl::StrCat(in, "->", out, " A ", o.a_col_major ? "col" : "row",
                                           " B ", o.b_row_major ? "row" : "col", " C ",
                                           o.c_row_major ? "row" : "col", " [", epilogue, "] ",
                                           size.m, "x", size.n, "x", size.k, ": ", s.message()));
          }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls << " calls fail:\n"
                                << absl::StrJoin(failures, "\n");
  EXPECT_FALSE(device.launched.empty());
}

// The row-pairing epilogues (a gate/up projection's SwiGLU, a QKV projection's RoPE; C row-major)
// in both 16-bit types, K-major and MN-major weights, at sizes the tile kernels take; a size
// they do not is a plan's refusal (not counted), a missing bundle a failure.
TEST(BundledCalls, EveryPairedEpilogue) {
  const std::vector<rt::GemmSize> sizes = {{4096, 28672, 4096}, {1000, 1024, 1000}, {16, 28672, 4096},
                                           {2048, 6144, 4096},  {64, 384, 264}};
  BundleOnlyDevice device;
  std::set<std::string> failures;
  int calls = 0, refused = 0;
  for (const std::string in : {"bf16", "f16"})
    for (const std::string epilogue : {"swiglu", "rope"})
      for (bool b_row_major : {false, true})
        for (const rt::GemmSize& size : sizes) {
          rt::GemmOperands o{.a = 256, .b = 256, .c = 256, .c_row_major = true};
          o.b_row_major = b_row_major;
          if (epilogue == "rope")
            o.rope_angles = 256, o.rope_dim = 128, o.rope_rows = size.n / 128 / 3 * 2 * 128,
            o.rope_period = 4096;
          if (epilogue == "rope" && (size.n % 128 || o.rope_rows == 0)) continue;
          const rt::GemmOptions options{.in_type = in, .out_type = in, .epilogue = epilogue};
          ++calls;
          const absl::Status s = rt::RunGemm(size, options, o, 90, device);
          refused += absl::IsInvalidArgument(s);
          if (!s.ok() && !absl::IsInvalidArgument(s))
            failures.insert(absl::StrCat(in, " ", epilogue, " B ", b_row_major ? "row" : "col", " ",
                                         size.m, "x", size.n, "x", size.k, ": ", s.message()));
        }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls << " calls fail:\n"
                                << absl::StrJoin(failures, "\n");
  EXPECT_LT(refused, calls / 2) << "most calls should plan";
}

// 8-bit inputs on sm_90a: each scaling, A's and B's types, output type, storage order of C and
// epilogue (A row-major and B column-major: the FP8 wgmma's only order), K a multiple of 16.
TEST(BundledCalls, EveryEightBitGemm) {
  const std::vector<rt::GemmSize> sizes = {{4096, 4096, 4096}, {1000, 776, 304}, {7, 4096, 4096},
                                           {64, 2112, 7168},   {300, 136, 16},   {4096, 24576, 1536}};
  const std::vector<std::string> epilogues = {"",         "bias_col", "bias_row", "relu",
                                              "gelu",     "residual", "scale",    "bias_col.gelu",
                                              "bias_col.silu.residual"};
  BundleOnlyDevice device;
  std::set<std::string> failures;
  int calls = 0;
  for (const auto& [a, b] : {std::pair{"e4m3", ""}, {"e5m2", "e4m3"}, {"e4m3", "e5m2"}})
    for (const std::string scaling : {"tensorwise", "rowwise", "blockwise"})
      for (const std::string out : {"bf16", "f16", "f32"})
        for (bool c_row : {false, true})
          for (const std::string& epilogue : epilogues)
            for (const rt::GemmSize& size : sizes) {
              if (scaling == "blockwise" && std::string(b) != "") continue;  // (e4m3 alone)
              rt::GemmOperands o{.a = 256, .b = 256, .c = 256, .c_row_major = c_row};
              o.scale_a = 256, o.scale_b = 256;
              if (absl::StrContains(epilogue, "scale")) o.c_in = 256, o.alpha = 0.5, o.beta = 2;
              if (absl::StrContains(epilogue, "bias")) o.bias = 256;
              if (absl::StrContains(epilogue, "residual")) o.residual = 256;
              const rt::GemmOptions options{.in_type = a, .out_type = out, .epilogue = epilogue,
                                            .in_type_b = b, .scaling = scaling};
              ++calls;
              if (absl::Status s = rt::RunGemm(size, options, o, 90, device); !s.ok())
                failures.insert(absl::StrCat(a, "x", *b ? b : a, " ", scaling, "->", out, " C ",
                                             c_row ? "row" : "col", " [", epilogue, "] ", size.m,
                                             "x", size.n, "x", size.k, ": ", s.message()));
            }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls << " calls fail:\n"
                                << absl::StrJoin(failures, "\n");
}

// Grouped GEMMs: each layout and input type, groups of many rows (the wide tile) and few (the
// narrow one).
TEST(BundledCalls, EveryGroupedGemm) {
  BundleOnlyDevice device;
  std::set<std::string> failures;
  int calls = 0;
  for (const std::string in : {"bf16", "e4m3"})
    for (auto layout : {rt::GroupedLayout::kContiguous, rt::GroupedLayout::kMasked})
      for (const auto& [rows, groups] : {std::pair{32768, 8}, {8192, 256}, {1024, 1}, {24, 3}})
        for (const auto& [n, k] : {std::pair{4096, 7168}, {2048, 512}, {384, 1040}}) {
          const rt::GroupedGemmSize size{.rows = rows, .n = n, .k = k, .groups = groups};
          const rt::GroupedGemmOptions options{.layout = layout, .in_type = in};
          rt::GroupedGemmOperands o{.x = 256, .w = 256, .out = 256, .sizes = 256};
          if (in == "e4m3") o.scale_x = 256, o.scale_w = 256;
          ++calls;
          if (absl::Status s = rt::RunGroupedGemm(size, options, o, 90, device); !s.ok())
            failures.insert(absl::StrCat(in, layout == rt::GroupedLayout::kMasked ? " masked " : " ",
                                         groups, " groups of ", rows, " rows, N ", n, ", K ", k,
                                         ": ", s.message()));
        }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls << " calls fail:\n"
                                << absl::StrJoin(failures, "\n");
}

// The forward at every type, head dimension and mask: dense (both layouts), over sequences of
// their own lengths and paged caches (decode, speculative decode and prefill chunks), and packed
// sequences; and the backward, dense and packed.
TEST(BundledCalls, EveryAttentionForm) {
  struct Shape {
    int64_t hq, hkv, s, skv;
  };
  const std::vector<Shape> shapes = {{16, 16, 4096, 4096}, {32, 8, 1, 4096},  {32, 8, 7, 1000},
                                     {8, 1, 1000, 1037},   {16, 16, 100, 100}, {32, 8, 16384, 16384},
                                     {4, 4, 1, 1}};
  BundleOnlyDevice device;
  std::set<std::string> failures;
  int calls = 0;
  auto run = [&](const std::string& form, const rt::AttentionSize& z,
                 const rt::AttentionOptions& options, bool backward) {
    ++calls;
    const rt::AttentionOperands o{.q = 256, .k = 256, .v = 256, .o = 256, .lse = 256,
                                  .seq_lens = z.lens ? 256u : 0u,
                                  .block_table = z.page ? 256u : 0u,
                                  .cu_seqlens = z.varlen ? 256u : 0u};
    const rt::AttentionGradOperands g{.q = 256, .k = 256, .v = 256, .o = 256, .lse = 256,
                                      .d_o = 256, .dq = 256, .dk = 256, .dv = 256,
                                      .cu_seqlens = z.varlen ? 256u : 0u};
    const absl::Status s = backward ? rt::RunAttentionBackward(z, options, g, 90, device)
                                    : rt::RunAttention(z, options, o, 90, device);
    if (!s.ok())
      failures.insert(absl::StrCat(form, backward ? " backward" : "", " ", options.dtype, " d", z.d,
                                   options.causal ? " causal" : "", " hq", z.hq, " hkv", z.hkv,
                                   " s", z.s, " skv", z.skv, ": ", s.message()));
  };
  for (const std::string dtype : {"bf16", "f16"})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true})
        for (const Shape& sh : shapes) {
          const rt::AttentionOptions options{.dtype = dtype, .causal = causal};
          const rt::AttentionSize dense{.b = 2, .hq = sh.hq, .hkv = sh.hkv, .s = sh.s,
                                        .skv = sh.skv, .d = d};
          run("dense", dense, options, false);
          rt::AttentionSize rows = dense;
          rows.rows = true;
          if (sh.hq / sh.hkv * sh.s > 64) run("rows", rows, options, false);  // (else decode)
          rt::AttentionSize lens = dense;
          lens.lens = true;
          run("lens", lens, options, false);
          for (int64_t page : {16, 32, 64, 256}) {
            rt::AttentionSize paged = lens;
            paged.page = page, paged.max_pages = (sh.skv + page - 1) / page;
            paged.pages = paged.b * paged.max_pages, paged.skv = paged.max_pages * page;
            run(absl::StrCat("page ", page), paged, options, false);
          }
          if (sh.s == sh.skv) {
            rt::AttentionSize packed = dense;
            packed.varlen = true, packed.total = 2 * sh.s - 1;
            run("varlen", packed, options, false);
            if (sh.s <= 4096) run("varlen", packed, options, true);
            if (sh.s <= 4096) run("dense", dense, options, true);
          }
        }
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls << " calls fail:\n"
                                << absl::StrJoin(failures, "\n");
}

}  // namespace
}  // namespace kiln
