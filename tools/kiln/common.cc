// Helpers every command shares: finding kernels (built here or read from bundles), parsing sizes
// and shapes, the device line, the charts.
#include "tools/kiln/common.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ops/attention/harness_memory.h"
#include "tools/kiln/flags.h"
#include "tools/kiln/help.h"

namespace kiln::cli {

// The GEMM harness's options the timing flags set (--flush_l2, --steady_launches).
kiln::examples::RunOptions TimingFlags() {
  kiln::examples::RunOptions opt;
  opt.flush_l2 = absl::GetFlag(FLAGS_flush_l2);
  opt.steady_launches = absl::GetFlag(FLAGS_steady_launches);
  return opt;
}

using kiln::rt::Bundle;

namespace {
std::set<std::string>& GivenFlags() {
  static std::set<std::string> given;
  return given;
}
}  // namespace

namespace {
// The files a --flagfile argument names ("--flagfile=a,b", or on the command line also
// "-flagfile a"), and how many of the arguments from `i` it takes; 0 where args[i] is no
// --flagfile.
int FlagfileArgument(const std::vector<std::string>& args, size_t i, bool value_apart,
                     std::vector<std::string>* files) {
  absl::string_view arg = args[i];
  if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
  if (!absl::ConsumePrefix(&arg, "flagfile")) return 0;
  int taken = 1;
  std::string value;
  if (absl::ConsumePrefix(&arg, "=")) {
    value = std::string(arg);
  } else if (arg.empty() && value_apart && i + 1 < args.size()) {
    value = args[i + 1];
    taken = 2;
  } else {
    return 0;  // (--flagfilex: not this flag)
  }
  for (absl::string_view f : absl::StrSplit(value, ','))
    files->push_back(std::string(f));  // (an empty name is refused as no such file)
  return taken;
}

// Appends to `out` the flags of `path`, files it names expanded in turn; `chain` holds the files
// being read, outermost first.
absl::Status ExpandFlagfile(const std::string& path, std::vector<std::string>* chain,
                            std::vector<std::string>* out) {
  std::error_code error;
  std::string canonical = std::filesystem::weakly_canonical(path, error).string();
  if (error || canonical.empty()) canonical = path;
  for (const std::string& open : *chain)
    if (open == canonical)
      return absl::InvalidArgumentError(
          absl::StrCat("--flagfile ", path, " names itself",
                       chain->back() != canonical ? " through " + chain->back() : ""));
  absl::StatusOr<std::string> text = ReadTextFile(path, "--flagfile");
  if (!text.ok()) return text.status();
  chain->push_back(canonical);
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);  // (absl keeps the rest of the line)
    absl::ConsumeSuffix(&line, "\r");  // a file with Windows line ends reads as with '\n' alone
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != '-' || line == "--")
      return absl::InvalidArgumentError(absl::StrCat(
          "--flagfile ", path, ": '", line, "' is no flag (a flag file holds flags, one a line)"));
    lines.push_back(std::string(line));
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<std::string> nested;
    if (FlagfileArgument(lines, i, /*value_apart=*/false, &nested) == 0) {
      absl::string_view flag = lines[i];
      if (absl::ConsumePrefix(&flag, "--") || absl::ConsumePrefix(&flag, "-"); flag == "flagfile")
        return absl::InvalidArgumentError(absl::StrCat(
            "--flagfile ", path, ": a flag file names another as --flagfile=PATH, on one line"));
      out->push_back(lines[i]);
      continue;
    }
    for (const std::string& f : nested)
      if (absl::Status s = ExpandFlagfile(f, chain, out); !s.ok()) return s;
  }
  chain->pop_back();
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandFlagfiles(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<std::string> files;
    const int taken =
        i == 0 || args[i] == "--" ? 0 : FlagfileArgument(args, i, /*value_apart=*/true, &files);
    if (args[i] == "--") {  // the rest are positional
      out.insert(out.end(), args.begin() + i, args.end());
      break;
    }
    if (taken == 0) {
      out.push_back(args[i]);
      continue;
    }
    for (const std::string& f : files) {
      std::vector<std::string> chain;
      if (absl::Status s = ExpandFlagfile(f, &chain, &out); !s.ok()) return s;
    }
    i += taken - 1;
  }
  return out;
}

