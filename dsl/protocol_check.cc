// The static protocol checks of `kiln check` (KernelDef::findings).
//
// Arrival counts: for every mbarrier, the threads
// that run each op arriving on it (an arrive, an expect_tx, a remote arrive, a tcgen05.commit)
// against the count its Init expects a phase. Which threads run an op is worked out by evaluating
// the conditions of the ifs around it for every thread of the block: they are usually built from
// the thread index, the lane, constants and elect.sync. Where a condition depends on anything else
// (a loop variable, memory, the CTA's rank in its cluster) the barrier is left to the emulator.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dsl/kernel_state.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln::detail {

mlir::Operation* KernelState::LastOp() const {
  if (!builder.getInsertionBlock() ||
      builder.getInsertionPoint() == builder.getInsertionBlock()->begin())
    return nullptr;
  return &*std::prev(builder.getInsertionPoint());
}

void KernelState::RecordArrival(int array, const std::string& index, int expected, const Loc& loc,
                                bool remote) {
  if (array < 0 || !LastOp()) return;
  arrival_records.push_back({array, index, expected, LastOp(), loc, remote});
}

namespace {

// An integer (or index) type's width; 0 for anything else.
int IntBits(mlir::Type t) {
  return t.isIndex() ? 64 : t.isInteger() ? static_cast<int>(t.getIntOrFloatBitWidth()) : 0;
}

// One thread of the block, and what its conditions evaluate to.
class ThreadEval {
 public:
  ThreadEval(rt::Dim3 block, int linear, class Invariance* invariance = nullptr)
      : block_(block), linear_(linear), invariance_(invariance) {}

  // Whether the thread runs `op`: every if around it takes the branch that holds the op.
  std::optional<bool> Runs(mlir::Operation* op) {
    for (mlir::Operation* child = op; mlir::Operation* parent = child->getParentOp();
         child = parent) {
      auto branch = mlir::dyn_cast<mlir::scf::IfOp>(parent);
      if (!branch) continue;
      const std::optional<uint64_t> cond = Eval(branch.getCondition());
      const bool in_then = branch.getThenRegion().isAncestor(child->getParentRegion());
      if (!cond && invariance_ && InvariantCondition(branch.getCondition()))
        continue;              // all threads or none
      if (!cond && in_then) {  // (a & b) with a part the same in every thread: the rest decides
        const std::optional<bool> holds = HoldsButForUniformParts(branch.getCondition());
        if (!holds) return std::nullopt;
        if (!*holds) return false;
        continue;
      }
      if (!cond) return std::nullopt;
      if ((*cond & 1) != static_cast<uint64_t>(in_then)) return false;
    }
    return true;
  }

  // A condition built with & (DSL.md's way to combine them) whose parts either this thread decides
  // or are the same in every thread (a loop counter, a parameter): false where a part this thread
  // decides is false, true where the others hold (the uniform parts then pick all such threads or
  // none, as a whole-block condition would); nullopt where a part depends on anything else.
  std::optional<bool> HoldsButForUniformParts(mlir::Value cond) {
    if (std::optional<uint64_t> c = Eval(cond)) return (*c & 1) != 0;
    if (auto both = cond.getDefiningOp<mlir::arith::AndIOp>();
        both && IntBits(cond.getType()) == 1) {
      const std::optional<bool> a = HoldsButForUniformParts(both.getLhs()),
                                b = HoldsButForUniformParts(both.getRhs());
      if ((a && !*a) || (b && !*b)) return false;
      if (!a || !b) return std::nullopt;
      return true;
    }
    if (invariance_ && InvariantCondition(cond)) return true;
    return std::nullopt;
  }

  // An integer value's bits (zero-extended from its width), where only the thread decides it.
  std::optional<uint64_t> Eval(mlir::Value v) {
    const int bits = IntBits(v.getType());
    if (!bits) return std::nullopt;
    std::optional<uint64_t> r = Compute(v);
    if (r && bits < 64) *r &= (uint64_t{1} << bits) - 1;
    return r;
  }

