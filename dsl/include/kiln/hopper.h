// Hopper's types (sm_90a): TMA tensor map parameters, mbarriers, wgmma accumulators and thread
// roles. The ops are Kernel methods (kiln/kernel.h: Hopper), built in dsl/async.cc (TMA,
// mbarriers, clusters) and dsl/wgmma.cc (wgmma, stmatrix).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/bundle/manifest.h"
#include "kiln/memory.h"

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

 private:
  friend class Kernel;
  Value param_;
  rt::TensorMapParam spec_;
  Loc loc_;
};

// An mbarrier in shared memory (one of an array; see Kernel::Barriers).
class Barrier {
 public:
  Barrier() = default;
  void Init(int count, Loc loc = Loc::current()) const;  // mbarrier.init (one thread)
  void Arrive(Loc loc = Loc::current()) const;
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
  Regs regs_;
  Value lane_, warp_;  // lane and warp (0..3) within the warpgroup
  int n_ = 0;
};

// A wgmma (or tcgen05.mma) operand tile in shared memory, swizzled: K-major (its rows are M or N,
// as the K-major layouts' TMA boxes land), or MN-major (imm-trans): K rows, each one swizzle span
// of M or N (64 bf16 at 128B), in blocks of `k_rows` rows stacked for further spans (rows
// k_rows*j.. hold columns span*j..), as one 2D TMA box per block lands from a column-major A or a
// row-major B. An MN-major B with k_rows 0 is a ring of such spans side by side along N (stage s:
// columns span*s..), each stage all of K (attention's V with D <= 64 per stage).
struct WgmmaTile {
  WgmmaTile() = default;
  WgmmaTile(SmemTile t, bool mn = false, int k = 0) : tile(t), mn_major(mn), k_rows(k) {}
  SmemTile tile;
  bool mn_major = false;
  int k_rows = 0;  // MN-major: rows of K per block
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

}  // namespace kiln
