// ops/stream_read: reads n 16-byte words and nothing else (their XOR decides whether one word is
// written, which never happens for real data, so the loads cannot be dropped). The GEMM harness
// times it on the weights of an M <= 64 GEMM in the same run as the device copy, so that a GEMM's
// weight read can be put against a bare read of the same bytes, fixed costs included, as well as
// against the copy (which moves twice the bytes over one launch).
//
// Its shape is the one that read 32-224 MB fastest among those tried (at 448 MB a ring of TMA
// bulk copies was faster; docs/perf/2026-11-26-what-a-weight-read-can-reach.md): one shot,
// each block of 256 threads reading 16 KB, 4 loads a thread all in flight before any is used,
// then exiting; the hardware keeps 8 such blocks on every SM. Not a ceiling: the skinny GEMM
// kernel reads some weights faster. Any n < 2^31 (the words past n are not touched).
#include "examples/registry.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256, kLoads = 4;
constexpr uint32_t kNever = 0x9e3779b9u;  // the XOR that would make it write

absl::StatusOr<KernelDef> BuildStreamRead() {
  Kernel k("ops/stream_read", sm80(), {kThreads});
  Value src = k.PtrParam("src", i32), out = k.PtrParam("out", i32),
        n = k.I32Param("n");  // n: 16-byte words
  k.Grid("n/1024");           // kThreads * kLoads words a block
  Value first = k.BlockIdx() * (kThreads * kLoads) + k.ThreadIdx();
  std::vector<Value> words;
  for (int u = 0; u < kLoads; ++u) {
    Value i = first + u * kThreads;
    words.push_back(LoadGlobal(src + i.To(i64) * 4, 4,
                               {.cache = CacheHint::kStreaming, .mask = i < n, .fill = 0}));
  }
  std::vector<Value> lanes;
  for (const Value& w : words)
    for (int e = 0; e < 4; ++e) lanes.push_back(w.Lane(e));
  Value x = lanes[0];
  for (size_t e = 1; e < lanes.size(); ++e) x = x ^ lanes[e];
  k.If(x == kNever, [&] { k.Store(out, x); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE(
    "ops/stream_read",
    "reads n 16-byte words and nothing else: a bare read, the floor of a memory-bound kernel",
    BuildStreamRead);
}  // namespace kiln::examples
