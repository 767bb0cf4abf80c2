// Grouped GEMMs of the host API (Mixture-of-Experts layers): out[t] = x[t] W_e^T for each token t
// of expert e, every expert's tokens in one launch, with the group sizes in device memory (a
// router's output), so that the launch needs no host sync and a CUDA graph can hold it.
//
//   x    [rows, K] row-major (bf16): the tokens, expert by expert;
//   w    [groups, N, K] row-major (bf16): expert e's weights W_e, N x K (a linear layer's);
//   out  [rows, N] row-major (bf16);
//   sizes, int32 on the device, either
//     contiguous: group_ends[e], the end of expert e's tokens (cumulative, as torch._grouped_mm's
//                 offs): expert e has rows [group_ends[e-1], group_ends[e]) (0 before the first);
//     masked:     group_counts[e], the tokens of expert e, in rows [e * capacity, e * capacity +
//                 count) with capacity = rows / groups (decode's fixed blocks).
// Rows outside every group are not written. Sizes out of range are clamped into [0, rows] (a
// negative count is 0) and a contiguous group whose end lies before the end of the one before it
// is empty; sizes out of order (ends that decrease, then rise past an earlier end) make groups
// that overlap, whose rows are written in no set order. No size reads or writes out of bounds.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/ops/op_device.h"

namespace kiln::rt {

enum class GroupedLayout { kContiguous, kMasked };
inline const char* GroupedLayoutName(GroupedLayout layout) {
  return layout == GroupedLayout::kMasked ? "masked" : "contiguous";
}

// The grouped tile kernels (ops/gemm/kernels/grouped_kernels.cc): the entry point's tile kernel
// walking groups. One CTA tile each; the wide one where groups hold many tokens, the narrow one
// where they hold few (decode), whose time is the weights' read. The 8-bit ones (e4m3 in, bf16
// out) scale DeepGEMM's way: the weights per 128 x 128, the tokens per 1 x 128, promoted into f32
// every 128 of K; their tiles are at most 128 wide (the partial accumulator's registers).
struct GroupedTile {
  const char* kernel;
  int cta_m, cta_n, stages, cluster;
  GroupedLayout layout;
  bool fp8 = false;
};
inline constexpr GroupedTile kGroupedTiles[] = {
    {"gemm/grouped_sm90", 128, 256, 4, 2, GroupedLayout::kContiguous},
    {"gemm/grouped_sm90_n64", 128, 64, 8, 1, GroupedLayout::kContiguous},
    {"gemm/grouped_masked_sm90", 128, 256, 4, 2, GroupedLayout::kMasked},
    {"gemm/grouped_masked_sm90_n64", 128, 64, 8, 1, GroupedLayout::kMasked},
    {"gemm/grouped_fp8_sm90", 128, 128, 6, 2, GroupedLayout::kContiguous, true},
    {"gemm/grouped_fp8_sm90_n64", 128, 64, 8, 1, GroupedLayout::kContiguous, true},
    {"gemm/grouped_fp8_masked_sm90", 128, 128, 6, 2, GroupedLayout::kMasked, true},
    {"gemm/grouped_fp8_masked_sm90_n64", 128, 64, 8, 1, GroupedLayout::kMasked, true},
};
// The most groups a launch takes (each CTA counts every group's tiles in shared memory).
inline constexpr int kMaxGroupedGroups = 1024;

struct GroupedGemmSize {
  int64_t rows = 0;  // x's and out's rows
  int64_t n = 0, k = 0;
  int groups = 0;
};
struct GroupedGemmOperands {
  cu::CUdeviceptr x = 0, w = 0, out = 0;
  cu::CUdeviceptr sizes = 0;  // group_ends (contiguous) or group_counts (masked), int32
  // e4m3 x and w (GroupedGemmOptions::in_type): their f32 scales, out = (x * scale_x) (w *
  // scale_w)^T. scale_x per 1 x 128 of each row, M-contiguous: row r's k-block kb at
  // scale_x[kb * rows + r] (kiln.quantize_e4m3's layout); scale_w per 128 x 128 of each expert's
  // weights, row-major: expert e's block (nb, kb) at scale_w[(e * N / 128 + nb) * ceil(K / 128) +
  // kb].
  cu::CUdeviceptr scale_x = 0, scale_w = 0;
};
struct GroupedGemmOptions {
  GroupedLayout layout = GroupedLayout::kContiguous;
  std::string in_type = "bf16";  // or "e4m3" (out bf16; N a multiple of 128, K of 16)
  std::string kernel;            // a kernel of kGroupedTiles by name; empty: the rule's
};

// The kernel the rule picks: the narrow tile where the groups average at most 64 rows each.
// Errors name what is wrong (sizes, layout, a kernel of the other layout).
absl::StatusOr<std::string> ChooseGroupedKernel(const GroupedGemmSize& size,
                                                const GroupedGemmOptions& options);

// Checks and launches on `device` (sm_90 only: `cc` is the device's compute capability, 90).
// rows == 0 launches nothing.
absl::Status RunGroupedGemm(const GroupedGemmSize& size, const GroupedGemmOptions& options,
                            const GroupedGemmOperands& operands, int cc, OpDevice& device);

}  // namespace kiln::rt
