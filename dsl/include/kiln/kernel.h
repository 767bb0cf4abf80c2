// kiln's kernel builder: a C++ program that describes one GPU kernel. Every op records the
// caller's source line; mistakes are collected and returned by Kernel::Build() as an
// absl::Status naming that line. This header includes no MLIR header: the builder's state lives
// behind a pointer (dsl/kernel_state.h).
//
// The public API by concern, each header beside the dsl/*.cc that builds it:
//   kiln/value.h       types, values, arithmetic           dsl/arith.cc
//   kiln/kernel.h      parameters, launch rules, control   dsl/kernel.cc (and as its sections say)
//   kiln/memory.h      registers, tensors, shared tiles    dsl/memory.cc
//   kiln/memory_ops.h  global loads/stores, atomics        dsl/memory_ops.cc
//   kiln/math.h        special functions, conversions      dsl/math.cc
//   kiln/warp.h        shuffles and reductions             dsl/warp.cc
//   kiln/rows.h        row ops over accumulator tiles      dsl/rows.cc
//   kiln/hopper.h      TMA, mbarriers, wgmma types         dsl/async.cc, dsl/wgmma.cc
//   kiln/tcgen05.h     tensor memory                       dsl/tcgen05.cc, kiln/tcgen05_desc.h
//   kiln/pipeline.h    rings of stages (Pipeline)          dsl/pipeline.cc
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/hopper.h"
#include "kiln/memory.h"
#include "kiln/memory_ops.h"
#include "kiln/target.h"
#include "kiln/tcgen05.h"
#include "kiln/value.h"

namespace kiln {

// A schedule table parameter (see rt::ScheduleTableParam): a tiles_m x tiles_n grid of tiles,
// each a rule of the integer parameters (e.g. "M/256"), dealt to `groups` CTA groups of `slots`.
// With `split` (an integer parameter declared before it) a work table of units of (tile, k
// range) instead, each tile's K being `k_tiles` k-tiles (e.g. "K/64"): rt::WorkSchedule.
struct ScheduleTable {
  std::string tiles_m, tiles_n;
  int groups = 1, slots = 1;
  std::string k_tiles = "", split = "";
};

// What a finished kernel is: the manifest plus the MLIR module (opaque here).
class KernelDef {
 public:
  struct Module;  // defined in dsl/kernel_state.h
  KernelDef(rt::Manifest manifest, Target target, std::shared_ptr<Module> module);
  const rt::Manifest& manifest() const { return manifest_; }
  const Target& target() const { return target_; }
  Module& module() const { return *module_; }
  // What the static checks found (kiln check): each a line naming the kernel's source line.
  const std::vector<std::string>& findings() const { return findings_; }

 private:
  friend class Kernel;
  rt::Manifest manifest_;
  Target target_;
  std::shared_ptr<Module> module_;
  std::vector<std::string> findings_;
};

class Kernel {
 public:
  Kernel(std::string name, const Target& target, rt::Dim3 block, Loc loc = Loc::current());
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const Target& target() const;

  // ---- parameters (in declaration order) and launch rules (dsl/kernel.cc)
  Value PtrParam(const std::string& name, Scalar elem, Loc loc = Loc::current());
  Value I32Param(const std::string& name, Loc loc = Loc::current());
  Value I64Param(const std::string& name, Loc loc = Loc::current());
  Value F32Param(const std::string& name, Loc loc = Loc::current());
  // A global i32 table the launcher builds on the host (a Hilbert tile order).
  Value ScheduleTableParam(const std::string& name, const ScheduleTable& spec,
                           Loc loc = Loc::current());
  // Global scratch memory of `elem`s the launcher allocates and keeps (rt::WorkspaceParam):
  // `bytes_per_partial` for each partial slot of the work table parameter `table`, zeroed once;
  // with `table` "", `bytes_per_partial` in all (a counter of tiles handed out).
  Value WorkspaceParam(const std::string& name, Scalar elem, const std::string& table,
                       int64_t bytes_per_partial, Loc loc = Loc::current());
  // Grid dims as rules of the integer parameters, e.g. Grid("N/128", "M/128") or Grid("rows/16").
  void Grid(const std::string& x, const std::string& y = "1", const std::string& z = "1",
            Loc loc = Loc::current());
  // A launch rule: integer parameter `name` must be a multiple of `multiple` (e.g. the tile).
  // Every launch checks it and names this line when it fails.
  void RequireMultiple(const std::string& name, int64_t multiple, Loc loc = Loc::current());
  // Attaches `value` to the manifest under `key`, for a harness or tool to read (kiln does not).
  void Attribute(const std::string& key, const std::string& value, Loc loc = Loc::current());

