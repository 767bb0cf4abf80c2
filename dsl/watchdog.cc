#include "dsl/watchdog.h"

#include "absl/strings/str_cat.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kiln::detail {
namespace {

mlir::LLVM::GlobalOp WatchdogGlobal(KernelState& s, const char* name, mlir::Type type,
                                    mlir::Location l) {
  mlir::OpBuilder b(s.context.get());
  b.setInsertionPointToStart(s.module->getBody());
  return mlir::LLVM::GlobalOp::create(b, l, type, /*isConstant=*/false,
                                      mlir::LLVM::Linkage::External, name,
                                      b.getIntegerAttr(type, 0), /*alignment=*/8, /*addrSpace=*/1);
}

mlir::Value AddressOf(KernelState& s, mlir::LLVM::GlobalOp g, mlir::Location l) {
  mlir::Value p = mlir::LLVM::AddressOfOp::create(s.builder, l, g);
  return mlir::LLVM::PtrToIntOp::create(s.builder, l, s.builder.getI64Type(), p);
}

}  // namespace

std::pair<mlir::Value, mlir::Value> WatchdogGlobals(KernelState& s, mlir::Location l) {
  if (!s.watchdog_record) {
    s.watchdog_record = WatchdogGlobal(s, "kiln_watchdog_record", s.builder.getI64Type(), l);
    s.watchdog_claim = WatchdogGlobal(s, "kiln_watchdog_claim", s.builder.getI32Type(), l);
  }
  return {AddressOf(s, s.watchdog_record, l), AddressOf(s, s.watchdog_claim, l)};
}

std::string WatchdogReportPtx(int site, WatchdogStop stop, const std::string& a,
                              const std::string& b, const std::string& record,
                              const std::string& claim) {
  return absl::StrCat(
      "atom.global.cas.b32 old, [", claim, "], 0, 1;\nsetp.ne.u32 more, old, 0;\n",
      "kiln_lost_${:uid}:\n@more nanosleep.u32 1000000;\n@more bra kiln_lost_${:uid};\n",
      "ld.global.u64 rec, [", record, "];\n",
      "setp.eq.u64 more, rec, 0;\n@more trap;\n",  // launched without a record: stop all the same
      "st.volatile.global.u32 [rec+4], ", site, ";\n", "st.volatile.global.u32 [rec+8], ", a,
      ";\nst.volatile.global.u32 [rec+12], ", b, ";\n",
      "mov.u32 v, %ctaid.x;\nst.volatile.global.u32 [rec+16], v;\n"
      "mov.u32 v, %ctaid.y;\nst.volatile.global.u32 [rec+20], v;\n"
      "mov.u32 v, %ctaid.z;\nst.volatile.global.u32 [rec+24], v;\n"
      "mov.u32 v, %tid.x;\nst.volatile.global.u32 [rec+28], v;\n",
      "membar.sys;\nst.volatile.global.u32 [rec], ", static_cast<int>(stop),
      ";\nmembar.sys;\ntrap;\n");
}

void CheckIndexInDebugMode(KernelState& s, mlir::Value index, int64_t extent, WatchdogStop stop,
                           const Loc& loc) {
  if (s.watchdog_ms <= 0) {
    ++s.runtime_indices_built;
    return;
  }
  mlir::Location l = s.ToLoc(loc);
  auto [record, claim] = WatchdogGlobals(s, l);
  const int site = static_cast<int>(s.manifest.watch_sites.size());
  s.manifest.watch_sites.push_back(LocString(loc));
  const std::string bound = absl::StrCat(extent);
  s.InlineAsm(
      absl::StrCat("{\n.reg .pred more;\n.reg .u64 rec;\n.reg .b32 old, v;\n",
                   "setp.lt.u32 more, $0, ", bound, ";\n@more bra kiln_in_${:uid};\n",
                   WatchdogReportPtx(site, stop, "$0", bound, "$1", "$2"), "kiln_in_${:uid}:\n}"),
      "r,l,l,~{memory}", {index, record, claim}, mlir::Type(), l);
}

}  // namespace kiln::detail
