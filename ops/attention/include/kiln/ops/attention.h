// The attention entry point of the host API: FlashAttention forward, O = softmax(scale * Q K^T) V
// per head, and the log-sum-exp of each row, with the attention/hopper kernel for the problem
// (attention/blackwell on sm_100, so far checked on the emulator only), loaded from a directory
// of bundles (the build writes build/bundles). No compiler is needed.
//
//   kiln::rt::AttentionRunner attention("build/bundles");
//   absl::Status s = attention.Run({.b = 2, .hq = 16, .hkv = 4, .s = 4096, .skv = 4096, .d = 128},
//                                  {.causal = true}, {.q = q, .k = k, .v = v, .o = o, .lse = lse});
//
// Layouts (contiguous, rows of D elements): Q and O [B, Hq, S, D], K and V [B, Hkv, Skv, D], lse
// [B, Hq, S] f32 (natural log). Grouped-query heads: query head h reads KV head h / (Hq / Hkv).
// Causal masks are bottom-right aligned: query i sees keys j <= i + Skv - S (FlashAttention's
// convention; top-left, torch's is_causal, is the same when S = Skv). A query that sees no key
// gets O = 0 and lse = -inf.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/ops/op_device.h"
#include "kiln/runtime/cuda_api.h"
#include "kiln/runtime/launch.h"

