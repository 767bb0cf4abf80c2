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
// A registered example, or a member of a family (below) built on first use; null for neither.
const Example* Find(const std::string& name);

// Kernels named `base` + "." + options, built from the options (the GEMM entry point's kernels
// with other input and output types and fused epilogues:
// gemm/bf16_sm90_n128.f16-f32.bias_col.gelu). `build(name, options)` fails with a message for
// options it does not take. `bundled`: options whose kernels the build bundles too (the GPU suite
// runs them; nothing else is enumerated).
struct ExampleFamily {
  std::string base, summary;
  std::function<absl::StatusOr<KernelDef>(const std::string& name, const std::string& options)>
      build;
  std::vector<std::string> bundled;
};
bool RegisterFamily(ExampleFamily family);
const std::vector<ExampleFamily>& Families();

}  // namespace kiln::examples

#define KILN_EXAMPLE(name, summary, fn) \
  static const bool kiln_example_registered_##fn = ::kiln::examples::Register({name, summary, fn})
// For files that register several versions of one kernel: `id` names the registration.
#define KILN_EXAMPLE_VARIANT(id, name, summary, ...) \
  static const bool kiln_example_registered_##id =   \
      ::kiln::examples::Register({name, summary, __VA_ARGS__})
#define KILN_EXAMPLE_FAMILY(id, ...) \
  static const bool kiln_family_registered_##id = ::kiln::examples::RegisterFamily(__VA_ARGS__)
