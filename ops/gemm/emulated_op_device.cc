#include "kiln/ops/emulated_op_device.h"

#include "absl/strings/str_cat.h"

namespace kiln::rt {

absl::StatusOr<const Bundle*> EmulatedOpDevice::BundleOf(const std::string& kernel) {
  if (find_) return find_(kernel);
  if (auto it = bundles_.find(kernel); it != bundles_.end()) return &it->second;
  absl::StatusOr<Bundle> b = ReadBundle(dir_, kernel);
  if (!b.ok())  // (a NotFound the entry points may answer with another plan)
    return absl::Status(b.status().code(),
                        absl::StrCat(b.status().message(), " (write it with `kiln bundle --dir ",
                                     dir_, " ", kernel, "` where kiln has its compiler)"));
  return &bundles_.emplace(kernel, *std::move(b)).first->second;
}

absl::StatusOr<const Manifest*> EmulatedOpDevice::ManifestOf(const std::string& kernel) {
  absl::StatusOr<const Bundle*> b = BundleOf(kernel);
  if (!b.ok()) return b.status();
  return &(*b)->manifest;
}

absl::Status EmulatedOpDevice::Launch(const std::string& kernel, std::vector<Arg> args) {
  absl::StatusOr<const Bundle*> b = BundleOf(kernel);
  if (!b.ok()) return b.status();
  return emu::Launch(device_, **b, args, options_).status();
}

}  // namespace kiln::rt
