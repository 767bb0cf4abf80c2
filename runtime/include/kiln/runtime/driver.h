// The CUDA driver, loaded with dlopen so that nothing links against CUDA. Every failure is an
// absl::Status carrying the driver's error name and message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/bundle/dims.h"
#include "kiln/runtime/cuda_api.h"

namespace kiln::rt {

// Entry points resolved from libcuda.so.1.
struct DriverApi {
#define KILN_CU_FN(name) cu::PFN_##name name = nullptr;
#include "kiln/runtime/cuda_functions.def"
#undef KILN_CU_FN
};

// The process-wide driver. kiln works on the calling thread's current CUDA context (the one a
// framework such as PyTorch made current for its device), and where a thread has none, makes
// device 0's primary context current. The device queries answer for the current context's device.
class Driver {
 public:
  // Unavailable when there is no libcuda or no device; the message says which. Makes device 0's
  // primary context current on a thread that has no current context.
  static absl::StatusOr<Driver*> Get();

  const DriverApi& api() const { return api_; }
  // OK for CUDA_SUCCESS, else an Internal status "<what>: CUDA_ERROR_X (message)".
  absl::Status Check(cu::CUresult result, absl::string_view what) const;
  // Makes device 0's primary context current on this thread.
  absl::Status MakeCurrent() const;
  // OK unless `stream` is being captured into a CUDA graph, where memory cannot be allocated:
  // then a FailedPrecondition naming `what` and saying to launch it once on that stream before
  // capturing.
  absl::Status CheckNotCapturing(cu::CUstream stream, absl::string_view what) const;

  // The current context and its device's ordinal.
  cu::CUcontext context() const;
  int device() const;
  int device_count() const { return static_cast<int>(devices_.size()); }
  const std::string& device_name() const { return Current().name; }
  int sm_count() const { return Current().sm_count; }
  int compute_capability() const { return Current().cc_major * 10 + Current().cc_minor; }
  int max_smem_optin() const { return Current().max_smem_optin; }
  int driver_version() const { return driver_version_; }

 private:
  struct DeviceInfo {
    std::string name;
    int sm_count = 0, cc_major = 0, cc_minor = 0, max_smem_optin = 0;
  };
  Driver() = default;
  absl::Status Init();
  const DeviceInfo& Current() const;

  void* handle_ = nullptr;
  DriverApi api_;
  std::vector<DeviceInfo> devices_;   // by ordinal
  cu::CUcontext primary0_ = nullptr;  // device 0's primary context
  int driver_version_ = 0;
};

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  // `have` at least `bytes` long: where it is shorter, a new buffer replaces it and the old one
  // moves to `outgrown` (launches already queued may still use it). True where it was replaced.
  static absl::StatusOr<bool> GrowKeepingOld(DeviceBuffer& have,
                                             std::vector<DeviceBuffer>& outgrown, size_t bytes);

  cu::CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  absl::Status CopyFromHost(const void* src, size_t bytes);
  absl::Status CopyToHost(void* dst, size_t bytes) const;
  // Device to device, on the default stream (the copy a bandwidth figure is measured against).
  absl::Status CopyFrom(const DeviceBuffer& src, size_t bytes);
  absl::Status Fill(uint8_t byte);

 private:
  cu::CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

struct LaunchConfig {
  Dim3 grid, block, cluster;
  unsigned dynamic_smem = 0;
  cu::CUstream stream = nullptr;  // the default stream when null
  // Programmatic dependent launch: the kernel may start before the work before it in the stream
  // has finished, as soon as that work triggers it (griddepcontrol.launch_dependents) or ends. Only
  // for kernels that wait for it (griddepcontrol.wait) before they touch memory it may write
  // (Manifest::waits_for_prior_grids).
  bool programmatic = false;
};

// A loaded module and one of its kernels.
class Kernel {
 public:
  // Loads PTX (JIT by the driver) or a cubin; a failure carries the JIT error log.
  static absl::StatusOr<Kernel> Load(absl::string_view image, const std::string& entry);
  Kernel() = default;
  Kernel(Kernel&& other) noexcept { *this = std::move(other); }
  Kernel& operator=(Kernel&& other) noexcept;
  ~Kernel();

  // Raises the dynamic smem limit when needed, sets the cluster dims, launches.
  absl::Status Launch(const LaunchConfig& config, void** args) const;
  // How many clusters of config.cluster (with its block and smem) the GPU holds at once: a
  // persistent grid of more clusters than this runs in waves.
  absl::StatusOr<int> MaxActiveClusters(const LaunchConfig& config) const;
  absl::StatusOr<int> Attribute(int attribute) const;
  // The device address of a module-scope global variable.
  absl::StatusOr<cu::CUdeviceptr> Global(const char* name) const;
  const std::string& entry() const { return entry_; }

 private:
  cu::CUmodule module_ = nullptr;
  cu::CUfunction function_ = nullptr;
  std::string entry_;
  mutable unsigned smem_limit_set_ = 0;
  absl::Status RaiseSmemLimit(const Driver& d, unsigned bytes) const;
  // Clusters of more than 8 CTAs (up to 16 on sm_90) launch only once the function allows them.
  mutable bool non_portable_clusters_ = false;
  absl::Status AllowClusterSize(const Driver& d, unsigned ctas) const;
};

// Times device work with events on the default stream.
class EventTimer {
 public:
  static absl::StatusOr<EventTimer> Create();
  EventTimer() = default;
  EventTimer(EventTimer&& other) noexcept { *this = std::move(other); }
  EventTimer& operator=(EventTimer&& other) noexcept;
  ~EventTimer();
  absl::Status Start();
  absl::StatusOr<float> StopMs();  // waits for the stop event

 private:
  cu::CUevent start_ = nullptr, stop_ = nullptr;
};

// Waits for the device. When a kernel in the GPU debug mode (Kernel::Watchdog) stopped at a
// wait that timed out (DEADLINE_EXCEEDED) or at a shared tile index past the tile (OUT_OF_RANGE),
// the error says which DSL line, and the block and thread.
absl::Status Synchronize();

namespace internal {
// The report of a debug-mode record that fired since the last call, if any (launch.cc).
std::optional<absl::Status> TakeWatchdogReport();
}  // namespace internal

}  // namespace kiln::rt
