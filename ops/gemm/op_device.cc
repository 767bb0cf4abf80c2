#include "kiln/ops/op_device.h"

#include "absl/strings/str_cat.h"

namespace kiln::rt {

std::optional<Arg> NamedArg(const ParamSpec& p, const NamedArgs& named) {
  using Kind = ParamSpec::Kind;
  if (p.kind == Kind::kPointer && named.pointers.count(p.name))
    return Arg::Ptr(named.pointers.at(p.name));
  if (p.kind == Kind::kI32 && named.i32.count(p.name))
    return Arg::I32(static_cast<int32_t>(named.i32.at(p.name)));
  if (p.kind == Kind::kI64 && named.i64.count(p.name)) return Arg::I64(named.i64.at(p.name));
  return std::nullopt;
}

absl::StatusOr<cu::CUdeviceptr> ScratchBuffers::Get(cu::CUstream stream, int which, size_t bytes,
                                                    const std::string& what) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  std::lock_guard<std::mutex> lock(mu_);
  DeviceBuffer& have = buffers_[{(*d)->context(), stream, which}];
  if (!have.ptr() || have.bytes() < bytes)
    if (absl::Status s = (*d)->CheckNotCapturing(stream, what); !s.ok()) return s;
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