 private:
  static int64_t Signed(uint64_t v, int bits) {
    return bits >= 64 ? static_cast<int64_t>(v)
                      : static_cast<int64_t>(v << (64 - bits)) >> (64 - bits);
  }

  std::optional<uint64_t> Compute(mlir::Value v) {
    mlir::Operation* op = v.getDefiningOp();
    if (!op) return std::nullopt;  // a block argument: a loop variable, an if's result
    const int lane = linear_ % 32;
    if (auto c = mlir::dyn_cast<mlir::arith::ConstantOp>(op)) {
      if (auto i = mlir::dyn_cast<mlir::IntegerAttr>(c.getValue()))
        return i.getValue().getZExtValue();
      return std::nullopt;
    }
    if (mlir::isa<mlir::NVVM::ThreadIdXOp>(op)) return linear_ % block_.x;
    if (mlir::isa<mlir::NVVM::ThreadIdYOp>(op)) return linear_ / block_.x % block_.y;
    if (mlir::isa<mlir::NVVM::ThreadIdZOp>(op)) return linear_ / (block_.x * block_.y);
    if (mlir::isa<mlir::NVVM::BlockDimXOp>(op)) return block_.x;
    if (mlir::isa<mlir::NVVM::LaneIdOp>(op)) return lane;
    if (mlir::isa<mlir::NVVM::ElectSyncOp>(op)) {  // the lowest lane of the warp that reaches it
      const int warp0 = linear_ - lane;
      for (int l = 0; l < 32 && warp0 + l < static_cast<int>(block_.count()); ++l) {
        ThreadEval other(block_, warp0 + l);
        std::optional<bool> runs = other.Runs(op);
        if (!runs) return std::nullopt;
        if (*runs) return l == lane ? 1 : 0;
      }
      return 0;
    }
    auto arg = [&](int i) { return Eval(op->getOperand(i)); };
    const int in_bits = op->getNumOperands() ? IntBits(op->getOperand(0).getType()) : 0;
    if (mlir::isa<mlir::arith::ExtUIOp, mlir::arith::TruncIOp, mlir::arith::IndexCastOp,
                  mlir::arith::IndexCastUIOp>(op))
      return arg(0);
    if (mlir::isa<mlir::arith::ExtSIOp>(op)) {
      std::optional<uint64_t> a = arg(0);
      if (!a) return std::nullopt;
      return static_cast<uint64_t>(Signed(*a, in_bits));
    }
    if (auto sel = mlir::dyn_cast<mlir::arith::SelectOp>(op)) {
      std::optional<uint64_t> c = Eval(sel.getCondition());
      if (!c) return std::nullopt;
      return Eval(*c & 1 ? sel.getTrueValue() : sel.getFalseValue());
    }
    if (op->getNumOperands() != 2) return std::nullopt;
    std::optional<uint64_t> a = arg(0), b = arg(1);
    if (!a || !b) return std::nullopt;
    const int64_t sa = Signed(*a, in_bits), sb = Signed(*b, in_bits);
    if (auto cmp = mlir::dyn_cast<mlir::arith::CmpIOp>(op)) {
      using P = mlir::arith::CmpIPredicate;
      switch (cmp.getPredicate()) {
        case P::eq:
          return *a == *b;
        case P::ne:
          return *a != *b;
        case P::ult:
          return *a < *b;
        case P::ule:
          return *a <= *b;
        case P::ugt:
          return *a > *b;
        case P::uge:
          return *a >= *b;
        case P::slt:
          return sa < sb;
        case P::sle:
          return sa <= sb;
        case P::sgt:
          return sa > sb;
        case P::sge:
          return sa >= sb;
      }
      return std::nullopt;
    }
    if (mlir::isa<mlir::arith::AddIOp>(op)) return *a + *b;
    if (mlir::isa<mlir::arith::SubIOp>(op)) return *a - *b;
    if (mlir::isa<mlir::arith::MulIOp>(op)) return *a * *b;
    if (mlir::isa<mlir::arith::AndIOp>(op)) return *a & *b;
    if (mlir::isa<mlir::arith::OrIOp>(op)) return *a | *b;
    if (mlir::isa<mlir::arith::XOrIOp>(op)) return *a ^ *b;
    if (mlir::isa<mlir::arith::ShLIOp>(op)) return *b < 64 ? *a << *b : 0;
    if (mlir::isa<mlir::arith::ShRUIOp>(op)) return *b < 64 ? *a >> *b : 0;
    if (mlir::isa<mlir::arith::ShRSIOp>(op))
      return static_cast<uint64_t>(sa >> std::min<int64_t>(sb, 63));
    if (*b == 0) return std::nullopt;  // a division by zero is not this check's to judge
    if (mlir::isa<mlir::arith::DivUIOp>(op)) return *a / *b;
    if (mlir::isa<mlir::arith::RemUIOp>(op)) return *a % *b;
    if (sb == -1 &&
        mlir::isa<mlir::arith::DivSIOp, mlir::arith::RemSIOp>(op))  // wraps, never traps
      return mlir::isa<mlir::arith::DivSIOp>(op) ? uint64_t{0} - *a : 0;
    if (mlir::isa<mlir::arith::DivSIOp>(op)) return static_cast<uint64_t>(sa / sb);
    if (mlir::isa<mlir::arith::RemSIOp>(op)) return static_cast<uint64_t>(sa % sb);
    return std::nullopt;
  }

