// Fused GEMM epilogues: what happens to each f32 accumulator element between the last MMA and
// the store, for any kernel that knows each element's (row, column) of C:
//
//   D[r, c] = out( act( alpha * acc + beta * C_in[r, c] + bias[r or c] ) + residual[r, c] )
//
// Each term is optional. One more form stands alone: SwiGLU (EpilogueSpec::swiglu), which pairs
// rows of the product instead of mapping each element. The builder declares the parameters the spec
// needs, and Apply computes one element. Loads of C_in, bias and residual are predicated on the
// element being inside M x N, so a ragged tile's padding never touches memory. Built in
// dsl/epilogue.cc from public ops only.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "kiln/memory.h"
#include "kiln/value.h"

namespace kiln {

class Kernel;

enum class Activation : uint8_t {
  kNone,
  kRelu,  // max(x, 0), NaN kept
  kGelu,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): the tanh form (torch's
          // approximate='tanh')
  kSilu,  // x / (1 + e^-x) = 0.5 x (1 + tanh(x / 2))
  // (GELU and SiLU take tanh from tanh.approx.f32, relative error <= 2^-11: the result is within
  // |x| 2^-12 of the exact function.)
};
enum class BiasAxis : uint8_t {
  kNone,
  kRow /* bias[r], length M */,
  kColumn /* bias[c], length N */
};

// The activation of f32 `x` as the fused epilogues compute it (GELU and SiLU through one
// tanh.approx.f32 each).
Value ApplyActivation(Activation activation, const Value& x, Loc loc = Loc::current());

struct EpilogueSpec {
  bool scale = false;  // alpha * acc + beta * C_in: f32 parameters alpha, beta and the matrix C_in
  BiasAxis bias = BiasAxis::kNone;
  Activation activation = Activation::kNone;
  bool residual = false;  // + residual[r, c], after the activation
  Scalar out =
      Scalar::kBF16;  // the stored type: bf16, f16 or f32 (C_in, bias, residual have it too)
  // SwiGLU, no other term with it: C is (M/2) x N, C[r, c] = silu(P[g, c]) * P[g + 8, c] with
  // g = 16 (r / 8) + r % 8 (P the product). Gate and up rows interleave in blocks of 8, so that
  // the two rows of a pair lie in one wgmma accumulator thread (its rows are 8 apart); a linear
  // layer's gate and up weights are put in that order once (rt::SwigluRowOf says where).
  bool swiglu = false;
  // RoPE, no other term with it: a QKV projection computed as C^T, the product's rows its features
  // and its columns the tokens. The rows below the i32 parameter rope_rows (the query and key
  // heads, rope_dim rows each) turn in pairs: within a head, rows 16 b + j and 16 b + 8 + j
  // (j < 8) hold features 8 b + j and rope_dim / 2 + 8 b + j (so that both lie in one wgmma
  // accumulator thread; rt::RopeRowOf says where), and at column c they become
  // (x1 cos - x2 sin, x2 cos + x1 sin) (Llama's rotate-half RoPE), the angle's cos and sin those
  // of frequency 8 b + j at position c % rope_period, for columns below 2^23. They come from the
  // table rope_angles [rope_period, rope_dim / 2] of 32-bit words, each the bf16 pair {cos, sin}
  // (cos in the low half; rt::RopeAngleWord), bf16 as a bf16 model's RoPE rounds them. Rows from
  // rope_rows on are stored as they are.
  bool rope = false;

