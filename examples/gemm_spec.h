// What GEMM an example kernel computes, as the examples' harness (kiln run/bench) reads it: the
// dtypes, storage orders and the tile the sizes must divide by. A kernel carries it as its
// manifest's "gemm" attribute (DescribeGemm); the runtime never interprets it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/dims.h"
#include "kiln/bundle/manifest.h"

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

// The variants of each entry-point kernel that the build bundles (and the GPU suite checks), as
// the suffixes of their names (rt::GemmVariantName, kiln/ops/gemm_choice.h): each type pair and
// each epilogue term at least once.
// f16-f32 is also the plain product under an epilogue that no f16 variant fuses (the pass).
inline const std::vector<std::string> kBundledGemmVariants = {
    "f16-f16",
    "bf16-f32",
    "f16-f32",
    "bf16-bf16.scale.bias_col.gelu.residual",
    "f16-f16.bias_row.relu",
    "bf16-f32.scale.silu"};
// The tile kernels': those, the 16-bit ones again storing C from registers (any_m), which
// ChooseGemm picks where M is no multiple of 8, and MN-major A and B (a_mn, b_mn), with any M too;
// then what a model's linear layers ask of them through the Python module, where C is row-major
// and so computed swapped (docs/PYTHON.md): a bias per column of C (bias_row to the kernel), a
// residual, f32 out with either or both operands MN-major (also the product under an epilogue
// no variant fuses, gemm/epilogue_pass), a gate/up projection's SwiGLU and a QKV projection's
// RoPE (either type, the weight K-major or MN-major).
inline const std::vector<std::string> kBundledTileVariants = {
    "f16-f16",
    "bf16-f32",
    "bf16-bf16.scale.bias_col.gelu.residual",
    "f16-f16.bias_row.relu",
    "bf16-f32.scale.silu",
    "bf16-bf16.any_m",
    "f16-f16.any_m",
    "bf16-bf16.any_m.scale.bias_col.gelu.residual",
    "f16-f16.any_m.bias_row.relu",
    "bf16-bf16.a_mn",
    "bf16-bf16.b_mn",
    "bf16-bf16.a_mn.b_mn",
    "bf16-bf16.any_m.b_mn",
    "bf16-bf16.any_m.a_mn",
    "bf16-bf16.any_m.a_mn.b_mn",
    "bf16-bf16.bias_row",
    "bf16-bf16.any_m.bias_row",
    "bf16-bf16.residual",
    "bf16-bf16.any_m.residual",
    "bf16-f32.a_mn",
    "bf16-f32.b_mn",
    "bf16-f32.a_mn.b_mn",
    "f16-f32",
    "f16-f16.a_mn",
    "f16-f16.b_mn",
    "f16-f16.a_mn.b_mn",
    "f16-f16.any_m.a_mn",
    "f16-f16.any_m.b_mn",
    "f16-f16.any_m.a_mn.b_mn",
    "f16-f32.a_mn",
    "f16-f32.b_mn",
    "f16-f32.a_mn.b_mn",
    "bf16-bf16.swiglu",
    "bf16-bf16.a_mn.swiglu",
    "bf16-bf16.rope",
    "bf16-bf16.a_mn.rope",
    "f16-f16.swiglu",
    "f16-f16.a_mn.swiglu",
    "f16-f16.rope",
    "f16-f16.a_mn.rope"};
// The 8-bit variants bundled for the tile kernels that take them
// (ops/gemm/kernels/tile_kernels.cc).
inline const std::vector<std::string> kBundledFp8Variants = {
    // C column-major, or row-major computed as C^T = B^T A^T
    "e4m3-bf16.tensorwise", "e4m3-bf16.rowwise", "e4m3-bf16.blockwise", "e4m3-bf16.blockwise_t",
    "e4m3-bf16.any_m.tensorwise", "e4m3-bf16.any_m.rowwise", "e4m3-bf16.any_m.blockwise_t",
    "e4m3-f32.tensorwise", "e4m3-f32.rowwise", "e4m3-f32.blockwise", "e4m3-f32.blockwise_t",
    // a row-major C stored by the tile (blockwise past 128 rows: ops/gemm/gemm_fp8.cc)
    "e4m3-bf16.c_row.blockwise", "e4m3-bf16.any_m.c_row.blockwise", "e4m3-f32.c_row.blockwise",
    // a residual added to a row-major bf16 C (a layer's output and down projections), computed
    // as C^T or stored by the tile as above
    "e4m3-bf16.tensorwise.residual", "e4m3-bf16.rowwise.residual", "e4m3-bf16.blockwise_t.residual",
    "e4m3-bf16.c_row.blockwise.residual",
    // an e5m2 gradient by e4m3 (the backward pass's products), either operand the kernel's A; in
    // f32 also the product under an epilogue pass (gemm_runner.cc: RunEpiloguePass)
    "e5m2xe4m3-bf16.tensorwise", "e4m3xe5m2-bf16.tensorwise", "e5m2xe4m3-bf16.rowwise",
    "e4m3xe5m2-bf16.rowwise", "e5m2xe4m3-f32.tensorwise", "e4m3xe5m2-f32.tensorwise",
    "e5m2xe4m3-f32.rowwise", "e4m3xe5m2-f32.rowwise"};
