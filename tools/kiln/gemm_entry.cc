// The GEMM entry point's pieces that `kiln gemm` and `kiln tune` share: sizes and options from
// the flags, one entry-point kernel run against cuBLAS.
#include <algorithm>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

// kiln gemm's and kiln tune's problem sizes: --m --n --k, or each of --sizes; empty after a
// usage message.
std::vector<kiln::rt::GemmSize> GemmSizes(const std::vector<std::string>& args,
                                          const char* command) {
  std::vector<kiln::rt::GemmSize> sizes = {
      {absl::GetFlag(FLAGS_m), absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_k)}};
  const bool one = FlagGiven("m") || FlagGiven("n") || FlagGiven("k");
  if (one && FlagGiven("sizes")) {
    std::cerr << "kiln " << command << ": --m --n --k or --sizes, not both\n";
    return {};
  }
  if (!one && std::string(command) == "gemm" && absl::GetFlag(FLAGS_emulate) &&
      !FlagGiven("sizes")) {
    sizes = {{264, 300, 224}};  // the emulator's default: ragged, seconds; K as 8-bit takes it
  } else if (!one) {
    absl::StatusOr<std::vector<kiln::rt::GemmSize>> list = ParseSizes(absl::GetFlag(FLAGS_sizes));
    if (!list.ok()) {
      std::cerr << "kiln " << command << ": " << list.status().message() << "\n";
      return {};
    }
    sizes = *list;
  }
  for (const kiln::rt::GemmSize& size : sizes) {
    // What is wrong, by the flag that says it, then the usage.
    std::string why;
    if (!args.empty()) {
      why = absl::StrCat("it takes flags alone, not '", args[0], "'");
    } else if (one) {
      for (const auto& [flag, value] :
           {std::pair{"m", size.m}, std::pair{"n", size.n}, std::pair{"k", size.k}})
        if (why.empty() && value < 1)
          why = FlagGiven(flag) ? absl::StrCat("--", flag, " ", value, ": sizes are at least 1")
                                : absl::StrCat("--", flag,
                                               " is missing (--m, --n and --k, or "
                                               "--sizes)");
    } else if (size.m < 1 || size.n < 1 || size.k < 1) {
      why = absl::StrCat("--sizes ", size.m, "x", size.n, "x", size.k, ": sizes are at least 1");
    }
    if (!why.empty()) {
      std::cerr << "kiln " << command << ": " << why << "\n";
      std::cerr << "usage: kiln " << command
                << " (--m M --n N --k K | --sizes MxNxK,...) [--dtype bf16|f16|e4m3|e5m2] "
                   "[--out_dtype bf16|f16|f32] [--epilogue TERMS] [--tune_cache FILE]"
                << (std::string(command) == "gemm"
                        ? " [--layout row|col,row|col] [--split S] [--emulate]"
                        : "")
                << "\n";
      return {};
    }
  }
  return sizes;
}

absl::StatusOr<kiln::rt::GemmOptions> GemmOptionsFromFlags() {
  kiln::rt::GemmOptions options;
  options.in_type = absl::GetFlag(FLAGS_dtype);
  options.out_type =
      absl::GetFlag(FLAGS_out_dtype).empty() ? options.in_type : absl::GetFlag(FLAGS_out_dtype);
  if (options.in_type != "bf16" && options.in_type != "f16")
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype ", options.in_type, ": bf16, f16, e4m3 or e5m2"));
  // The 8-bit GEMM's flags (kiln gemm --dtype e4m3), refused rather than dropped.
  for (const auto& [flag, set] : {std::pair{"--kernel", !absl::GetFlag(FLAGS_kernel).empty()},
                                  std::pair{"--scaling", FlagGiven("scaling")},
                                  std::pair{"--sm100", absl::GetFlag(FLAGS_sm100)}})
    if (set)
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " belongs to the 8-bit GEMM (--dtype e4m3 or e5m2); a ", options.in_type,
          " GEMM runs the kernel the entry point picks (--tune_cache to choose another)"));
  if (options.out_type != "bf16" && options.out_type != "f16" && options.out_type != "f32")
    return absl::InvalidArgumentError(
        absl::StrCat("--out_dtype ", options.out_type, ": bf16, f16 or f32"));
  absl::StatusOr<std::string> epilogue = kiln::rt::CanonicalEpilogue(absl::GetFlag(FLAGS_epilogue));
  if (!epilogue.ok()) return epilogue.status();
  // swiglu and rope pair C's columns, of a row-major C only.
  if (*epilogue == "swiglu" || *epilogue == "rope")
    return absl::InvalidArgumentError(absl::StrCat(
        "--epilogue ", *epilogue,
        ": the entry point fuses it for a row-major C (rt::GemmRunner "
        "with c_row_major; kiln.gemm(x, w.t(), ",
        *epilogue == "swiglu" ? "activation=\"swiglu\"" : "rope=(angles, rows, dim)",
        ") in Python), and kiln gemm's C is column-major; `kiln run` and `kiln emulate` check the "
        "kernels (gemm/bf16_sm90.bf16-bf16.",
        *epilogue, ")"));
  options.epilogue = *epilogue;
  const std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout != "row,col" && layout != "col,col" && layout != "row,row" && layout != "col,row")
    return absl::InvalidArgumentError(
        absl::StrCat("--layout ", layout, ": A's order, B's order (row or col)"));
  options.a_mn = layout.rfind("col,", 0) == 0;
  options.b_mn = layout.substr(layout.find(',') + 1) == "row";
  return options;
}

