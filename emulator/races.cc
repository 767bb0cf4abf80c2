// Data races on shared memory between warps: the warps' vector clocks and the check of each
// generic-proxy access (races.h says what orders accesses and what is left out).
#include <algorithm>
#include <utility>

#include "emulator/cta.h"

namespace kiln::emu::detail {
namespace {
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
  std::optional<SharedRaceShadow::Conflict> c = owner->races_.Access(
      off, n, kind, ClusterWarp(warp), ClockOf(warp), static_cast<int32_t>(&in - e_.code.data()));
  if (!c) return absl::OkStatus();
  if (const std::string tma =
          UnwaitedTmaBytes(*c, "this warp", kind == SharedRaceShadow::Kind::kRead);
      !tma.empty())
    return Fail(t, in, absl::StrCat("this ", KindWord(kind), " of ", tma));
  const std::string byte = owner != this
                               ? absl::StrCat("byte ", c->byte, " of cluster CTA ", owner->rank_)
                               : absl::StrCat("shared byte ", c->byte);
  std::string why = SkippedBlockBarrier(t, *c);
  if (why.empty()) why = "a SyncThreads, or an arrive that this warp waits for, is missing";
  return Fail(t, in,
              absl::StrFormat("a data race on %s: this %s and %s's %s (%s) are not "
                              "ordered: no barrier, mbarrier phase or cluster barrier lies between "
                              "them (%s)",
                              byte, KindWord(kind), EarlierWarp(*c), KindWord(c->earlier_kind),
                              EarlierWhere(*c), why));
}

// A block-wide bar.sync that one of the two warps waits at, or last passed, where the other did
// not: a SyncThreads inside an If that only some threads take. The warps that skip it meet the
// waiting ones at their next bar.sync 0 (or their exit releases them), so it orders nothing
// between the two groups.
std::string Cta::SkippedBlockBarrier(const Thread& t, const SharedRaceShadow::Conflict& c) const {
  const int other = static_cast<int>(c.earlier.warp) - rank_ * Warps();
  const int warp = t.linear / 32;
  if (other < 0 || other >= Warps() || other == warp) return "";
  auto waiting_at = [&](int w) -> const Instr* {  // a block-wide bar.sync a lane of w waits at
    for (int j = w * 32; j < std::min<int>(threads_.size(), w * 32 + 32); ++j) {
      const Thread& u = threads_[j];
      if (u.state != Thread::State::kBarrier || u.barrier != 0 || u.pc < 1) continue;
      const Instr& at = e_.code[u.pc - 1];
      if (at.op == Op::kBar && at.ops.size() < 2) return &at;
    }
    return nullptr;
  };
  // This warp's next instructions up to a branch: a block-wide bar.sync there, where a thread of
  // the other warp has exited, is one the other warp's threads do not all reach.
  int exited = -1;
  for (int j = other * 32; j < std::min<int>(threads_.size(), other * 32 + 32) && exited < 0; ++j)
    if (threads_[j].state == Thread::State::kDone) exited = j;
  for (int pc = t.pc + 1; exited >= 0 && pc < static_cast<int>(e_.code.size()) && pc < t.pc + 64;
       ++pc) {
    const Instr& x = e_.code[pc];
    if (x.op == Op::kBra || x.op == Op::kBrx || x.op == Op::kRet || x.op == Op::kExit) break;
    if (x.op == Op::kBar && x.ops.size() < 2 && !x.Has("arrive") && !x.Has("warp") &&
        !x.Has("cluster"))
      return absl::StrCat("this warp is about to wait at the SyncThreads at ", Where(x),
                          ", which warp ", other, " skips (its thread ", exited,
                          " exited without reaching it): a SyncThreads inside an If that only "
                          "some threads take orders nothing between those that take it and "
                          "those that do not; place it where every thread passes");
  }
  for (auto [waiter, runner] : {std::pair{other, warp}, std::pair{warp, other}})
    if (const Instr* at = waiting_at(waiter); at && !waiting_at(runner))
      return absl::StrCat("warp ", waiter, " waits at the SyncThreads at ", Where(*at),
                          ", which warp ", runner,
                          " went past without reaching: a SyncThreads inside an If that only "
                          "some threads take orders nothing between those that take it and those "
                          "that do not; place it where every thread passes");
  // The block-wide bar.sync that last released this thread, and a thread of the other warp that
  // it did not release: then it orders nothing between the two (or a barrier is missing).
  const Instr* mine = t.block_barrier;
  for (int j = other * 32; mine && j < std::min<int>(threads_.size(), other * 32 + 32); ++j) {
    const Thread& u = threads_[j];
    if (u.block_barrier == mine) continue;
    return absl::StrCat(
        "a SyncThreads, or an arrive that this warp waits for, is missing; or the SyncThreads at ",
        Where(*mine), ", which released this thread, orders nothing for warp ", other,
        ": its thread ", j,
        u.state == Thread::State::kDone ? " exited without reaching it" : " did not pass it",
        " (one inside an If that only some threads take; place it where every thread passes)");
  }
  return "";
}

}  // namespace kiln::emu::detail
