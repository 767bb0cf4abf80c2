// kiln's CPU emulator of the PTX it emits: runs a bundle's kernel without a GPU, thread by thread,
// with the semantics of the PTX ISA (not of the builder that emitted the code, so a lowering
// mistake shows up as a wrong result). A seed orders the threads; warp-synchronous instructions
// (shfl.sync, redux.sync, vote.sync) and barriers (bar.sync, bar.arrive) meet their
// participants, and a launch where every live thread waits is reported as a deadlock that says
// who waits on what. Out-of-bounds accesses, unknown instructions and step limits are errors
// naming the PTX line and the thread.
//
// Emulated: the CUDA-core subset, warp collectives and named barriers; cp.async, ldmatrix and
// mma.sync; mbarriers, TMA loads and stores (tensor maps built as the launcher builds them),
// wgmma, stmatrix, clusters (distributed shared memory, multicast, barrier.cluster); tensor
// memory and tcgen05 for single CTAs. A kernel using anything else is refused with the
// instruction named. docs/EMULATOR.md describes the model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/args.h"
#include "kiln/bundle/manifest.h"

namespace kiln::emu {

// The emulated device's global memory: each allocation at the start of a 64 GiB span of its own,
// so an access up to 60 GiB past one is an error rather than a read of its neighbour, and the
// allocation below such an address is the one it went past.
class Device {
 public:
  absl::StatusOr<uint64_t> Allocate(size_t bytes);
  absl::Status CopyIn(uint64_t dst, const void* src, size_t bytes);
  absl::Status CopyOut(void* dst, uint64_t src, size_t bytes) const;
  absl::Status Fill(uint64_t dst, uint8_t byte, size_t bytes);
  // The two a harness writes most: an allocation holding a copy of host bytes (an input), and one
  // poisoned with `byte` (an output: 0xff reads as NaN in f32, bf16 and f16, so an element no
  // thread writes shows).
  absl::StatusOr<uint64_t> Upload(const void* src, size_t bytes);
  absl::StatusOr<uint64_t> AllocatePoisoned(size_t bytes, uint8_t byte = 0xff);
  // The bytes at [address, address + bytes), or null when they are not all in one allocation.
  uint8_t* Find(uint64_t address, size_t bytes);
  // The base address of the allocation holding `address`, or 0.
  uint64_t AllocationOf(uint64_t address) const;
  // For an access Find refused: where it lies against the nearer of the allocations around it,
  // past the end of the one below or before the start of the one above ("" if none), named by
  // the launch's parameter where one points at it; 2 GiB or more past one, that an i32 offset
  // gone below 0 reads as 4 Gi (i32 is unsigned).
  std::string Near(uint64_t address) const;
  // Names allocations in Near's reports: each launch names the allocations its arguments point
  // at by their parameters' names (the first parameter's, where two point at one), replacing the
  // names an earlier launch gave.
  void NameArguments(const std::vector<std::pair<uint64_t, std::string>>& named);
  // A kernel's workspace parameter (rt::WorkspaceParam) of at least `bytes`, kept across launches
  // as the launcher keeps it: zeroed when (re)allocated, then as the last launch left it.
  absl::StatusOr<uint64_t> Workspace(const std::string& key, size_t bytes);
  // A module-scope .global variable of `kernel` (its workspace "global:KERNEL:SYMBOL", made by
  // the first launch and zeroed before each): its address, or 0.
  uint64_t ModuleGlobal(const std::string& kernel, const std::string& symbol) const;

  // Where the last store to a 4-byte word of global memory came from: the instruction and its
  // DSL line, with what stands behind it (the shared-memory write a TMA store copied, the
  // accumulator's last MMA as the storing thread saw it), the block and thread, and when (the
  // launch's instruction count). For the report of a wrong result: which place wrote it.
  struct WriteSite {
    std::string what;
    int64_t time = 0;
    rt::Dim3 block;
    int thread = -1;  // -1: no one thread (a TMA store)
    // "written by block (x,y,z) thread t at <what>".
    std::string Describe() const;
  };
  std::optional<WriteSite> LastWrite(uint64_t address) const;
  void NoteWrite(uint64_t address, uint64_t bytes, const std::string& what, int64_t time,
                 rt::Dim3 block, int thread);
  // A launch begins: the writes NoteWrite records from now on are its own (WrittenByLaunch).
  void BeginLaunch() { ++launch_; }
  // Which bytes of [from, to) the launch since the last BeginLaunch wrote (its stores, TMA stores
  // and atomics, a 4-byte word at a time): how many of the range's `bytes`, and the offset from
  // `from` of the first one left alone (`bytes` if none).
  struct Coverage {
    uint64_t bytes = 0, written = 0, first_unwritten = 0;
  };
  Coverage WrittenByLaunch(uint64_t from, uint64_t to) const;
  // The end of the allocation holding `address`, or 0.
  uint64_t AllocationEnd(uint64_t address) const;

