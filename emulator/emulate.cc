// The emulated device's memory and a launch: arguments as the runtime checks them, tensor maps and
// schedule tables built as the launcher builds them, then each cluster's CTAs under one
// scheduler.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <stdexcept>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "emulator/cta.h"
#include "emulator/partly_written.h"
#include "kiln/bundle/watchdog_report.h"
#include "kiln/emulator.h"

namespace kiln::emu {

using namespace detail;  // NOLINT: the machine state

// ---- device memory

absl::Status CheckProblemSize(const std::string& call,
                              const std::vector<std::pair<std::string, double>>& arrays,
                              double multiply_adds) {
  constexpr double kMostElements = double(int64_t{1} << 26), kMostSteps = double(int64_t{1} << 33);
  for (const auto& [name, elements] : arrays) {
    if (!(elements >= 1))
      return absl::InvalidArgumentError(
          absl::StrCat(call, ": ", name, " has ", elements, " elements: every size is at least 1"));
    if (elements > kMostElements)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s has %.4g elements; the emulator takes arrays of up to 2^26 (run it on a GPU)",
          call, name, elements));
  }
  if (multiply_adds > kMostSteps)
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %.4g multiply-adds; the emulator takes up to 2^33 (run it on a GPU)",
                        call, multiply_adds));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Device::Allocate(size_t bytes) {
  // A harness checks its problem first (CheckProblemSize); this keeps any other caller's mistake
  // a message rather than the host's memory exhausted.
  constexpr size_t kMostBytes = size_t{4} << 30;
  if (bytes > kMostBytes || held_ + bytes > 2 * kMostBytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the emulator holds up to 8 GiB of device memory, 4 GiB an allocation: ", bytes,
        " bytes asked with ", held_, " held"));
  if (next_ > ~uint64_t{0} - (uint64_t{1} << 36))
    return absl::ResourceExhaustedError(
        "the emulated device ran out of addresses (2^28 "
        "allocations)");
  const uint64_t base = next_;
  blocks_[base].assign(bytes, 0);
  held_ += bytes;
  next_ += uint64_t{1} << 36;  // (2^28 allocations before the addresses reach 2^64)
  return base;
}

void Device::NoteWrite(uint64_t address, uint64_t bytes, const std::string& what, int64_t time,
                       rt::Dim3 block, int thread) {
  auto [it, added] = what_ids_.try_emplace(what, static_cast<int>(whats_.size()));
  if (added) whats_.push_back(what);
  for (uint64_t w = address & ~uint64_t{3}; w < address + bytes; w += 4)
    last_write_[w] = {it->second, launch_, time, block, thread};
}

Device::Coverage Device::WrittenByLaunch(uint64_t from, uint64_t to) const {
  Coverage c{.bytes = to - from, .written = 0, .first_unwritten = to - from};
  uint64_t expected = from & ~uint64_t{3};  // the next word, where every word before it was written
  for (auto it = last_write_.lower_bound(expected); it != last_write_.end() && it->first < to;
       ++it) {
    if (it->second.launch != launch_) continue;
    if (it->first != expected && c.first_unwritten == c.bytes)
      c.first_unwritten = std::max(expected, from) - from;
    expected = it->first + 4;
    c.written += std::min(it->first + 4, to) - std::max(it->first, from);
  }
  if (c.first_unwritten == c.bytes && expected < to)
    c.first_unwritten = std::max(expected, from) - from;
  return c;
}

uint64_t Device::AllocationEnd(uint64_t address) const {
  const uint64_t base = AllocationOf(address);
  return base ? base + blocks_.at(base).size() : 0;
}

std::optional<Device::WriteSite> Device::LastWrite(uint64_t address) const {
  auto it = last_write_.find(address & ~uint64_t{3});
  if (it == last_write_.end()) return std::nullopt;
  return WriteSite{whats_[it->second.what], it->second.time, it->second.block, it->second.thread};
}

std::string Device::WriteSite::Describe() const {
  return absl::StrCat("written by block (", block.x, ",", block.y, ",", block.z, ")",
                      thread < 0 ? "" : absl::StrCat(" thread ", thread), " at ", what);
}

uint8_t* Device::Find(uint64_t address, size_t bytes) {
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return nullptr;
  --it;
  if (address + bytes > it->first + it->second.size()) return nullptr;
  return it->second.data() + (address - it->first);
}

