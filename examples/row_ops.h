// The harness of the row-wise op kernels (ops/softmax, ops/rmsnorm, ops/layernorm, and their .f16
// forms): runs a bundle on random normal bf16 (f16) inputs with a poisoned output, checks it
// against an fp64 CPU reference, and times it against a device-to-device copy of the same bytes in
// the same process.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/bundle/manifest.h"

namespace kiln::examples {

bool IsRowOp(const std::string& name);

struct RowOpOptions {
  int64_t rows = 32768, cols = 4096;
  int warmup = 3, iterations = 20;
  uint64_t seed = 1;
  bool time = true;
};

struct RowOpResult {
  std::string name;
  int64_t rows = 0, cols = 0;
  double ms = 0, gbps = 0;              // median; bytes read and written / time
  double copy_ms = 0, copy_gbps = 0;    // cuMemcpyDtoD of the input, same accounting
  double rel_error = 0, tolerance = 0;  // norm-relative, over the rows checked
  int64_t rows_checked = 0;
  bool passed = false;
  std::string failure;
};

absl::StatusOr<RowOpResult> RunRowOp(const rt::Bundle& bundle, const RowOpOptions& options);

// Whether the emulator takes a row op of rows x cols (at least 1 each, at most 2^26 elements):
// the message names `name`.
absl::Status CheckEmulatedRowOpSize(const std::string& name, int64_t rows, int64_t cols);
// The same check on kiln's PTX emulator instead of a GPU (no timing): `schedule_seed` orders the
// emulated threads (kiln/emulator.h).
absl::StatusOr<RowOpResult> EmulateRowOp(const rt::Bundle& bundle, const RowOpOptions& options,
                                         uint64_t schedule_seed = 1);

std::string RowOpTableHeader();
std::string RowOpTableRow(const RowOpResult& r);
// Machine-readable: name, rows, cols, ms, GB/s, copy ms, copy GB/s, ratio, error, ok|fail.
std::string RowOpTsvRow(const RowOpResult& r);

}  // namespace kiln::examples
