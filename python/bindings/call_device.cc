#include "python/bindings/call_device.h"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"
#include "python/bindings/convert.h"
#include "python/bindings/status.h"

namespace kiln::py {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::string& ChosenDir() {
  static std::string dir;
  return dir;
}

}  // namespace

std::string BundleDir() {
  std::lock_guard<std::mutex> lock(Mu());
  if (!ChosenDir().empty()) return ChosenDir();
  if (const char* env = std::getenv("KILN_BUNDLE_DIR"); env && *env) return env;
  return KILN_DEFAULT_BUNDLE_DIR;
}

void SetBundleDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(Mu());
  ChosenDir() = dir;
}

namespace {
// When a bundle's files were last written and their sizes (0 where one is missing): kiln.load
// reads a bundle again once they change (`kiln bundle` run again while the process lives).
using FilesStamp = std::array<int64_t, 4>;
FilesStamp StampOf(const std::string& dir, const std::string& name) {
  FilesStamp stamp{};
  const std::string stem = absl::StrCat(dir, "/", rt::BundleStem(name));
  for (int f = 0; f < 2; ++f) {
    const std::string path = stem + (f ? ".ptx" : ".manifest");
    std::error_code time_error, size_error;
    const auto t = std::filesystem::last_write_time(path, time_error);
    const auto size = std::filesystem::file_size(path, size_error);
    if (!time_error) stamp[2 * f] = t.time_since_epoch().count();
    if (!size_error) stamp[2 * f + 1] = static_cast<int64_t>(size);
  }
  return stamp;
}
}  // namespace

absl::StatusOr<const rt::Bundle*> FindBundle(const std::string& name, const std::string& dir) {
  const std::string from = dir.empty() ? BundleDir() : dir;
  struct Read {
    std::unique_ptr<rt::Bundle> bundle;
    FilesStamp stamp;
  };
  static std::map<std::pair<std::string, std::string>, Read> read;
  // Bundles read before their files changed: callables and loaded modules still point at them.
  static std::vector<std::unique_ptr<rt::Bundle>> replaced;
  std::lock_guard<std::mutex> lock(Mu());
  Read& entry = read[{from, name}];
  // kiln.load (a directory named) looks at the files each time; the ops, on every call, do not.
  if (entry.bundle && !dir.empty()) {
    const FilesStamp now = StampOf(from, name);
    if (now != entry.stamp) {
      replaced.push_back(std::move(entry.bundle));
      entry.stamp = now;
    }
  } else if (!entry.bundle) {
    entry.stamp = StampOf(from, name);
  }
  std::unique_ptr<rt::Bundle>& b = entry.bundle;
  if (!b) {
    absl::StatusOr<rt::Bundle> got = rt::ReadBundle(from, name);
    std::error_code ec;
    if (!got.ok() && !std::filesystem::is_directory(from, ec)) {
      read.erase({from, name});
      return absl::NotFoundError(absl::StrCat("no bundle directory '", from, "' (for ", name,
                                              "): set one with kiln.set_bundle_dir or "
                                              "$KILN_BUNDLE_DIR, or write the bundles there with "
                                              "`kiln bundle --dir ",
                                              from, "` where kiln has its compiler"));
    }
    if (!got.ok()) {
      read.erase({from, name});
      absl::StatusOr<std::vector<std::string>> names = rt::ListBundles(from);
      // A name the caller typed (kiln.load, which names its directory) may be a typo; one an op
      // asked for (a kernel variant not bundled) is not.
      const std::string near = names.ok() && !dir.empty() ? rt::NearestName(name, *names) : "";
      if (!near.empty() && near != name)
        return absl::NotFoundError(absl::StrCat(got.status().message(), "; did you mean '", near,
                                                "'? (kiln.load takes a kernel's name)"));
      return absl::Status(
          got.status().code(),
          absl::StrCat(got.status().message(),
                       dir.empty()
                           ? absl::StrCat(" (write it with `kiln bundle --dir ", from, " ", name,
                                          "` where kiln has its compiler; the directory "
                                          "is set by kiln.set_bundle_dir or "
                                          "$KILN_BUNDLE_DIR)")
                           : absl::StrCat(" (`kiln list` names the kernels kiln can "
                                          "write; `kiln bundle --dir ",
                                          from,
                                          " NAME` writes one of them where kiln has its "
                                          "compiler; a kernel of your own is written by "
                                          "rt::WriteBundle from the program that builds it: "
                                          "docs/BUNDLES.md)")));
    }
    b = std::make_unique<rt::Bundle>(*std::move(got));
  }
  return b.get();
}

const rt::Bundle& BundleNamed(const std::string& name, const std::string& dir) {
  absl::StatusOr<const rt::Bundle*> b = FindBundle(name, dir);
  if (!b.ok()) throw Error(std::string(b.status().message()));
  return **b;
}

