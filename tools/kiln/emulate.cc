// `kiln emulate NAME`: a kernel on the CPU PTX emulator under several schedules.
#include <chrono>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

// Runs a kernel on the PTX emulator (kiln/emulator.h) under each schedule and checks it
// like `kiln run`: one line with the size, the schedules and the worst error.
int Emulate(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "kiln emulate: "
              << (args.empty() ? std::string("name a kernel (kiln list names them)")
                               : "one kernel at a time, not " + std::to_string(args.size()))
              << "\nusage: kiln emulate NAME [--m M --n N --k K | --rows R --cols C] "
                 "[--seeds S,...] [--ptx FILE]\n";
    return 2;
  }
  absl::StatusOr<std::vector<uint64_t>> seeds = ScheduleSeeds();
  if (!seeds.ok()) return FailUsage(seeds.status());
  absl::StatusOr<Bundle> b = GetBundle(args[0]);
  if (!b.ok()) return Fail(b.status());
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {  // with line tables, so that the emulator's messages name the DSL line
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(args[0]);
    if (!def.ok()) return Fail(def.status());
    absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def, {.line_info = true});
    if (!ptx.ok()) return Fail(ptx.status());
    b->ptx = *std::move(ptx);
  }
#endif
  if (const std::string path = absl::GetFlag(FLAGS_ptx);
      !path.empty()) {  // hand-edited PTX, same manifest
    absl::StatusOr<std::string> text = ReadTextFile(path, "--ptx");
    if (!text.ok()) return Fail(text.status());
    // The manifest's target is the PTX's: another one's instructions would run under its rules.
    std::string target;  // the first .target directive's first operand, as the parser reads it
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      line = absl::StripAsciiWhitespace(line.substr(0, line.find("//")));
      if (!absl::ConsumePrefix(&line, ".target") || line.empty() || !absl::ascii_isspace(line[0]))
        continue;
      line = absl::StripLeadingAsciiWhitespace(line);
      target = std::string(line.substr(0, line.find_first_of(", \t")));
      break;
    }
    if (target != b->manifest.target)
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--ptx ", path, ": ",
                       target.empty() ? "has no .target line" : absl::StrCat("targets ", target),
                       "; ", args[0], "'s manifest runs ", b->manifest.target)));
    b->ptx = *std::move(text);
  }
  // A bundle whose GEMM attribute does not parse (a hand-edited manifest) is said as such, not
  // as a kernel of no kind kiln emulate checks.
  if (const std::string* attr = b->manifest.Attribute("gemm"))
    if (absl::StatusOr<kiln::examples::GemmSpec> g = kiln::examples::GemmSpec::Parse(*attr);
        !g.ok())
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          args[0], ": its manifest's 'attr gemm ", *attr, "' line: ", g.status().message())));
  const bool gemm = kiln::examples::GemmOf(b->manifest).has_value();
  if (absl::Status s =
          CheckSizeFlags("kiln emulate", args[0], gemm, kiln::examples::IsRowOp(args[0]),
                         kiln::examples::IsProbe(args[0]));
      !s.ok())
    return Fail(s);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (std::optional<kiln::examples::GemmSpec> g = kiln::examples::GemmOf(b->manifest)) {
    kiln::examples::RunOptions opt = TimingFlags();
    opt.size = EmulationSize(*b, *g);
    absl::StatusOr<std::vector<kiln::examples::GemmResult>> rs =
        kiln::examples::EmulateGemmSchedules(*b, opt, *seeds);
    if (!rs.ok()) return Fail(rs.status());
    const kiln::examples::GemmResult* worst = &rs->front();
    for (const kiln::examples::GemmResult& r : *rs)
      if (!r.passed || (worst->passed && r.rel_error > worst->rel_error)) worst = &r;
    std::cout << absl::StrFormat(
        "%s %dx%dx%d on the emulator (seeds %s, %.1f s%s): error %.3e against fp64: %s\n",
        worst->name, worst->size.m, worst->size.n, worst->size.k, SeedList(*seeds), seconds(),
        worst->coverage.empty() ? "" : ", " + worst->coverage, worst->rel_error,
        worst->passed ? "ok"
                      : absl::StrCat("FAIL (seed ", worst->schedule_seed, "): ", worst->failure));
    return worst->passed ? 0 : 1;
  }
  if (kiln::examples::IsProbe(args[0])) {
    int failures = 0;
    for (uint64_t seed : *seeds) {
      absl::StatusOr<kiln::examples::ProbeResult> r = kiln::examples::EmulateProbe(*b, {}, seed);
      if (!r.ok())
        return Fail(absl::Status(
            r.status().code(), absl::StrCat(r.status().message(), " (schedule seed ", seed, ")")));
      std::cout << kiln::examples::ProbeReport(*r)
                << absl::StrFormat("  (emulator, seed %d)\n", seed);
      failures += r->passed() ? 0 : 1;
    }
    return failures ? 1 : 0;
  }
  if (!kiln::examples::IsRowOp(args[0])) {
    // Where this kernel does run on the emulator.
    const std::string& name = args[0];
    const std::string where =
        absl::StartsWith(name, "attention/")
            ? "the attention kernels run through the entry point: kiln attention --emulate "
              "(--kernel NAME for a variant, --backward [--sm100] for the backward's)"
        : absl::StartsWith(name, "gemm/grouped") ? "kiln grouped-gemm --emulate --kernel NAME"
        : absl::StartsWith(name, "gemm/") && absl::StrContains(name, "fp8")
            ? "its 8-bit or block-scaled forms run through kiln gemm --dtype e4m3 --emulate "
              "[--scaling S] [--sm100]"
        : absl::StartsWith(name, "gemm/")
            ? "it is a piece of the GEMM entry point, which runs it where a problem needs it "
              "(kiln gemm --emulate)"
            : "any other kernel runs under kiln::emu::Launch or kiln.load(...) with NumPy "
              "arrays (docs/EMULATOR.md)";
    return Fail(absl::UnimplementedError(
        absl::StrCat("kiln emulate checks GEMMs, the row ops and the op probes; ", name,
                     " is none of them: ", where)));
  }
  kiln::examples::RowOpOptions opt;
  opt.rows = absl::GetFlag(FLAGS_rows) ? absl::GetFlag(FLAGS_rows) : 37;
  opt.cols = absl::GetFlag(FLAGS_cols) ? absl::GetFlag(FLAGS_cols) : 3001;
  opt.time = false;
  // (Checked once, before any schedule: a size the emulator refuses is no schedule's finding.)
  if (absl::Status fits = kiln::examples::CheckEmulatedRowOpSize(args[0], opt.rows, opt.cols);
      !fits.ok())
    return Fail(fits);
  // The emulator steps every element's instructions on the CPU: say so before a long run.
  const double elements = double(opt.rows) * double(opt.cols) * double(seeds->size());
  if (elements > double(1 << 24))
    std::cerr << absl::StrFormat(
        "kiln emulate: %d rows of %d columns under %d schedule%s: the emulator takes a minute or "
        "more at this size (fewer --rows, or --seeds 1, take less)\n",
        opt.rows, opt.cols, seeds->size(), seeds->size() == 1 ? "" : "s");
  std::optional<kiln::examples::RowOpResult> worst;
  uint64_t worst_seed = 0;
  for (uint64_t seed : *seeds) {
    absl::StatusOr<kiln::examples::RowOpResult> r = kiln::examples::EmulateRowOp(*b, opt, seed);
    if (!r.ok())
      return Fail(absl::Status(r.status().code(),
                               absl::StrCat(r.status().message(), " (schedule seed ", seed, ")")));
    if (!worst || !r->passed || (worst->passed && r->rel_error > worst->rel_error))
      worst = *r, worst_seed = seed;
    if (!worst->passed) break;
  }
  std::cout << absl::StrFormat(
      "%s %dx%d on the emulator (seeds %s, %.1f s): error %.3e over %d rows: %s\n", worst->name,
      worst->rows, worst->cols, SeedList(*seeds), seconds(), worst->rel_error, worst->rows_checked,
      worst->passed ? "ok" : absl::StrCat("FAIL (seed ", worst_seed, "): ", worst->failure));
  return worst->passed ? 0 : 1;
}

}  // namespace kiln::cli
