// The PTX emulator as an entry point's device: a program without a GPU runs rt::RunGemm,
// rt::RunAttention, rt::RunGroupedGemm and the backward on it, with the kernels of a bundle
// directory (build/bundles, or an install's share/kiln/bundles). Each launch runs under
// `options` (its seed orders the threads; sm_count is what "sms" in a grid rule reads); scratch
// buffers are fresh allocations on the device. Bundles are read once each.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/bundle/manifest.h"
#include "kiln/emulator.h"
#include "kiln/ops/op_device.h"

namespace kiln::rt {

class EmulatedOpDevice : public OpDevice {
 public:
  // Where a kernel's bundle comes from, where not from a directory (a caller's own cache).
  using BundleFinder = std::function<absl::StatusOr<const Bundle*>(const std::string&)>;
  EmulatedOpDevice(emu::Device& device, std::string bundle_dir, emu::Options options = {})
      : device_(device), dir_(std::move(bundle_dir)), options_(std::move(options)) {}
  EmulatedOpDevice(emu::Device& device, BundleFinder find, emu::Options options = {})
      : device_(device), find_(std::move(find)), options_(std::move(options)) {}
  absl::StatusOr<const Manifest*> ManifestOf(const std::string& kernel) override;
  absl::Status Launch(const std::string& kernel, std::vector<Arg> args) override;
  absl::StatusOr<uint64_t> Scratch(int, size_t bytes) override { return device_.Allocate(bytes); }

 private:
  absl::StatusOr<const Bundle*> BundleOf(const std::string& kernel);
  emu::Device& device_;
  std::string dir_;
  BundleFinder find_;
  emu::Options options_;
  std::map<std::string, Bundle> bundles_;
};

}  // namespace kiln::rt
