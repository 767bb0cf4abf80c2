// The emulator's machine state: a CTA (its threads, shared and tensor memory, barriers and the
// asynchronous work in flight) and the cluster it belongs to. Private to emulator/; the
// instructions are executed by exec*.cc, one file per family.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "emulator/global_races.h"
#include "emulator/ptx.h"
#include "emulator/races.h"
#include "kiln/bundle/schedule.h"
#include "kiln/emulator.h"

namespace kiln::emu::detail {

using ptx::Instr;
using ptx::Op;
using ptx::Operand;
using ptx::Space;
using ptx::Ty;

// Generic addresses of shared memory and of the parameters live in these windows (cvta.shared
// and cvta.param add them).
inline constexpr uint64_t kSharedWindow = uint64_t{0xF} << 44;
inline constexpr uint64_t kParamWindow = uint64_t{0xE} << 44;
inline constexpr uint64_t kTensorMapMagic = 0x50414d544e4c494bull;  // "KILNTMAP"

inline float F32(uint64_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits)); }
inline uint64_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline double F64(uint64_t bits) { return std::bit_cast<double>(bits); }
inline uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }

inline float FlushDenormal(float f) {
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
}

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
inline uint16_t F32ToBf16(float f) {  // round to nearest even; NaN stays a (quiet) NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float F16ToF32(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t F32ToF16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

// The fp8 formats (PTX ISA, alternate floating-point data formats): e4m3 has bias 7, no
// infinities and one NaN per sign (S.1111.111), largest finite 448; e5m2 is IEEE-like with bias
// 15, largest finite 57344. Conversions from f32 round to nearest even; .satfinite (which PTX
// requires for these) turns magnitudes past the largest finite value, infinities included, into
// that value, and NaN into NaN.
inline uint8_t F32ToFp8(float x, bool e4m3) {
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const double max = e4m3 ? 448.0 : 57344.0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return 0x7f;
  double a = std::fabs(static_cast<double>(x));
  const int min_exp = 1 - bias;  // of the normals; subnormals share its quantum
  const int e = a == 0 ? min_exp : std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - man);
  a = std::min(std::nearbyint(a / quantum) * quantum, max);  // exact scaling; ties to even
  if (a == 0) return sign;
  const int ea = std::ilogb(a);
  if (ea < min_exp) return sign | static_cast<uint8_t>(a / std::ldexp(1.0, min_exp - man));
  const int mant = static_cast<int>(a / std::ldexp(1.0, ea - man)) - (1 << man);
  return sign | static_cast<uint8_t>((ea + bias) << man | mant);
}
inline double Fp8ToDouble(uint8_t v, bool e4m3) {
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, exp_mask = e4m3 ? 0xf : 0x1f;
  const int exp = (v >> man) & exp_mask, mant = v & ((1 << man) - 1);
  const double sign = v & 0x80 ? -1.0 : 1.0;
  if (e4m3 ? (exp == 0xf && mant == 7) : (exp == 0x1f && mant != 0)) return std::nan("");
  if (!e4m3 && exp == 0x1f) return sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, 1 - bias - man);
  return sign * std::ldexp((1 << man) + mant, exp - bias - man);
}

inline uint64_t Mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }
inline int64_t SignExtend(uint64_t v, int bits) {
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
  const ptx::Instr* issued_by = nullptr;
  int64_t group = -1;  // its group's number among the thread's commits (-1: not committed)
};

// Shared bytes an asynchronous operation is not done with (a cp.async not landed, a TMA store
// not yet read), by byte: how many such operations, and the instruction of one of them.
class BusyBytes {
 public:
  void Add(uint64_t off, uint64_t n, const ptx::Instr* by, size_t shared_size) {
    if (count_.empty()) count_.assign(shared_size, 0), by_.assign(shared_size, nullptr);
    for (uint64_t b = off; b < off + n; ++b) ++count_[b], by_[b] = by;
  }
  void Remove(uint64_t off, uint64_t n) {
    for (uint64_t b = off; b < off + n; ++b) --count_[b];
  }
  // The first busy byte of [off, off + n) and the instruction holding it, or null.
  const ptx::Instr* Holder(uint64_t off, uint64_t n, uint64_t* at) const {
    for (uint64_t b = off; b < off + n && b < count_.size(); ++b)
      if (count_[b]) return *at = b, by_[b];
    return nullptr;
  }

 private:
  std::vector<uint16_t> count_;
  std::vector<const ptx::Instr*> by_;
};

// A tensor map as the launcher describes it: the emulator's own 128-byte image (a magic word and
// an index into the launch's table) stands where the driver's opaque CUtensorMap would.
struct EmulatedTensorMap {
  rt::TensorMapSpec spec;
  uint64_t address = 0;
  std::string name;  // "tmA over A": its parameter and tensor, for messages
};

// A tcgen05.mma kind::f16 or kind::f8f6f4 in flight: D (TMEM, fp32) (+)= A (smem) x B (smem)^T.
struct TcgenMma {
  uint32_t d = 0;  // TMEM address: lane << 16 | column
  uint64_t a_desc = 0, b_desc = 0;
  uint32_t idesc = 0;
  bool accumulate = true;
  bool pair = false;  // cta_group::2: issued by the pair's even CTA over both CTAs' operands
  bool fp8 = false;   // kind::f8f6f4: 8-bit A and B, 32 of K
  // kind::mxf8f6f4.block_scale: 8-bit A and B, each row's UE8M0 scale for the 32 of K at these
  // TMEM addresses (A's rows in 4 columns, B's in N / 32; the byte the descriptor's IDs pick).
  bool block_scaled = false;
  uint32_t sfa = 0, sfb = 0;
  int line = 0;
  int64_t issued = INT64_MIN;  // Now() at issue: a TMA load landing on its operands after it races
  int thread = -1;             // the issuing thread: only its own tcgen05.commit tracks this MMA
  bool passed_over_by_commit = false;  // another thread committed while this one waited
  const ptx::Instr* in = nullptr;
};

// A TMA store issued by a thread: it reads its shared box until a cp.async.bulk.wait_group
// (.read) covers its bulk group; the global bytes are written then.
struct TmaStore {
  const struct EmulatedTensorMap* map;
  std::vector<int64_t> coords;
  uint64_t smem;
  const ptx::Instr* in;
  bool add = false;  // cp.reduce.async.bulk .add: each f32 element added into global memory
};

// Registers an asynchronous op will still write (a wgmma's accumulators until the
// wgmma.wait_group that completes it, tcgen05.ld destinations until tcgen05.wait::ld), with that
// op: touching one before its wait is an error. Indexed by register (every instruction asks).
class InFlightRegs {
 public:
  bool empty() const { return count_ == 0; }
  const ptx::Instr* Find(int reg) const {
    return reg >= 0 && reg < static_cast<int>(by_reg_.size()) ? by_reg_[reg] : nullptr;
  }
  void Set(int reg, const ptx::Instr* by) {
    if (reg >= static_cast<int>(by_reg_.size())) by_reg_.resize(reg + 1, nullptr);
    count_ += by_reg_[reg] ? 0 : 1;
    by_reg_[reg] = by;
  }
  void ClearWrittenBy(ptx::Op op) {  // every register an op of this kind holds
    if (!count_) return;
    for (const ptx::Instr*& by : by_reg_)
      if (by && by->op == op) by = nullptr, --count_;
  }
  void Clear() {
    if (count_) by_reg_.assign(by_reg_.size(), nullptr), count_ = 0;
  }

 private:
  std::vector<const ptx::Instr*> by_reg_;
  int count_ = 0;
};

// Where a register's or a shared byte's value came from, for uninitialised values (taint.cc):
// null for a defined value, else the instruction that read never-written shared memory (a
// ld.shared, ldmatrix, wgmma) from which the value derives.
using Origin = const ptx::Instr*;

// A thread's watch for a wait that can never end (spin.cc): its latest read of memory, and how
// many times in a row that read came back the same with the thread's registers the same.
struct SpinWatch {
  const ptx::Instr* at = nullptr;
  uint64_t address = 0, value = 0, regs = 0;
  int64_t repeats = 0, last_step = 0, period = 0;
  int64_t releases = 0;  // the thread's releases from waits at the previous pass
};

// A thread's last pass of a watched loop (loops.cc): the hash of the registers its condition
// depends on, kept from one pass to the next while the thread stays in the loop.
struct LoopPass {
  bool entered = false;
  uint64_t registers = 0;
};

