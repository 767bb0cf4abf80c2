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

absl::Status Cta::CheckRace(const Thread& t, const Instr& in, const uint8_t* p, uint64_t n,
                            SharedRaceShadow::Kind kind) {
  Cta* owner = SharedOwner(p);
  if (!owner) return absl::OkStatus();
  const int warp = t.linear / 32;
  const uint64_t off = p - owner->shared_.data();
  std::optional<SharedRaceShadow::Conflict> c = owner->races_.Access(
      off, n, kind, ClusterWarp(warp), ClockOf(warp), static_cast<int32_t>(&in - e_.code.data()));
  if (!c) return absl::OkStatus();
  const int warps = Warps(), other_rank = static_cast<int>(c->earlier.warp) / warps;
  const std::string other_cta =
      cluster_ && other_rank != rank_ ? absl::StrCat(" of cluster CTA ", other_rank) : "";
  const std::string byte = owner != this
                               ? absl::StrCat("byte ", c->byte, " of cluster CTA ", owner->rank_)
                               : absl::StrCat("shared byte ", c->byte);
  const std::string earlier =
      c->earlier.instr >= 0 && c->earlier.instr < static_cast<int32_t>(e_.code.size())
          ? Where(e_.code[c->earlier.instr])
          : "an earlier instruction";
  return Fail(t, in,
              absl::StrFormat("a data race on %s: this %s and warp %d%s's %s (%s) are not "
                              "ordered: no barrier, mbarrier phase or cluster barrier lies between "
                              "them (a SyncThreads, or an arrive that this warp waits for, is "
                              "missing)",
                              byte, KindWord(kind), static_cast<int>(c->earlier.warp) % warps,
                              other_cta, KindWord(c->earlier_kind), earlier));
}

}  // namespace kiln::emu::detail
