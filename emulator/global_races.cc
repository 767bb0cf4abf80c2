#include "emulator/global_races.h"

#include <algorithm>

namespace kiln::emu::detail {

void GlobalRaces::BeginCluster(rt::Dim3 first_block) {
  cluster_ = static_cast<int>(first_blocks_.size());
  first_blocks_.push_back(first_block);
  acquired_.clear(), pending_.clear(), observed_.clear();
  last_fence_ = kNever;
}

void GlobalRaces::Join(Clock& into, const Clock& from) {
  for (const auto& [cluster, time] : from) {
    auto [it, added] = into.emplace(cluster, time);
    if (!added) it->second = std::max(it->second, time);
  }
}

rt::Dim3 GlobalRaces::BlockOf(int cluster) const {
  return cluster >= 0 ? first_blocks_[cluster] : rt::Dim3{0, 0, 0};
}

bool GlobalRaces::Ordered(int cluster, int64_t time) const {
  if (cluster == cluster_) return true;
  auto it = acquired_.find(cluster);
  return it != acquired_.end() && time <= it->second;
}

void GlobalRaces::Fence(int64_t time) {
  last_fence_ = time;
  Join(acquired_, pending_);
  pending_.clear();
}

std::optional<GlobalRaces::Conflict> GlobalRaces::Strong(uint64_t allocation, uint64_t word,
                                                         bool reads, bool writes, bool release_sem,
                                                         bool acquire_sem, const ptx::Instr* in,
                                                         int64_t time) {
  Clock& at = released_[word];
  if (reads) Join(acquire_sem ? acquired_ : pending_, at);
  if (writes) {
    Join(at, acquired_);
    const int64_t upto = release_sem ? time : last_fence_;
    if (upto != kNever) {
      auto [it, added] = at.emplace(cluster_, upto);
      if (!added) it->second = std::max(it->second, upto);
    }
  }
  // (After the acquire: a plain write released through this very word is ordered before it.)
  std::optional<Conflict> found;
  auto e = words_.find(word);
  if (e != words_.end() && e->second.writer >= 0 && e->second.write_bytes &&
      !Ordered(e->second.writer, e->second.write_time))
    found = Conflict{Conflict::Kind::kStrongAfterWrite, BlockOf(e->second.writer),
                     e->second.write_in, word};
  else if (writes && e != words_.end() && e->second.reader >= 0 && e->second.read_bytes &&
           !Ordered(e->second.reader, e->second.read_time))
    found = Conflict{Conflict::Kind::kStrongAfterRead, BlockOf(e->second.reader), e->second.read_in,
                     word};
  if (reads) observed_.insert(word);
  if (writes) {
    written_.insert(allocation);
    Word& w = words_[word];
    // (Another cluster's, until ordered before this one, stays: what a plain access races.)
    if (w.strong < 0 || (w.strong != cluster_ && Ordered(w.strong, w.strong_time)))
      w.strong = cluster_, w.strong_time = time, w.strong_in = in;
  }
  return found;
}

namespace {
// The bytes of the word at `w` that [address, address + bytes) covers, a bit each.
uint8_t BytesOf(uint64_t w, uint64_t address, uint64_t bytes) {
  const uint64_t lo = std::max(w, address), hi = std::min(w + 4, address + bytes);
  return static_cast<uint8_t>(((1u << (hi - lo)) - 1) << (lo - w));
}
}  // namespace

std::optional<GlobalRaces::Conflict> GlobalRaces::Write(uint64_t allocation, uint64_t address,
                                                        uint64_t bytes, const ptx::Instr* in,
                                                        int64_t time) {
  written_.insert(allocation);
  std::optional<Conflict> found;
  for (uint64_t w = address & ~uint64_t{3}; w < address + bytes; w += 4) {
    const uint8_t mine = BytesOf(w, address, bytes);
    Word& e = words_[w];
    if (!found && (e.nc_bytes & mine))
      found = Conflict{Conflict::Kind::kNonCoherent, BlockOf(e.reader), e.read_in, w};
    if (!found && e.writer >= 0 && (e.write_bytes & mine) && !Ordered(e.writer, e.write_time))
      found = Conflict{Conflict::Kind::kWriteAfterWrite, BlockOf(e.writer), e.write_in, w};
    if (!found && e.reader >= 0 && (e.read_bytes & mine) && !Ordered(e.reader, e.read_time))
      found = Conflict{Conflict::Kind::kWriteAfterRead, BlockOf(e.reader), e.read_in, w};
    if (!found && e.strong >= 0 && !Ordered(e.strong, e.strong_time) && !observed_.count(w))
      found = Conflict{Conflict::Kind::kWriteAfterStrong, BlockOf(e.strong), e.strong_in, w};
    if (e.writer == cluster_) {  // its earliest time (a later rewrite may go unchecked; an
      e.write_bytes |= mine;     // earlier byte released and read must not be reported)
    } else {
      e.writer = cluster_, e.write_bytes = mine, e.write_time = time, e.write_in = in;
    }
    e.read_bytes &= ~mine, e.nc_bytes &= ~mine;
    if (!e.read_bytes) e.reader = -1;
  }
  return found;
}

std::optional<GlobalRaces::Conflict> GlobalRaces::Read(uint64_t allocation, uint64_t address,
                                                       uint64_t bytes, const ptx::Instr* in,
                                                       int64_t time, bool non_coherent) {
  if (!written_.count(allocation)) return std::nullopt;
  std::optional<Conflict> found;
  for (uint64_t w = address & ~uint64_t{3}; w < address + bytes; w += 4) {
    const uint8_t mine = BytesOf(w, address, bytes);
    Word& e = words_[w];
    const bool written = e.writer >= 0 && (e.write_bytes & mine);
    if (!found && written && non_coherent)
      found = Conflict{Conflict::Kind::kNonCoherent, BlockOf(e.writer), e.write_in, w};
    if (!found && written && !Ordered(e.writer, e.write_time))
      found = Conflict{Conflict::Kind::kReadAfterWrite, BlockOf(e.writer), e.write_in, w};
    if (!found && e.strong >= 0 && !Ordered(e.strong, e.strong_time) && !observed_.count(w))
      found = Conflict{Conflict::Kind::kReadAfterStrong, BlockOf(e.strong), e.strong_in, w};
    // The latest unordered reader is what a later write must be ordered after; one of this
    // cluster's reads replaces another cluster's only once that one is ordered before it.
    if (e.reader == cluster_) {
      e.read_bytes |= mine;  // (its earliest time, as for writes)
    } else if (e.reader < 0 || Ordered(e.reader, e.read_time)) {
      e.reader = cluster_, e.read_bytes = mine, e.read_time = time, e.read_in = in;
    }
    if (non_coherent) e.nc_bytes |= mine;
  }
  return found;
}

}  // namespace kiln::emu::detail
