#include "tools/kiln/help.h"

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"  // FlagsHelp: --helpfull without Abseil's exit code
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/bundle/manifest.h"

namespace kiln::cli {
namespace {

struct CommandHelp {
  const char* name;      // as typed; "mlir" stands for the five stages
  const char* synopsis;  // after "kiln "
  const char* what;
  std::vector<const char*> flags;  // the flags it reads, beyond --bundles
  // Flags it reads only to refuse with its own reason: neither in its help nor in "it takes".
  std::vector<const char*> refused = {};
};

const std::vector<CommandHelp>& Commands() {
  static const std::vector<CommandHelp> commands = {
      {"list",
       "list",
       "Every kernel's name, one a line (registered here, or the bundles in --bundles).",
       {}},
      {"mlir",
       "mlir|lowered|llvm|sass NAME",
       "One stage of a kernel on stdout: kiln's MLIR, the NVVM/LLVM dialects, LLVM IR, SASS (SASS "
       "needs the CUDA toolkit's cuobjdump or nvdisasm).",
       {},
       {"lines"}},  // (PTX's alone: the stage says so)
      {"ptx",
       "ptx NAME [--lines]",
       "A kernel's PTX on stdout; --lines adds the DSL's line tables.",
       {"lines"}},
      {"bundle",
       "bundle [--dir D] [--shard I/N | --prune] [NAME...]",
       "Write bundles (manifest + PTX) into D (build/bundles under the working directory if "
       "left out); with no NAME every kernel, dropping D's bundles of kernels no longer "
       "registered in the families kiln registers (a bundle of another family is left) and "
       "rewriting the variants bundled there by name (--shard: a share "
       "of the registry, dropping none; --prune: only the dropping and the variants). --watchdog "
       "builds them in the GPU debug mode.",
       {"dir", "shard", "prune", "cache"}},
      {"compile",
       "compile [--cache DIR] [--line_info=false] [NAME...]",
       "Compile through the host API's disk cache, timing the build and the compile of each "
       "kernel.",
       {"cache", "line_info"}},
      {"check",
       "check [NAME...]",
       "The static checks, running nothing: budgets, tx bytes against the TMA boxes, arrival "
       "counts, stage reuse, ptxas resources. Exits 1 where a kernel has a finding. A program's "
       "own kernel: kiln::CheckKernel(def), kiln/check.h.",
       {}},
      {"emulate",
       "emulate NAME [--m M --n N --k K | --rows R --cols C] [--seeds S,..] [--ptx FILE]",
       "Run a kernel on the CPU PTX emulator under several thread schedules and check it against "
       "fp64.",
       {"m", "n", "k", "rows", "cols", "seeds", "ptx"}},
      {"crosscheck",
       "crosscheck [--m M --n N --k K] [NAME...]",
       "On a GPU: each GEMM kernel's outputs against the emulator's, element by element (every "
       "GEMM where none is named; the emulator's sizes unless given).",
       {"m", "n", "k"}},
      {"run",
       "run NAME [--m M --n N --k K | --rows R --cols C] [--split S]",
       "Check one kernel against its reference (cuBLAS, fp64) and time it against its peer in the "
       "same process.",
       {"m", "n", "k", "rows", "cols", "split", "iters", "flush_l2", "steady_launches"}},
      {"bench",
       "bench [--sizes S,MxNxK] [--shapes RxC] [--out F.tsv] [NAME...]",
       "The table of run for many kernels (every kernel this GPU runs when none is named).",
       {"sizes", "shapes", "split", "iters", "out", "flush_l2", "steady_launches"}},
      {"gemm",
       "gemm (--m M --n N --k K | --sizes MxNxK,..) [options]",
       "C = epilogue(A * B) at any size and storage order through the GEMM entry point: the kernel "
       "and split "
       "chosen for the shape, checked against cuBLAS and fp64, timed with cuBLAS (or --emulate on "
       "the CPU).",
       {"m", "n", "k", "sizes", "dtype", "out_dtype", "epilogue", "layout", "split", "tune_cache",
        "scaling", "kernel", "sm100", "emulate", "iters", "out", "flush_l2", "steady_launches"}},
      {"grouped-gemm",
       "grouped-gemm --experts E --tokens T|T1,T2,.. --n N --k K [--masked [--capacity C]] "
       "[--dtype e4m3] [--kernel K] [--emulate]",
       "A grouped GEMM (Mixture-of-Experts): each expert's tokens times its own N x K weights, "
       "bf16, the group sizes on the device; checked against fp64 (rows outside every group must "
       "stay unwritten) and timed (or --emulate on the CPU).",
       {"experts", "tokens", "n", "k", "masked", "capacity", "dtype", "kernel", "emulate", "iters"},
       {"epilogue", "out_dtype"}},
      {"tune",
       "tune (--sizes MxNxK,.. | --m M --n N --k K) (--tune_cache F | --dtype e4m3 --scaling S "
       "[--tune_cache F])",
       "Time every candidate kernel and split per size; record the fastest in F for kiln gemm. "
       "With --dtype e4m3: every 8-bit tile and split on the same quantized inputs, each checked "
       "against fp64 and timed, printed beside the rule's pick; with --tune_cache the fastest is "
       "recorded for that size and scaling (kiln gemm --dtype e4m3 --tune_cache F, GemmRunner).",
       {"sizes", "m", "n", "k", "dtype", "scaling", "out_dtype", "tune_cache", "iters"},
       {"epilogue"}},
      {"attention",
       "attention [--b B] [--h H] [--hkv H] [--s S] [--skv S] [--d 64|128|256] [--causal] [--dtype "
       "f16] "
       "[--scale X] [--kernel NAME] [--paged N] [--decode R] [--varlen L,L..] [--bshd] "
       "[--backward [--dq_atomics|--deterministic] [--sm100]] [--repeats 1 | --emulate]",
       "FlashAttention forward (or --backward) through the attention entry point, against fp64; "
       "timed on a GPU.",
       {"b",     "h",       "hkv",    "s",     "skv",      "d",          "causal",
        "paged", "decode",  "varlen", "bshd",  "backward", "dq_atomics", "deterministic",
        "sm100", "repeats", "dtype",  "scale", "kernel",   "emulate",    "iters"}},
      {"plot",
       "plot RESULTS.tsv",
       "Redraw RESULTS-ratio.svg and RESULTS-versions.svg from a bench/gemm TSV.",
       {}},
  };
  return commands;
}

const CommandHelp* Find(const std::string& name) {
  const bool stage = name == "lowered" || name == "llvm" || name == "sass";
  for (const CommandHelp& c : Commands())
    if (name == c.name || (stage && std::string(c.name) == "mlir")) return &c;
  return nullptr;
}

// Every command takes these beyond its own: where bundles are, and the GPU debug mode of the
// kernels it builds.
constexpr const char* kEveryCommandsFlags[] = {"bundles", "watchdog"};

std::string Usage(const CommandHelp& c) {
  std::string out = absl::StrCat("usage: kiln ", c.synopsis, "\n\n", c.what, "\n\nflags:\n");
  std::vector<const char*> flags = c.flags;
  for (const char* f : kEveryCommandsFlags) flags.push_back(f);
  for (const char* name : flags) {
    // kiln check builds every kernel from its source: it refuses --bundles, with its reason.
    if (std::string(c.name) == "check" && std::string(name) == "bundles") continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (!flag) continue;
    absl::StrAppend(&out, "  --", name, "  ", flag->Help(), " (default: ", flag->DefaultValue(),
                    ")\n");
  }
  return out;
}

}  // namespace

bool AbslParseFlag(const std::string& name) {
  return name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok";
}

absl::Status CheckFlagsOf(const std::string& command, const std::vector<std::string>& given) {
  const CommandHelp* c = Find(command);
  if (!c) return absl::OkStatus();  // (an unknown command: the dispatch says so)
  std::vector<std::string> foreign;
  auto takes_flag = [&](const std::string& flag) {
    for (const char* f : c->flags)
      if (flag == f) return true;
    for (const char* f : c->refused)
      if (flag == f) return true;
    for (const char* f : kEveryCommandsFlags)
      if (flag == f) return true;
    if (AbslParseFlag(flag)) return true;  // (every command's)
    return false;
  };
  for (const std::string& flag : given) {  // (--noX sets a boolean X false)
    if (!takes_flag(flag) && !(flag.rfind("no", 0) == 0 && takes_flag(flag.substr(2))))
      foreign.push_back("--" + flag);
  }
  if (foreign.empty()) return absl::OkStatus();
  std::string takes;
  for (const char* f : c->flags) absl::StrAppend(&takes, takes.empty() ? "" : ", ", "--", f);
  return absl::InvalidArgumentError(absl::StrCat(
      "kiln ", command, " does not take ", absl::StrJoin(foreign, ", "), " (it would be ignored); ",
      takes.empty() ? "it takes no flags of its own" : absl::StrCat("it takes ", takes), " (`kiln ",
      command, " --help`)"));
}

std::string UnknownCommand(const std::string& command) {
  std::vector<std::string> names;  // each command as typed: the synopses' first words
  for (const CommandHelp& h : Commands()) {
    const std::string synopsis = h.synopsis;
    for (absl::string_view n : absl::StrSplit(synopsis.substr(0, synopsis.find(' ')), '|'))
      names.push_back(std::string(n));
  }
  const std::string near = rt::NearestName(command, names);
  return absl::StrCat("kiln: unknown command '", command, "'",
                      near.empty() ? "" : absl::StrCat("; did you mean '", near, "'?"), "\n",
                      Overview());
}

std::string Overview() {
  std::string out = "usage: kiln COMMAND [ARGS] [FLAGS]\n\ncommands:\n";
  for (const CommandHelp& c : Commands()) absl::StrAppend(&out, "  kiln ", c.synopsis, "\n");
  absl::StrAppend(&out,
                  "\n`kiln COMMAND --help` prints a command's usage and flags; `kiln --helpfull` "
                  "every flag.\n");
  return out;
}

std::optional<int> HandleHelp(int argc, char** argv) {
  bool help = false;
  std::string command;
  for (int i = 1; i < argc;
       ++i)  // (Abseil's own --helpfull exits 1: a help asked for is a success)
    if (!std::strcmp(argv[i], "--helpfull")) {
      absl::flags_internal::SetProgramInvocationName("kiln");  // (else its header reads UNKNOWN)
      absl::flags_internal::FlagsHelp(std::cout, "",
                                      absl::flags_internal::HelpFormat::kHumanReadable,
                                      absl::ProgramUsageMessage());
      return 0;
    }
  for (int i = 1; i < argc; ++i) {
    // (Abseil's --helpshort and --helppackage list the main file's flags: kiln's live in each
    // command's file, so they printed "No flags matched" and exited 1.)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h") ||
        !std::strcmp(argv[i], "-help") || !std::strcmp(argv[i], "--helpshort") ||
        !std::strcmp(argv[i], "--helppackage"))
      help = true;
    else if (command.empty() && argv[i][0] != '-')
      command = argv[i];
  }
  // `kiln help [COMMAND]`, as git and go take it.
  if (command == "help") {
    help = true, command.clear();
    for (int i = 2; i < argc && command.empty(); ++i)
      if (argv[i][0] != '-') command = argv[i];
  }
  if (!help) return std::nullopt;
  if (command.empty() || command == "help") {  // (`kiln help help`: how help is asked)
    std::cout << Overview();
    return 0;
  }
  const CommandHelp* c = Find(command);
  if (!c) {
    std::cerr << UnknownCommand(command);
    return 2;
  }
  std::cout << Usage(*c);
  return 0;
}

}  // namespace kiln::cli