  bool InvariantCondition(mlir::Value cond);

  rt::Dim3 block_;
  int linear_;
  class Invariance* invariance_;
};

// Whether a value is the same in every thread of the block: built by pure ops from constants,
// kernel parameters, the block's, grid's and cluster's ids and sizes, loop variables of loops
// with such bounds, and registers (allocas) whose every store stores such a value under such
// conditions. The thread's and lane's ids, elect.sync, the clocks and memory other than
// registers are not. A condition the evaluation cannot compute but that is the same in every
// thread (a size parameter, a loop count) lets all the block's threads through or none, so the
// threads that run an arrival under it are those the other conditions pick.
class Invariance {
 public:
  bool Of(mlir::Value v) {
    // Shared subexpressions once. A "yes" found while a register is assumed invariant (below) holds
    // only if that register is, so it is kept only when no assumption is pending; a "no" always.
    if (auto it = values_.find(v.getAsOpaquePointer()); it != values_.end()) return it->second;
    const bool invariant = Compute(v);
    if (!invariant || pending_ == 0) values_[v.getAsOpaquePointer()] = invariant;
    return invariant;
  }

  // Whether every thread reaches `op` under the same conditions: the ifs around it and the bounds
  // of the loops around it are the same in every thread.
  bool ControlOf(mlir::Operation* op) {
    for (mlir::Operation* parent = op->getParentOp(); parent; parent = parent->getParentOp()) {
      if (auto branch = mlir::dyn_cast<mlir::scf::IfOp>(parent);
          branch && !Of(branch.getCondition()))
        return false;
      if (auto loop = mlir::dyn_cast<mlir::scf::ForOp>(parent);
          loop && !(Of(loop.getLowerBound()) && Of(loop.getUpperBound()) && Of(loop.getStep())))
        return false;
      if (auto loop = mlir::dyn_cast<mlir::scf::WhileOp>(parent);
          loop && !Of(loop.getConditionOp().getCondition()))
        return false;
    }
    return true;
  }

