#include "kiln/runtime/launch.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kiln::rt {

Arg::Arg(Kind kind, const void* value, size_t size) : kind_(kind) { std::memcpy(bytes_, value, size); }

const char* ParamKindName(ParamSpec::Kind kind) {
  switch (kind) {
    case ParamSpec::Kind::kPointer: return "ptr";
    case ParamSpec::Kind::kI32: return "i32";
    case ParamSpec::Kind::kI64: return "i64";
    case ParamSpec::Kind::kF32: return "f32";
    case ParamSpec::Kind::kTensorMap: return "tensor map";
    case ParamSpec::Kind::kScheduleTable: return "schedule table";
  }
  return "?";
}

absl::Status CheckTarget(const Manifest& m, const Driver& d) {
  const int cc = d.compute_capability();
  const bool arch_specific = m.target.back() == 'a';
  int need = 0;
  if (m.target == "sm_80") need = 80;
  else if (m.target == "sm_90a") need = 90;
  else if (m.target == "sm_100a") need = 100;
  else return absl::InvalidArgumentError(absl::StrCat(m.name, ": unknown target ", m.target));
  if (cc < need || (arch_specific && cc != need))
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is built for %s; %s is sm_%d, so it cannot run here", m.name, m.target,
        d.device_name(), cc));
  return absl::OkStatus();
}

absl::Status CheckArgs(const Manifest& m, const std::vector<Arg>& args) {
  auto signature = [&] {
    return absl::StrJoin(m.params, ", ", [](std::string* out, const ParamSpec& p) {
      absl::StrAppend(out, ParamKindName(p.kind), " ", p.name);
    });
  };
  if (args.size() != m.params.size())
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, " takes ", m.params.size(),
                                                   " arguments (", signature(), "), not ", args.size()));
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamSpec& p = m.params[i];
    if (p.kind == ParamSpec::Kind::kTensorMap || p.kind == ParamSpec::Kind::kScheduleTable)
      return absl::UnimplementedError(absl::StrCat(m.source, ": ", m.name, " parameter ", i, " (", p.name,
                                                   ") is a ", ParamKindName(p.kind),
                                                   ", which the GEMM harness builds; typed launches take "
                                                   "pointers and scalars"));
    if (args[i].kind() != p.kind)
      return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, " argument ", i, " (", p.name,
                                                     ") is ", ParamKindName(p.kind), ", not ",
                                                     ParamKindName(args[i].kind()), "; it takes (",
                                                     signature(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedKernel> LoadedKernel::Load(const Bundle& bundle) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const Manifest& m = bundle.manifest;
  if (absl::Status s = CheckTarget(m, **d); !s.ok()) return s;
  absl::StatusOr<Kernel> k = Kernel::Load(bundle.ptx, m.entry);
  if (!k.ok()) return k.status();
  LoadedKernel loaded;
  loaded.manifest_ = m;
  loaded.kernel_ = *std::move(k);
  return loaded;
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

absl::StatusOr<Dim3> LoadedKernel::GridFor(const std::vector<Arg>& args) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return s;
  return GridOfCheckedArgs(args);
}

absl::StatusOr<Dim3> LoadedKernel::GridOfCheckedArgs(const std::vector<Arg>& args) const {
  const Manifest& m = manifest_;
  Symbols symbols;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].kind() == Arg::Kind::kI32 || args[i].kind() == Arg::Kind::kI64)
      symbols[m.params[i].name] = args[i].AsInt();
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  absl::StatusOr<Dim3> grid = m.GridFor(symbols, (*d)->sm_count());
  if (!grid.ok())
    return absl::Status(grid.status().code(), absl::StrCat(m.source, ": ", m.name, ": ", grid.status().message()));
  return grid;
}

absl::Status LoadedKernel::Launch(std::vector<Arg> args, cu::CUstream stream) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return s;
  absl::StatusOr<Dim3> grid = GridOfCheckedArgs(args);
  if (!grid.ok()) return grid.status();
  return LaunchCheckedArgs(*grid, std::move(args), stream);
}

absl::Status LoadedKernel::Launch(Dim3 grid, std::vector<Arg> args, cu::CUstream stream) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return s;
  return LaunchCheckedArgs(grid, std::move(args), stream);
}

absl::Status LoadedKernel::LaunchCheckedArgs(Dim3 grid, std::vector<Arg> args, cu::CUstream stream) const {
  const Manifest& m = manifest_;
  if (grid.count() == 0)
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, " launched on an empty grid (",
                                                   grid.x, "x", grid.y, "x", grid.z, ")"));
  if (m.cluster.count() == 0 || grid.x % m.cluster.x || grid.y % m.cluster.y || grid.z % m.cluster.z)
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": ", m.name, "'s clusters of ", m.cluster.x, "x",
                                                   m.cluster.y, "x", m.cluster.z, " do not tile a grid of ",
                                                   grid.x, "x", grid.y, "x", grid.z));
  std::vector<void*> pointers;
  for (Arg& a : args) pointers.push_back(a.data());
  absl::Status s = kernel_.Launch({grid, m.block, m.cluster, m.smem_bytes, stream}, pointers.data());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(m.source, ": ", s.message()));
  return s;
}

}  // namespace kiln::rt
