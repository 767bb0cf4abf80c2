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
// Rows outside every group are not written. Sizes out of order or out of range are clamped into
// [0, rows] (a group never starts before the one before it ends); they never read or write out of
// bounds.
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
// where they hold few (decode), whose time is the weights' read.
struct GroupedTile {
  const char* kernel;
  int cta_m, cta_n, stages, cluster;
  GroupedLayout layout;
};
inline constexpr GroupedTile kGroupedTiles[] = {
    {"gemm/grouped_sm90", 128, 256, 4, 2, GroupedLayout::kContiguous},
    {"gemm/grouped_sm90_n64", 128, 64, 8, 1, GroupedLayout::kContiguous},
    {"gemm/grouped_masked_sm90", 128, 256, 4, 2, GroupedLayout::kMasked},
    {"gemm/grouped_masked_sm90_n64", 128, 64, 8, 1, GroupedLayout::kMasked},
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
};
struct GroupedGemmOptions {
  GroupedLayout layout = GroupedLayout::kContiguous;
  std::string kernel;  // a kernel of kGroupedTiles by name; empty: the rule's
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
