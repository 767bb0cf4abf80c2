#include "kiln/runtime/launch.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/bundle/schedule.h"
#include "kiln/bundle/watchdog_report.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/tensor_map.h"

namespace kiln::rt {

LaunchConfig LaunchConfigOf(const Manifest& m, Dim3 grid, unsigned smem, cu::CUstream stream) {
  return {grid, m.block, m.cluster, smem, stream, m.waits_for_prior_grids};
}

absl::Status CheckTarget(const Manifest& m, const Driver& d) {
  const int cc = d.compute_capability();
  const bool arch_specific = m.target.back() == 'a';
  int need = 0;
  if (m.target == "sm_80")
    need = 80;
  else if (m.target == "sm_90a")
    need = 90;
  else if (m.target == "sm_100a")
    need = 100;
  else
    return absl::InvalidArgumentError(absl::StrCat(m.name, ": unknown target ", m.target));
  if (cc < need || (arch_specific && cc != need))
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is built for %s; %s is sm_%d, so it cannot run here", m.name, m.target,
                        d.device_name(), cc));
  return absl::OkStatus();
}

// ---- the GPU debug mode's record: pinned host memory mapped into the device, so that it can
// be read after the trap that ends a timed-out launch (the context is unusable then).

absl::StatusOr<std::shared_ptr<WatchdogRecord>> WatchdogRecord::Attach(const Kernel& kernel,
                                                                       const Manifest& m) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  auto r = std::shared_ptr<WatchdogRecord>(new WatchdogRecord(m));
  const DriverApi& api = (*d)->api();
  if (absl::Status s = (*d)->Check(
          api.cuMemHostAlloc(&r->host_, sizeof(WatchdogFields),
                             cu::CU_MEMHOSTALLOC_PORTABLE | cu::CU_MEMHOSTALLOC_DEVICEMAP),
          "cuMemHostAlloc (the watchdog's record)");
      !s.ok())
    return s;
  if (absl::Status s = (*d)->Check(api.cuMemHostGetDevicePointer(&r->device_, r->host_, 0),
                                   "cuMemHostGetDevicePointer");
      !s.ok())
    return s;
  absl::StatusOr<cu::CUdeviceptr> rec = kernel.Global("kiln_watchdog_record"),
                                  claim = kernel.Global("kiln_watchdog_claim");
  if (!rec.ok()) return rec.status();
  if (!claim.ok()) return claim.status();
  r->record_global_ = *rec, r->claim_global_ = *claim;
  std::lock_guard<std::mutex> lock(Live().mu);
  Live().records.push_back(r);
  return r;
}

WatchdogRecord::WatchdogRecord(const Manifest& m)
    : name_(m.name), sites_(m.watch_sites), ms_(m.watchdog_ms) {}

WatchdogRecord::~WatchdogRecord() {
  if (absl::StatusOr<Driver*> d = Driver::Get(); d.ok() && host_)
    (void)(*d)->api().cuMemFreeHost(host_);
}

absl::Status WatchdogRecord::Arm() const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  std::memset(host_, 0, sizeof(WatchdogFields));
  const uint32_t free_claim = 0;
  if (absl::Status s = (*d)->Check(
          (*d)->api().cuMemcpyHtoD(record_global_, &device_, sizeof(device_)), "cuMemcpyHtoD");
      !s.ok())
    return s;
  return (*d)->Check((*d)->api().cuMemcpyHtoD(claim_global_, &free_claim, sizeof(free_claim)),
                     "cuMemcpyHtoD");
}

std::optional<absl::Status> WatchdogRecord::Take() {
  WatchdogFields f;
  std::memcpy(&f, host_, sizeof(f));
  std::optional<absl::Status> report = WatchdogReport(name_, sites_, ms_, f);
  if (report) std::memset(host_, 0, sizeof(WatchdogFields));
  return report;
}

WatchdogRecord::Registry& WatchdogRecord::Live() {
  static Registry* r = new Registry;
  return *r;
}

