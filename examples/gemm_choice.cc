#include "examples/gemm_choice.h"

#include "absl/strings/str_cat.h"

namespace kiln::examples {

GemmChoice ChooseGemm(const ProblemSize& s, int compute_capability) {
  if (compute_capability != 90)
    return {"reference/bf16", absl::StrCat("no tuned kernel for sm_", compute_capability,
                                           " yet: the reference kernel (any size, not fast)")};
  if (s.m % 8 != 0 || s.k % 8 != 0)
    return {"reference/bf16", absl::StrCat("M = ", s.m, ", K = ", s.k,
                                           ": TMA needs M and K multiples of 8 (16-byte strides of A, B and "
                                           "column-major C), so the reference kernel (any size, not fast)")};
  return {"gemm/bf16_sm90", "TMA + wgmma, 2-CTA clusters, 4-stage ring; edges by the tensor maps' bounds"};
}

}  // namespace kiln::examples
