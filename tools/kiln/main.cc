// The kiln command line: `kiln COMMAND ...`, one file per command in this folder; this one
// dispatches, and answers `kiln --help` and `kiln COMMAND --help` (usage, then the command's flags
// with their defaults; exit 0).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"
#include "tools/kiln/help.h"
#ifdef KILN_HAVE_COMPILER
#include "kiln/kernel.h"
#endif

namespace {

int RunCommand(int argc, char** argv) {
  absl::SetProgramUsageMessage("kiln COMMAND [ARGS] [FLAGS]; `kiln --help` lists the commands");
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
    return std::string("kiln ") + KILN_VERSION +
#ifdef KILN_HAVE_COMPILER
           " (compiler and runtime)\n";
#else
           " (runtime only: kernels from bundles)\n";
#endif
  };
  absl::SetFlagsUsageConfig(usage);
  absl::StatusOr<std::vector<std::string>> expanded = kiln::cli::ExpandFlagfiles(argc, argv);
  if (!expanded.ok()) return kiln::cli::FailUsage(expanded.status());
  std::vector<char*> expanded_argv;
  for (std::string& arg : *expanded) expanded_argv.push_back(arg.data());
  argc = static_cast<int>(expanded_argv.size());
  argv = expanded_argv.data();
  if (std::optional<int> code = kiln::cli::HandleHelp(argc, argv)) return *code;
  if (absl::Status s = kiln::cli::RecordGivenFlags(argc, argv); !s.ok())
    return kiln::cli::FailUsage(s);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (args.empty()) {
    std::cerr << kiln::cli::Overview();
    return 2;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (absl::Status s = kiln::cli::CheckFlagsOf(command, kiln::cli::GivenFlagNames()); !s.ok())
    return kiln::cli::FailUsage(s);
  if (absl::GetFlag(FLAGS_split) < -1)  // (every command that takes it: gemm, run, bench)
    return kiln::cli::Fail(absl::InvalidArgumentError(
        absl::StrCat("--split ", absl::GetFlag(FLAGS_split),
                     ": 1 whole tiles, S >= 2 split-K, 0 stream-K (left out: the plan's)")));
  // The emulator checks and times nothing: a timing flag with --emulate would be ignored.
  if (absl::GetFlag(FLAGS_emulate))
    for (const char* timing : {"iters", "flush_l2", "noflush_l2", "steady_launches", "repeats"})
      if (kiln::cli::FlagGiven(timing))
        return kiln::cli::Fail(absl::InvalidArgumentError(
            absl::StrCat("--", timing,
                         " times GPU runs; --emulate checks on the CPU and times "
                         "nothing: give one")));
  if (absl::GetFlag(FLAGS_watchdog) < 0)
    return kiln::cli::Fail(absl::InvalidArgumentError(
        absl::StrCat("--watchdog ", absl::GetFlag(FLAGS_watchdog),
                     ": milliseconds a wait may take (0: no watchdog), not below 0")));
#ifdef KILN_HAVE_COMPILER
  kiln::SetDefaultWatchdog(absl::GetFlag(FLAGS_watchdog));
#else
  if (absl::GetFlag(FLAGS_watchdog))
    return kiln::cli::Fail(absl::FailedPreconditionError(
        "--watchdog builds kernels: this kiln has no compiler (bundle them with it)"));
#endif
  if (command == "list") {
    if (!args.empty()) {
      std::cerr << "usage: kiln list   (every kernel's name; it takes no arguments)\n";
      return 2;
    }
    absl::StatusOr<std::vector<std::string>> names = kiln::cli::KernelNames();
    if (!names.ok()) return kiln::cli::Fail(names.status());
    for (const std::string& n : *names) std::cout << n << "\n";
    if (names->empty())
      std::cerr << "kiln list: no kernels" << (kiln::cli::BundleDir().empty() ? "" : " in ")
                << kiln::cli::BundleDir() << "\n";
    return 0;
  }
  if (command == "mlir" || command == "lowered" || command == "llvm" || command == "ptx" ||
      command == "sass")
    return kiln::cli::Stage(command, args);
  if (command == "bundle") return kiln::cli::WriteBundles(args);
  if (command == "emulate") return kiln::cli::Emulate(args);
  if (command == "crosscheck") return kiln::cli::Crosscheck(args);
  if (command == "check") {
#ifdef KILN_HAVE_COMPILER
    return kiln::cli::CheckKernels(args);
#else
    return kiln::cli::Fail(
        absl::FailedPreconditionError("kiln check builds kernels: this kiln has no compiler"));
#endif
  }
  if (command == "compile") {
#ifdef KILN_HAVE_COMPILER
    return kiln::cli::CompileThroughCache(args);
#else
    return kiln::cli::Fail(
        absl::FailedPreconditionError("this kiln was built without the compiler"));
#endif
  }
  if (command == "gemm") return kiln::cli::Gemm(args);
  if (command == "tune") return kiln::cli::Tune(args);
  if ((command == "grouped-gemm" || command == "attention") && !args.empty()) {
    std::cerr << "kiln " << command << ": it takes flags alone, not '" << args[0] << "' (kiln help "
              << command << ")\n";
    return 2;
  }
  if (command == "grouped-gemm") return kiln::cli::GroupedGemm();
  if (command == "attention") return kiln::cli::Attention();
  if (command == "plot") {  // the charts of a results TSV written before (kiln bench/gemm --out)
    if (args.size() != 1) {
      std::cerr
          << "usage: kiln plot RESULTS.tsv   (writes RESULTS-ratio.svg and RESULTS-versions.svg)\n";
      return 2;
    }
    return kiln::cli::WritePlots(args[0], std::filesystem::path(args[0]).stem().string());
  }
  if (command == "run") {
    if (args.size() != 1) {
      std::cerr << "usage: kiln run NAME [--m M --n N --k K | --rows R --cols C] [--split S]\n";
      return 2;
    }
    const bool row_op = kiln::examples::IsRowOp(args[0]), probe = kiln::examples::IsProbe(args[0]);
    if (absl::Status s =
            kiln::cli::CheckSizeFlags("kiln run", args[0], !row_op && !probe, row_op, probe);
        !s.ok())
      return kiln::cli::Fail(s);
    auto size = [](int64_t v) { return v ? v : int64_t{4096}; };
    return kiln::cli::Bench(args,
                            {{size(absl::GetFlag(FLAGS_m)), size(absl::GetFlag(FLAGS_n)),
                              size(absl::GetFlag(FLAGS_k))}},
                            {{absl::GetFlag(FLAGS_rows) ? absl::GetFlag(FLAGS_rows) : 32768,
                              absl::GetFlag(FLAGS_cols) ? absl::GetFlag(FLAGS_cols) : 4096}});
  }
  if (command == "bench") {
    absl::StatusOr<std::vector<kiln::rt::GemmSize>> sizes =
        kiln::cli::ParseSizes(absl::GetFlag(FLAGS_sizes));
    if (!sizes.ok()) return kiln::cli::Fail(sizes.status());
    absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> shapes =
        kiln::cli::ParseShapes(absl::GetFlag(FLAGS_shapes));
    if (!shapes.ok()) return kiln::cli::Fail(shapes.status());
    // Without a GPU, one message rather than one a kernel and size.
    if (absl::Status st = kiln::cli::GpuHere("bench").status(); !st.ok())
      return kiln::cli::Fail(st);
    return kiln::cli::Bench(args, *sizes, *shapes);
  }
  std::cerr << kiln::cli::UnknownCommand(command);
  return 2;
}

// The kernels a command built without the debug mode that --watchdog asked for, once.
void TellKernelsWithoutTheWatchdog() {
#ifdef KILN_HAVE_COMPILER
  std::vector<std::string> names = kiln::KernelsWithoutTheDefaultWatchdog();
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (names.empty()) return;
  const size_t shown = std::min<size_t>(names.size(), 3);
  std::cerr << "kiln: --watchdog left out " << names.size() << " kernel"
            << (names.size() == 1 ? "" : "s") << " built for sm_80 ("
            << absl::StrJoin(names.begin(), names.begin() + shown, ", ")
            << (names.size() > shown ? ", ..." : "")
            << "): the debug mode bounds mbarrier waits, which need sm_90 or later\n";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const int code = RunCommand(argc, argv);
  TellKernelsWithoutTheWatchdog();
  // A command whose output could not be written (a full disk, a closed pipe) has failed, even
  // where its own work succeeded.
  std::cout.flush();
  if ((!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) && code == 0) {
    std::cerr << "kiln: cannot write to standard output\n";
    return 1;
  }
  return code;
}