namespace internal {
std::optional<absl::Status> TakeWatchdogReport() {
  WatchdogRecord::Registry& live = WatchdogRecord::Live();
  std::lock_guard<std::mutex> lock(live.mu);
  std::optional<absl::Status> first;
  std::erase_if(live.records, [](const std::weak_ptr<WatchdogRecord>& w) { return w.expired(); });
  for (const std::weak_ptr<WatchdogRecord>& w : live.records)
    if (std::shared_ptr<WatchdogRecord> r = w.lock())
      if (std::optional<absl::Status> m = r->Take(); m && !first) first = m;
  return first;
}
}  // namespace internal

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
  loaded.context_ = (*d)->context();
  loaded.device_ = (*d)->device();
  if (m.watchdog_ms > 0) {
    absl::StatusOr<std::shared_ptr<WatchdogRecord>> w = WatchdogRecord::Attach(loaded.kernel_, m);
    if (!w.ok()) return w.status();
    loaded.watchdog_ = *std::move(w);
  }
  return loaded;
}

absl::StatusOr<Dim3> LoadedKernel::GridFor(const std::vector<Arg>& args) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return s;
  return GridOfCheckedArgs(args);
}

absl::StatusOr<Dim3> LoadedKernel::GridOfCheckedArgs(const std::vector<Arg>& args) const {
  const Manifest& m = manifest_;
  const Symbols symbols = SymbolsOf(m, args);
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  absl::StatusOr<Dim3> grid = m.GridFor(symbols, (*d)->sm_count());
  if (!grid.ok())
    return absl::Status(grid.status().code(),
                        absl::StrCat(m.source, ": ", m.name, ": ", grid.status().message()));
  return grid;
}

absl::StatusOr<PreparedLaunch> LoadedKernel::Prepare(std::vector<Arg> args, cu::CUstream stream,
                                                     std::source_location where) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return LaunchedAt(s, where);
  absl::StatusOr<Dim3> grid = GridOfCheckedArgs(args);
  if (!grid.ok()) return LaunchedAt(grid.status(), where);
  absl::StatusOr<PreparedLaunch> p = PrepareCheckedArgs(*grid, std::move(args), stream);
  if (!p.ok()) return LaunchedAt(p.status(), where);
  return p;
}

absl::Status LoadedKernel::Launch(std::vector<Arg> args, cu::CUstream stream,
                                  std::source_location where) const {
  absl::StatusOr<PreparedLaunch> p = Prepare(std::move(args), stream, where);
  if (!p.ok()) return p.status();
  return LaunchedAt(p->Launch(), where);
}

absl::Status LoadedKernel::Launch(Dim3 grid, std::vector<Arg> args, cu::CUstream stream,
                                  std::source_location where) const {
  if (absl::Status s = CheckArgs(manifest_, args); !s.ok()) return LaunchedAt(s, where);
  absl::StatusOr<PreparedLaunch> p = PrepareCheckedArgs(grid, std::move(args), stream);
  if (!p.ok()) return LaunchedAt(p.status(), where);
  return LaunchedAt(p->Launch(), where);
}

absl::Status PreparedLaunch::Launch() const {
  const LoadedKernel& k = *kernel_;
  if (k.watchdog_)
    if (absl::Status armed = k.watchdog_->Arm(); !armed.ok()) return armed;
  absl::Status s = k.kernel_.Launch(config_, pointers_.data());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(k.manifest_.source, ": ", s.message()));
  return s;
}

absl::Status LoadedKernel::CanAllocate(cu::CUstream stream, absl::string_view what) const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->CheckNotCapturing(
      stream, absl::StrCat(manifest_.source, ": ", manifest_.name, ": allocating its ", what));
}

