// `kiln compile [--cache DIR] [NAME...]`: compile through the host API's disk cache, timing each.
#include <chrono>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

#ifdef KILN_HAVE_COMPILER
// Builds and compiles kernels through the host API's disk cache, timing each step: the first
// run of a key lowers it, a second reads it back.
int CompileThroughCache(const std::vector<std::string>& args) {
  if (!Compiling())  // it compiles the registered kernels, never a bundle
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("kiln compile: ", WhyNotCompiling(), " (drop --bundles)")));
  absl::StatusOr<std::vector<std::string>> named = NamesOrAll(args);
  if (!named.ok()) return Fail(named.status());
  const std::vector<std::string>& names = *named;
  kiln::CompileOptions options;
  const bool cache_named = absl::GetFlag(FLAGS_cache) != "\x01";
  if (cache_named) options.cache_dir = absl::GetFlag(FLAGS_cache);
  options.line_info = absl::GetFlag(FLAGS_line_info);
  std::cout << "# cache " << (options.cache_dir.empty() ? "(none)" : options.cache_dir) << "\n"
            << "kernel\tbuild_ms\tcompile_ms\tsource\n";
  double build_total = 0, compile_total = 0;
  bool cache_failed = false;
  for (const std::string& name : names) {
    auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(name);
    if (!def.ok()) return Fail(def.status());
    double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    absl::StatusOr<kiln::CompiledKernel> c = kiln::Compile(*def, options);
    if (!c.ok()) return Fail(c.status());
    std::cout << name << "\t" << absl::StrFormat("%.1f\t%.1f", build_ms, c->milliseconds) << "\t"
              << (c->from_cache ? "cache" : "lowered") << "\n";
    if (!c->cache_warning.empty()) {
      std::cerr << "kiln: warning: " << name << ": " << c->cache_warning << "\n";
      cache_failed = true;
    }
    build_total += build_ms;
    compile_total += c->milliseconds;
  }
  std::cout << absl::StrFormat("total\t%.1f\t%.1f\n", build_total, compile_total);
  // The command's job is the cache: a --cache it could not use is a failure (the host API only
  // warns, as a cache is an optimisation there).
  if (cache_failed && cache_named)
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "kiln compile: the cache '", options.cache_dir, "' could not be used (see the warnings)")));
  return 0;
}
#endif

}  // namespace kiln::cli
