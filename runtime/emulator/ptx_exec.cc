// Executes a parsed PTX entry on the CPU: one CTA at a time, its threads interleaved by a seeded
// scheduler; warp collectives and barriers release their participants when all have arrived.
// Semantics follow the PTX ISA instruction by instruction.
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/runtime/emulator.h"
#include "kiln/runtime/schedule.h"
#include "runtime/emulator/ptx.h"

namespace kiln::emu {

// ---- device memory

absl::StatusOr<uint64_t> Device::Allocate(size_t bytes) {
  const uint64_t base = next_;
  blocks_[base].assign(bytes, 0);
  next_ += (bytes + 4095) / 4096 * 4096 + 4096;  // a gap after every allocation
  return base;
}

uint8_t* Device::Find(uint64_t address, size_t bytes) {
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return nullptr;
  --it;
  if (address + bytes > it->first + it->second.size()) return nullptr;
  return it->second.data() + (address - it->first);
}

absl::Status Device::CopyIn(uint64_t dst, const void* src, size_t bytes) {
  uint8_t* p = Find(dst, bytes);
  if (!p) return absl::OutOfRangeError(absl::StrFormat("copy of %d bytes to 0x%x: not in one allocation", bytes, dst));
  std::memcpy(p, src, bytes);
  return absl::OkStatus();
}

absl::Status Device::CopyOut(void* dst, uint64_t src, size_t bytes) const {
  uint8_t* p = const_cast<Device*>(this)->Find(src, bytes);
  if (!p) return absl::OutOfRangeError(absl::StrFormat("copy of %d bytes from 0x%x: not in one allocation", bytes, src));
  std::memcpy(dst, p, bytes);
  return absl::OkStatus();
}

absl::Status Device::Fill(uint64_t dst, uint8_t byte, size_t bytes) {
  uint8_t* p = Find(dst, bytes);
  if (!p) return absl::OutOfRangeError(absl::StrFormat("fill of %d bytes at 0x%x: not in one allocation", bytes, dst));
  std::memset(p, byte, bytes);
  return absl::OkStatus();
}

namespace {

using ptx::Instr;
using ptx::Op;
using ptx::Operand;
using ptx::Space;
using ptx::Ty;

// Generic addresses of shared memory and of the parameters live in these windows (cvta.shared
// and cvta.param add them).
constexpr uint64_t kSharedWindow = uint64_t{0xF} << 44;
constexpr uint64_t kParamWindow = uint64_t{0xE} << 44;
constexpr uint64_t kTensorMapMagic = 0x50414d544e4c494bull;  // "KILNTMAP"

float F32(uint64_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits)); }
uint64_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
double F64(uint64_t bits) { return std::bit_cast<double>(bits); }
uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }

float FlushDenormal(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
uint16_t F32ToBf16(float f) {  // round to nearest even; NaN stays a (quiet) NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float F16ToF32(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
uint16_t F32ToF16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

uint64_t Mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }
int64_t SignExtend(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  const uint64_t m = uint64_t{1} << (bits - 1);
  v &= Mask(bits);
  return static_cast<int64_t>((v ^ m) - m);
}

// A cp.async in flight: the source bytes as read at issue, written to shared memory when its
// group completes (at the cp.async.wait_group that needs it: the latest moment the ISA allows, so
// a read of the destination before the wait sees the old bytes).
struct AsyncCopy {
  uint64_t shared_offset = 0;
  std::vector<uint8_t> bytes;
};

// A tensor map as the launcher describes it: the emulator's own 128-byte image (a magic word and
// an index into the launch's table) stands where the driver's opaque CUtensorMap would.
struct EmulatedTensorMap {
  rt::TensorMapSpec spec;
  uint64_t address = 0;
};

// A tcgen05.mma kind::f16 in flight: D (TMEM, fp32) (+)= A (smem) x B (smem)^T, both K-major.
struct TcgenMma {
  uint32_t d = 0;  // TMEM address: lane << 16 | column
  uint64_t a_desc = 0, b_desc = 0;
  uint32_t idesc = 0;
  bool accumulate = true;
  int line = 0;
  const ptx::Instr* in = nullptr;
};

struct Thread {
  int x = 0, y = 0, z = 0, linear = 0;
  int pc = 0;
  std::vector<uint64_t> r;
  std::vector<AsyncCopy> open_group;               // not yet committed
  std::vector<std::vector<AsyncCopy>> groups;      // committed, oldest first
  enum class State : uint8_t { kRun, kWarp, kBarrier, kMbarrier, kDone } state = State::kRun;
  int barrier = -1;
  uint64_t mbarrier = 0;  // kMbarrier: the shared offset it waits on
  std::map<uint64_t, int64_t> next_phase;  // per mbarrier: the phase this thread waits for next
  int64_t cluster_phase = -1;              // the barrier.cluster phase it arrived in
};

class Cta;

// The CTAs of one cluster, run under one scheduler, and the cluster barrier (barrier.cluster).
struct ClusterState {
  std::vector<Cta*> ctas;  // by %cluster_ctarank (x fastest)
  rt::Dim3 dims, id, count;  // cluster shape, this cluster's index, clusters in the grid
  int64_t phase = 0;         // completed barrier.cluster phases
  int arrived = 0;
  void TryRelease();
};

class Cta {
 public:
  Cta(Device& dev, const ptx::Module& m, const ptx::Entry& e, const std::vector<uint8_t>& params, rt::Dim3 grid,
      rt::Dim3 block, rt::Dim3 ctaid, int64_t smem_bytes, const std::string& kernel, std::mt19937_64* rng,
      int64_t* budget, const std::vector<EmulatedTensorMap>* maps)
      : dev_(dev), m_(m), e_(e), params_(params), grid_(grid), block_(block), ctaid_(ctaid),
        shared_(smem_bytes, 0), kernel_(kernel), rng_(rng), budget_(budget), maps_(maps) {
    const int n = static_cast<int>(block.count());
    threads_.resize(n);
    for (int i = 0; i < n; ++i) {
      Thread& t = threads_[i];
      t.linear = i;
      t.x = i % block.x, t.y = (i / block.x) % block.y, t.z = i / (block.x * block.y);
      t.r.assign(e.num_regs, 0);
    }
  }

  void JoinCluster(ClusterState* c, int rank) { cluster_ = c, rank_ = rank; }
  bool exited() const { return exited_; }
  int LiveThreads() const {
    return static_cast<int>(std::count_if(threads_.begin(), threads_.end(),
                                          [](const Thread& t) { return t.state != Thread::State::kDone; }));
  }
  void WakeClusterWaiters() {
    for (Thread& t : threads_)
      if (t.state == Thread::State::kBarrier && t.barrier == kClusterBarrier) t.state = Thread::State::kRun;
  }

  // One scheduling decision: an asynchronous completion, or a quantum of one thread.
  enum class Progress { kMoved, kIdle, kFinished };
  absl::StatusOr<Progress> Advance(int64_t* executed) {
    std::vector<int> runnable;
    {
      runnable.clear();
      for (const Thread& t : threads_)
        if (t.state == Thread::State::kRun) runnable.push_back(t.linear);
      // An asynchronous copy lands at a moment the seed picks between its issue and the first
      // time every thread waits (in index order: only then).
      const size_t in_flight = pending_.size() + (tcgen_commits_.empty() ? 0 : 1);
      if (in_flight && (runnable.empty() || (rng_ && (*rng_)() % 4 == 0))) {
        const size_t pick = rng_ ? (*rng_)() % in_flight : 0;
        if (pick < pending_.size()) {
          if (absl::Status s = CompleteAsync(pick); !s.ok()) return s;
        } else {  // the oldest tcgen05 commit: its MMAs in issue order, then its arrival
          TcgenCommit c = std::move(tcgen_commits_.front());
          tcgen_commits_.erase(tcgen_commits_.begin());
          for (const TcgenMma& op : c.mmas)
            if (absl::Status s = RunTcgenMma(op); !s.ok()) return s;
          MbarrierState& b = mbarriers_[c.mbarrier];
          if (--b.pending < 0)
            return absl::InvalidArgumentError(absl::StrFormat(
                "%s: a tcgen05.commit arrives beyond the %d arrivals the mbarrier at shared offset %d expects", kernel_,
                b.expected, c.mbarrier));
          if (absl::Status s = MbarrierComplete(c.mbarrier); !s.ok()) return s;
        }
        return Progress::kMoved;
      }
      if (runnable.empty()) {
        if (std::all_of(threads_.begin(), threads_.end(), [](const Thread& t) { return t.state == Thread::State::kDone; })) {
          exited_ = true;
          if (absl::Status s = CheckTmemAtExit(); !s.ok()) return s;
          return Progress::kFinished;
        }
        if (absl::Status s = ReleaseBarriersOfExitedThreads(); !s.ok()) return s;
        if (std::any_of(threads_.begin(), threads_.end(), [](const Thread& t) { return t.state == Thread::State::kRun; }))
          return Progress::kMoved;
        return Progress::kIdle;
      }
      // A seeded choice of thread and of how long it runs before the next choice.
      const int pick = rng_ ? runnable[(*rng_)() % runnable.size()] : runnable.front();
      const int quantum = rng_ ? 1 + static_cast<int>((*rng_)() % 64) : 1 << 30;
      Thread& t = threads_[pick];
      for (int i = 0; i < quantum && t.state == Thread::State::kRun; ++i) {
        if (--*budget_ < 0)
          return absl::ResourceExhaustedError(absl::StrCat(kernel_, ": the emulator's instruction budget ran out "
                                                           "(an endless loop? raise Options::max_instructions)"));
        ++*executed;
        if (absl::Status s = Step(t); !s.ok()) return s;
      }
    }
    return Progress::kMoved;
  }

  absl::Status Deadlock() const;

 private:
  // "DSL line: kernel: what, in thread .. of block .. (PTX line N: text)"; without line tables
  // the message starts with the kernel.
  absl::Status Fail(const Thread& t, const Instr& in, const std::string& what) const {
    const std::string dsl = m_.DslLine(in);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): %s, in thread (%d,%d,%d) of block (%d,%d,%d)", dsl.empty() ? "" : dsl + ": ", kernel_,
        in.line, in.text, what, t.x, t.y, t.z, ctaid_.x, ctaid_.y, ctaid_.z));
  }

  uint64_t SpecialValue(const Thread& t, ptx::Special s) const {
    switch (s) {
      case ptx::Special::kTidX: return t.x;
      case ptx::Special::kTidY: return t.y;
      case ptx::Special::kTidZ: return t.z;
      case ptx::Special::kNtidX: return block_.x;
      case ptx::Special::kNtidY: return block_.y;
      case ptx::Special::kNtidZ: return block_.z;
      case ptx::Special::kCtaidX: return ctaid_.x;
      case ptx::Special::kCtaidY: return ctaid_.y;
      case ptx::Special::kCtaidZ: return ctaid_.z;
      case ptx::Special::kNctaidX: return grid_.x;
      case ptx::Special::kNctaidY: return grid_.y;
      case ptx::Special::kNctaidZ: return grid_.z;
      case ptx::Special::kLaneId: return t.linear % 32;
      case ptx::Special::kWarpId: return t.linear / 32;
      case ptx::Special::kClusterCtaRank: return rank_;
      case ptx::Special::kClusterNctaRank: return cluster_ ? cluster_->ctas.size() : 1;
      case ptx::Special::kClusterIdX: return cluster_ ? cluster_->id.x : ctaid_.x;
      case ptx::Special::kClusterIdY: return cluster_ ? cluster_->id.y : ctaid_.y;
      case ptx::Special::kClusterIdZ: return cluster_ ? cluster_->id.z : ctaid_.z;
      case ptx::Special::kNClusterIdX: return cluster_ ? cluster_->count.x : grid_.x;
      case ptx::Special::kNClusterIdY: return cluster_ ? cluster_->count.y : grid_.y;
      case ptx::Special::kNClusterIdZ: return cluster_ ? cluster_->count.z : grid_.z;
      case ptx::Special::kClusterCtaIdX: return cluster_ ? ctaid_.x % cluster_->dims.x : 0;
      case ptx::Special::kClusterCtaIdY: return cluster_ ? ctaid_.y % cluster_->dims.y : 0;
      case ptx::Special::kClusterCtaIdZ: return cluster_ ? ctaid_.z % cluster_->dims.z : 0;
      case ptx::Special::kClusterNctaIdX: return cluster_ ? cluster_->dims.x : 1;
      case ptx::Special::kClusterNctaIdY: return cluster_ ? cluster_->dims.y : 1;
      case ptx::Special::kClusterNctaIdZ: return cluster_ ? cluster_->dims.z : 1;
    }
    return 0;
  }

  // An operand's bits (registers hold raw bits; a float immediate is given as bits of its width).
  uint64_t Read(const Thread& t, const Operand& o, int bits) const {
    uint64_t v = 0;
    switch (o.kind) {
      case Operand::Kind::kReg: v = t.r[o.reg]; break;
      case Operand::Kind::kImm: v = o.imm; break;
      case Operand::Kind::kSpecial: v = SpecialValue(t, o.special); break;
      case Operand::Kind::kSymbol: {
        auto it = m_.shared_symbols.find(o.symbol);
        v = it == m_.shared_symbols.end() ? 0 : static_cast<uint64_t>(it->second);
        for (const ptx::Param& p : e_.params)
          if (p.name == o.symbol) v = p.offset;  // an address in the parameter space
        break;
      }
      default: break;
    }
    if (o.negate) v = !(v & 1);
    return v & Mask(bits);
  }
  void Write(Thread& t, const Operand& o, uint64_t v) {
    if (o.kind == Operand::Kind::kReg) t.r[o.reg] = v;
  }

  // The bytes an access touches, or an error naming the address.
  absl::StatusOr<uint8_t*> Memory(Thread& t, const Instr& in, Space space, uint64_t addr, int bytes) {
    if (addr % bytes != 0 && bytes <= 16)
      return Fail(t, in, absl::StrFormat("misaligned %d-byte access at 0x%x", bytes, addr));
    if (space == Space::kGeneric) {
      if (addr >= kSharedWindow && addr < kSharedWindow + (uint64_t{1} << 32)) {
        space = Space::kShared;
        addr -= kSharedWindow;
      } else if (addr >= kParamWindow && addr < kParamWindow + (uint64_t{1} << 32)) {
        space = Space::kParam;
        addr -= kParamWindow;
      } else {
        space = Space::kGlobal;
      }
    }
    if (space == Space::kGlobal) {
      uint8_t* p = dev_.Find(addr, bytes);
      if (!p) return Fail(t, in, absl::StrFormat("out-of-bounds global access of %d bytes at 0x%x", bytes, addr));
      return p;
    }
    if (space == Space::kShared && (addr >> 24) != 0) {  // shared::cluster: another CTA's memory
      absl::StatusOr<Cta*> peer = Peer(t, in, (addr >> 24) - 1);
      if (!peer.ok()) return peer.status();
      addr &= kOffsetMask;
      if (*peer != this) {
        if (addr + bytes > (*peer)->shared_.size())
          return Fail(t, in, absl::StrFormat("shared access of %d bytes at offset %d of cluster CTA %d, past its %d bytes",
                                             bytes, addr, (*peer)->rank_, (*peer)->shared_.size()));
        return (*peer)->shared_.data() + addr;
      }
    }
    if (space == Space::kShared) {
      if (addr + bytes > shared_.size())
        return Fail(t, in, absl::StrFormat("shared access of %d bytes at offset %d, past the block's %d bytes", bytes,
                                           addr, shared_.size()));
      return shared_.data() + addr;
    }
    if (space == Space::kParam) {
      if (addr + bytes > params_.size()) return Fail(t, in, "parameter access past the parameters");
      return const_cast<uint8_t*>(params_.data()) + addr;
    }
    return Fail(t, in, "this state space is not emulated yet");
  }

  uint64_t Address(const Thread& t, const Operand& o) const {
    if (o.kind != Operand::Kind::kAddress) return 0;
    uint64_t base = 0;
    if (o.reg >= 0) base = t.r[o.reg];
    else if (!o.symbol.empty()) {
      if (auto it = m_.shared_symbols.find(o.symbol); it != m_.shared_symbols.end()) base = it->second;
      for (const ptx::Param& p : e_.params)
        if (p.name == o.symbol) base = p.offset;
    }
    return base + o.offset;
  }

  absl::Status Step(Thread& t);
  absl::Status Collective(Thread& t, const Instr& in);
  absl::Status TryReleaseWarp(int warp);
  absl::Status Arrive(Thread& t, const Instr& in, bool wait);
  absl::Status ReleaseBarriersOfExitedThreads();
  absl::Status Arith(Thread& t, const Instr& in);
  absl::Status Convert(Thread& t, const Instr& in);
  absl::Status LoadStore(Thread& t, const Instr& in);
  absl::Status Atomic(Thread& t, const Instr& in);
  absl::Status CpAsync(Thread& t, const Instr& in);
  absl::StatusOr<Cta*> Peer(const Thread& t, const Instr& in, uint64_t rank) const;
  absl::Status ClusterBarrier(Thread& t, const Instr& in);
  absl::Status RemoteArrive(uint64_t offset, int64_t tx, const Thread& t, const Instr& in);
  std::vector<std::vector<uint64_t>> StMatrix(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s);
  absl::Status Tcgen05(Thread& t, const Instr& in);
  std::vector<std::vector<uint64_t>> TcgenWarp(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s);
  absl::Status RunTcgenMma(const struct TcgenMma& op);
  absl::Status CheckTmemAtExit();
  absl::Status Mbarrier(Thread& t, const Instr& in);
  absl::Status MbarrierComplete(uint64_t offset);
  absl::Status Bulk(Thread& t, const Instr& in);
  absl::Status CompleteAsync(size_t index);
  absl::Status TryReleaseWarpgroup(int group);
  absl::Status CompleteWgmmaGroups(int group, size_t keep);
  absl::StatusOr<const EmulatedTensorMap*> MapAt(Thread& t, const Instr& in, uint64_t generic);
  absl::Status ForEachBoxElement(const EmulatedTensorMap& map, const std::vector<int64_t>& coords, uint64_t smem,
                                 const std::function<absl::Status(uint64_t, uint64_t, bool, int)>& fn);
  static uint64_t Swizzled(uint64_t offset, int swizzle_bytes) {
    // 128B: address bits [4,7) ^= bits [7,10); 64B: [4,6) ^= [7,9); 32B: bit 4 ^= bit 7.
    const int bits = swizzle_bytes == 128 ? 3 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 1 : 0;
    return offset ^ (((offset >> 7) & ((uint64_t{1} << bits) - 1)) << 4);
  }
  void CompleteGroups(Thread& t, size_t keep);
  void Exit(Thread& t) {
    if (!t.open_group.empty()) t.groups.push_back(std::move(t.open_group));  // copies still land
    CompleteGroups(t, 0);
    t.state = Thread::State::kDone;
  }
  std::vector<std::vector<uint64_t>> LdMatrix(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s);
  std::vector<std::vector<uint64_t>> Mma(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s);

  Device& dev_;
  const ptx::Module& m_;
  const ptx::Entry& e_;
  const std::vector<uint8_t>& params_;
  rt::Dim3 grid_, block_, ctaid_;
  std::vector<uint8_t> shared_;
  std::string kernel_;
  std::mt19937_64* rng_;
  int64_t* budget_;
  std::vector<Thread> threads_;
  struct BarrierState {
    int arrived = 0, expected = 0;
    std::vector<int> waiting;
  };
  std::map<int, BarrierState> barriers_;
  const std::vector<EmulatedTensorMap>* maps_;
  ClusterState* cluster_ = nullptr;
  int rank_ = 0;
  bool exited_ = false;
  static constexpr int kClusterBarrier = -2;  // Thread::barrier while waiting at barrier.cluster.wait
  static constexpr uint64_t kOffsetMask = 0xFFFFFF;  // shared::cluster: (rank + 1) << 24 | offset
  struct MbarrierState {
    int expected = 0, pending = 0;
    int64_t tx = 0;
    int phase = 0;  // parity of the phase in progress
    int64_t completed = 0;  // phases completed so far
  };
  std::map<uint64_t, MbarrierState> mbarriers_;  // by shared offset
  // A TMA load in flight.
  struct AsyncLoad {
    const EmulatedTensorMap* map;
    std::vector<int64_t> coords;
    uint64_t dst = 0, mbarrier = 0;
    const Instr* issued_by = nullptr;
    uint64_t Bytes() const {
      uint64_t n = rt::TmaElementBytes(map->spec.dtype);
      for (uint32_t b : map->spec.box) n *= b;
      return n;
    }
  };
  // Shared bytes written through the generic proxy and not yet fenced for the async proxy:
  // the writing thread + 1 (0: clean), and each thread's unfenced ranges.
  std::vector<int32_t> generic_writer_;
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> unfenced_;
  // A shared access that a TMA load in flight will overwrite (the wait for it is missing).
  absl::Status CheckPendingOverlap(const Thread* t, const Instr& in, uint64_t off, uint64_t bytes, const char* what);
  // An async-proxy read (wgmma, tcgen05.mma, TMA store) of bytes a generic store left unfenced.
  absl::Status CheckFenced(const Instr& in, uint64_t off, uint64_t bytes, const char* reader);
  std::vector<AsyncLoad> pending_;
  // Tensor memory: 128 lanes x 512 32-bit columns, and which columns are allocated.
  std::vector<uint32_t> tmem_ = std::vector<uint32_t>(128 * 512, 0);
  std::map<uint32_t, uint32_t> tmem_allocs_;  // first column -> columns
  std::vector<TcgenMma> tcgen_issued_;          // issued, not yet committed (in order)
  struct TcgenCommit {
    std::vector<TcgenMma> mmas;
    uint64_t mbarrier;
  };
  std::vector<TcgenCommit> tcgen_commits_;      // committed, completing in order
  // wgmma: the warpgroup's ops issued since its last commit, and its committed groups.
  struct WgmmaOp {
    std::vector<std::vector<int>> d_regs;  // per thread of the warpgroup
    uint64_t a_desc = 0, b_desc = 0;
    int n = 0;
    bool scale_d = true, negate_a = false, negate_b = false, bf16 = true;
    int line = 0;
    const Instr* in = nullptr;
  };
  struct Warpgroup {
    std::vector<WgmmaOp> open;
    std::vector<std::vector<WgmmaOp>> groups;
  };
  std::map<int, Warpgroup> warpgroups_;
};

