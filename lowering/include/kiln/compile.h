// The host API's compile step: a built kernel to a loadable bundle (manifest + PTX), in-process,
// with a disk cache so that a program's second run compiles nothing.
//
//   absl::StatusOr<kiln::KernelDef> def = k.Build();
//   absl::StatusOr<kiln::CompiledKernel> c = kiln::Compile(*def);
//   absl::StatusOr<kiln::rt::LoadedKernel> loaded = kiln::rt::LoadedKernel::Load(c->bundle);
//
// This header includes no MLIR or LLVM header.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"
#include "kiln/kernel.h"

namespace kiln {

// kiln's version, part of every cache key (a newer kiln never reads an older kiln's PTX).
const char* Version();

// Where compiled kernels are kept when the options do not say: $KILN_CACHE_DIR if set (an empty
// value turns the cache off), else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
std::string DefaultCacheDir();

struct CompileOptions {
  std::string cache_dir = DefaultCacheDir();  // "" compiles every time and writes nothing
  // .file/.loc line tables in the PTX, so that the emulator's and the GPU watchdog's messages
  // name the lines of the program that built the kernel (paths relative to its source root,
  // SetSourceRoot). They change no instruction.
  bool line_info = true;
};

struct CompiledKernel {
  rt::Bundle bundle;
  // sha256 over the kernel's MLIR (with its source lines), its manifest, target, kiln's version,
  // a hash of kiln's lowering sources (lowering/) and LLVM's version, and whether the PTX has
  // line tables: any change to the kernel or the compiler is a different key.
  std::string key;
  bool from_cache = false;
  double milliseconds = 0;    // this call: hashing plus either the lowering or the cache read
  std::string cache_warning;  // why the cache could not be read or written, if it could not
};

// Lowers `kernel` to PTX, or reads the PTX a previous Compile of the same key left in the cache.
// A cache that cannot be read or written is not an error (the kernel is compiled and the reason
// is in `cache_warning`): only a lowering failure is.
absl::StatusOr<CompiledKernel> Compile(const KernelDef& kernel, const CompileOptions& options = {});

// The key Compile would use for `kernel` (hex sha256).
std::string CacheKey(const KernelDef& kernel, const CompileOptions& options = {});

}  // namespace kiln
