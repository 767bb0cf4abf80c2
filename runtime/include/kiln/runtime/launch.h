// Launching any kiln kernel from its bundle with typed arguments, without the compiler: the
// arguments are checked against the manifest's parameters (count, kind) and the kernel against
// the device (target chip at Load; shared memory, by rt::Kernel, at Launch), and every error
// names the kernel and the source line that defined it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/manifest.h"

namespace kiln::rt {

// One launch argument: a device pointer or a scalar of a parameter's exact type.
class Arg {
 public:
  using Kind = ParamSpec::Kind;  // kPointer, kI32, kI64, kF32 (tensor maps and tables: not here)
  static Arg Ptr(cu::CUdeviceptr p) { return Arg(Kind::kPointer, &p, sizeof(p)); }
  static Arg Ptr(const DeviceBuffer& b) { return Ptr(b.ptr()); }
  static Arg I32(int32_t v) { return Arg(Kind::kI32, &v, sizeof(v)); }
  static Arg I64(int64_t v) { return Arg(Kind::kI64, &v, sizeof(v)); }
  static Arg F32(float v) { return Arg(Kind::kF32, &v, sizeof(v)); }

  Kind kind() const { return kind_; }
  void* data() { return bytes_; }
  int64_t AsInt() const;  // an i32 or i64 argument's value (grid rules read them)

 private:
  Arg(Kind kind, const void* value, size_t size);
  Kind kind_;
  alignas(8) unsigned char bytes_[8] = {};
};

const char* ParamKindName(ParamSpec::Kind kind);  // "ptr", "i32", ...

// OK when `m`'s target runs on the driver's device; FailedPrecondition ("... cannot run
// here") for a newer or arch-specific chip (an sm_100a kernel on an H100/H200).
absl::Status CheckTarget(const Manifest& m, const Driver& d);
// Whether `args` match `m`'s parameters one by one; the message lists the expected signature.
absl::Status CheckArgs(const Manifest& m, const std::vector<Arg>& args);

// A bundle loaded on the current device.
class LoadedKernel {
 public:
  static absl::StatusOr<LoadedKernel> Load(const Bundle& bundle);
  const Manifest& manifest() const { return manifest_; }
  // Launches on `grid` blocks with the manifest's block, cluster and shared memory.
  absl::Status Launch(Dim3 grid, std::vector<Arg> args, cu::CUstream stream = nullptr) const;
  // Launches on the grid the kernel's grid rule gives for these arguments (Kernel::Grid).
  absl::Status Launch(std::vector<Arg> args, cu::CUstream stream = nullptr) const;
  // That grid, without launching.
  absl::StatusOr<Dim3> GridFor(const std::vector<Arg>& args) const;

 private:
  // The two launches and GridFor check the arguments once, then share these.
  absl::StatusOr<Dim3> GridOfCheckedArgs(const std::vector<Arg>& args) const;
  absl::Status LaunchCheckedArgs(Dim3 grid, std::vector<Arg> args, cu::CUstream stream) const;

  Manifest manifest_;
  Kernel kernel_;
};

}  // namespace kiln::rt