// The wide-stage kernels': kBundledGemmVariants and a row-major B (b_mn), plain and fused.
inline const std::vector<std::string> kBundledWideVariants = [] {
  std::vector<std::string> v = kBundledGemmVariants;
  v.insert(v.end(), {"bf16-bf16.b_mn", "f16-f16.b_mn", "bf16-f32.b_mn", "f16-f32.b_mn",
                     "bf16-f32.b_mn.scale.silu"});
  return v;
}();
// The skinny kernel's: kBundledGemmVariants, then each of those as the entry point runs it for a
// column-major C of 1-4 columns, transposed (the bias's axis swapped; c_row for 2-4 columns).
inline const std::vector<std::string> kBundledRowCVariants = [] {
  std::vector<std::string> v = kBundledGemmVariants;
  v.insert(v.end(), {"bf16-bf16.scale.bias_row.gelu.residual", "f16-f16.bias_col.relu",
                     "bf16-bf16.c_row", "f16-f16.c_row", "bf16-f32.c_row", "f16-f32.c_row",
                     "bf16-bf16.c_row.scale.bias_row.gelu.residual", "f16-f16.c_row.bias_col.relu",
                     "bf16-f32.c_row.scale.silu", "bf16-bf16.c_row.scale.bias_col.gelu.residual",
                     "f16-f16.c_row.bias_row.relu"});
  return v;
}();

rt::Symbols ProblemSymbols(const rt::GemmSize& size);  // {M, N, K}

// The smallest problem that exercises a GEMM kernel's whole protocol: at least 2x2 CTA tiles
// (rounded up to what M and N must divide by) and 2 * ring + 1 K steps, so that the deepest ring
// of stages (the manifest's "ring" attribute; 1 without one) wraps at least twice. For a kernel
// with its CTA count built in (HasBuiltInCtaCount), M doubles until there are at least two tiles
// a CTA.
rt::GemmSize ProtocolSize(const rt::Bundle& b, const GemmSpec& g);
// The number of CTA tiles (BlockM x BlockN) of C.
int64_t Tiles(const GemmSpec& g, const rt::GemmSize& size);

// The emulator's grid for a GEMM launch. A persistent kernel launched as a GPU would over a
// protocol size's few tiles gives each CTA one tile and leaves the rest idle, so a reused
// accumulator or a barrier phase carried from one tile to the next is never exercised: its grid
// shrinks to whole clusters of at most half the tiles, so that every CTA (or cluster) runs at
// least two. Other kernels get their rule's grid.
absl::StatusOr<rt::Dim3> EmulatedGemmGrid(const rt::Bundle& b, const GemmSpec& g,
                                          const rt::GemmSize& size, int sm_count);
// Persistent: the grid rule names none of M, N, K, and the kernel either strides over the tiles
// by the grid it is launched with (reads %nctaid.x) or takes a work table (built for as many
// groups as there are clusters).
bool IsPersistent(const rt::Bundle& b);
// The CTA count is built in: the grid rule names none of M, N, K, and the kernel is not
// persistent (the worklogs' walks over super-tiles with a grid of 128).
bool HasBuiltInCtaCount(const rt::Bundle& b);
// The clusters the emulator runs of `grid` (emu::Options::only_clusters). A kernel with its CTA
// count built in would need every one of its CTAs emulated to give each two tiles; where each CTA
// takes the same number of tiles, two or more, the first and the last cluster run, and the
// harness checks that they wrote their share of C and that every element of it is right. Empty
// (all run) otherwise.
std::vector<uint64_t> EmulatedClusters(const rt::Bundle& b, const GemmSpec& g,
                                       const rt::GemmSize& size, rt::Dim3 grid);
// The bundle the emulator launches on `*grid` (EmulatedGemmGrid): for a kernel that takes a work
// table, a copy whose table is built for that grid's clusters.
absl::StatusOr<rt::Bundle> EmulatedGemmBundle(const rt::Bundle& b, const GemmSpec& g,
                                              const rt::GemmSize& size, int sm_count,
                                              rt::Dim3* grid);

// The kernel's GEMM description, if it is a GEMM (has a "gemm" attribute that parses).
std::optional<GemmSpec> GemmOf(const rt::Manifest& m);
// Replaces (or adds) the manifest's GEMM description: for a kernel that indexes through stride
// parameters (the references), the layouts the harness binds.
void SetGemmSpec(rt::Manifest& m, const GemmSpec& g);
// Fails with a message naming the kernel's tile and the line that set it when the problem does
// not divide by the tile.
absl::Status CheckProblem(const rt::Manifest& m, const GemmSpec& g, const rt::GemmSize& size);
// The grid of a GEMM launch: the tile check, then the kernel's grid rule over M, N, K.
absl::StatusOr<rt::Dim3> GemmGrid(const rt::Manifest& m, const GemmSpec& g,
                                  const rt::GemmSize& size, int sm_count);

}  // namespace kiln::examples