absl::Status Cta::Step(Thread& t) {
  if (t.pc >= static_cast<int>(e_.code.size())) {
    Exit(t);
    return absl::OkStatus();
  }
  const Instr& in = e_.code[t.pc];
  if (in.guard >= 0 && ((t.r[in.guard] & 1) != 0) == in.guard_negated) {
    ++t.pc;
    return absl::OkStatus();
  }
  switch (in.op) {
    case Op::kBra:
      t.pc = in.ops.at(0).target;
      return absl::OkStatus();
    case Op::kRet: case Op::kExit:
      Exit(t);
      return absl::OkStatus();
    case Op::kShfl: case Op::kRedux: case Op::kVote: case Op::kLdMatrix: case Op::kMma:
      return Collective(t, in);
    case Op::kCpAsync:
      if (absl::Status s = CpAsync(t, in); !s.ok()) return s;
      break;
    case Op::kMbarrier:
      return Mbarrier(t, in);
    case Op::kCpAsyncBulk:
      if (absl::Status s = Bulk(t, in); !s.ok()) return s;
      break;
    case Op::kWgmma:
      t.state = Thread::State::kWarp;
      return TryReleaseWarpgroup(t.linear / 128);
    case Op::kSetMaxNReg:  // register accounting: no effect on values
      break;
    case Op::kElect:
      return Collective(t, in);
    case Op::kTcgen05: {
      const std::string kind = in.mods.empty() ? "" : in.mods[0];
      if (kind == "alloc" || kind == "dealloc" || kind == "ld" || kind == "relinquish_alloc_permit")
        return Collective(t, in);  // .sync.aligned: the whole warp
      if (absl::Status s = Tcgen05(t, in); !s.ok()) return s;
      break;
    }
    case Op::kMapa: {  // the same shared offset in cluster CTA `rank`
      const uint64_t rank = Read(t, in.ops.at(2), 32);
      if (absl::StatusOr<Cta*> peer = Peer(t, in, rank); !peer.ok()) return peer.status();
      Write(t, in.ops[0], ((rank + 1) << 24) | (Read(t, in.ops.at(1), 32) & kOffsetMask));
      break;
    }
    case Op::kStMatrix:
      return Collective(t, in);
    case Op::kBar:
      if (in.Has("cluster")) return ClusterBarrier(t, in);
      if (in.Has("warp")) break;  // bar.warp.sync: lanes of a warp run apart here anyway
      return Arrive(t, in, !in.Has("arrive"));
    case Op::kLd: case Op::kSt:
      if (absl::Status s = LoadStore(t, in); !s.ok()) return s;
      break;
    case Op::kAtom: case Op::kRed:
      if (absl::Status s = Atomic(t, in); !s.ok()) return s;
      break;
    case Op::kCvt:
      if (absl::Status s = Convert(t, in); !s.ok()) return s;
      break;
    case Op::kMembar: case Op::kFence:
      if (in.op == Op::kFence && !in.mods.empty() && in.mods[0] == "proxy" && in.Has("async")) {
        for (auto [off, n] : unfenced_[t.linear])  // this thread's generic writes now reach the async proxy
          for (uint64_t b = off; b < off + n; ++b)
            if (generic_writer_[b] == t.linear + 1) generic_writer_[b] = 0;
        unfenced_[t.linear].clear();
      }
      break;
    case Op::kCreatePolicy:
      Write(t, in.ops.at(0), 0);
      break;
    default:
      if (absl::Status s = Arith(t, in); !s.ok()) return s;
  }
  ++t.pc;
  return absl::OkStatus();
}

