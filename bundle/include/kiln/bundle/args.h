// A launch's arguments checked against a bundle's manifest, without a device: their count and
// kinds against the parameters, the integers against the kernel's requirements (tile
// multiples), and the schedule tables the integers call for. The launcher (kiln/runtime/launch.h)
// and the emulator (kiln/emulator.h) both check a launch this way; every error names the kernel
// and the source line that defined it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kiln/bundle/manifest.h"
#include "kiln/bundle/schedule.h"

namespace kiln::rt {

// One launch argument: a device pointer, a scalar of a parameter's exact type, a tensor for a
// tensor map parameter, or the request that the launcher build a schedule table.
class Arg {
 public:
  using Kind = ParamSpec::Kind;
  static Arg Ptr(uint64_t p) { return Arg(Kind::kPointer, &p, sizeof(p)); }
  // A device buffer (rt::DeviceBuffer, or anything with ptr()).
  template <typename Buffer>
  requires requires(const Buffer& b) { b.ptr(); }
  static Arg Ptr(const Buffer& b) { return Ptr(static_cast<uint64_t>(b.ptr())); }
  static Arg I32(int32_t v) { return Arg(Kind::kI32, &v, sizeof(v)); }
  static Arg I64(int64_t v) { return Arg(Kind::kI64, &v, sizeof(v)); }
  static Arg F32(float v) { return Arg(Kind::kF32, &v, sizeof(v)); }
  // The tensor a tensor map parameter covers, at `address`: the launcher encodes the map from the
  // parameter's box and swizzle and its dims and strides rules.
  static Arg Tensor(uint64_t address) { return Arg(Kind::kTensorMap, &address, sizeof(address)); }
  template <typename Buffer>
  requires requires(const Buffer& b) { b.ptr(); }
  static Arg Tensor(const Buffer& b) { return Tensor(static_cast<uint64_t>(b.ptr())); }
  // The same with the dims (elements, innermost first) and strides (bytes, of dims 1..) given
  // here: for a parameter whose dims are bound at launch, or to override its rules.
  static Arg Tensor(uint64_t address, std::vector<uint64_t> dims,
                    std::vector<uint64_t> strides_bytes);
  // A tensor argument that also says how many bytes its array holds from its address on: the
  // launch then refuses a map that reaches past them (the kernel's sizes larger than the array).
  Arg Holding(uint64_t bytes) const {
    Arg a = *this;
    a.held_bytes_ = bytes;
    return a;
  }
  // A schedule table parameter: the launcher builds it from its rules and the launch's integers.
  static Arg Schedule() { return Arg(Kind::kScheduleTable, nullptr, 0); }
  // A workspace parameter: the launcher allocates it (WorkspaceParam) and keeps it for later
  // launches.
  static Arg Workspace() { return Arg(Kind::kWorkspace, nullptr, 0); }

  Kind kind() const { return kind_; }
  void* data() { return bytes_; }
  int64_t AsInt() const;     // an i32 or i64 argument's value (grid rules read them)
  uint64_t address() const;  // a pointer's or a tensor's
  const std::vector<uint64_t>& dims() const { return dims_; }  // a tensor's, when given
  const std::vector<uint64_t>& strides_bytes() const { return strides_; }
  std::optional<uint64_t> held_bytes() const { return held_bytes_; }  // Holding's, if said

 private:
  Arg(Kind kind, const void* value, size_t size);
  Kind kind_;
  alignas(8) unsigned char bytes_[8] = {};
  std::vector<uint64_t> dims_, strides_;
  std::optional<uint64_t> held_bytes_;
};

const char* ParamKindName(ParamSpec::Kind kind);  // "ptr", "i32", ...

// Whether `args` match `m`'s parameters one by one (the message lists the expected signature),
// and the integer arguments meet the kernel's requirements (RequireMultiple).
absl::Status CheckArgs(const Manifest& m, const std::vector<Arg>& args);

// A grid given by the caller (in place of the manifest's rule), held to what the rule's result
// is held to: 1 to 2^31 - 1 blocks in x, 1 to 65535 in y and z.
absl::Status CheckGrid(const Manifest& m, const Dim3& grid);

// A launch's error with the line that launched it appended ("(launched at file:line)"), so that
// it names both the kernel's declaration and the caller; OK stays OK.
absl::Status LaunchedAt(const absl::Status& s, const std::source_location& where);
// The integer arguments by parameter name (what grid, smem and tensor map rules read).
Symbols SymbolsOf(const Manifest& m, const std::vector<Arg>& args);
// The tensor that tensor map parameter i covers at this launch (its rules, or the argument's
// dims), checked by the encoder's rules and against the bytes its argument holds (Arg::Holding).
// Errors name the map's line (the kernel's, in bundles that did not record it).
absl::StatusOr<TensorMapSpec> TensorOfArg(const Manifest& m, size_t i, const Arg& a,
                                          const Symbols& symbols);
// Every schedule table of a launch by parameter name (a work table's partial count sizes the
// workspaces); fails, naming the kernel, on a bad table or a workspace naming no table.
absl::StatusOr<std::map<std::string, WorkTable>> BuildScheduleTables(const Manifest& m,
                                                                     const Symbols& symbols);

// Each workspace parameter is sized by a schedule table the launch has built (`tables`, a map by
// parameter name); fails, naming the kernel, where one names a table the kernel does not have.
template <typename Tables>
absl::Status CheckWorkspaceTables(const Manifest& m, const Tables& tables) {
  for (const ParamSpec& p : m.params)
    if (p.kind == ParamSpec::Kind::kWorkspace && !p.workspace.table.empty() &&
        !tables.count(p.workspace.table))
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": ", m.name, ": workspace ", p.name, " is sized by schedule table '",
          p.workspace.table, "', which the kernel does not have"));
  return absl::OkStatus();
}

}  // namespace kiln::rt