struct Thread {
  int x = 0, y = 0, z = 0, linear = 0;
  int64_t steps = 0;     // instructions it has executed
  int64_t releases = 0;  // times a barrier, a warp collective or an mbarrier let it run on
  SpinWatch spin;
  std::vector<LoopPass> loops;  // by Entry::loop_guards
  // The block-wide bar.sync (no thread count) that last released it (races.cc's hint).
  const ptx::Instr* block_barrier = nullptr;
  bool waited_for_prior_grids = false;             // has run griddepcontrol.wait
  std::vector<TmaStore> bulk_open;                 // TMA stores not yet committed
  std::vector<std::vector<TmaStore>> bulk_groups;  // committed bulk groups, oldest first
  int pc = 0;
  std::vector<uint64_t> r;
  std::vector<AsyncCopy> open_group;           // not yet committed
  std::vector<std::vector<AsyncCopy>> groups;  // committed, oldest first
  int64_t groups_committed = 0;                // cp.async groups committed so far
  enum class State : uint8_t { kRun, kWarp, kBarrier, kMbarrier, kDone } state = State::kRun;
  int barrier = -1;
  uint64_t mbarrier = 0;        // kMbarrier: the shared offset it waits on
  int try_wait_timed_out = -1;  // the try_wait (pc) that last returned false unfinished, or -1
  // The latest mbarrier wait it passed on a barrier's latest phase, that barrier (shared offset),
  // and the arrival that completed the phase: a TMA load it issues next was let go by that
  // arrival (a producer's stage released), which a load landing on a stage still read names.
  const ptx::Instr* passed_wait = nullptr;
  const ptx::Instr* passed_on = nullptr;
  uint64_t passed_barrier = 0;
  std::map<uint64_t, int64_t> next_phase;  // per mbarrier: the phase this thread waits for next
  int64_t cluster_phase = -1;              // the barrier.cluster phase it arrived in
  bool cluster_met = false;  // passed a barrier.cluster.wait: every CTA of its cluster has started
  InFlightRegs in_flight_regs;
  // Registers a wgmma holds (accumulators, A fragments) that another instruction accessed since
  // this thread's last wgmma.fence, with that instruction (the ISA's wgmma.fence rule).
  InFlightRegs unfenced_wgmma_regs;
  std::vector<Origin> taint;  // per register (taint.cc); shorter than r: the rest are defined
  // tcgen05 ordering (exec_blackwell.cc): when this thread last passed a wait (an mbarrier wait,
  // a CTA or cluster barrier) and which, and when the last wait before its latest
  // tcgen05.fence::after_thread_sync passed (what that fence orders its tcgen05 ops after).
  int64_t synced = INT64_MIN, fenced_sync = INT64_MIN;
  const ptx::Instr* synced_by = nullptr;
  // The last MMA whose accumulator this thread holds or read (mma.sync, wgmma, or the tcgen05.mma
  // that wrote the TMEM it loaded): named with the stores of a wrong result.
  const ptx::Instr* last_mma = nullptr;
};

class Cta;

// The CTAs of one cluster, run under one scheduler, and the cluster barrier (barrier.cluster).
struct ClusterState {
  std::vector<Cta*> ctas;    // by %cluster_ctarank (x fastest)
  rt::Dim3 dims, id, count;  // cluster shape, this cluster's index, clusters in the grid
  int64_t phase = 0;         // completed barrier.cluster phases
  int arrived = 0;
  PhaseClocks clocks;  // (races.h)
  // The last arrive of each cluster warp, where it was .relaxed (released nothing): the epoch of
  // the warp's clock it closed and its phase, so that a race it leaves names it.
  struct RelaxedArrive {
    const ptx::Instr* at = nullptr;
    uint32_t epoch = 0;
    int64_t phase = 0;
  };
  std::map<uint32_t, RelaxedArrive> relaxed_arrives;
  void TryRelease();
};

class Cta {
 public:
  Cta(Device& dev, const ptx::Module& m, const ptx::Entry& e, const std::vector<uint8_t>& params,
      rt::Dim3 grid, rt::Dim3 block, rt::Dim3 ctaid, int64_t smem_bytes, const std::string& kernel,
      std::mt19937_64* rng, int64_t* budget, const std::vector<EmulatedTensorMap>* maps,
      GlobalRaces* global_races)
      : dev_(dev),
        m_(m),
        e_(e),
        params_(params),
        grid_(grid),
        block_(block),
        ctaid_(ctaid),
        shared_(smem_bytes, 0),
        kernel_(kernel),
        rng_(rng),
        budget_(budget),
        maps_(maps),
        global_races_(global_races) {
    const int n = static_cast<int>(block.count());
    threads_.resize(n);
    for (int i = 0; i < n; ++i) {
      Thread& t = threads_[i];
      t.linear = i;
      t.x = i % block.x, t.y = (i / block.x) % block.y, t.z = i / (block.x * block.y);
      t.r.assign(e.num_regs, 0);
      for (auto [reg, bits] : e.constant_regs) t.r[reg] = bits;
    }
    run_bits_.assign((n + 63) / 64, 0);
    for (Thread& t : threads_) SetState(t, Thread::State::kRun);
    if (rng_)
      for (int w = 0; w < (n + 31) / 32; ++w) warp_priority_.push_back((*rng_)());
  }

  void JoinCluster(ClusterState* c, int rank) { cluster_ = c, rank_ = rank; }
  // The kernel runs griddepcontrol.wait somewhere (the launch scans its PTX once).
  void SetWaitsForPriorGrids(bool waits) { waits_for_prior_grids_ = waits; }
  bool exited() const { return exited_; }
  int LiveThreads() const {
    return static_cast<int>(std::count_if(threads_.begin(), threads_.end(), [](const Thread& t) {
      return t.state != Thread::State::kDone;
    }));
  }
  void WakeClusterWaiters() {
    for (Thread& t : threads_)
      if (t.state == Thread::State::kBarrier && t.barrier == kClusterBarrier)
        SetState(t, Thread::State::kRun);
  }

  // Every change of a thread's state goes through here: Advance reads the runnable threads from
  // a bit a thread, kept as states change (a scan of every thread per quantum cost a third of an
  // emulated GEMM's time).
  void SetState(Thread& t, Thread::State s) {
    if (s == Thread::State::kRun && t.state != Thread::State::kRun &&
        t.state != Thread::State::kDone)
      ++t.releases;
    t.state = s;
    const uint64_t bit = uint64_t{1} << (t.linear % 64);
    uint64_t& word = run_bits_[t.linear / 64];
    word = s == Thread::State::kRun ? word | bit : word & ~bit;
  }
  int RunnableCount() const {
    int n = 0;
    for (uint64_t w : run_bits_) n += std::popcount(w);
    return n;
  }
  // Warp w's runnable threads, a bit each.
  uint32_t WarpRunBits(int w) const {
    return static_cast<uint32_t>(run_bits_[w / 2] >> (32 * (w % 2)));
  }
  // The k-th runnable thread in index order (k below RunnableCount()).
  int NthRunnable(int k) const {
    for (size_t i = 0; i < run_bits_.size(); ++i) {
      const int count = std::popcount(run_bits_[i]);
      if (k < count) return static_cast<int>(i * 64) + NthBit(run_bits_[i], k);
      k -= count;
    }
    return -1;
  }
  // The first runnable thread from index `from` on, else the first of all.
  int RunnableFrom(int from) const {
    for (size_t i = from / 64; i < run_bits_.size(); ++i) {
      const uint64_t bits = i == static_cast<size_t>(from / 64)
                                ? run_bits_[i] >> (from % 64) << (from % 64)
                                : run_bits_[i];
      if (bits) return static_cast<int>(i * 64) + std::countr_zero(bits);
    }
    return NthRunnable(0);
  }
  // The k-th runnable thread of warp w (k below the popcount of WarpRunBits(w)).
  int NthRunnableOfWarp(int w, int k) const { return w * 32 + NthBit(WarpRunBits(w), k); }
  static int NthBit(uint64_t bits, int k) {
    for (; k > 0; --k) bits &= bits - 1;
    return std::countr_zero(bits);
  }