absl::Status Cta::Arith(Thread& t, const Instr& in) {
  const Ty ty = in.type;
  const int bits = ptx::TyBits(ty);
  auto src = [&](int i) { return Read(t, in.ops.at(i), bits == 1 ? 1 : bits); };
  auto f = [&](int i) { return F32(src(i)); };
  const bool sgn = ptx::TyIsSigned(ty);
  auto si = [&](int i) { return SignExtend(src(i), bits); };
  const bool is_f32 = ty == Ty::kF32, is_f64 = ty == Ty::kF64;
  auto put_f = [&](float v) { Write(t, in.ops[0], Bits(in.ftz ? FlushDenormal(v) : v)); };
  switch (in.op) {
    case Op::kMov: {
      const Operand& d = in.ops.at(0);
      const Operand& s = in.ops.at(1);
      if (d.kind == Operand::Kind::kVector) {  // unpack: element 0 from the lowest bits
        const int part = bits / static_cast<int>(d.regs.size());
        const uint64_t v = Read(t, s, bits);
        for (size_t i = 0; i < d.regs.size(); ++i)
          if (d.regs[i] >= 0) t.r[d.regs[i]] = (v >> (part * i)) & Mask(part);
        return absl::OkStatus();
      }
      if (s.kind == Operand::Kind::kVector) {  // pack
        const int part = bits / static_cast<int>(s.regs.size());
        uint64_t v = 0;
        for (size_t i = 0; i < s.regs.size(); ++i) v |= (t.r[s.regs[i]] & Mask(part)) << (part * i);
        Write(t, d, v);
        return absl::OkStatus();
      }
      Write(t, d, Read(t, s, bits == 0 ? 64 : bits));
      return absl::OkStatus();
    }
    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kMad: case Op::kFma: case Op::kDiv: case Op::kRem:
    case Op::kMin: case Op::kMax: {
      if (is_f32) {
        float a = f(1), b = f(2), r = 0;
        if (in.ftz) a = FlushDenormal(a), b = FlushDenormal(b);
        switch (in.op) {
          case Op::kAdd: r = a + b; break;
          case Op::kSub: r = a - b; break;
          case Op::kMul: r = a * b; break;
          case Op::kMad: case Op::kFma: r = std::fma(a, b, in.ftz ? FlushDenormal(f(3)) : f(3)); break;
          case Op::kDiv: r = a / b; break;
          case Op::kMin: r = std::fmin(a, b); break;  // one NaN: the other operand, as PTX's min/max
          case Op::kMax: r = std::fmax(a, b); break;
          default: return Fail(t, in, "not defined on f32");
        }
        put_f(r);
        return absl::OkStatus();
      }
      if (is_f64) {
        double a = F64(src(1)), b = F64(src(2)), r = 0;
        switch (in.op) {
          case Op::kAdd: r = a + b; break;
          case Op::kSub: r = a - b; break;
          case Op::kMul: r = a * b; break;
          case Op::kMad: case Op::kFma: r = std::fma(a, b, F64(src(3))); break;
          case Op::kDiv: r = a / b; break;
          case Op::kMin: r = std::fmin(a, b); break;
          case Op::kMax: r = std::fmax(a, b); break;
          default: return Fail(t, in, "not defined on f64");
        }
        Write(t, in.ops[0], Bits(r));
        return absl::OkStatus();
      }
      if (ptx::TyIsFloat(ty)) return Fail(t, in, "this float type is not emulated yet");
      // Integers: .wide doubles the width of the result; .hi keeps the upper half.
      const uint64_t a = src(1), b = src(2);
      const int64_t sa = si(1), sb = si(2);
      uint64_t r = 0;
      int out_bits = in.wide ? 2 * bits : bits;
      switch (in.op) {
        case Op::kAdd: r = a + b; break;
        case Op::kSub: r = a - b; break;
        case Op::kMul: case Op::kMad: {
          if (in.wide) r = sgn ? static_cast<uint64_t>(sa * sb) : a * b;
          else if (in.hi) {
            __int128 p = sgn ? static_cast<__int128>(sa) * sb : static_cast<__int128>(static_cast<unsigned __int128>(a) * b);
            r = static_cast<uint64_t>(p >> bits);
          } else {
            r = a * b;
          }
          if (in.op == Op::kMad) r += Read(t, in.ops.at(3), out_bits);
          break;
        }
        case Op::kDiv:
          if (b == 0) r = Mask(bits);
          else r = sgn ? static_cast<uint64_t>(sa / sb) : a / b;
          break;
        case Op::kRem:
          if (b == 0) r = a;
          else r = sgn ? static_cast<uint64_t>(sa % sb) : a % b;
          break;
        case Op::kMin: r = sgn ? static_cast<uint64_t>(std::min(sa, sb)) : std::min(a, b); break;
        case Op::kMax: r = sgn ? static_cast<uint64_t>(std::max(sa, sb)) : std::max(a, b); break;
        default: break;
      }
      Write(t, in.ops[0], r & Mask(out_bits));
      return absl::OkStatus();
    }
    case Op::kNeg: case Op::kAbs:
      if (is_f32) put_f(in.op == Op::kNeg ? -f(1) : std::fabs(f(1)));
      else if (ptx::TyIsFloat(ty)) return Fail(t, in, "this float type is not emulated yet");
      else Write(t, in.ops[0], static_cast<uint64_t>(in.op == Op::kNeg ? -si(1) : std::llabs(si(1))) & Mask(bits));
      return absl::OkStatus();
    case Op::kAnd: Write(t, in.ops[0], src(1) & src(2)); return absl::OkStatus();
    case Op::kOr: Write(t, in.ops[0], src(1) | src(2)); return absl::OkStatus();
    case Op::kXor: Write(t, in.ops[0], src(1) ^ src(2)); return absl::OkStatus();
    case Op::kNot: Write(t, in.ops[0], ~src(1) & Mask(bits)); return absl::OkStatus();
    case Op::kShl: case Op::kShr: {
      const uint64_t n = Read(t, in.ops.at(2), 32);  // shift amounts past the width give 0 (or the sign)
      uint64_t r;
      if (in.op == Op::kShl) r = n >= static_cast<uint64_t>(bits) ? 0 : src(1) << n;
      else if (sgn) r = static_cast<uint64_t>(si(1) >> std::min<uint64_t>(n, bits - 1));
      else r = n >= static_cast<uint64_t>(bits) ? 0 : src(1) >> n;
      Write(t, in.ops[0], r & Mask(bits));
      return absl::OkStatus();
    }
    case Op::kBfe: {  // bits pos..pos+len-1 of a, sign-extended for signed types
      const uint64_t pos = Read(t, in.ops.at(2), 32) & 0xff, len = Read(t, in.ops.at(3), 32) & 0xff;
      uint64_t r = 0;
      if (len > 0) {
        const uint64_t field = pos >= static_cast<uint64_t>(bits) ? 0 : (src(1) >> pos) & Mask(static_cast<int>(len));
        r = field;
        if (sgn) {
          const int top = static_cast<int>(std::min<uint64_t>(pos + len, bits) - 1);
          const bool sign = pos + len > static_cast<uint64_t>(bits) ? (src(1) >> (bits - 1)) & 1 : (src(1) >> top) & 1;
          if (sign) r |= ~Mask(static_cast<int>(len));
        }
      }
      Write(t, in.ops[0], r & Mask(bits));
      return absl::OkStatus();
    }
    case Op::kSelp:
      Write(t, in.ops[0], (Read(t, in.ops.at(3), 1) & 1) ? src(1) : src(2));
      return absl::OkStatus();
    case Op::kSetp: {
      bool r = false;
      const std::string& c = in.cmp;
      if (ptx::TyIsFloat(ty)) {
        const double a = is_f64 ? F64(src(1)) : f(1), b = is_f64 ? F64(src(2)) : f(2);
        const bool unordered = std::isnan(a) || std::isnan(b);
        if (c == "num") r = !unordered;
        else if (c == "nan") r = unordered;
        else {
          const bool u = c.size() == 3;  // equ, ltu, ...: true when unordered
          const std::string base = u ? c.substr(0, 2) : c;
          if (unordered) r = u;
          else if (base == "eq") r = a == b;
          else if (base == "ne") r = a != b;
          else if (base == "lt") r = a < b;
          else if (base == "le") r = a <= b;
          else if (base == "gt") r = a > b;
          else if (base == "ge") r = a >= b;
        }
      } else {
        const bool s = sgn && c != "lo" && c != "ls" && c != "hi" && c != "hs";
        const uint64_t a = src(1), b = src(2);
        const int64_t x = si(1), y = si(2);
        if (c == "eq") r = a == b;
        else if (c == "ne") r = a != b;
        else if (c == "lt") r = s ? x < y : a < b;
        else if (c == "le") r = s ? x <= y : a <= b;
        else if (c == "gt") r = s ? x > y : a > b;
        else if (c == "ge") r = s ? x >= y : a >= b;
        else if (c == "lo") r = a < b;
        else if (c == "ls") r = a <= b;
        else if (c == "hi") r = a > b;
        else if (c == "hs") r = a >= b;
        else return Fail(t, in, "unknown comparison");
      }
      Write(t, in.ops[0], r ? 1 : 0);
      return absl::OkStatus();
    }
    case Op::kEx2: case Op::kLg2: case Op::kRsqrt: case Op::kSqrt: case Op::kRcp: {
      if (!is_f32) return Fail(t, in, "only the f32 forms are emulated");
      float a = in.ftz ? FlushDenormal(f(1)) : f(1), r = 0;
      switch (in.op) {
        case Op::kEx2: r = std::exp2(a); break;
        case Op::kLg2: r = std::log2(a); break;
        case Op::kRsqrt: r = 1.0f / std::sqrt(a); break;
        case Op::kSqrt: r = std::sqrt(a); break;
        default: r = 1.0f / a; break;
      }
      put_f(r);
      return absl::OkStatus();
    }
    case Op::kCvta: {
      const bool to = in.Has("to");
      uint64_t v = Read(t, in.ops.at(1), 64);
      if (in.space == Space::kShared) v = to ? v - kSharedWindow : v + kSharedWindow;
      if (in.space == Space::kParam) v = to ? v - kParamWindow : v + kParamWindow;
      Write(t, in.ops[0], v & Mask(bits ? bits : 64));
      return absl::OkStatus();
    }
    default:
      return Fail(t, in, "the emulator does not execute this instruction yet");
  }
}

absl::Status Cta::Convert(Thread& t, const Instr& in) {
  const Ty d = in.type, s = in.src_type;
  if (d == Ty::kBF16x2 || d == Ty::kF16x2) {  // d = {cvt(a) in the upper half, cvt(b) in the lower}
    const float a = F32(Read(t, in.ops.at(1), 32)), b = F32(Read(t, in.ops.at(2), 32));
    auto one = [&](float v) -> uint64_t { return d == Ty::kBF16x2 ? F32ToBf16(v) : F32ToF16(v); };
    Write(t, in.ops[0], (one(a) << 16) | one(b));
    return absl::OkStatus();
  }
  const uint64_t v = Read(t, in.ops.at(1), ptx::TyBits(s));
  double x;  // the source's value
  if (s == Ty::kF32) x = F32(v);
  else if (s == Ty::kF64) x = F64(v);
  else if (s == Ty::kBF16) x = Bf16ToF32(static_cast<uint16_t>(v));
  else if (s == Ty::kF16) x = F16ToF32(static_cast<uint16_t>(v));
  else if (ptx::TyIsSigned(s)) x = static_cast<double>(SignExtend(v, ptx::TyBits(s)));
  else x = static_cast<double>(v);
  const int db = ptx::TyBits(d);
  if (!ptx::TyIsFloat(s) && !ptx::TyIsFloat(d)) {  // integer widths: sign- or zero-extend, truncate
    const uint64_t r = ptx::TyIsSigned(s) ? static_cast<uint64_t>(SignExtend(v, ptx::TyBits(s))) : v;
    Write(t, in.ops[0], r & Mask(db));
    return absl::OkStatus();
  }
  if (ptx::TyIsFloat(d)) {
    if (d == Ty::kF32) {
      float r = static_cast<float>(x);
      if (in.ftz) r = FlushDenormal(r);
      Write(t, in.ops[0], Bits(r));
    } else if (d == Ty::kF64) {
      Write(t, in.ops[0], Bits(x));
    } else if (d == Ty::kBF16) {
      Write(t, in.ops[0], F32ToBf16(static_cast<float>(x)));
    } else if (d == Ty::kF16) {
      Write(t, in.ops[0], F32ToF16(static_cast<float>(x)));
    } else {
      return Fail(t, in, "this conversion is not emulated yet");
    }
    return absl::OkStatus();
  }
  // Float to integer: the rounding modifier (rzi: toward zero, rni: nearest even, ...), saturated
  // to the destination's range; NaN gives 0.
  double r = x;
  if (in.rounding == "rni") r = std::nearbyint(x);
  else if (in.rounding == "rmi") r = std::floor(x);
  else if (in.rounding == "rpi") r = std::ceil(x);
  else r = std::trunc(x);
  if (std::isnan(r)) r = 0;
  if (ptx::TyIsSigned(d)) {
    const double lo = -std::ldexp(1.0, db - 1), hi = std::ldexp(1.0, db - 1) - 1;
    Write(t, in.ops[0], static_cast<uint64_t>(static_cast<int64_t>(std::clamp(r, lo, hi))) & Mask(db));
  } else {
    const double hi = std::ldexp(1.0, db) - 1;
    Write(t, in.ops[0], static_cast<uint64_t>(std::clamp(r, 0.0, hi)) & Mask(db));
  }
  return absl::OkStatus();
}

