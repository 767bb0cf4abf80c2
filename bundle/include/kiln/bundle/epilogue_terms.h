// A GEMM's fused epilogue as its kernels' names and manifests spell it: terms in a fixed order,
// '.'-joined ("scale.bias_col.gelu.residual"). The builder (kiln/epilogue.h), the GEMM entry
// point and the harness all read and write this spelling.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::rt {

// Epilogue terms in any order, ',' or '.' between them ("gelu,bias_col"), in the kernels' order,
// '.'-joined ("bias_col.gelu"), as kernel names carry them; an unknown or repeated term, or two
// biases or two activations, is an error.
absl::StatusOr<std::string> CanonicalEpilogue(const std::string& terms);
// Whether canonical terms read M x N matrices beside the accumulator: C_in ("scale") or a residual.
bool EpilogueReadsMatrices(const std::string& canonical_terms);

// "swiglu" (alone) pairs the product's rows: C[r, c] = silu(P[gate, c]) * P[up, c], gate and up
// rows interleaved in blocks of 8, so C has half the product's rows. The product's row holding
// gate row `r` of C (`up`: its up row).
inline int64_t SwigluRowOf(int64_t r, bool up) { return 16 * (r / 8) + r % 8 + (up ? 8 : 0); }

// "rope" (alone) turns pairs of the product's rows (EpilogueSpec::rope): within each head of `dim`
// rows (a multiple of 16), feature f and its partner f + dim / 2 lie 8 rows apart in blocks of
// 16. The row holding feature f (0 <= f < dim) of its head, and the inverse (the feature a row
// holds).
inline int64_t RopeRowOf(int64_t f, int64_t dim) {
  const int64_t half = dim / 2, i = f % half;
  return 16 * (i / 8) + i % 8 + (f < half ? 0 : 8);
}
inline int64_t RopeFeatureOf(int64_t r, int64_t dim) {
  return (r % 16 < 8 ? 0 : dim / 2) + 8 * (r / 16) + r % 8;
}
// A rope_angles word: the bf16 bits of an angle's cos (low half) and sin (high half).
inline uint32_t RopeAngleWord(uint16_t cos_bf16, uint16_t sin_bf16) {
  return uint32_t{cos_bf16} | uint32_t{sin_bf16} << 16;
}

}  // namespace kiln::rt
