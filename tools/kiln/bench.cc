// `kiln run NAME` and `kiln bench [NAME...]`: kernels checked and timed against their peers.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {
namespace {

// After a run's error that is the missing GPU's (the driver's own error), where one can check the
// kernel instead; an error of the problem (a size the kernel cannot tile) gets none.
std::string NoGpuHint(const absl::Status& error) {
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (d.ok() || !absl::StrContains(error.message(), d.status().message())) return "";
  return OnTheCpu("run");
}

// Runs the row ops x shapes; prints their table. Returns the number of failed runs.
int BenchRowOps(const std::vector<Bundle>& ops,
                const std::vector<std::pair<int64_t, int64_t>>& shapes, std::ofstream& tsv) {
  if (ops.empty()) return 0;
  std::cout << "# row ops: GB/s = bytes read and written / median time; copy = cuMemcpyDtoD of the "
               "input, same run\n"
            << kiln::examples::RowOpTableHeader() << std::endl;
  int failures = 0;
  for (const Bundle& b : ops)
    for (auto [rows, cols] : shapes) {
      kiln::examples::RowOpOptions opt;
      opt.rows = rows, opt.cols = cols, opt.iterations = absl::GetFlag(FLAGS_iters);
      absl::StatusOr<kiln::examples::RowOpResult> r = kiln::examples::RunRowOp(b, opt);
      if (!r.ok()) {
        std::cout << b.manifest.name << " " << rows << "x" << cols << ": " << r.status().message()
                  << NoGpuHint(r.status()) << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::RowOpTableRow(*r) << std::endl;
      if (tsv.is_open()) tsv << kiln::examples::RowOpTsvRow(*r) << "\n";
      failures += r->passed ? 0 : 1;
    }
  return failures;
}

// A planted bug for the GPU debug mode: one block, no arguments; it passes when the debug mode
// stopped it and said where (a wait past its deadline, an index past its tile). Returns 1
// otherwise.
int RunPlanted(const Bundle& b) {
  absl::StatusOr<kiln::rt::LoadedKernel> k = kiln::rt::LoadedKernel::Load(b);
  if (!k.ok()) return Fail(k.status());
  absl::Status s = k->Launch({1, 1, 1}, {});
  if (s.ok()) s = kiln::rt::Synchronize();
  std::cout << b.manifest.name << " (" << *b.manifest.Attribute("planted") << "): " << s
            << std::endl;
  return s.code() == absl::StatusCode::kDeadlineExceeded ||
                 s.code() == absl::StatusCode::kOutOfRange
             ? 0
             : 1;
}

// Runs the op probes on the GPU (checked, not timed). Returns the number that failed.
int CheckProbes(const std::vector<Bundle>& probes, bool everything) {
  if (probes.empty()) return 0;
  std::cout << "# op probes: every result against a host reference (examples/probe_check.h)"
            << std::endl;
  int failures = 0;
  for (const Bundle& b : probes) {
    if (absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get(); everything && d.ok()) {
      if (absl::Status here = kiln::rt::CheckTarget(b.manifest, **d); !here.ok()) {
        std::cout << "# " << here.message() << " (compiled only)" << std::endl;
        continue;
      }
    }
    absl::StatusOr<kiln::examples::ProbeResult> r = kiln::examples::RunProbe(b, {});
    if (!r.ok()) {
      std::cout << b.manifest.name << ": " << r.status().message() << NoGpuHint(r.status())
                << std::endl;
      ++failures;
      continue;
    }
    std::cout << kiln::examples::ProbeReport(*r) << std::endl;
    failures += r->passed() ? 0 : 1;
  }
  return failures;
}

}  // namespace

// Runs kernels x sizes; prints the table. Returns non-zero if any run failed or errored.
int Bench(std::vector<std::string> names, const std::vector<kiln::rt::GemmSize>& sizes,
          const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  const bool everything = names.empty();  // then kernels for other chips are listed, not failed
  if (names.empty()) {
    absl::StatusOr<std::vector<std::string>> all = KernelNames();
    if (!all.ok()) return Fail(all.status());
    for (const std::string& n : *all)
      if (n.rfind("reference/", 0) != 0 && n.rfind("planted/", 0) != 0 && !FamilyMember(n))
        names.push_back(n);
  }
  PrintDevice();
  bool gemm_header = false;  // printed before the first GEMM row
  std::ofstream tsv;
  if (!absl::GetFlag(FLAGS_out).empty()) tsv.open(absl::GetFlag(FLAGS_out));
  int failures = 0;
  std::vector<Bundle> row_ops, probes;
  for (const std::string& name : names) {
    absl::StatusOr<Bundle> b = GetBundle(name);
    if (!b.ok()) {
      std::cout << name << ": " << b.status().message() << std::endl;
      ++failures;
      continue;
    }
    if (kiln::examples::IsRowOp(name)) {
      row_ops.push_back(*b);
      continue;
    }
    if (kiln::examples::IsProbe(name)) {
      probes.push_back(*b);
      continue;
    }
    if (b->manifest.Attribute("planted")) {
      failures += RunPlanted(*b);
      continue;
    }
    if (everything && !kiln::examples::GemmOf(b->manifest)) {
      std::cout << "# " << name
                << " is not a GEMM (launched through kiln::rt::LoadedKernel, not timed here)"
                << std::endl;
      continue;
    }
    if (!kiln::examples::GemmOf(b->manifest)) {  // named: say where it runs instead
      const bool forward =
          name.rfind("attention/hopper.", 0) == 0 || name.rfind("attention/blackwell.", 0) == 0;
      std::cout << name << " (" << b->manifest.source
                << ") is not a GEMM, a row op or a probe, which kiln run and bench time; "
                << (forward ? absl::StrCat("run it with kiln attention --kernel ", name)
                    : name.rfind("attention/", 0) == 0
                        ? std::string("kiln attention runs it where its plan picks it "
                                      "(--backward, --decode, --paged, --varlen)")
                        : std::string("launch it from Python (kiln.load) or C++ "
                                      "(kiln::rt::LoadedKernel)"))
                << std::endl;
      ++failures;
      continue;
    }
    if (absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get(); everything && d.ok()) {
      if (absl::Status here = kiln::rt::CheckTarget(b->manifest, **d); !here.ok()) {
        std::cout << "# " << here.message() << " (compiled only)" << std::endl;
        continue;
      }
    }
    if (!std::exchange(gemm_header, true)) std::cout << kiln::examples::TableHeader() << std::endl;
    std::optional<Bundle> ref = ReferenceFor(b->manifest);
    const int split = absl::GetFlag(FLAGS_split);
    const bool walks_work =
        std::any_of(b->manifest.params.begin(), b->manifest.params.end(), [](const auto& p) {
          return p.kind == kiln::rt::ParamSpec::Kind::kScheduleTable && p.schedule.work();
        });
    if (split >= 0 && split != 1 &&
        !walks_work) {  // named, an error; among all the kernels, passed over
      std::cout << (everything ? "# " : "") << name << ": --split " << split
                << ": this kernel walks no work table, so its tiles are whole (the entry point's "
                   "gemm/bf16_sm90* "
                   "kernels split)"
                << std::endl;
      failures += everything ? 0 : 1;
      continue;
    }
    for (const kiln::rt::GemmSize& size : sizes) {
      kiln::examples::RunOptions opt = TimingFlags();
      opt.size = size;
      opt.iterations = absl::GetFlag(FLAGS_iters);
      opt.stream_read = StreamRead();
      if (split >= 0) opt.split = split;
      absl::StatusOr<kiln::examples::GemmResult> r =
          kiln::examples::RunGemm(*b, ref ? &*ref : nullptr, opt);
      if (r.ok() && split >= 0 && split != 1 && walks_work)
        r->name += split == 0 ? "+streamK" : absl::StrCat("+splitK", split);
      if (!r.ok()) {
        std::cout << name << " " << size.m << "x" << size.n << "x" << size.k << ": "
                  << r.status().message() << NoGpuHint(r.status()) << std::endl;
        ++failures;
        continue;
      }
      std::cout << kiln::examples::TableRow(*r) << std::endl;
      if (!r->note.empty()) std::cout << "#   note: " << r->note << std::endl;
      if (tsv.is_open()) tsv << kiln::examples::TsvRow(*r) << "\n";
      failures += r->passed ? 0 : 1;
    }
  }
  if (tsv.is_open()) {
    tsv.close();
    if (gemm_header) failures += WritePlots(absl::GetFlag(FLAGS_out), "kiln bench");
    tsv.open(absl::GetFlag(FLAGS_out), std::ios::app);
  }
  failures += BenchRowOps(row_ops, shapes, tsv);
  failures += CheckProbes(probes, everything);
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