// One GEMM kernel of the entry point at one size, checked against cuBLAS and fp64 spot checks
// and timed with cuBLAS (or, `emulate`, checked on the emulator); `via`, where given, runs it.
// A split other than whole tiles shows in the result's name (gemm/bf16_sm90_n128+streamK).
absl::StatusOr<kiln::examples::GemmResult> RunEntryKernel(const std::string& name,
                                                          const kiln::rt::GemmSize& size, int split,
                                                          bool emulate, const ThroughRunner* via) {
  absl::StatusOr<Bundle> b = GetBundle(name);
  if (!b.ok() && !Compiling() && absl::IsNotFound(b.status())) {
    // GetBundle's message names the command that writes it; the build's own variants are listed
    // only where this one is not among them (a build's bundles would not hold it either).
    const size_t slash = name.rfind('/'),
                 dot = name.find('.', slash == std::string::npos ? 0 : slash);
    const std::string variant = dot == std::string::npos ? "" : name.substr(dot + 1);
    const auto& built = kiln::examples::kBundledTileVariants;
    const bool a_build_has_it =
        variant.empty() || std::find(built.begin(), built.end(), variant) != built.end();
    return absl::NotFoundError(absl::StrCat(
        b.status().message(), " (", WhyNotCompiling(), ")",
        a_build_has_it
            ? ""
            : absl::StrCat("; a build bundles these variants of the tile kernels alone: ",
                           absl::StrJoin(built, ", "))));
  }
  if (!b.ok()) return b.status();
  // One layout whatever the kernel: the reference indexes through strides, so it is told C is
  // column-major like the others, and A and B are as --layout says.
  std::optional<kiln::examples::GemmSpec> spec = kiln::examples::GemmOf(b->manifest);
  if (!spec) return absl::InternalError(absl::StrCat(name, " is not a GEMM"));
  // (Other kernels describe their own C: a c_row one's row-major; through the runner, C is the
  // caller's.)
  if (via || kiln::rt::ReadsAnyStrides(name)) spec->c_order = "col";
  if (kiln::rt::ReadsAnyStrides(name)) {
    const std::string layout = absl::GetFlag(FLAGS_layout);
    spec->a_order = layout.substr(0, layout.find(','));
    spec->b_order = layout.substr(layout.find(',') + 1);
  }
  if (via) spec->epilogue = via->epilogue;
  kiln::examples::SetGemmSpec(b->manifest, *spec);
  kiln::examples::RunOptions opt = TimingFlags();
  opt.size = size;
  opt.iterations = absl::GetFlag(FLAGS_iters);
  opt.split = split;
  if (!emulate) opt.stream_read = StreamRead();  // (a GPU's timing only: not built otherwise)
  if (via) opt.launch = via->launch;
  absl::StatusOr<kiln::examples::GemmResult> r =
      emulate ? kiln::examples::EmulateGemm(*b, opt, 1) : kiln::examples::RunGemm(*b, nullptr, opt);
  if (r.ok() && split != 1) r->name += split == 0 ? "+streamK" : absl::StrCat("+splitK", split);
  if (r.ok() && via) r->name = (via->name.empty() ? r->name : via->name) + via->suffix;
  return r;
}

// The tune cache named by --tune_cache (empty where none is).
absl::StatusOr<kiln::rt::GemmTuneCache> TuneCacheFromFlag() {
  if (absl::GetFlag(FLAGS_tune_cache).empty()) return kiln::rt::GemmTuneCache();
  return kiln::rt::GemmTuneCache::ReadExisting(absl::GetFlag(FLAGS_tune_cache));
}

}  // namespace kiln::cli