absl::Status Device::CopyIn(uint64_t dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();  // (an empty array's copy: nothing to find)
  if (!src && bytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("copy of %d bytes to 0x%x from a null host pointer", bytes, dst));
  uint8_t* p = Find(dst, bytes);
  if (!p)
    return absl::OutOfRangeError(
        absl::StrFormat("copy of %d bytes to 0x%x: not in one allocation", bytes, dst));
  std::memcpy(p, src, bytes);
  return absl::OkStatus();
}

absl::Status Device::CopyOut(void* dst, uint64_t src, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();  // (an empty array's copy: nothing to find)
  if (!dst && bytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("copy of %d bytes from 0x%x to a null host pointer", bytes, src));
  uint8_t* p = const_cast<Device*>(this)->Find(src, bytes);
  if (!p)
    return absl::OutOfRangeError(
        absl::StrFormat("copy of %d bytes from 0x%x: not in one allocation", bytes, src));
  std::memcpy(dst, p, bytes);
  return absl::OkStatus();
}

absl::Status Device::Fill(uint64_t dst, uint8_t byte, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();  // (an empty array's copy: nothing to find)
  uint8_t* p = Find(dst, bytes);
  if (!p)
    return absl::OutOfRangeError(
        absl::StrFormat("fill of %d bytes at 0x%x: not in one allocation", bytes, dst));
  std::memset(p, byte, bytes);
  return absl::OkStatus();
}

uint64_t Device::AllocationOf(uint64_t address) const {
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return 0;
  --it;
  return address < it->first + it->second.size() ? it->first : 0;
}

std::string Device::Near(uint64_t address) const {
  if (address < (uint64_t{1} << 24))  // (allocations start at 4 GiB)
    return ": near address 0, a null pointer (an argument of 0?) plus an offset";
  auto called = [&](uint64_t base) {
    auto name = names_.find(base);
    return name == names_.end() ? std::string("the allocation")
                                : absl::StrCat("'", name->second, "'");
  };
  auto next = blocks_.upper_bound(address);
  if (next != blocks_.begin() && std::prev(next)->first + std::prev(next)->second.size() > address)
    return "";  // (inside one)
  // Below an allocation and nearer its start than the end of the one before: before it (an
  // offset gone below 0).
  const uint64_t before = next == blocks_.end() ? 0 : next->first - address;
  const bool after_one = next != blocks_.begin();
  const uint64_t past =
      after_one ? address - (std::prev(next)->first + std::prev(next)->second.size()) : 0;
  if (before && (!after_one || before < past))
    return absl::StrFormat(": %d bytes before the start of %s at 0x%x (%d bytes)", before,
                           called(next->first), next->first, next->second.size());
  if (!after_one) return "";
  const uint64_t base = std::prev(next)->first, size = std::prev(next)->second.size();
  return absl::StrFormat(
      ": %d bytes past the end of %s at 0x%x (%d bytes)%s", past, called(base), base, size,
      past >= (uint64_t{1} << 31)
          ? ", the array nearest below it, not necessarily the one its address was computed "
            "from; that far past every array, an i32 index or offset that went below 0 reads as "
            "about 4 Gi (kiln's i32 is unsigned: compute a difference that can be negative in "
            "s32 or i64)"
          : "");
}

void Device::NameArguments(const std::vector<std::pair<uint64_t, std::string>>& named) {
  names_.clear();
  for (const auto& [base, name] : named)
    if (blocks_.count(base)) names_.emplace(base, name);
}

absl::StatusOr<uint64_t> Device::Upload(const void* src, size_t bytes) {
  if (!src && bytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("upload of %d bytes from a null host pointer", bytes));
  absl::StatusOr<uint64_t> at = Allocate(bytes);
  if (!at.ok()) return at.status();
  if (absl::Status s = CopyIn(*at, src, bytes); !s.ok()) return s;
  return at;
}

absl::StatusOr<uint64_t> Device::AllocatePoisoned(size_t bytes, uint8_t byte) {
  absl::StatusOr<uint64_t> at = Allocate(bytes);
  if (!at.ok()) return at.status();
  if (absl::Status s = Fill(*at, byte, bytes); !s.ok()) return s;
  return at;
}

absl::StatusOr<uint64_t> Device::Workspace(const std::string& key, size_t bytes) {
  auto& [base, size] = workspaces_[key];
  if (base && size >= bytes) return base;
  absl::StatusOr<uint64_t> fresh = Allocate(std::max<size_t>(bytes, 256));
  if (!fresh.ok()) return fresh.status();
  base = *fresh, size = std::max<size_t>(bytes, 256);
  return base;
}