 private:
  struct Site {
    int what;        // into whats_
    int32_t launch;  // launch_ when it was written (in what's padding: a site a word)
    int64_t time;
    rt::Dim3 block;
    int thread;
  };
  std::map<std::string, int> what_ids_;  // the sites' texts, interned
  std::vector<std::string> whats_;
  std::map<uint64_t, Site> last_write_;                            // by word address
  std::map<uint64_t, std::vector<uint8_t>> blocks_;                // by base address
  std::map<std::string, std::pair<uint64_t, size_t>> workspaces_;  // by kernel and parameter
  std::map<uint64_t, std::string> names_;                          // by base address
  uint64_t next_ = uint64_t{1} << 32;
  uint64_t held_ = 0;  // bytes allocated
  int32_t launch_ = 0;
};

// The largest problem a harness hands the emulator, which a CPU runs in minutes: every array of
// at most 2^26 elements, at most 2^33 multiply-adds in all, every size at least 1. Sizes come in
// as doubles, so no product of them overflows before the check. `call` begins the message, which
// names the array or sizes that break it.
absl::Status CheckProblemSize(const std::string& call,
                              const std::vector<std::pair<std::string, double>>& arrays,
                              double multiply_adds);

struct Options {
  uint64_t seed = 1;                         // thread order; 0 runs threads in index order
  int sm_count = 132;                        // what "sms" in a grid rule means here
  int64_t max_instructions = 4'000'000'000;  // over the whole launch, then an error
  // Only these clusters run (linear indices in the grid of clusters, x fastest; a CTA is a
  // cluster of one); empty runs them all. The others are launched in name only: the ones that
  // run see the whole grid. For a kernel whose clusters share no flag or counter in global
  // memory, a subset computes what those clusters would on the GPU, at a fraction of the cost.
  std::vector<uint64_t> only_clusters;
};

// An argument's array that the launch wrote in part: some of its allocation's words but not all.
// A grid rule that launches too few CTAs (or a bound that stops the threads short) leaves an
// output so; a kernel that updates part of a larger buffer by design does too, so it is told,
// not refused.
struct PartlyWritten {
  int arg = 0;                   // the argument's index in the launch's arguments
  uint64_t bytes = 0;            // its bytes (to the next argument's or the allocation's end)
  uint64_t written = 0;          // bytes of it in words the launch wrote
  uint64_t first_unwritten = 0;  // the first byte no write of the launch reached
  std::string message;           // all of that in words, with the grid and the kernel's line
};

struct Stats {
  int64_t instructions = 0;  // executed, summed over threads
  int64_t blocks = 0;
  // Every argument array (pointer or tensor map: its bytes from its address to the next
  // argument's in the same allocation, or to the allocation's end) that the launch wrote in part,
  // but those its manifest's attribute "writes_part" names. Empty where Options::only_clusters
  // ran a part of the grid.
  std::vector<PartlyWritten> partly_written;
};

// Runs the bundle's kernel on `device` with the grid its rule gives for `args` (checked as
// rt::LoadedKernel checks them), or on `grid`.
// An error ends with the caller's line ("launched at file:line").
absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle,
                             const std::vector<rt::Arg>& args, const Options& options = {},
                             std::source_location where = std::source_location::current());
absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle, rt::Dim3 grid,
                             const std::vector<rt::Arg>& args, const Options& options = {},
                             std::source_location where = std::source_location::current());

// A check every launch makes now and then as it runs (every few million instructions, on the
// launching thread): a status other than OK ends the launch with that status. An interpreter's
// bindings set one that reports an interrupt (Ctrl-C); none is set by default.
void SetInterruptCheck(std::function<absl::Status()> check);

}  // namespace kiln::emu
