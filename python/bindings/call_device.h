// Where one call's kernels run: on the GPU when its arrays are CUDA tensors (launched on the
// caller's stream, nothing copied), on the PTX emulator when they are host arrays (each copied
// into the emulated device before the launches and back after them). The kernels come from one
// bundle directory, read or loaded once per process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/bundle/args.h"
#include "kiln/bundle/manifest.h"
#include "kiln/emulator.h"
#include "kiln/ops/emulated_op_device.h"
#include "kiln/ops/op_device.h"
#include "python/bindings/arrays.h"

namespace kiln::py {

// The bundle directory the ops read (kiln.set_bundle_dir; else $KILN_BUNDLE_DIR; else the build
// tree's; the kiln package points an installed module at the bundles installed beside it).
std::string BundleDir();
void SetBundleDir(const std::string& dir);
// `name`'s bundle from `dir` ("" : BundleDir()), read once.
const rt::Bundle& BundleNamed(const std::string& name, const std::string& dir = "");
// The same as a status (not found: a message that says how to write the bundle).
absl::StatusOr<const rt::Bundle*> FindBundle(const std::string& name, const std::string& dir = "");

// One `Runner` (rt::GemmRunner, rt::AttentionRunner) per bundle directory, kept for the process.
template <typename Runner>
Runner& RunnerFor(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Runner>> runners;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Runner>& r = runners[dir];
  if (!r) r = std::make_unique<Runner>(dir);
  return *r;
}

// The emulator as an entry point's device: the bundles of BundleDir() (FindBundle) on `d`.
inline rt::EmulatedOpDevice EmulatorDevice(emu::Device& d) {
  return rt::EmulatedOpDevice(d, [](const std::string& kernel) { return FindBundle(kernel); });
}

class CallDevice {
 public:
  // The device of `arrays` (all host or all CUDA, else kiln.Error naming `call`).
  CallDevice(const std::string& call, const std::vector<const Array*>& arrays, uint64_t stream);
  ~CallDevice();
  bool emulated() const { return emulated_; }
  emu::Device* emulator() { return emu_.get(); }  // null on the GPU
  uint64_t stream() const { return stream_; }

  // The device address of an array argument (on the emulator, a copy; written back by Finish
  // unless `read_only`).
  uint64_t Bind(const Array& a, bool read_only = false);
  // Host bytes the call converted (bf16 from f32, say): on the emulator a copy, on the GPU a
  // device buffer; `back` (if not null) receives them after Finish.
  uint64_t BindBytes(const void* host, size_t bytes, std::vector<uint8_t>* back = nullptr);
  // Emulator: the f32 values of contiguous host array `a` as `type` ("bf16", "f16", "f32"; with
  // `column_major`, a 2-D `a` column after column), copied in.
  uint64_t BindNarrowed(const Array& a, const std::string& type, bool column_major = false);
  // Emulator: `count` elements of `type` that read as NaN (an output no one writes shows), copied
  // into `*back` by Finish.
  uint64_t BindPoisoned(size_t count, const std::string& type, std::vector<uint8_t>* back);
  // Launches `bundle`'s kernel on its grid rule's grid (or `grid`). Emulator: under `seed`'s
  // order of threads (emu::Options::seed) where given, and returns what
  // emu::Stats::partly_written says of the arrays (GPU: nothing; the seed is not read).
  std::vector<std::string> Launch(const rt::Bundle& bundle, const std::vector<rt::Arg>& args,
                                  std::optional<rt::Dim3> grid = std::nullopt,
                                  std::optional<uint64_t> seed = std::nullopt);
  // Emulator: copies the written arrays back. GPU: nothing (the launches are queued).
  void Finish();

 private:
  struct HostCopy {
    uint64_t device;
    void* host;
    size_t bytes;
    std::vector<uint8_t>* back;
  };
  std::string call_;
  bool emulated_ = false;
  uint64_t stream_ = 0;
  std::unique_ptr<emu::Device> emu_;
  std::vector<HostCopy> copies_;
  struct Owned;
  std::vector<std::shared_ptr<Owned>> owned_;  // GPU buffers of BindBytes
};

}  // namespace kiln::py