  bool Plain() const {
    return !scale && bias == BiasAxis::kNone && activation == Activation::kNone && !residual &&
           !swiglu && !rope;
  }
  // The terms as a name: "scale", "bias_row" or "bias_col", "relu"/"gelu"/"silu", "residual",
  // joined by '.' in that order ("" for none), or "swiglu" or "rope" alone. The GEMM harness reads
  // it back from the manifest.
  std::string Terms() const;
};
// The inverse of Terms(); an unknown or repeated term is an error naming it.
absl::StatusOr<EpilogueSpec> ParseEpilogueTerms(const std::string& terms, Scalar out);

class Epilogue {
 public:
  Epilogue() = default;
  // Declares alpha and beta (f32) and the pointers C_in, bias and residual, those the spec needs
  // and in that order. C_in and residual are M x N like C: column-major (`column_major`) or
  // row-major, densely packed.
  static Epilogue Declare(Kernel& k, const EpilogueSpec& spec, const Value& M, const Value& N,
                          bool column_major, Loc loc = Loc::current());
  // The same, C_in and residual element (r, c) at r * row_stride + c * col_stride (a kernel
  // whose C is strided by parameters, like kiln's reference).
  static Epilogue Declare(Kernel& k, const EpilogueSpec& spec, const Value& M, const Value& N,
                          const Value& row_stride, const Value& col_stride,
                          Loc loc = Loc::current());
  const EpilogueSpec& spec() const { return spec_; }
  // What element (row, col) reads from memory: C_in, bias and residual as stored (invalid where
  // the spec has no such term). `inside`: an i1 that is true where (row, col) lies in M x N
  // (loads elsewhere read 0 and touch nothing).
  struct Inputs {
    Value c_in, bias, residual;
  };
  Inputs Load(const Value& row, const Value& col, const Value& inside,
              Loc loc = Loc::current()) const;
  // C_in and the residual only, for a kernel that loads the bias once for the elements sharing it.
  Inputs LoadMatrices(const Value& row, const Value& col, const Value& inside,
                      Loc loc = Loc::current()) const;
  // The bias of element (row, col): bias[row] (bias_row) or bias[col] (bias_col), masked by that
  // index alone (row < M or col < N), so one load serves every element of its row or column.
  // Invalid where the spec has no bias.
  Value LoadBias(const Value& row, const Value& col, Loc loc = Loc::current()) const;
  // The result in f32 from the accumulator and its inputs, before the cast to spec().out. A
  // kernel that loads many elements' inputs before it applies any keeps their loads in flight
  // together instead of waiting on each in turn.
  Value Apply(const Value& acc, const Inputs& in, Loc loc = Loc::current()) const;
  // Apply in two steps, for a kernel that has the residual later than the rest: all terms up to
  // the activation (in.residual unused), then the residual (where the spec has one).
  Value ApplyBeforeResidual(const Value& acc, const Inputs& in, Loc loc = Loc::current()) const;
  Value AddResidual(const Value& x, const Value& residual, Loc loc = Loc::current()) const;
  // Load and Apply for one element.
  Value Apply(const Value& acc, const Value& row, const Value& col, const Value& inside,
              Loc loc = Loc::current()) const;
  // silu(gate) * up in f32 (swiglu), SiLU in the tanh form of the activations.
  Value Swiglu(const Value& gate, const Value& up, Loc loc = Loc::current()) const;
  // RoPE's angle word for row `row` (the first 8 of its block of 16) at column `col`, read where
  // row < rope_rows and `inside` (0 elsewhere). A kernel may load the words of many pairs ahead of
  // their accumulator.
  Value RopeAngle(const Value& row, const Value& col, const Value& inside,
                  Loc loc = Loc::current()) const;
  // The pair x1 (at row) and x2 (row + 8) turned by `angle` (RopeAngle's word):
  // {x1 cos - x2 sin, x2 cos + x1 sin} where row < rope_rows, else {x1, x2}.
  std::pair<Value, Value> Rope(const Value& x1, const Value& x2, const Value& row,
                               const Value& angle, Loc loc = Loc::current()) const;
  // The result cast to the output type.
  Value Output(const Value& acc, const Inputs& in, Loc loc = Loc::current()) const;
  Value Output(const Value& acc, const Value& row, const Value& col, const Value& inside,
               Loc loc = Loc::current()) const;

 private:
  Value BiasAddress(const Value& row, const Value& col, Loc loc) const;

  EpilogueSpec spec_;
  Value m_, n_, alpha_, beta_, bias_;
  GlobalTensor c_in_, residual_;
  Value rope_rows_, rope_dim_, rope_period_, rope_inv_period_;
  GlobalTensor rope_angles_;  // [rope_period, rope_dim / 2]
};

}  // namespace kiln
