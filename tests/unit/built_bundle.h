// Registered kernels' bundles for the tests that run them on the emulator.
//
// CachedBundle lowers through the build's kernel cache (KILN_TEST_KERNEL_CACHE, which `kiln
// bundle` fills as the build emits build/bundles), keyed by the kernel's MLIR and the compiler:
// a kernel the build has lowered is read back, any change to it lowers again. Its PTX has no line
// tables, as every bundle; BundleWithLines lowers with them, for the tests whose messages must
// name DSL lines. BuiltBundle keeps each cached bundle for the process (null where the name is no
// registered kernel or its build fails, which is then a test failure), for the entry points'
// emulated runs, which name their kernels by plan.
#pragma once

#include <map>
#include <string>

#include "examples/registry.h"
#include "gtest/gtest.h"
#include "kiln/compile.h"
#include "kiln/lowering.h"

namespace kiln::examples {

inline absl::StatusOr<rt::Bundle> LoweredBundle(const std::string& name, bool line_info) {
  const Example* e = Find(name);
  if (!e) return absl::NotFoundError("no registered kernel " + name);
  absl::StatusOr<KernelDef> def = e->build();
  if (!def.ok()) return def.status();
  if (line_info) {
    absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
    if (!ptx.ok()) return ptx.status();
    return rt::Bundle{def->manifest(), *std::move(ptx)};
  }
  absl::StatusOr<CompiledKernel> c =
      Compile(*def, {.cache_dir = KILN_TEST_KERNEL_CACHE, .line_info = false});
  if (!c.ok()) return c.status();
  return std::move(c->bundle);
}

// A kernel a test builds itself, lowered with line tables (its messages name the test's lines).
inline absl::StatusOr<rt::Bundle> BundleOfBuilt(Kernel& k) {
  absl::StatusOr<KernelDef> def = k.Build();
  if (!def.ok()) return def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
  if (!ptx.ok()) return ptx.status();
  return rt::Bundle{def->manifest(), *std::move(ptx)};
}

// LoweredBundle, its failure a test failure (and an empty bundle).
inline rt::Bundle ExpectLowered(const std::string& name, bool line_info) {
  absl::StatusOr<rt::Bundle> b = LoweredBundle(name, line_info);
  EXPECT_TRUE(b.ok()) << name << ": " << b.status();
  return b.ok() ? *std::move(b) : rt::Bundle{};
}
inline rt::Bundle CachedBundle(const std::string& name) { return ExpectLowered(name, false); }
inline rt::Bundle BundleWithLines(const std::string& name) { return ExpectLowered(name, true); }

inline const rt::Bundle* BuiltBundle(const std::string& name) {
  static std::map<std::string, rt::Bundle> built;
  if (auto it = built.find(name); it != built.end()) return &it->second;
  if (!Find(name)) return nullptr;
  absl::StatusOr<rt::Bundle> b = LoweredBundle(name, false);
  EXPECT_TRUE(b.ok()) << name << ": " << b.status();
  if (!b.ok()) return nullptr;
  return &built.emplace(name, *std::move(b)).first->second;
}

}  // namespace kiln::examples
