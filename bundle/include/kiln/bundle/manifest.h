// A bundle's manifest: everything a launcher needs to run a compiled kernel without the compiler
// (entry, block and cluster dims, dynamic smem, parameters, grid rule, problem description).
// Text format, one "key value..." per line; see docs/BUNDLES.md.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/dims.h"
#include "kiln/bundle/tensor_map_spec.h"

namespace kiln::rt {

// The values a grid rule (or a tensor map's dims, a dynamic smem rule) is evaluated with: the
// kernel's integer parameters by name.
using Symbols = std::map<std::string, int64_t, std::less<>>;

// A C identifier: what a grid rule's symbol ("sms" or a parameter's name) must be.
bool IsSymbol(absl::string_view s);

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
  // Set where the rule given as text did not parse: Parse's message, which the builder reports at
  // the DSL line that uses the rule (Kernel::TmaParam).
  std::string error;

  GridExpr() = default;
  // A rule written as text, e.g. TensorMapParam::dims = {"K", "rows"}.
  GridExpr(const char* rule);         // NOLINT: implicit, so that rules read as text
  GridExpr(const std::string& rule);  // NOLINT
  static absl::StatusOr<GridExpr> Parse(absl::string_view text);
  std::string ToString() const;
  // Fails when a symbol has no value or the result is not a launchable grid dimension.
  absl::StatusOr<unsigned> Evaluate(const Symbols& symbols, int sm_count) const;
  // An error naming the first symbol the rule reads that holds a value below 0 (no size is).
  absl::Status NoSizeBelowZero(const Symbols& symbols) const;
  // Unchecked, 64-bit; a symbol without a value counts as 0.
  int64_t Value(const Symbols& symbols, int sm_count) const;
  // The symbols it names (not "sms").
  std::vector<std::string> SymbolNames() const;
};

// A TMA descriptor the launcher encodes over a tensor in global memory: the launch passes the
// tensor's address (rt::Arg::Tensor) and the launcher encodes the map. Its dims and strides are
// rules of the kernel's integer parameters, or, when the kernel leaves them empty, given by the
// launch. The rank is the box's.
struct TensorMapParam {
  std::string tensor;    // what the map reads or writes, e.g. A or x (documentation and messages)
  bool by_value = true;  // a __grid_constant__ CUtensorMap; else a pointer to a device copy
  TmaDtype dtype = TmaDtype::kBF16;
  std::vector<GridExpr> dims;     // elements, innermost first; empty: bound at launch
  std::vector<GridExpr> strides;  // bytes, of dims 1..rank-1
  std::vector<uint32_t> box;
  TmaSwizzle swizzle = TmaSwizzle::kNone;
  std::string source;  // file:line of the map's declaration (empty in older bundles)

  int rank() const { return static_cast<int>(box.size()); }
  bool bound_at_launch() const { return dims.empty(); }
  // The spec from the rules (only when not bound at launch).
  TensorMapSpec Resolve(const Symbols& symbols) const;
  int BoxBytes() const;
};

// A tile-order table the launcher builds on the host: a `tiles_m` x `tiles_n` grid of tiles
// (rules of the integer parameters, e.g. M/256 and N/128) dealt to `groups` CTA groups, `slots`
// entries each of (m index << 16 | n index), -1 after the last (see schedule.h). With `split`
// (an integer parameter's name) it is a work table instead: each tile's `k_tiles` k-tiles dealt
// as units, split-K or stream-K as the launch's split says (rt::WorkSchedule).
struct ScheduleTableParam {
  std::string curve = "hilbert";
  GridExpr tiles_m, tiles_n;
  int groups = 1, slots = 1;
  GridExpr k_tiles;
  std::string split;
  bool work() const { return !split.empty(); }
};

// Scratch memory the launcher allocates and keeps for the kernel: `bytes_per_partial` for each
// partial slot the work table `table` (a schedule table parameter) uses at this launch, zeroed
// when first allocated. The kernel must leave it as it expects to find it (counters back at
// zero); launches that share a loaded kernel share it, so they must be ordered (one stream).
// With no table ("-" in the bundle), `bytes_per_partial` is the whole size (a tile counter).
struct WorkspaceParam {
  std::string table;
  int64_t bytes_per_partial = 0;
  // Its size at a launch whose work tables are `tables` (by name, each with its `partials`).
  template <typename Tables>
  int64_t Bytes(const Tables& tables) const {
    return table.empty() ? bytes_per_partial : tables.at(table).partials * bytes_per_partial;
  }
};

// A launch-time rule: integer parameter `symbol` must be a multiple of `multiple` (a kernel's
// tile), checked before every launch.
struct Requirement {
  std::string symbol;
  int64_t multiple = 1;
  std::string source;    // file:line of the rule
  int64_t at_most = -1;  // >= 0: a bound from above instead (Kernel::RequireAtMost)
};