absl::Status Cta::LoadStore(Thread& t, const Instr& in) {
  const int elem = std::max(1, ptx::TyBits(in.type) / 8);
  const bool load = in.op == Op::kLd;
  const Operand& addr_op = load ? in.ops.at(1) : in.ops.at(0);
  const Operand& val = load ? in.ops.at(0) : in.ops.at(1);
  const uint64_t addr = Address(t, addr_op);
  absl::StatusOr<uint8_t*> p = Memory(t, in, in.space, addr, elem * in.vec);
  if (!p.ok()) return p.status();
  if (*p >= shared_.data() && *p < shared_.data() + shared_.size()) {
    const uint64_t off = *p - shared_.data(), n = static_cast<uint64_t>(elem) * in.vec;
    if (absl::Status s = CheckPendingOverlap(&t, in, off, n, load ? "reads" : "writes"); !s.ok()) return s;
    if (!load) {
      if (generic_writer_.empty()) generic_writer_.assign(shared_.size(), 0);
      std::fill(generic_writer_.begin() + off, generic_writer_.begin() + off + n, t.linear + 1);
      unfenced_[t.linear].push_back({off, n});
    }
  }
  std::vector<int> regs = val.kind == Operand::Kind::kVector ? val.regs : std::vector<int>{val.reg};
  for (int i = 0; i < in.vec && i < static_cast<int>(regs.size()); ++i) {
    uint8_t* at = *p + i * elem;
    if (load) {
      uint64_t v = 0;
      std::memcpy(&v, at, elem);
      if (ptx::TyIsSigned(in.type)) v = static_cast<uint64_t>(SignExtend(v, elem * 8));
      if (regs[i] >= 0) t.r[regs[i]] = v;
    } else {
      uint64_t v = val.kind == Operand::Kind::kVector ? t.r[regs[i]] : Read(t, val, elem * 8);
      std::memcpy(at, &v, elem);
    }
  }
  return absl::OkStatus();
}

absl::Status Cta::Atomic(Thread& t, const Instr& in) {
  const bool result = in.op == Op::kAtom;
  const int base = result ? 1 : 0;
  const int bits = ptx::TyBits(in.type);
  absl::StatusOr<uint8_t*> p = Memory(t, in, in.space, Address(t, in.ops.at(base)), bits / 8);
  if (!p.ok()) return p.status();
  uint64_t old = 0;
  std::memcpy(&old, *p, bits / 8);
  const uint64_t b = Read(t, in.ops.at(base + 1), bits);
  uint64_t r = old;
  const std::string& op = in.cmp;
  if (in.type == Ty::kF32) {
    if (op != "add") return Fail(t, in, "only atom.add on f32 is emulated");
    r = Bits(F32(old) + F32(b));
  } else {
    const bool s = ptx::TyIsSigned(in.type);
    const int64_t so = SignExtend(old, bits), sb = SignExtend(b, bits);
    if (op == "add") r = old + b;
    else if (op == "min") r = s ? static_cast<uint64_t>(std::min(so, sb)) : std::min(old, b);
    else if (op == "max") r = s ? static_cast<uint64_t>(std::max(so, sb)) : std::max(old, b);
    else if (op == "exch") r = b;
    else if (op == "and") r = old & b;
    else if (op == "or") r = old | b;
    else if (op == "xor") r = old ^ b;
    else if (op == "cas") r = old == b ? Read(t, in.ops.at(base + 2), bits) : old;
    else return Fail(t, in, "this atomic operation is not emulated yet");
  }
  r &= Mask(bits);
  std::memcpy(*p, &r, bits / 8);
  if (result) Write(t, in.ops[0], old);
  return absl::OkStatus();
}

// ---- warp collectives: a lane waits until every lane of the member mask is at one

absl::Status Cta::Collective(Thread& t, const Instr& in) {
  t.state = Thread::State::kWarp;
  return TryReleaseWarp(t.linear / 32);
}

absl::Status Cta::TryReleaseWarp(int warp) {
  const int first = warp * 32, n = std::min<int>(32, static_cast<int>(threads_.size()) - first);
  std::vector<Thread*> lanes;
  for (int i = 0; i < n; ++i) lanes.push_back(&threads_[first + i]);
  Thread* some = nullptr;
  for (Thread* l : lanes)
    if (l->state == Thread::State::kWarp) some = l;
  if (!some) return absl::OkStatus();
  const Instr& in = e_.code[some->pc];
  const bool whole_warp =
      in.op == Op::kLdMatrix || in.op == Op::kMma || in.op == Op::kTcgen05 || in.op == Op::kStMatrix;  // .sync.aligned
  const uint32_t members =
      whole_warp ? static_cast<uint32_t>(Mask(n)) : static_cast<uint32_t>(Read(*some, in.ops.back(), 32));
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    if (lanes[i]->state == Thread::State::kDone)
      return Fail(*some, in, absl::StrCat("lane ", i, " of the member mask has exited"));
    if (lanes[i]->state != Thread::State::kWarp) return absl::OkStatus();  // not all here yet
    const Instr& other = e_.code[lanes[i]->pc];
    if (other.op != in.op)
      return Fail(*some, in, absl::StrCat("lane ", i, " waits at a different warp instruction (PTX line ", other.line, ")"));
  }
  for (int i = n; i < 32; ++i)
    if (members >> i & 1) return Fail(*some, in, absl::StrCat("the member mask names lane ", i, ", which this block does not have"));
  // Everyone is here: compute each member lane's result from the values at this moment.
  if (whole_warp) {
    absl::Status s;
    std::vector<std::vector<uint64_t>> out = in.op == Op::kMma        ? Mma(lanes, in, &s)
                                             : in.op == Op::kTcgen05  ? TcgenWarp(lanes, in, &s)
                                             : in.op == Op::kStMatrix ? StMatrix(lanes, in, &s)
                                                                      : LdMatrix(lanes, in, &s);
    if (!s.ok()) return s;
    for (int i = 0; i < n; ++i) {
      Thread& l = *lanes[i];
      const Operand& d = e_.code[l.pc].ops.at(0);
      for (size_t k = 0; k < d.regs.size() && k < out[i].size(); ++k) l.r[d.regs[k]] = out[i][k];
      l.state = Thread::State::kRun;
      ++l.pc;
    }
    return absl::OkStatus();
  }
  std::vector<uint64_t> results(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    Thread& l = *lanes[i];
    const Instr& li = e_.code[l.pc];
    if (li.op == Op::kElect) {  // the lowest lane of the member mask is elected
      const int elected = std::countr_zero(members);
      if (li.ops.at(0).kind == Operand::Kind::kVector) {
        if (li.ops[0].regs[0] >= 0) l.r[li.ops[0].regs[0]] = elected;
        l.r[li.ops[0].regs[1]] = i == elected;
      } else {
        Write(l, li.ops[0], i == elected);
      }
      continue;
    } else if (li.op == Op::kShfl) {
      const uint32_t b = static_cast<uint32_t>(Read(l, li.ops.at(2), 32)) & 31;
      const uint32_t c = static_cast<uint32_t>(Read(l, li.ops.at(3), 32));
      const uint32_t segmask = (c >> 8) & 31, cval = c & 31;
      const int lane = i;
      const int max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask;
      int j = lane;
      bool pval;
      if (li.cmp == "up") j = lane - static_cast<int>(b), pval = j >= max_lane;
      else if (li.cmp == "down") j = lane + static_cast<int>(b), pval = j <= max_lane;
      else if (li.cmp == "bfly") j = lane ^ static_cast<int>(b), pval = j <= max_lane;
      else j = min_lane | (static_cast<int>(b) & ~static_cast<int>(segmask)), pval = j <= max_lane;
      if (!pval) j = lane;
      if (j < 0 || j >= n || !(members >> j & 1))
        return Fail(l, li, absl::StrCat("shfl reads lane ", j, ", which is not in the member mask"));
      results[i] = Read(*lanes[j], e_.code[lanes[j]->pc].ops.at(1), 32);
    } else if (li.op == Op::kRedux || li.op == Op::kVote) {
      uint64_t acc = 0;
      bool first_value = true;
      for (int k = 0; k < n; ++k) {
        if (!(members >> k & 1)) continue;
        const uint64_t v = Read(*lanes[k], e_.code[lanes[k]->pc].ops.at(1), li.op == Op::kVote ? 1 : 32);
        if (li.op == Op::kVote) { acc |= (v & 1) << k; continue; }
        const bool s = ptx::TyIsSigned(li.type);
        const int64_t sv = SignExtend(v, 32), sa = SignExtend(acc, 32);
        if (first_value) acc = v;
        else if (li.cmp == "add") acc = (acc + v) & 0xffffffff;
        else if (li.cmp == "min") acc = s ? static_cast<uint32_t>(std::min(sa, sv)) : std::min(acc, v);
        else if (li.cmp == "max") acc = s ? static_cast<uint32_t>(std::max(sa, sv)) : std::max(acc, v);
        else if (li.cmp == "and") acc &= v;
        else if (li.cmp == "or") acc |= v;
        else if (li.cmp == "xor") acc ^= v;
        first_value = false;
      }
      if (li.op == Op::kVote && li.cmp != "ballot") {
        const uint64_t all = acc == (members & Mask(n)), any = acc != 0;
        acc = li.cmp == "all" ? all : li.cmp == "any" ? any : (all || acc == 0);
      }
      results[i] = acc;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    Thread& l = *lanes[i];
    if (e_.code[l.pc].op != Op::kElect) Write(l, e_.code[l.pc].ops.at(0), results[i]);
    l.state = Thread::State::kRun;
    ++l.pc;
  }
  return absl::OkStatus();
}

// ---- Ampere's tensor-core data movement and MMA (PTX ISA: ldmatrix, mma.m16n8k16 fragments)

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i..8i+7 give the row addresses
// of matrix i; lane t receives row t/4, columns 2(t%4) and 2(t%4)+1 of each matrix (with .trans,
// of its transpose), the lower column in the lower half.
std::vector<std::vector<uint64_t>> Cta::LdMatrix(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s) {
  const int matrices = in.vec, n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n, std::vector<uint64_t>(matrices, 0));
  if (n < 32) {
    *s = Fail(*lanes[0], in, "ldmatrix needs a whole warp");
    return out;
  }
  auto element = [&](int matrix, int row, int col) -> uint64_t {
    Thread& src = *lanes[8 * matrix + row];
    const uint64_t addr = Address(src, e_.code[src.pc].ops.at(1)) + 2 * col;
    absl::StatusOr<uint8_t*> p = Memory(src, e_.code[src.pc], Space::kShared, addr, 2);
    if (!p.ok()) {
      if (s->ok()) *s = p.status();
      return 0;
    }
    uint16_t v;
    std::memcpy(&v, *p, 2);
    return v;
  };
  for (int t = 0; t < 32; ++t)
    for (int m = 0; m < matrices; ++m) {
      const int r = t / 4, c = 2 * (t % 4);
      const uint64_t lo = in.Has("trans") ? element(m, c, r) : element(m, r, c);
      const uint64_t hi = in.Has("trans") ? element(m, c + 1, r) : element(m, r, c + 1);
      out[t][m] = lo | hi << 16;
    }
  return out;
}