namespace {
// Whether --undefok is on the command line (absl then passes the flags it names over).
bool UndefOkGiven(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (absl::StartsWith(argv[i], "--undefok") || absl::StartsWith(argv[i], "-undefok"))
      return true;
  return false;
}
// absl's usage flags (--version, --helpfull, ...), which its parse knows but lists nowhere.
bool AbslUsageFlag(const std::string& name) {
  for (const char* usage : {"help", "helpfull", "helpshort", "helppackage", "version",
                            "only_check_args", "helpon", "helpmatch"})
    if (name == usage) return true;
  return false;
}
}  // namespace

absl::Status RecordGivenFlags(int argc, char** argv) {
  std::set<std::string> seen;  // each flag once, a boolean's --noX counted as X
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;  // the rest are positional
    if (arg.size() < 2 || arg[0] != '-') continue;
    // A negative number is the value of the flag before it ("--m -128", "--scale -inf"), as absl
    // reads it.
    if (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.') continue;
    if (absl::EqualsIgnoreCase(arg, "-inf") || absl::EqualsIgnoreCase(arg, "-infinity") ||
        absl::EqualsIgnoreCase(arg, "-nan"))
      continue;
    arg = arg.substr(arg[1] == '-' ? 2 : 1);
    const std::string name = arg.substr(0, arg.find('='));
    GivenFlags().insert(name);
    // absl's own flags read each given (several flag files, say).
    if (AbslParseFlag(name)) continue;
    const bool negated = absl::StartsWith(name, "no") && !absl::FindCommandLineFlag(name) &&
                         absl::FindCommandLineFlag(name.substr(2));
    // An unknown flag, said here as a usage error with the nearest name (absl's own parse would
    // exit 1 with its name alone), unless --undefok asks absl to pass some over.
    if (!negated && !absl::FindCommandLineFlag(name) && !AbslUsageFlag(name) &&
        !UndefOkGiven(argc, argv)) {
      std::vector<std::string> names;
      for (const auto& [flag, unused] : absl::GetAllFlags()) names.emplace_back(flag);
      const std::string near = kiln::rt::NearestName(name, names);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, near.empty() ? "" : "; did you mean --" + near + "?",
          " (`kiln help COMMAND` lists a command's flags)"));
    }
    // absl keeps the last of a repeated flag; the earlier value would be dropped without a word.
    if (!seen.insert(negated ? name.substr(2) : name).second)
      return absl::InvalidArgumentError(absl::StrCat("--", negated ? name.substr(2) : name,
                                                     " is given twice: give each flag once"));
    // A value the flag's type does not read (a word for --m) or none at all, said here as a usage
    // error (absl's own parse would exit 1). Parsing sets the value, which absl sets again.
    absl::CommandLineFlag* flag = negated ? nullptr : absl::FindCommandLineFlag(name);
    if (flag && !flag->IsOfType<bool>()) {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos && i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      const std::string value = eq != std::string::npos ? arg.substr(eq + 1) : argv[i + 1];
      std::string error;
      if (!flag->ParseFrom(value, &error))
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": ", error, " (`kiln help COMMAND` says what it takes)"));
    }
  }
  return absl::OkStatus();
}

// On the command line (flag files expanded into it), or from the environment through --fromenv
// (absl records those; its public API has no such query, hence the internal one).
bool FlagGiven(const std::string& name) {
  return GivenFlags().count(name) > 0 || absl::flags_internal::WasPresentOnCommandLine(name);
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  constexpr size_t kLargest = size_t{256} << 20;  // far past any kernel's PTX
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status))
    return absl::NotFoundError(absl::StrCat(what, " ", path, ": no such file"));
  if (std::filesystem::is_directory(status))
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is a directory, not a file"));
  // A pipe (`<(sed ...)`, /dev/stdin) reads as a file does; whatever it is, no more than
  // kLargest bytes are read (a device such as /dev/zero has no end).
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > kLargest)
      return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " holds more than ", kLargest,
                                                     " bytes; kiln reads at most that"));
  }
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  return text;
}

