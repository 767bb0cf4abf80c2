// Compile with a disk cache: <cache_dir>/<key>/ holds the bundle (manifest + PTX) of one key and
// the PTX's sha256, written under a temporary name and renamed into place, so concurrent programs
// never read half a bundle; an entry whose PTX no longer matches its hash is removed and built
// again.
#include "kiln/compile.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "kiln/lowering.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Bytecode/BytecodeWriter.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unversioned"
#endif

namespace kiln {
namespace {

std::string Env(const char* name, bool* set = nullptr) {
  const char* v = std::getenv(name);
  if (set) *set = v != nullptr;
  return v ? v : "";
}

std::string Hex(const std::array<uint8_t, 32>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string Sha256(const std::string& bytes) {
  llvm::SHA256 sha;
  sha.update(bytes);
  return Hex(sha.final());
}

constexpr const char* kPtxHashFile = "ptx.sha256";

// The cached bundle of `key`, if there is one and it is the bundle of this kernel, whole; a damaged
// entry (another manifest, PTX that does not match its hash) is removed.
std::optional<rt::Bundle> ReadCached(const std::string& dir, const std::string& key,
                                     const rt::Manifest& want) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path entry = fs::path(dir) / key;
  if (!fs::is_directory(entry, ec)) return std::nullopt;
  absl::StatusOr<rt::Bundle> b = rt::ReadBundle(entry.string(), want.name);
  std::string hash;
  std::ifstream(entry / kPtxHashFile) >> hash;
  if (!b.ok() || b->manifest.Serialize() != want.Serialize() || b->ptx.empty() ||
      hash != Sha256(b->ptx)) {
    fs::remove_all(entry, ec);  // rebuilt by this compile
    return std::nullopt;
  }
  return *std::move(b);
}

absl::Status WriteCached(const std::string& dir, const std::string& key, const rt::Bundle& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  fs::path tmp = fs::path(dir) / absl::StrCat(".", key, ".", getpid());
  fs::remove_all(tmp, ec);
  if (absl::Status s = rt::WriteBundle(tmp.string(), b); !s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  if (!(std::ofstream(tmp / kPtxHashFile) << Sha256(b.ptx) << "\n")) {
    fs::remove_all(tmp, ec);
    return absl::UnavailableError(absl::StrCat("cannot write the cache under ", dir));
  }
  fs::rename(tmp, fs::path(dir) / key, ec);
  if (ec) {
    fs::remove_all(tmp, ec);  // another process put the same key in place first: keep theirs
    if (!fs::is_directory(fs::path(dir) / key))
      return absl::UnavailableError(absl::StrCat("cannot write the cache under ", dir));
  }
  return absl::OkStatus();
}

// The module as MLIR bytecode, locations included: far cheaper to produce than its text, whose
// printing dominated a warm build of the large unrolled kernels
// (docs/perf/2026-11-23-compile-times-disk-cache.md).
std::string ModuleBytes(const KernelDef& kernel) {
  std::string out;
  llvm::raw_string_ostream os(out);
  mlir::BytecodeWriterConfig config;
  if (mlir::failed(mlir::writeBytecodeToFile(kernel.module().module.get(), os, config))) return "";
  return out;
}

}  // namespace

const char* Version() { return KILN_VERSION; }

std::string DefaultCacheDir() {
  bool set = false;
  std::string dir = Env("KILN_CACHE_DIR", &set);
  if (set) return dir;
  if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/kiln";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.cache/kiln";
  return "";
}

std::string CacheKey(const KernelDef& kernel, const CompileOptions& options) {
  llvm::SHA256 sha;
  auto add = [&](const std::string& part) {
    sha.update(part);
    sha.update(llvm::StringRef("\0", 1));  // parts cannot run into each other
  };
  add(Version());
  add(LLVM_VERSION_STRING);
  add(kernel.target().chip);
  add(absl::StrCat(kernel.target().ptx_version));
  add(kernel.manifest().Serialize());
  add(ModuleBytes(kernel));
  add(options.line_info ? "line tables" : "no line tables");
  return Hex(sha.final());
}

absl::StatusOr<CompiledKernel> Compile(const KernelDef& kernel, const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  CompiledKernel out;
  out.key = CacheKey(kernel, options);
  const std::string& dir = options.cache_dir;
  if (!dir.empty()) {
    if (std::optional<rt::Bundle> b = ReadCached(dir, out.key, kernel.manifest())) {
      out.bundle = *std::move(b);
      out.from_cache = true;
      out.milliseconds = MsSince(t0);
      return out;
    }
  }
  absl::StatusOr<std::string> ptx = EmitPtx(kernel, {.line_info = options.line_info});
  if (!ptx.ok()) return ptx.status();
  out.bundle = rt::Bundle{kernel.manifest(), *std::move(ptx)};
  if (!dir.empty()) {
    if (absl::Status s = WriteCached(dir, out.key, out.bundle); !s.ok())
      out.cache_warning = std::string(s.message());
  }
  out.milliseconds = MsSince(t0);
  return out;
}

}  // namespace kiln
