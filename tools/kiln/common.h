// What the kiln command's subcommands share: finding kernels (built here, or read from bundles in
// a runtime-only build), parsing sizes and shapes, the GEMM entry point's runs, and each
// command's entry (one file per command beside this one; main.cc dispatches).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "examples/gemm_spec.h"
#include "examples/harness.h"
#include "examples/plot.h"
#include "examples/probe_check.h"
#include "examples/row_ops.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/launch.h"
#include "ops/attention/attention_check.h"
#include "ops/attention/attention_grad_check.h"
#ifdef KILN_HAVE_COMPILER
#include "examples/registry.h"
#include "kiln/compile.h"
#include "kiln/lowering.h"
#endif

namespace kiln::cli {

using kiln::rt::Bundle;

// ---- kernels and their bundles
int Fail(const absl::Status& s);                             // prints "kiln: message", returns 1
int Fail(const absl::Status& s, absl::string_view command);  // "COMMAND: message" where unnamed
int FailUsage(const absl::Status& s);  // the same for a usage error: returns 2
// The command line with each --flagfile's flags in its place, as absl reads them (one flag a
// line, '#' comments), files within files too: so that a flag in a file meets the command line's
// checks (given twice, taken by the command). A file that names itself, directly or through
// others, is refused. (Flags from the environment, --fromenv, are absl's alone.)
absl::StatusOr<std::vector<std::string>> ExpandFlagfiles(int argc, char** argv);
// The flags the command line names (--rows 0 is given; absl cannot say so): main records them.
// Refuses a flag given twice, and an unknown one (with the nearest name).
absl::Status RecordGivenFlags(int argc, char** argv);
bool FlagGiven(const std::string& name);
std::vector<std::string> GivenFlagNames();  // every flag given, by name
// A file's text (`what` names it in messages: "--ptx"): a regular file of a sane size, not a
// directory or a device.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, const std::string& what);
// The size flags (--m --n --k, --rows --cols) given to `command` for kernel `name`: a GEMM's or
// a row op's as the kernel is, and at least 1 (0 is not "the default").
absl::Status CheckSizeFlags(const std::string& command, const std::string& name, bool gemm,
                            bool row_op, bool probe);
// --bundles, else $KILN_BUNDLE_DIR, else the bundles beside a runtime-only kiln.
std::string BundleDir();
// Where BundleDir() is no directory: what to give instead, for a message ("" where it is one).
std::string BundleDirHint();
bool Compiling();  // kernels are built here (not read from bundles)
// Why this kiln compiles nothing (Compiling() is false), for a message: a runtime-only build, or
// --bundles given.
std::string WhyNotCompiling();
// A family member (base.options: gemm/bf16_sm90.f16-f32.gelu): bundled for kiln gemm, checked by
// it and by the emulator tests, not part of kiln bench's or crosscheck's whole-registry runs.
bool FamilyMember(const std::string& name);
absl::StatusOr<std::vector<std::string>> KernelNames();
// "; did you mean 'NAME'? (see `kiln list`)" for the kernel name nearest a mistyped one, or
// " (see `kiln list`)" where none is near.
std::string DidYouMean(const std::string& name);
#ifdef KILN_HAVE_COMPILER
absl::StatusOr<kiln::KernelDef> BuildKernel(const std::string& name);
#endif
// `findings`: where given, kiln check's static findings (kernels built here only). `cache_dir`:
// where given, a kernel built here is lowered through the host API's disk cache there (no line
// tables, as every bundle), so that it lowers only when it changed.
absl::StatusOr<Bundle> GetBundle(const std::string& name,
                                 std::vector<std::string>* findings = nullptr,
                                 const std::string& cache_dir = "");
// GetBundle by name, each bundle read once and kept by the returned function (null: not found),
// for the harnesses that run an entry point on the emulator.
std::function<const Bundle*(const std::string&)> BundlesOnce();
std::optional<Bundle> ReferenceFor(const kiln::rt::Manifest& m);  // the fallback reference GEMM
const Bundle* StreamRead();  // ops/stream_read, or null where this kiln has none
// The kernels a command names, or every kernel when it names none.
absl::StatusOr<std::vector<std::string>> NamesOrAll(const std::vector<std::string>& args);

// ---- flags read as values
kiln::examples::RunOptions TimingFlags();  // --flush_l2, --steady_launches
absl::StatusOr<std::vector<kiln::rt::GemmSize>> ParseSizes(
    const std::string& text);  // S or MxNxK, ...
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseShapes(
    const std::string& text);                           // RxC, ...
absl::StatusOr<std::vector<uint64_t>> ScheduleSeeds();  // --seeds
std::string SeedList(const std::vector<uint64_t>& seeds);
// The GEMM size of `kiln emulate` and `kiln crosscheck`: the kernel's protocol size
// (kiln::examples::ProtocolSize) unless --m/--n/--k say otherwise.
kiln::rt::GemmSize EmulationSize(const Bundle& b, const kiln::examples::GemmSpec& g);
void PrintDevice();  // "# <GPU> (sm_XX, N SMs), driver V, date", where a GPU is present
// The GPU's compute capability, its line printed (PrintDevice); without one, an error that says
// `kiln COMMAND --emulate` runs the problem on the CPU.
absl::StatusOr<int> NeedGpu(const std::string& command);
// The same without the line (for a command that prints it itself: kiln bench).
absl::StatusOr<int> GpuHere(const std::string& command);
// Where no GPU is here, what runs `kiln COMMAND`'s problem on the CPU instead: " (...)".
std::string OnTheCpu(const std::string& command);
// Beside a results TSV (kiln bench/gemm --out F.tsv): F-ratio.svg and F-versions.svg; `as_one`
// draws every row as one kernel of that name.
int WritePlots(const std::string& tsv_path, const std::string& title,
               const std::string& as_one = "");

// ---- the GEMM entry point (gemm_entry.cc)
// kiln gemm's and kiln tune's problem sizes: --m --n --k, or each of --sizes; empty after a
// usage message.
std::vector<kiln::rt::GemmSize> GemmSizes(const std::vector<std::string>& args,
                                          const char* command);
absl::StatusOr<kiln::rt::GemmOptions> GemmOptionsFromFlags();
// The GEMM as kiln::rt::GemmRunner runs it on the harness's buffers, in place of the bundle's
// kernel alone: `suffix` for the result's name; `epilogue`, the caller's terms, which the
// reference applies (the kernel's differ where the runner swapped M and N: bias_row is bias_col).
struct ThroughRunner {
  std::function<absl::Status(const kiln::examples::GemmBuffers&)> launch;
  std::string suffix, epilogue;
  std::string name;  // the result's name where not the bundle's (the kernel the runner runs)
};
// One GEMM kernel of the entry point at one size, checked against cuBLAS and fp64 spot checks
// and timed with cuBLAS (or, `emulate`, checked on the emulator); `via`, where given, runs it.
absl::StatusOr<kiln::examples::GemmResult> RunEntryKernel(const std::string& name,
                                                          const kiln::rt::GemmSize& size, int split,
                                                          bool emulate,
                                                          const ThroughRunner* via = nullptr);
absl::StatusOr<kiln::rt::GemmTuneCache> TuneCacheFromFlag();  // --tune_cache, or an empty one

// ---- the commands, one file each; each returns the process's exit code
int Stage(const std::string& stage_name, const std::vector<std::string>& args);  // stage.cc
int WriteBundles(const std::vector<std::string>& args);                          // bundle.cc
#ifdef KILN_HAVE_COMPILER
int CompileThroughCache(const std::vector<std::string>& args);  // compile.cc
int CheckKernels(const std::vector<std::string>& args);         // check.cc
#endif
int Emulate(const std::vector<std::string>& args);  // emulate.cc
int Crosscheck(std::vector<std::string> names);     // crosscheck.cc
int Bench(std::vector<std::string> names, const std::vector<kiln::rt::GemmSize>& sizes,
          const std::vector<std::pair<int64_t, int64_t>>& shapes);  // bench.cc (run and bench)
int Gemm(const std::vector<std::string>& args);                     // gemm.cc
// kiln gemm --dtype e4m3: the 8-bit entry point checked and timed at each size (gemm_fp8.cc).
int Fp8Gemm(const std::vector<kiln::rt::GemmSize>& sizes);
// `kiln tune --dtype e4m3`: every 8-bit tile and split per size, checked and timed (gemm_fp8.cc).
int Fp8Tune(const std::vector<kiln::rt::GemmSize>& sizes);
int GroupedGemm();                               // grouped_gemm.cc
int Tune(const std::vector<std::string>& args);  // tune.cc
int Attention();                                 // attention.cc

}  // namespace kiln::cli
