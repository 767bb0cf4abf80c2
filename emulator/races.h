// Data races on shared memory between warps (PTX ISA, memory consistency model): two accesses to
// one byte through the generic proxy, at least one a write, by warps that no synchronisation
// orders. Orders come from vector clocks over the cluster's warps, advanced where the ISA gives
// release and acquire semantics: a CTA barrier's arrivals and its completion, an mbarrier's
// arrivals (a thread's, a remote one, a cp.async or tcgen05.commit arrival on a thread's behalf)
// and a wait that sees the phase complete, barrier.cluster's arrive (but .relaxed) and wait.
//
// Atomics do not race with each other (they are morally strong), but with a plain read or write
// they do, as a write would. The lanes of one warp share the warp's clock; between them (program
// order holds within a thread only, and a warp's lanes run apart) each thread keeps how far it
// has seen each lane of its warp (LaneView): a bar.warp.sync joins its member lanes' views, and
// anything else a thread acquires by (a barrier's completion, an mbarrier or cluster wait, a
// fence, an acquire load or atomic) counts as having seen every lane of its warp so far, so that
// an ordered pair is never reported. A cp.async's bytes count as its thread's write when they
// land (its own rules are checked where it writes, exec_ampere.cc). A TMA load's bytes are a write
// by an agent of their own, one per mbarrier object (Cta::TmaAgent; 64 a CTA, past them unchecked),
// whose release joins that mbarrier's open phase: a generic access (read, write, atomic) or a wgmma
// at its issue must have acquired that phase. tcgen05.mma's reads of shared memory are not checked
// this way. For each byte it keeps the last write, the last read and the last atomic, so an access
// is checked against the latest of each only: of several unordered readers it may name one or,
// where the latest is ordered, none.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace kiln::emu::detail {

// A vector clock: entry g is how far warp g of the cluster (rank * warps a CTA + warp) is known
// to have gone.
using WarpClock = std::vector<uint32_t>;

inline void JoinClock(WarpClock& into, const WarpClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

// A barrier's clocks: the releases of the arrivals in its open phase, and those of its last
// completed phase, which a waiter that saw it complete acquires.
struct PhaseClocks {
  WarpClock open, done;
  void Complete() {
    done = std::move(open);
    open.clear();
  }
};

// A thread's view of its own warp's lanes: its lane, its epoch (its accesses are numbered by
// epochs, a new one after another lane has seen the last), and how far it has seen each lane
// (`seen[j]`: lane j's accesses up to that epoch are ordered before this thread's next).
struct LaneView {
  uint32_t lane = 0, epoch = 0;
  const uint32_t* seen = nullptr;
};

// One access of a byte: its warp (cluster-wide), that warp's clock then (0: no access), its
// instruction's index in the kernel's code, and its thread's lane and epoch (LaneView).
struct RaceAccess {
  uint32_t warp = 0, clock = 0;
  int32_t instr : 27 = -1;
  uint32_t lane : 5 = 0;
  uint32_t epoch = 0;
  bool OrderedBefore(const WarpClock& now) const {
    return clock == 0 || (warp < now.size() && clock <= now[warp]);
  }
  // Whether it is ordered before the next access of `view`'s thread, a lane of its own warp.
  bool OrderedBeforeLane(const LaneView& view) const {
    return clock == 0 || lane == view.lane || epoch <= view.seen[lane];
  }
};
static_assert(sizeof(RaceAccess) == 16, "a shared byte's shadow keeps three");

// The last write, read and atomic of each byte of one CTA's shared memory, in pages allocated as
// they are first touched.
class SharedRaceShadow {
 public:
  enum class Kind { kRead, kWrite, kAtomic };
  struct Conflict {
    RaceAccess earlier;
    Kind earlier_kind = Kind::kRead;
    uint64_t byte = 0;
  };

  // A thread of warp `warp` (clock `now`, its lanes as `lanes` sees them) accesses bytes
  // [off, off + n) at instruction `instr`: the first earlier access of another thread that
  // conflicts with it and is not ordered before it, else none; the access is recorded either way.
  std::optional<Conflict> Access(uint64_t off, uint64_t n, Kind kind, uint32_t warp,
                                 const WarpClock& now, const LaneView& lanes, int32_t instr) {
    std::optional<Conflict> found;
    const RaceAccess self{warp, now[warp], instr, lanes.lane, lanes.epoch};
    auto check = [&](const RaceAccess& earlier, Kind earlier_kind, uint64_t b) {
      if (!found &&
          (earlier.warp != warp ? !earlier.OrderedBefore(now) : !earlier.OrderedBeforeLane(lanes)))
        found = Conflict{earlier, earlier_kind, b};
    };
    for (uint64_t b = off; b < off + n; ++b) {
      Byte& s = At(b);
      check(s.write, Kind::kWrite, b);
      if (kind != Kind::kRead) check(s.read, Kind::kRead, b);
      if (kind != Kind::kAtomic) check(s.atomic, Kind::kAtomic, b);
      if (kind == Kind::kWrite) s = Byte{self, {}, {}};
      if (kind == Kind::kRead) s.read = self;
      if (kind == Kind::kAtomic) s.atomic = self;
    }
    return found;
  }
  // A write that needs no check (a cp.async landing for its thread), recorded.
  void Record(uint64_t off, uint64_t n, uint32_t warp, const WarpClock& now, const LaneView& lanes,
              int32_t instr) {
    RecordWrite(off, n, {warp, now[warp], instr, lanes.lane, lanes.epoch});
  }
  // A write the async proxy made (a TMA load landing) as `access`: readers must be ordered after
  // the mbarrier phase it completes on (Cta::TmaAgent).
  void RecordWrite(uint64_t off, uint64_t n, const RaceAccess& access) {
    for (uint64_t b = off; b < off + n; ++b) At(b) = Byte{access, {}, {}};
  }
  // The last write of bytes [off, off + n) by another agent that `now` does not order, if any;
  // nothing recorded (an async-proxy read: a wgmma's operands at its issue).
  std::optional<Conflict> UnorderedWrite(uint64_t off, uint64_t n, uint32_t warp,
                                         const WarpClock& now) const {
    for (uint64_t b = off; b < off + n; ++b) {
      if (b / kPage >= pages_.size() || !pages_[b / kPage]) continue;
      const RaceAccess& w = (*pages_[b / kPage])[b % kPage].write;
      if (w.warp != warp && !w.OrderedBefore(now)) return Conflict{w, Kind::kWrite, b};
    }
    return std::nullopt;
  }
  // Bytes the async proxy wrote: no generic access before them is left to race with.
  void Forget(uint64_t off, uint64_t n) {
    for (uint64_t b = off; b < off + n; ++b)
      if (b / kPage < pages_.size() && pages_[b / kPage]) At(b) = Byte{};
  }

 private:
  struct Byte {
    RaceAccess write, read, atomic;
  };
  static constexpr uint64_t kPage = 1024;
  Byte& At(uint64_t b) {
    if (b / kPage >= pages_.size()) pages_.resize(b / kPage + 1);
    std::unique_ptr<std::array<Byte, kPage>>& page = pages_[b / kPage];
    if (!page) page = std::make_unique<std::array<Byte, kPage>>();
    return (*page)[b % kPage];
  }
  std::vector<std::unique_ptr<std::array<Byte, kPage>>> pages_;
};

}  // namespace kiln::emu::detail
