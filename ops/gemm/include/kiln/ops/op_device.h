// Where an entry point's launches go: the GPU (GpuOpDevice, over a runner's loaded kernels and
// scratch buffers), or another device, such as the emulator that the Python module runs host
// arrays on. A device names each kernel's manifest, launches it by name, and keeps scratch
// buffers (a GEMM's restrided copies, split-KV attention's parts).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/runtime/cuda_api.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"

namespace kiln::rt {

// An entry point's scalar and pointer arguments by parameter name: NamedArg gives the argument of
// a manifest's pointer, i32 or i64 parameter found here (the i32 ones narrowed), else nothing (the
// caller's other kinds: tensor maps, workspaces).
struct NamedArgs {
  std::map<std::string, int64_t> i32, i64;
  std::map<std::string, cu::CUdeviceptr> pointers;
};
std::optional<Arg> NamedArg(const ParamSpec& p, const NamedArgs& named);

class OpDevice {
 public:
  virtual ~OpDevice() = default;
  virtual absl::StatusOr<const Manifest*> ManifestOf(const std::string& kernel) = 0;
  virtual absl::Status Launch(const std::string& kernel, std::vector<Arg> args) = 0;
  // Scratch buffer `which` (the caller's numbering), at least `bytes`; the same `which` may come
  // back for the next call on the same stream.
  virtual absl::StatusOr<uint64_t> Scratch(int which, size_t bytes) = 0;
};

// A runner's scratch buffers, per device (context), stream and number, grown to the largest call;
// outgrown ones are kept (launches already queued may still read them). Thread-safe.
class ScratchBuffers {
 public:
  // `what`: the buffer's use, for an allocation error ("the copy of A").
  absl::StatusOr<cu::CUdeviceptr> Get(cu::CUstream stream, int which, size_t bytes,
                                      const std::string& what);

 private:
  std::mutex mu_;
  std::map<std::tuple<cu::CUcontext, cu::CUstream, int>, DeviceBuffer> buffers_;
  std::vector<DeviceBuffer> outgrown_;
};

// A call's key for LaunchMemo: the bytes of every input that decides its launches, appended in a
// fixed order (a string with its length, so that two fields never run together).
class CallKey {
 public:
  template <typename T>
  requires std::is_trivially_copyable_v<T> CallKey& Add(const T& value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
    return *this;
  }
  CallKey& Add(const std::string& s) { return Add(s.size()).Append(s); }
  CallKey& Add(const std::optional<bool>& b) { return Add(b.has_value() ? 1 + *b : 0); }
  std::string Take() { return std::move(bytes_); }

 private:
  CallKey& Append(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  std::string bytes_;
};

// The launches of calls an entry point made before, prepared (rt::PreparedLaunch), by the call's
// key (CallKey: every input that decides them, pointers, stream and device included). A call
// repeated, as a model's loop or a benchmark repeats it, then skips the plan and the launches'
// checks and costs one driver launch a kernel. The scratch buffers a kept call took stay where
// they are (ScratchBuffers keeps those a later call outgrows), as do its kernels' workspaces and
// tables (LoadedKernel keeps them). Thread-safe; it forgets every call once it holds kMaxCalls.
class LaunchMemo {
 public:
  using Launches = std::vector<PreparedLaunch>;
  static constexpr size_t kMaxCalls = 256;
  std::shared_ptr<const Launches> Find(const std::string& key) const;
  void Keep(std::string key, Launches launches);
  // Issues `launches` in order; the first error stops them.
  static absl::Status Replay(const Launches& launches);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Launches>> calls_;
};

// The GPU: `kernels` (loaded once per stream) launched on `stream`, scratch from `scratch`.
class GpuOpDevice : public OpDevice {
 public:
  using ScratchFn = std::function<absl::StatusOr<cu::CUdeviceptr>(int, size_t)>;
  GpuOpDevice(LoadedKernels& kernels, cu::CUstream stream, ScratchFn scratch)
      : kernels_(kernels), stream_(stream), scratch_(std::move(scratch)) {}
  absl::StatusOr<const Manifest*> ManifestOf(const std::string& kernel) override;
  absl::Status Launch(const std::string& kernel, std::vector<Arg> args) override;
  // A call on this device: its launches repeated from `memo` where it holds `key`, else `run`
  // (which launches through this device), its launches kept there when it succeeds.
  absl::Status RunRemembered(LaunchMemo& memo, std::string key,
                             const std::function<absl::Status()>& run);
  absl::StatusOr<uint64_t> Scratch(int which, size_t bytes) override {
    return scratch_(which, bytes);
  }

 private:
  LoadedKernels& kernels_;
  cu::CUstream stream_;
  ScratchFn scratch_;
  LaunchMemo::Launches* record_ = nullptr;  // RunRemembered's: where run's launches are kept
};

}  // namespace kiln::rt