// mma.sync.aligned.m16n8k16.row.col: D (16x8) = A (16x16) * B (16x8) + C with the ISA's fragments
// (g = lane / 4, t = lane % 4): A reg j holds row g + 8(j%2), columns 2t + 8(j/2) and the next;
// B reg j holds rows 2t + 8j and the next of column g; f32 C/D reg j holds row g + 8(j/2),
// column 2t + j%2 (f16: reg j packs row g + 8j, columns 2t and 2t+1).
std::vector<std::vector<uint64_t>> Cta::Mma(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  const bool f32_acc = in.type == Ty::kF32;
  std::vector<std::vector<uint64_t>> out(n, std::vector<uint64_t>(f32_acc ? 4 : 2, 0));
  if (!in.Has("m16n8k16") || !in.Has("row") || !in.Has("col") || n < 32 ||
      (in.src_type != Ty::kBF16 && in.src_type != Ty::kF16)) {
    *s = Fail(*lanes[0], in, "only mma.sync m16n8k16.row.col with bf16/f16 inputs is emulated");
    return out;
  }
  auto half = [](uint64_t reg, int which) { return static_cast<uint16_t>(reg >> (16 * which)); };
  auto input = [&](uint16_t h) -> double { return in.src_type == Ty::kBF16 ? Bf16ToF32(h) : F16ToF32(h); };
  auto reg = [&](int lane, int operand, int j) { return lanes[lane]->r[e_.code[lanes[lane]->pc].ops.at(operand).regs.at(j)]; };
  double a[16][16], b[16][8], c[16][8];
  for (int row = 0; row < 16; ++row)
    for (int k = 0; k < 16; ++k)
      a[row][k] = input(half(reg((row % 8) * 4 + (k % 8) / 2, 1, row / 8 + 2 * (k / 8)), k % 2));
  for (int k = 0; k < 16; ++k)
    for (int col = 0; col < 8; ++col) b[k][col] = input(half(reg(col * 4 + (k % 8) / 2, 2, k / 8), k % 2));
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      const int lane = (row % 8) * 4 + col / 2;
      c[row][col] = f32_acc ? F32(reg(lane, 3, (row / 8) * 2 + col % 2)) : F16ToF32(half(reg(lane, 3, row / 8), col % 2));
    }
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      double d = c[row][col];
      for (int k = 0; k < 16; ++k) d += a[row][k] * b[k][col];
      const int lane = (row % 8) * 4 + col / 2;
      if (f32_acc) out[lane][(row / 8) * 2 + col % 2] = Bits(static_cast<float>(d));
      else out[lane][row / 8] |= uint64_t{F32ToF16(static_cast<float>(d))} << (16 * (col % 2));
    }
  return out;
}

// cp.async.{ca,cg}.shared.global [dst], [src], size[, src_size] (bytes past src_size are zeros);
// cp.async.commit_group; cp.async.wait_group N; cp.async.wait_all.
absl::Status Cta::CpAsync(Thread& t, const Instr& in) {
  if (in.Has("commit_group")) {
    t.groups.push_back(std::move(t.open_group));
    t.open_group.clear();
    return absl::OkStatus();
  }
  if (in.Has("wait_group")) {
    CompleteGroups(t, Read(t, in.ops.at(0), 32));
    return absl::OkStatus();
  }
  if (in.Has("wait_all")) {
    if (!t.open_group.empty()) t.groups.push_back(std::move(t.open_group));
    t.open_group.clear();
    CompleteGroups(t, 0);
    return absl::OkStatus();
  }
  const int size = static_cast<int>(Read(t, in.ops.at(2), 32));
  const int src_size = in.ops.size() > 3 ? static_cast<int>(Read(t, in.ops.at(3), 32)) : size;
  if (size != 4 && size != 8 && size != 16) return Fail(t, in, "cp.async copies 4, 8 or 16 bytes");
  AsyncCopy copy;
  copy.shared_offset = Address(t, in.ops.at(0));
  if (absl::StatusOr<uint8_t*> dst = Memory(t, in, Space::kShared, copy.shared_offset, size); !dst.ok()) return dst.status();
  copy.bytes.assign(size, 0);
  if (src_size > 0) {
    absl::StatusOr<uint8_t*> src = Memory(t, in, Space::kGlobal, Address(t, in.ops.at(1)), std::min(size, src_size));
    if (!src.ok()) return src.status();
    std::memcpy(copy.bytes.data(), *src, std::min(size, src_size));
  }
  t.open_group.push_back(std::move(copy));
  return absl::OkStatus();
}

void Cta::CompleteGroups(Thread& t, size_t keep) {
  while (t.groups.size() > keep) {
    for (const AsyncCopy& c : t.groups.front())
      std::memcpy(shared_.data() + c.shared_offset, c.bytes.data(), c.bytes.size());
    t.groups.erase(t.groups.begin());
  }
}

// ---- Hopper: mbarriers, TMA (cp.async.bulk.tensor) and wgmma

// mbarrier.init / arrive[.expect_tx] / expect_tx / try_wait.parity / test_wait.parity on a 64-bit
// barrier in shared memory: an expected arrival count, the arrivals still pending in the current
// phase, a transaction count, and the phase's parity. A phase completes when its arrivals and
// transactions are both done; try_wait.parity P is true once the phase of parity P completed.
absl::Status Cta::Mbarrier(Thread& t, const Instr& in) {
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  const Operand* addr_op = nullptr;
  for (const Operand& o : in.ops)
    if (o.kind == Operand::Kind::kAddress) addr_op = &o;
  if (!addr_op) return Fail(t, in, "an mbarrier instruction without an address");
  uint64_t off = Address(t, *addr_op);
  if ((off >> 24) != 0) {  // a barrier of a cluster peer (mapa): arrivals only
    absl::StatusOr<Cta*> peer = Peer(t, in, (off >> 24) - 1);
    if (!peer.ok()) return peer.status();
    off &= kOffsetMask;
    if (*peer != this) {
      if (kind != "arrive") return Fail(t, in, "only arrivals reach the mbarrier of another CTA");
      const int64_t tx = in.Has("expect_tx") ? static_cast<int64_t>(Read(t, in.ops.back(), 32)) : 0;
      ++t.pc;
      return (*peer)->RemoteArrive(off, tx, t, in);
    }
  }
  if (absl::StatusOr<uint8_t*> p = Memory(t, in, Space::kShared, off, 8); !p.ok()) return p.status();
  if (kind == "init") {
    const int count = static_cast<int>(Read(t, in.ops.back(), 32));
    if (count < 1) return Fail(t, in, absl::StrCat("an mbarrier expects at least one arrival, not ", count));
    mbarriers_[off] = MbarrierState{count, count, 0, 0};
    ++t.pc;
    return absl::OkStatus();
  }
  auto it = mbarriers_.find(off);
  if (it == mbarriers_.end())
    return Fail(t, in, absl::StrFormat("the mbarrier at shared offset %d was never initialised", off));
  MbarrierState& b = it->second;
  if (kind == "arrive" || kind == "arrive_drop" || kind == "expect_tx") {
    if (in.Has("expect_tx") || kind == "expect_tx") b.tx += static_cast<int64_t>(Read(t, in.ops.back(), 32));
    if (kind != "expect_tx") {
      if (--b.pending < 0)
        return Fail(t, in, absl::StrFormat("an arrival beyond the %d the mbarrier at shared offset %d expects in this phase",
                                           b.expected, off));
      if (kind == "arrive_drop") --b.expected;
      if (in.ops[0].kind == Operand::Kind::kReg) Write(t, in.ops[0], static_cast<uint64_t>(b.phase));
    }
    ++t.pc;
    return MbarrierComplete(off);
  }
  if (kind == "try_wait" || kind == "test_wait") {
    const int parity = static_cast<int>(Read(t, in.ops.back(), 32) & 1);
    // The phase meant: of this parity, the one before the thread's next unseen phase (phase -1,
    // of parity 1, counts as complete: the producer's first wait on an empty slot) or its next.
    // The ISA's parity names only the current or the immediately preceding phase; a thread two
    // phases behind would wait on the wrong one (on a GPU: hang, or run on with stale data).
    int64_t& next = t.next_phase[off];
    const int64_t meant = ((next - 1) & 1) == parity ? next - 1 : next;
    if (b.completed >= meant + 2)
      return Fail(t, in, absl::StrFormat("this thread waits for phase %d (parity %d) of the mbarrier at shared offset %d, "
                                         "which has completed %d phases: it fell two phases behind (nothing holds the "
                                         "other threads until it has waited: give it an arrival, or a barrier)",
                                         meant, parity, off, b.completed));
    const bool done = b.completed > meant;
    if (done && kind == "try_wait") next = meant + 1;
    if (!done && kind == "try_wait") {  // blocks until the phase completes, then runs again
      t.state = Thread::State::kMbarrier;
      t.mbarrier = off;
      return absl::OkStatus();
    }
    Write(t, in.ops[0], done ? 1 : 0);
    ++t.pc;
    return absl::OkStatus();
  }
  return Fail(t, in, "this mbarrier operation is not emulated yet");
}

absl::Status Cta::MbarrierComplete(uint64_t offset) {
  MbarrierState& b = mbarriers_[offset];
  if (b.pending != 0 || b.tx != 0) return absl::OkStatus();
  b.phase ^= 1;
  ++b.completed;
  b.pending = b.expected;
  for (Thread& w : threads_)
    if (w.state == Thread::State::kMbarrier && w.mbarrier == offset) w.state = Thread::State::kRun;
  return absl::OkStatus();
}

absl::StatusOr<const EmulatedTensorMap*> Cta::MapAt(Thread& t, const Instr& in, uint64_t generic) {
  absl::StatusOr<uint8_t*> p = Memory(t, in, Space::kGeneric, generic, 16);
  if (!p.ok()) return p.status();
  uint64_t magic, index;
  std::memcpy(&magic, *p, 8);
  std::memcpy(&index, *p + 8, 8);
  if (magic != kTensorMapMagic || !maps_ || index >= maps_->size())
    return Fail(t, in, "the tensor map operand does not point at a tensor map the launcher encoded");
  return &(*maps_)[index];
}

// cp.async.bulk.tensor loads (global -> shared, completing on an mbarrier) and stores (shared ->
// global, in bulk groups); cp.async.bulk.commit_group / wait_group. A load lands when the
// scheduler completes it; a store is done at issue (its group is complete at once).
absl::Status Cta::Bulk(Thread& t, const Instr& in) {
  if (in.Has("commit_group") || in.Has("wait_group")) return absl::OkStatus();
  if (in.mods.empty() || in.mods[0] != "tensor") return Fail(t, in, "this bulk copy is not emulated yet");
  const bool load = in.ops.at(1).kind == Operand::Kind::kAddress && !in.ops.at(1).regs.empty();
  const Operand& map_op = load ? in.ops.at(1) : in.ops.at(0);
  absl::StatusOr<const EmulatedTensorMap*> map = MapAt(t, in, Address(t, map_op));
  if (!map.ok()) return map.status();
  std::vector<int64_t> coords;
  for (int r : map_op.regs) coords.push_back(SignExtend(t.r[r], 32));
  if (coords.size() != (*map)->spec.box.size())
    return Fail(t, in, absl::StrCat("a rank-", (*map)->spec.box.size(), " tensor map with ", coords.size(), " coordinates"));
  const uint64_t smem = Address(t, load ? in.ops.at(0) : in.ops.at(1));
  if (smem % 128) return Fail(t, in, absl::StrFormat("the shared address %d of a TMA box is not 128-byte aligned", smem));
  if (load) {
    const uint64_t bar = Address(t, in.ops.at(2));
    if (!in.Has("multicast::cluster")) {
      pending_.push_back({*map, coords, smem & kOffsetMask, bar, &in});
      return absl::OkStatus();
    }
    // The box lands at the same offset in every CTA of the mask, each completing on its own
    // barrier at the same offset.
    const uint64_t mask = Read(t, in.ops.at(3), 16);
    for (uint64_t r = 0; r < 16; ++r) {
      if (!(mask >> r & 1)) continue;
      absl::StatusOr<Cta*> peer = Peer(t, in, r);
      if (!peer.ok()) return peer.status();
      (*peer)->pending_.push_back({*map, coords, smem & kOffsetMask, bar & kOffsetMask, &in});
    }
    return absl::OkStatus();
  }
  // Store: every in-bounds element of the box, read through the swizzle.
  return ForEachBoxElement(**map, coords, smem, [&](uint64_t shared, uint64_t global, bool inside, int es) {
    if (!inside) return absl::OkStatus();
    if (shared + es > shared_.size()) return Fail(t, in, "a TMA store reads past the block's shared memory");
    if (absl::Status s = CheckFenced(in, shared, es, "a TMA store"); !s.ok()) return s;
    if (absl::Status s = CheckPendingOverlap(&t, in, shared, es, "stores from"); !s.ok()) return s;
    uint8_t* to = dev_.Find(global, es);
    if (!to) return Fail(t, in, absl::StrFormat("a TMA store writes outside any allocation (0x%x)", global));
    std::memcpy(to, shared_.data() + shared, es);
    return absl::OkStatus();
  });
}

