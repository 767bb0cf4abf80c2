// Data races on shared memory between warps: the warps' vector clocks and the check of each
// generic-proxy access (races.h says what orders accesses and what is left out).
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
  return Fail(t, in,
              absl::StrFormat("a data race on %s: this %s and %s's %s (%s) are not "
                              "ordered: no barrier, mbarrier phase or cluster barrier lies between "
                              "them (a SyncThreads, or an arrive that this warp waits for, is "
                              "missing)",
                              byte, KindWord(kind), EarlierWarp(*c), KindWord(c->earlier_kind),
                              EarlierWhere(*c)));
}

}  // namespace kiln::emu::detail
