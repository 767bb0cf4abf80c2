// The GEMM harness: runs a bundle on random normal inputs, checks it against an independent
// reference (cuBLAS where present, else kiln's reference kernel) and fp64 CPU spot checks, and
// times it and cuBLAS the same way in the same process.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/runtime/driver.h"
#include "examples/gemm_spec.h"
#include "kiln/runtime/manifest.h"

namespace kiln::examples {

struct RunOptions {
  ProblemSize size{4096, 4096, 4096};
  int warmup = 3;
  int iterations = 20;  // timed runs; the median is reported
  uint64_t seed = 1;
  bool time = true;
};

struct GemmResult {
  std::string name;
  ProblemSize size;
  double ms = 0, tflops = 0;          // median
  double cublas_ms = 0, cublas_tflops = 0;
  double rel_error = 0;               // ||C - ref|| / ||ref|| over every element
  double spot_error = 0;              // same, over fp64 CPU spot checks
  double tolerance = 0;
  std::string reference;              // "cublas" or the reference bundle's name
  bool passed = false;
  std::string failure;                // why it did not pass
  std::string note;                   // a caveat about the measurement (e.g. cluster waves)
};

// Norm-relative error threshold for the spec's output and accumulator types.
double Tolerance(const GemmSpec& spec);

// `reference` is used when cuBLAS is unavailable (a reference/<dtype> bundle).
absl::StatusOr<GemmResult> RunGemm(const rt::Bundle& bundle, const rt::Bundle* reference,
                                   const RunOptions& options);

// The same check on kiln's PTX emulator (no GPU, no timing): the output against an fp64 CPU
// product over every element. Kernels that take tensor maps or schedule tables need TMA, which
// the emulator does not run yet (an Unimplemented status says so).
absl::StatusOr<GemmResult> EmulateGemm(const rt::Bundle& bundle, const RunOptions& options,
                                       uint64_t schedule_seed = 1);

// The table: header once, then one row per result.
std::string TableHeader();
std::string TableRow(const GemmResult& r);
std::string TsvRow(const GemmResult& r);  // machine-readable

}  // namespace kiln::examples