// Calls fn(shared offset through the swizzle, global address, inside the tensor, element bytes)
// for each element of the box at `coords`, innermost dimension fastest, as TMA lays a box out.
absl::Status Cta::ForEachBoxElement(const EmulatedTensorMap& map, const std::vector<int64_t>& coords, uint64_t smem,
                                    const std::function<absl::Status(uint64_t, uint64_t, bool, int)>& fn) {
  const rt::TensorMapSpec& s = map.spec;
  const int es = rt::TmaElementBytes(s.dtype), swz = s.swizzle == rt::TmaSwizzle::kNone ? 0 : 16 << static_cast<int>(s.swizzle);
  int64_t total = 1;
  for (uint32_t b : s.box) total *= b;
  for (int64_t linear = 0; linear < total; ++linear) {
    int64_t rest = linear;
    uint64_t g = map.address;
    bool inside = true;
    for (size_t d = 0; d < s.box.size(); ++d) {
      const int64_t c = coords[d] + rest % s.box[d];
      rest /= s.box[d];
      inside &= c >= 0 && c < static_cast<int64_t>(s.dims[d]);
      g += c * (d == 0 ? es : s.strides_bytes[d - 1]);
    }
    if (absl::Status st = fn(Swizzled(smem + linear * es, swz), g, inside, es); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Cta::CompleteAsync(size_t index) {
  AsyncLoad op = pending_[index];
  pending_.erase(pending_.begin() + index);
  int64_t bytes = 0;
  absl::Status landed = ForEachBoxElement(*op.map, op.coords, op.dst, [&](uint64_t to, uint64_t g, bool inside, int es) {
    bytes += es;
    if (to + es > shared_.size())
      return absl::InvalidArgumentError(absl::StrCat(kernel_, ": a TMA box lands past the block's shared memory"));
    if (!generic_writer_.empty())  // what the async proxy wrote needs no fence to be read by it
      std::fill(generic_writer_.begin() + to, generic_writer_.begin() + to + es, 0);
    if (!inside) {  // out of bounds: zero fill
      std::memset(shared_.data() + to, 0, es);
      return absl::OkStatus();
    }
    const uint8_t* from = dev_.Find(g, es);
    if (!from)
      return absl::InvalidArgumentError(absl::StrFormat("%s: a TMA load reads outside any allocation (0x%x)", kernel_, g));
    std::memcpy(shared_.data() + to, from, es);
    return absl::OkStatus();
  });
  if (!landed.ok()) return landed;
  if ((op.mbarrier >> 24) != 0 && cluster_) {  // completes on a peer's barrier (a CTA pair's leader)
    const uint64_t rank = (op.mbarrier >> 24) - 1;
    if (rank >= cluster_->ctas.size())
      return absl::InvalidArgumentError(absl::StrCat(kernel_, ": a TMA load completes on cluster CTA ", rank, ", outside the cluster"));
    Cta* peer = cluster_->ctas[rank];
    if (peer != this) {
      auto pit = peer->mbarriers_.find(op.mbarrier & kOffsetMask);
      if (pit == peer->mbarriers_.end())
        return absl::InvalidArgumentError(absl::StrFormat("%s: a TMA load completes on shared offset %d of cluster CTA %d, "
                                                          "which holds no initialised mbarrier", kernel_,
                                                          op.mbarrier & kOffsetMask, rank));
      pit->second.tx -= bytes;
      return peer->MbarrierComplete(op.mbarrier & kOffsetMask);
    }
    op.mbarrier &= kOffsetMask;
  }
  auto it = mbarriers_.find(op.mbarrier);
  if (it == mbarriers_.end())
    return absl::InvalidArgumentError(absl::StrFormat("%s: a TMA load completes on shared offset %d, which holds no "
                                                      "initialised mbarrier", kernel_, op.mbarrier));
  it->second.tx -= bytes;  // the whole box counts, zero fill included
  return MbarrierComplete(op.mbarrier);
}

// wgmma.fence / mma_async / commit_group / wait_group: each a meeting of the warpgroup's 128
// threads. mma_async joins the open group with its descriptors and registers; wait_group N
// computes every group but the newest N, so accumulators change only there, as on the GPU.
absl::Status Cta::TryReleaseWarpgroup(int group) {
  const int first = group * 128;
  if (first + 128 > static_cast<int>(threads_.size()))
    return Fail(threads_[first], e_.code[threads_[first].pc], "wgmma needs a whole warpgroup of 128 threads");
  for (int i = first; i < first + 128; ++i) {
    if (threads_[i].state == Thread::State::kDone)
      return Fail(threads_[first], e_.code[threads_[first].pc], absl::StrCat("thread ", i, " of the warpgroup has exited"));
    if (threads_[i].state != Thread::State::kWarp) return absl::OkStatus();
  }
  Thread& t0 = threads_[first];
  const Instr& in = e_.code[t0.pc];
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  for (int i = first; i < first + 128; ++i) {
    const Instr& other = e_.code[threads_[i].pc];
    if (other.op != Op::kWgmma || other.mods.empty() || other.mods[0] != kind)
      return Fail(threads_[i], other, absl::StrCat("the warpgroup is split between wgmma.", kind, " (PTX line ", in.line,
                                                   ") and this"));
  }
  Warpgroup& wg = warpgroups_[group];
  if (kind == "mma_async") {
    WgmmaOp op;
    op.line = in.line;
    op.in = &in;
    for (const std::string& m : in.mods)
      if (m.size() > 4 && m[0] == 'm' && m.find('n') != std::string::npos && m.find('k') != std::string::npos)
        op.n = std::atoi(m.substr(m.find('n') + 1).c_str());
    op.bf16 = in.Has("bf16");
    if (!in.Has("f32") || (!op.bf16 && !in.Has("f16")) || op.n % 8 || op.n < 8 || op.n > 256)
      return Fail(t0, in, "only wgmma m64nNk16 with bf16/f16 inputs and f32 accumulators is emulated");
    if (in.ops.at(1).kind == Operand::Kind::kVector)
      return Fail(t0, in, "wgmma with A from registers is not emulated yet");
    op.a_desc = Read(t0, in.ops.at(1), 64);
    op.b_desc = Read(t0, in.ops.at(2), 64);
    op.scale_d = Read(t0, in.ops.at(3), 1) & 1;
    op.negate_a = SignExtend(Read(t0, in.ops.at(4), 32), 32) < 0;
    op.negate_b = SignExtend(Read(t0, in.ops.at(5), 32), 32) < 0;
    if (Read(t0, in.ops.at(6), 32) || Read(t0, in.ops.at(7), 32))
      return Fail(t0, in, "transposed (MN-major) wgmma operands are not emulated yet");
    for (int i = first; i < first + 128; ++i) {
      const Instr& mine = e_.code[threads_[i].pc];
      if (Read(threads_[i], mine.ops.at(1), 64) != op.a_desc || Read(threads_[i], mine.ops.at(2), 64) != op.b_desc)
        return Fail(threads_[i], mine, "wgmma descriptors differ across the warpgroup");
      op.d_regs.push_back(mine.ops.at(0).regs);
      if (static_cast<int>(mine.ops.at(0).regs.size()) != op.n / 2)
        return Fail(threads_[i], mine, absl::StrCat("an m64n", op.n, " accumulator has ", op.n / 2, " registers"));
    }
    wg.open.push_back(std::move(op));
  } else if (kind == "commit_group") {
    wg.groups.push_back(std::move(wg.open));
    wg.open.clear();
  } else if (kind == "wait_group") {
    if (absl::Status s = CompleteWgmmaGroups(group, Read(t0, in.ops.at(0), 32)); !s.ok()) return s;
  } else if (kind != "fence") {
    return Fail(t0, in, "this wgmma instruction is not emulated yet");
  }
  for (int i = first; i < first + 128; ++i) {
    threads_[i].state = Thread::State::kRun;
    ++threads_[i].pc;
  }
  return absl::OkStatus();
}

// A descriptor's element (row, k) of a K-major operand (PTX ISA, matrix descriptors): start
// address, leading byte offset (between 8-column core matrices along K, without swizzle), stride
// byte offset (between 8-row groups), and the swizzle mode in bits 62-63 (1: 128B, 2: 64B, 3: 32B).
absl::Status Cta::CompleteWgmmaGroups(int group, size_t keep) {
  Warpgroup& wg = warpgroups_[group];
  while (wg.groups.size() > keep) {
    for (const WgmmaOp& op : wg.groups.front()) {
      auto element = [&](uint64_t desc, int row, int k, double* out) -> absl::Status {
        const uint64_t start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4, sbo = ((desc >> 32) & 0x3fff) << 4;
        const int mode = static_cast<int>(desc >> 62), span = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
        uint64_t addr = span ? Swizzled(start + (row / 8) * sbo + (row % 8) * span + k * 2, span)
                             : start + (row / 8) * sbo + (k / 8) * lbo + (row % 8) * 16 + (k % 8) * 2;
        if (addr + 2 > shared_.size())
          return absl::InvalidArgumentError(absl::StrFormat("%s: PTX line %d: a wgmma descriptor reads shared offset %d, "
                                                            "past the block's %d bytes", kernel_, op.line, addr, shared_.size()));
        if (absl::Status s = CheckFenced(*op.in, addr, 2, "wgmma"); !s.ok()) return s;
        if (absl::Status s = CheckPendingOverlap(nullptr, *op.in, addr, 2, "wgmma reads"); !s.ok()) return s;
        uint16_t h;
        std::memcpy(&h, shared_.data() + addr, 2);
        *out = op.bf16 ? Bf16ToF32(h) : F16ToF32(h);
        return absl::OkStatus();
      };
      std::vector<double> a(64 * 16), b(op.n * 16);
      for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 16; ++k)
          if (absl::Status s = element(op.a_desc, r, k, &a[r * 16 + k]); !s.ok()) return s;
      for (int n = 0; n < op.n; ++n)
        for (int k = 0; k < 16; ++k)
          if (absl::Status s = element(op.b_desc, n, k, &b[n * 16 + k]); !s.ok()) return s;
      const double sign = (op.negate_a ? -1.0 : 1.0) * (op.negate_b ? -1.0 : 1.0);
      for (int t = 0; t < 128; ++t) {
        Thread& th = threads_[group * 128 + t];
        const int warp = t / 32, lane = t % 32;
        for (int i = 0; i < op.n / 2; ++i) {
          const int pair = i / 2;
          const int row = 16 * warp + lane / 4 + 8 * (pair % 2), col = 8 * (pair / 2) + 2 * (lane % 4) + i % 2;
          double d = op.scale_d ? F32(th.r[op.d_regs[t][i]]) : 0.0;
          for (int k = 0; k < 16; ++k) d += sign * a[row * 16 + k] * b[col * 16 + k];
          th.r[op.d_regs[t][i]] = Bits(static_cast<float>(d));
        }
      }
    }
    wg.groups.erase(wg.groups.begin());
  }
  return absl::OkStatus();
}

// ---- Blackwell: tensor memory and tcgen05 (PTX ISA: tcgen05 instructions, the instruction
// descriptor for kind::f16, the shared memory descriptor, the 32x32b data path)

absl::Status Cta::Tcgen05(Thread& t, const Instr& in) {
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  if (kind == "mma") {
    if (!in.Has("cta_group::1") || !in.Has("kind::f16"))
      return Fail(t, in, "only tcgen05.mma.cta_group::1.kind::f16 is emulated so far");
    TcgenMma op;
    op.d = static_cast<uint32_t>(Address(t, in.ops.at(0)));
    op.a_desc = Read(t, in.ops.at(1), 64);
    op.b_desc = Read(t, in.ops.at(2), 64);
    op.idesc = static_cast<uint32_t>(Read(t, in.ops.at(3), 32));
    op.accumulate = Read(t, in.ops.at(4), 1) & 1;
    op.line = in.line;
    op.in = &in;
    tcgen_issued_.push_back(op);
    return absl::OkStatus();
  }
  if (kind == "commit") {  // the mbarrier gets one arrival when every earlier tcgen05.mma completes
    if (in.Has("multicast::cluster")) return Fail(t, in, "multicast commits are not emulated yet");
    const uint64_t bar = Address(t, in.ops.at(0));
    if (!mbarriers_.count(bar))
      return Fail(t, in, absl::StrFormat("tcgen05.commit to shared offset %d, which holds no initialised mbarrier", bar));
    tcgen_commits_.push_back({std::move(tcgen_issued_), bar});
    tcgen_issued_.clear();
    return absl::OkStatus();
  }
  if (absl::StartsWith(kind, "fence") || absl::StartsWith(kind, "wait")) return absl::OkStatus();  // ld is synchronous here
  return Fail(t, in, "this tcgen05 instruction is not emulated yet");
}

std::vector<std::vector<uint64_t>> Cta::TcgenWarp(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n);
  Thread& t = *lanes[0];
  const std::string kind = in.mods[0];
  if (kind == "relinquish_alloc_permit") return out;
  if (kind == "alloc") {
    const uint32_t cols = static_cast<uint32_t>(Read(t, in.ops.at(1), 32));
    if (cols < 32 || cols > 512 || (cols & (cols - 1))) {
      *s = Fail(t, in, absl::StrCat("tcgen05.alloc of ", cols, " columns: a power of two from 32 to 512"));
      return out;
    }
    uint32_t first = 512;
    for (uint32_t c = 0; c + cols <= 512 && first == 512; c += cols) {
      bool free = true;
      for (const auto& [start, size] : tmem_allocs_) free &= c + cols <= start || start + size <= c;
      if (free) first = c;
    }
    if (first == 512) {
      uint32_t used = 0;
      for (const auto& [start, size] : tmem_allocs_) used += size;
      *s = Fail(t, in, absl::StrCat("tensor memory exhausted: ", cols, " more columns asked, ", used,
                                    " of 512 already allocated"));
      return out;
    }
    tmem_allocs_[first] = cols;
    absl::StatusOr<uint8_t*> slot = Memory(t, in, Space::kShared, Address(t, in.ops.at(0)), 4);
    if (!slot.ok()) {
      *s = slot.status();
      return out;
    }
    const uint32_t address = first;  // lane 0, column `first`
    std::memcpy(*slot, &address, 4);
    return out;
  }
  if (kind == "dealloc") {
    const uint32_t address = static_cast<uint32_t>(Read(t, in.ops.at(0), 32));
    const uint32_t cols = static_cast<uint32_t>(Read(t, in.ops.at(1), 32));
    auto it = tmem_allocs_.find(address & 0xffff);
    if (it == tmem_allocs_.end() || it->second != cols || (address >> 16) != 0) {
      *s = Fail(t, in, absl::StrFormat("tcgen05.dealloc of %d columns at 0x%x, which is not an allocation", cols, address));
      return out;
    }
    tmem_allocs_.erase(it);
    return out;
  }
  if (kind == "ld") {  // 32x32b.xN: lane i of the warp reads TMEM lane base + i, N columns
    if (!in.Has("32x32b")) {
      *s = Fail(t, in, "only the 32x32b tcgen05.ld shape is emulated so far");
      return out;
    }
    int num = 0;
    for (const std::string& m : in.mods)
      if (m.size() > 1 && m[0] == 'x' && std::isdigit(static_cast<unsigned char>(m[1]))) num = std::atoi(m.c_str() + 1);
    const uint32_t address = static_cast<uint32_t>(Address(t, in.ops.at(1)));
    const uint32_t lane0 = address >> 16, col0 = address & 0xffff;
    const int quarter = (t.linear / 32) % 4;
    if (lane0 != static_cast<uint32_t>(32 * quarter)) {
      *s = Fail(t, in, absl::StrCat("warp ", t.linear / 32, " may access TMEM lanes ", 32 * quarter, "..",
                                    32 * quarter + 31, ", not from lane ", lane0));
      return out;
    }
    bool inside = false;
    for (const auto& [start, size] : tmem_allocs_) inside |= col0 >= start && col0 + num <= start + size;
    if (!inside) {
      *s = Fail(t, in, absl::StrCat("tcgen05.ld of columns ", col0, "..", col0 + num - 1,
                                    " outside every tensor memory allocation"));
      return out;
    }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < num; ++j) out[i].push_back(tmem_[(lane0 + i) * 512 + col0 + j]);
    return out;
  }
  *s = Fail(t, in, "this tcgen05 instruction is not emulated yet");
  return out;
}