  // One scheduling decision: an asynchronous completion, or a quantum of one thread.
  enum class Progress { kMoved, kIdle, kFinished };
  absl::StatusOr<Progress> Advance(int64_t* executed) {
    const int runnable = RunnableCount();
    // An asynchronous copy lands at a moment the seed picks between its issue and the first
    // time every thread waits (in index order: only then).
    const size_t in_flight =
        pending_.size() + cp_async_arrivals_.size() + (tcgen_commits_.empty() ? 0 : 1);
    const bool land_due = land_due_;
    land_due_ = false;
    if (in_flight && (runnable == 0 || land_due || (rng_ && (*rng_)() % 4 == 0))) {
      const size_t pick = rng_ ? (*rng_)() % in_flight : 0;
      if (pick < pending_.size()) {
        if (absl::Status s = CompleteAsync(pick); !s.ok()) return s;
      } else if (pick < pending_.size() + cp_async_arrivals_.size()) {
        if (absl::Status s = LandCpAsyncArrival(pick - pending_.size()); !s.ok()) return s;
      } else {  // the oldest tcgen05 commit: its MMAs in issue order, then its arrival
        TcgenCommit c = std::move(tcgen_commits_.front());
        tcgen_commits_.erase(tcgen_commits_.begin());
        for (const TcgenMma& op : c.mmas)
          if (absl::Status s = RunTcgenMma(op); !s.ok()) return s;
        auto fail = [&](const std::string& what) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: PTX line %d: tcgen05.commit: %s", kernel_, c.line, what));
        };
        const WarpClock released = Released(c.thread / 32);
        if (c.cta_mask == 0) {
          if (absl::Status s = ArriveOn(c.mbarrier, 0, fail, released); !s.ok()) return s;
        } else {
          for (size_t r = 0; r < cluster_->ctas.size(); ++r)
            if (c.cta_mask >> r & 1)
              if (absl::Status s = cluster_->ctas[r]->ArriveOn(c.mbarrier, 0, fail, released);
                  !s.ok())
                return s;
        }
      }
      return Progress::kMoved;
    }
    if (runnable == 0) {
      if (std::all_of(threads_.begin(), threads_.end(),
                      [](const Thread& t) { return t.state == Thread::State::kDone; })) {
        exited_ = true;
        if (!exit_error_.ok()) return exit_error_;  // a store its thread left in flight failed
        if (absl::Status s = CheckTmemAtExit(); !s.ok()) return s;
        if (absl::Status s = CheckSetMaxNRegAtExit(); !s.ok()) return s;
        if (absl::Status s = CheckCopiesWaitedForAtExit(); !s.ok()) return s;
        return Progress::kFinished;
      }
      if (absl::Status s = ReleaseBarriersOfExitedThreads(); !s.ok()) return s;
      if (std::any_of(threads_.begin(), threads_.end(),
                      [](const Thread& t) { return t.state == Thread::State::kRun; }))
        return Progress::kMoved;
      return Progress::kIdle;
    }
    // A seeded choice of thread and of how long it runs before the next choice: half the time
    // any runnable thread, half the time one of the runnable warp the seed ranks highest, so
    // that some warps run far ahead of others (races that need a lagging warp show up); now and
    // then a warp is re-ranked, so no order holds for a whole launch.
    // Without a seed, threads in index order; after a spinning thread yields, from the next one.
    int pick = rotate_from_ > 0 ? RunnableFrom(rotate_from_) : NthRunnable(0);
    rotate_from_ = 0;
    if (rng_) {
      const uint64_t r = (*rng_)();
      if (r % 512 == 0) warp_priority_[(r >> 9) % warp_priority_.size()] = (*rng_)();
      if (r & 512) {
        pick = NthRunnable(static_cast<int>((r >> 10) % runnable));
      } else {
        int top = -1;  // the first of the highest-ranked warps with a runnable thread
        for (int w = 0; w < static_cast<int>(warp_priority_.size()); ++w)
          if (WarpRunBits(w) && (top < 0 || warp_priority_[w] > warp_priority_[top])) top = w;
        pick =
            NthRunnableOfWarp(top, static_cast<int>((r >> 10) % std::popcount(WarpRunBits(top))));
      }
    }
    const int quantum = rng_ ? 1 + static_cast<int>((*rng_)() % 64) : 1 << 30;
    Thread& t = threads_[pick];
    yield_ = false;
    for (int i = 0; i < quantum && t.state == Thread::State::kRun && !yield_; ++i) {
      if (--*budget_ <
          0) {  // where the thread then running was: in an endless loop, most likely in it
        const Instr& at = e_.code[t.pc];
        const std::string dsl = m_.DslLine(at);
        return absl::ResourceExhaustedError(
            absl::StrCat(kernel_,
                         ": the emulator's instruction budget ran out (an endless loop? or a "
                         "wait on global memory that another block sets: the emulator runs a "
                         "launch's blocks one after another, so a block never sees what one not "
                         "yet run would write; else raise the budget, ",
                         Options{}.max_instructions,
                         " by default: KILN_EMULATOR_INSTRUCTIONS=N in the environment, or "
                         "Options::max_instructions); thread ",
                         t.linear, " of block (", ctaid_.x, ",", ctaid_.y, ",", ctaid_.z,
                         ") was at PTX line ", at.line, dsl.empty() ? "" : ", ", dsl));
      }
      ++*executed, ++t.steps;
      if (absl::Status s = Step(t); !s.ok()) return s;
    }
    if (yield_) rotate_from_ = pick + 1;
    return Progress::kMoved;
  }

  absl::Status Deadlock() const;

 private:
  // "DSL line: kernel: what, in thread .. of block .. (PTX line N: text)"; without line tables
  // the message starts with the kernel.
  absl::Status Fail(const Thread& t, const Instr& in, const std::string& what) const {
    const std::string dsl = m_.DslLine(in);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s%s: PTX line %d (%s): %s, in thread (%d,%d,%d) of block (%d,%d,%d)",
                        dsl.empty() ? "" : dsl + ": ", kernel_, in.line, in.text, what, t.x, t.y,
                        t.z, ctaid_.x, ctaid_.y, ctaid_.z));
  }

  uint64_t SpecialValue(const Thread& t, ptx::Special s) const {
    switch (s) {
      case ptx::Special::kTidX:
        return t.x;
      case ptx::Special::kTidY:
        return t.y;
      case ptx::Special::kTidZ:
        return t.z;
      case ptx::Special::kNtidX:
        return block_.x;
      case ptx::Special::kNtidY:
        return block_.y;
      case ptx::Special::kNtidZ:
        return block_.z;
      case ptx::Special::kCtaidX:
        return ctaid_.x;
      case ptx::Special::kCtaidY:
        return ctaid_.y;
      case ptx::Special::kCtaidZ:
        return ctaid_.z;
      case ptx::Special::kNctaidX:
        return grid_.x;
      case ptx::Special::kNctaidY:
        return grid_.y;
      case ptx::Special::kNctaidZ:
        return grid_.z;
      case ptx::Special::kLaneId:
        return t.linear % 32;
      case ptx::Special::kWarpId:
        return t.linear / 32;
      case ptx::Special::kClusterCtaRank:
        return rank_;
      case ptx::Special::kClusterNctaRank:
        return cluster_ ? cluster_->ctas.size() : 1;
      case ptx::Special::kClusterIdX:
        return cluster_ ? cluster_->id.x : ctaid_.x;
      case ptx::Special::kClusterIdY:
        return cluster_ ? cluster_->id.y : ctaid_.y;
      case ptx::Special::kClusterIdZ:
        return cluster_ ? cluster_->id.z : ctaid_.z;
      case ptx::Special::kNClusterIdX:
        return cluster_ ? cluster_->count.x : grid_.x;
      case ptx::Special::kNClusterIdY:
        return cluster_ ? cluster_->count.y : grid_.y;
      case ptx::Special::kNClusterIdZ:
        return cluster_ ? cluster_->count.z : grid_.z;
      case ptx::Special::kClusterCtaIdX:
        return cluster_ ? ctaid_.x % cluster_->dims.x : 0;
      case ptx::Special::kClusterCtaIdY:
        return cluster_ ? ctaid_.y % cluster_->dims.y : 0;
      case ptx::Special::kClusterCtaIdZ:
        return cluster_ ? ctaid_.z % cluster_->dims.z : 0;
      case ptx::Special::kClusterNctaIdX:
        return cluster_ ? cluster_->dims.x : 1;
      case ptx::Special::kClusterNctaIdY:
        return cluster_ ? cluster_->dims.y : 1;
      case ptx::Special::kClusterNctaIdZ:
        return cluster_ ? cluster_->dims.z : 1;
      case ptx::Special::kGlobalTimer:
      case ptx::Special::kClock64:
        return Clock();
      case ptx::Special::kGlobalTimerLo:
      case ptx::Special::kClock:
        return static_cast<uint32_t>(Clock());
      case ptx::Special::kGlobalTimerHi:
        return Clock() >> 32;
    }
    return 0;
  }

  // An operand's bits (registers hold raw bits; a float immediate is given as bits of its width).
  uint64_t Read(const Thread& t, const Operand& o, int bits) const {
    uint64_t v = 0;
    switch (o.kind) {
      case Operand::Kind::kReg:
        v = t.r[o.reg];
        break;
      case Operand::Kind::kImm:
        v = o.imm_is_decimal && bits == 32
                ? std::bit_cast<uint32_t>(static_cast<float>(std::bit_cast<double>(o.imm)))
                : o.imm;
        break;
      case Operand::Kind::kSpecial:
        v = SpecialValue(t, o.special);
        break;
      case Operand::Kind::kSymbol: {
        auto it = m_.shared_symbols.find(o.symbol);
        v = it == m_.shared_symbols.end() ? 0 : static_cast<uint64_t>(it->second) + SharedWindow();
        if (m_.global_symbols.contains(o.symbol)) v = dev_.ModuleGlobal(kernel_, o.symbol);
        for (const ptx::Param& p : e_.params)
          if (p.name == o.symbol) v = p.offset;  // an address in the parameter space
        break;
      }
      default:
        break;
    }
    if (o.negate) v = !(v & 1);
    return v & Mask(bits);
  }
  void Write(Thread& t, const Operand& o, uint64_t v) {
    if (o.kind == Operand::Kind::kReg) t.r[o.reg] = v;
  }

  absl::Status CheckPriorGridsWaited(const Thread& t, const Instr& in) {
    if (!waits_for_prior_grids_ || t.waited_for_prior_grids) return absl::OkStatus();
    return Fail(
        t, in,
        "touches global memory before this thread's griddepcontrol.wait: the grids before this one "
        "may still be writing it (the kernel is launched while they finish)");
  }

  // The space a generic address lies in, by its window.
  static Space SpaceOfGeneric(uint64_t addr) {
    if (addr >= kSharedWindow && addr < kSharedWindow + (uint64_t{1} << 32)) return Space::kShared;
    if (addr >= kParamWindow && addr < kParamWindow + (uint64_t{1} << 32)) return Space::kParam;
    return Space::kGlobal;
  }
  static const char* SpaceWord(Space space) {
    switch (space) {
      case Space::kShared:
        return "shared";
      case Space::kParam:
        return "param";
      case Space::kLocal:
        return "local";
      case Space::kConst:
        return "const";
      default:
        return "global";
    }
  }

  // The bytes an access touches, or an error naming the address.
  absl::StatusOr<uint8_t*> Memory(Thread& t, const Instr& in, Space space, uint64_t addr,
                                  int bytes) {
    const uint64_t given = addr;
    if (space == Space::kGeneric) {
      space = SpaceOfGeneric(addr);
      if (space == Space::kShared) addr -= kSharedWindow;
      if (space == Space::kParam) addr -= kParamWindow;
    }
    if (given % bytes != 0 && bytes <= 16)
      return Fail(t, in,
                  absl::StrFormat("misaligned %d-byte access at %s address 0x%x (%d bytes past a "
                                  "multiple of %d)",
                                  bytes, SpaceWord(space), given, given % bytes, bytes));
    if (space == Space::kGlobal) {
      if (absl::Status s = CheckPriorGridsWaited(t, in); !s.ok()) return s;
      uint8_t* p = dev_.Find(addr, bytes);
      if (!p)
        return Fail(t, in,
                    absl::StrFormat("out-of-bounds global access of %d bytes at 0x%x%s", bytes,
                                    addr, dev_.Near(addr)));
      return p;
    }
    if (space == Space::kShared && (addr >> 24) != static_cast<uint64_t>(rank_)) {
      // shared::cluster: another CTA's memory (its rank above the offset)
      absl::StatusOr<Cta*> peer = Peer(t, in, addr >> 24);
      if (!peer.ok()) return peer.status();
      addr &= kOffsetMask;
      if (addr + bytes > (*peer)->shared_.size())
        return Fail(
            t, in,
            absl::StrFormat(
                "shared access of %d bytes at offset %d of cluster CTA %d, past its %d bytes",
                bytes, addr, (*peer)->rank_, (*peer)->shared_.size()));
      return (*peer)->shared_.data() + addr;
    }
    if (space == Space::kShared) {
      addr &= kOffsetMask;
      if (addr + bytes > shared_.size())
        return Fail(
            t, in,
            absl::StrFormat("shared access of %d bytes at offset %d, past the block's %d bytes",
                            bytes, addr, shared_.size()));
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
    if (o.reg >= 0) {
      base = t.r[o.reg];
      if (e_.reg_narrow[o.reg]) return static_cast<uint32_t>(base + o.offset);  // (wraps)
    } else if (!o.symbol.empty()) {
      if (auto it = m_.shared_symbols.find(o.symbol); it != m_.shared_symbols.end())
        base = it->second + SharedWindow();
      if (m_.global_symbols.contains(o.symbol)) base = dev_.ModuleGlobal(kernel_, o.symbol);
      for (const ptx::Param& p : e_.params)
        if (p.name == o.symbol) base = p.offset;
    }
    return base + o.offset;
  }

  absl::Status Step(Thread& t);
  absl::Status Branch(Thread& t, const Instr& in);
  absl::Status Collective(Thread& t, const Instr& in);
  absl::Status TryReleaseWarp(int warp);
  absl::Status ReleaseAlignedWarp(const std::vector<Thread*>& lanes, const Instr& in);
  absl::Status Arrive(Thread& t, const Instr& in, bool wait);
  absl::Status ReleaseBarriersOfExitedThreads();
  struct BarrierState;
  void CountWarpIfWhole(BarrierState& b, int warp);
  absl::Status CompleteIfDue(int id, BarrierState& b, Thread* t, const Instr* in);
  absl::Status Arith(Thread& t, const Instr& in);
  absl::Status Convert(Thread& t, const Instr& in);
  absl::Status LoadStore(Thread& t, const Instr& in);
  absl::Status Atomic(Thread& t, const Instr& in);
  // A generic-proxy access (ld/st, ldmatrix, stmatrix, atom) of shared bytes [at, at + n): in
  // this CTA's own, not into bytes an async copy still in flight will write (TMA, cp.async) nor,
  // for a write, bytes a TMA store or a wgmma still reads; in its own or a cluster peer's, for a
  // write, not over a live mbarrier. (A peer's copies in flight are not looked at.)
  absl::Status CheckSharedAccess(const Thread& t, const Instr& in, const uint8_t* at, uint64_t n,
                                 bool writes);
  // The offset of a live mbarrier of this CTA among shared bytes [off, off + n), if any.
  std::optional<uint64_t> LiveMbarrierIn(uint64_t off, uint64_t n) const {
    auto b = mbarriers_.upper_bound(off + n - 1);
    if (n == 0 || b == mbarriers_.begin() || (--b)->first + 8 <= off) return std::nullopt;
    return b->first;
  }
  absl::Status CheckStoreOverMbarrier(const Thread& t, const Instr& in, const uint8_t* at,
                                      uint64_t n);
  // spin.cc: a read of memory (a load or an atomic's old value) that came back as the thread's
  // previous read at this instruction did; once every thread of the cluster still running does
  // so over and over (or waits), nothing can change: an error that says why.
  absl::Status NoteSpinRead(Thread& t, const Instr& in, uint64_t address, const uint8_t* bytes,
                            uint64_t n, bool shared);
  bool SpinsNow(const Thread& t) const;
  // A watched loop's back edge taken (loops.cc): an error at the second pass in a row that
  // changed nothing its condition depends on.
  absl::Status WatchLoop(Thread& t, const Instr& in);
  bool AnotherThreadRuns(const Thread& t) const;  // in this cluster (or CTA), runnable now
  void LeaveLoop(Thread& t, const Instr& in);     // its back edge not taken
  bool yield_ = false;   // a spinning thread ends its quantum: the others may be what it waits for
  int rotate_from_ = 0;  // without a seed: where the next pick starts after a yield
  bool AsyncWorkInFlight() const {
    return !pending_.empty() || !cp_async_arrivals_.empty() || !tcgen_commits_.empty();
  }
  absl::Status CpAsync(Thread& t, const Instr& in);
  // Cluster CTA `rank` for `t` to reach (`access`: its shared memory or barriers, which needs the
  // peer started; a mapa only names it).
  absl::StatusOr<Cta*> Peer(const Thread& t, const Instr& in, uint64_t rank,
                            bool access = true) const;
  absl::Status ClusterBarrier(Thread& t, const Instr& in);
  absl::Status CheckAlignedArrive(const Thread& t, const Instr& in);
  // One arrival, expecting `tx` more bytes, on the mbarrier at `offset` of this CTA (from a
  // peer's remote arrive, or a commit); `fail` words an error for the instruction behind it.
  // (`by`: the arriving instruction, where one of this cluster's threads ran it.)
  absl::Status ArriveOn(uint64_t offset, int64_t tx,
                        const std::function<absl::Status(const std::string&)>& fail,
                        const WarpClock& released = {}, const Instr* by = nullptr);
  std::vector<std::vector<uint64_t>> StMatrix(const std::vector<Thread*>& lanes, const Instr& in,
                                              absl::Status* s);
  absl::Status Tcgen05(Thread& t, const Instr& in);
  absl::Status CheckInFlightRegs(const Thread& t, const Instr& in) const;
  // The wgmma.fence rule (PTX ISA, wgmma.fence): records `in`'s access of registers a wgmma holds;
  // a wgmma.mma_async that uses one before the thread's next wgmma.fence is an error.
  void NoteWgmmaRegisterAccess(Thread& t, const Instr& in) const;
  absl::Status CheckWgmmaRegistersFenced(const Thread& t, const Instr& wgmma) const;
  absl::Status TmemAllocate(Thread& t, const Instr& in);
  std::vector<std::vector<uint64_t>> TcgenWarp(const std::vector<Thread*>& lanes, const Instr& in,
                                               absl::Status* s);
  absl::Status RunTcgenMma(const struct TcgenMma& op);
  // One CTA's rows of an MMA: D rows from `a_cta`'s A operand, B columns from `b_ctas` (one CTA,
  // or a pair's two, each holding N / 2), into this CTA's tensor memory.
  absl::Status RunTcgenMmaRows(const TcgenMma& op, Cta& a_cta, const std::vector<Cta*>& b_ctas,
                               int n);
  // D = (D if it accumulates) + the products, into this CTA's cells from TMEM address `d`: rows
  // of A (m x kk) by rows of B (n x kk), each scaled; the cells' origins (tmem_origin_) with it.
  void WriteTcgenResult(const TcgenMma& op, const std::vector<double>& a,
                        const std::vector<double>& b, const std::vector<double>& scale_a,
                        const std::vector<double>& scale_b, int m, int n, int kk, double sign);
  absl::Status CheckTmemAtExit();
  // setmaxnreg is .sync.aligned: each one a warpgroup runs, all 128 of its threads run.
  absl::Status CheckSetMaxNRegAtExit() const;
  absl::Status CheckCopiesWaitedForAtExit() const;
  std::map<std::pair<int, const Instr*>, int64_t> setmaxnreg_runs_;  // (warpgroup, instruction)

  // ---- uninitialised values (taint.cc): shared memory starts undefined (PTX ISA); a read of
  // never-written bytes taints what it writes, arithmetic carries taints to its results, stores
  // carry them back to shared memory, and a tainted value reaching global memory (a store, a TMA
  // store's box) is an error naming both instructions.
  static Origin NeverWritten();  // the shared-byte marker of "no write yet"
  Origin RegTaint(const Thread& t, int reg) const {
    return reg >= 0 && reg < static_cast<int>(t.taint.size()) ? t.taint[reg] : nullptr;
  }
  void SetRegTaint(Thread& t, int reg, Origin o);
  Origin OperandTaint(const Thread& t, const ptx::Operand& o) const;
  // Of an instruction's sources (its guard, operands 1..; selp: the source it selects).
  Origin SourceTaint(const Thread& t, const Instr& in) const;
  void TaintDestinations(Thread& t, const Instr& in, Origin o);
  // Of the `n` shared bytes at `p` (this CTA's or a cluster peer's): `reader` where one was never
  // written, else the first byte's origin.
  Origin SharedTaint(const uint8_t* p, size_t n, const Instr& reader) const;
  void SetSharedTaint(uint8_t* p, size_t n, Origin o);
  Cta* SharedOwner(
      const uint8_t* p) const;  // this CTA or the cluster peer whose shared memory holds p
  void MarkSharedWritten(uint64_t offset, size_t n) {  // (by a cp.async)
    SetSharedTaint(shared_.data() + offset, n, nullptr);
    races_.Forget(offset, n);
  }
  // Bytes a TMA load landed, written by `agent` (TmaAgent; none: unchecked, as a cp.async's).
  void MarkTmaWritten(uint64_t offset, size_t n, const std::optional<RaceAccess>& agent) {
    SetSharedTaint(shared_.data() + offset, n, nullptr);
    if (agent)
      races_.RecordWrite(offset, n, *agent);
    else
      races_.Forget(offset, n);
  }

  // ---- data races on shared memory between warps (races.cc, races.h)
  int Warps() const { return (static_cast<int>(threads_.size()) + 31) / 32; }
  uint32_t ClusterWarp(int warp) const { return static_cast<uint32_t>(rank_ * Warps() + warp); }
  uint32_t ClusterWarps() const {
    return static_cast<uint32_t>((cluster_ ? cluster_->ctas.size() : 1) * Warps());
  }
  // The clock entry of the TMA loads completing on this CTA's mbarrier at `offset`, past the
  // cluster's warps (kTmaAgents a CTA; none past them): their bytes are its writes, at a clock
  // of the phase they complete on + 1, released into that phase (races.h).
  static constexpr uint32_t kTmaAgents = 64;
  std::optional<uint32_t> TmaAgent(uint64_t offset);
  // Where a reported earlier access is a TMA agent's: the mbarrier offset and the CTA it is in.
  std::optional<std::pair<uint64_t, int>> TmaAgentBarrier(uint32_t agent) const;
  // This CTA's mbarriers with TMA loads, by agent ordinal: the offset, and whether that object is
  // still the one there (an init at the offset starts a new agent: its phases count from 0 again).
  struct TmaAgentSlot {
    uint64_t offset;
    bool live;
  };
  std::vector<TmaAgentSlot> tma_agents_;
  // A conflict with a TMA agent's write, in words ("shared byte .. which the TMA load at ..");
  // empty where the earlier access is a warp's.
  // A conflict's earlier access: its warp ("warp 3", "warp 3 of cluster CTA 1") and where.
  std::string EarlierWarp(const SharedRaceShadow::Conflict& c) const;
  std::string EarlierWhere(const SharedRaceShadow::Conflict& c) const;
  std::string SkippedBlockBarrier(const Thread& t, const SharedRaceShadow::Conflict& c) const;
  std::string RelaxedArriveBetween(const Thread& t, const SharedRaceShadow::Conflict& c) const;
  int FirstReachable(int from, const std::function<bool(int)>& found, bool forward_only) const;
  bool CanReach(int from, int to) const;
  std::string UnwaitedTmaBytes(const SharedRaceShadow::Conflict& c, const char* who,
                               bool read) const;
  WarpClock& ClockOf(int warp);
  // A release by `warp` (an arrival): the clock it publishes; the warp's own entry then moves on.
  WarpClock Released(int warp);
  // Thread t acquires `from` (a barrier's completion, an mbarrier or cluster wait): its warp's
  // clock joins it, and t has seen every lane of its warp so far (AcquireLanes).
  void Acquire(const Thread& t, const WarpClock& from) {
    JoinClock(ClockOf(t.linear / 32), from);
    AcquireLanes(t);
  }
  // Races inside a warp (races.h, LaneView). Thread t's view, its epoch moved on first where
  // another lane has seen its current one.
  LaneView LanesOf(const Thread& t);
  // Thread t has seen every lane of its warp up to now: what any acquire orders, taken whole so
  // that no ordered pair is reported.
  void AcquireLanes(const Thread& t);
  // A bar.warp.sync of `members` (lanes of `warp`): each member has seen what every member had.
  void SyncLanes(int warp, uint32_t members);
  void EnsureLanes();
  std::vector<uint32_t> lane_epoch_;                 // per thread
  std::vector<bool> lane_epoch_seen_;                // per thread: another lane saw its epoch
  std::vector<std::array<uint32_t, 32>> lane_seen_;  // per thread: how far it saw each lane
  // Thread t's access of `n` shared bytes at `p` (this CTA's or a cluster peer's) through the
  // generic proxy: an error naming both accesses where it races with an earlier one.
  absl::Status CheckRace(const Thread& t, const Instr& in, const uint8_t* p, uint64_t n,
                         SharedRaceShadow::Kind kind);
  SharedRaceShadow races_;
  std::vector<WarpClock> warp_clocks_;  // per warp of this CTA; empty until first used
  // An error when `o` (a value `in` writes to global memory) derives from never-written memory.
  absl::Status CheckReachesGlobal(const Thread* t, const Instr& in, Origin o) const;
  absl::Status Mbarrier(Thread& t, const Instr& in);
  absl::Status MbarrierComplete(uint64_t offset);
  absl::Status MbarrierInit(Thread& t, const Instr& in, uint64_t off);
  absl::Status MbarrierInval(Thread& t, const Instr& in, uint64_t off);
  // Of the mbarrier at this CTA's shared offset `off`: a thread blocked on it (or null), and how
  // many of its phases the threads have waited through (LoadCompletingOn: a load still due on it).
  const Thread* WaiterOn(uint64_t off) const;
  int64_t PhasesWaited(uint64_t off) const;
  absl::Status Bulk(Thread& t, const Instr& in);
  absl::Status CompleteAsync(size_t index);
  const Instr* ProxyFenceAhead(const Thread& t) const;
  absl::Status CheckGenericReadsOvertaken(const Instr& load, uint64_t to, int es);
  absl::Status TryReleaseWarpgroup(int group);
  absl::Status CompleteWgmmaGroups(int group, size_t keep);
  absl::StatusOr<const EmulatedTensorMap*> MapAt(Thread& t, const Instr& in, uint64_t generic);
  absl::Status ForEachBoxElement(
      const EmulatedTensorMap& map, const std::vector<int64_t>& coords, uint64_t smem,
      const std::function<absl::Status(uint64_t, uint64_t, bool, int)>& fn);
  // A K-major matrix operand in shared memory as wgmma and tcgen05 descriptors describe it (PTX
  // ISA, matrix descriptors): start address, leading byte offset (between 8-column core matrices
  // along K, without swizzle), stride byte offset (between 8-row groups), swizzle span (0: none).
  // A matrix descriptor's operand in shared memory: start, leading and stride byte offsets,
  // swizzle span, and which dimension is contiguous.
  // A tensor-core operand's element type in shared memory.
  enum class OperandFormat { kBF16, kF16, kE4M3, kE5M2 };
  static int FormatBytes(OperandFormat f) {
    return f == OperandFormat::kE4M3 || f == OperandFormat::kE5M2 ? 1 : 2;
  }
  struct SmemOperand {
    uint64_t start = 0, lbo = 0, sbo = 0;
    int span = 0;
    bool mn_major = false;  // the operand's rows (M or N) contiguous instead of K
    int es = 2;             // bytes per element
  };
  static uint64_t OperandAddress(const SmemOperand& o, int row, int k);
  // The shared bytes [lo, hi) that `rows` x `k` elements of a descriptor's operand span.
  static std::pair<uint64_t, uint64_t> OperandSpan(const SmemOperand& o, int rows, int k = 16);
  static SmemOperand WgmmaOperand(uint64_t desc);
  // Element (row, k) of an operand of `format` (o.es its bytes), read for `in` by the async proxy
  // (`reader`): the bounds, the proxy fence and pending TMA destinations are checked.
  absl::Status ReadOperand(const Instr& in, const char* reader, const SmemOperand& o, int row,
                           int k, OperandFormat format, double* out);
  static uint64_t Swizzled(uint64_t offset, int swizzle_bytes) {
    // 128B: address bits [4,7) ^= bits [7,10); 64B: [4,6) ^= [7,9); 32B: bit 4 ^= bit 7.
    const int bits = swizzle_bytes == 128  ? 3
                     : swizzle_bytes == 64 ? 2
                     : swizzle_bytes == 32 ? 1
                                           : 0;
    return offset ^ (((offset >> 7) & ((uint64_t{1} << bits) - 1)) << 4);
  }
  void CompleteGroups(Thread& t, size_t keep);
  void Exit(Thread& t) {
    if (!t.open_group.empty()) t.groups.push_back(std::move(t.open_group));  // copies still land
    CompleteGroups(t, 0);
    // A TMA store reads its shared box until a cp.async.bulk.wait_group(.read) covers it, and the
    // CTA's shared memory is freed when it exits: its thread must wait first (an uncommitted
    // store no wait covers at all).
    const TmaStore* unread = !t.bulk_open.empty()     ? &t.bulk_open.front()
                             : !t.bulk_groups.empty() ? &t.bulk_groups.front().front()
                                                      : nullptr;
    if (unread && exit_error_.ok() && !e_.code.empty())
      exit_error_ = Fail(
          t, e_.code[std::min<size_t>(t.pc, e_.code.size() - 1)],
          absl::StrCat("exits while its TMA store at ", Where(*unread->in),
                       " may still read shared memory, which is freed at exit: ",
                       t.bulk_open.empty() ? "" : "commit it (cp.async.bulk.commit_group) and ",
                       "wait for it (cp.async.bulk.wait_group.read 0) before the exit"));
    if (!t.bulk_open.empty())
      t.bulk_groups.push_back(std::move(t.bulk_open));  // stores still write
    if (absl::Status s = CompleteBulkGroups(t, 0); !s.ok() && exit_error_.ok()) exit_error_ = s;
    SetState(t, Thread::State::kDone);
  }
  // TMA stores' boxes not yet read: a generic write to one is an error (the buffer reused
  // before cp.async.bulk.wait_group.read).
  BusyBytes tma_store_reading_;
  absl::Status exit_error_;
  absl::Status CompleteBulkGroups(Thread& t, size_t keep);
  absl::Status WriteTmaStore(const TmaStore& st);
  absl::Status CheckTmaStoreReading(const Thread& t, const Instr& in, uint64_t off, uint64_t bytes);
  // ldmatrix's and stmatrix's row addresses (operand `op` of lanes 0..8 * matrices): each row's
  // 16 bytes start on a 16-byte boundary (PTX ISA).
  absl::Status CheckMatrixRows(const std::vector<Thread*>& lanes, const Instr& in, int matrices,
                               int op, const char* name);
  std::vector<std::vector<uint64_t>> LdMatrix(const std::vector<Thread*>& lanes, const Instr& in,
                                              absl::Status* s);
  std::vector<std::vector<uint64_t>> Mma(const std::vector<Thread*>& lanes, const Instr& in,
                                         absl::Status* s);

  Device& dev_;
  const ptx::Module& m_;
  const ptx::Entry& e_;
  const std::vector<uint8_t>& params_;
  rt::Dim3 grid_, block_, ctaid_;
  std::vector<uint8_t> shared_;
  std::string kernel_;
  std::mt19937_64* rng_;
  std::vector<uint64_t> warp_priority_;  // the seed's ranking of the warps (see Advance)
  std::vector<uint64_t> run_bits_;       // bit i: thread i runnable (SetState)
  std::vector<Origin> smem_origin_;      // per shared byte (taint.cc); empty until first used
  Origin warp_taint_ = nullptr;     // of the warp instruction (ldmatrix, mma.sync) being computed
  Origin operand_taint_ = nullptr;  // of the descriptor operands ReadOperand has read
  // While a wgmma's operands are read: its warpgroup's clock at issue and its first warp
  // (cluster-wide), for the check that what a TMA load wrote there was waited for.
  const WarpClock* operand_clock_ = nullptr;
  uint32_t operand_warp_ = 0;
  int64_t* budget_;
  std::vector<Thread> threads_;
  // Per warp, the barrier.cluster.arrive its lanes ran in a phase: an .aligned one needs every lane
  // of the warp at the same instruction (ClusterBarrier).
  struct ClusterArriveSite {
    int64_t phase = -1;
    const Instr* at = nullptr;
  };
  std::vector<ClusterArriveSite> cluster_arrive_sites_;
  struct BarrierState {
    int arrived = 0, expected = 0;
    std::vector<int> waiting;
    std::vector<const Instr*> arrival;  // by thread: where it arrived in this phase, or null
    std::vector<bool> warp_counted;     // by warp: its aligned arrival counted in this phase
    WarpClock clock;                    // the arrivals' releases (races.h)
  };
  std::map<int, BarrierState> barriers_;
  // By barrier id: the threads that have waited at it with a count (bar.sync id, n), in any phase
  // so far; more of them than the count, and a phase met at two instructions, is two uses of one
  // id (Cta::CompleteIfDue).
  std::map<int, std::vector<bool>> barrier_waiters_;
  const std::vector<EmulatedTensorMap>* maps_;
  GlobalRaces* global_races_;  // the launch's, across its clusters (global_races.h)
  // Plain global accesses checked against other clusters' (GlobalRaces), and the strong ones and
  // fences that order them (exec.cc).
  absl::Status CheckGlobalRace(const Thread& t, const Instr& in, uint64_t address, uint64_t bytes,
                               bool write, bool non_coherent = false);
  absl::Status OrderGlobal(const Thread& t, const Instr& in, uint64_t address, bool reads,
                           bool writes);
  std::string GlobalRaceText(const GlobalRaces::Conflict& c, bool write) const;
  static bool StrongAcrossCtas(const Instr& in);
  ClusterState* cluster_ = nullptr;
  int rank_ = 0;
  bool exited_ = false;
  // The kernel runs griddepcontrol.wait (programmatic dependent launch): until a thread has run
  // it, the grids before this one may still be writing global memory, so that thread may not
  // touch it (PTX ISA, griddepcontrol). The emulator runs one grid: it checks the order only.
  bool waits_for_prior_grids_ = false;
  static constexpr int kClusterBarrier =
      -2;                                   // Thread::barrier while waiting at barrier.cluster.wait
  static constexpr int kRegisterWait = -3;  // ... at a setmaxnreg.inc the SM cannot grant yet
  // Shared addresses, shared::cta and shared::cluster alike, are rank << 24 | offset, as the
  // hardware's are: an H200 gives cluster CTA r's shared variables addresses r << 24 | offset
  // (docs/perf/2026-11-30-descriptors-and-tma-destinations.md), where the PTX ISA
  // says only that a shared::cta address is valid in the shared::cluster window. Code that takes
  // such an address for a small offset (a descriptor's start field without the ISA's mask) then
  // fails here as it does on the GPU.
  static constexpr uint64_t kOffsetMask = 0xFFFFFF;
  uint64_t SharedWindow() const { return static_cast<uint64_t>(rank_) << 24; }
  struct MbarrierState {
    int expected = 0, pending = 0;
    int64_t tx = 0;
    int phase = 0;          // parity of the phase in progress
    int64_t completed = 0;  // phases completed so far
    PhaseClocks clocks;     // (races.h)
    // The phase the latest TMA load's bytes counted in, and that load: a phase of copies no
    // thread waits for is a load no one reads (checked at exit).
    int64_t copy_phase = -1;
    const Instr* copy_by = nullptr;
    // The latest arrival in the phase in progress, and the one that completed the latest phase
    // (null where that was no instruction's arrival this CTA ran: a commit, say).
    const Instr* last_arrival = nullptr;
    const Instr* completed_by = nullptr;
  };
  std::map<uint64_t, MbarrierState> mbarriers_;   // by shared offset
  std::map<uint64_t, const Instr*> invalidated_;  // mbarriers ended by mbarrier.inval, and where
  bool land_due_ = false;  // a thread polls (test_wait): without a seed, let a copy land
  // A TMA load in flight.
  struct AsyncLoad {
    const EmulatedTensorMap* map;
    std::vector<int64_t> coords;
    uint64_t dst = 0, mbarrier = 0;
    const Instr* issued_by = nullptr;
    int64_t phase = -1;  // of its mbarrier (this CTA's), the one in progress at issue
    // The wait its issuing thread last passed (on another barrier) and the arrival that let it
    // pass: where the stage was released, if the load lands on one still read.
    const Instr* after_wait = nullptr;
    const Instr* released_by = nullptr;
    uint64_t Bytes() const {
      uint64_t n = rt::TmaElementBytes(map->spec.dtype);
      for (uint32_t b : map->spec.box) n *= b;
      return n;
    }
  };
  // A TMA load whose mbarrier (at `offset`, of `cta`: "" or " of cluster CTA N") is not
  // initialised when it completes: the load's lines, and what orders an init before it.
  absl::Status NoBarrierForLoad(const AsyncLoad& op, uint64_t offset, const std::string& cta) const;
  // Keeps, with a load `t` issues, the wait it last passed and the arrival that let it pass.
  void NoteRelease(const Thread& t, uint64_t load_barrier, AsyncLoad& load) const;
  // Shared bytes written through the generic proxy and not yet fenced for the async proxy:
  // the writing thread + 1 (0: clean), and each thread's unfenced ranges.
  std::vector<int32_t> generic_writer_;
  // The swizzle span + 1 of the TMA load that last wrote each shared byte (0: none), for the
  // descriptors that read them: a different span reads the tile scrambled.
  std::vector<uint8_t> tma_swizzle_;
  // setmaxnreg: each warpgroup's registers per thread, against the block's launch share.
  std::map<int, int> warpgroup_regs_;
  absl::Status SetMaxNReg(Thread& t, const Instr& in);
  // The registers a thread the block launches with: an even share of the SM's 64K, in steps of 8.
  int LaunchRegs() const {
    const int groups = (static_cast<int>(threads_.size()) + 127) / 128;
    return std::min(255, 65536 / (groups * 128 * e_.min_ctas_per_sm)) / 8 * 8;
  }
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> unfenced_;
  // Shared bytes read through the generic proxy (ld.shared, ldmatrix): the last reading thread + 1
  // (0: none) and that thread's count of fence.proxy.async at the read. A TMA load landing on a
  // byte whose reader has not fenced since is a write of the async proxy that may overtake the
  // read (PTX ISA, proxies: a fence.proxy.async orders the generic accesses before it with the
  // async proxy's after it); on an H200 it did
  // (docs/perf/2026-11-27-weights-by-tma-boxes-mma-sync.md).
  std::vector<int32_t> generic_reader_, generic_read_epoch_;
  std::map<int, int32_t> proxy_fences_;  // per thread
  std::map<int, const Instr*> last_generic_read_;
  void NoteGenericRead(const Thread& t, const Instr& in, uint64_t off, uint64_t bytes);
  // A shared access that a TMA load in flight will overwrite (the wait for it is missing).
  absl::Status CheckPendingOverlap(const Thread* t, const Instr& in, uint64_t off, uint64_t bytes,
                                   const char* what);
  // cp.async copies not landed yet: a read of such a byte is an error (a missing or too shallow
  // cp.async.wait_group, or no barrier between another thread's wait and this read).
  BusyBytes cp_async_pending_;
  // "PTX line N, dsl line" of an instruction, for messages that name two.
  std::string Where(const Instr& in) const {
    const std::string dsl = m_.DslLine(in);
    return absl::StrCat("PTX line ", in.line, dsl.empty() ? "" : ", " + dsl);
  }
  absl::Status CheckCpAsyncPending(const Thread& t, const Instr& in, uint64_t off, uint64_t bytes);
  std::string PendingCopyCause(uint64_t at) const;
  absl::Status CheckCpAsyncWritePending(const Thread& t, const Instr& in, uint64_t off,
                                        uint64_t bytes);
  // An async-proxy read (wgmma, tcgen05.mma, TMA store) of bytes a generic store left unfenced.
  absl::Status CheckFenced(const Instr& in, uint64_t off, uint64_t bytes, const char* reader);
  // A TMA copy's global element outside every allocation: the copy's line, its map, its box
  // and where the address lies.
  absl::Status TmaOutsideMemory(const Instr& in, const EmulatedTensorMap& map,
                                const std::vector<int64_t>& coords, uint64_t address,
                                const char* what) const;
  std::vector<AsyncLoad> pending_;
  const AsyncLoad* LoadCompletingOn(uint64_t off) const;  // (of this CTA's mbarrier at `off`)
  // cp.async.mbarrier.arrive.noinc: the copies the thread had in flight at that instruction, which
  // land, and then arrive on the mbarrier, at a moment the seed picks (Advance) or at the thread's
  // next cp.async.wait_group or wait_all, whichever comes first.
  struct CpAsyncArrival {
    std::vector<AsyncCopy> copies;
    uint64_t mbarrier = 0;
    int thread = 0;
    const Instr* in = nullptr;
  };
  std::vector<CpAsyncArrival> cp_async_arrivals_;
  // Lands arrival `index`, and first the thread's earlier ones (a later arrival tracks their
  // copies too).
  absl::Status LandCpAsyncArrival(size_t index);
  absl::Status LandOneCpAsyncArrival(size_t index);
  // A landed copy's bytes, written through the generic proxy: generic_writer_ gets `mark`.
  void WriteLandedCopy(const AsyncCopy& c, int writer, int32_t mark);
  // A copy landed at `t`'s own wait: `t`'s unfenced write, which its fence.proxy.async clears.
  void LandOwnCopy(Thread& t, const AsyncCopy& c);
  // cp.async writes through the generic proxy (PTX ISA, cp.async): bytes landed by an arrival are
  // unfenced for the async proxy until a thread that has waited for the phase the arrival
  // completes runs fence.proxy.async. Their generic_writer_ mark is minus (writer + 1), which the
  // writer's own fence does not clear, and cp_landing_id_ names their landing. Per landing, the
  // latest for each mbarrier and writer: its id, byte spans, mbarrier, phase and writer.
  struct CpAsyncLanding {
    int32_t id = 0;
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [offset, bytes]
    uint64_t mbarrier = 0;
    int64_t phase = 0;
    int writer = 0;
    int64_t newest_group = -1;  // of its copies' groups (INT64_MAX: one was not committed)
  };
  // The writer's own cp.async.wait_group/wait_all that covers a landing makes its bytes the
  // writer's own unfenced writes, which its fence.proxy.async clears.
  void OwnLandingsCoveredByWait(Thread& t, bool all, int64_t keep);
  std::vector<CpAsyncLanding> cp_async_unfenced_;
  std::vector<int32_t> cp_landing_id_;  // per shared byte; empty until an arrival lands
  int32_t next_landing_id_ = 1;
  void FenceCpAsyncLandings(const Thread& t);
  // Tensor memory: 128 lanes x 512 32-bit columns, and which columns are allocated.
  std::vector<uint32_t> tmem_ = std::vector<uint32_t>(128 * 512, 0);
  // Each cell's origin (taint.cc): tcgen05.alloc leaves its columns undefined (PTX ISA), so they
  // start NeverWritten; an MMA that accumulates onto such a cell passes its own instruction on,
  // one that does not accumulate defines it, and tcgen05.ld taints what it loads. Sized at the
  // first alloc: every access to tensor memory lies in an allocation, checked before it.
  std::vector<Origin> tmem_origin_;
  // The origins of the registers the last tcgen05.ld wrote (by lane, by register), for
  // ReleaseAlignedWarp.
  std::vector<std::vector<Origin>> tcgen_ld_taint_;
  // Allocated columns: first column -> columns, the tcgen05.alloc (named where they leak).
  std::map<uint32_t, std::pair<uint32_t, const Instr*>> tmem_allocs_;
  // The shared slot each live allocation's address was written to (slot -> first column), and
  // the live allocations whose slot a later alloc wrote again (first column -> that alloc): named
  // where such an allocation is never freed.
  std::map<uint64_t, uint32_t> tmem_slots_;
  std::map<uint32_t, const Instr*> tmem_overwritten_;
  const Instr* relinquished_ = nullptr;  // the tcgen05.relinquish_alloc_permit a warp ran
  // Columns a tcgen05.dealloc freed (first column -> columns, the dealloc), until allocated again:
  // an access there names the dealloc, the likely cause.
  std::map<uint32_t, std::pair<uint32_t, const Instr*>> tmem_freed_;
  std::string FreedBy(uint32_t col, uint32_t n) const {
    for (const auto& [start, freed] : tmem_freed_)
      if (col < start + freed.first && start < col + n)
        return absl::StrCat("; those columns were freed by the tcgen05.dealloc at ",
                            Where(*freed.second),
                            ": an access after the dealloc (a barrier missing before it?)");
    return "";
  }
  std::vector<TcgenMma> tcgen_issued_;  // issued, not yet committed (in order)
  // tcgen05.st in flight (PTX ISA: asynchronous until the issuing thread's tcgen05.wait::st): the
  // lanes and columns a warp's store wrote, and its threads that have not waited yet.
  struct TcgenStoreInFlight {
    uint32_t lane0, lanes, col0, cols;
    std::vector<int> threads;
    const Instr* in;
  };
  std::vector<TcgenStoreInFlight> tcgen_stores_;
  // A message when lanes x columns meet a store in flight, else "".
  // Why a tcgen05.ld/st (`kind`) of columns col0.. races with an MMA not yet complete ("" if not).
  std::string PendingMmaRace(const std::string& kind, bool store, uint32_t col0,
                             uint32_t num) const;
  std::string TcgenStoreRace(const char* what, uint32_t lane0, uint32_t lanes, uint32_t col0,
                             uint32_t cols) const;
  struct TcgenCommit {
    std::vector<TcgenMma> mmas;
    uint64_t mbarrier;
    uint16_t cta_mask =
        0;  // multicast: the cluster CTAs whose barrier at that offset gets the arrival
    int line = 0;
    int thread = 0;  // the committing thread, on whose behalf the arrival releases
  };
  std::vector<TcgenCommit> tcgen_commits_;  // committed, completing in order
  std::set<const Instr*> inits_run_;        // the mbarrier.init instructions some thread has run
  // tcgen05 ordering across threads (PTX ISA, the tcgen05 memory consistency model): a wait
  // orders a thread's tcgen05 ops after what other threads' tcgen05 ops did only through
  // tcgen05.fence::after_thread_sync after it, and a thread's tcgen05.ld/st are ordered before
  // another thread's later tcgen05 ops only through tcgen05.fence::before_thread_sync before the
  // arrive or barrier that signals them. Per TMEM lane quarter (a warp's 32 lanes) and column:
  // when the last MMA writing it completed, and the last warp's ld or st of it and whether that
  // warp has fenced it since. Times are the launch's instruction count (Now).
  struct TmemOrder {
    int64_t written = INT64_MIN;
    const ptx::Instr* writer = nullptr;
    int64_t accessed = INT64_MIN, access_fenced = INT64_MIN;
    int accessor_warp = -1;
    const ptx::Instr* access = nullptr;
    bool access_read_undefined = false;  // a tcgen05.ld of cells nothing had written (its lane 0)
  };
  std::vector<TmemOrder> tmem_order_ = std::vector<TmemOrder>(4 * 512);
  std::map<int, std::vector<int>> unfenced_tmem_access_;  // by warp: indices into tmem_order_
  int64_t Now() const { return -*budget_; }
  // The clocks: the launch's instruction count (Now() rises from minus the budget), offset to stay
  // positive: monotone over the whole launch, across its clusters.
  uint64_t Clock() const { return static_cast<uint64_t>(Now()) + (uint64_t{1} << 62); }
  // When a TMA load last landed on each 128-byte granule of shared memory, and its instruction:
  // a tcgen05.mma reading it must be ordered after the wait that saw it land
  // (CheckMmaAfterTmaLoads).
  struct TmaLanding {
    int64_t time = INT64_MIN;
    const Instr* load = nullptr;
  };
  std::vector<TmaLanding> tma_landed_;
  void NoteTmaLanding(uint64_t offset, const Instr* load) {
    if (tma_landed_.empty()) tma_landed_.resize(shared_.size() / 128 + 1);
    tma_landed_[offset / 128] = {Now(), load};
  }
  absl::Status CheckMmaAfterTmaLoads(const Thread& t, const Instr& in, uint64_t a_desc,
                                     uint64_t b_desc, bool pair) const;
  // An operand byte `addr` of `op`, read as it completes: no TMA load landed on it since its
  // issue.
  absl::Status CheckOperandNotRefilled(const struct TcgenMma& op, uint64_t addr) const;
  // What wrote each shared byte last (a st.shared, an stmatrix) and that thread's last MMA, for
  // the global bytes a TMA store copies from it; and the text of a write site, built once.
  std::vector<std::pair<const Instr*, const Instr*>> shared_writer_;
  std::map<std::pair<const Instr*, const Instr*>, std::string> site_text_;
  std::map<std::tuple<const Instr*, const Instr*, const Instr*>, std::string> tma_site_text_;
  void NoteSharedWrite(uint64_t off, uint64_t n, const Instr& in, const Thread& t) {
    if (shared_writer_.empty()) shared_writer_.assign(shared_.size(), {nullptr, nullptr});
    for (uint64_t b = off; b < off + n && b < shared_writer_.size(); ++b)
      shared_writer_[b] = {&in, t.last_mma};
  }
  const std::string& SiteText(const Instr& in, const Instr* mma);
  void NoteGlobalWrite(uint64_t address, uint64_t n, const Instr& in, const Thread& t) {
    dev_.NoteWrite(address, n, SiteText(in, t.last_mma), Now(), ctaid_, t.linear);
  }
  void Synced(Thread& t, const Instr& by) { t.synced = Now(), t.synced_by = &by; }
  std::string NotOrderedAfter(const Thread& t, int64_t time) const;
  absl::Status CheckTcgenAfterWrite(const std::vector<Thread*>& lanes, const Instr& in,
                                    uint32_t quarter, uint32_t col0, uint32_t num);
  absl::Status OrderTcgenAccess(const std::vector<Thread*>& lanes, const Instr& in,
                                uint32_t quarter, uint32_t col0, uint32_t num, bool store);
  absl::Status CheckMmaAfterAccess(const Thread& t, const Instr& in, uint32_t col0, uint32_t n,
                                   const char* what = "overwrites");
  // wgmma: the warpgroup's ops issued since its last commit, and its committed groups.
  struct WgmmaOp {
    std::vector<std::vector<int>> d_regs;  // per thread of the warpgroup
    std::vector<std::vector<int>> a_regs;  // per thread, where A comes from registers
    uint64_t a_desc = 0, b_desc = 0;
    std::vector<double>
        a_from_regs;  // 64 x 16, row-major, when A comes from registers (read at issue)
    std::vector<std::pair<uint64_t, uint64_t>>
        reads;                // shared byte spans [lo, hi) of its descriptors
    bool a_mn_major = false;  // imm-trans-a (A from a descriptor)
    bool b_mn_major = false;  // imm-trans-b
    int n = 0, k = 16;        // k: 16 for 16-bit operands, 32 for 8-bit ones (32 bytes a row)
    bool scale_d = true, negate_a = false, negate_b = false;
    OperandFormat a_format = OperandFormat::kBF16, b_format = OperandFormat::kBF16;
    int line = 0;
    const Instr* in = nullptr;
    // Per row of A from registers, read at issue: the first tainted register holding that row
    // (row r of D reads only row r of A, so a row past a ragged edge taints only its own).
    std::vector<Origin> a_row_taint;
    WarpClock issue_clock;  // what every warp of the warpgroup had acquired at issue
    uint32_t issue_warp = 0;
  };
  // Thread t of the warpgroup's part of a wgmma's A from registers, into op.a_from_regs.
  void ReadWgmmaAFragment(WgmmaOp& op, const Thread& th, const Instr& mine, int t);
  // The wgmma issued but not yet waited for that reads shared bytes [lo, hi), or null.
  const WgmmaOp* WgmmaStillReading(uint64_t lo, uint64_t hi) const;
  struct Warpgroup {
    int arrived = 0;      // threads waiting at a wgmma instruction (all 128 release it)
    bool fenced = false;  // has run a wgmma.fence (the ISA's rule for its first mma_async)
    std::vector<WgmmaOp> open;
    std::vector<std::vector<WgmmaOp>> groups;
  };
  std::map<int, Warpgroup> warpgroups_;
};

}  // namespace kiln::emu::detail
