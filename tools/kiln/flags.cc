// The kiln command's flags (`kiln CMD --help` lists a command's; `kiln --helpfull` all of them).
#include "tools/kiln/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, bundles, "",
          "read kernels from this bundle directory instead of compiling them");
ABSL_FLAG(std::string, dir, "build/bundles", "where `kiln bundle` writes");
ABSL_FLAG(std::string, shard, "",
          "`kiln bundle` with no NAME: I/N writes every Nth kernel from the Ith (0-based), so that "
          "N processes bundle the registry in parallel; drops no bundle");
ABSL_FLAG(bool, prune, false,
          "`kiln bundle`: only drop --dir's bundles of kernels no longer registered, in kiln's "
          "registered families (gemm/, attention/, ops/, ...: a bundle of a family kiln does "
          "not register is left), "
          "rewriting the variants bundled there by name, which it keeps");
// 0: not given (kiln run takes 4096, kiln emulate the kernel's tile).
ABSL_FLAG(int64_t, m, 0,
          "M for `kiln gemm` (needed, with --n and --k, or --sizes), `kiln run` (left out: 4096) "
          "and `kiln emulate` (left out: 2x2 CTA tiles)");
ABSL_FLAG(int64_t, n, 0,
          "N for `kiln gemm` and `kiln grouped-gemm` (needed), `kiln run` (left out: 4096) and "
          "`kiln emulate` (left out: 2x2 CTA tiles)");
ABSL_FLAG(int64_t, k, 0,
          "K for `kiln gemm` and `kiln grouped-gemm` (needed), `kiln run` (left out: 4096) and "
          "`kiln emulate` (left out: enough K steps to wrap the kernel's deepest ring twice)");
ABSL_FLAG(
    std::string, sizes, "4096,8192",
    "`kiln bench` sizes: comma-separated S (S^3) or MxNxK (`kiln gemm --emulate`: 264x300x224)");
// 0: not given (kiln run takes 32768x4096, kiln emulate 37x3001).
ABSL_FLAG(int64_t, rows, 0,
          "rows of a row op for `kiln run` (left out: 32768) and `kiln emulate` (left out: 37)");
ABSL_FLAG(int64_t, cols, 0,
          "cols of a row op for `kiln run` (left out: 4096) and `kiln emulate` (left out: 3001)");
ABSL_FLAG(std::string, shapes, "32768x4096,8192x8192,65536x1024",
          "`kiln bench` shapes of the row ops: comma-separated ROWSxCOLS");
ABSL_FLAG(bool, lines, false,
          "`kiln ptx`: with .file/.loc line tables naming each instruction's DSL line");
ABSL_FLAG(std::string, seeds, "1,2,3",
          "`kiln emulate`: the emulated threads' schedules, comma-separated (0: in index order)");
ABSL_FLAG(bool, emulate, false,
          "`kiln gemm`, `kiln attention`, `kiln grouped-gemm`: run the chosen kernel on the CPU "
          "emulator instead of a GPU");
ABSL_FLAG(std::string, layout, "row,col",
          "`kiln gemm`: the storage orders of A and B, e.g. col,row: A column-major (M "
          "contiguous), B row-major "
          "(N contiguous); C is column-major");
ABSL_FLAG(int, split, -1,
          "`kiln gemm` (8-bit inputs too, with or without --kernel), `kiln run`: the tile "
          "kernels' split instead of the rule's (or whole tiles): 1 whole tiles, "
          "S >= 2 split-K in S parts (8-bit inputs: 2 to 16), 0 stream-K");
ABSL_FLAG(std::string, ptx, "",
          "`kiln emulate`: run this PTX file (e.g. a hand-edited one) with the kernel's manifest");
ABSL_FLAG(int, watchdog, 0,
          "build every sm_90+ kernel in the GPU debug mode: each mbarrier wait gives up after this "
          "many ms and "
          "reports its DSL line (Kernel::Watchdog); 0: off");
ABSL_FLAG(std::string, dtype, "bf16",
          "the input type: `kiln gemm` bf16, f16, e4m3 or e5m2 (8-bit A and B of two types: "
          "e5m2xe4m3, e4m3xe5m2); `kiln attention` bf16 or f16; `kiln grouped-gemm` bf16 or e4m3");
ABSL_FLAG(std::string, scaling, "blockwise",
          "`kiln gemm --dtype e4m3`: how the 8-bit inputs are scaled: tensorwise, rowwise, "
          "blockwise (A per 1x128, B per 128x128), or mxfp8 (UE8M0 per 1x32 of A and of B; "
          "sm_100 only: with --sm100 --emulate)");
ABSL_FLAG(std::string, out_dtype, "",
          "`kiln gemm`: the output type, bf16, f16 or f32 (left out: --dtype)");
ABSL_FLAG(std::string, epilogue, "",
          "`kiln gemm`: fused epilogue terms, comma-separated: scale (alpha, beta, C_in), bias_row "
          "or bias_col, relu, gelu or silu, residual (swiglu and rope pair the columns of a "
          "row-major C, which kiln gemm's is not: kiln.gemm and rt::GemmRunner fuse them)");
ABSL_FLAG(
    std::string, tune_cache, "",
    "`kiln tune` writes (adds to) this file the fastest kernel per size; `kiln gemm` reads it");
ABSL_FLAG(int64_t, experts, 0,
          "`kiln grouped-gemm`: the groups (experts); left out, one for each count of --tokens");
