// Data races on global memory between clusters of one launch (PTX ISA, memory consistency model).
// On a GPU a launch's CTAs run at the same time, so two accesses of a word by different clusters,
// at least one a plain (weak) write, are ordered only where the ISA makes them so: a release by
// the first (a gpu- or sys-scope fence before a strong write such as an atomic, or a .release
// one) that the second acquires (a strong read of that location, an atomic or ld.acquire, then a
// gpu-scope fence, or an .acquire one), directly or through others (clocks are joined). The
// emulator runs clusters one after another, so without this check a protocol that needs them
// ordered (split-K partials counted in by an atomic, the last part merging) passes whether its
// fences and atomics are right or not.
//
// Granularity: a cluster is one agent (its CTAs and threads share a clock, so races inside a
// cluster are left to the shared-memory checker and the results) and a 4-byte word is one
// location. Strong accesses (atomics, reductions, ld/st with .relaxed/.acquire/.release/.volatile
// and a scope past the CTA) never race with each other; a strong access and a plain one of
// another cluster do, unless ordered (the ISA's data race: conflicting accesses not both morally
// strong, not in causality order), e.g. a plain store of a sum's first part by one block and
// atomic adds of the rest by others. A load
// through the non-coherent path (ld.global.nc) of a word written in the same launch, or a write
// of one read that way, is an error of its own: the ISA takes .nc only for data no one writes while
// the kernel runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/bundle/dims.h"

namespace kiln::emu::ptx {
struct Instr;
}

namespace kiln::emu::detail {

class GlobalRaces {
 public:
  // What the word's earlier access was, for the report of a race.
  struct Conflict {
    enum class Kind {
      kWriteAfterWrite,
      kWriteAfterRead,
      kReadAfterWrite,
      kNonCoherent,
      kStrongAfterWrite,  // this strong access (an atomic, say) after a plain write
      kStrongAfterRead,   // this strong write after a plain read
      kWriteAfterStrong,  // this plain write after a strong write
      kReadAfterStrong,   // this plain read after a strong write
    } kind;
    rt::Dim3 block;                  // the first CTA of the other access's cluster
    const ptx::Instr* in = nullptr;  // its instruction
    uint64_t address;                // the word
  };

  // A cluster starts (its first CTA's coordinates); they run one after another.
  void BeginCluster(rt::Dim3 first_block);
  // A fence of gpu or system scope by the running cluster at `time`.
  void Fence(int64_t time);
  // A strong access of `word` by the running cluster: a release publishes what the cluster knows
  // (its writes up to its last fence, or up to `time` where the access itself is .release); an
  // acquire takes what the location holds (at once where it is .acquire, else at the next fence).
  // The first race found, if any: a plain write of the word (or, where this one writes, a plain
  // read) by another cluster not ordered before it.
  std::optional<Conflict> Strong(uint64_t allocation, uint64_t word, bool reads, bool writes,
                                 bool release_sem, bool acquire_sem, const ptx::Instr* in,
                                 int64_t time);
  // Plain accesses of [address, address + bytes) in the allocation at `allocation`; the first
  // race found, if any. Reads are kept only in allocations written in this launch (an input no
  // one writes, the most of what a kernel reads, costs nothing).
  std::optional<Conflict> Write(uint64_t allocation, uint64_t address, uint64_t bytes,
                                const ptx::Instr* in, int64_t time);
  std::optional<Conflict> Read(uint64_t allocation, uint64_t address, uint64_t bytes,
                               const ptx::Instr* in, int64_t time, bool non_coherent);

 private:
  using Clock = std::unordered_map<int, int64_t>;  // cluster -> how far it is known to have gone
  static void Join(Clock& into, const Clock& from);
  bool Ordered(int cluster, int64_t time) const;
  rt::Dim3 BlockOf(int cluster) const;  // an access of `cluster` at `time` before now

  // A word's last writer and last reader (of another cluster, unless ordered), each with the
  // word's bytes it touched: accesses of different bytes of a word (two bf16 columns of two
  // tiles) do not conflict. A cluster's accesses of a word keep its earliest time, and a writer
  // of other bytes replaces the one before: races may be missed (a late rewrite, a third
  // writer), but none is reported that is not one.
  // A cluster that wrote it with a strong access (the whole word), at its earliest time: the
  // latest not yet ordered before the running cluster.
  struct Word {
    int writer = -1, reader = -1, strong = -1;  // clusters (run order); -1: none this launch
    uint8_t write_bytes = 0, read_bytes = 0, nc_bytes = 0;  // a bit a byte
    int64_t write_time = 0, read_time = 0, strong_time = 0;
    const ptx::Instr *write_in = nullptr, *read_in = nullptr, *strong_in = nullptr;
  };
  std::unordered_map<uint64_t, Word> words_;
  std::unordered_set<uint64_t> written_;  // allocations a write reached in this launch
  // Words the running cluster has read with a strong access: the strong writes before it (all
  // of them, as clusters run one after another) are observed, and so ordered before what the
  // cluster does next (PTX ISA, causality order: observation, then program order), as when the
  // last of a count's atomics resets it with a plain store.
  std::unordered_set<uint64_t> observed_;
  std::unordered_map<uint64_t, Clock> released_;  // by strong location: the releases it carries
  std::vector<rt::Dim3> first_blocks_;            // by cluster
  int cluster_ = -1;
  Clock acquired_, pending_;  // the running cluster's knowledge, and what its next fence takes
  static constexpr int64_t kNever = INT64_MIN;  // (times are the launch's, any sign)
  int64_t last_fence_ = kNever;
};

}  // namespace kiln::emu::detail
