// Builder error checks shared by the DSL tests: the message must start with the DSL line.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "kiln/kernel.h"

namespace kiln {

inline std::string HereIn(const std::string& file, int line) {
  return file + ":" + std::to_string(line) + ": ";
}

// Expects Build() to fail with a message that starts with `where` and contains `what`.
inline void ExpectErrorAt(Kernel& k, const std::string& where, const std::string& what) {
  absl::StatusOr<KernelDef> def = k.Build();
  ASSERT_FALSE(def.ok());
  EXPECT_EQ(def.status().message().substr(0, where.size()), where) << def.status();
  EXPECT_NE(def.status().message().find(what), std::string::npos) << def.status();
}

}  // namespace kiln