struct ParamSpec {
  enum class Kind { kPointer, kI32, kI64, kF32, kTensorMap, kScheduleTable, kWorkspace };
  std::string name;
  Kind kind = Kind::kPointer;
  TensorMapParam tensor_map;    // kTensorMap
  ScheduleTableParam schedule;  // kScheduleTable
  WorkspaceParam workspace;     // kWorkspace
  // kPointer: the element type the kernel reads through it ("bf16", "f16", "f32", "e4m3", "e5m2",
  // "i1", "i8", "i16", "i32", "i64"), so that a caller can check what it passes; empty in manifests
  // written before it was recorded.
  std::string elem;
};

// The most shared memory a block of `target` (sm_80, sm_90a, sm_100a) may opt into: the CUDA
// programming guide's compute capability table. 0 for a target kiln does not know.
int SmemBudgetBytes(absl::string_view target);

struct Manifest {
  std::string name;    // registry name, e.g. hopper/k01
  std::string entry;   // PTX entry symbol
  std::string target;  // sm_80, sm_90a, sm_100a
  Dim3 block, cluster;
  std::string cluster_source;  // file:line of Kernel::ClusterDims (empty without one)
  unsigned smem_bytes = 0;     // the planned shared memory
  // Dynamic shared memory beyond the plan, a rule of the integer parameters (Kernel::SmemDynamic);
  // empty for none.
  GridExpr smem_extra;
  std::string smem_extra_source;
  GridExpr grid[3];
  std::string grid_source;  // file:line of the rule (Kernel::Grid; empty in older bundles)
  std::vector<ParamSpec> params;
  std::vector<Requirement> requirements;
  // What the kernel's author attached (Kernel::Attribute), e.g. the examples' "gemm" description
  // that their harness reads; the runtime does not interpret them.
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string source;  // file:line of the kernel's definition
  // The GPU debug mode (Kernel::Watchdog): every mbarrier wait gives up after this many
  // milliseconds, and every shared tile index computed at run time is checked; the wait or index
  // that stops the launch records its site (an index into watch_sites, each "file:line") in a
  // host-visible buffer and traps. 0: off.
  int watchdog_ms = 0;
  std::vector<std::string> watch_sites;
  // The kernel waits for the grids before it in the stream (griddepcontrol.wait) before it
  // touches memory they may write, so the runtime launches it with programmatic dependent launch:
  // it may start, and do what comes before that wait, while they finish.
  bool waits_for_prior_grids = false;

  std::string Serialize() const;
  static absl::StatusOr<Manifest> Parse(absl::string_view text);

  // Grid dims from the kernel's integer parameters.
  absl::StatusOr<Dim3> GridFor(const Symbols& symbols, int sm_count) const;
  // Whether a grid rule reads a size of 0 (every symbol given, none below 0), so the problem is
  // empty: a user's call launches nothing then (GridFor refuses it, for kiln's own launches).
  bool GridIsEmpty(const Symbols& symbols) const;
  // Whether a schedule table's rule of row or column tiles reads a size of 0 (M or N of a GEMM):
  // no tile to schedule, so a user's call launches nothing then (the table's builder refuses it).
  bool TablesAreEmpty(const Symbols& symbols) const;
  // Dynamic shared memory of a launch: the plan plus the extra rule.
  int64_t SmemBytes(const Symbols& symbols) const;
  // The same, or why the launch cannot have it, naming the rule's line: a size of the rule below
  // zero, or more than `budget` bytes (0: no budget; `whose` says whose, "NVIDIA H200 allows a
  // block"), as both launchers (the runtime's and the emulator's) refuse it.
  absl::StatusOr<int64_t> LaunchSmem(const Symbols& symbols, int64_t budget,
                                     absl::string_view whose) const;
  // Whether the clusters tile a launch's grid, or why not, naming ClusterDims' and the grid rule's
  // lines, as both launchers refuse it.
  absl::Status CheckClusterTiling(Dim3 launch) const;
  // Every Requirement, with a message naming the rule's source line.
  absl::Status CheckRequirements(const Symbols& symbols) const;
  // The attribute's value, or null.
  const std::string* Attribute(absl::string_view key) const;
};

// A bundle on disk: <dir>/<file stem>.manifest and <dir>/<file stem>.ptx.
struct Bundle {
  Manifest manifest;
  std::string ptx;
};
std::string BundleStem(const std::string& kernel_name);  // hopper/k01 -> hopper.k01
absl::Status WriteBundle(const std::string& dir, const Bundle& bundle);
absl::StatusOr<Bundle> ReadBundle(const std::string& dir, const std::string& kernel_name);
// The kernels bundled in `dir`, sorted. A manifest that cannot be read or parsed fails the
// listing, or where `unreadable` is given, is skipped and named there ("path: why").
absl::StatusOr<std::vector<std::string>> ListBundles(
    const std::string& dir, std::vector<std::string>* unreadable = nullptr);
// The name among `names` nearest a mistyped `name` (fewest edits, case aside; a file stem such
// as ops.saxpy read as ops/saxpy), or "" where none is within a few edits.
std::string NearestName(const std::string& name, const std::vector<std::string>& names);

}  // namespace kiln::rt
