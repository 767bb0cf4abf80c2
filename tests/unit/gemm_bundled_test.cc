// The GEMM entry point's 16-bit calls find their kernels in the build's bundles: every input and
// output type, storage order of A, B and C, and epilogue that kiln.gemm (and the host API) takes,
// at aligned, ragged and skinny sizes. A call the plan sends to a kernel the build does not bundle
// fails for the user with "no bundle"; here it fails the test, naming the call.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm.h"

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

TEST(GemmBundled, EverySixteenBitCallFindsItsKernels) {
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

}  // namespace
}  // namespace kiln