// The size flags of the other kind of kernel (or, for a probe, of any kind) are refused rather
// than dropped, and a size given must be at least 1 (0 is not "the default").
absl::Status CheckSizeFlags(const std::string& command, const std::string& name, bool gemm,
                            bool row_op, bool probe) {
  if (!gemm && !row_op && !probe) return absl::OkStatus();  // (the command says where it runs)
  const std::tuple<const char*, int64_t, bool> flags[] = {
      // name, value, whether a GEMM's
      {"m", absl::GetFlag(FLAGS_m), true},
      {"n", absl::GetFlag(FLAGS_n), true},
      {"k", absl::GetFlag(FLAGS_k), true},
      {"rows", absl::GetFlag(FLAGS_rows), false},
      {"cols", absl::GetFlag(FLAGS_cols), false}};
  for (const auto& [flag, value, gemm_flag] : flags) {
    if (!FlagGiven(flag)) continue;
    if (gemm_flag ? !gemm : !row_op)
      return absl::InvalidArgumentError(absl::StrCat(command, ": --", flag, " does not size ", name,
                                                     ": ",
                                                     gemm     ? "a GEMM takes --m, --n and --k"
                                                     : row_op ? "a row op takes --rows and --cols"
                                                              : "a probe runs at its own sizes"));
    if (value < 1)
      return absl::InvalidArgumentError(
          absl::StrCat(command, ": --", flag, " ", value, ": a size is at least 1"));
  }
  return absl::OkStatus();
}

std::vector<std::string> GivenFlagNames() {
  return std::vector<std::string>(GivenFlags().begin(), GivenFlags().end());
}

int FailUsage(const absl::Status& s) { return Fail(s) + 1; }

int Fail(const absl::Status& given) { return Fail(given, "kiln"); }

int Fail(const absl::Status& given, absl::string_view command) {
  // The emulated op device names a kernel it could not get (MissingKernel): why, and the
  // command that writes it, is GetBundle's to say.
  absl::Status s = given;
  if (std::optional<std::string> missing = kiln::examples::MissingKernel(s))
    if (absl::StatusOr<Bundle> b = GetBundle(*missing); !b.ok()) s = b.status();
  // A message that names its command ("kiln gemm: ...") needs no second prefix.
  const bool named =
      absl::StartsWith(s.message(), "kiln ") || absl::StartsWith(s.message(), "kiln.");
  std::cerr << (named ? "" : absl::StrCat(command, ": ")) << s.message() << "\n";
  return 1;
}

std::string BundleDir() {
  std::string dir = absl::GetFlag(FLAGS_bundles);
  if (!dir.empty()) return dir;
  // As the Python module: $KILN_BUNDLE_DIR names them.
  if (const char* env = std::getenv("KILN_BUNDLE_DIR"); env && *env) return env;
  // A runtime-only build looks next to itself: <build>/bin/kiln -> <build>/bundles.
  char exe[4096] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "bundles";
  return (std::filesystem::path(exe).parent_path().parent_path() / "bundles").string();
}

std::string BundleDirHint() {
  std::error_code ec;
  if (std::filesystem::is_directory(BundleDir(), ec)) return "";
  // Said as where the directory came from: a --bundles or KILN_BUNDLE_DIR given names a
  // directory that is not there; else kiln looked next to itself.
  const char* env = std::getenv("KILN_BUNDLE_DIR");
  const std::string from = !absl::GetFlag(FLAGS_bundles).empty() ? "--bundles "
                           : env && *env                         ? "KILN_BUNDLE_DIR="
                                                                 : "";
  if (!from.empty())
    return absl::StrCat(" (no bundle directory ", BundleDir(), ": ", from, BundleDir(),
                        " names no directory; a full build's bundles/ is such as build/bundles)");
  return absl::StrCat(" (no bundle directory ", BundleDir(),
                      ": give --bundles DIR, a full build's bundles/ such as build/bundles, or set "
                      "KILN_BUNDLE_DIR)");
}