 private:
  bool Compute(mlir::Value v) {
    if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v)) return OfArgument(arg);
    mlir::Operation* op = v.getDefiningOp();
    const llvm::StringRef name = op->getName().getStringRef();
    if (name.starts_with("nvvm.read.ptx.sreg.")) {
      const llvm::StringRef sreg = name.drop_front(strlen("nvvm.read.ptx.sreg."));
      return !(sreg.starts_with("tid.") || sreg == "laneid" || sreg == "warpid" ||
               sreg.starts_with("clock") || sreg.starts_with("globaltimer") ||
               sreg.starts_with("lanemask"));
    }
    if (auto load = mlir::dyn_cast<mlir::LLVM::LoadOp>(op)) return OfRegister(load.getAddr());
    if (!mlir::isPure(op) || op->getNumRegions() ||
        mlir::isa<mlir::NVVM::NVVMDialect>(op->getDialect()))
      return false;
    for (mlir::Value operand : op->getOperands())
      if (!Of(operand)) return false;
    return true;
  }

  bool OfArgument(mlir::BlockArgument arg) {
    mlir::Operation* owner = arg.getOwner()->getParentOp();
    if (!owner) return false;
    if (mlir::isa<mlir::LLVM::LLVMFuncOp>(owner)) return true;  // a kernel parameter
    if (auto loop = mlir::dyn_cast<mlir::scf::ForOp>(owner); loop && arg == loop.getInductionVar())
      return Of(loop.getLowerBound()) && Of(loop.getStep());
    return false;  // loop-carried values and anything else: not followed
  }

  // A load's address: a register (an alloca, directly or at an invariant element) is invariant
  // where all its stores are. While its stores are read it is assumed invariant, so that a
  // register that only ever stores values computed from itself and invariants stays invariant.
  bool OfRegister(mlir::Value addr) {
    if (auto gep = addr.getDefiningOp<mlir::LLVM::GEPOp>()) {
      for (mlir::Value index : gep.getDynamicIndices())
        if (!Of(index)) return false;
      addr = gep.getBase();
    }
    auto alloca = addr.getDefiningOp<mlir::LLVM::AllocaOp>();
    if (!alloca) return false;
    auto [it, fresh] =
        registers_.try_emplace(alloca.getOperation(), true);  // assumed while its stores are read
    if (!fresh) return it->second;
    ++pending_;
    bool invariant = true;
    std::vector<mlir::Value> pointers = {alloca.getResult()};
    for (size_t i = 0; i < pointers.size() && invariant; ++i)
      for (mlir::Operation* user : pointers[i].getUsers()) {
        if (auto gep = mlir::dyn_cast<mlir::LLVM::GEPOp>(user)) {
          pointers.push_back(gep.getResult());
        } else if (auto store = mlir::dyn_cast<mlir::LLVM::StoreOp>(user)) {
          invariant = store.getAddr() == pointers[i] && Of(store.getValue()) && ControlOf(store);
        } else if (!mlir::isa<mlir::LLVM::LoadOp>(user)) {
          invariant = false;  // passed on (inline asm, a call): not followed
        }
        if (!invariant) break;
      }
    --pending_;
    if (!invariant || pending_ == 0)
      registers_[alloca.getOperation()] = invariant;
    else
      registers_.erase(alloca.getOperation());  // rests on an outer register's assumption
    return invariant;
  }

  std::map<mlir::Operation*, bool> registers_;
  std::map<const void*, bool> values_;
  int pending_ = 0;  // registers assumed invariant while their stores are read
};

bool ThreadEval::InvariantCondition(mlir::Value cond) { return invariance_->Of(cond); }

// How many threads of the block run `op`, or nothing when a condition around it is not the
// thread's alone. A condition that is the same in every thread is taken as holding.
std::optional<int> ThreadsRunning(mlir::Operation* op, rt::Dim3 block, Invariance& invariance) {
  int n = 0;
  for (int t = 0; t < static_cast<int>(block.count()); ++t) {
    std::optional<bool> runs = ThreadEval(block, t, &invariance).Runs(op);
    if (!runs) return std::nullopt;
    n += *runs ? 1 : 0;
  }
  return n;
}

