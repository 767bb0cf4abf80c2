#include "examples/attention/common.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::examples {
namespace {

rt::GridExpr Rule(Kernel& k, const std::string& text) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (!e.ok()) k.Fail(absl::StrCat("rule '", text, "': ", e.status().message()));
  return e.ok() ? *e : *rt::GridExpr::Parse("1");
}

}  // namespace

absl::StatusOr<AttentionShape> ParseAttention(const std::string& options) {
  AttentionShape a;
  bool have_d = false;
  for (absl::string_view part : absl::StrSplit(options, '.')) {
    if (part == "d64" || part == "d128" || part == "d256") {
      a.d = part == "d64" ? 64 : part == "d128" ? 128 : 256;
      have_d = true;
    } else if (part == "f16") {
      a.in = f16;
    } else if (part == "causal") {
      a.causal = true;
    } else if (part == "persist") {
      a.persistent = true;
    } else if (int* field = absl::StartsWith(part, "wg")   ? &a.warpgroups
                            : absl::StartsWith(part, "bn") ? &a.block_n
                            : absl::StartsWith(part, "st") ? &a.stages
                                                           : nullptr;
               field && absl::SimpleAtoi(part.substr(2), field) && *field > 0) {
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown option '", part,
          "' (takes d64, d128 or d256, then f16, causal, and a tiling: wgW consumer warpgroups, bnN keys per "
          "tile, stS ring stages, persist for a CTA per SM)"));
    }
  }
  if (!have_d) return absl::InvalidArgumentError("names no head dimension (d64, d128 or d256)");
  return a;
}

std::vector<std::string> BundledAttentionVariants() {
  std::vector<std::string> v;
  for (const char* d : {"d64", "d128", "d256"})
    for (const char* type : {"", ".f16"})
      for (const char* causal : {"", ".causal"}) v.push_back(absl::StrCat(d, type, causal));
  return v;
}

rt::TensorMapParam HeadMap(Kernel& k, const char* tensor, const std::string& rows, const std::string& heads, int d,
                           int box_rows, int spans, Scalar in) {
  rt::TensorMapParam t;
  t.tensor = tensor;
  t.dtype = in == f16 ? rt::TmaDtype::kF16 : rt::TmaDtype::kBF16;
  t.swizzle = rt::TmaSwizzle::k128B;
  t.dims = {Rule(k, "64"), Rule(k, rows), Rule(k, std::to_string(d / 64)), Rule(k, heads)};
  t.strides = {Rule(k, std::to_string(d * 2)), Rule(k, "128"), Rule(k, absl::StrCat(rows, "*", d * 2))};
  t.box = {64, static_cast<uint32_t>(box_rows), static_cast<uint32_t>(spans), 1};
  return t;
}

}  // namespace kiln::examples