uint64_t Device::ModuleGlobal(const std::string& kernel, const std::string& symbol) const {
  auto it = workspaces_.find(absl::StrCat("global:", kernel, ":", symbol));
  return it == workspaces_.end() ? 0 : it->second.first;
}

namespace {
// Instructions between two interrupt checks: a few hundredths of a second of emulation.
constexpr int64_t kInterruptCheckEvery = int64_t{1} << 22;
// The most clusters a launch runs: each runs one after another, so a grid past this would take
// hours at the least.
constexpr uint64_t kMaxClusters = uint64_t{1} << 24;

// The debug mode's record (kiln/bundle/watchdog_report.h): where a kernel has one, a cleared
// buffer that its record global points at, as the runtime's mapped host memory; 0 where it has
// none. The module's globals must be in place (LaunchChecked zeroes them first).
absl::StatusOr<uint64_t> ArmWatchdogRecord(Device& device, const rt::Manifest& m) {
  const uint64_t global = device.ModuleGlobal(m.name, "kiln_watchdog_record");
  if (!global) return uint64_t{0};
  absl::StatusOr<uint64_t> record =
      device.Workspace(absl::StrCat("watchdog:", m.name), sizeof(rt::WatchdogFields));
  if (!record.ok()) return record.status();
  if (absl::Status s = device.Fill(*record, 0, sizeof(rt::WatchdogFields)); !s.ok()) return s;
  if (absl::Status s = device.CopyIn(global, &*record, sizeof(uint64_t)); !s.ok()) return s;
  return record;
}

// A launch stopped by the debug mode says what its record says (the index past its tile, or the
// wait), as the runtime does, where the trap alone names only the check's line.
absl::Status WithWatchdogReport(const Device& device, const rt::Manifest& m, uint64_t record,
                                absl::Status stopped) {
  rt::WatchdogFields f{};
  if (!record || !device.CopyOut(&f, record, sizeof(f)).ok()) return stopped;
  std::optional<absl::Status> report = rt::WatchdogReport(m.name, m.watch_sites, m.watchdog_ms, f);
  return report ? *report : stopped;
}

std::function<absl::Status()>& InterruptCheck() {
  static std::function<absl::Status()> check;
  return check;
}

absl::StatusOr<Stats> LaunchChecked(Device& device, const rt::Bundle& bundle, rt::Dim3 grid,
                                    const std::vector<rt::Arg>& args, const Options& options) {
  const rt::Manifest& m = bundle.manifest;
  if (absl::Status s = rt::CheckArgs(m, args); !s.ok()) return s;
  if (absl::Status s = rt::CheckGrid(m, grid); !s.ok()) return s;
  const rt::Symbols symbols = rt::SymbolsOf(m, args);
  absl::StatusOr<ptx::Module> module = ptx::Parse(bundle.ptx);
  if (!module.ok())
    return absl::Status(module.status().code(),
                        absl::StrCat(m.name, ": ", module.status().message()));
  const ptx::Entry* entry = module->Find(m.entry);
  if (!entry)
    return absl::NotFoundError(absl::StrCat(m.name, ": no entry ", m.entry, " in its PTX"));
  // The block the GPU would launch: 1 to 1024 threads, within the entry's .maxntid.
  const int64_t threads = static_cast<int64_t>(m.block.x) * m.block.y * m.block.z;
  if (m.block.x < 1 || m.block.y < 1 || m.block.z < 1 || threads > 1024 ||
      (entry->max_threads && threads > entry->max_threads))
    return absl::InvalidArgumentError(absl::StrCat(
        m.source, ": ", m.name, ": a block of ", m.block.x, "x", m.block.y, "x", m.block.z,
        " threads: 1 to 1024",
        entry->max_threads ? absl::StrCat(", and at most the entry's .maxntid ", entry->max_threads)
                           : ""));
  if (entry->params.size() != args.size())
    return absl::InvalidArgumentError(absl::StrCat(m.name, ": the PTX entry takes ",
                                                   entry->params.size(),
                                                   " parameters, the manifest ", args.size()));
  // A manifest that asks for programmatic dependent launch over a kernel that never waits for the
  // grids before it would let the runtime start it on memory they are still writing.
  const bool waits = std::any_of(entry->code.begin(), entry->code.end(), [](const ptx::Instr& in) {
    return in.op == ptx::Op::kGriddepcontrol && in.Has("wait");
  });
  if (m.waits_for_prior_grids && !waits)
    return absl::FailedPreconditionError(
        absl::StrCat(m.name,
                     ": its manifest says it waits for the grids before it "
                     "(waits_for_prior_grids), but its PTX has no "
                     "griddepcontrol.wait"));
  std::vector<std::pair<uint64_t, std::string>> named;  // (CheckArgs matched args to m.params)
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].kind() == rt::Arg::Kind::kPointer || args[i].kind() == rt::Arg::Kind::kTensorMap)
      named.emplace_back(args[i].address(), m.params[i].name);
  device.NameArguments(named);
  absl::StatusOr<std::map<std::string, rt::WorkTable>> tables = rt::BuildScheduleTables(m, symbols);
  if (!tables.ok()) return tables.status();
  std::vector<uint8_t> params(entry->param_bytes, 0);
  std::vector<EmulatedTensorMap> maps;
  maps.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ptx::Param& p = entry->params[i];
    if (args[i].kind() == rt::Arg::Kind::kScheduleTable) {  // built as the launcher builds it
      const std::vector<int32_t>& words = tables->at(m.params[i].name).words;
      absl::StatusOr<uint64_t> copy = device.Allocate(words.size() * 4);
      if (!copy.ok()) return copy.status();
      if (absl::Status s = device.CopyIn(*copy, words.data(), words.size() * 4); !s.ok()) return s;
      std::memcpy(params.data() + p.offset, &*copy, 8);
      continue;
    }
    if (args[i].kind() ==
        rt::Arg::Kind::kWorkspace) {  // kept across launches, as the launcher keeps it
      const rt::WorkspaceParam& w = m.params[i].workspace;
      absl::StatusOr<uint64_t> base = device.Workspace(absl::StrCat(m.name, "/", m.params[i].name),
                                                       static_cast<size_t>(w.Bytes(*tables)));
      if (!base.ok()) return base.status();
      std::memcpy(params.data() + p.offset, &*base, 8);
      continue;
    }
    if (args[i].kind() == rt::Arg::Kind::kTensorMap) {
      // The map the launcher would encode, checked by the same rules; the kernel sees an image
      // that names it (in the parameter, or in device memory for a map passed by pointer).
      const rt::TensorMapParam& t = m.params[i].tensor_map;
      absl::StatusOr<rt::TensorMapSpec> spec = rt::TensorOfArg(m, i, args[i], symbols);
      if (!spec.ok()) return spec.status();
      EmulatedTensorMap em{*spec, args[i].address(),
                           absl::StrCat(m.params[i].name, " over ", t.tensor)};
      uint8_t image[128] = {};
      const uint64_t index = maps.size();
      std::memcpy(image, &kTensorMapMagic, 8);
      std::memcpy(image + 8, &index, 8);
      maps.push_back(em);
      if (t.by_value) {
        if (p.bytes != 128)
          return absl::InvalidArgumentError(
              absl::StrCat(m.name, ": parameter ", p.name, " is not 128 bytes"));
        std::memcpy(params.data() + p.offset, image, 128);
      } else {
        absl::StatusOr<uint64_t> copy = device.Allocate(128);
        if (!copy.ok()) return copy.status();
        if (absl::Status s = device.CopyIn(*copy, image, 128); !s.ok()) return s;
        std::memcpy(params.data() + p.offset, &*copy, 8);
      }
      continue;
    }
    if (p.bytes > 8)
      return absl::UnimplementedError(
          absl::StrCat(m.name, ": parameter ", p.name, " of ", p.bytes, " bytes"));
    // The manifest's word for the parameter must be what the PTX entry declares: a pointer or
    // i64 8 bytes, an i32 4, an f32 a 4-byte float (a hand-edited manifest is read otherwise).
    const rt::ParamSpec::Kind kind = m.params[i].kind;
    const bool f32 = kind == rt::ParamSpec::Kind::kF32;
    const int want = kind == rt::ParamSpec::Kind::kI32 || f32 ? 4 : 8;
    if (p.bytes != want || (!p.untyped && p.floating != f32))
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": ", m.name, ": parameter ", m.params[i].name, " is ", rt::ParamKindName(kind),
          " in the manifest, but the PTX entry declares its ", p.name, " as a ", p.bytes, "-byte ",
          p.untyped    ? "bit field"
          : p.floating ? "float"
                       : "integer",
          ": the manifest and the PTX disagree (a hand-edited or stale manifest?)"));
    rt::Arg a = args[i];
    std::memcpy(params.data() + p.offset, a.data(), p.bytes);
  }
  // As the GPU refuses a launch over the target's shared memory, so does the emulator.
  absl::StatusOr<int64_t> launch_smem =
      m.LaunchSmem(symbols, rt::SmemBudgetBytes(m.target),
                   absl::StrCat("a block of ", m.target, " may have at most"));
  if (!launch_smem.ok()) return launch_smem.status();
  const int64_t smem = *launch_smem;
  // Module globals: a workspace each, zeroed before every launch as the runtime arms the debug
  // mode's record and claim word before each (a claim left from a launch that trapped would
  // make the next report wait forever).
  for (const auto& [name, bytes] : module->global_symbols) {
    absl::StatusOr<uint64_t> at =
        device.Workspace(absl::StrCat("global:", m.name, ":", name), static_cast<size_t>(bytes));
    if (!at.ok()) return at.status();
    if (uint8_t* p = device.Find(*at, static_cast<size_t>(bytes))) std::memset(p, 0, bytes);
  }
  absl::StatusOr<uint64_t> record = ArmWatchdogRecord(device, m);
  if (!record.ok()) return record.status();
  int64_t static_top = 0;
  for (const auto& [name, offset] : module->shared_symbols)
    static_top = std::max(static_top, offset);
  std::mt19937_64 rng(options.seed);
  // KILN_EMULATOR_INSTRUCTIONS, where set, raises (or lowers) the budget for callers that cannot
  // reach Options (the CLI, the Python module).
  int64_t budget = options.max_instructions;
  if (const char* env = std::getenv("KILN_EMULATOR_INSTRUCTIONS"); env && *env)
    if (!absl::SimpleAtoi(env, &budget) || budget < 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "KILN_EMULATOR_INSTRUCTIONS='", env,
          "': the emulator's instruction budget a launch, a whole number of 1 or more"));
  Stats stats;
  const rt::Dim3 cd = m.cluster;
  if (absl::Status s = m.CheckClusterTiling(grid); !s.ok()) return s;
  const rt::Dim3 clusters{grid.x / cd.x, grid.y / cd.y, grid.z / cd.z};
  // Clusters run one after another; under a seed in a shuffled order, since the hardware starts
  // and finishes them in any order (what meets in global memory must not depend on it).
  const uint64_t cluster_count = uint64_t{clusters.x} * clusters.y * clusters.z;
  if (options.only_clusters.empty() && cluster_count > kMaxClusters)
    return absl::ResourceExhaustedError(
        absl::StrCat(m.source, ": ", m.name, ": a grid of ", grid.x, "x", grid.y, "x", grid.z,
                     " is ", cluster_count, " clusters; the emulator runs at most ", kMaxClusters,
                     " in a launch (Options::only_clusters runs a few of a larger grid)"));
  std::vector<uint64_t> order;
  if (options.only_clusters.empty()) {
    order.resize(cluster_count);
    for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  } else {
    for (uint64_t index : options.only_clusters)
      if (index >= cluster_count)
        return absl::InvalidArgumentError(absl::StrCat(m.name, ": cluster ", index,
                                                       " to run is not in a grid of ",
                                                       cluster_count, " clusters"));
    order = options.only_clusters;
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
  }
  if (options.seed) std::shuffle(order.begin(), order.end(), rng);
  GlobalRaces global_races;  // what the clusters' global accesses must be ordered by
  device.BeginLaunch();
  int64_t next_interrupt_check = kInterruptCheckEvery;
  for (uint64_t index : order) {
    const unsigned kx = static_cast<unsigned>(index % clusters.x),
                   ky = static_cast<unsigned>(index / clusters.x % clusters.y),
                   kz = static_cast<unsigned>(index / clusters.x / clusters.y);
    // The cluster's CTAs run together: they wait on each other's barriers and memory.
    ClusterState cluster{{}, cd, {kx, ky, kz}, clusters};
    global_races.BeginCluster({kx * cd.x, ky * cd.y, kz * cd.z});
    std::vector<std::unique_ptr<Cta>> ctas;
    for (unsigned z = 0; z < cd.z; ++z)
      for (unsigned y = 0; y < cd.y; ++y)
        for (unsigned x = 0; x < cd.x; ++x) {
          ctas.push_back(std::make_unique<Cta>(
              device, *module, *entry, params, grid, m.block,
              rt::Dim3{kx * cd.x + x, ky * cd.y + y, kz * cd.z + z}, static_top + smem, m.name,
              options.seed ? &rng : nullptr, &budget, &maps, &global_races));
          ctas.back()->JoinCluster(&cluster, static_cast<int>(ctas.size()) - 1);
          ctas.back()->SetWaitsForPriorGrids(waits);
          cluster.ctas.push_back(ctas.back().get());
        }
    std::vector<bool> finished(ctas.size(), false);
    // Under a seed one CTA of the cluster lags (it gets a quarter of the turns), so the others
    // run ahead of it to their exit: races between a CTA's exit and a peer still using its
    // shared memory show up.
    const size_t lagging = options.seed && ctas.size() > 1 ? rng() % ctas.size() : ctas.size();
    while (true) {
      bool moved = false, all = true;
      for (size_t i = 0; i < ctas.size(); ++i) {
        const size_t c = options.seed ? (i + rng()) % ctas.size() : i;
        if (finished[c] || (c == lagging && rng() % 4 != 0)) continue;
        absl::StatusOr<Cta::Progress> p = ctas[c]->Advance(&stats.instructions);
        if (!p.ok()) return WithWatchdogReport(device, m, *record, p.status());
        if (*p == Cta::Progress::kFinished) finished[c] = true;
        moved |= *p != Cta::Progress::kIdle;
      }
      for (bool f : finished) all &= f;
      if (all) break;
      if (stats.instructions >= next_interrupt_check) {
        next_interrupt_check = stats.instructions + kInterruptCheckEvery;
        if (InterruptCheck())
          if (absl::Status s = InterruptCheck()(); !s.ok()) return s;
      }
      if (moved) continue;
      cluster.TryRelease();  // threads may have exited since the last arrival
      bool woken = false;
      for (size_t c = 0; c < ctas.size(); ++c) {
        if (finished[c]) continue;
        absl::StatusOr<Cta::Progress> p = ctas[c]->Advance(&stats.instructions);
        if (!p.ok()) return WithWatchdogReport(device, m, *record, p.status());
        woken |= *p != Cta::Progress::kIdle;
      }
      if (woken) continue;
      // Every block of the cluster still waiting: the one that holds the others up may be any.
      std::vector<std::string> stuck;
      for (size_t c = 0; c < ctas.size(); ++c)
        if (!finished[c]) stuck.push_back(std::string(ctas[c]->Deadlock().message()));
      return absl::FailedPreconditionError(absl::StrJoin(stuck, "; and "));
    }
    stats.blocks += static_cast<int64_t>(ctas.size());
  }
  if (options.only_clusters.empty())
    stats.partly_written = PartlyWrittenArgs(device, m, grid, args);
  return stats;
}
}  // namespace