absl::Status Cta::RunTcgenMma(const TcgenMma& op) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: PTX line %d: tcgen05.mma: %s", kernel_, op.line, what));
  };
  const uint32_t d = op.idesc;
  const int c_format = (d >> 4) & 3, a_format = (d >> 7) & 7, b_format = (d >> 10) & 7;
  const bool neg_a = (d >> 13) & 1, neg_b = (d >> 14) & 1, a_mn = (d >> 15) & 1, b_mn = (d >> 16) & 1;
  const int n = ((d >> 17) & 0x3f) << 3, m = ((d >> 24) & 0x1f) << 4;
  if (c_format != 1) return fail("only f32 accumulators are emulated so far");
  if (a_format > 1 || b_format > 1 || a_format != b_format) return fail("A and B must both be f16 or both bf16");
  if (a_mn || b_mn) return fail("MN-major operands are not emulated yet");
  if (m != 128 || n < 8 || n > 256) return fail(absl::StrCat("the shape M=", m, " N=", n, " is not emulated yet"));
  const bool bf16 = a_format == 1;
  auto element = [&](uint64_t desc, int row, int k, double* out) -> absl::Status {
    const uint64_t start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4, sbo = ((desc >> 32) & 0x3fff) << 4;
    const int version = (desc >> 46) & 3, base = (desc >> 49) & 7, layout = static_cast<int>(desc >> 61);
    if (version != 1) return fail(absl::StrCat("a shared memory descriptor of version ", version, " (must be 1)"));
    if (base != 0) return fail("descriptor base offsets are not emulated yet");
    const int span = layout == 2 ? 128 : layout == 4 ? 64 : layout == 6 ? 32 : 0;
    if (layout != 0 && span == 0) return fail(absl::StrCat("the descriptor layout ", layout, " is not emulated yet"));
    const uint64_t addr = span ? Swizzled(start + (row / 8) * sbo + (row % 8) * span + k * 2, span)
                               : start + (row / 8) * sbo + (k / 8) * lbo + (row % 8) * 16 + (k % 8) * 2;
    if (addr + 2 > shared_.size()) return fail(absl::StrFormat("a descriptor reads shared offset %d, past the block", addr));
    if (absl::Status s = CheckFenced(*op.in, addr, 2, "tcgen05.mma"); !s.ok()) return s;
    if (absl::Status s = CheckPendingOverlap(nullptr, *op.in, addr, 2, "tcgen05.mma reads"); !s.ok()) return s;
    uint16_t h;
    std::memcpy(&h, shared_.data() + addr, 2);
    *out = bf16 ? Bf16ToF32(h) : F16ToF32(h);
    return absl::OkStatus();
  };
  std::vector<double> a(m * 16), b(n * 16);
  for (int r = 0; r < m; ++r)
    for (int k = 0; k < 16; ++k)
      if (absl::Status s = element(op.a_desc, r, k, &a[r * 16 + k]); !s.ok()) return s;
  for (int c = 0; c < n; ++c)
    for (int k = 0; k < 16; ++k)
      if (absl::Status s = element(op.b_desc, c, k, &b[c * 16 + k]); !s.ok()) return s;
  const uint32_t lane0 = op.d >> 16, col0 = op.d & 0xffff;
  bool inside = lane0 == 0;
  if (inside) {
    inside = false;
    for (const auto& [start, size] : tmem_allocs_) inside |= col0 >= start && col0 + n <= start + size;
  }
  if (!inside) return fail(absl::StrFormat("D at TMEM 0x%x (%d columns) is outside every allocation", op.d, n));
  const double sign = (neg_a ? -1.0 : 1.0) * (neg_b ? -1.0 : 1.0);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      uint32_t& cell = tmem_[(lane0 + r) * 512 + col0 + c];
      double acc = op.accumulate ? F32(cell) : 0.0;
      for (int k = 0; k < 16; ++k) acc += sign * a[r * 16 + k] * b[c * 16 + k];
      cell = static_cast<uint32_t>(Bits(static_cast<float>(acc)));
    }
  return absl::OkStatus();
}

absl::Status Cta::CheckTmemAtExit() {
  if (tmem_allocs_.empty()) return absl::OkStatus();
  uint32_t used = 0;
  for (const auto& [start, size] : tmem_allocs_) used += size;
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: block (%d,%d,%d) exits with %d columns of tensor memory still allocated (a tcgen05.dealloc is missing)",
      kernel_, ctaid_.x, ctaid_.y, ctaid_.z, used));
}

// ---- clusters: peers, distributed shared memory, barrier.cluster, stmatrix

absl::StatusOr<Cta*> Cta::Peer(const Thread& t, const Instr& in, uint64_t rank) const {
  const uint64_t size = cluster_ ? cluster_->ctas.size() : 1;
  if (rank >= size) return Fail(t, in, absl::StrCat("cluster CTA rank ", rank, " is outside the cluster of ", size));
  Cta* peer = cluster_ ? cluster_->ctas[rank] : const_cast<Cta*>(this);
  if (peer->exited_)
    return Fail(t, in, absl::StrCat("cluster CTA ", rank, " has exited: its shared memory is gone (it must wait for its "
                                    "peers, e.g. with barrier.cluster, before it exits)"));
  return peer;
}

absl::Status Cta::RemoteArrive(uint64_t offset, int64_t tx, const Thread& t, const Instr& in) {
  auto it = mbarriers_.find(offset);
  if (it == mbarriers_.end())
    return Fail(t, in, absl::StrFormat("the mbarrier at shared offset %d of cluster CTA %d was never initialised", offset, rank_));
  it->second.tx += tx;
  if (--it->second.pending < 0)
    return Fail(t, in, absl::StrFormat("an arrival beyond the %d the mbarrier at shared offset %d of cluster CTA %d "
                                       "expects in this phase", it->second.expected, offset, rank_));
  return MbarrierComplete(offset);
}

// barrier.cluster.arrive marks the thread's arrival in the current phase; barrier.cluster.wait
// holds it until every live thread of every CTA in the cluster has arrived.
absl::Status Cta::ClusterBarrier(Thread& t, const Instr& in) {
  if (!cluster_) return Fail(t, in, "barrier.cluster outside a cluster");
  if (in.Has("arrive")) {
    t.cluster_phase = cluster_->phase;
    ++cluster_->arrived;
    ++t.pc;
    cluster_->TryRelease();
    return absl::OkStatus();
  }
  if (in.Has("wait")) {
    if (t.cluster_phase < 0) return Fail(t, in, "barrier.cluster.wait without an arrive before it");
    if (cluster_->phase > t.cluster_phase) {
      ++t.pc;
      return absl::OkStatus();
    }
    t.state = Thread::State::kBarrier;
    t.barrier = kClusterBarrier;
    return absl::OkStatus();
  }
  return Fail(t, in, "this barrier.cluster form is not emulated yet");
}

void ClusterState::TryRelease() {
  int live = 0;
  for (Cta* c : ctas) live += c->LiveThreads();
  if (arrived == 0 || arrived < live) return;
  ++phase;
  arrived = 0;
  for (Cta* c : ctas) c->WakeClusterWaiters();
}

// stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: the inverse of ldmatrix. Lanes 8i..8i+7
// give the row addresses of matrix i; lane t's register i holds row t/4, columns 2(t%4) and
// 2(t%4)+1 of matrix i (with .trans, of its transpose), the lower column in the lower half.
std::vector<std::vector<uint64_t>> Cta::StMatrix(const std::vector<Thread*>& lanes, const Instr& in, absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n);
  const int matrices = in.vec;
  if (n < 32) {
    *s = Fail(*lanes[0], in, "stmatrix needs a whole warp");
    return out;
  }
  auto store = [&](int matrix, int row, int col, uint16_t v) {
    Thread& dst = *lanes[8 * matrix + row];
    const uint64_t addr = Address(dst, e_.code[dst.pc].ops.at(0)) + 2 * col;
    absl::StatusOr<uint8_t*> p = Memory(dst, e_.code[dst.pc], Space::kShared, addr, 2);
    if (!p.ok()) {
      if (s->ok()) *s = p.status();
      return;
    }
    std::memcpy(*p, &v, 2);
    const uint64_t off = *p - shared_.data();
    if (*p >= shared_.data() && off < shared_.size()) {  // a generic-proxy write, as st.shared
      if (generic_writer_.empty()) generic_writer_.assign(shared_.size(), 0);
      generic_writer_[off] = generic_writer_[off + 1] = lanes[0]->linear + 1;
      unfenced_[lanes[0]->linear].push_back({off, 2});
    }
  };
  for (int t = 0; t < 32; ++t)
    for (int m = 0; m < matrices; ++m) {
      const uint64_t v = lanes[t]->r[e_.code[lanes[t]->pc].ops.at(1).regs.at(m)];
      const int r = t / 4, c = 2 * (t % 4);
      for (int h = 0; h < 2; ++h) {
        const uint16_t x = static_cast<uint16_t>(v >> (16 * h));
        if (in.Has("trans")) store(m, c + h, r, x);
        else store(m, r, c + h, x);
      }
    }
  return out;
}

// ---- the asynchronous proxy's rules

absl::Status Cta::CheckPendingOverlap(const Thread* t, const Instr& in, uint64_t off, uint64_t bytes, const char* what) {
  for (const AsyncLoad& p : pending_) {
    if (off + bytes <= p.dst || p.dst + p.Bytes() <= off) continue;
    const std::string dsl = m_.DslLine(*p.issued_by);
    const std::string msg = absl::StrFormat(
        "%s shared bytes %d..%d, which a TMA load still in flight will write (issued at PTX line %d%s%s): the wait "
        "for its mbarrier is missing or comes too late",
        what, off, off + bytes - 1, p.issued_by->line, dsl.empty() ? "" : ", ", dsl);
    if (t) return Fail(*t, in, msg);
    return absl::InvalidArgumentError(absl::StrFormat("%s%s: PTX line %d (%s): %s", m_.DslLine(in).empty() ? "" : m_.DslLine(in) + ": ",
                                                      kernel_, in.line, in.text, msg));
  }
  return absl::OkStatus();
}

