// kiln's kernel builder: a C++ program that describes one GPU kernel. Every op records the
// caller's source line; mistakes are collected and returned by Kernel::Build() as an
// absl::Status naming that line. This header includes no MLIR header: the builder's state lives
// behind a pointer (dsl/kernel_state.h).
//
// The public API by concern, each header beside the dsl/*.cc that builds it (a class in brackets
// is a part of Kernel: its ops are called as k.Op(...)):
//   kiln/value.h       types, values, arithmetic                      dsl/arith.cc
//   kiln/kernel.h      parameters, launch rules, ids, control, Build  dsl/kernel.cc
//   kiln/memory.h      registers, shared tiles, syncs (MemoryOps)     dsl/memory.cc
//   kiln/memory_ops.h  global loads/stores, atomics                   dsl/memory_ops.cc
//   kiln/math.h        special functions, conversions                 dsl/math.cc
//   kiln/warp.h        shuffles and reductions                        dsl/warp.cc
//   kiln/rows.h        row ops over accumulator tiles                 dsl/rows.cc
//   kiln/ampere.h      ldmatrix, cp.async, mma.sync (AmpereOps)       dsl/ampere.cc, tensor_core.cc
//   kiln/hopper.h      TMA, mbarriers, wgmma (HopperOps)              dsl/async.cc, dsl/wgmma.cc
//   kiln/tcgen05.h     tensor memory, tcgen05 (BlackwellOps)          dsl/tcgen05.cc
//   kiln/pipeline.h    rings of stages (Pipeline)                     dsl/pipeline.cc
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/ampere.h"
#include "kiln/bundle/manifest.h"
#include "kiln/hopper.h"
#include "kiln/memory.h"
#include "kiln/memory_ops.h"
#include "kiln/target.h"
#include "kiln/tcgen05.h"
#include "kiln/value.h"

namespace kiln {

// A schedule table parameter (see rt::ScheduleTableParam): a tiles_m x tiles_n grid of tiles,
// each a rule of the integer parameters (e.g. "M/256"), dealt to `groups` CTA groups of `slots`.
// With `split` (an integer parameter declared before it) a work table of units of (tile, k
// range) instead, each tile's K being `k_tiles` k-tiles (e.g. "K/64"): rt::WorkSchedule.
struct ScheduleTable {
  std::string tiles_m, tiles_n;
  int groups = 1, slots = 1;
  std::string k_tiles = "", split = "";
};

// What a finished kernel is: the manifest plus the MLIR module (opaque here).
class KernelDef {
 public:
  struct Module;  // defined in dsl/kernel_state.h
  KernelDef(rt::Manifest manifest, Target target, std::shared_ptr<Module> module);
  const rt::Manifest& manifest() const { return manifest_; }
  const Target& target() const { return target_; }
  Module& module() const { return *module_; }
  // What the static checks found (kiln check): each a line naming the kernel's source line.
  const std::vector<std::string>& findings() const { return findings_; }

 private:
  friend class Kernel;
  rt::Manifest manifest_;
  Target target_;
  std::shared_ptr<Module> module_;
  std::vector<std::string> findings_;
};

// The builder. Its ops are grouped by concern into the classes it derives from, each declared in
// the header of its concern: MemoryOps (kiln/memory.h), AmpereOps (kiln/ampere.h), HopperOps
// (kiln/hopper.h), BlackwellOps (kiln/tcgen05.h); this class holds parameters, launch rules,
// ids, control flow and Build().
class Kernel : public MemoryOps, public AmpereOps, public HopperOps, public BlackwellOps {
 public:
  Kernel(std::string name, const Target& target, rt::Dim3 block, Loc loc = Loc::current());
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const Target& target() const;

  // ---- parameters (in declaration order) and launch rules (dsl/kernel.cc)
  Value PtrParam(const std::string& name, Scalar elem, Loc loc = Loc::current());
  Value I32Param(const std::string& name, Loc loc = Loc::current());
  Value I64Param(const std::string& name, Loc loc = Loc::current());
  Value F32Param(const std::string& name, Loc loc = Loc::current());
  // A global i32 table the launcher builds on the host (a Hilbert tile order).
  Value ScheduleTableParam(const std::string& name, const ScheduleTable& spec,
                           Loc loc = Loc::current());
  // Global scratch memory of `elem`s the launcher allocates and keeps (rt::WorkspaceParam):
  // `bytes_per_partial` for each partial slot of the work table parameter `table`, zeroed once;
  // with `table` "", `bytes_per_partial` in all (a counter of tiles handed out).
  Value WorkspaceParam(const std::string& name, Scalar elem, const std::string& table,
                       int64_t bytes_per_partial, Loc loc = Loc::current());
  // Grid dims as rules of the integer parameters, e.g. Grid("N/128", "M/128") or Grid("rows/16").
  void Grid(const std::string& x, const std::string& y = "1", const std::string& z = "1",
            Loc loc = Loc::current());
  // A launch rule: integer parameter `name` must be a multiple of `multiple` (e.g. the tile).
  // Every launch checks it and names this line when it fails.
  void RequireMultiple(const std::string& name, int64_t multiple, Loc loc = Loc::current());
  // A launch rule: integer parameter `name` must be at most `most` (what one CTA's tile holds,
  // say), checked and named as RequireMultiple's.
  void RequireAtMost(const std::string& name, int64_t most, Loc loc = Loc::current());
  // Attaches `value` to the manifest under `key`, for a harness or tool to read (the runtime does
  // not; the emulator reads "writes_part": the parameters a launch may write in part by design,
  // comma-separated, which emu::Stats::partly_written leaves out).
  void Attribute(const std::string& key, const std::string& value, Loc loc = Loc::current());

