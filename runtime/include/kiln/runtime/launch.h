// Launching any kiln kernel from its bundle with typed arguments, without the compiler: the
// arguments are checked against the manifest's parameters (count, kind), its requirements (tile
// multiples) and the tensor maps' rules, and the kernel against the device (target chip at Load;
// shared memory at Launch); every error names the kernel and the source line that defined it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/args.h"
#include "kiln/bundle/manifest.h"
#include "kiln/bundle/schedule.h"
#include "kiln/runtime/driver.h"

namespace kiln::rt {

// OK when `m`'s target runs on the driver's device; FailedPrecondition ("... cannot run
// here") for a newer or arch-specific chip (an sm_100a kernel on an H100/H200).
absl::Status CheckTarget(const Manifest& m, const Driver& d);
// The driver launch of `m` at `grid` with `smem` bytes of dynamic shared memory: its block and
// cluster, and programmatic dependent launch where the kernel waits for the grids before it.
LaunchConfig LaunchConfigOf(const Manifest& m, Dim3 grid, unsigned smem,
                            cu::CUstream stream = nullptr);

// A bundle loaded on the current device.
// The GPU debug mode's record (Kernel::Watchdog): pinned host memory mapped into the device and
// named by the module's globals, which the first mbarrier wait past its deadline fills before it
// traps; rt::Synchronize reports it. LoadedKernel attaches and arms one for a kernel whose
// manifest asks for it; a harness that launches an rt::Kernel itself does the same.
class WatchdogRecord {
 public:
  static absl::StatusOr<std::shared_ptr<WatchdogRecord>> Attach(const Kernel& kernel,
                                                                const Manifest& m);
  ~WatchdogRecord();
  absl::Status Arm() const;            // before each launch: a clear record, the claim word free
  std::optional<absl::Status> Take();  // the report, once, if a wait or an index check fired

  struct Registry {
    std::mutex mu;
    std::vector<std::weak_ptr<WatchdogRecord>> records;
  };
  static Registry& Live();

 private:
  explicit WatchdogRecord(const Manifest& m);
  std::string name_;
  std::vector<std::string> sites_;
  int ms_;
  void* host_ = nullptr;
  cu::CUdeviceptr device_ = 0, record_global_ = 0, claim_global_ = 0;
};

class LoadedKernel;

// A launch checked, its grid evaluated and its parameter block built (tensor maps encoded, tables
// and workspaces in place): Launch() issues it again with one driver call, where the checks and
// encodings cost several times the driver's own launch. The LoadedKernel it came from must outlive
// it. Move-only (the block points into itself).
class PreparedLaunch {
 public:
  PreparedLaunch(PreparedLaunch&&) = default;
  PreparedLaunch& operator=(PreparedLaunch&&) = default;
  // The same kernel, grid, stream and arguments as prepared (the debug mode's record armed first).
  absl::Status Launch() const;

 private:
  friend class LoadedKernel;
  PreparedLaunch() = default;
  const LoadedKernel* kernel_ = nullptr;
  LaunchConfig config_;
  std::vector<Arg> args_;
  std::vector<std::unique_ptr<cu::CUtensorMap>> maps_;
  std::vector<uint64_t> device_words_;   // device addresses passed by value (copies, tables)
  mutable std::vector<void*> pointers_;  // the driver's parameter block, into the three above
};

class LoadedKernel {
 public:
  static absl::StatusOr<LoadedKernel> Load(const Bundle& bundle);
  const Manifest& manifest() const { return manifest_; }
  // Launches on `grid` blocks with the manifest's block, cluster and shared memory. An error
  // names the kernel's declaration and ends with the caller's line ("launched at file:line").
  absl::Status Launch(Dim3 grid, std::vector<Arg> args, cu::CUstream stream = nullptr,
                      std::source_location where = std::source_location::current()) const;
  // Launches on the grid the kernel's grid rule gives for these arguments (Kernel::Grid).
  absl::Status Launch(std::vector<Arg> args, cu::CUstream stream = nullptr,
                      std::source_location where = std::source_location::current()) const;
  // That grid, without launching.
  absl::StatusOr<Dim3> GridFor(const std::vector<Arg>& args) const;
  // Launch's checks and parameter block on the grid rule's grid, without launching: a runner that
  // repeats a call keeps it (the workspaces and tables it names are kept while this is loaded).
  absl::StatusOr<PreparedLaunch> Prepare(
      std::vector<Arg> args, cu::CUstream stream = nullptr,
      std::source_location where = std::source_location::current()) const;

 private:
  friend class PreparedLaunch;
  // The launches, Prepare and GridFor check the arguments once, then share these.
  absl::StatusOr<Dim3> GridOfCheckedArgs(const std::vector<Arg>& args) const;
  absl::StatusOr<PreparedLaunch> PrepareCheckedArgs(Dim3 grid, std::vector<Arg> args,
                                                    cu::CUstream stream) const;
  // A device copy of `bytes` (a tensor map passed by pointer), made once per
  // distinct content and kept while the kernel is loaded, so that a launch never frees memory
  // an earlier launch may still read.
  absl::StatusOr<uint64_t> DeviceCopy(const std::string& bytes, cu::CUstream stream) const;
  // Parameter `param`'s workspace of at least `bytes`: zeroed when (re)allocated, then kept;
  // a smaller one it outgrows is kept too (an earlier launch may still use it).
  absl::StatusOr<uint64_t> Workspace(size_t param, size_t bytes, cu::CUstream stream) const;
  // Schedule table parameter `param` for these integers on the device, built once per distinct
  // value of its rules (a long work table is megabytes: not rebuilt at every launch).
  struct TableCopy {
    uint64_t device = 0;
    int64_t partials = 0;
  };
  absl::StatusOr<TableCopy> Table(size_t param, const ScheduleTableParam& t, const Symbols& symbols,
                                  cu::CUstream stream) const;
  // OK unless `stream` is being captured into a CUDA graph (where the three above cannot
  // allocate): then an error naming the kernel and `what` it would allocate.
  absl::Status CanAllocate(cu::CUstream stream, absl::string_view what) const;

  Manifest manifest_;
  cu::CUcontext context_ = nullptr;  // where its module lives
  int device_ = 0;
  Kernel kernel_;
  std::shared_ptr<WatchdogRecord> watchdog_;  // the debug mode's record (manifest watchdog_ms)
  struct Uploads {
    std::mutex mu;
    std::map<std::string, DeviceBuffer> by_content;
    std::map<size_t, DeviceBuffer> workspaces;                       // by parameter index
    std::map<std::string, std::pair<DeviceBuffer, int64_t>> tables;  // by parameter and rule values
    std::vector<DeviceBuffer> outgrown;
  };
  std::unique_ptr<Uploads> uploads_ = std::make_unique<Uploads>();
};

// The kernels an entry point's runner has loaded from a bundle directory, one per kernel, device
// (current context) and stream: a kernel's workspaces (split-K partials, tile counters) then keep
// calls on different streams apart, and calls on one stream are ordered.
class LoadedKernels {
 public:
  explicit LoadedKernels(std::string bundle_dir) : dir_(std::move(bundle_dir)) {}
  // Loads `name` for `stream` at its first call; NotFound, saying how to write it, without its
  // bundle.
  absl::StatusOr<const LoadedKernel*> Get(const std::string& name, cu::CUstream stream);

 private:
  std::string dir_;
  std::mutex mu_;
  using Key = std::tuple<std::string, cu::CUcontext, cu::CUstream>;  // name, device's context
  std::map<Key, std::unique_ptr<LoadedKernel>> loaded_;
};

}  // namespace kiln::rt