absl::Status Cta::CheckFenced(const Instr& in, uint64_t off, uint64_t bytes, const char* reader) {
  if (generic_writer_.empty()) return absl::OkStatus();
  for (uint64_t b = off; b < off + bytes && b < generic_writer_.size(); ++b)
    if (generic_writer_[b] != 0) {
      const std::string dsl = m_.DslLine(in);
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s%s: PTX line %d (%s): %s reads shared byte %d, which thread %d wrote through the generic proxy with no "
          "fence.proxy.async after it (the async proxy may not see the write)",
          dsl.empty() ? "" : dsl + ": ", kernel_, in.line, in.text, reader, b, generic_writer_[b] - 1));
    }
  return absl::OkStatus();
}

// ---- barriers: bar.sync / barrier.sync id[, count]; bar.arrive id, count

absl::Status Cta::Arrive(Thread& t, const Instr& in, bool wait) {
  const int id = in.ops.empty() ? 0 : static_cast<int>(Read(t, in.ops[0], 32));
  if (id < 0 || id > 15) return Fail(t, in, absl::StrCat("barrier id ", id, " is outside 0..15"));
  int expected = static_cast<int>(threads_.size());
  if (in.ops.size() > 1) expected = static_cast<int>(Read(t, in.ops[1], 32));
  else expected -= static_cast<int>(std::count_if(threads_.begin(), threads_.end(),
                                                  [](const Thread& x) { return x.state == Thread::State::kDone; }));
  if (expected % 32 && in.ops.size() > 1) return Fail(t, in, absl::StrCat("a thread count of ", expected, " is not whole warps"));
  BarrierState& b = barriers_[id];
  if (b.arrived == 0) b.expected = expected;
  else if (in.ops.size() > 1 && b.expected != expected)
    return Fail(t, in, absl::StrCat("barrier ", id, " expects ", expected, " threads here and ", b.expected,
                                    " at the threads already waiting"));
  ++b.arrived;
  ++t.pc;
  if (wait) {
    t.state = Thread::State::kBarrier;
    t.barrier = id;
    b.waiting.push_back(t.linear);
  }
  if (b.arrived > b.expected)
    return Fail(t, in, absl::StrCat("barrier ", id, ": ", b.arrived, " arrivals where ", b.expected, " are expected"));
  if (b.arrived == b.expected) {
    for (int w : b.waiting) threads_[w].state = Thread::State::kRun, threads_[w].barrier = -1;
    b = BarrierState{};
  }
  return absl::OkStatus();
}

// A full-block barrier (no thread count) counts the threads alive when it began; when threads
// exit while others wait, the rest may now be complete.
absl::Status Cta::ReleaseBarriersOfExitedThreads() {
  const int live = static_cast<int>(std::count_if(threads_.begin(), threads_.end(),
                                                  [](const Thread& x) { return x.state != Thread::State::kDone; }));
  for (auto& [id, b] : barriers_) {
    if (b.arrived == 0 || b.waiting.empty()) continue;
    const Instr& in = e_.code[threads_[b.waiting.front()].pc - 1];
    if (in.ops.size() <= 1 && b.arrived >= live) {
      for (int w : b.waiting) threads_[w].state = Thread::State::kRun, threads_[w].barrier = -1;
      b = BarrierState{};
    }
  }
  return absl::OkStatus();
}

absl::Status Cta::Deadlock() const {
  std::vector<std::string> who;
  for (const auto& [id, b] : barriers_)
    if (!b.waiting.empty())
      who.push_back(absl::StrCat(b.waiting.size(), " threads at barrier ", id, " (", b.arrived, " of ", b.expected,
                                 " arrived; PTX line ", e_.code[threads_[b.waiting.front()].pc - 1].line,
                                 m_.DslLine(e_.code[threads_[b.waiting.front()].pc - 1]).empty() ? "" : ", ",
                                 m_.DslLine(e_.code[threads_[b.waiting.front()].pc - 1]), ")"));
  std::map<uint64_t, std::pair<int, const Instr*>> on_mbarrier;
  for (const Thread& t : threads_)
    if (t.state == Thread::State::kMbarrier) on_mbarrier[t.mbarrier] = {on_mbarrier[t.mbarrier].first + 1, &e_.code[t.pc]};
  for (const auto& [off, waiters] : on_mbarrier) {
    const MbarrierState& b = mbarriers_.at(off);
    const std::string dsl = m_.DslLine(*waiters.second);
    who.push_back(absl::StrFormat("%d threads wait on the mbarrier at shared offset %d for its phase of parity %d "
                                  "(%d of %d arrivals pending, transaction count %d; PTX line %d%s)",
                                  waiters.first, off, b.phase, b.pending, b.expected, b.tx, waiters.second->line,
                                  dsl.empty() ? "" : ", " + dsl));
  }
  int cluster_waiters = 0;
  for (const Thread& t : threads_)
    cluster_waiters += t.state == Thread::State::kBarrier && t.barrier == kClusterBarrier;
  if (cluster_waiters && cluster_)
    who.push_back(absl::StrFormat("%d threads at barrier.cluster.wait (%d threads of the cluster have arrived)",
                                  cluster_waiters, cluster_->arrived));
  int warp_waiters = 0, line = 0;
  for (const Thread& t : threads_)
    if (t.state == Thread::State::kWarp) ++warp_waiters, line = e_.code[t.pc].line;
  if (warp_waiters)
    who.push_back(absl::StrCat(warp_waiters, " threads at a warp collective whose lanes never all arrive (PTX line ",
                               line, ")"));
  return absl::FailedPreconditionError(absl::StrFormat("%s: deadlock in block (%d,%d,%d): every live thread waits: %s",
                                                       kernel_, ctaid_.x, ctaid_.y, ctaid_.z,
                                                       absl::StrJoin(who, "; ")));
}

}  // namespace

absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle, rt::Dim3 grid, const std::vector<rt::Arg>& args,
                             const Options& options) {
  const rt::Manifest& m = bundle.manifest;
  if (absl::Status s = rt::CheckArgs(m, args); !s.ok()) return s;
  const rt::Symbols symbols = rt::SymbolsOf(m, args);
  if (absl::Status s = m.CheckRequirements(symbols); !s.ok()) return s;
  absl::StatusOr<ptx::Module> module = ptx::Parse(bundle.ptx);
  if (!module.ok())
    return absl::Status(module.status().code(), absl::StrCat(m.name, ": ", module.status().message()));
  const ptx::Entry* entry = module->Find(m.entry);
  if (!entry) return absl::NotFoundError(absl::StrCat(m.name, ": no entry ", m.entry, " in its PTX"));
  if (entry->params.size() != args.size())
    return absl::InvalidArgumentError(absl::StrCat(m.name, ": the PTX entry takes ", entry->params.size(),
                                                   " parameters, the manifest ", args.size()));
  std::vector<uint8_t> params(entry->param_bytes, 0);
  std::vector<EmulatedTensorMap> maps;
  maps.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ptx::Param& p = entry->params[i];
    if (args[i].kind() == rt::Arg::Kind::kScheduleTable) {  // built as the launcher builds it
      const rt::ScheduleTableParam& t = m.params[i].schedule;
      absl::StatusOr<std::vector<int32_t>> table =
          rt::HilbertSchedule(t.tiles_m.Value(symbols, 0), t.tiles_n.Value(symbols, 0), t.groups, t.slots);
      if (!table.ok())
        return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, ": schedule table ", m.params[i].name, ": ",
                                                       table.status().message()));
      absl::StatusOr<uint64_t> copy = device.Allocate(table->size() * 4);
      if (!copy.ok()) return copy.status();
      if (absl::Status s = device.CopyIn(*copy, table->data(), table->size() * 4); !s.ok()) return s;
      std::memcpy(params.data() + p.offset, &*copy, 8);
      continue;
    }
    if (args[i].kind() == rt::Arg::Kind::kTensorMap) {
      // The map the launcher would encode, checked by the same rules; the kernel sees an image
      // that names it (in the parameter, or in device memory for a map passed by pointer).
      const rt::TensorMapParam& t = m.params[i].tensor_map;
      EmulatedTensorMap em{t.Resolve(symbols), args[i].address()};
      if (!args[i].dims().empty()) em.spec.dims = args[i].dims(), em.spec.strides_bytes = args[i].strides_bytes();
      if (absl::Status s = rt::ValidateTensorMap(em.spec, em.address); !s.ok())
        return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, ": tensor map ", m.params[i].name,
                                                       " over ", t.tensor, ": ", s.message()));
      uint8_t image[128] = {};
      const uint64_t index = maps.size();
      std::memcpy(image, &kTensorMapMagic, 8);
      std::memcpy(image + 8, &index, 8);
      maps.push_back(em);
      if (t.by_value) {
        if (p.bytes != 128) return absl::InvalidArgumentError(absl::StrCat(m.name, ": parameter ", p.name, " is not 128 bytes"));
        std::memcpy(params.data() + p.offset, image, 128);
      } else {
        absl::StatusOr<uint64_t> copy = device.Allocate(128);
        if (!copy.ok()) return copy.status();
        if (absl::Status s = device.CopyIn(*copy, image, 128); !s.ok()) return s;
        std::memcpy(params.data() + p.offset, &*copy, 8);
      }
      continue;
    }
    if (p.bytes > 8) return absl::UnimplementedError(absl::StrCat(m.name, ": parameter ", p.name, " of ", p.bytes, " bytes"));
    rt::Arg a = args[i];
    std::memcpy(params.data() + p.offset, a.data(), p.bytes);
  }
  const int64_t smem = m.SmemBytes(symbols);
  int64_t static_top = 0;
  for (const auto& [name, offset] : module->shared_symbols) static_top = std::max(static_top, offset);
  std::mt19937_64 rng(options.seed);
  int64_t budget = options.max_instructions;
  Stats stats;
  const rt::Dim3 cd = m.cluster;
  if (cd.count() == 0 || grid.x % cd.x || grid.y % cd.y || grid.z % cd.z)
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, ": clusters of ", cd.x, "x", cd.y, "x", cd.z,
                                                   " do not tile a grid of ", grid.x, "x", grid.y, "x", grid.z));
  const rt::Dim3 clusters{grid.x / cd.x, grid.y / cd.y, grid.z / cd.z};
  for (unsigned kz = 0; kz < clusters.z; ++kz)
    for (unsigned ky = 0; ky < clusters.y; ++ky)
      for (unsigned kx = 0; kx < clusters.x; ++kx) {
        // The cluster's CTAs run together: they wait on each other's barriers and memory.
        ClusterState cluster{{}, cd, {kx, ky, kz}, clusters};
        std::vector<std::unique_ptr<Cta>> ctas;
        for (unsigned z = 0; z < cd.z; ++z)
          for (unsigned y = 0; y < cd.y; ++y)
            for (unsigned x = 0; x < cd.x; ++x) {
              ctas.push_back(std::make_unique<Cta>(device, *module, *entry, params, grid, m.block,
                                                   rt::Dim3{kx * cd.x + x, ky * cd.y + y, kz * cd.z + z},
                                                   static_top + smem, m.name, options.seed ? &rng : nullptr, &budget,
                                                   &maps));
              ctas.back()->JoinCluster(&cluster, static_cast<int>(ctas.size()) - 1);
              cluster.ctas.push_back(ctas.back().get());
            }
        std::vector<bool> finished(ctas.size(), false);
        while (true) {
          bool moved = false, all = true;
          for (size_t i = 0; i < ctas.size(); ++i) {
            const size_t c = options.seed ? (i + rng()) % ctas.size() : i;
            if (finished[c]) continue;
            absl::StatusOr<Cta::Progress> p = ctas[c]->Advance(&stats.instructions);
            if (!p.ok()) return p.status();
            if (*p == Cta::Progress::kFinished) finished[c] = true;
            moved |= *p != Cta::Progress::kIdle;
          }
          for (bool f : finished) all &= f;
          if (all) break;
          if (moved) continue;
          cluster.TryRelease();  // threads may have exited since the last arrival
          bool woken = false;
          for (size_t c = 0; c < ctas.size(); ++c) {
            if (finished[c]) continue;
            absl::StatusOr<Cta::Progress> p = ctas[c]->Advance(&stats.instructions);
            if (!p.ok()) return p.status();
            woken |= *p != Cta::Progress::kIdle;
          }
          if (woken) continue;
          for (size_t c = 0; c < ctas.size(); ++c)
            if (!finished[c]) return ctas[c]->Deadlock();
        }
        stats.blocks += static_cast<int64_t>(ctas.size());
      }
  return stats;
}

absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle, const std::vector<rt::Arg>& args,
                             const Options& options) {
  if (absl::Status s = rt::CheckArgs(bundle.manifest, args); !s.ok()) return s;
  absl::StatusOr<rt::Dim3> grid = bundle.manifest.GridFor(rt::SymbolsOf(bundle.manifest, args), options.sm_count);
  if (!grid.ok())
    return absl::Status(grid.status().code(), absl::StrCat(bundle.manifest.source, ": ", bundle.manifest.name, ": ",
                                                           grid.status().message()));
  return Launch(device, bundle, *grid, args, options);
}

}  // namespace kiln::emu
