// Hopper (sm_90a): TMA tensor map parameters, mbarriers, wgmma accumulators and operands, thread
// roles, and the ops on them (HopperOps, a part of Kernel), built in dsl/async.cc (TMA, mbarriers,
// clusters) and dsl/wgmma.cc (wgmma, stmatrix).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/bundle/manifest.h"
#include "kiln/memory.h"
#include "kiln/memory_ops.h"

namespace kiln {

class Kernel;
class Barriers;

// A TMA descriptor parameter (CUtensorMap) over a tensor in global memory; the launcher encodes
// it from the manifest's spec and the tensor's address. Its box and swizzle decide the smem tiles
// it may fill.
class TensorMap {
 public:
  TensorMap() = default;
  const rt::TensorMapParam& spec() const { return spec_; }
  int rank() const { return spec_.rank(); }
  int box_bytes() const { return spec_.BoxBytes(); }
  Swizzle swizzle() const { return static_cast<Swizzle>(spec_.swizzle); }
  const Value& param() const { return param_; }
  const Loc& loc() const { return loc_; }  // where the kernel declared it

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  Value param_;
  rt::TensorMapParam spec_;
  Loc loc_;
};

// How many phases of an mbarrier complete in one round of the kernel's loop, where the kernel
// means more than one: several arrival sites that each complete a phase, or one site whose
// threads complete several. `kiln check` flags such a barrier unless its Init states it.
struct PhasesPerRound {
  int n = 1;
};

// An mbarrier in shared memory (one of an array; see Kernel::Barriers).
class Barrier {
 public:
  Barrier() = default;
  void Init(int count, Loc loc = Loc::current()) const;  // mbarrier.init (one thread)
  void Init(int count, PhasesPerRound phases, Loc loc = Loc::current()) const;
  void Arrive(Loc loc = Loc::current()) const;
  // cp.async.mbarrier.arrive.noinc: this thread's arrival, made once every cp.async it has
  // issued so far has landed (one of the count its Init expects). cp.async writes through the
  // generic proxy: a wgmma reading those bytes needs a fence.proxy.async after the wait.
  void ArriveWhenCopiesLand(Loc loc = Loc::current()) const;
  // mbarrier.arrive.expect_tx with the bytes the boxes of `maps` deliver to this CTA.
  void ArriveExpectTx(const std::vector<const TensorMap*>& maps, Loc loc = Loc::current()) const;
  // The same where some boxes come only under a condition (an invalid Value: always): one
  // arrival expecting the bytes of the boxes whose condition holds.
  void ArriveExpectTxIf(const std::vector<std::pair<const TensorMap*, Value>>& maps_if,
                        Loc loc = Loc::current()) const;
  // Arrives on the barrier at the same smem address in cluster CTA `cta_rank` (mapa).
  void ArriveCluster(const Operand& cta_rank, Loc loc = Loc::current()) const;
  // arrive.expect_tx on the barrier at the same smem address in cluster CTA `cta_rank`.
  void ArriveExpectTxCluster(const std::vector<const TensorMap*>& maps, const Operand& cta_rank,
                             Loc loc = Loc::current()) const;
  // Blocks until the phase with parity `phase` (0 or 1) has completed.
  void Wait(const Operand& phase, Loc loc = Loc::current()) const;
  const Value& ptr() const { return ptr_; }

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  friend class Barriers;
  friend struct detail::Access;
  Value ptr_;  // smem<i64>*
  // Which barrier, for the static checks: its array (smem offset) and index (a constant, or the
  // Value that selects it).
  int array_ = -1;
  std::string index_;
};

class Barriers {
 public:
  Barriers() = default;
  Barrier operator[](const Operand& i) const;
  int size() const { return count_; }

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  SmemTile tile_;
  int count_ = 0;
};

// A wgmma m64nNk16 f32 accumulator: N/2 registers per thread of the warpgroup. Register 2p and
// 2p+1 hold row Row(p), columns Col(p) and Col(p)+1 (the wgmma D fragment map).
class WgmmaAccumulator {
 public:
  WgmmaAccumulator() = default;
  int n() const { return n_; }
  RegRef operator[](RegIndex i) const { return regs_[i]; }
  Value Row(int pair, Loc loc = Loc::current()) const;
  Value Col(int pair, Loc loc = Loc::current()) const;
  // Which of a thread's two rows (RowSlot: 0 or 1) and of its column pairs (ColSlot: 0 to n/8-1)
  // pair `pair` lies on: pairs of one slot share Row (Col), so a per-row or per-column value is
  // loaded once for all of them.
  static int RowSlot(int pair) { return pair % 2; }
  static int ColSlot(int pair) { return pair / 2; }
  const Regs& regs() const { return regs_; }
  // Columns 16*k16 .. 16*k16+15 rounded to `elem` (bf16 or f16) as the A operand of a wgmma
  // with A in registers: the A fragment of m64k16 is the accumulator's layout over 16 columns,
  // so pairs 4*k16 .. 4*k16+3 become its four b32 registers (attention's P for P*V).
  std::vector<Value> FragmentA(int k16, Scalar elem, Loc loc = Loc::current()) const;