  // ---- constants and ids (dsl/kernel.cc)
  Value I32(int64_t v, Loc loc = Loc::current());
  Value F32(double v, Loc loc = Loc::current());
  Value ThreadIdx(int axis = 0, Loc loc = Loc::current());
  Value BlockIdx(int axis = 0, Loc loc = Loc::current());
  Value BlockDim(int axis = 0, Loc loc = Loc::current());
  Value GridDim(int axis = 0, Loc loc = Loc::current());
  Value LaneId(Loc loc = Loc::current());
  Value WarpId(Loc loc = Loc::current());       // threadIdx.x / 32
  Value WarpgroupId(Loc loc = Loc::current());  // threadIdx.x / 128
  // Clusters (sm_90+): %cluster_ctarank and %clusterid.
  Value ClusterCtaRank(Loc loc = Loc::current());
  Value ClusterIdx(int axis = 0, Loc loc = Loc::current());
  // Launches in clusters of these dims (sm_90+); recorded in the manifest and the PTX.
  // The second __launch_bounds__ argument (.minnctapersm): with 1, ptxas may use all 255
  // registers per thread instead of capping them for an occupancy it guesses.
  void MinBlocksPerSm(int blocks, Loc loc = Loc::current());
  void ClusterDims(rt::Dim3 dims, Loc loc = Loc::current());

  // ---- control flow (dsl/kernel.cc)
  // while (cond()) body(): cond is built once, evaluated before every iteration.
  void While(const std::function<Value()>& cond, const std::function<void()>& body,
             Loc loc = Loc::current());
  // for (i = lo; i < hi; i += step) body(i): a run-time loop.
  void For(const Operand& lo, const Operand& hi, const Operand& step,
           const std::function<void(Value)>& body, Loc loc = Loc::current());
  void If(const Operand& cond, const std::function<void()>& then, Loc loc = Loc::current());
  // With an else branch. A Value made in either branch lives only there: carry results out with
  // IfElse (or a register array assigned in both branches).
  void If(const Operand& cond, const std::function<void()>& then,
          const std::function<void()>& otherwise, Loc loc = Loc::current());
  // cond ? then() : otherwise(), each branch built as code (unlike Select, only the taken one
  // runs) and returning the value it yields; both yield the same type. The vector form yields
  // several values.
  Value IfElse(const Operand& cond, const std::function<Value()>& then,
               const std::function<Value()>& otherwise, Loc loc = Loc::current());
  std::vector<Value> IfElse(const Operand& cond, const std::function<std::vector<Value>()>& then,
                            const std::function<std::vector<Value>()>& otherwise,
                            Loc loc = Loc::current());

  // ---- memory (dsl/memory.cc; types in kiln/memory.h)
  Regs Registers(Type type, int count, Loc loc = Loc::current());  // zero-initialised
  SmemTile Smem(Scalar elem, int rows, int cols, int pad = 0, int align = 128,
                Loc loc = Loc::current());
  // A padded or XOR-swizzled tile (a ring when layout.stages > 1), 128-byte aligned.
  SmemTile Smem(Scalar elem, int rows, int cols, const SmemLayout& layout,
                Loc loc = Loc::current());
  // Shared memory sized at launch: `bytes`, a rule of the integer parameters (e.g. "cols*4"),
  // after every planned tile (declare those first), 128-byte aligned. Returns its first element.
  Value SmemDynamic(Scalar elem, const std::string& bytes, Loc loc = Loc::current());
  // A tile over the bytes of `base` (and beyond, if larger): e.g. an epilogue's staging buffer
  // over the mainloop's ring. The kernel synchronises between the two uses.
  SmemTile SmemOver(const SmemTile& base, Scalar elem, int rows, int cols, const SmemLayout& layout,
                    Loc loc = Loc::current());
  // The tensor cores' no-swizzle K-major layout (PTX ISA "canonical layouts"): the tile's
  // columns in 8-element slabs, slab after slab, each slab `rows` rows of 16 bytes. 128-aligned.
  SmemTile SmemInterleaved(Scalar elem, int rows, int cols, int stages = 1,
                           Loc loc = Loc::current());
  // A swizzled tile (rows of exactly the swizzle span), a ring of `stages` copies, 1024-aligned.
  SmemTile SmemSwizzled(Scalar elem, int rows, int cols, Swizzle swizzle, int stages = 1,
                        Loc loc = Loc::current());
  // Loads `lanes` elements (one vector access of lanes * elem bytes, which must be aligned).
  Value Load(const Value& ptr, int lanes = 1, Loc loc = Loc::current());
  void Store(const Value& ptr, const Operand& value, Loc loc = Loc::current());
  Value Vector(const std::vector<Value>& lanes, Loc loc = Loc::current());
  void SyncThreads(Loc loc = Loc::current());
  // bar.warp.sync of the whole warp. Also where ptxas schedules nothing across: loads issued
  // before it are all in flight before any instruction after it waits on one (ptxas otherwise may
  // interleave independent loads with the math that uses the first of them).
  void SyncWarp(Loc loc = Loc::current());
  // st.global.L1::no_allocate of a 16-byte vector: the line is not kept in L1.
  void StoreNoL1Allocate(const Value& ptr, const Value& value, Loc loc = Loc::current());
  // st.global.wt: a store that writes through to memory without keeping the line in L1.
  void StoreWriteThrough(const Value& ptr, const Operand& value, Loc loc = Loc::current());

