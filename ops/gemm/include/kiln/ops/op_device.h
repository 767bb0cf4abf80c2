// Where an entry point's launches go: the GPU (GpuOpDevice, over a runner's loaded kernels and
// scratch buffers), or another device, such as the emulator that the Python module runs host
// arrays on. A device names each kernel's manifest, launches it by name, and keeps scratch
// buffers (a GEMM's restrided copies, split-KV attention's parts).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
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

// The GPU: `kernels` (loaded once per stream) launched on `stream`, scratch from `scratch`.
class GpuOpDevice : public OpDevice {
 public:
  using ScratchFn = std::function<absl::StatusOr<cu::CUdeviceptr>(int, size_t)>;
  GpuOpDevice(LoadedKernels& kernels, cu::CUstream stream, ScratchFn scratch)
      : kernels_(kernels), stream_(stream), scratch_(std::move(scratch)) {}
  absl::StatusOr<const Manifest*> ManifestOf(const std::string& kernel) override;
  absl::Status Launch(const std::string& kernel, std::vector<Arg> args) override;
  absl::StatusOr<uint64_t> Scratch(int which, size_t bytes) override {
    return scratch_(which, bytes);
  }

 private:
  LoadedKernels& kernels_;
  cu::CUstream stream_;
  ScratchFn scratch_;
};

}  // namespace kiln::rt
