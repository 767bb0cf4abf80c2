// The GPU debug mode's report (Kernel::Watchdog): the module globals through which a thread that
// stops the launch writes its record, and the PTX that claims the one report, writes it and traps.
// runtime/launch.cc reads the record (WatchdogFields); the emulator runs the same PTX, where no
// record is set up and the trap itself reports, at the DSL line of the check.
#pragma once

#include <string>
#include <utility>

#include "dsl/kernel_state.h"

namespace kiln::detail {

// What stopped the launch: the record's first word (runtime/launch.cc).
enum class WatchdogStop { kWait = 1, kRow = 2, kColumn = 3, kStage = 4 };

// The addresses (i64) of the record's pointer (set by the runtime before each launch) and of the
// word that picks the one thread that reports; the globals are created at the kernel's first use.
std::pair<mlir::Value, mlir::Value> WatchdogGlobals(KernelState& s, mlir::Location l);

// PTX for inside a `{ }` that declares `.reg .pred more; .reg .u64 rec; .reg .b32 old, v;`: claims
// the report through `claim` (other threads sleep until the trap ends the launch), writes site
// `site`, the words `a` and `b` (operand texts), the block and the thread, then `stop`, and traps.
// `record` and `claim` are operand texts of WatchdogGlobals' addresses.
std::string WatchdogReportPtx(int site, WatchdogStop stop, const std::string& a,
                              const std::string& b, const std::string& record,
                              const std::string& claim);

// In the debug mode, a shared tile's run-time index (i32) at or past `extent` (compared unsigned:
// a negative one too) stops the launch with a report naming `loc`; `stop` says row, column or
// stage. Outside it, counts the index (Kernel::Watchdog must come before any).
void CheckIndexInDebugMode(KernelState& s, mlir::Value index, int64_t extent, WatchdogStop stop,
                           const Loc& loc);

}  // namespace kiln::detail