  // ---- tensor cores, Ampere and later (dsl/tensor_core.cc, dsl/ampere.cc)
  // ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16: each lane passes one row address.
  std::vector<Value> LdMatrix(const Value& smem_row, int num, bool trans = false,
                              Loc loc = Loc::current());
  // The same with the row address taken from a tile, whose layout is checked to keep each
  // lane's 16-byte row whole and aligned.
  std::vector<Value> LdMatrix(const SmemTile& tile, const Operand& row, const Operand& col, int num,
                              bool trans = false, Loc loc = Loc::current());
  // cp.async of `bytes` (4, 8 or 16; .cg needs 16) from global `src` into tile(row, col).
  // `l2_prefetch` (0, 64, 128 or 256: .L2::64B etc.) asks L2 to fetch that aligned span around
  // the source, so the next k-tile's bytes of a short row are already on chip. `src_bytes`, where
  // given (an i32 of 0 .. bytes), copies only that many bytes and fills the rest with zeros: 0
  // reads nothing (an edge past the operand), though `src` should still point inside it.
  enum class CacheAt { kL1, kL2 };  // .ca, .cg
  void CpAsync(const SmemTile& tile, const Operand& row, const Operand& col, const Value& src,
               int bytes = 16, CacheAt cache = CacheAt::kL2, int l2_prefetch = 0,
               const Value& src_bytes = {}, Loc loc = Loc::current());
  void CpAsyncCommit(Loc loc = Loc::current());             // cp.async.commit_group
  void CpAsyncWait(int pending, Loc loc = Loc::current());  // cp.async.wait_group
  void CpAsyncWaitAll(Loc loc = Loc::current());            // cp.async.wait_all
  // A block tile split among warps for mma.sync: this warp's origin in the tile and how many
  // mma tiles it holds. Fails at the call when the tile does not divide by the warp grid (and
  // the mma shape) or the warp grid does not match the block's warps.
  struct WarpTiling {
    int tile_m, tile_n, warps_m, warps_n, mma_m = 16, mma_n = 8;
  };
  struct WarpTile {
    Value m0, n0;  // the warp's first row and column in the block tile
    int rows, cols, mmas_m, mmas_n;
  };
  WarpTile Warps(const WarpTiling& tiling, Loc loc = Loc::current());
  // mma.sync.aligned.m16n8k16.row.col: a = 4 x b32, b = 2 x b32, c = accumulators
  // (4 f32, or 2 x f16x2 for an f16 accumulator); returns d.
  std::vector<Value> MmaM16N8K16(Scalar ab, const std::vector<Value>& a,
                                 const std::vector<Value>& b, const std::vector<Value>& c,
                                 Loc loc = Loc::current());

