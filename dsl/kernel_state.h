// The builder's private state: the MLIR context, module and insertion points behind kiln::Kernel.
// Only dsl/ and lowering/ include this header.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/kernel.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace kiln {

// Owns a kernel's MLIR context and module once built.
struct KernelDef::Module {
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

namespace detail {

// Name of the dynamic shared memory symbol every kernel addresses its smem tiles from.
inline constexpr const char* kSmemSymbol = "kiln_smem";

struct KernelState {
  KernelState(std::string name, const Target& target, rt::Dim3 block, const Loc& loc);
  ~KernelState();
  // A kernel state's storage is never handed back to the allocator (a few KB a kernel; its
  // members are freed): a handle's plain pointer then names one kernel for the
  // process's life, and a new kernel never takes a gone one's address (IsBuilding).
  static void* operator new(size_t bytes);
  static void operator delete(void* p) noexcept;
  KernelState(const KernelState&) = delete;
  KernelState& operator=(const KernelState&) = delete;

  // An op's location; one inside kiln's own sources (an op a library call builds for its caller)
  // reads as the newest line of the user's that ToLoc saw, the call that built it (UserLoc), so
  // line tables and messages name the user's line, not the library's.
  mlir::Location ToLoc(const Loc& loc);
  void Fail(const std::string& message, const Loc& loc);
  const Loc& UserLoc(const Loc& loc);

  // Value table: kiln::Value holds an index into it. Unwrap of an empty Value, or of one another
  // kernel made, fails the build (at `use`, the op's line, where the caller knows it; else at the
  // empty Value's declaration) and returns a poison of the Value's type.
  Value Wrap(mlir::Value v, Type t);
  mlir::Value Unwrap(const Value& v, std::optional<Loc> use = std::nullopt);
  mlir::Type ToMlir(Type t);
  mlir::Type ToMlir(Scalar s);
  // A placeholder of type t, used after an error so that building can go on.
  Value Poison(Type t, const Loc& loc);

  // Operand -> mlir::Value of the given type (immediates become constants of that type).
  mlir::Value Materialize(const Operand& op, Type t);
  Value Constant(Type t, double v, const Loc& loc);
  // A PTX snippet with side effects (for instructions without an NVVM op that fits); `result`
  // null for none.
  mlir::Value InlineAsm(const std::string& ptx, const std::string& constraints,
                        llvm::ArrayRef<mlir::Value> operands, mlir::Type result, mlir::Location l,
                        bool side_effects = true);
  // The same with several results (a struct unpacked); `side_effects` false lets LLVM move,
  // merge or drop it like arithmetic.
  std::vector<mlir::Value> InlineAsmResults(const std::string& ptx, const std::string& constraints,
                                            llvm::ArrayRef<mlir::Value> operands,
                                            llvm::ArrayRef<mlir::Type> results, mlir::Location l,
                                            bool side_effects = true);
  // A launch-time rule (grid, tensor map dims, schedule table, dynamic smem, requirement): parsed
  // now, and at Build every symbol it names must be an integer parameter (declared before or
  // after). Errors name `loc` and say what the rule was for (`what`, e.g. "grid").
  absl::StatusOr<rt::GridExpr> ParseRule(const std::string& what, const std::string& text,
                                         const Loc& loc);
  // Sets the attributes of kernel argument `index`, keeping one entry per argument.
  void SetArgAttrs(unsigned index, llvm::ArrayRef<mlir::NamedAttribute> attrs);
  // 32-bit shared-space address of a smem pointer (for descriptors and mapa).
  mlir::Value SharedAddress32(mlir::Value smem_ptr, mlir::Location l);

  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::OpBuilder builder;         // the body's insertion point
  mlir::OpBuilder alloca_builder;  // allocas go at the end of the entry block
  mlir::LLVM::LLVMFuncOp func;
  std::vector<mlir::Value> values;
  std::vector<int> value_loops;  // by value: the innermost loop body that made it (0: none)
  std::vector<Type> value_types;
  std::vector<mlir::Value> reg_arrays;  // llvm.alloca results
  std::vector<Type> reg_types;