absl::StatusOr<uint64_t> LoadedKernel::DeviceCopy(const std::string& bytes,
                                                  cu::CUstream stream) const {
  std::lock_guard<std::mutex> lock(uploads_->mu);
  auto it = uploads_->by_content.find(bytes);
  if (it != uploads_->by_content.end()) return it->second.ptr();
  if (absl::Status s = CanAllocate(stream, "copy of a tensor map"); !s.ok()) return s;
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(bytes.size());
  if (!buf.ok()) return buf.status();
  if (absl::Status s = buf->CopyFromHost(bytes.data(), bytes.size()); !s.ok()) return s;
  return uploads_->by_content.emplace(bytes, *std::move(buf)).first->second.ptr();
}

absl::StatusOr<uint64_t> LoadedKernel::Workspace(size_t param, size_t bytes,
                                                 cu::CUstream stream) const {
  std::lock_guard<std::mutex> lock(uploads_->mu);
  DeviceBuffer& have = uploads_->workspaces[param];
  if (!have.ptr() || have.bytes() < std::max<size_t>(bytes, 256))
    if (absl::Status s =
            CanAllocate(stream, absl::StrCat("workspace ", manifest_.params[param].name));
        !s.ok())
      return s;
  absl::StatusOr<bool> grown =
      DeviceBuffer::GrowKeepingOld(have, uploads_->outgrown, std::max<size_t>(bytes, 256));
  if (!grown.ok()) return grown.status();
  if (*grown)
    if (absl::Status s = have.Fill(0); !s.ok()) return s;
  return have.ptr();
}

absl::StatusOr<LoadedKernel::TableCopy> LoadedKernel::Table(size_t param,
                                                            const ScheduleTableParam& t,
                                                            const Symbols& symbols,
                                                            cu::CUstream stream) const {
  auto split = symbols.find(t.split);
  const std::string key = absl::StrCat(
      param, ":", t.tiles_m.Value(symbols, 0), ",", t.tiles_n.Value(symbols, 0), ",",
      t.work() ? t.k_tiles.Value(symbols, 0) : 0, ",", split == symbols.end() ? -1 : split->second);
  std::lock_guard<std::mutex> lock(uploads_->mu);
  if (auto it = uploads_->tables.find(key); it != uploads_->tables.end())
    return TableCopy{it->second.first.ptr(), it->second.second};
  if (absl::Status s =
          CanAllocate(stream, absl::StrCat("schedule table ", manifest_.params[param].name));
      !s.ok())
    return s;
  absl::StatusOr<WorkTable> table = BuildScheduleTable(t, symbols);
  if (!table.ok()) return table.status();
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(table->words.size() * 4);
  if (!buf.ok()) return buf.status();
  if (absl::Status s = buf->CopyFromHost(table->words.data(), table->words.size() * 4); !s.ok())
    return s;
  auto& kept = uploads_->tables[key] = {*std::move(buf), table->partials};
  return TableCopy{kept.first.ptr(), kept.second};
}