 private:
  friend class Kernel;
  friend class MemoryOps;
  friend class AmpereOps;
  friend class HopperOps;
  friend class BlackwellOps;
  Regs regs_;
  Value lane_, warp_;  // lane and warp (0..3) within the warpgroup
  int n_ = 0;
};

// A wgmma (or tcgen05.mma) operand tile in shared memory, swizzled: K-major (its rows are M or N,
// as the K-major layouts' TMA boxes land), or MN-major (imm-trans): K rows, each one swizzle span
// of M or N (64 bf16 at 128B), in blocks of `k_rows` rows stacked for further spans (rows
// k_rows*j.. hold columns span*j..), as one 2D TMA box per block lands from a column-major A or a
// row-major B. An MN-major B with k_rows 0 is a ring of such spans side by side along N (stage s:
// columns span*s..), each stage all of K (attention's V with D <= 64 per stage). A K-major tile
// with `group_rows` holds its 8-row groups of M or N that many rows apart, the rows between them
// the group's further spans of K ([group][span][8 rows]: one TMA box of 8-row groups and spans
// lands so, e.g. attention's K over a paged cache); row0 then names the first group's row of the
// span read.
struct WgmmaTile {
  WgmmaTile() = default;
  WgmmaTile(SmemTile t, bool mn = false, int k = 0) : tile(t), mn_major(mn), k_rows(k) {}
  static WgmmaTile Grouped(SmemTile t, int group_rows) {
    WgmmaTile w(t);
    w.group_rows = group_rows;
    return w;
  }
  SmemTile tile;
  bool mn_major = false;
  int k_rows = 0;      // MN-major: rows of K per block
  int group_rows = 0;  // K-major: rows from one 8-row group to the next (0: 8, packed)
};

// One wgmma.mma_async m64nNk16 (N: the accumulator's):
//   acc (+)= A[a_row0 .. a_row0+63, k0 .. k0+15] * B[b_row0 .. b_row0+N-1, k0 .. k0+15]^T
// (an MN-major tile's row0 is along M or N, a multiple of its span). A comes from `a`, or from
// registers: `a_regs`, this thread's four b32 registers in the A fragment layout
// (WgmmaAccumulator::FragmentA), which must be ready when it reads them (WgmmaFence orders
// them). Descriptors come from the tiles' layouts.
struct WgmmaOp {
  WgmmaTile a;
  Operand a_row0 = 0;
  std::vector<Value> a_regs;
  WgmmaTile b;
  Operand b_row0 = 0;
  int k0 = 0;
  bool accumulate = true;  // false: acc = A*B (scale-d 0: the old accumulator is not read)
};

// A thread role: a contiguous range of threads running its own code (warp specialisation).
struct RoleSpec {
  int first_thread = 0;
  int threads = 128;
  int max_regs = 0;  // setmaxnreg for the role (whole warpgroups only); 0 keeps the default
};

// Hopper's ops (sm_90a; a part of Kernel, kiln/kernel.h): TMA, mbarriers, fences, clusters,
// programmatic dependent launch, roles, wgmma and stmatrix. Built in dsl/async.cc, dsl/wgmma.cc
// and dsl/kernel.cc (Role).
class HopperOps : public KernelPart<HopperOps> {
 public:
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
  // The same, adding `src` into the box instead of writing it (cp.reduce.async.bulk.tensor .add):
  // each element added atomically, so boxes from several CTAs may overlap.
  void TmaReduceAdd(const TensorMap& map, const SmemTile& src, std::vector<Operand> coords,
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
  // The cluster barrier in two halves (barrier.cluster.arrive, barrier.cluster.wait): ClusterArrive
  // counts this thread and goes on; ClusterWait waits until every live thread of the cluster has
  // arrived. Work between them overlaps the peers' way to the barrier. Each thread arrives once,
  // then waits, before it arrives again. The arrive releases this thread's earlier memory
  // accesses to the cluster and the wait acquires the peers'; a `relaxed` arrive orders nothing
  // (a barrier that only counts, e.g. after FenceBarrierInit, which releases the Inits itself).
  void ClusterArrive(bool relaxed = false, Loc loc = Loc::current());
  void ClusterWait(Loc loc = Loc::current());
  // Distributed shared memory (a cluster of 2 or more CTAs): `smem_ptr`'s place (a pointer into
  // this CTA's shared memory, e.g. tile.At(r, c)) in the shared memory of cluster CTA `cta_rank`
  // (mapa). Load, Store and the atomics take it (ld / st / atom .shared::cluster). The peer's
  // bytes are ordered by the cluster barrier: its writes before its ClusterArrive are seen after
  // this CTA's ClusterWait. A thread passes a cluster barrier before its first access to a peer
  // (a CTA of the cluster may not have started before), and a CTA must not exit while a peer may
  // still read or write its shared memory (a cluster barrier before the end).
  Value PeerPointer(const Value& smem_ptr, const Operand& cta_rank, Loc loc = Loc::current());
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
  // role first adjusts its register budget (setmaxnreg.inc or .dec). The roles' budgets share
  // what the block is launched with, LaunchRegs() a thread (65536 / MinBlocksPerSm / threads, in
  // steps of 8, at most 255): setmaxnreg only moves registers between its warpgroups.
  int LaunchRegs();
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
};

}  // namespace kiln
