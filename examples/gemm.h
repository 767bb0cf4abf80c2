// GEMM operands for example kernels: A (MxK), B (KxN), C (MxN) as global tensors indexed
// (row, col) whatever their storage order, plus the sizes M, N, K.
#pragma once

#include "kiln/kernel.h"

namespace kiln::examples {

struct GemmOperands {
  GlobalTensor A, B, C;
  Value M, N, K;
};

// Declares the parameters A, B, C, M, N, K (in that order) and records the spec in the manifest.
GemmOperands DeclareGemm(Kernel& k, const rt::GemmSpec& spec, Loc loc = Loc::current());

}  // namespace kiln::examples