// Whether two ops never both run in one pass: they lie in different branches of one if.
bool Exclusive(mlir::Operation* a, mlir::Operation* b) {
  for (mlir::Operation* p = a->getParentOp(); p; p = p->getParentOp()) {
    auto branch = mlir::dyn_cast<mlir::scf::IfOp>(p);
    if (!branch || !branch->isProperAncestor(b)) continue;
    const bool a_then = branch.getThenRegion().isAncestor(a->getParentRegion());
    const bool b_then = branch.getThenRegion().isAncestor(b->getParentRegion());
    if (a_then != b_then) return true;
  }
  return false;
}

// The innermost loop around an op (null: none): its body is the op's round.
mlir::Operation* RoundOf(mlir::Operation* op) {
  for (mlir::Operation* p = op->getParentOp(); p; p = p->getParentOp())
    if (mlir::isa<mlir::scf::ForOp, mlir::scf::WhileOp>(p)) return p;
  return nullptr;
}

// How many of these arrival sites complete a phase in one round: the most that share a loop
// body and lie in no exclusive branches of one another.
int SitesInOneRound(const std::vector<mlir::Operation*>& sites) {
  std::map<mlir::Operation*, std::vector<mlir::Operation*>> by_round;
  int most = 0;
  for (mlir::Operation* op : sites) {
    std::vector<mlir::Operation*>& counted = by_round[RoundOf(op)];
    if (std::none_of(counted.begin(), counted.end(),
                     [&](mlir::Operation* c) { return Exclusive(c, op); }))
      counted.push_back(op);
    most = std::max(most, static_cast<int>(counted.size()));
  }
  return most;
}

}  // namespace

