#include "examples/gemm_epilogue.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "examples/host_data.h"
#include "kiln/bundle/epilogue_terms.h"

namespace kiln::examples {

absl::StatusOr<HostEpilogue> EpilogueOf(const GemmSpec& g) {
  HostEpilogue e;
  e.type = g.out_type;
  e.c_order = g.c_order;
  absl::StatusOr<std::string> terms =
      rt::CanonicalEpilogue(g.epilogue);  // known terms, one of each kind
  if (!terms.ok()) return terms.status();
  for (absl::string_view t : absl::StrSplit(*terms, '.', absl::SkipEmpty())) {
    if (t == "scale")
      e.scale = true;
    else if (t == "residual")
      e.residual = true;
    else if (t == "swiglu")
      e.swiglu = true;
    else if (t == "rope")
      e.rope = true;
    else if (t == "bias_row" || t == "bias_col")
      e.bias = t == "bias_row" ? 'r' : 'c';
    else
      e.activation = std::string(t);
  }
  return e;
}

size_t ElementBytes(const std::string& type) { return type == "f32" ? 4 : 2; }

double DecodeElement(const std::vector<uint8_t>& data, const std::string& type, size_t index) {
  if (type == "f32") {
    float f;
    std::memcpy(&f, &data[index * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &data[index * 2], 2);
  return type == "f16" ? HalfToFloat(h) : Bf16ToFloat(h);
}

namespace {
// n random normals encoded in `type`.
std::vector<uint8_t> RandomEncoded(size_t n, const std::string& type, uint64_t seed) {
  const std::vector<uint16_t> v = RandomNormal16(n, seed, type == "f16");
  std::vector<uint8_t> out(n * ElementBytes(type));
  for (size_t i = 0; i < n; ++i) {
    if (type == "f32") {
      const float f = Bf16ToFloat(v[i]);
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      std::memcpy(&out[i * 2], &v[i], 2);
    }
  }
  return out;
}
}  // namespace

EpilogueInputs RandomEpilogueInputs(const HostEpilogue& e, const rt::GemmSize& s, uint64_t seed) {
  EpilogueInputs in;
  if (e.scale) {
    in.alpha = static_cast<float>(1 / std::sqrt(static_cast<double>(s.k)));
    in.beta = 0.5f;
    in.c_in = RandomEncoded(s.m * s.n, e.type, seed * 16 + 11);
  }
  if (e.bias) in.bias = RandomEncoded(e.bias == 'r' ? s.m : s.n, e.type, seed * 16 + 12);
  if (e.residual) in.residual = RandomEncoded(s.m * s.n, e.type, seed * 16 + 13);
  if (e.rope) {
    in.rope_dim = s.m >= 256 ? 64 : s.m >= 64 ? 32 : 16;
    const int64_t heads = s.m / in.rope_dim;
    in.rope_rows = (heads > 1 ? heads - 1 : heads) * in.rope_dim;
    in.rope_period = s.n / 2 + 1;
    const int64_t half = in.rope_dim / 2;
    for (int64_t p = 0; p < in.rope_period; ++p)
      for (int64_t f = 0; f < half; ++f) {
        const float angle =
            static_cast<float>(p) * static_cast<float>(std::pow(10000.0, -2.0 * f / in.rope_dim));
        in.rope_angles.push_back(
            rt::RopeAngleWord(FloatToBf16(std::cos(angle)), FloatToBf16(std::sin(angle))));
      }
  }
  return in;
}

double ApplyEpilogue(const HostEpilogue& e, const EpilogueInputs& in, const rt::GemmSize& s,
                     double x, int64_t i, int64_t j) {
  const size_t at = e.c_order == "row" ? i * s.n + j : j * s.m + i;
  if (e.scale)
    x = static_cast<double>(in.alpha) * x +
        static_cast<double>(in.beta) * DecodeElement(in.c_in, e.type, at);
  if (e.bias) x += DecodeElement(in.bias, e.type, e.bias == 'r' ? i : j);
  if (e.activation == "relu") x = std::max(x, 0.0);
  if (e.activation == "gelu")
    x = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  if (e.activation == "silu") x = x / (1 + std::exp(-x));
  if (e.residual) x += DecodeElement(in.residual, e.type, at);
  return x;
}

}  // namespace kiln::examples
