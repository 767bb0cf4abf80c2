// Every example kernel registers itself here by name (hopper/k01, ampere/v1, ...).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/kernel.h"

namespace kiln::examples {

struct Example {
  std::string name;     // worklog/version
  std::string summary;  // one line: what this version is
  std::function<absl::StatusOr<KernelDef>()> build;
};

bool Register(Example example);
const std::vector<Example>& All();  // sorted by name
const Example* Find(const std::string& name);

}  // namespace kiln::examples

#define KILN_EXAMPLE(name, summary, fn) \
  static const bool kiln_example_registered_##fn = ::kiln::examples::Register({name, summary, fn})
// For files that register several versions of one kernel: `id` names the registration.
#define KILN_EXAMPLE_VARIANT(id, name, summary, ...) \
  static const bool kiln_example_registered_##id = \
      ::kiln::examples::Register({name, summary, __VA_ARGS__})