std::vector<std::string> ArrivalFindings(const KernelState& s) {
  using Record = KernelState::ArrivalRecord;
  std::map<int, std::vector<const Record*>> inits, arrivals;  // by barrier array
  for (const Record& r : s.arrival_records) (r.expected ? inits : arrivals)[r.array].push_back(&r);
  std::vector<std::string> findings;
  Invariance invariance;
  for (const auto& [array, sites] : arrivals) {
    if (!inits.count(array)) continue;
    // The count a phase expects: the array's one count, or, where its barriers differ, the
    // count of the barrier an arrival names by a constant index.
    auto expected_for = [&](const Record& arrival) -> const Record* {
      const std::vector<const Record*>& mine = inits.at(array);
      bool uniform = true;
      for (const Record* i : mine) uniform &= i->expected == mine.front()->expected;
      if (uniform) return mine.front();
      for (const Record* i : mine)
        if (i->index == arrival.index) return i;
      return nullptr;
    };
    // Group the arrivals by the barrier they reach: the init they answer to and their index.
    std::map<std::pair<const Record*, std::string>, std::vector<std::pair<const Record*, int>>>
        by_barrier;
    bool known = true;
    for (const Record* a : sites) {
      const Record* init = expected_for(*a);
      std::optional<int> n = ThreadsRunning(a->op, s.manifest.block, invariance);
      if (!init || !n) {
        known = false;
        break;
      }
      by_barrier[{init, a->index}].push_back({a, *n});
    }
    if (!known) continue;
    const int cluster = static_cast<int>(s.manifest.cluster.count());
    for (const auto& [key, counted] : by_barrier) {
      const Record* init = key.first;
      const int want = init->expected, stated = init->phases;
      // A remote arrival reaches one peer per thread (n a barrier, by symmetry) or every CTA's
      // threads reach one barrier (n * cluster): either may be meant.
      std::vector<std::vector<int>> options;
      std::vector<std::string> where;
      bool too_many = false;  // said for its site; the phase-sum finding would say it again
      for (const auto& [a, n] : counted) {
        options.push_back(a->remote && cluster > 1 ? std::vector<int>{n, n * cluster}
                                                   : std::vector<int>{n});
        where.push_back(absl::StrCat(LocString(a->loc), " (", n, n == 1 ? " thread" : " threads",
                                     a->remote ? ", remote)" : ")"));
        if (n <= want || (n % want == 0 && n / want == stated)) continue;
        too_many = true;
        // A few phases at once can be a design (a pair of stages a round); a warp's or a
        // warpgroup's worth is an arrival missing its If on the thread index.
        const bool few_phases = n % want == 0 && n / want <= 4;
        findings.push_back(absl::StrCat(
            LocString(a->loc), ": ", n, " threads arrive here on an mbarrier initialised at ",
            LocString(init->loc), " for ", want,
            " arrivals a phase: more arrivals than a phase expects",
            few_phases ? absl::StrCat(" (they complete ", n / want,
                                      " phases at once; if meant, say so: Init(", want,
                                      ", PhasesPerRound{", n / want, "}))")
                       : absl::StrCat(" (to have ", want, want == 1 ? " thread" : " threads",
                                      " arrive, put the arrival in an If on the thread index; ",
                                      "or Init the mbarrier for ", n, ")")));
      }
      // Fine when some reading has all sites add up to the phases a round the kernel states, or
      // has every site complete a phase alone (or not run) where no two of them run in one round
      // (exclusive branches), or as many of them as the kernel states.
      bool fine = false, any_runs = false;
      int phases_seen = 0;  // the phases a round of the closest reading, for the message
      for (size_t pick = 0; pick < (size_t{1} << options.size()) && !fine; ++pick) {
        int sum = 0;
        bool each = true;
        std::vector<mlir::Operation*> running;
        for (size_t i = 0; i < options.size(); ++i) {
          const int n = options[i][options[i].size() > 1 ? (pick >> i & 1) : 0];
          sum += n, each &= n == want || n == 0, any_runs |= n > 0;
          if (n > 0) running.push_back(counted[i].first->op);
        }
        const int together = SitesInOneRound(running);
        fine = sum == want * stated || (each && sum > 0 && (together == 1 || together == stated));
        if (each && together > 1) phases_seen = together;
      }
      if (!any_runs)
        findings.push_back(absl::StrCat(
            LocString(init->loc), ": no thread of the block runs an arrival on this mbarrier (",
            absl::StrJoin(where, ", "), "): its phases never complete"));
      else if (!fine && !too_many && phases_seen > 1)
        findings.push_back(absl::StrCat(
            LocString(init->loc), ": the mbarrier expects ", want, " arrivals a phase and ",
            absl::StrJoin(where, ", "), " each complete one in the same round: ", phases_seen,
            " phases a round, so a waiter that counts one falls behind (if meant, say so: Init(",
            want, ", PhasesPerRound{", phases_seen, "}))"));
      else if (!fine && !too_many)
        findings.push_back(absl::StrCat(
            LocString(init->loc), ": the mbarrier expects ", want,
            " arrivals a phase, but its arrivals come from ", absl::StrJoin(where, ", "),
            ", which neither complete a phase each nor add up to ", want));
    }
  }
  // Barriers waited on that no Init sets up, or that no site arrives on (the loop above sees only
  // arrays with arrivals): the first wait never sees a phase it can count on, or none completes.
  std::map<int, const KernelState::WaitRecord*> first_wait;
  for (const KernelState::WaitRecord& w : s.waits)
    if (w.array >= 0) first_wait.emplace(w.array, &w);
  for (const auto& [array, w] : first_wait) {
    if (!inits.count(array))
      findings.push_back(absl::StrCat(LocString(w->loc),
                                      ": this waits on an mbarrier that no Init sets up (the "
                                      "array's barriers are never initialised: bar.Init(count))"));
    else if (!arrivals.count(array))
      findings.push_back(absl::StrCat(
          LocString(inits.at(array).front()->loc),
          ": nothing arrives on this mbarrier (no Arrive, ArriveExpectTx, remote arrive or "
          "tcgen05.commit names its array), yet ",
          LocString(w->loc), " waits on it: its phases never complete"));
  }
  return findings;
}

