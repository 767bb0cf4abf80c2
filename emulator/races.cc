// Data races on shared memory between warps: the warps' vector clocks and the check of each
// generic-proxy access (races.h says what orders accesses and what is left out).
#include <algorithm>
#include <functional>
#include <utility>

#include "emulator/cta.h"

namespace kiln::emu::detail {
namespace {

// The causes a race between two warps' accesses to shared memory is told by: no barrier between
// them, or one that some threads skip.
constexpr const char* kMissing = "a SyncThreads, or an arrive that this warp waits for, is missing";
constexpr const char* kSkipped =
    " (a SyncThreads inside an If that only some threads take orders nothing between those "
    "that take it and those that do not; place it where every thread passes)";

const char* KindWord(SharedRaceShadow::Kind kind) {
  return kind == SharedRaceShadow::Kind::kRead    ? "read"
         : kind == SharedRaceShadow::Kind::kWrite ? "write"
                                                  : "atomic";
}
}  // namespace

WarpClock& Cta::ClockOf(int warp) {
  if (warp_clocks_.empty()) {
    const size_t cluster_warps = (cluster_ ? cluster_->ctas.size() : 1) * Warps();
    warp_clocks_.assign(Warps(), WarpClock(cluster_warps, 0));
    for (int w = 0; w < Warps(); ++w) warp_clocks_[w][ClusterWarp(w)] = 1;
  }
  return warp_clocks_[warp];
}

WarpClock Cta::Released(int warp) {
  WarpClock& clock = ClockOf(warp);
  WarpClock published = clock;
  ++clock[ClusterWarp(warp)];
  return published;
}

void Cta::EnsureLanes() {
  if (!lane_epoch_.empty()) return;
  lane_epoch_.assign(threads_.size(), 1);
  lane_epoch_seen_.assign(threads_.size(), false);
  lane_seen_.assign(threads_.size(), {});
}

LaneView Cta::LanesOf(const Thread& t) {
  EnsureLanes();
  if (lane_epoch_seen_[t.linear]) ++lane_epoch_[t.linear], lane_epoch_seen_[t.linear] = false;
  return {static_cast<uint32_t>(t.linear % 32), lane_epoch_[t.linear], lane_seen_[t.linear].data()};
}

void Cta::AcquireLanes(const Thread& t) {
  EnsureLanes();
  const int first = t.linear / 32 * 32, n = std::min<int>(32, threads_.size() - first);
  for (int j = 0; j < n; ++j) {
    lane_seen_[t.linear][j] = lane_epoch_[first + j];
    lane_epoch_seen_[first + j] = true;
  }
}

void Cta::SyncLanes(int warp, uint32_t members) {
  EnsureLanes();
  const int first = warp * 32, n = std::min<int>(32, threads_.size() - first);
  std::array<uint32_t, 32> joined{};
  for (int m = 0; m < n; ++m) {
    if (!(members >> m & 1)) continue;
    for (int j = 0; j < 32; ++j) joined[j] = std::max(joined[j], lane_seen_[first + m][j]);
    joined[m] = std::max(joined[m], lane_epoch_[first + m]);
    lane_epoch_seen_[first + m] = true;
  }
  for (int m = 0; m < n; ++m)
    if (members >> m & 1) lane_seen_[first + m] = joined;
}

std::optional<uint32_t> Cta::TmaAgent(uint64_t offset) {
  size_t ordinal = 0;
  while (ordinal < tma_agents_.size() &&
         !(tma_agents_[ordinal].live && tma_agents_[ordinal].offset == offset))
    ++ordinal;
  if (ordinal == tma_agents_.size()) {
    if (ordinal == kTmaAgents) return std::nullopt;  // (past them: unchecked, as a cp.async)
    tma_agents_.push_back({offset, true});
  }
  return ClusterWarps() + static_cast<uint32_t>(rank_) * kTmaAgents + ordinal;
}

std::optional<std::pair<uint64_t, int>> Cta::TmaAgentBarrier(uint32_t agent) const {
  if (agent < ClusterWarps()) return std::nullopt;
  const int rank = static_cast<int>((agent - ClusterWarps()) / kTmaAgents);
  const size_t ordinal = (agent - ClusterWarps()) % kTmaAgents;
  const Cta* cta = cluster_ && rank < static_cast<int>(cluster_->ctas.size()) ? cluster_->ctas[rank]
                   : rank == rank_                                            ? this
                                                                              : nullptr;
  if (!cta || ordinal >= cta->tma_agents_.size()) return std::nullopt;
  return std::make_pair(cta->tma_agents_[ordinal].offset, rank);
}

std::string Cta::EarlierWarp(const SharedRaceShadow::Conflict& c) const {
  const int other_rank = static_cast<int>(c.earlier.warp) / Warps();
  return absl::StrCat(
      "warp ", static_cast<int>(c.earlier.warp) % Warps(),
      cluster_ && other_rank != rank_ ? absl::StrCat(" of cluster CTA ", other_rank) : "");
}

std::string Cta::EarlierWhere(const SharedRaceShadow::Conflict& c) const {
  return c.earlier.instr >= 0 && c.earlier.instr < static_cast<int32_t>(e_.code.size())
             ? Where(e_.code[c.earlier.instr])
             : "an earlier instruction";
}

std::string Cta::UnwaitedTmaBytes(const SharedRaceShadow::Conflict& c, const char* who,
                                  bool read) const {
  const std::optional<std::pair<uint64_t, int>> barrier = TmaAgentBarrier(c.earlier.warp);
  if (!barrier) return "";
  return absl::StrFormat(
      "shared byte %d, which the TMA load at %s wrote for phase %d of the mbarrier at shared "
      "offset %d%s, and %s had not waited for that phase: the wait for the stage's "
      "mbarrier is missing, comes after this %s, or waits on another stage's mbarrier or "
      "phase%s",
      c.byte, EarlierWhere(c), c.earlier.clock - 1, barrier->first,
      cluster_ && cluster_->ctas.size() > 1 ? absl::StrCat(" of cluster CTA ", barrier->second)
                                            : "",
      who, read ? "read" : "write",
      read ? "; or this read's address (a descriptor's start) is not the stage's it waited for"
           : "");
}

absl::Status Cta::CheckRace(const Thread& t, const Instr& in, const uint8_t* p, uint64_t n,
                            SharedRaceShadow::Kind kind) {
  Cta* owner = SharedOwner(p);
  if (!owner) return absl::OkStatus();
  const int warp = t.linear / 32;
  const uint64_t off = p - owner->shared_.data();
  std::optional<SharedRaceShadow::Conflict> c =
      owner->races_.Access(off, n, kind, ClusterWarp(warp), ClockOf(warp), LanesOf(t),
                           static_cast<int32_t>(&in - e_.code.data()));
  if (!c) return absl::OkStatus();
  if (const std::string tma =
          UnwaitedTmaBytes(*c, "this warp", kind == SharedRaceShadow::Kind::kRead);
      !tma.empty())
    return Fail(t, in, absl::StrCat("this ", KindWord(kind), " of ", tma));
  const std::string byte = owner != this
                               ? absl::StrCat("byte ", c->byte, " of cluster CTA ", owner->rank_)
                               : absl::StrCat("shared byte ", c->byte);
  if (c->earlier.warp == ClusterWarp(warp)) {
    const bool landed = c->earlier.instr >= 0 &&
                        c->earlier.instr < static_cast<int32_t>(e_.code.size()) &&
                        e_.code[c->earlier.instr].op == Op::kCpAsync;
    return Fail(
        t, in,
        absl::StrFormat(
            "a data race on %s: this %s and lane %d's %s (%s) in this warp are not ordered: %s",
            byte, KindWord(kind), c->earlier.lane,
            landed ? "cp.async, landed at its wait," : KindWord(c->earlier_kind), EarlierWhere(*c),
            landed ? "the bytes a cp.async lands are its own thread's, and the other threads "
                     "see them only through a barrier after that thread's cp.async.wait_group "
                     "(a SyncThreads after the wait is missing; a SyncWarp where one warp alone "
                     "reads them)"
                   : "the lanes of a warp run apart, and program order holds within a thread "
                     "only (PTX ISA, memory consistency model); no SyncWarp (bar.warp.sync) of "
                     "both lanes, or other barrier, lies between them (a SyncWarp is missing)"));
  }
  if (const std::string relaxed = RelaxedArriveBetween(t, *c); !relaxed.empty())
    return Fail(t, in,
                absl::StrFormat("a data race on %s: this %s and %s's %s (%s) are not ordered: %s",
                                byte, KindWord(kind), EarlierWarp(*c), KindWord(c->earlier_kind),
                                EarlierWhere(*c), relaxed));
  std::string why = SkippedBlockBarrier(t, *c);
  if (why.empty()) why = kMissing;
  return Fail(t, in,
              absl::StrFormat("a data race on %s: this %s and %s's %s (%s) are not "
                              "ordered: no barrier, mbarrier phase or cluster barrier lies between "
                              "them (%s)",
                              byte, KindWord(kind), EarlierWarp(*c), KindWord(c->earlier_kind),
                              EarlierWhere(*c), why));
}

// Where the other warp's access came before a cluster barrier that this thread has waited on
// since, but that warp arrived at it with .relaxed: the barrier was there, and released nothing
// (PTX ISA, barrier.cluster).
std::string Cta::RelaxedArriveBetween(const Thread& t, const SharedRaceShadow::Conflict& c) const {
  if (!cluster_ || !t.cluster_met) return "";
  auto it = cluster_->relaxed_arrives.find(c.earlier.warp);
  if (it == cluster_->relaxed_arrives.end()) return "";
  const ClusterState::RelaxedArrive& r = it->second;
  if (r.epoch < c.earlier.clock || r.phase >= cluster_->phase) return "";
  return absl::StrCat(
      "the cluster barrier between them was arrived at with .relaxed by that warp (", Where(*r.at),
      "), and a relaxed arrive releases nothing, so what the warp did before it is not ordered "
      "before the wait (PTX ISA, barrier.cluster): ClusterArrive() without relaxed, or "
      "ClusterSync, publishes it");
}

// The first instruction from `from` on, along the entry's control flow (both ways of every
// conditional branch; with `forward_only`, no branch back), that `found` accepts, or -1.
int Cta::FirstReachable(int from, const std::function<bool(int)>& found, bool forward_only) const {
  const int n = static_cast<int>(e_.code.size());
  std::vector<bool> seen(n, false);
  std::vector<int> work = {from};
  while (!work.empty()) {
    const int pc = work.back();
    work.pop_back();
    if (pc < 0 || pc >= n || seen[pc]) continue;
    if (found(pc)) return pc;
    seen[pc] = true;
    const Instr& in = e_.code[pc];
    const bool ends = in.op == Op::kRet || in.op == Op::kExit || in.op == Op::kTrap ||
                      in.op == Op::kBra || in.op == Op::kBrx;
    if (!ends || in.guard >= 0) work.push_back(pc + 1);
    if (in.op == Op::kBra && !in.ops.empty() && (!forward_only || in.ops[0].target > pc))
      work.push_back(in.ops[0].target);
    if (in.op == Op::kBrx && in.ops.size() > 1)
      for (int target : in.ops[1].regs)
        if (!forward_only || target > pc) work.push_back(target);
  }
  return -1;
}

// Whether a thread at instruction `from` can still reach instruction `to`.
bool Cta::CanReach(int from, int to) const {
  return FirstReachable(
             from, [&](int pc) { return pc == to; }, /*forward_only=*/false) >= 0;
}

// Both causes, where a block-wide bar.sync that one of the two warps waits at, is about to wait
// at or last passed is one that a thread of the other warp can no longer reach (it exited, or no
// path leads from where it is back to the barrier): a SyncThreads inside an If that only some
// threads take. The threads that skip it meet the waiting ones at their next bar.sync 0 (or their
// exit releases them), so it orders nothing between the two groups.
std::string Cta::SkippedBlockBarrier(const Thread& t, const SharedRaceShadow::Conflict& c) const {
  const int other = static_cast<int>(c.earlier.warp) - rank_ * Warps();
  const int warp = t.linear / 32;
  if (other < 0 || other >= Warps() || other == warp) return "";
  const int threads = static_cast<int>(threads_.size());
  const auto is_block_barrier = [](const Instr& x) {
    return x.op == Op::kBar && x.ops.size() < 2 && !x.Has("arrive") && !x.Has("warp") &&
           !x.Has("cluster");
  };
  // A thread of warp w that does not reach `at`: its index and why, or "".
  const auto skipper = [&](int w, const Instr& at) -> std::string {
    const int to = static_cast<int>(&at - e_.code.data());
    for (int j = w * 32; j < std::min(threads, w * 32 + 32); ++j) {
      const Thread& u = threads_[j];
      if (u.state == Thread::State::kDone)
        return absl::StrCat(": its thread ", j, " exited without reaching it");
      if (u.block_barrier == &at) continue;  // it passed it
      if (u.state == Thread::State::kBarrier && u.pc >= 1 && &e_.code[u.pc - 1] == &at) continue;
      if (!CanReach(&u == &t ? u.pc + 1 : u.pc, to))
        return absl::StrCat(": its thread ", j, " has gone past it");
    }
    return "";
  };
  const auto both = [&](const Instr& at, const std::string& where, int w, const std::string& why) {
    return absl::StrCat(kMissing, "; or the SyncThreads at ", Where(at), where,
                        ", is one that warp ", w, " skips", why, kSkipped);
  };
  // The next block-wide bar.sync this thread runs into before a branch.
  for (int pc = t.pc + 1; pc < static_cast<int>(e_.code.size()) && pc < t.pc + 64; ++pc) {
    const Instr& x = e_.code[pc];
    if (x.op == Op::kBra || x.op == Op::kBrx || x.op == Op::kRet || x.op == Op::kExit) break;
    if (!is_block_barrier(x)) continue;
    if (std::string why = skipper(other, x); !why.empty())
      return both(x, ", where this warp is about to wait", other, why);
    break;
  }
  // A block-wide bar.sync that a thread of either warp waits at.
  for (auto [waiter, runner] : {std::pair{other, warp}, std::pair{warp, other}})
    for (int j = waiter * 32; j < std::min(threads, waiter * 32 + 32); ++j) {
      const Thread& u = threads_[j];
      if (u.state != Thread::State::kBarrier || u.barrier != 0 || u.pc < 1) continue;
      const Instr& at = e_.code[u.pc - 1];
      if (!is_block_barrier(at)) continue;
      if (std::string why = skipper(runner, at); !why.empty())
        return both(at, absl::StrCat(", where warp ", waiter, " waits"), runner, why);
      break;
    }
  // The block-wide bar.sync that last released this thread.
  if (t.block_barrier)
    if (std::string why = skipper(other, *t.block_barrier); !why.empty())
      return both(*t.block_barrier, ", which released this thread", other, why);
  return "";
}

}  // namespace kiln::emu::detail