  // ---- constants and ids (dsl/kernel.cc)
  Value I32(int64_t v, Loc loc = Loc::current());
  Value F32(double v, Loc loc = Loc::current());
  Value ThreadIdx(int axis = 0, Loc loc = Loc::current());
  Value BlockIdx(int axis = 0, Loc loc = Loc::current());
  Value BlockDim(int axis = 0, Loc loc = Loc::current());
  Value GridDim(int axis = 0, Loc loc = Loc::current());
  Value LaneId(Loc loc = Loc::current());
  Value WarpId(Loc loc = Loc::current());       // threadIdx.x / 32
  Value WarpgroupId(Loc loc = Loc::current());  // threadIdx.x / 128
  // Clusters (sm_90+): %cluster_ctarank and %clusterid.
  Value ClusterCtaRank(Loc loc = Loc::current());
  Value ClusterIdx(int axis = 0, Loc loc = Loc::current());
  // Launches in clusters of these dims (sm_90+); recorded in the manifest and the PTX.
  // The second __launch_bounds__ argument (.minnctapersm): with 1, ptxas may use all 255
  // registers per thread instead of capping them for an occupancy it guesses. Roles' setmaxnreg
  // (Role) move registers within the block's launch share (65536 / blocks / threads a thread, in
  // steps of 8); call it before them.
  void MinBlocksPerSm(int blocks, Loc loc = Loc::current());
  void ClusterDims(rt::Dim3 dims, Loc loc = Loc::current());

  // ---- control flow (dsl/kernel.cc)
  // while (cond()) body(): cond is built once, evaluated before every iteration.
  void While(const std::function<Value()>& cond, const std::function<void()>& body,
             Loc loc = Loc::current());
  // for (i = lo; i < hi; i += step) body(i): a run-time loop.
  void For(const Operand& lo, const Operand& hi, const Operand& step,
           const std::function<void(Value)>& body, Loc loc = Loc::current());
  void If(const Operand& cond, const std::function<void()>& then, Loc loc = Loc::current());
  // With an else branch. A Value made in either branch lives only there: carry results out with
  // IfElse (or a register array assigned in both branches).
  void If(const Operand& cond, const std::function<void()>& then,
          const std::function<void()>& otherwise, Loc loc = Loc::current());
  // cond ? then() : otherwise(), each branch built as code (unlike Select, only the taken one
  // runs) and returning the value it yields; both yield the same type. The vector form yields
  // several values.
  Value IfElse(const Operand& cond, const std::function<Value()>& then,
               const std::function<Value()>& otherwise, Loc loc = Loc::current());
  std::vector<Value> IfElse(const Operand& cond, const std::function<std::vector<Value>()>& then,
                            const std::function<std::vector<Value>()>& otherwise,
                            Loc loc = Loc::current());

  // The GPU debug mode: every mbarrier wait of this kernel gives up after `ms` milliseconds,
  // writes which wait (its DSL line), the barrier, the phase, the block and the thread to a
  // host-visible record and traps, so a protocol bug ends with a message (from
  // rt::Synchronize) instead of a hang. Every shared tile index computed at run time (At) is
  // checked against the tile's rows and row stride the same way: past them it would land in
  // another tile's bytes. Call it before the kernel's first wait and first At.
  // SetDefaultWatchdog(ms) turns it on for every kernel built afterwards (kiln bundle --watchdog).
  void Watchdog(int ms, Loc loc = Loc::current());

  // Adds an error at `loc` (for helpers built on the builder).
  void Fail(const std::string& message, Loc loc = Loc::current());
  // Whether an error has been added: a builder whose option checks failed returns Build() (the
  // first error) before code that assumes those options.
  bool failed() const;
  // Runs `check` when Build() starts (whole-kernel rules of helpers; it may call Fail).
  void CheckAtBuild(std::function<void()> check);
  // Verifies and returns the kernel, or the first error with the DSL line that caused it.
  absl::StatusOr<KernelDef> Build();

 private:
  absl::StatusOr<KernelDef> BuildOnce();
  friend struct detail::Access;
  std::unique_ptr<detail::KernelState> state_;
};

// Kernel::Watchdog(ms) for every kernel constructed after this call (0: off).
void SetDefaultWatchdog(int ms);
// The kernels constructed under a default watchdog that do not take it (their target is older
// than sm_90: no mbarrier waits to bound), by name, in the order built.
std::vector<std::string> KernelsWithoutTheDefaultWatchdog();

// "file:line" of a source location, as manifests and messages name it: relative to the source root
// (SetSourceRoot, else the environment's KILN_SOURCE_ROOT) or to kiln's own tree when inside one,
// else to the working directory when inside it, else the file's name alone. So a bundle holds no
// absolute path of the machine that built it.
std::string LocString(const Loc& loc);
// The directory a program's own kernels are named relative to (e.g. its CMAKE_SOURCE_DIR).
void SetSourceRoot(const std::string& dir);

}  // namespace kiln

// The ops that are free functions, by concern.
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/rows.h"
#include "kiln/warp.h"