namespace {

// The op's ancestor in the kernel function's body (the op itself at top level).
mlir::Operation* TopLevel(mlir::Operation* op) {
  while (op->getParentOp() && op->getParentOp()->getParentOp() &&
         !mlir::isa<mlir::ModuleOp>(op->getParentOp()->getParentOp()))
    op = op->getParentOp();
  return op;
}

}  // namespace

// A cluster's barriers: an Init runs in its own CTA, and a peer's multicast load or remote
// arrival may reach that barrier as soon as the peer gets there. So between a barrier's Inits
// and the first op that reaches it from another CTA, every CTA must pass a cluster barrier
// (ClusterSync): a CTA's own SyncThreads orders nothing for its peers. Judged on the kernel's
// top-level ops (the Inits, the cluster barriers and the uses inside them); a use in the same
// top-level op as a ClusterSync is left to the emulator.
std::vector<std::string> ClusterInitFindings(const KernelState& s) {
  std::vector<std::string> findings;
  if (s.manifest.cluster.count() < 2) return findings;
  std::vector<KernelState::WaitRecord> uses = s.cross_cta_loads;
  for (const KernelState::ArrivalRecord& r : s.arrival_records)
    if (r.remote) uses.push_back({r.op, r.array, r.index, r.loc});
  std::set<int> said;
  for (const KernelState::WaitRecord& use : uses) {
    if (!use.op || use.array < 0 || said.count(use.array)) continue;
    mlir::Operation* use_top = TopLevel(use.op);
    for (const KernelState::ArrivalRecord& init : s.arrival_records) {
      if (!init.expected || init.array != use.array || !init.op) continue;
      mlir::Operation* init_top = TopLevel(init.op);
      if (init_top == use_top || use_top->isBeforeInBlock(init_top) ||
          init_top->getBlock() != use_top->getBlock())
        continue;  // (not ordered at the top level: left to the emulator)
      bool synced = false;
      for (const KernelState::WaitRecord& sync : s.cluster_syncs) {
        if (!sync.op) continue;
        mlir::Operation* sync_top = TopLevel(sync.op);
        synced |= sync_top->getBlock() == use_top->getBlock() &&
                  (sync_top == use_top ||
                   (init_top->isBeforeInBlock(sync_top) && sync_top->isBeforeInBlock(use_top)));
      }
      if (synced) continue;
      said.insert(use.array);
      findings.push_back(absl::StrCat(
          LocString(use.loc), ": this reaches other CTAs' mbarriers (initialised at ",
          LocString(init.loc),
          "), but no ClusterSync lies between their Inits and here: a peer may arrive on or "
          "complete a barrier its CTA has not initialised yet (a SyncThreads orders one CTA "
          "only; ClusterSync after the Inits)"));
      break;
    }
  }
  return findings;
}

