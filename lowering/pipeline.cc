// kiln MLIR -> LLVM dialect -> LLVM IR -> PTX.
#include <memory>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "kiln/lowering.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

namespace kiln {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

// Collects MLIR diagnostics so that a failing pass reports the DSL line it points at.
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(mlir::MLIRContext* ctx)
      : handler_(ctx, [this](mlir::Diagnostic& d) {
          llvm::raw_string_ostream os(text_);
          os << d.getLocation() << ": " << d << "\n";
          return mlir::success();
        }) {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

// Converts a copy of the kernel's module to the LLVM dialect.
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> Lower(const KernelDef& kernel,
                                                        bool line_info = false) {
  mlir::MLIRContext* ctx = kernel.module().context.get();
  mlir::OwningOpRef<mlir::ModuleOp> module = kernel.module().module->clone();
  DiagnosticCollector diags(ctx);
  mlir::PassManager pm(ctx);
  pm.addPass(mlir::createSCFToControlFlowPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createConvertNVVMToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  // Line tables: every instruction keeps the DSL line that built it, as .loc directives.
  if (line_info) pm.addPass(mlir::LLVM::createDIScopeForLLVMFuncOpPass());
  if (mlir::failed(pm.run(*module)))
    return absl::InternalError(absl::StrCat("lowering ", kernel.manifest().name,
                                            " to the LLVM dialect failed:\n", diags.text()));
  return module;
}

// Shared-memory pointers of 32 bits, as nvcc emits them (ld.shared [%r+imm]). With LLVM's
// default 64-bit shared pointers every smem address is zero-extended before it is added to the
// base, so constant offsets no longer fold into the address and each ldmatrix/cp.async address
// of an unrolled loop is hoisted into a 64-bit register pair of its own (cuda_hgemm's mma
// series: 150-170 registers instead of nvcc's 120-128, one CTA per SM instead of two).
void UseShortSharedPointers() {
  // An LLVM without the option keeps 64-bit shared pointers; the hgemm register tests then fail.
  auto& options = llvm::cl::getRegisteredOptions();
  auto it = options.find("nvptx-short-ptr");
  if (it != options.end()) static_cast<llvm::cl::opt<bool>*>(it->second)->setValue(true);
}

llvm::TargetMachine* MachineFor(const Target& target) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    UseShortSharedPointers();
  });
  // One machine per chip and PTX version (a kernel's instructions may raise it), built once.
  static std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& tm = machines[absl::StrCat(target.chip, "+ptx", target.ptx_version)];
  if (!tm) {
    std::string error;
    llvm::Triple triple(kTriple);
    const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, error);
    if (!t) return nullptr;
    tm.reset(t->createTargetMachine(triple, target.chip, absl::StrCat("+ptx", target.ptx_version),
                                    llvm::TargetOptions(), std::nullopt, std::nullopt,
                                    llvm::CodeGenOptLevel::Aggressive));
  }
  return tm.get();
}

// Translates to LLVM IR and runs LLVM's O3 pipeline with the NVPTX machine's passes.
absl::StatusOr<std::unique_ptr<llvm::Module>> ToOptimizedLlvm(const KernelDef& kernel,
                                                              llvm::LLVMContext& llvm_ctx,
                                                              bool line_info = false) {
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> lowered = Lower(kernel, line_info);
  if (!lowered.ok()) return lowered.status();
  mlir::MLIRContext* ctx = kernel.module().context.get();
  mlir::DialectRegistry registry;
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
  ctx->appendDialectRegistry(registry);
  DiagnosticCollector diags(ctx);
  std::unique_ptr<llvm::Module> module =
      mlir::translateModuleToLLVMIR(**lowered, llvm_ctx, kernel.manifest().entry);
  if (!module)
    return absl::InternalError(absl::StrCat("translating ", kernel.manifest().name,
                                            " to LLVM IR failed:\n", diags.text()));
  llvm::TargetMachine* tm = MachineFor(kernel.target());
  if (!tm) return absl::InternalError("LLVM has no NVPTX target");
  module->setTargetTriple(llvm::Triple(kTriple));
  module->setDataLayout(tm->createDataLayout());

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*module, mam);
  return module;
}

}  // namespace

absl::StatusOr<Stage> ParseStage(absl::string_view name) {
  if (name == "mlir") return Stage::kMlir;
  if (name == "lowered") return Stage::kLlvmDialect;
  if (name == "llvm") return Stage::kLlvmIr;
  if (name == "ptx") return Stage::kPtx;
  if (name == "sass") return Stage::kSass;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown stage '", name, "' (stages: mlir lowered llvm ptx sass)"));
}

std::string PrintMlir(const KernelDef& kernel) {
  std::string out;
  llvm::raw_string_ostream os(out);
  mlir::OpPrintingFlags flags;
  flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/true);
  kernel.module().module->print(os, flags);
  return out;
}

absl::StatusOr<std::string> LowerToLlvmDialect(const KernelDef& kernel) {
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> lowered = Lower(kernel);
  if (!lowered.ok()) return lowered.status();
  std::string out;
  llvm::raw_string_ostream os(out);
  (*lowered)->print(os);
  return out;
}

absl::StatusOr<std::string> EmitLlvmIr(const KernelDef& kernel) {
  llvm::LLVMContext llvm_ctx;
  absl::StatusOr<std::unique_ptr<llvm::Module>> module = ToOptimizedLlvm(kernel, llvm_ctx);
  if (!module.ok()) return module.status();
  std::string out;
  llvm::raw_string_ostream os(out);
  (*module)->print(os, nullptr);
  return out;
}

absl::StatusOr<std::string> EmitPtx(const KernelDef& kernel) {
  return EmitPtx(kernel, PtxOptions{});
}

absl::StatusOr<std::string> EmitPtx(const KernelDef& kernel, const PtxOptions& options) {
  llvm::LLVMContext llvm_ctx;
  absl::StatusOr<std::unique_ptr<llvm::Module>> module =
      ToOptimizedLlvm(kernel, llvm_ctx, options.line_info);
  if (!module.ok()) return module.status();
  llvm::TargetMachine* tm = MachineFor(kernel.target());
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return absl::InternalError("the NVPTX target cannot emit PTX");
  pm.run(**module);
  return std::string(ptx.str());
}

absl::StatusOr<std::string> EmitStage(const KernelDef& kernel, Stage stage) {
  switch (stage) {
    case Stage::kMlir:
      return PrintMlir(kernel);
    case Stage::kLlvmDialect:
      return LowerToLlvmDialect(kernel);
    case Stage::kLlvmIr:
      return EmitLlvmIr(kernel);
    case Stage::kPtx:
      return EmitPtx(kernel);
    case Stage::kSass: {
      absl::StatusOr<std::string> ptx = EmitPtx(kernel);
      if (!ptx.ok()) return ptx.status();
      absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, kernel.target().chip);
      if (!cubin.ok()) return cubin.status();
      return Disassemble(cubin->cubin);
    }
  }
  return absl::InvalidArgumentError("unknown stage");
}

}  // namespace kiln