  Target target;
  rt::Manifest manifest;
  Loc kernel_loc;
  Loc last_loc;  // the newest location ToLoc saw: where a Value of another kernel is reported
  std::optional<Loc> last_user_loc;  // the newest location outside kiln's own sources
  int smem_top = 0;                  // bytes planned so far
  int deepest_ring =
      1;  // the most stages of any shared-memory ring or pipeline (manifest attribute "ring")
  std::optional<Loc> smem_dynamic_at;  // where SmemDynamic closed the plan
  std::optional<std::string> error;
  // Whole-kernel checks run by Build() (e.g. a pipeline consumed but never produced).
  std::vector<std::function<void()>> final_checks;
  // Tensor memory: where each allocation (by its smem slot) is allocated and whether it is freed.
  struct TmemAllocation {
    int slot, columns;
    Loc loc;
  };
  std::vector<TmemAllocation> tmem_allocs;
  std::vector<int> tmem_frees;
  // Roles that set their registers (setmaxnreg): first thread, threads, registers, where.
  struct RegisterRole {
    int first_thread, threads, max_regs;
    Loc loc;
  };
  std::vector<RegisterRole> register_roles;
  int min_blocks_per_sm = 1;  // MinBlocksPerSm: the block's share of the SM's registers
  // The If/For/While bodies being built now (their lambdas running): an op of a handle that
  // names no kernel, inside another kernel's body, is meant for that kernel (OwnerOfOp).
  int open_bodies = 0;
  // Around a user body (For, While, If, a role): once it returns, the user line is the
  // construct's again, so that what the construct builds after it names its own line.
  struct BodyOpen {
    explicit BodyOpen(KernelState& s) : s(s), user_loc(s.last_user_loc) { ++s.open_bodies; }
    ~BodyOpen() {
      --s.open_bodies;
      s.last_user_loc = user_loc;
    }
    KernelState& s;
    std::optional<Loc> user_loc;
  };
  // What each thread gets at launch: the block's share of 64K registers, in steps of 8.
  int LaunchRegs() const {
    return std::min(255,
                    65536 / min_blocks_per_sm / static_cast<int>(manifest.block.count()) / 8 * 8);
  }
  // The static transaction-byte check: for each barrier (array and index) in each loop body, the
  // bytes expect_tx announces must be the bytes the TMA loads completing on it deliver.
  struct TxRecord {
    int array;
    std::string index;
    int64_t bytes;
    bool announced;  // expect_tx (else a TMA load's box)
    Loc loc;
    int loop;  // the innermost For/While body (0: none)
  };
  std::vector<TxRecord> tx_records;
  // The static arrival check (protocol_check.cc): mbarrier inits and the ops that arrive on them
  // (arrive, expect_tx, remote arrives, tcgen05.commit), each counted once per thread that runs
  // it; the ifs around an op say which threads those are.
  struct ArrivalRecord {
    int array;
    std::string index;
    int expected;         // an Init's count; 0 for an arrival
    mlir::Operation* op;  // the arriving (or initialising) op
    Loc loc;
    bool remote =
        false;  // on a cluster peer's barrier (mapa): one CTA's, or all of them, may land on one
    int phases = 1;  // an Init's PhasesPerRound: phases the kernel means to complete a round
  };
  std::vector<ArrivalRecord> arrival_records;
  // Records the op just built (the one before the insertion point).
  void RecordArrival(int array, const std::string& index, int expected, const Loc& loc,
                     bool remote = false);
  // The static reuse check (protocol_check.cc): TMA loads into shared memory, and the ops that
  // make a thread wait (mbarrier waits, CTA and cluster barriers).
  struct WaitRecord {
    mlir::Operation* op;
    int array = -1;  // the mbarrier waited on or completed (-1: a CTA or cluster barrier)
    std::string index;
    Loc loc;
  };
  std::vector<WaitRecord> tma_loads, waits;
  // Ops whose effect reaches other CTAs' barriers (multicast and CTA-pair TMA loads: `array` the
  // barrier they complete on), and the cluster barriers (ClusterSync): a cluster's Inits must
  // precede its first such op with a cluster barrier between (ClusterInitFindings).
  std::vector<WaitRecord> cross_cta_loads, cluster_syncs;
  std::optional<Loc> cluster_dims_at;  // the ClusterDims call, once made
  int cluster_arrives = 0;  // ClusterArrive calls built so far (a ClusterWait needs one before it)
  // The static tcgen05 fence check (protocol_check.cc): the ops that read or write tensor memory
  // (tcgen05.mma, .ld, .st; `index` names which), each to follow a wait only through a
  // tcgen05.fence::after_thread_sync.
  std::vector<WaitRecord> tmem_uses;
  mlir::Operation* LastOp() const;  // the op just built, or null
  std::vector<int> loop_stack{0};
  // Value::operator=: `from` made in the current loop body overwrites `to` made before it.
  void CheckAssignInLoop(int to, int from);
  int next_loop = 1;
  std::vector<std::string> findings;  // what the static checks found (KernelDef::findings)
  // wgmma accumulators in flight, in program order as built: the register arrays (and the
  // wgmma's line) of the open group and of each committed group not yet waited for, oldest
  // first. Reading one is an error at the read (the wgmma builders themselves are exempt).
  std::vector<std::pair<int, Loc>> wgmma_open;
  std::vector<std::vector<std::pair<int, Loc>>> wgmma_groups;
  bool emitting_wgmma = false;
  // Register arrays made by WgmmaAcc, and those of them other code wrote since the last
  // WgmmaFence. The fence ties the latter's registers as its inline asm's operands, so that LLVM
  // places the writes (and the copies it makes of a value shared by several accumulator
  // registers, as zeros) before the fence, as the PTX ISA asks.
  std::vector<bool> wgmma_acc_arrays;
  std::vector<int> acc_written_since_fence;
  // (WgmmaAcc's own zeros are not tied: a fresh accumulator's first wgmma takes accumulate =
  // false, which reads none of them; docs/DSL.md.)
  void NoteAccumulatorWrite(int array) {
    if (emitting_wgmma || array >= static_cast<int>(wgmma_acc_arrays.size()) ||
        !wgmma_acc_arrays[array])
      return;
    if (std::find(acc_written_since_fence.begin(), acc_written_since_fence.end(), array) ==
        acc_written_since_fence.end())
      acc_written_since_fence.push_back(array);
  }
  // The cta_group of the kernel's tcgen05 ops (0: none yet) and where it was first used.
  int tcgen_group = 0;
  Loc tcgen_group_loc;
  // GroupReduce's named barriers: each group size gets its own ids (first id by size), so that a
  // group of one size never meets a group of another at one id with another thread count.
  std::map<int, int> group_barrier_base;
  int next_group_barrier = 1;
  // The kernel's own NamedBarrier ids given as constants (first use), which GroupReduce's must not
  // meet (checked at Build: either may come first).
  std::map<int, Loc> own_barrier_ids;
  // The 16-bit type an ldmatrix register was loaded from (a tile of bf16 or f16), so that an mma
  // reading it as the other type is an error (the registers themselves are untyped b32).
  llvm::DenseMap<mlir::Value, std::pair<Scalar, Loc>> ldmatrix_elem;
  // The GPU debug mode (Kernel::Watchdog): the time limit of every mbarrier wait (0: off), the
  // module globals its waits report through, and how many waits were built (before and after).
  int watchdog_ms = 0;
  mlir::LLVM::GlobalOp watchdog_record, watchdog_claim;
  int waits_built = 0;
  int runtime_indices_built = 0;  // shared tile indices computed at run time (At, Stage)
};

// What the static protocol checks find (protocol_check.cc), for KernelDef::findings: arrival
// counts against the Init, and TMA loads in a loop that no wait orders after the last reads.
std::vector<std::string> ArrivalFindings(const KernelState& s);
std::vector<std::string> ReuseFindings(const KernelState& s);
std::vector<std::string> FenceFindings(const KernelState& s);
std::vector<std::string> ClusterInitFindings(const KernelState& s);

// Records that a tcgen05 op (or a .cta_group TMA) of `cta_group` is used at `loc`; fails there if
// the kernel already uses the other group (they do not mix in one kernel). In tcgen05.cc.
bool UseTcgenGroup(KernelState& s, int cta_group, const Loc& loc);

// Where the newest empty Value whose type an op read was declared (ops check types before they
// use a value, so the type check's error is reported as the empty Value's).
std::optional<Loc>& EmptyValueRead();
// Where operators between C++ numbers only were (arith.cc: NumbersOnly), as "file:line".
std::set<std::string>& NumbersOnlyOperations();

// The kernels being built: constructed, neither built nor destroyed (on any thread). A handle
// (Value, SmemTile, Barrier, ...) keeps a plain pointer to its kernel's state, which Build hands
// over (its MLIR context goes to the KernelDef) and the Kernel's destructor frees: a handle of such
// a kernel is not dereferenced. The constructor starts, Build and the destructor end.
void StartBuilding(KernelState* s);
void EndBuilding(KernelState* s);
bool IsBuilding(const KernelState* s);
// `s` where it is null (an empty handle) or a kernel being built. Otherwise (a handle of a kernel
// already built or destroyed) a state that can absorb the op: the newest kernel this thread is
// building, failed at its newest line with a message naming `what` and `made` (the handle's own
// line, where known), or where there is none, a kernel of nobody's (the message on stderr).
KernelState* Usable(KernelState* s, const char* what, const Loc* made = nullptr);
// The same for a handle whose methods need a kernel: an empty one (null `s`) is reported as such.
KernelState& Owner(KernelState* s, const char* what, const Loc* made = nullptr);
// Owner, for a handle whose op names no kernel (Barrier's Init, Arrive, Wait): written inside the
// body of another kernel's If, For or While (and none of the owner's), the op is meant for that
// kernel, which fails at `use` (a handle of another kernel), rather than building into the owner
// without a word. Elsewhere it builds into the owner.
KernelState& OwnerOfOp(KernelState* s, const char* what, const Loc& use);
// Fails `s` at `loc` unless `name` is an identifier no parameter of the kernel has yet.
void CheckParamName(KernelState& s, const std::string& name, const Loc& loc);

// Friend access to the private fields of the public handle types.
struct Access {
  static KernelState* State(const Value& v) { return Usable(v.state_, "Value"); }
  static KernelState* RawState(const Value& v) { return v.state_; }
  static Value Make(KernelState* s, int id, Type t) {
    Value v;
    v.state_ = s, v.id_ = id, v.type_ = t;
    return v;
  }
  static int Id(const Value& v) { return v.id_; }
  static const Loc& Declared(const Value& v) { return v.declared_; }
  static const Type& TypeOf(const Value& v) { return v.type_; }  // without noting an empty read
  static bool IsImm(const Operand& o) { return o.is_imm_; }
  static bool IsFloatImm(const Operand& o) { return o.is_float_imm_; }
  static double Imm(const Operand& o) { return o.imm_; }
  static const Value& Val(const Operand& o) { return o.value_; }
  static KernelState* State(const Kernel& k) { return Usable(k.state_.get(), "Kernel"); }
  static int BarrierArray(const Barrier& b) { return b.array_; }
  static const std::string& BarrierIndex(const Barrier& b) { return b.index_; }
  static KernelState* State(const SmemTile& t) { return Usable(t.state_, "SmemTile", &t.loc_); }
};

}  // namespace detail
}  // namespace kiln
