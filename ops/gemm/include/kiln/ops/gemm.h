// The GEMM entry point of the host API: C = epilogue(A * B) at any M, N, K >= 1 on the current
// device, with the kernel ChooseGemm picks for it, loaded from a directory of bundles (`kiln
// bundle` writes them; the build writes build/bundles). No compiler is needed.
//
//   kiln::rt::GemmRunner gemm("build/bundles");
//   absl::Status s = gemm.Run({m, n, k}, {.epilogue = "bias_col,gelu"},
//                             {.a = x, .b = w, .c = y, .c_row_major = true, .bias = b});
//
// Layouts: A row-major (M x K) or column-major, B column-major (K x N: the N x K row-major
// weight of a linear layer) or row-major, C column-major or, with c_row_major, row-major
// (computed as C^T = B^T A^T, the same kernels; so is a C of 1-4 columns where A and B are K-major,
// 16-byte aligned and K a multiple of 8, 2-4 of them packed: the skinny kernel's few rows, stored
// row-major by its c_row variants). Leading dimensions are in elements (0: packed).
// The tile kernels read A and B through TMA, which needs their rows (columns, MN-major) 16 bytes
// apart and 16-byte aligned pointers; on sm_90 an operand without them (K, or an MN-major
// operand's M or N, no multiple of 8; a leading dimension or a pointer off) is first copied into
// one with them (gemm/restride16, into a buffer the runner keeps per stream and operand, grown to
// the largest call), elsewhere the strided mma.sync kernel runs. C, C_in and residual are taken
// as given (a C whose columns are padded where the chosen kernel stores C packed sends the call
// to the strided kernel); where a tile kernel stores C through TMA, it reads C_in and residual
// through TMA too, so their pointers must then be 16-byte aligned (the plan says so otherwise).
// Every pointer lies on its element's boundary (a GPU faults on an element load across it).
//
// The tile kernels may split a tile's K (split-K, stream-K: GemmChoice::split); the parts meet in
// workspaces each loaded kernel keeps. A runner loads a kernel per stream, so calls on different
// streams keep apart, and calls on one stream are ordered. The parts are summed in a fixed order:
// the same inputs give the same bytes.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/ops/gemm_choice.h"
#include "kiln/ops/grouped_gemm.h"
#include "kiln/ops/op_device.h"
#include "kiln/runtime/cuda_api.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"