  // ---- Hopper, sm_90a: TMA, mbarriers, roles, clusters (dsl/async.cc), wgmma (dsl/wgmma.cc)
  TensorMap TmaParam(const std::string& name, const rt::TensorMapParam& spec,
                     Loc loc = Loc::current());
  Barriers SmemBarriers(int count, Loc loc = Loc::current());
  // TMA load of one box at `coords` (innermost first) into `dst`, completing on `bar`; with a
  // CTA mask, multicast to the same smem offset of every CTA in the mask.
  // `l2_policy` (L2Policy), where valid, rides on the copy as its L2::cache_hint.
  void TmaLoad(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
               std::vector<Operand> coords, const Value& l2_policy = {}, Loc loc = Loc::current());
  // TMA load of a CTA pair (tcgen05 cta_group::2): lands in this CTA's `dst` and completes on
  // `bar` in the pair's leader CTA (the even rank), where the pair's MMA is issued.
  void TmaLoadPair(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
                   std::vector<Operand> coords, Loc loc = Loc::current());
  void TmaLoadMulticast(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
                        std::vector<Operand> coords, const Operand& cta_mask,
                        const Value& l2_policy = {}, Loc loc = Loc::current());
  // An L2 eviction policy for the whole of what a copy reads (createpolicy.fractional, fraction
  // 1.0): kL2EvictFirst for data read once (its lines go before others'), kL2EvictLast for data
  // many CTAs read; an i64 for TmaLoad's `l2_policy`. (An evict_normal policy is not the same as
  // none: TMA loads carrying one are slower: docs/perf/2026-11-26-b-lines-evicted-first.md.)
  Value L2Policy(CacheHint hint, Loc loc = Loc::current());
  // Starts bringing the box at `coords` into L2 (cp.async.bulk.prefetch.tensor): no shared
  // memory, no barrier, nothing to wait for; a later TMA load of it reads L2 instead of DRAM.
  void TmaPrefetchL2(const TensorMap& map, std::vector<Operand> coords, Loc loc = Loc::current());
  // Starts fetching the map's descriptor (prefetch.tensormap), so that the first TMA copy through
  // it does not wait for that fetch; no effect on any value.
  void TmaPrefetchDescriptor(const TensorMap& map, Loc loc = Loc::current());
  // TMA store of `src` to the box at `coords`, in the current bulk group.
  void TmaStore(const TensorMap& map, const SmemTile& src, std::vector<Operand> coords,
                Loc loc = Loc::current());
  void BulkCommit(Loc loc = Loc::current());
  // Waits until at most `pending` bulk groups are in flight; with `smem_reads_only`, only until
  // they have read their smem sources (enough to reuse the buffer; the writes may still land).
  void BulkWait(int pending, bool smem_reads_only = false, Loc loc = Loc::current());
  void FenceBarrierInit(Loc loc = Loc::current());  // fence.mbarrier_init.release.cluster
  void FenceProxyAsync(Loc loc = Loc::current());   // fence.proxy.async.shared::cta
  // membar.gl (__threadfence): this thread's earlier memory accesses are performed at GPU scope
  // before its later ones: what publishing data through a global flag or counter needs.
  void FenceGpu(Loc loc = Loc::current());
  void ClusterSync(Loc loc = Loc::current());  // barrier.cluster.arrive + wait
  // Programmatic dependent launch (sm_90 and later). griddepcontrol.wait: this thread waits until
  // the grids before this one in the stream have completed and their writes are visible. A kernel
  // that calls it says so in its manifest (waits_for_prior_grids), and the runtime then launches
  // it early, while those grids finish: every thread must call it before it touches global
  // memory (the emulator checks), and what comes before it overlaps their tail.
  void WaitForPriorGrids(Loc loc = Loc::current());
  // griddepcontrol.launch_dependents: the next kernel in the stream may launch once every CTA of
  // this grid has run it or exited (it still waits for this grid's end before touching memory).
  void LaunchDependents(Loc loc = Loc::current());
  void NamedBarrier(const Operand& id, int threads, Loc loc = Loc::current());  // bar.sync id, n
  // bar.arrive id, n: counts this warp toward barrier `id` without waiting (a producer's signal).
  void NamedBarrierArrive(const Operand& id, int threads, Loc loc = Loc::current());

  // Runs `body(index within the role)` on threads [first, first + threads); with max_regs, the
  // role first adjusts its register budget (setmaxnreg.inc or .dec).
  void Role(const RoleSpec& role, const std::function<void(Value)>& body, Loc loc = Loc::current());

