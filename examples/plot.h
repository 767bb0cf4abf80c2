// SVG charts of GEMM results (kiln bench --svg, kiln plot): the ratio to cuBLAS against the
// shape, one line per kernel; and, for each worklog series, its versions' TFLOPS at one size,
// like the worklogs' own progress charts. Plain SVG, no dependencies.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/harness.h"

namespace kiln::examples {

// The results of a `kiln bench --out` / `kiln gemm --out` TSV file (timed rows only).
absl::StatusOr<std::vector<GemmResult>> ReadResultsTsv(const std::string& path);

// Ratio to cuBLAS (y) at each shape in the order first measured (x), a line per kernel, a dashed
// line at 1.0.
std::string RatioChart(const std::vector<GemmResult>& results, const std::string& title);

// For each series (the name before '/'), its versions in order at the first shape measured for
// all of them: TFLOPS as bars, cuBLAS's at that shape as a dashed line.
std::string ProgressionChart(const std::vector<GemmResult>& results, const std::string& title);

}  // namespace kiln::examples
