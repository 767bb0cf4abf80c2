// `kiln mlir|lowered|llvm|ptx|sass NAME`: one stage of a kernel on stdout.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#ifdef KILN_HAVE_COMPILER
#include "kiln/lowering.h"
#endif
#include "tools/kiln/common.h"
#include "tools/kiln/flags.h"

namespace kiln::cli {

int Stage(const std::string& stage_name, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "kiln " << stage_name << ": "
              << (args.empty() ? std::string("name a kernel (kiln list names them)")
                               : "one kernel at a time, not " + std::to_string(args.size()))
              << "\nusage: kiln " << stage_name << " NAME"
              << (stage_name == "ptx" ? " [--lines]" : "") << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_lines) && stage_name != "ptx")
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--lines adds the DSL's line tables to the PTX (kiln ptx NAME --lines), not to kiln ",
        stage_name)));
#ifdef KILN_HAVE_COMPILER
  if (Compiling()) {
    absl::StatusOr<kiln::Stage> stage = kiln::ParseStage(stage_name);
    if (!stage.ok()) return Fail(stage.status());
    absl::StatusOr<kiln::KernelDef> def = BuildKernel(args[0]);
    if (!def.ok()) return Fail(def.status());
    absl::StatusOr<std::string> text = *stage == kiln::Stage::kPtx && absl::GetFlag(FLAGS_lines)
                                           ? kiln::EmitPtx(*def, {.line_info = true})
                                           : kiln::EmitStage(*def, *stage);
    if (!text.ok()) return Fail(text.status());
    std::cout << *text;
    return 0;
  }
#endif
#ifdef KILN_HAVE_COMPILER
  if (stage_name == "sass") {  // a bundle's PTX through the toolkit's ptxas and disassembler
    absl::StatusOr<Bundle> b = GetBundle(args[0]);
    if (!b.ok()) return Fail(b.status());
    absl::StatusOr<kiln::PtxasResult> cubin = kiln::RunPtxas(b->ptx, b->manifest.target);
    if (!cubin.ok()) return Fail(cubin.status());
    absl::StatusOr<std::string> sass = kiln::Disassemble(cubin->cubin);
    if (!sass.ok()) return Fail(sass.status());
    std::cout << *sass;
    return 0;
  }
#endif
  if (stage_name != "ptx")
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(WhyNotCompiling(),
                     "; only `kiln ptx` (and `kiln sass` where kiln has its compiler) reads "
                     "a bundle, not `kiln ",
                     stage_name, "`")));
  absl::StatusOr<Bundle> b = GetBundle(args[0]);
  if (!b.ok()) return Fail(b.status());
  // A bundle's PTX is printed as it was written: kiln's bundles without line tables, one written
  // from Compile() (rt::WriteBundle) with them.
  if (FlagGiven("lines") && b->ptx.find("\t.loc\t") == std::string::npos &&
      b->ptx.find(".loc ") == std::string::npos)
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "kiln ptx --lines: this bundle's PTX has no line tables (kiln's bundles are written "
        "without them; one written from Compile() keeps them), and kiln compiles NAME with them "
        "only from its source: ",
        WhyNotCompiling(), " (drop --bundles)")));
  std::cout << b->ptx;
  return 0;
}

}  // namespace kiln::cli