ABSL_FLAG(std::string, tokens, "",
          "`kiln grouped-gemm`: each expert's tokens: one count for all, or one per expert "
          "(70,0,1,200)");
ABSL_FLAG(bool, masked, false,
          "`kiln grouped-gemm`: the masked layout (each expert a block of --capacity rows, its "
          "count on the device) instead of the contiguous one");
ABSL_FLAG(int64_t, capacity, 0,
          "`kiln grouped-gemm --masked`: rows per expert's block (left out: the largest count)");
ABSL_FLAG(int, iters, 30, "timed runs per measurement (the median is reported)");
ABSL_FLAG(int64_t, b, 1, "`kiln attention`: batch");
ABSL_FLAG(int64_t, h, 16, "`kiln attention`: query heads (2 with --emulate)");
ABSL_FLAG(int64_t, hkv, 0, "`kiln attention`: key/value heads, dividing --h (left out: --h)");
ABSL_FLAG(int64_t, s, 4096, "`kiln attention`: query length (200 with --emulate)");
ABSL_FLAG(int64_t, skv, 0, "`kiln attention`: key/value length (left out: --s)");
ABSL_FLAG(int64_t, d, 128, "`kiln attention`: head dimension, 64, 128 or 256");
ABSL_FLAG(bool, causal, false, "`kiln attention`: causal mask (bottom-right aligned)");
ABSL_FLAG(int64_t, paged, 0,
          "`kiln attention`: K and V through a paged cache of pages of this many tokens (a power "
          "of two from 16; decode: the query rows of a KV head at most 64), its pages shuffled");
ABSL_FLAG(std::string, varlen, "",
          "`kiln attention`: packed sequences (self-attention, no padding) of these lengths, "
          "e.g. 7,100,4095 (in place of --b, --s and --skv)");
ABSL_FLAG(int64_t, decode, 0,
          "`kiln attention`: a decode step of this many query rows a sequence (1; more: "
          "speculative) over --skv keys (left out: --s's value, as keys), in place of --s's "
          "query rows; refused unless the entry point plans its decode kernels");
ABSL_FLAG(int32_t, repeats, 10,
          "`kiln attention`: launches in each timed block, back to back between two events (1: "
          "single calls, events around each, as a model makes them)");
ABSL_FLAG(bool, bshd, false,
          "`kiln attention`: Q, K, V and O in the rows layout [B, S, H, D] (torch's) instead of "
          "[B, H, S, D], each position's row of heads padded by 64 elements of NaN");
ABSL_FLAG(bool, backward, false,
          "`kiln attention`: the backward pass (dQ, dK, dV from the forward's O and lse and a "
          "random dO) against fp64, run 10 times for the same bytes; timed alone");
ABSL_FLAG(bool, dq_atomics, false,
          "`kiln attention --backward`: dQ added in f32 by atomics from the dK/dV kernel, its last "
          "bits differing run to run (the default where it runs: sm_90a, D 64 or 128, dense), an "
          "error where it cannot run");
ABSL_FLAG(bool, deterministic, false,
          "`kiln attention --backward`: dQ from a kernel of its own, the same bytes run to run, "
          "instead of by atomics");
ABSL_FLAG(bool, sm100, false,
          "`kiln attention --backward --emulate`, `kiln gemm --dtype e4m3 --emulate`: the "
          "kernels the plan picks on sm_100a (attention/blackwell_dkdv, blackwell_dq; "
          "gemm/fp8_blockwise_sm100, or gemm/mxfp8_sm100 with --scaling mxfp8: on tcgen05), "
          "emulated");
ABSL_FLAG(double, scale, 0, "`kiln attention`: softmax scale (0: 1/sqrt(d))");
ABSL_FLAG(std::string, kernel, "",
          "`kiln attention`: run this variant instead of the entry point's choice (a tiling: "
          "attention/hopper.d64.wg3.bn128; or attention/blackwell.d128 with --emulate); `kiln "
          "gemm --dtype e4m3`: this tile kernel, whole tiles (gemm/bf16_sm90_n128); `kiln "
          "grouped-gemm`: this grouped kernel (gemm/grouped_sm90_n64)");
ABSL_FLAG(int32_t, steady_launches, 32,
          "GEMM timings at M <= 64: launches a timed block of the steady-state measure (back to "
          "back over "
          "copies of the weights) makes at least");
ABSL_FLAG(
    bool, flush_l2, true,
    "GEMM timings: evict L2 before every timed call (kiln, cuBLAS and the weights' copy alike), so "
    "each reads its inputs from DRAM and host launch work is not timed");
ABSL_FLAG(
    std::string, out, "",
    "`kiln bench` and `kiln gemm`: also write the results as TSV here (GEMM rows: name M N K ms "
    "TFLOPS cuBLAS-ms "
    "cuBLAS-TFLOPS error spot-error reference ok; 8-bit GEMM rows: name M N K ms TFLOPS scaling "
    "error bound ok; row-op rows: name rows cols ms GB/s copy-ms copy-GB/s ratio error ok)");
ABSL_FLAG(std::string, cache, "\x01",
          "`kiln compile`: the compile cache (left out: kiln::DefaultCacheDir(); \"\" for none). "
          "`kiln bundle`: lower through the compile cache there (left out: none)");
ABSL_FLAG(bool, line_info, true,
          "`kiln compile`: PTX with line tables, as kiln::Compile makes by default (false: the "
          "PTX `kiln bundle` writes)");