  WgmmaAccumulator WgmmaAcc(int n, Loc loc = Loc::current());
  void WgmmaFence(Loc loc = Loc::current());
  // One wgmma (kiln/hopper.h: WgmmaOp says which operand is where).
  void Wgmma(const WgmmaAccumulator& acc, const WgmmaOp& op, Loc loc = Loc::current());
  using WgmmaTile = kiln::WgmmaTile;
  void WgmmaCommit(Loc loc = Loc::current());
  void WgmmaWait(int pending, Loc loc = Loc::current());
  // stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16: each lane passes one row address.
  void StMatrix(const Value& smem_row, const std::vector<Value>& regs, bool trans = false,
                Loc loc = Loc::current());

  // ---- Blackwell, sm_100a: tensor memory and tcgen05 (dsl/tcgen05.cc)
  // Declares an allocation of `columns` (a power of two, 32..512) for cta_group 1 or 2. Build()
  // fails if a kernel allocates it and never frees it.
  Tmem TensorMemory(int columns, int cta_group = 1, Loc loc = Loc::current());
  void TmemAlloc(const Tmem& t, Loc loc = Loc::current());  // tcgen05.alloc, one whole warp
  void TmemFree(const Tmem& t, Loc loc = Loc::current());   // tcgen05.dealloc, one whole warp
  void TmemRelinquish(int cta_group = 1, Loc loc = Loc::current());
  Value ElectOne(Loc loc = Loc::current());             // elect.sync: true in one lane of the warp
  void TcgenFenceBeforeSync(Loc loc = Loc::current());  // tcgen05.fence::before_thread_sync
  void TcgenFenceAfterSync(Loc loc = Loc::current());   // tcgen05.fence::after_thread_sync
  // One tcgen05.mma (kiln/tcgen05.h: TcgenMmaOp says which operand is where).
  void TcgenMma(const Tmem& d, const TcgenMmaOp& op, Loc loc = Loc::current());
  // tcgen05.commit: `bar` gets one arrive when this thread's prior tcgen05 ops complete; with
  // `cta_mask`, on the barrier at the same offset in each of those cluster CTAs.
  void TcgenCommit(const Barrier& bar, int cta_group = 1, const Value& cta_mask = Value(),
                   Loc loc = Loc::current());
  // tcgen05.ld.32x32b.x{num} (num 1..128, a power of two): lane `lane` + thread of the warp,
  // columns column..column+num-1, as f32. The warp may read only its quarter of the lanes. It
  // includes its tcgen05.wait::ld, so the values are ready (and no copy of them precedes it).
  std::vector<Value> TcgenLoad(const Tmem& t, const Operand& lane, const Operand& column, int num,
                               Loc loc = Loc::current());
  // tcgen05.st.32x32b.x{values.size()} (1..128, a power of two) of f32 values: lane `lane` +
  // thread of the warp, columns column.. (the warp's quarter of the lanes only). It includes its
  // tcgen05.wait::st, so the values are in tensor memory when it returns (an MMA that reads or
  // accumulates into them may follow once a fence::before_thread_sync and a barrier order it).
  void TcgenStore(const Tmem& t, const Operand& lane, const Operand& column,
                  const std::vector<Value>& values, Loc loc = Loc::current());

  // The GPU debug mode: every mbarrier wait of this kernel gives up after `ms` milliseconds,
  // writes which wait (its DSL line), the barrier, the phase, the block and the thread to a
  // host-visible record and traps, so a protocol bug ends with a message (from
  // rt::Synchronize) instead of a hang. Call it before the kernel's first wait.
  // SetDefaultWatchdog(ms) turns it on for every kernel built afterwards (kiln bundle --watchdog).
  void Watchdog(int ms, Loc loc = Loc::current());

  // Adds an error at `loc` (for helpers built on the builder).
  void Fail(const std::string& message, Loc loc = Loc::current());
  // Runs `check` when Build() starts (whole-kernel rules of helpers; it may call Fail).
  void CheckAtBuild(std::function<void()> check);
  // Verifies and returns the kernel, or the first error with the DSL line that caused it.
  absl::StatusOr<KernelDef> Build();

 private:
  friend struct detail::Access;
  std::unique_ptr<detail::KernelState> state_;
};

// Kernel::Watchdog(ms) for every kernel constructed after this call (0: off).
void SetDefaultWatchdog(int ms);

// "file:line" of a source location, relative to the project root when inside it.
std::string LocString(const Loc& loc);

}  // namespace kiln

// The ops that are free functions, by concern.
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/rows.h"
#include "kiln/warp.h"
