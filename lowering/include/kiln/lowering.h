// The stages from a built kernel to machine code, each printable:
//   kiln MLIR --(passes)--> LLVM dialect --(translate)--> LLVM IR --(NVPTX)--> PTX --(ptxas)-->
//   SASS
// This header includes no MLIR or LLVM header.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/kernel.h"

namespace kiln {

enum class Stage { kMlir, kLlvmDialect, kLlvmIr, kPtx, kSass };
absl::StatusOr<Stage> ParseStage(absl::string_view name);  // mlir|lowered|llvm|ptx|sass

// The module as the builder made it (arith, scf, nvvm, llvm dialects, source locations).
std::string PrintMlir(const KernelDef& kernel);
// After the conversion passes: LLVM + NVVM dialects only.
absl::StatusOr<std::string> LowerToLlvmDialect(const KernelDef& kernel);
// Optimised LLVM IR for the kernel's target.
absl::StatusOr<std::string> EmitLlvmIr(const KernelDef& kernel);
absl::StatusOr<std::string> EmitPtx(const KernelDef& kernel);
struct PtxOptions {
  // .file/.loc line tables naming the DSL line of every instruction (for the emulator's messages
  // and debuggers); off by default, so bundles stay as they are.
  bool line_info = false;
};
absl::StatusOr<std::string> EmitPtx(const KernelDef& kernel, const PtxOptions& options);

// The CUDA toolkit's ptxas and cuobjdump, where installed (KILN_CUDA_HOME or /usr/local/cuda).
bool HaveToolkit();
struct PtxasResult {
  std::string cubin;  // the object file's bytes
  std::string log;    // ptxas -v output: registers, spills, stack frame
};
absl::StatusOr<PtxasResult> RunPtxas(const std::string& ptx, const std::string& chip);
absl::StatusOr<std::string> Disassemble(const std::string& cubin);

// Any stage as text.
absl::StatusOr<std::string> EmitStage(const KernelDef& kernel, Stage stage);

}  // namespace kiln