bool Compiling() {
#ifdef KILN_HAVE_COMPILER
  return absl::GetFlag(FLAGS_bundles).empty();
#else
  return false;
#endif
}

std::string WhyNotCompiling() {
#ifdef KILN_HAVE_COMPILER
  return absl::StrCat("with --bundles ", absl::GetFlag(FLAGS_bundles),
                      " kiln takes its kernels from there and compiles none");
#else
  return "this kiln was built without the compiler (a runtime-only build)";
#endif
}

// A family member (base.options: gemm/bf16_sm90.f16-f32.gelu): bundled for kiln gemm, checked by
// it and by the emulator tests, not part of kiln bench's or crosscheck's whole-registry runs.
bool FamilyMember(const std::string& name) {
  const size_t slash = name.rfind('/');
  return name.find('.', slash == std::string::npos ? 0 : slash) != std::string::npos;
}

absl::StatusOr<std::vector<std::string>> KernelNames() {
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    std::vector<std::string> names;
    for (const auto& e : kiln::examples::All()) names.push_back(e.name);
    for (const auto& f : kiln::examples::Families())  // the variants the GPU suite runs
      for (const std::string& options : f.bundled)
        names.push_back(absl::StrCat(f.base, ".", options));
    std::sort(names.begin(), names.end());
    return names;
  }
#endif
  std::vector<std::string> unreadable;  // (named, and the rest listed)
  absl::StatusOr<std::vector<std::string>> names = kiln::rt::ListBundles(BundleDir(), &unreadable);
  for (const std::string& u : unreadable) std::cerr << "kiln: skipped " << u << "\n";
  if (!names.ok())
    return absl::Status(names.status().code(),
                        absl::StrCat(names.status().message(), BundleDirHint()));
  return names;
}

// kiln gemm and bench name a split run NAME+splitK2 or NAME+streamK: the kernel is NAME. The
// hint for such a name, or "".
std::string SplitSuffixHint(const std::string& name) {
  const size_t plus = name.rfind('+');
  if (plus == std::string::npos) return "";
  absl::string_view suffix = absl::string_view(name).substr(plus + 1);
  int parts = 0;
  if (suffix != "streamK" &&
      !(absl::ConsumePrefix(&suffix, "splitK") && absl::SimpleAtoi(suffix, &parts) && parts > 1))
    return "";
  return absl::StrCat("; '", name.substr(plus), "' is how kiln gemm names the split it ran: the ",
                      "kernel is '", name.substr(0, plus), "' (--split S runs it split)");
}

std::string DidYouMean(const std::string& name) {
  if (std::string hint = SplitSuffixHint(name); !hint.empty()) return hint;
  absl::StatusOr<std::vector<std::string>> names = KernelNames();
  const std::string near = names.ok() ? kiln::rt::NearestName(name, *names) : "";
  return near.empty() || near == name
             ? " (see `kiln list`)"
             : absl::StrCat("; did you mean '", near, "'? (see `kiln list`)");
}

#ifdef KILN_HAVE_COMPILER
absl::StatusOr<kiln::KernelDef> BuildKernel(const std::string& name) {
  const kiln::examples::Example* e =
      SplitSuffixHint(name).empty() ? kiln::examples::Find(name) : nullptr;
  if (!e) return absl::NotFoundError(absl::StrCat("unknown kernel '", name, "'", DidYouMean(name)));
  return e->build();
}
#endif

// `findings`: where given, kiln check's static findings (kernels built here only).
std::function<const Bundle*(const std::string&)> BundlesOnce() {
  auto bundles = std::make_shared<std::map<std::string, Bundle>>();
  return [bundles](const std::string& name) -> const Bundle* {
    if (auto it = bundles->find(name); it != bundles->end()) return &it->second;
    absl::StatusOr<Bundle> b = GetBundle(name);
    return b.ok() ? &bundles->emplace(name, *std::move(b)).first->second : nullptr;
  };
}

