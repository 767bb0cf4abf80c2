// A bundle's manifest: everything a launcher needs to run a compiled kernel without the compiler
// (entry, block and cluster dims, dynamic smem, parameters, grid rule, problem description).
// Text format, one "key value..." per line; see docs/BUNDLES.md.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/tensor_map.h"

namespace kiln::rt {

// The problem sizes a grid rule and a launch are evaluated against.
struct ProblemSize {
  int64_t m = 0, n = 0, k = 0;
};

// The values a grid rule is evaluated with: the kernel's integer parameters by name (a GEMM's
// M, N and K among them).
using Symbols = std::map<std::string, int64_t, std::less<>>;
Symbols ProblemSymbols(const ProblemSize& size);  // {M, N, K}

// One grid dimension: a product of factors, each an integer, a symbol divided (rounding up) by
// an integer, or "sms" (the device's multiprocessor count; sms/D rounds down, so "sms/2*2" is the
// largest even count). A symbol names an integer parameter of the kernel. Written e.g.
// "N/128*M/128" or "rows/4".
struct GridExpr {
  struct Factor {
    std::string symbol;  // "" for a constant, "sms", or an integer parameter's name
    int64_t value = 1;   // the constant, or the divisor of the symbol
  };
  std::vector<Factor> factors;

  static absl::StatusOr<GridExpr> Parse(absl::string_view text);
  std::string ToString() const;
  // Fails when a symbol has no value or the result is not a launchable grid dimension.
  absl::StatusOr<unsigned> Evaluate(const Symbols& symbols, int sm_count) const;
  absl::StatusOr<unsigned> Evaluate(const ProblemSize& size, int sm_count) const;
  // Unchecked, 64-bit; a symbol without a value counts as 0.
  int64_t Value(const Symbols& symbols, int sm_count) const;
  int64_t Value(const ProblemSize& size, int sm_count) const;
};

// A TMA descriptor the launcher encodes for one GEMM operand. Sizes are rules of M, N, K.
struct TensorMapParam {
  std::string operand;  // A, B or C
  bool by_value = true;  // a __grid_constant__ CUtensorMap; else a pointer to a device copy
  TmaDtype dtype = TmaDtype::kBF16;
  std::vector<GridExpr> dims;     // elements, innermost first
  std::vector<GridExpr> strides;  // bytes, of dims 1..rank-1
  std::vector<uint32_t> box;
  TmaSwizzle swizzle = TmaSwizzle::kNone;

  absl::StatusOr<TensorMapSpec> Resolve(const ProblemSize& size) const;
  int BoxBytes() const;
};

// A tile-order table the launcher builds on the host: for each of `groups` CTA groups,
// `slots` entries of (tile_m << 16 | tile_n), -1 after the last (see schedule.h).
struct ScheduleTableParam {
  std::string curve = "hilbert";
  int64_t tile_m = 1, tile_n = 1;  // the C tile one group computes per entry
  int groups = 1, slots = 1;
};

struct ParamSpec {
  enum class Kind { kPointer, kI32, kI64, kF32, kTensorMap, kScheduleTable };
  std::string name;
  Kind kind = Kind::kPointer;
  TensorMapParam tensor_map;    // kTensorMap
  ScheduleTableParam schedule;  // kScheduleTable
};

// What GEMM a kernel computes: dtypes, storage order of each matrix and the tile the sizes must
// divide by. "row"/"col" are the usual BLAS meanings for A (MxK), B (KxN) and C (MxN).
struct GemmSpec {
  std::string in_type = "bf16", out_type = "bf16", acc_type = "f32";
  std::string a_order = "row", b_order = "col", c_order = "row";
  int64_t tile_m = 1, tile_n = 1, tile_k = 1;
};

struct Manifest {
  std::string name;    // registry name, e.g. hopper/k01
  std::string entry;   // PTX entry symbol
  std::string target;  // sm_80, sm_90a, sm_100a
  Dim3 block, cluster;
  unsigned smem_bytes = 0;
  GridExpr grid[3];
  std::vector<ParamSpec> params;
  bool is_gemm = false;  // a GEMM the harness (kiln run/bench) can check and time
  GemmSpec gemm;         // when is_gemm
  std::string source;  // file:line of the kernel's definition

  std::string Serialize() const;
  static absl::StatusOr<Manifest> Parse(absl::string_view text);

  // Grid dims for a problem; fails with a message naming the kernel's source line when the
  // problem does not divide by the kernel's tile.
  absl::StatusOr<Dim3> GridFor(const ProblemSize& size, int sm_count) const;
  // Grid dims from the kernel's integer parameters (any kernel).
  absl::StatusOr<Dim3> GridFor(const Symbols& symbols, int sm_count) const;
  absl::Status CheckProblem(const ProblemSize& size) const;
};

// A bundle on disk: <dir>/<file stem>.manifest and <dir>/<file stem>.ptx.
struct Bundle {
  Manifest manifest;
  std::string ptx;
};
std::string BundleStem(const std::string& kernel_name);  // hopper/k01 -> hopper.k01
absl::Status WriteBundle(const std::string& dir, const Bundle& bundle);
absl::StatusOr<Bundle> ReadBundle(const std::string& dir, const std::string& kernel_name);
absl::StatusOr<std::vector<std::string>> ListBundles(const std::string& dir);

}  // namespace kiln::rt
