// Bundles built from the registry on first use, for tests that run the entry points on the
// emulator (the plan names the kernels; the test builds what it names). Null where the name is
// no registered kernel or its build fails (the failure is a test failure).
#pragma once

#include <map>
#include <string>

#include "examples/registry.h"
#include "gtest/gtest.h"
#include "kiln/lowering.h"

namespace kiln::examples {

inline const rt::Bundle* BuiltBundle(const std::string& name) {
  static std::map<std::string, rt::Bundle> built;
  if (auto it = built.find(name); it != built.end()) return &it->second;
  const Example* e = Find(name);
  if (!e) return nullptr;
  absl::StatusOr<KernelDef> def = e->build();
  EXPECT_TRUE(def.ok()) << def.status();
  if (!def.ok()) return nullptr;
  absl::StatusOr<std::string> ptx = EmitPtx(*def, {.line_info = true});
  EXPECT_TRUE(ptx.ok()) << ptx.status();
  if (!ptx.ok()) return nullptr;
  return &built.emplace(name, rt::Bundle{def->manifest(), *ptx}).first->second;
}

}  // namespace kiln::examples