absl::StatusOr<PreparedLaunch> LoadedKernel::PrepareCheckedArgs(Dim3 grid, std::vector<Arg> args,
                                                                cu::CUstream stream) const {
  const Manifest& m = manifest_;
  auto error = [&](absl::StatusCode code, const std::string& at, auto&&... what) {
    return absl::Status(code, absl::StrCat(at, ": ", m.name, ": ", what...));
  };
  if (absl::Status s = CheckGrid(m, grid); !s.ok()) return s;  // (a caller's grid, or a rule's)
  if (absl::Status s = m.CheckClusterTiling(grid); !s.ok()) return s;
  const Symbols symbols = SymbolsOf(m, args);
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  // A module lives in the context it was loaded in: another device's launch would fail inside
  // the driver with an invalid handle.
  if ((*d)->context() != context_)
    return error(absl::StatusCode::kFailedPrecondition, m.source, "loaded on device ", device_,
                 ", launched with device ", (*d)->device(),
                 " current: load it again there (a runner keeps one per device and stream)");
  absl::StatusOr<int64_t> launch_smem = m.LaunchSmem(
      symbols, (*d)->max_smem_optin(), absl::StrCat((*d)->device_name(), " allows a block"));
  if (!launch_smem.ok()) return launch_smem.status();
  const int64_t smem = *launch_smem;

  std::map<std::string, TableCopy> tables;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec& p = m.params[i];
    if (p.kind != ParamSpec::Kind::kScheduleTable) continue;
    absl::StatusOr<TableCopy> t = Table(i, p.schedule, symbols, stream);
    if (!t.ok())
      return error(absl::StatusCode::kInvalidArgument, m.source, "schedule table ", p.name, ": ",
                   t.status().message());
    tables[p.name] = *t;
  }
  if (absl::Status st = CheckWorkspaceTables(m, tables); !st.ok()) return st;
  // What the launch's parameter pointers point at; cuLaunchKernel copies the values. Each vector
  // keeps its elements in place when the PreparedLaunch moves.
  PreparedLaunch prepared;
  prepared.kernel_ = this;
  prepared.config_ = LaunchConfigOf(m, grid, static_cast<unsigned>(smem), stream);
  prepared.args_ = std::move(args);
  std::vector<Arg>& args_kept = prepared.args_;
  std::vector<std::unique_ptr<cu::CUtensorMap>>& maps = prepared.maps_;
  std::vector<uint64_t>& device_copies = prepared.device_words_;
  device_copies.reserve(args_kept.size());
  std::vector<void*>& pointers = prepared.pointers_;
  for (size_t i = 0; i < args_kept.size(); ++i) {
    const ParamSpec& p = m.params[i];
    Arg& a = args_kept[i];
    if (p.kind == ParamSpec::Kind::kTensorMap) {
      const TensorMapParam& t = p.tensor_map;
      absl::StatusOr<TensorMapSpec> spec = TensorOfArg(m, i, a, symbols);
      if (!spec.ok()) return spec.status();
      absl::StatusOr<cu::CUtensorMap> map = EncodeTensorMap(*spec, a.address());
      if (!map.ok())
        return error(absl::StatusCode::kInvalidArgument, t.source.empty() ? m.source : t.source,
                     "tensor map ", p.name, " over ", t.tensor, ": ", map.status().message());
      maps.push_back(std::make_unique<cu::CUtensorMap>(*map));
      if (t.by_value) {
        pointers.push_back(maps.back().get());
        continue;
      }
      absl::StatusOr<uint64_t> copy = DeviceCopy(
          std::string(reinterpret_cast<const char*>(maps.back().get()), sizeof(cu::CUtensorMap)),
          stream);
      if (!copy.ok()) return copy.status();
      device_copies.push_back(*copy);
      pointers.push_back(&device_copies.back());
      continue;
    }
    if (p.kind == ParamSpec::Kind::kScheduleTable) {
      device_copies.push_back(tables.at(p.name).device);
      pointers.push_back(&device_copies.back());
      continue;
    }
    if (p.kind == ParamSpec::Kind::kWorkspace) {
      absl::StatusOr<uint64_t> w =
          Workspace(i, static_cast<size_t>(p.workspace.Bytes(tables)), stream);
      if (!w.ok()) return w.status();
      device_copies.push_back(*w);
      pointers.push_back(&device_copies.back());
      continue;
    }
    pointers.push_back(a.data());
  }
  return prepared;
}

absl::StatusOr<const LoadedKernel*> LoadedKernels::Get(const std::string& name,
                                                       cu::CUstream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const Key key{name, (*d)->context(), stream};
  if (auto it = loaded_.find(key); it != loaded_.end()) return it->second.get();
  absl::StatusOr<Bundle> b = ReadBundle(dir_, name);
  if (!b.ok())
    return absl::NotFoundError(absl::StrCat(b.status().message(), " (write it with `kiln bundle ",
                                            name, "` where kiln has its compiler)"));
  absl::StatusOr<LoadedKernel> k = LoadedKernel::Load(*b);
  if (!k.ok()) return k.status();
  return (loaded_[key] = std::make_unique<LoadedKernel>(*std::move(k))).get();
}

}  // namespace kiln::rt
