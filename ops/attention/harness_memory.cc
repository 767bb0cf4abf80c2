#include "ops/attention/harness_memory.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kiln::examples {
namespace {
constexpr absl::string_view kMissingKernel = "kiln/missing-kernel";
}  // namespace

void NanCount::Add16(uint16_t bits, bool half) {
  const bool nan = half ? (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)
                        : (bits & 0x7f80) == 0x7f80 && (bits & 0x7f);
  if (nan) ++(bits == 0xffff ? never_written : written);
  const bool inf = half ? (bits & 0x7fff) == 0x7c00 : (bits & 0x7fff) == 0x7f80;
  if (inf) ++infinite;
}

void NanCount::Add32(float x) {
  if (std::isnan(x)) ++(std::bit_cast<uint32_t>(x) == 0xffffffffu ? never_written : written);
}

std::string NanCount::Describe(const std::string& outputs) const {
  std::string s = absl::StrCat(never_written + written + infinite, " elements of ", outputs,
                               infinite ? " NaN or inf: " : " NaN: ");
  if (never_written)
    absl::StrAppend(&s, never_written, " never written (still the poison's bits)",
                    written + infinite ? ", " : "");
  if (written + infinite)
    absl::StrAppend(&s, written + infinite, infinite ? " written as NaN or inf" : " written as NaN",
                    " (an overflow in the kernel's arithmetic, e.g. a scale too large for f32's "
                    "exponent, or a NaN or inf read)");
  return s;
}

HarnessMemory GpuMemory(std::vector<rt::DeviceBuffer>& buffers) {
  auto buffer = [&buffers](uint64_t at) -> rt::DeviceBuffer& {
    return *std::find_if(buffers.begin(), buffers.end(),
                         [&](const rt::DeviceBuffer& b) { return b.ptr() == at; });
  };
  return {
      [&buffers](size_t bytes) -> absl::StatusOr<uint64_t> {
        absl::StatusOr<rt::DeviceBuffer> b = rt::DeviceBuffer::Allocate(std::max<size_t>(bytes, 4));
        if (!b.ok()) return b.status();
        buffers.push_back(*std::move(b));
        return buffers.back().ptr();
      },
      [buffer](uint64_t at, const void* from, size_t bytes) {
        return buffer(at).CopyFromHost(from, bytes);
      },
      [buffer](void* to, uint64_t at, size_t bytes) { return buffer(at).CopyToHost(to, bytes); },
      [buffer](uint64_t at, size_t) { return buffer(at).Fill(0xff); }};
}

HarnessMemory EmulatorMemory(emu::Device& d) {
  return {[&d](size_t bytes) { return d.Allocate(std::max<size_t>(bytes, 4)); },
          [&d](uint64_t at, const void* from, size_t bytes) { return d.CopyIn(at, from, bytes); },
          [&d](void* to, uint64_t at, size_t bytes) { return d.CopyOut(to, at, bytes); },
          [&d](uint64_t at, size_t bytes) { return d.Fill(at, 0xff, bytes); }};
}

rt::EmulatedOpDevice HarnessDevice(emu::Device& d,
                                   const std::function<const rt::Bundle*(const std::string&)>& of,
                                   uint64_t seed) {
  return rt::EmulatedOpDevice(d,
                              [of](const std::string& kernel) -> absl::StatusOr<const rt::Bundle*> {
                                if (const rt::Bundle* b = of(kernel)) return b;
                                absl::Status missing =
                                    absl::NotFoundError(absl::StrCat("no bundle for ", kernel));
                                missing.SetPayload(kMissingKernel, absl::Cord(kernel));
                                return missing;
                              },
                              {.seed = seed, .sm_count = 3});
}

std::optional<std::string> MissingKernel(const absl::Status& s) {
  auto name = s.GetPayload(kMissingKernel);  // (absl::optional in older Abseils)
  if (!name) return std::nullopt;
  return std::string(*name);
}

}  // namespace kiln::examples