#ifdef KILN_HAVE_COMPILER
// A kernel variant built on demand (options no bundle holds, `--kernel base.options`) has not
// been through ptxas the way the bundled ones are in the build: where the toolkit is here, it is
// assembled before it runs, so that a variant ptxas refuses (registers past a setmaxnreg budget,
// say) is not reported correct by the emulator alone.
absl::Status AssemblesIfOnDemand(const std::string& name, const std::string& ptx,
                                 const std::string& chip) {
  // (A hand-edited --ptx replaces what was built: the built PTX's assembly says nothing of it.)
  if (!kiln::HaveToolkit() || !absl::GetFlag(FLAGS_ptx).empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> bundled = KernelNames();
  if (!bundled.ok() || std::binary_search(bundled->begin(), bundled->end(), name))
    return absl::OkStatus();
  absl::StatusOr<kiln::PtxasResult> cubin = kiln::RunPtxas(ptx, chip);
  // Only ptxas refusing this PTX says the variant would not load; a toolkit that cannot run
  // (too old for the chip, no scratch space) says nothing of it.
  if (cubin.ok() || !absl::IsInvalidArgument(cubin.status())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(name, ": ptxas refuses this variant for ", chip,
                   ", so it would not load on a GPU: ", cubin.status().message()));
}
#endif

namespace {
// Whether the bundle directory holds family `base`: its own bundle, or a variant of it
// (base.options: the attention kernels are bundled as variants alone).
bool FamilyInDir(const std::string& base) {
  if (kiln::rt::ReadBundle(BundleDir(), base).ok()) return true;
  absl::StatusOr<std::vector<std::string>> names = kiln::rt::ListBundles(BundleDir());
  return names.ok() && std::any_of(names->begin(), names->end(), [&](const std::string& n) {
           return absl::StartsWith(n, base + ".");
         });
}
}  // namespace

absl::StatusOr<Bundle> GetBundle(const std::string& name, std::vector<std::string>* findings,
                                 const std::string& cache_dir) {
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (!def.ok()) return def.status();
    if (findings) *findings = def->findings();
    if (!cache_dir.empty()) {
      absl::StatusOr<kiln::CompiledKernel> c =
          kiln::Compile(*def, {.cache_dir = cache_dir, .line_info = false});
      if (!c.ok()) return c.status();
      if (!c->cache_warning.empty())
        std::cerr << "kiln: " << name << ": " << c->cache_warning << "\n";
      return std::move(c->bundle);
    }
    absl::StatusOr<std::string> ptx = kiln::EmitPtx(*def);
    if (!ptx.ok()) return ptx.status();
    if (absl::Status s = AssemblesIfOnDemand(name, *ptx, def->target().chip); !s.ok()) return s;
    return Bundle{def->manifest(), *std::move(ptx)};
  }
#endif
  absl::StatusOr<Bundle> b = kiln::rt::ReadBundle(BundleDir(), name);
  if (!b.ok() && absl::IsNotFound(b.status())) {
    const std::string hint = BundleDirHint();  // no directory: no name to suggest
    if (!hint.empty())                         // the directory, not the name, is what is missing
      return absl::NotFoundError(absl::StrCat("no bundle for '", name, "'", hint));
    // A kernel this kiln builds, or base.options where base's own bundle is there (a family's
    // variant the directory lacks): named with the command that writes it.
    const size_t slash = name.rfind('/'),
                 dot = name.find('.', slash == std::string::npos ? 0 : slash);
#ifdef KILN_HAVE_COMPILER
    const bool known = kiln::examples::Find(name) != nullptr;  // (no typo to suggest for)
#else
    const bool known = false;
#endif
    if (known || (dot != std::string::npos && SplitSuffixHint(name).empty() &&
                  FamilyInDir(name.substr(0, dot))))
      return absl::NotFoundError(absl::StrCat(
          "kernel '", name, "' is not in ", BundleDir(), "; ",
          known ? "" : absl::StrCat("if it is a variant of ", name.substr(0, dot), ", "),
          "a kiln with its compiler writes it there: kiln bundle --dir ", BundleDir(), " ", name,
          known ? "" : DidYouMean(name)));
    return absl::NotFoundError(
        absl::StrCat("unknown kernel '", name, "': ", b.status().message(), DidYouMean(name)));
  }
  return b;
}

