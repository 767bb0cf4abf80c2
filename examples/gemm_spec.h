// What GEMM an example kernel computes, as the examples' harness (kiln run/bench) reads it: the
// dtypes, storage orders and the tile the sizes must divide by. A kernel carries it as its
// manifest's "gemm" attribute (DescribeGemm); the runtime never interprets it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/gemm_choice.h"
#include "kiln/runtime/manifest.h"

namespace kiln {
class Kernel;
}

namespace kiln::examples {

// "row"/"col" are the usual BLAS meanings for A (MxK), B (KxN) and C (MxN).
struct GemmSpec {
  std::string in_type = "bf16", out_type = "bf16", acc_type = "f32";
  std::string a_order = "row", b_order = "col", c_order = "row";
  int64_t tile_m = 1, tile_n = 1, tile_k = 1;  // what M, N, K must divide by
  // One CTA's output tile and K step, where they differ from the tile above (a schedule that
  // walks groups of CTA tiles, a mainloop peeled by several K steps); 0: the tile's.
  int64_t block_m = 0, block_n = 0, block_k = 0;
  std::string source;  // file:line that described it
  // The fused epilogue's terms (kiln::EpilogueSpec::Terms(): "scale.bias_col.gelu.residual"), ""
  // for none: the harness binds its parameters and applies it to the reference.
  std::string epilogue;

  int64_t BlockM() const { return block_m ? block_m : tile_m; }
  int64_t BlockN() const { return block_n ? block_n : tile_n; }
  int64_t BlockK() const { return block_k ? block_k : tile_k; }

  std::string ToString() const;
  static absl::StatusOr<GemmSpec> Parse(absl::string_view text);
};

using ProblemSize = rt::GemmSize;  // the host API's
// The host API's kernel choice, under the examples' names.
using rt::CanonicalEpilogue;
using rt::ChooseGemm;
using rt::GemmChoice;
using rt::GemmOptions;
using rt::GemmVariantName;
using rt::kBundledGemmVariants;
using rt::kBundledTileVariants;
using rt::kBundledRowCVariants;
rt::Symbols ProblemSymbols(const ProblemSize& size);  // {M, N, K}

// The smallest problem that exercises a GEMM kernel's whole protocol: at least 2x2 CTA tiles
// (rounded up to what M and N must divide by) and 2 * ring + 1 K steps, so that the deepest ring
// of stages (the manifest's "ring" attribute; 1 without one) wraps at least twice.
ProblemSize ProtocolSize(const rt::Manifest& m, const GemmSpec& g);

// The kernel's GEMM description, if it is a GEMM (has a "gemm" attribute that parses).
std::optional<GemmSpec> GemmOf(const rt::Manifest& m);
// Replaces (or adds) the manifest's GEMM description: for a kernel that indexes through stride
// parameters (the references), the layouts the harness binds.
void SetGemmSpec(rt::Manifest& m, const GemmSpec& g);
// Fails with a message naming the kernel's tile and the line that set it when the problem does
// not divide by the tile.
absl::Status CheckProblem(const rt::Manifest& m, const GemmSpec& g, const ProblemSize& size);
// The grid of a GEMM launch: the tile check, then the kernel's grid rule over M, N, K.
absl::StatusOr<rt::Dim3> GemmGrid(const rt::Manifest& m, const GemmSpec& g, const ProblemSize& size,
                                  int sm_count);

}  // namespace kiln::examples
