#include "kiln/bundle/epilogue_terms.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kiln::rt {

absl::StatusOr<std::string> CanonicalEpilogue(const std::string& terms) {
  static const char* kOrder[] = {"scale", "bias_row", "bias_col", "relu", "gelu",
                                 "silu",  "residual", "swiglu",   "rope"};
  std::vector<std::string> given = absl::StrSplit(terms, absl::ByAnyChar(".,"), absl::SkipEmpty());
  if (given.empty() && !terms.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "epilogue '", terms,
        "': no term (scale, bias_row, bias_col, relu, gelu, silu, residual, swiglu, rope)"));
  std::vector<std::string> out;
  int biases = 0, activations = 0;
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    const int64_t n = std::count(given.begin(), given.end(), kOrder[i]);
    if (n > 1)
      return absl::InvalidArgumentError(
          absl::StrCat("epilogue '", terms, "': '", kOrder[i], "' twice"));
    if (!n) continue;
    out.push_back(kOrder[i]);
    biases += i == 1 || i == 2, activations += i >= 3 && i <= 5;
  }
  for (const std::string& t : given)
    if (std::find(std::begin(kOrder), std::end(kOrder), t) == std::end(kOrder))
      return absl::InvalidArgumentError(
          absl::StrCat("epilogue '", terms, "': unknown term '", t,
                       "' (scale, bias_row, bias_col, relu, gelu, silu, residual, swiglu, rope)"));
  // swiglu and rope pair the product's rows (EpilogueSpec::swiglu, ::rope): the other terms are
  // per element of C.
  for (const char* pairing : {"swiglu", "rope"})
    if (out.size() > 1 && std::count(out.begin(), out.end(), pairing))
      return absl::InvalidArgumentError(
          absl::StrCat("epilogue '", terms, "': ", pairing, " takes no other term"));
  if (biases > 1 || activations > 1)
    return absl::InvalidArgumentError(
        absl::StrCat("epilogue '", terms, "': one bias and one activation at most"));
  return absl::StrJoin(out, ".");
}

bool EpilogueReadsMatrices(const std::string& canonical_terms) {
  for (absl::string_view t : absl::StrSplit(canonical_terms, '.'))
    if (t == "scale" || t == "residual") return true;
  return false;
}

}  // namespace kiln::rt
