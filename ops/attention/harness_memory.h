// Device memory as the attention harnesses use it: buffers named by their device addresses, on the
// GPU or on the emulator, so that one harness runs on either.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/emulator.h"
#include "kiln/ops/emulated_op_device.h"
#include "kiln/runtime/driver.h"

namespace kiln::examples {

struct HarnessMemory {
  std::function<absl::StatusOr<uint64_t>(size_t bytes)> allocate;
  std::function<absl::Status(uint64_t at, const void* from, size_t bytes)> copy_in;
  std::function<absl::Status(void* to, uint64_t at, size_t bytes)> copy_out;
  std::function<absl::Status(uint64_t at, size_t bytes)> poison;  // 0xff bytes: NaN
};

// NaN elements of a poisoned output, told apart: those still holding the poison's bits (0xff
// bytes: never written) and NaN that a kernel wrote (the GPU's arithmetic gives 0x7fffffff, the
// emulator's host arithmetic 0xffc00000: neither is all ones; a kernel that negates a NaN, or
// copies the poison, would count as never written).
struct NanCount {
  int64_t never_written = 0, written = 0;
  int64_t infinite = 0;  // 16-bit outputs (O, gradients) that came out inf: never right either
  void Add16(uint16_t bits, bool half);
  void Add32(float x);
  explicit operator bool() const { return never_written + written + infinite > 0; }
  // "5 elements of O and lse NaN or inf: 3 never written (still the poison's bits), 2 written as
  // NaN or inf (...)", naming `outputs`.
  std::string Describe(const std::string& outputs) const;
};

// The GPU's: each allocation kept in `buffers` (freed with it).
HarnessMemory GpuMemory(std::vector<rt::DeviceBuffer>& buffers);
// The emulator's.
HarnessMemory EmulatorMemory(emu::Device& d);

// The emulator as the entry points' device over the bundles `bundle_of` finds (null: none), on
// three SMs, threads in the order `seed` gives. A kernel `bundle_of` lacks is a NotFound status
// whose payload names it (MissingKernel), so that a command can say where to get it.
rt::EmulatedOpDevice HarnessDevice(emu::Device& d,
                                   const std::function<const rt::Bundle*(const std::string&)>& of,
                                   uint64_t seed);

// The kernel a HarnessDevice status says it had no bundle for, or nullopt.
std::optional<std::string> MissingKernel(const absl::Status& s);

}  // namespace kiln::examples
