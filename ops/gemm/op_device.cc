#include "kiln/ops/op_device.h"

#include "absl/strings/str_cat.h"

namespace kiln::rt {

absl::StatusOr<cu::CUdeviceptr> ScratchBuffers::Get(cu::CUstream stream, int which, size_t bytes,
                                                    const std::string& what) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  std::lock_guard<std::mutex> lock(mu_);
  DeviceBuffer& have = buffers_[{(*d)->context(), stream, which}];
  absl::StatusOr<bool> grown = DeviceBuffer::GrowKeepingOld(have, outgrown_, bytes);
  if (!grown.ok())
    return absl::Status(grown.status().code(),
                        absl::StrCat(what, " (", bytes, " bytes): ", grown.status().message()));
  return have.ptr();
}

absl::StatusOr<const Manifest*> GpuOpDevice::ManifestOf(const std::string& kernel) {
  absl::StatusOr<const LoadedKernel*> k = kernels_.Get(kernel, stream_);
  if (!k.ok()) return k.status();
  return &(*k)->manifest();
}

absl::Status GpuOpDevice::Launch(const std::string& kernel, std::vector<Arg> args) {
  absl::StatusOr<const LoadedKernel*> k = kernels_.Get(kernel, stream_);
  if (!k.ok()) return k.status();
  return (*k)->Launch(std::move(args), stream_);
}

}  // namespace kiln::rt
