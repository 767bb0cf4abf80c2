// The GEMM entry point's choice of kernel for a problem (bf16 in and out, f32 accumulation; A
// row-major, B column-major, C column-major, the layout of fast.cu and cuBLAS's TN). Where TMA's
// 16-byte strides allow it, one of the ragged Hopper kernels: the one whose tiles waste least of
// the machine (tiles padded past M and N, a last wave that fills few of the in-flight slots),
// weighed by its measured speed per tile; else kiln's reference kernel, which takes any size
// (slowly). docs/PERF.md records the rule and how the choice does against cuBLAS.
#pragma once

#include <string>

#include "examples/gemm_spec.h"

namespace kiln::examples {

struct GemmChoice {
  std::string kernel;  // a registered kernel (bundle) name
  std::string why;     // one line for the user
};

// `compute_capability`: the GPU's (90 for an H100/H200), or the one to choose for.
GemmChoice ChooseGemm(const ProblemSize& size, int compute_capability);

}  // namespace kiln::examples