namespace kiln::rt {

struct AttentionGradOperands;  // kiln/ops/attention_backward.h

struct AttentionSize {
  int64_t b = 1, hq = 1, hkv = 1, s = 1, skv = 1, d = 128;
  // Sequences of their own lengths (`lens`, AttentionOperands::seq_lens: sequence b uses the
  // first seq_lens[b] <= Skv of its keys; a length past Skv is read as Skv), or a paged KV cache
  // (page > 0, seq_lens too: K and V are [pages, page, Hkv, D], vLLM's layout, and sequence b's
  // key j lies in page
  // block_table[b * max_pages + j / page], row j % page; Skv is max_pages * page). Decode where
  // the query rows of a KV head fit 64 (and S = 1 or no mask); else prefill, a CTA per query
  // tile. Causal masks are each sequence's own: query i sees keys j <= i + seq_lens[b] - S.
  bool lens = false;
  int64_t page = 0, pages = 0, max_pages = 0;
  // Packed sequences (varlen, self-attention): B sequences of their own lengths, `total` tokens in
  // all, Q and O [total, Hq, D], K and V [total, Hkv, D], sequence b in rows cu_seqlens[b] ..
  // cu_seqlens[b + 1] (AttentionOperands::cu_seqlens, i32 [B + 1]), lse [Hq, total]; S and Skv
  // are the longest sequence's length. Causal masks are each sequence's own.
  bool varlen = false;
  int64_t total = 0;
  // The rows layout (sm_90a, no decode forms): Q and O [B, S, Hq, D], K and V [B, Skv, Hkv, D]
  // (torch's [B, S, H, D]), each position's row of heads q_stride, kv_stride and o_stride
  // elements after the previous one: 0 for packed rows (H * D), more where Q, K and V are views of
  // one fused projection's output; a multiple of 8. lse stays [B, Hq, S].
  bool rows = false;
  int64_t q_stride = 0, kv_stride = 0, o_stride = 0;
  // The strides as the kernel takes them (0 resolved).
  int64_t QStride() const { return q_stride ? q_stride : hq * d; }
  int64_t KvStride() const { return kv_stride ? kv_stride : hkv * d; }
  int64_t OStride() const { return o_stride ? o_stride : hq * d; }
};

struct AttentionOptions {
  std::string dtype = "bf16";  // of Q, K, V and O: bf16 or f16
  bool causal = false;
  float scale = 0;  // of the scores; 0: 1 / sqrt(D)
  // The backward only (kiln/ops/attention_backward.h). Where it can (sm_90a, D 64 or 128, dense
  // tensors), the plan adds dQ in f32 by atomics from the dK/dV kernel: five GEMMs a step, not
  // seven, but its order of adds, and so dQ's last bits, differ run to run. `deterministic` asks
  // for dQ from a kernel of its own instead (the same bytes run to run, S and dP computed twice);
  // `dq_atomics` asks for the atomics, an error where they cannot run.
  bool dq_atomics = false;
  bool deterministic = false;
  // A bundled variant to run instead of the one the plan picks: the same family's name with the
  // problem's options and a tiling ("attention/hopper.d64.wg3.bn128"), or the other family's.
  std::string kernel;
};

struct AttentionOperands {
  cu::CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;  // 16-byte aligned (lse: 4)
  cu::CUdeviceptr seq_lens = 0, block_table = 0;        // i32 (AttentionSize::lens, page)
  cu::CUdeviceptr cu_seqlens = 0;                       // i32 (AttentionSize::varlen)
};

struct AttentionPlan {
  std::string kernel;  // attention/hopper.d128[.f16][.causal]; attention/blackwell.* on sm_100
  float scale = 0;     // as the kernel gets it
  // The problem as the kernel sees it. Decode (the query rows of a KV head's Hq / Hkv heads fit
  // one 64-row tile, and S = 1 or no mask): those rows packed as one head's, {B, Hkv, Hkv,
  // Hq / Hkv * S, Skv} (Q, O and lse are the same bytes viewed so), its keys split in `splits`
  // parts (attention/hopper's "split") and, past one part, merged by `combine`.
  AttentionSize size;
  int splits = 1;
  std::string combine;
  // A paged prefill long enough that copying the cache costs less than its small pages cost the
  // paged kernel (CopiesPages): `copy_pages` (attention/dense_from_pages.dD) first copies each
  // sequence's keys and values into dense K and V in scratch, and `kernel` is then a ".lens"
  // kernel over them; `size` is that problem ({page, pages, max_pages} 0, lens) and `paged` the
  // caller's.
  std::string copy_pages;
  AttentionSize paged;
};

// Whether the plan copies a paged cache's pages into dense K and V before a prefill over them:
// pages of at most MostCopiedPage(D) tokens, at least kLeastCopiedRows query rows a key row (the
// attention's FLOPs over 4 * B * Hkv * Skv * D: what the copy's bytes buy), and the copy within
// kMostCopiedBytes. An override naming a ".lens" kernel for a paged problem asks for it.
inline constexpr int64_t kLeastCopiedRows = 4096, kMostCopiedBytes = int64_t{1} << 30;
inline int64_t MostCopiedPage(int64_t d) { return d <= 128 ? 32 : 16; }
bool CopiesPages(const AttentionSize& size, const AttentionOptions& options);
// The bytes of the dense K (or V) that a plan's copy of the pages writes: B * Hkv * Skv * D * 2.
int64_t CopiedBytes(const AttentionSize& paged);
// attention/dense_from_pages's arguments: the caller's paged cache (operands' K, V, block_table and
// seq_lens) copied into `k` and `v`.
absl::StatusOr<std::vector<Arg>> CopyPagesArgs(const Manifest& manifest, const AttentionPlan& plan,
                                               const AttentionOperands& operands, cu::CUdeviceptr k,
                                               cu::CUdeviceptr v);

// The kernel for a call, or an error naming what is wrong with it (sizes, head counts, head
// dimension, type, scale, pointers, the device). Needs no GPU.
absl::StatusOr<AttentionPlan> PlanAttention(const AttentionSize& size,
                                            const AttentionOptions& options,
                                            const AttentionOperands& operands,
                                            int compute_capability);

// Split-KV on sm_90a merges its parts in the kernel (the last part of each tile to finish, no
// attention/combine launch) where its manifest has the "fold" parameter and the problem has at
// most kFoldedTiles query tiles (B * Hq * ceil(S / 64) of the planned size): the merged O and lse
// go to `o` and `lse`, the parts to the operands' O and lse.
inline constexpr int64_t kFoldedTiles = 1024;
struct FoldedOutputs {
  cu::CUdeviceptr o = 0, lse = 0;
};
bool FoldsSplits(const Manifest& manifest, const AttentionSize& planned);

// The launch arguments of an attention kernel for `manifest` (the emulator takes them too).
// `splits`: the P of a split kernel; `fold`: where a folding split kernel merges (none: it does
// not, and attention/combine must).
absl::StatusOr<std::vector<Arg>> AttentionArgs(const Manifest& manifest, const AttentionSize& size,
                                               float scale, const AttentionOperands& operands,
                                               int splits = 1, const FoldedOutputs* fold = nullptr);

// The query-tile height an attention kernel states (its "attention" attribute's block_m), or 0.
int64_t AttentionBlockM(const Manifest& manifest);

// attention/combine's arguments for a split plan: the parts (o_parts, lse_parts, written by the
// split kernel as its O and lse) merged into `o` and `lse`.
absl::StatusOr<std::vector<Arg>> CombineArgs(const Manifest& manifest, const AttentionPlan& plan,
                                             cu::CUdeviceptr o_parts, cu::CUdeviceptr lse_parts,
                                             cu::CUdeviceptr o, cu::CUdeviceptr lse);
// The bytes of a split plan's parts of O and of lse.
int64_t PartsOBytes(const AttentionPlan& plan);
int64_t PartsLseBytes(const AttentionPlan& plan);

// Plans the call for a chip of `compute_capability` and launches its kernels on `device` (scratch
// 0 and 1: a split plan's parts of O and lse; 3 and 4: the dense K and V a paged cache is copied
// into), in order.
absl::Status RunAttention(const AttentionSize& size, const AttentionOptions& options,
                          const AttentionOperands& operands, int compute_capability,
                          OpDevice& device);

// FLOPs of the forward pass as FlashAttention counts them: 4 * B * Hq * S * Skv * D, the share
// of score pairs a causal mask keeps.
double AttentionFlops(const AttentionSize& size, bool causal);

class AttentionRunner {
 public:
  explicit AttentionRunner(std::string bundle_dir) : kernels_(std::move(bundle_dir)) {}
  // Plans, loads the kernel (once per runner and stream) and launches it on `stream`; does not
  // synchronise. The persistent kernels (".persist", which the plan picks at D = 128 and, but for
  // long causal sequences, at D = 64) take their tiles from a counter each loaded kernel keeps: a
  // kernel per stream keeps calls on different streams apart, and calls on one stream are ordered.
  absl::Status Run(const AttentionSize& size, const AttentionOptions& options,
                   const AttentionOperands& operands, cu::CUstream stream = nullptr);
  // The backward pass (kiln/ops/attention_backward.h), launched on `stream` the same way.
  absl::Status Backward(const AttentionSize& size, const AttentionOptions& options,
                        const AttentionGradOperands& operands, cu::CUstream stream = nullptr);

 private:
  LoadedKernels kernels_;
  ScratchBuffers scratch_;  // split-KV's parts; the backward's row workspace
  LaunchMemo memo_;         // Run's and Backward's calls, repeated
};

}  // namespace kiln::rt