namespace {
// The GPU's loaded kernels, by bundle (BundleNamed's, which live as long as the process) and
// stream, as rt::LoadedKernels keeps them.
const rt::LoadedKernel& Loaded(const rt::Bundle& bundle, uint64_t stream) {
  static std::mutex mu;
  using Key = std::tuple<const rt::Bundle*, cu::CUcontext, uint64_t>;  // bundle, device, stream
  static std::map<Key, std::unique_ptr<rt::LoadedKernel>> loaded;
  rt::Driver* driver = ValueOrThrow(rt::Driver::Get());
  std::lock_guard<std::mutex> lock(mu);
  const Key key{&bundle, driver->context(), stream};
  std::unique_ptr<rt::LoadedKernel>& k = loaded[key];
  if (!k) {
    absl::StatusOr<rt::LoadedKernel> got = rt::LoadedKernel::Load(bundle);
    if (!got.ok()) {
      loaded.erase(key);
      throw Error(std::string(got.status().message()));
    }
    k = std::make_unique<rt::LoadedKernel>(*std::move(got));
  }
  return *k;
}
}  // namespace

struct CallDevice::Owned {
  rt::DeviceBuffer buffer;
};

CallDevice::CallDevice(const std::string& call, const std::vector<const Array*>& arrays,
                       uint64_t stream)
    : call_(call), stream_(stream) {
  std::optional<Where> where;
  for (const Array* a : arrays) {
    if (!a) continue;
    const Where w = WhereOf(*a, call);
    if (where && *where != w)
      throw Error(absl::StrCat(call,
                               ": the arrays are partly on the GPU and partly on the host; "
                               "pass all of them on one"));
    where = w;
  }
  emulated_ = !where || *where == Where::kHost;
  if (emulated_) {
    emu_ = std::make_unique<emu::Device>();
    return;
  }
  // kiln launches on the current context's device (PyTorch's current device): the arrays must
  // live there.
  const rt::Driver* driver = ValueOrThrow(rt::Driver::Get());
  for (const Array* a : arrays)
    if (a && a->device_id() != driver->device())
      throw Error(absl::StrCat(call, ": an array is on cuda:", a->device_id(),
                               " and the current device is cuda:", driver->device(),
                               " (torch.cuda.set_device, or `with torch.cuda.device(...)`)"));
}

CallDevice::~CallDevice() = default;

uint64_t CallDevice::Bind(const Array& a, bool read_only) {
  if (!emulated_) return Address(a);
  const size_t bytes = a.nbytes();
  const uint64_t at = ValueOrThrow(emu_->Allocate(std::max<size_t>(bytes, 1)));
  ThrowIfError(emu_->CopyIn(at, reinterpret_cast<const void*>(Address(a)), bytes));
  if (!read_only) copies_.push_back({at, reinterpret_cast<void*>(Address(a)), bytes, nullptr});
  return at;
}

uint64_t CallDevice::BindBytes(const void* host, size_t bytes, std::vector<uint8_t>* back) {
  if (emulated_) {
    const uint64_t at = ValueOrThrow(emu_->Allocate(std::max<size_t>(bytes, 1)));
    ThrowIfError(emu_->CopyIn(at, host, bytes));
    if (back) copies_.push_back({at, nullptr, bytes, back});
    return at;
  }
  auto owned = std::make_shared<Owned>();
  owned->buffer = ValueOrThrow(rt::DeviceBuffer::Allocate(std::max<size_t>(bytes, 1)));
  ThrowIfError(owned->buffer.CopyFromHost(host, bytes));
  owned_.push_back(owned);
  return owned->buffer.ptr();
}

uint64_t CallDevice::BindNarrowed(const Array& a, const std::string& type, bool column_major) {
  const std::vector<uint8_t> bytes = Narrowed(a, type, column_major);
  return BindBytes(bytes.data(), bytes.size());
}

uint64_t CallDevice::BindPoisoned(size_t count, const std::string& type,
                                  std::vector<uint8_t>* back) {
  const std::vector<uint8_t> poison = Poisoned(count, type);
  return BindBytes(poison.data(), poison.size(), back);
}

std::vector<std::string> CallDevice::Launch(const rt::Bundle& bundle,
                                            const std::vector<rt::Arg>& args,
                                            std::optional<rt::Dim3> grid,
                                            std::optional<uint64_t> seed) {
  if (emulated_) {
    emu::Options options;
    if (seed) options.seed = *seed;
    absl::StatusOr<emu::Stats> s = grid ? emu::Launch(*emu_, bundle, *grid, args, options)
                                        : emu::Launch(*emu_, bundle, args, options);
    ThrowIfError(s.status());
    std::vector<std::string> partly_written;
    for (const emu::PartlyWritten& p : s->partly_written) partly_written.push_back(p.message);
    return partly_written;
  }
  const rt::LoadedKernel& k = Loaded(bundle, stream_);
  auto stream = reinterpret_cast<cu::CUstream>(stream_);
  ThrowIfError(grid ? k.Launch(*grid, args, stream) : k.Launch(args, stream));
  return {};
}

void CallDevice::Finish() {
  if (!emulated_) {
    // Buffers of converted bytes: the launches may still read them.
    if (!owned_.empty()) ThrowIfError(rt::Synchronize());
    owned_.clear();
    return;
  }
  for (const HostCopy& c : copies_) {
    if (c.back) {
      c.back->resize(c.bytes);
      ThrowIfError(emu_->CopyOut(c.back->data(), c.device, c.bytes));
    } else {
      ThrowIfError(emu_->CopyOut(c.host, c.device, c.bytes));
    }
  }
  copies_.clear();
}

}  // namespace kiln::py
