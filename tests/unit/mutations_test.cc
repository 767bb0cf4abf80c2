// Planted bugs: single mutations of the real examples' PTX (as the compiler emitted it, with line
// tables), one per row, each run in the emulator under a few schedules until one reports it. A
// row passes when a report names its class (the `expect` text) and, where the bug is at a DSL
// statement, that statement's file. docs/MUTATIONS.md is this table in prose.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/harness.h"
#include "examples/registry.h"
#include "examples/row_ops.h"
#include "gtest/gtest.h"
#include "kiln/lowering.h"

namespace kiln::examples {
namespace {

struct Edit {
  std::string from, to;
  int nth = 0;  // 0: every occurrence; n: only the n-th
};

struct Mutation {
  std::string id, kernel, bug;
  std::vector<Edit> edits;
  std::string expect;             // the class, as the report words it
  rt::GemmSize size = {0, 0, 0};   // GEMMs: 0 = one tile, two k-tiles; row ops: rows x cols in m x n
  int split = 1;                    // GEMMs with a work table: RunOptions::split
};

void PrintTo(const Mutation& m, std::ostream* os) { *os << m.id; }

// Comments an instruction out (the rest of its line goes with it).
Edit Drop(const std::string& instr, int nth = 0) { return {instr, "// " + instr, nth}; }
// A try_wait that returns at once, as if the phase had completed.
Edit Skip(const std::string& try_wait) { return {try_wait, "setp.eq.u32 done, 1, 1;", 0}; }

const std::vector<Mutation>& Mutations() {
  static const auto* m = new std::vector<Mutation>{
      // hopper/k02: one warpgroup, TMA into one stage, mbarriers, wgmma.
      {"k02-arrivals-plus1", "hopper/k02", "arrival count one too high",
       {{"mov.b32 \t%r12, 128;", "mov.b32 \t%r12, 129;"}}, "arrivals missing"},
      {"k02-arrivals-minus1", "hopper/k02", "arrival count one too low",
       {{"mov.b32 \t%r12, 128;", "mov.b32 \t%r12, 127;"}}, "an arrival beyond the 127"},
      {"k02-tx-small", "hopper/k02", "expect_tx announces half the box",
       {{"mov.b32 \t%r37, 8192;", "mov.b32 \t%r37, 4096;"}}, "tx-count underflow"},
      {"k02-tx-large", "hopper/k02", "expect_tx announces 1.5 boxes",
       {{"mov.b32 \t%r37, 8192;", "mov.b32 \t%r37, 12288;"}}, "tx-count overflow"},
      {"k02-phase", "hopper/k02", "wait on the wrong phase parity",
       {{"bfe.u32 \t%r40, %r86, 6, 1;", "bfe.u32 \t%r40, %r86, 6, 1; xor.b32 %r40, %r40, 1;"}}, "a wrong phase"},
      {"k02-no-wait", "hopper/k02", "wgmma without waiting for the TMA loads",
       {Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r38], %r40;"),
        Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r39], %r40;")},
       "which a TMA load still in flight will write"},
      {"k02-no-retry", "hopper/k02", "try_wait without its loop (the ISA lets it return false unfinished)",
       {Drop("@!done bra.uni kiln_wait_0;"), Drop("@!done bra.uni kiln_wait_1;")},
       "returned false before its phase completed"},
      {"k02-no-init", "hopper/k02", "mbarrier never initialised",
       {Drop("mbarrier.init.shared.b64 \t[kiln_smem+16384], %r12;")}, "was never initialised"},
      {"k02-wrong-barrier", "hopper/k02", "arrival on the other barrier",
       {{"mbarrier.arrive.shared.b64 \t%rd15, [kiln_smem+16392];", "mbarrier.arrive.shared.b64 \t%rd15, [kiln_smem+16384];"}},
       "arrivals missing"},
      {"k02-acc-early", "hopper/k02", "accumulators read without wgmma.wait_group (one k-tile)",
       {Drop("wgmma.wait_group.sync.aligned \t0;")}, "an accumulator read before its wgmma.wait_group", {64, 64, 64}},
      {"k02-wait-shallow", "hopper/k02", "wgmma.wait_group 1 where 0 is needed (one k-tile)",
       {{"wgmma.wait_group.sync.aligned \t0;", "wgmma.wait_group.sync.aligned 1;"}},
       "an accumulator read before its wgmma.wait_group", {64, 64, 64}},
      {"k02-reuse-early", "hopper/k02", "next k-tile loaded while the wgmma still reads the stage",
       {Drop("wgmma.wait_group.sync.aligned \t0;")}, "released to the producer too early"},
      {"k02-swizzle", "hopper/k02", "descriptor says 64B swizzle, the tensor map 128B",
       {{"4611686293305360384", "9223372311732748288"}}, "does not match the tensor map's"},
      {"k02-oob", "hopper/k02", "a store 1 MiB past the output",
       {{"st.global.b16 \t[%rd28], %rs33;", "st.global.b16 \t[%rd28+1048576], %rs33;"}}, "out-of-bounds global access"},
      // hopper/k04: producer warp, consumer warpgroup, a ring of full/empty barriers.
      {"k04-no-release", "hopper/k04", "consumer never releases its stage",
       {Drop("mbarrier.arrive.shared.b64 \t%rd26, [%r6];")}, "arrivals missing", {128, 128, 1024}},
      {"k04-no-full-wait", "hopper/k04", "consumer skips the full barrier",
       {Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r26], %r135;")},
       "which a TMA load still in flight will write", {128, 128, 1024}},
      {"k04-no-empty-wait", "hopper/k04", "producer skips the empty barrier",
       {Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r16], %r17;")}, "an arrival beyond",
       {128, 128, 1024}},
      // hopper/k11, k13: clusters, multicast, setmaxnreg, TMA-store epilogues.
      {"k13-early-release", "hopper/k13", "wgmma.wait_group 2 where 1 keeps the released stage safe",
       {{"wgmma.wait_group.sync.aligned \t1;", "wgmma.wait_group.sync.aligned 2;"}},
       "released to the producer too early (released by the arrival at PTX line",
       {256, 256, 1024}},
      {"k128-early-release", "gemm/bf16_k128n32_sm90", "wgmma.wait_group 2 where 1 keeps the released stage safe",
       {{"wgmma.wait_group.sync.aligned \t1;", "wgmma.wait_group.sync.aligned 2;"}}, "released to the producer too early",
       {64, 32, 2048}},
      {"k13-no-proxy-fence", "hopper/k13", "TMA store of generic writes without fence.proxy.async",
       {Drop("fence.proxy.async.shared::cta;")}, "with no fence.proxy.async after it"},
      {"tma16-no-proxy-fence", "gemm/bf16_tma16_sm90", "a stage read with ld.shared released without fence.proxy.async",
       {Drop("fence.proxy.async.shared::cta;")}, "with no fence.proxy.async after the read", {16, 32, 2048}},
      {"k13-no-store-wait", "hopper/k13", "staging buffer rewritten before the TMA store read it",
       {Drop("cp.async.bulk.wait_group.read \t0;")}, "which a TMA store still in flight reads"},
      {"k13-no-final-store-wait", "hopper/k13", "the CTA exits before its last TMA store has read its shared box",
       {Drop("cp.async.bulk.wait_group \t0;")}, "exits while its TMA store"},
      {"k11-cluster-arrive-twice", "hopper/k11", "barrier.cluster.arrive twice in one phase (a wait missing between)",
       {{"barrier.cluster.arrive.aligned;", "barrier.cluster.arrive.aligned;\n\tbarrier.cluster.arrive.aligned;"}},
       "a second barrier.cluster.arrive"},
      {"k11-early-exit", "hopper/k11", "a CTA exits without the final cluster barrier",
       {Drop("barrier.cluster.arrive.aligned;", 2), Drop("barrier.cluster.wait.aligned;", 2)},
       "has exited: its shared memory is gone"},
      {"k02-no-wgmma-fence", "hopper/k02", "no wgmma.fence before the warpgroup's first wgmma",
       {Drop("wgmma.fence.sync.aligned;")}, "no wgmma.fence before it"},
      {"k02-acc-write-after-fence", "hopper/k02",
       "an accumulator register written after the wgmma.fence, before the wgmma",
       {{"wgmma.fence.sync.aligned;", "wgmma.fence.sync.aligned;\n\tmov.b32 \t%r87, 0;"}},
       "with no wgmma.fence since"},
      {"k02-box-over-mbarrier", "hopper/k02", "B's TMA box placed 1 KB late, over the stage's mbarriers",
       {{"[kiln_smem+8192], [%rd2", "[kiln_smem+9216], [%rd2"}}, "which hold the live mbarrier"},
      {"k02-store-over-mbarrier", "hopper/k02", "a plain store over a live mbarrier (no mbarrier.inval)",
       {{"$L__BB0_8:", "$L__BB0_8:\n\t@!%p1 st.shared.b64 [kiln_smem+16384], 0;"}},
       "which hold the live mbarrier"},
      {"k04-load-past-last-stage", "hopper/k04", "the producer loads one k-tile more than the consumers wait for",
       {{"setp.lt.s32 \t%p5, %r130, %r8;", "setp.le.s32 \t%p5, %r130, %r8;"}},
       "which no thread waited for"},
      {"k04-arrive-without-tx", "hopper/k04", "the producer arrives without expect_tx (a phase completes before its bytes)",
       {{"mbarrier.arrive.expect_tx.shared.b64 %rd6, [%r20+163840], %r21;", "mbarrier.arrive.shared.b64 %rd6, [%r20+163840];"}},
       "is missing them"},
      {"k11-setmaxnreg-one-thread", "hopper/k11", "setmaxnreg run by one thread of its warpgroup",
       {{"setmaxnreg.dec.sync.aligned.u32 \t24;", "@!%p2 setmaxnreg.dec.sync.aligned.u32 \t24;"}},
       "setmaxnreg is .sync.aligned"},
      {"k11-registers", "hopper/k11", "setmaxnreg.inc past the register file",
       {{"setmaxnreg.inc.sync.aligned.u32 \t240;", "setmaxnreg.inc.sync.aligned.u32 256;"}},
       "wait at setmaxnreg.inc for registers"},
      // Ampere and cuda_hgemm: cp.async groups.
      {"v5-no-cp-wait", "ampere/v5", "ldmatrix without cp.async.wait_all", {Drop("cp.async.wait_all;")},
       "which a cp.async still in flight will write"},
      {"v5-src-size-over", "ampere/v5", "a cp.async's src-size larger than its cp-size (an unclamped ragged edge)",
       {{"cp.async.cg.shared.global [%r9], [%rd5], 16;", "cp.async.cg.shared.global [%r9], [%rd5], 16, 20;"}}, "is larger than cp-size"},
      {"v5-two-copies-one-stage", "ampere/v5", "two cp.async in flight into the same shared bytes",
       {{"cp.async.cg.shared.global [%r11], [%rd7], 16;", "cp.async.cg.shared.global [%r9], [%rd7], 16;"}}, "also writes"},
      {"v5-arrive-then-sync", "ampere/v5", "a stray bar.arrive before a bar.sync on the same barrier id",
       {{"bar.sync \t0;", "bar.arrive 0, 128;\n\tbar.sync \t0;"}}, "a second time before it completed"},
      {"entry-epilogue-ids-meet", "gemm/bf16_sm90", "the second consumer's epilogue barriers on the first's id",
       {{"bar.sync \t3, 128;", "bar.sync \t2, 128;"}}, "two uses of one barrier id meet", {256, 256, 128}},
      {"v5-no-barrier", "ampere/v5", "no bar.sync between the cp.async wait and the reads",
       {Drop("bar.sync \t0;", 1)}, "the bytes a cp.async lands are its own thread's"},
      {"stage3-shallow", "hgemm/mma_async_stage3", "cp.async.wait_group 2 where 1 is needed",
       {{"cp.async.wait_group \t1;", "cp.async.wait_group 2;"}}, "which a cp.async still in flight will write"},
      {"stage3-no-commit", "hgemm/mma_async_stage3", "cp.async copies never committed (wait_group covers none)",
       {Drop("cp.async.commit_group;")}, "has neither committed it (cp.async.commit_group)"},
      // blackwell/v4: tcgen05, tensor memory, commits.
      {"v4-dealloc-early", "blackwell/v4", "no barrier before tcgen05.dealloc (TMEM freed while warps still read it)",
       {Drop("bar.sync \t0;", 3)}, "freed by the tcgen05.dealloc"},
      {"v4-leak", "blackwell/v4", "tensor memory never freed", {Drop("tcgen05.dealloc.cta_group::1.sync.aligned.b32")},
       "of tensor memory still allocated"},
      {"v4-small-alloc", "blackwell/v4", "64 columns allocated for a 128-column accumulator",
       {{"mov.b32 \t%r13, 128;", "mov.b32 \t%r13, 64;"}}, "outside every allocation"},
      {"v4-no-commit", "blackwell/v4", "the accumulator's tcgen05.commit missing",
       {Drop("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 \t[kiln_smem+229488];")},
       "arrivals missing"},
      {"v4-no-acc-wait", "blackwell/v4", "epilogue reads TMEM before the MMAs' commit",
       {Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r43], %r44;")}, "still writes: the wait for its commit"},
      {"v4-no-full-wait", "blackwell/v4", "MMA issued without waiting for its stage (seen where the slot comes back "
       "to the producer before it filled it)",
       {Skip("mbarrier.try_wait.parity.shared::cta.b64 done, [%r17], %r299;")}, "a wrong phase"},
      {"v4-lanes", "blackwell/v4", "a warp reads another warp's TMEM lanes",
       {{"tcgen05.ld.sync.aligned.32x32b.x8.b32", "add.s32 %r53, %r53, 2097152; tcgen05.ld.sync.aligned.32x32b.x8.b32", 1}},
       "may access TMEM lanes"},
      // An MMA reads its stage until it completes: a stage released by an arrive comes back to
      // the producer with the MMAs still reading it (K of 16 stages wraps the ring twice).
      {"v4-release-by-arrive", "blackwell/v4", "the stage released by an mbarrier arrive, not by a tcgen05.commit",
       {{"tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 \t[%r19+229432];",
         "mbarrier.arrive.shared.b64 %rd16, [%r19+229432];"}},
       "landed after the MMA was issued and before it completed", {128, 256, 1024}},
      // Tensor memory is undefined after its alloc: a first MMA that accumulates onto it.
      {"v4-accumulate-first", "blackwell/v4", "the tile's first MMA accumulates (enable-input-d set)",
       {{"setp.ne.b32 \t%p8, %r297, 0;", "setp.eq.b32 %p8, %r297, %r297;"}},
       "accumulated onto it (enable-input-d set"},
      {"v4-no-after-fence-mma", "blackwell/v4",
       "the MMA thread's tcgen05.fence::after_thread_sync after its stage wait missing (MMAs over TMA-loaded shared memory)",
       {Drop("tcgen05.fence::after_thread_sync;", 1)}, "landed, but the wait at PTX line"},
      // blackwell/persist_pipelined, persistent: at 256x512x128 (four 128x256 tiles) the
      // emulator's grid is two CTAs of two tiles each, so the accumulator is reused.
      {"persist-no-tile-barrier", "blackwell/persist_pipelined",
       "the next tile's MMAs not held until the epilogue has read the accumulator",
       {Drop("bar.sync \t1, 128;")}, "still writes: the wait for its commit", {256, 512, 128}},
      {"persist-no-before-fence", "blackwell/persist_pipelined",
       "the epilogue frees the accumulator without tcgen05.fence::before_thread_sync",
       {Drop("tcgen05.fence::before_thread_sync;")}, "has run no tcgen05.fence::before_thread_sync",
       {256, 512, 128}},
      {"persist-no-after-fence-mma", "blackwell/persist_pipelined",
       "the MMA thread's tcgen05.fence::after_thread_sync after its stage wait missing",
       {Drop("tcgen05.fence::after_thread_sync;", 2)}, "has no tcgen05.fence::after_thread_sync after it",
       {256, 512, 128}},
      {"persist-no-after-fence-ld", "blackwell/persist_pipelined",
       "the epilogue's tcgen05.fence::after_thread_sync after the tile's wait missing",
       {Drop("tcgen05.fence::after_thread_sync;", 1)}, "has no tcgen05.fence::after_thread_sync after it",
       {256, 512, 128}},
      // hopper/k06, 128 CTAs built in: at 4096x2048 each takes two tiles, and the emulator runs
      // two of them (EmulatedClusters). At 2048x2048 (one tile a CTA) this mutant passes.
      {"k06-cursor-per-tile", "hopper/k06",
       "the consumers' ring cursor restarts at stage 0, phase 0 every tile (right only for each CTA's first tile)",
       {{"mov.b32 \t%r224, 0;", "mov.b32 \t%r224, 0; mov.b32 %r354, 0; mov.b32 %r353, 0;"}},
       "which a TMA load still in flight will write", {4096, 2048, 448}},
      // Wrong results with no protocol mistake: the report names the first wrong element, the
      // earliest tile that differs, and the lines that wrote them.
      // Shared addresses carry a cluster CTA's rank above bit 24, as the hardware's do: a
      // descriptor's start field without the PTX ISA's mask takes it into LBO, which MN-major
      // operands use (caught on an H200 before the emulator modelled the rank).
      {"mn-descriptor-unmasked", "gemm/bf16_sm90.bf16-bf16.a_mn.b_mn",
       "the descriptors' start fields without the ISA's 0x3FFFF mask (cluster CTA 1's rank in LBO)",
       {{", 16320;", ", -1;"}}, "had not waited for that phase", {512, 512, 128}},
      // Each CTA's first tile accumulates onto tensor memory nothing wrote since its alloc.
      {"persist-accumulate-first", "blackwell/persist_pipelined",
       "every tile's first MMA accumulates (onto the last tile's sum, or, in each CTA's first tile, "
       "onto undefined tensor memory)",
       {{"setp.ne.b32 \t%p13, %r547, 0;", "setp.ne.b32 \t%p13, 1, 0;"}}, "accumulated onto it (enable-input-d set",
       {256, 512, 128}},
      {"k02-swapped-columns", "hopper/k02", "two accumulator columns stored to each other's place",
       {{"st.global.b16 \t[%rd28], %rs33;", "st.global.b16 \t[%rd28], %rs32;"},
        {"st.global.b16 \t[%rd30], %rs32;", "st.global.b16 \t[%rd30], %rs33;"}},
       "the first wrong element"},
      {"k02-scale-d", "hopper/k02", "a k-tile's first wgmma overwrites the accumulator (scale-d 0)",
       {{"setp.ne.b32 p, 1, 0;", "setp.ne.b32 p, 0, 0;", 1}}, "the first wrong element"},
      {"v5-commit-mask", "blackwell/v5", "the pair's MMA frees a stage only in the even CTA",
       {{"tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 \t[%r40+229432], %rs1;",
         "and.b16 %rs1, %rs1, 1; tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
         "\t[%r40+229432], %rs1;"}},
       "arrivals missing", {256, 256, 1024}},
      // Uninitialised values: shared bytes nothing wrote reach the output.
      {"v5-short-load", "ampere/v5", "one 16-byte cp.async of the A tile missing",
       {Drop("cp.async.cg.shared.global [%r9], [%rd5], 16;")}, "an uninitialised value reaches the output"},
      // The entry point's kernels, launched while the kernel before them finishes: each role waits
      // for it before touching global memory.
      {"entry-producer-no-grid-wait", "gemm/bf16_sm90_m64n32", "the producer's griddepcontrol.wait missing",
       {Drop("griddepcontrol.wait;", 1)}, "touches global memory before this thread's griddepcontrol.wait",
       {64, 64, 128}},
      {"entry-consumer-no-grid-wait", "gemm/bf16_sm90_m64n32", "the consumers' griddepcontrol.wait missing",
       {Drop("griddepcontrol.wait;", 2)}, "touches global memory before this thread's griddepcontrol.wait",
       {64, 64, 128}},
      {"staged-no-store-wait", "gemm/bf16_sm90_n80.bf16-bf16.scale.bias_col.gelu.residual",
       "C_in staged into the C buffer before the last tile's TMA store read it",
       {Drop("cp.async.bulk.wait_group.read \t0;", 3)}, "a TMA load lands on shared byte", {1152, 1200, 64}},
      {"k13-no-stmatrix", "hopper/k13", "one stmatrix of the epilogue's staging tile missing",
       {Drop("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r22], {%r33, %r34, %r35, %r36};")},
       "an uninitialised value reaches the output"},
      {"softmax-no-partial", "ops/softmax", "a warp's partial maximum never stored for the group reduction",
       {Drop("st.shared.b32 \t[%r9], %r45;")}, "an uninitialised value reaches the output", {5, 2000, 0}},
      // ops/softmax: group reductions over named barriers.
      {"softmax-count", "ops/softmax", "a group barrier with 96 threads where the group has 64",
       {{"bar.sync \t%r8, 64;", "bar.sync \t%r8, 96;", 2}}, "of 96 arrivals of its thread count", {5, 2000, 0}},
      {"softmax-no-group-barrier", "ops/softmax",
       "the group barrier between the warps' partial sums stored and read left out (a data race)",
       {Drop("bar.sync \t%r8, 64;", 3)}, "a data race on shared byte", {5, 2000, 0}},
      // Split-K's parts counted in by an atomic, the last one summing them (ReducePartials): the
      // protocol between CTAs, which the emulator runs one cluster after another.
      {"splitk-no-release-fence", "gemm/bf16_sm90_m64",
       "split-K: a part counted in without the gpu-scope fence after its partial's stores",
       {Drop("membar.gl;", 1)}, "a race on global memory between clusters", {256, 256, 1024}, 3},
      {"splitk-no-acquire-fence", "gemm/bf16_sm90_m64",
       "split-K: the last part reads the partials without the gpu-scope fence after its count",
       {Drop("membar.gl;", 2)}, "a race on global memory between clusters", {256, 256, 1024}, 3},
      {"splitk-atom-cta", "gemm/bf16_sm90_m64", "split-K: the count's atomic at CTA scope",
       {{"atom.global.add.u32", "atom.relaxed.cta.global.add.u32"}},
       "a race on global memory between clusters", {256, 256, 1024}, 3},
      {"splitk-every-part-sums", "gemm/bf16_sm90_m64",
       "split-K: every part, not the last, sums the partials and stores C",
       {{"setp.eq.b32 \t%p73, %r233, %r72;", "setp.eq.b32 \t%p73, %r72, %r72;"}},
       "a race on global memory between clusters", {256, 256, 1024}, 3},
      {"softmax-no-exp", "ops/softmax", "exp2 left out of the probabilities (a wrong result, no protocol mistake)",
       {{"ex2.approx.ftz.f32", "mov.b32"}}, "the first wrong element", {5, 2000, 0}},
  };
  return *m;
}

rt::Bundle Apply(const Mutation& mu, std::string* error) {
  absl::StatusOr<KernelDef> def = Find(mu.kernel)->build();
  absl::StatusOr<std::string> ptx = def.ok() ? EmitPtx(*def, {.line_info = true}) : def.status();
  if (!ptx.ok()) {
    *error = std::string(ptx.status().message());
    return {};
  }
  rt::Bundle b{def->manifest(), *ptx};
  for (const Edit& e : mu.edits) {
    int seen = 0, done = 0;
    for (size_t at = b.ptx.find(e.from); at != std::string::npos; at = b.ptx.find(e.from, at + 1)) {
      if (e.nth && ++seen != e.nth) continue;
      b.ptx.replace(at, e.from.size(), e.to);
      at += e.to.size() - 1;
      ++done;
    }
    if (!done) *error = absl::StrCat("the text to mutate is not in the PTX: '", e.from, "'");
  }
  return b;
}

class Planted : public ::testing::TestWithParam<Mutation> {};

TEST_P(Planted, IsCaughtWithItsClass) {
  const Mutation& mu = GetParam();
  std::string error;
  const rt::Bundle b = Apply(mu, &error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<std::string> reports;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    absl::Status s;
    if (IsRowOp(mu.kernel)) {
      RowOpOptions opt;
      opt.rows = mu.size.m, opt.cols = mu.size.n, opt.time = false;
      absl::StatusOr<RowOpResult> r = EmulateRowOp(b, opt, seed);
      s = r.ok() ? (r->passed ? absl::OkStatus() : absl::InternalError(r->failure)) : r.status();
    } else {
      RunOptions opt;
      opt.size = mu.size;
      opt.split = mu.split;
      if (!opt.size.m) {
        const GemmSpec g = *GemmOf(b.manifest);
        opt.size = {g.tile_m, g.tile_n, 2 * g.tile_k};
      }
      absl::StatusOr<GemmResult> r = EmulateGemm(b, opt, seed);
      s = r.ok() ? (r->passed ? absl::OkStatus() : absl::InternalError(r->failure)) : r.status();
    }
    if (!s.ok() && s.message().find(mu.expect) != std::string::npos) {
      // A row of docs/MUTATIONS.md: the class found, the schedule, the first DSL line named.
      const std::string full(s.message());
      const std::string m = full.substr(0, full.find(" (launched at "));  // the report, not its caller
      const size_t at = m.find("examples/");
      const size_t end = at == std::string::npos ? at : m.find_first_not_of("0123456789", m.find(':', at) + 1);
      std::cout << "| " << mu.id << " | " << mu.kernel << " | " << mu.bug << " | " << mu.expect << " | seed " << seed
                << " | " << (at == std::string::npos ? "-" : m.substr(at, end - at)) << " |\n";
      if (getenv("KILN_PRINT_REPORTS")) std::cout << "  " << mu.id << ": " << m << "\n";
      if (mu.expect == "the first wrong element") {  // the place the report names, in full
        EXPECT_NE(m.find("written by block"), std::string::npos) << m;
        if (!IsRowOp(mu.kernel))
          EXPECT_NE(m.find("the wrong element written first"), std::string::npos) << m;
        std::cout << "  " << mu.id << ": " << m << "\n";
      }
      return;
    }
    reports.push_back(absl::StrCat("seed ", seed, ": ", s.ok() ? "passed" : s.message()));
  }
  ADD_FAILURE() << mu.id << " (" << mu.bug << "): no schedule reported '" << mu.expect << "':\n"
                << absl::StrJoin(reports, "\n");
}

INSTANTIATE_TEST_SUITE_P(Examples, Planted, ::testing::ValuesIn(Mutations()),
                         [](const auto& info) {
                           std::string n = info.param.id;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln::examples
