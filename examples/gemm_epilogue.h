// The host side of a GEMM's fused epilogue (kiln::EpilogueSpec in the DSL, whose terms the
// manifest's GEMM description carries): random inputs for its terms, and in fp64 the element the
// kernel should store, for the harness's references on the GPU and on the emulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/gemm_spec.h"
#include "examples/host_data.h"
#include "kiln/bundle/epilogue_terms.h"

namespace kiln::examples {

struct HostEpilogue {
  bool scale = false, residual = false;
  char bias = 0;           // 'r': one per row of C, 'c': one per column, 0: none
  std::string activation;  // "", "relu", "gelu" (tanh form), "silu"
  std::string type;        // the output type, which C_in, bias and residual share
  std::string c_order;     // C's, which C_in and residual share
  bool swiglu = false;     // C = silu(gate) * up over pairs of the product's rows (rt::SwigluRowOf)
  bool rope = false;       // pairs of rows turned by RoPE (rt::RopeRowOf)
  bool Plain() const {
    return !scale && !residual && !bias && activation.empty() && !swiglu && !rope;
  }
};
// C's rows: M, or under swiglu half of them.
inline int64_t CRows(const GemmSpec& g, const rt::GemmSize& s) {
  return g.epilogue == "swiglu" ? s.m / 2 : s.m;
}
// The spec's epilogue; an unknown term is an error naming it.
absl::StatusOr<HostEpilogue> EpilogueOf(const GemmSpec& g);

struct EpilogueInputs {
  float alpha = 1, beta = 0;
  std::vector<uint8_t> c_in, bias, residual;  // encoded in the output type; empty where unused
  // rope: the heads' rows (those turned), a head's rows, the positions' period, and the angle
  // words [period, dim / 2] (rt::RopeAngleWord: cos and sin rounded to bf16).
  int64_t rope_rows = 0, rope_dim = 0, rope_period = 0;
  std::vector<uint32_t> rope_angles;
};
// alpha = 1/sqrt(K) (so the scaled product, like each other term, is about unit size and an
// error in any term shows), beta = 0.5, the rest random normals (from `seed`). rope: heads of 64
// rows (32 below M = 256, 16 below 64), every head but the last turned (M's rows past the heads
// are stored as they are), positions repeating every N / 2 + 1 columns, angles of Llama's
// frequencies (theta 10000).
EpilogueInputs RandomEpilogueInputs(const HostEpilogue& e, const rt::GemmSize& s, uint64_t seed);
// What the kernel should store at (i, j), given the exact product there.
double ApplyEpilogue(const HostEpilogue& e, const EpilogueInputs& in, const rt::GemmSize& s,
                     double product, int64_t i, int64_t j);

// A rope kernel's (i, j) (EpilogueSpec::rope).
template <typename ProductAt>
double RopeAt(const EpilogueInputs& in, ProductAt product, int64_t i, int64_t j) {
  if (i >= in.rope_rows) return product(i);
  const int64_t dim = in.rope_dim, half = dim / 2, head = i - i % dim;
  const int64_t feature = rt::RopeFeatureOf(i % dim, dim), frequency = feature % half;
  const uint32_t word = in.rope_angles[j % in.rope_period * half + frequency];
  const double c = Bf16ToFloat(static_cast<uint16_t>(word)),
               sn = Bf16ToFloat(static_cast<uint16_t>(word >> 16)),
               x1 = product(head + rt::RopeRowOf(frequency, dim)),
               x2 = product(head + rt::RopeRowOf(frequency + half, dim));
  return feature < half ? x1 * c - x2 * sn : x2 * c + x1 * sn;
}

// What the kernel should store at (i, j) of C (CRows x N), given product(row), the exact product
// at (row, j) for any row of M.
template <typename ProductAt>
double ExpectedAt(const HostEpilogue& e, const EpilogueInputs& in, const rt::GemmSize& s,
                  ProductAt product, int64_t i, int64_t j) {
  if (e.rope) return RopeAt(in, product, i, j);
  if (!e.swiglu) return ApplyEpilogue(e, in, s, product(i), i, j);
  const double gate = product(rt::SwigluRowOf(i, false)), up = product(rt::SwigluRowOf(i, true));
  return gate / (1 + std::exp(-gate)) * up;
}

// Elements of encoded data of a GEMM element type: "bf16", "f16" (2 bytes) or "f32" (4).
size_t ElementBytes(const std::string& type);
double DecodeElement(const std::vector<uint8_t>& data, const std::string& type, size_t index);

}  // namespace kiln::examples