void SetInterruptCheck(std::function<absl::Status()> check) { InterruptCheck() = std::move(check); }

absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle, rt::Dim3 grid,
                             const std::vector<rt::Arg>& args, const Options& options,
                             std::source_location where) {
  // An instruction with fewer operands than its opcode takes (hand-written or damaged PTX) reads
  // past its operand list: a message, not a crash.
  absl::StatusOr<Stats> stats;
  try {
    stats = LaunchChecked(device, bundle, grid, args, options);
  } catch (const std::out_of_range& e) {
    stats = absl::InvalidArgumentError(absl::StrCat(bundle.manifest.name,
                                                    ": malformed PTX (an instruction lacks an "
                                                    "operand the emulator needs: ",
                                                    e.what(), ")"));
  }
  if (!stats.ok()) return rt::LaunchedAt(stats.status(), where);
  return stats;
}

absl::StatusOr<Stats> Launch(Device& device, const rt::Bundle& bundle,
                             const std::vector<rt::Arg>& args, const Options& options,
                             std::source_location where) {
  if (absl::Status s = rt::CheckArgs(bundle.manifest, args); !s.ok())
    return rt::LaunchedAt(s, where);
  if (options.sm_count < 1)
    return rt::LaunchedAt(absl::InvalidArgumentError(
                              absl::StrCat("emu::Options::sm_count ", options.sm_count,
                                           ": the SMs a grid rule's 'sms' counts, at least 1")),
                          where);
  absl::StatusOr<rt::Dim3> grid =
      bundle.manifest.GridFor(rt::SymbolsOf(bundle.manifest, args), options.sm_count);
  if (!grid.ok())
    return rt::LaunchedAt(
        absl::Status(grid.status().code(),
                     absl::StrCat(bundle.manifest.source, ": ", bundle.manifest.name, ": ",
                                  grid.status().message())),
        where);
  return Launch(device, bundle, *grid, args, options, where);
}

}  // namespace kiln::emu