namespace kiln::rt {

struct GemmOperands {
  cu::CUdeviceptr a = 0, b = 0, c = 0;
  int64_t lda = 0, ldb = 0,
          ldc = 0;  // elements between rows of A, columns of B, C's columns (rows if row-major)
  bool c_row_major = false;  // C, C_in and residual row-major
  // A column-major (M contiguous: lda counts rows, at least M) and B row-major (N contiguous: ldb
  // at least N); by default A is row-major and B column-major (both K contiguous).
  bool a_col_major = false, b_row_major = false;
  // The epilogue's (GemmOptions::epilogue): alpha, beta and C_in for "scale", bias for "bias_row"
  // (M values) or "bias_col" (N), residual for "residual"; C_in and residual laid out like C.
  float alpha = 1, beta = 0;
  cu::CUdeviceptr c_in = 0, bias = 0, residual = 0;
  // "rope", for a QKV projection's row-major C whose columns are the features (EpilogueSpec::rope;
  // B's columns, the weight's rows, in rt::RopeRowOf's order within each head): the query and key
  // heads' columns (rope_rows, a multiple of rope_dim), a head's columns (rope_dim, a multiple of
  // 16), and the angle words rope_angles [rope_period, rope_dim / 2] (32 bits each: the bf16
  // cos in the low half, sin in the high: rt::RopeAngleWord); C's row r is the token at position
  // r % rope_period.
  cu::CUdeviceptr rope_angles = 0;
  int64_t rope_rows = 0, rope_dim = 0, rope_period = 0;
  // 8-bit A and B (GemmOptions::in_type "e4m3" or "e5m2"): their f32 scales (mxfp8: UE8M0
  // bytes), C = A_scaled * B_scaled, as GemmOptions::scaling says:
  //   tensorwise  scale_a[0] for all of A, scale_b[0] for all of B;
  //   rowwise     scale_a[m] per row of A (M values), scale_b[n] per column of B (N);
  //   blockwise   A's per 1 x 128 (row m, K block kb) at scale_a[m * sa_row + kb * sa_k], by
  //               default M-contiguous (sa_row 1, sa_k M); B's per 128 x 128 (N block nb, K block
  //               kb) at scale_b[nb * sb_row + kb * sb_k], by default row-major (sb_row
  //               ceil(K / 128), sb_k 1). Zero strides take the defaults.
  //   mxfp8       (sm_100) UE8M0 bytes, 2^(e - 127), per 1 x 32 of A's rows and of B's (the N x K
  //               weight's): row m's group j at byte scale_a[m * sa_row + j], sa_row a multiple
  //               of 4, at least 4 * ceil(K / 128) (the default), sa_k 1; B's likewise; the bytes
  //               past K pad the rows' last word (not 0xff, which is NaN).
  // The product's partial sums are promoted to f32 every 128 of K (examples::Fp8Scaling).
  cu::CUdeviceptr scale_a = 0, scale_b = 0;
  int64_t sa_row = 0, sa_k = 0, sb_row = 0, sb_k = 0;
};

// Whether `type` is an 8-bit float the entry point multiplies ("e4m3", "e5m2").
bool IsFp8Type(const std::string& type);

// What Run would launch: the kernel, its problem (M and N swapped for a row-major C) and why.
// Where the device has no bundle of that kernel's fused variant, Run launches the plain product
// in f32 and then gemm/epilogue_pass instead (RunGemm), which the plan does not name.
struct GemmPlan {
  GemmChoice choice;
  GemmSize size;  // as the kernel sees it
  bool swapped = false;
  bool c_row =
      false;  // the kernel stores its C row-major (a column-major C of 2-4 columns, swapped)
  bool a_mn = false, b_mn = false;  // the kernel's A and B MN-major (after any swap)
  // The kernel's A and B copied first by gemm/restride16 into these leading dimensions (0: read
  // as given).
  int64_t restrided_lda = 0, restrided_ldb = 0;
};
// The copy kernel the entry point runs on operands TMA cannot stride.
inline constexpr const char* kRestrideKernel = "gemm/restride16";
// An epilogue no bundled kernel fuses runs after the plain product in f32, as a pass of its own:
// gemm/epilogue_pass.<out type> (RunGemm).
inline constexpr const char* kEpiloguePassKernel = "gemm/epilogue_pass";
// Whether `kernel` (a name ChooseGemm gives) reads A, B and C through any element strides, as the
// reference and the strided kernel do; the others read packed or TMA-strided operands.
bool ReadsAnyStrides(const std::string& kernel);
// The plan for a call, or an error naming what is wrong with it (sizes, types, leading
// dimensions, alignment, an epilogue operand missing). Needs no GPU.
absl::StatusOr<GemmPlan> PlanGemm(const GemmSize& size, const GemmOptions& options,
                                  const GemmOperands& operands, int compute_capability,
                                  const GemmTuneCache* tuned = nullptr);

// Where the entry point's launches go (kiln/ops/op_device.h); its scratch buffer 0 and 1 are the
// restrided copies of A and B.
using GemmDevice = OpDevice;

// Plans the call for a chip of `compute_capability` and launches its kernels (the restrided
// copies, then the GEMM) on `device`, in order.
absl::Status RunGemm(const GemmSize& size, const GemmOptions& options, const GemmOperands& operands,
                     int compute_capability, GemmDevice& device,
                     const GemmTuneCache* tuned = nullptr);

class GemmRunner {
 public:
  // `tune_cache`: a file `kiln tune` wrote, whose measured choices win over the rule ("": none;
  // a path that cannot be opened fails the first Run).
  explicit GemmRunner(std::string bundle_dir, std::string tune_cache = "")
      : kernels_(bundle_dir),
        bundle_dir_(std::move(bundle_dir)),
        tune_path_(std::move(tune_cache)) {}
  // Plans, loads the kernel (once per runner and stream) and launches it on `stream`; does not
  // synchronise.
  absl::Status Run(const GemmSize& size, const GemmOptions& options, const GemmOperands& operands,
                   cu::CUstream stream = nullptr);
  // Whether `kernel`'s bundle is in this runner's directory (a plan's fused epilogue variant may
  // not be: Run then computes the product in f32 and the epilogue as a pass of its own).
  bool Bundled(const std::string& kernel) const;
  // A grouped GEMM (kiln/ops/grouped_gemm.h) with this runner's kernels, the same way.
  absl::Status RunGrouped(const GroupedGemmSize& size, const GroupedGemmOptions& options,
                          const GroupedGemmOperands& operands, cu::CUstream stream = nullptr);

 private:
  LoadedKernels kernels_;
  std::string bundle_dir_;
  std::string tune_path_;
  std::mutex mu_;
  std::optional<GemmTuneCache> tuned_;  // read at the first Run
  ScratchBuffers scratch_;
  LaunchMemo memo_;  // Run's calls, repeated
};

}  // namespace kiln::rt