// Stage reuse: a TMA load inside a loop refills its destination every iteration, so the thread
// that issues it must wait, in that loop, for the reads of the previous fill: on a barrier other
// than the one the load completes on (the stage's release, a CTA or cluster barrier), twice on
// that one (its loads, then its readers' commit, as one barrier serves both in seed 002's v1), or
// for its own wgmma groups (wgmma.wait_group: the loader is a reader whose wgmmas read the
// stage). A wait counts when the loading thread runs it: anywhere in the loop under conditions
// that thread meets or that are the same in every thread (`If(k >= stages)` around the release's
// wait); where the loader's thread is not known, the blocks the load's own path passes through.
std::vector<std::string> ReuseFindings(const KernelState& s) {
  std::vector<std::string> findings;
  Invariance invariance;
  const int threads = static_cast<int>(s.manifest.block.count());
  for (const KernelState::WaitRecord& load : s.tma_loads) {
    if (!load.op) continue;
    mlir::Operation* loop = load.op->getParentOp();
    while (loop && !mlir::isa<mlir::scf::ForOp, mlir::scf::WhileOp>(loop))
      loop = loop->getParentOp();
    if (!loop) continue;  // loaded once: nothing to reuse
    std::optional<int> loader;
    for (int t = 0; t < threads && !loader; ++t)
      if (ThreadEval(s.manifest.block, t, &invariance).Runs(load.op).value_or(false)) loader = t;
    std::set<mlir::Block*> path;  // the blocks from the load up to the loop body
    for (mlir::Operation* op = load.op; op != loop; op = op->getParentOp())
      path.insert(op->getBlock());
    auto loader_runs = [&](mlir::Operation* op) {
      if (!loop->isProperAncestor(op)) return false;
      if (!loader) return path.count(op->getBlock()) > 0;
      return ThreadEval(s.manifest.block, *loader, &invariance).Runs(op).value_or(true);
    };
    int own = 0, other = 0;
    for (const KernelState::WaitRecord& w : s.waits) {
      if (!w.op || !loader_runs(w.op)) continue;
      (w.array >= 0 && w.array == load.array && w.index == load.index ? own : other) += 1;
    }
    loop->walk([&](mlir::NVVM::WgmmaWaitGroupSyncOp wait) {
      if (loader_runs(wait)) ++other;
    });
    if (other == 0 && own < 2)
      findings.push_back(absl::StrCat(
          LocString(load.loc),
          ": this TMA load refills shared memory on every iteration of its loop, but the loading "
          "thread waits in that loop only for the load itself, not for the reads of the last fill "
          "(an mbarrier wait "
          "for the stage's release, a CTA or cluster barrier, or wgmma.wait_group for its own "
          "wgmmas): it can overwrite a stage that is still being read"));
  }
  return findings;
}

// tcgen05 ordering: a thread's tcgen05 op that a wait orders after another thread's work (an
// MMA's result it reads, a read of the accumulator it overwrites, the operands TMA delivered)
// is ordered by that wait only through a tcgen05.fence::after_thread_sync between them (PTX ISA,
// the tcgen05 memory consistency model). Walking back from each TMEM read or write through the
// ops before it (and before each op around it), the nearer of a wait and such a fence decides;
// reaching the kernel's start decides nothing.
std::vector<std::string> FenceFindings(const KernelState& s) {
  std::map<mlir::Operation*, const KernelState::WaitRecord*> wait_of;  // by the waiting op
  for (const KernelState::WaitRecord& w : s.waits)
    if (w.op) wait_of[w.op] = &w;
  enum class Last { kNone, kWait, kFence };
  // The last wait or after_thread_sync fence in program order within `op` (itself included).
  auto last_in = [&](mlir::Operation* op, const KernelState::WaitRecord** wait) {
    Last last = Last::kNone;
    op->walk([&](mlir::Operation* inner) {  // post-order: a wait's loop after its body
      if (auto f = mlir::dyn_cast<mlir::NVVM::Tcgen05FenceOp>(inner)) {
        if (f.getKind() == mlir::NVVM::Tcgen05FenceKind::AFTER_THREAD_SYNC) last = Last::kFence;
      } else if (auto it = wait_of.find(inner); it != wait_of.end()) {
        last = Last::kWait, *wait = it->second;
      }
    });
    return last;
  };
  std::vector<std::string> findings;
  for (const KernelState::WaitRecord& use : s.tmem_uses) {
    if (!use.op) continue;
    const KernelState::WaitRecord* wait = nullptr;
    Last found = Last::kNone;
    for (mlir::Operation* at = use.op; at && at->getBlock() && found == Last::kNone;
         at = at->getParentOp())
      for (mlir::Operation* prev = at->getPrevNode(); prev && found == Last::kNone;
           prev = prev->getPrevNode())
        found = last_in(prev, &wait);
    if (found != Last::kWait) continue;
    findings.push_back(absl::StrCat(
        LocString(use.loc), ": this ", use.index, " follows the wait at ", LocString(wait->loc),
        " with no tcgen05.fence::after_thread_sync between them (TcgenFenceAfterSync): the wait "
        "does not order it, so it may run before what the wait waits for"));
  }
  return findings;
}

}  // namespace kiln::detail
