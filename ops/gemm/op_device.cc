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
  if (!record_) return (*k)->Launch(std::move(args), stream_);
  absl::StatusOr<PreparedLaunch> p = (*k)->Prepare(std::move(args), stream_);
  if (!p.ok()) return p.status();
  if (absl::Status s = p->Launch(); !s.ok()) return s;
  record_->push_back(*std::move(p));
  return absl::OkStatus();
}

absl::Status GpuOpDevice::RunRemembered(LaunchMemo& memo, std::string key,
                                        const std::function<absl::Status()>& run) {
  if (std::shared_ptr<const LaunchMemo::Launches> made = memo.Find(key))
    return LaunchMemo::Replay(*made);
  LaunchMemo::Launches launches;
  record_ = &launches;
  absl::Status ran = run();
  record_ = nullptr;
  if (ran.ok()) memo.Keep(std::move(key), std::move(launches));
  return ran;
}

std::shared_ptr<const LaunchMemo::Launches> LaunchMemo::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = calls_.find(key);
  return it == calls_.end() ? nullptr : it->second;
}

void LaunchMemo::Keep(std::string key, Launches launches) {
  std::lock_guard<std::mutex> lock(mu_);
  if (calls_.size() >= kMaxCalls) calls_.clear();
  calls_[std::move(key)] = std::make_shared<const Launches>(std::move(launches));
}

absl::Status LaunchMemo::Replay(const Launches& launches) {
  for (const PreparedLaunch& l : launches)
    if (absl::Status s = l.Launch(); !s.ok()) return s;
  return absl::OkStatus();
}

}  // namespace kiln::rt