// The fallback reference for a kernel's dtype, when one can be had.
std::optional<Bundle> ReferenceFor(const kiln::rt::Manifest& m) {
  std::optional<kiln::examples::GemmSpec> g = kiln::examples::GemmOf(m);
  if (!g) return std::nullopt;
  absl::StatusOr<Bundle> b = GetBundle(absl::StrCat("reference/", g->in_type));
  if (!b.ok()) return std::nullopt;
  return *std::move(b);
}

// ops/stream_read, which the GEMM harness times on the weights at M <= 64 (null where this kiln
// has no such bundle: the timing then goes without it).
const Bundle* StreamRead() {
  static const std::optional<Bundle> bundle = []() -> std::optional<Bundle> {
    absl::StatusOr<Bundle> b = GetBundle("ops/stream_read");
    if (!b.ok()) return std::nullopt;
    return *std::move(b);
  }();
  return bundle ? &*bundle : nullptr;
}

// The kernels a command names, or every kernel when it names none.
absl::StatusOr<std::vector<std::string>> NamesOrAll(const std::vector<std::string>& args) {
  if (args.empty()) return KernelNames();
  std::vector<std::string> names;  // each once, in the order given
  for (const std::string& a : args)
    if (std::find(names.begin(), names.end(), a) == names.end()) names.push_back(a);
  return names;
}

absl::StatusOr<std::vector<kiln::rt::GemmSize>> ParseSizes(const std::string& text) {
  std::vector<kiln::rt::GemmSize> sizes;
  if (text.empty())
    return absl::InvalidArgumentError("--sizes names no size (S or MxNxK, comma-separated)");
  // An empty item is refused, as --seeds refuses one: "64,,32" is a typo, not 64,32.
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> p = absl::StrSplit(item, 'x');
    int64_t v[3];
    bool ok = (p.size() == 1 || p.size() == 3);
    for (size_t i = 0; ok && i < p.size(); ++i) ok = absl::SimpleAtoi(p[i], &v[i]) && v[i] > 0;
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat("bad size '", item, "' in --sizes ", text,
                                                     " (S or MxNxK, comma-separated)"));
    // The kernels take M, N and K as 32-bit integers: refused here, before any plan is printed
    // from a size cut to 32 bits.
    for (size_t i = 0; i < p.size(); ++i)
      if (v[i] > INT32_MAX)
        return absl::InvalidArgumentError(absl::StrCat("size '", item, "' in --sizes: M, N and K ",
                                                       "must fit in 32 bits (at most ", INT32_MAX,
                                                       ")"));
    sizes.push_back(p.size() == 1 ? kiln::rt::GemmSize{v[0], v[0], v[0]}
                                  : kiln::rt::GemmSize{v[0], v[1], v[2]});
  }
  return sizes;
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseShapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  if (text.empty()) return shapes;                            // the command's own list
  for (absl::string_view item : absl::StrSplit(text, ',')) {  // an empty item is refused
    std::vector<absl::string_view> p = absl::StrSplit(item, 'x');
    int64_t r, c;
    if (p.size() != 2 || !absl::SimpleAtoi(p[0], &r) || !absl::SimpleAtoi(p[1], &c) || r < 1 ||
        c < 1)
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", item, "' in --shapes ", text,
                                                     " (ROWSxCOLS, comma-separated)"));
    shapes.push_back({r, c});
  }
  return shapes;
}

absl::StatusOr<int> NeedGpu(const std::string& command) {
  absl::StatusOr<int> cc = GpuHere(command);
  if (cc.ok()) PrintDevice();
  return cc;
}

