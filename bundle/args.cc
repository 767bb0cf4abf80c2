#include "kiln/bundle/args.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/bundle/source_path.h"

namespace kiln::rt {

Arg::Arg(Kind kind, const void* value, size_t size) : kind_(kind) {
  if (size) std::memcpy(bytes_, value, size);
}

Arg Arg::Tensor(uint64_t address, std::vector<uint64_t> dims, std::vector<uint64_t> strides_bytes) {
  Arg a = Tensor(address);
  a.dims_ = std::move(dims);
  a.strides_ = std::move(strides_bytes);
  return a;
}

absl::StatusOr<TensorMapSpec> TensorOfArg(const Manifest& m, size_t i, const Arg& a,
                                          const Symbols& symbols) {
  const ParamSpec& p = m.params[i];
  const TensorMapParam& t = p.tensor_map;
  TensorMapSpec spec = t.Resolve(symbols);
  if (!a.dims().empty()) spec.dims = a.dims(), spec.strides_bytes = a.strides_bytes();
  auto error = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat(t.source.empty() ? m.source : t.source, ": ",
                                                   m.name, ": tensor map ", p.name, " over ",
                                                   t.tensor, ": ", what...));
  };
  if (absl::Status s = ValidateTensorMap(spec, a.address()); !s.ok()) return error(s.message());
  const uint64_t span = TensorMapSpanBytes(spec);
  if (a.held_bytes() && span > *a.held_bytes())
    return error("its sizes (", absl::StrJoin(spec.dims, " x "),
                 " elements, innermost first) reach ", span,
                 " bytes from its address, but the array given holds ", *a.held_bytes(),
                 " (an array smaller than the kernel's sizes say)");
  return spec;
}

uint64_t Arg::address() const {
  uint64_t v;
  std::memcpy(&v, bytes_, sizeof(v));
  return v;
}

const char* ParamKindName(ParamSpec::Kind kind) {
  switch (kind) {
    case ParamSpec::Kind::kPointer:
      return "ptr";
    case ParamSpec::Kind::kI32:
      return "i32";
    case ParamSpec::Kind::kI64:
      return "i64";
    case ParamSpec::Kind::kF32:
      return "f32";
    case ParamSpec::Kind::kTensorMap:
      return "tensor map";
    case ParamSpec::Kind::kScheduleTable:
      return "schedule table";
    case ParamSpec::Kind::kWorkspace:
      return "workspace";
  }
  return "?";
}

absl::Status CheckGrid(const Manifest& m, const Dim3& grid) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0)  // (as the GPU launch words it)
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name,
                                                   ": launched on an empty grid (", grid.x, "x",
                                                   grid.y, "x", grid.z, ")"));
  if (grid.x >= (1u << 31) || grid.y > 65535 || grid.z > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat(m.source, ": ", m.name, ": grid (", grid.x, ", ", grid.y, ", ", grid.z,
                     ") is out of range (x 1 to 2^31-1 blocks, y and z 1 to 65535)"));
  return absl::OkStatus();
}

absl::Status CheckArgs(const Manifest& m, const std::vector<Arg>& args) {
  auto signature = [&] {
    return absl::StrJoin(m.params, ", ", [](std::string* out, const ParamSpec& p) {
      absl::StrAppend(out, ParamKindName(p.kind), " ", p.name);
    });
  };
  if (args.size() != m.params.size())
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, " takes ",
                                                   m.params.size(), " arguments (", signature(),
                                                   "), not ", args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamSpec& p = m.params[i];
    if (args[i].kind() != p.kind)
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": ", m.name, " argument ", i, " (", p.name, ") is ", ParamKindName(p.kind),
          ", not ", ParamKindName(args[i].kind()), "; it takes (", signature(), ")"));
    if (p.kind != ParamSpec::Kind::kTensorMap) continue;
    const TensorMapParam& t = p.tensor_map;
    const Arg& a = args[i];
    if (a.dims().empty() && t.bound_at_launch())
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": ", m.name, " argument ", i, " (tensor map ", p.name, " over ", t.tensor,
          ") has its dims bound at launch: pass Arg::Tensor(address, dims, strides) with ",
          t.rank(), " dims and ", t.rank() - 1, " strides"));
    if (!a.dims().empty() && (a.dims().size() != static_cast<size_t>(t.rank()) ||
                              a.strides_bytes().size() + 1 != a.dims().size()))
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": ", m.name, " argument ", i, " (tensor map ", p.name, " over ", t.tensor,
          ") is rank ", t.rank(), ": it takes ", t.rank(), " dims and ", t.rank() - 1,
          " strides, not ", a.dims().size(), " and ", a.strides_bytes().size()));
  }
  return m.CheckRequirements(SymbolsOf(m, args));
}

Symbols SymbolsOf(const Manifest& m, const std::vector<Arg>& args) {
  Symbols symbols;
  for (size_t i = 0; i < args.size() && i < m.params.size(); ++i)
    if (args[i].kind() == Arg::Kind::kI32 || args[i].kind() == Arg::Kind::kI64)
      symbols[m.params[i].name] = args[i].AsInt();
  return symbols;
}

int64_t Arg::AsInt() const {
  if (kind_ == Kind::kI32) {
    int32_t v;
    std::memcpy(&v, bytes_, sizeof(v));
    return v;
  }
  int64_t v;
  std::memcpy(&v, bytes_, sizeof(v));
  return v;
}

absl::StatusOr<std::map<std::string, WorkTable>> BuildScheduleTables(const Manifest& m,
                                                                     const Symbols& symbols) {
  std::map<std::string, WorkTable> tables;
  for (const ParamSpec& p : m.params) {
    if (p.kind != ParamSpec::Kind::kScheduleTable) continue;
    absl::StatusOr<WorkTable> t = BuildScheduleTable(p.schedule, symbols);
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, ": schedule table ",
                                                     p.name, ": ", t.status().message()));
    tables[p.name] = *std::move(t);
  }
  if (absl::Status st = CheckWorkspaceTables(m, tables); !st.ok()) return st;
  return tables;
}

absl::Status LaunchedAt(const absl::Status& s, const std::source_location& where) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(s.message(), " (launched at ", SourcePath(where.file_name()), ":",
                             where.line(), ")"));
}

}  // namespace kiln::rt