std::string OnTheCpu(const std::string& command) {
  const char* checks = "; kiln emulate NAME checks a kernel on the CPU)";
  if (command == "bench" || command == "run")  // (one function runs both)
    return absl::StrCat(" (kiln run and kiln bench need a GPU", checks);
  if (command == "tune" || command == "crosscheck")
    return absl::StrCat(" (kiln ", command, " needs a GPU", checks);
  return absl::StrCat(" (kiln ", command, " --emulate runs it on the CPU)");
}

absl::StatusOr<int> GpuHere(const std::string& command) {
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok())
    return absl::Status(d.status().code(), absl::StrCat(d.status().message(), OnTheCpu(command)));
  return (*d)->compute_capability();
}

void PrintDevice() {
  absl::StatusOr<kiln::rt::Driver*> d = kiln::rt::Driver::Get();
  if (!d.ok()) return;
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  std::cout << "# " << (*d)->device_name() << " (sm_" << (*d)->compute_capability() << ", "
            << (*d)->sm_count() << " SMs), driver " << (*d)->driver_version() << ", " << date
            << "\n";
}

absl::StatusOr<std::vector<uint64_t>> ScheduleSeeds() {
  std::vector<uint64_t> seeds;
  const std::string flag = absl::GetFlag(FLAGS_seeds);
  if (flag.empty()) return absl::InvalidArgumentError("--seeds names no schedule");
  for (absl::string_view item : absl::StrSplit(flag, ',')) {
    uint64_t seed;
    if (!absl::SimpleAtoi(item, &seed))  // (an empty one too: "1,,2" is refused, not read as 1,2)
      return absl::InvalidArgumentError(absl::StrCat("bad seed '", item, "' in --seeds ", flag,
                                                     ": comma-separated integers of 0 or more"));
    seeds.push_back(seed);
  }
  return seeds;
}

// The GEMM size of `kiln emulate` and `kiln crosscheck`: the kernel's protocol size
// (kiln::examples::ProtocolSize) unless --m/--n/--k say otherwise.
kiln::rt::GemmSize EmulationSize(const Bundle& b, const kiln::examples::GemmSpec& g) {
  kiln::rt::GemmSize size = kiln::examples::ProtocolSize(b, g);
  if (absl::GetFlag(FLAGS_m)) size.m = absl::GetFlag(FLAGS_m);
  if (absl::GetFlag(FLAGS_n)) size.n = absl::GetFlag(FLAGS_n);
  if (absl::GetFlag(FLAGS_k)) size.k = absl::GetFlag(FLAGS_k);
  return size;
}

std::string SeedList(const std::vector<uint64_t>& seeds) { return absl::StrJoin(seeds, ","); }

// Beside a results TSV (kiln bench/gemm --out F.tsv): F-ratio.svg, the ratio to cuBLAS against
// the shape a line per kernel, and F-versions.svg, each series' versions at one shape.
// `as_one`: draw every row as one kernel of that name (kiln gemm: the entry point, whichever
// kernel it chose at each shape).
int WritePlots(const std::string& tsv_path, const std::string& title, const std::string& as_one) {
  absl::StatusOr<std::vector<kiln::examples::GemmResult>> results =
      kiln::examples::ReadResultsTsv(tsv_path);
  if (!results.ok()) return Fail(results.status());
  if (!as_one.empty())
    for (kiln::examples::GemmResult& r : *results) r.name = as_one;
  const std::string stem(absl::StripSuffix(tsv_path, ".tsv"));
  for (const auto& [suffix, svg] :
       {std::pair{"-ratio.svg", kiln::examples::RatioChart(*results, title + ": ratio to cuBLAS")},
        std::pair{"-versions.svg",
                  kiln::examples::ProgressionChart(*results, title + ": each series' versions")}}) {
    std::ofstream out(stem + suffix);
    out << svg;
    if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write ", stem, suffix)));
    std::cerr << "kiln: wrote " << stem << suffix << "\n";
  }
  return 0;
}

}  // namespace kiln::cli
