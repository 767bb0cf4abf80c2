// Loops that can never end, found at their second pass rather than at the instruction budget.
// A natural loop of the entry's control flow with one way out (a conditional branch, no exit,
// return or trap inside) is watched where the registers that branch and every branch inside the
// loop test are closed under the loop's writes: each instruction in the loop that writes one of
// them is plain arithmetic (or a parameter load) over registers of the set. A pass that leaves
// all of them as they were is then repeated exactly by the next pass, and by every pass after
// it: the loop never ends (a For whose run-time step is 0, a While whose counter never
// advances). A loop whose way out depends on memory, an atomic, a shuffle or the clock is not
// watched (a wait on another thread's flag is spin.cc's to find).
#include <algorithm>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "emulator/cta.h"

namespace kiln::emu {
namespace ptx {
namespace {

bool ReadsTime(const Operand& o) {
  return o.kind == Operand::Kind::kSpecial &&
         (o.special == Special::kGlobalTimer || o.special == Special::kGlobalTimerLo ||
          o.special == Special::kGlobalTimerHi || o.special == Special::kClock ||
          o.special == Special::kClock64);
}

// A function of its register operands alone: the same inputs give the same result in any pass.
bool Pure(const Instr& in) {
  static constexpr Op kArithmetic[] = {
      Op::kMov,  Op::kAdd,  Op::kSub, Op::kMul,   Op::kMad,  Op::kFma,      Op::kDiv,
      Op::kRem,  Op::kMin,  Op::kMax, Op::kNeg,   Op::kAbs,  Op::kAnd,      Op::kOr,
      Op::kXor,  Op::kNot,  Op::kShl, Op::kShr,   Op::kSelp, Op::kSetp,     Op::kCvt,
      Op::kCvta, Op::kEx2,  Op::kLg2, Op::kRsqrt, Op::kSqrt, Op::kRcp,      Op::kTanh,
      Op::kBrev, Op::kPopc, Op::kClz, Op::kBfe,   Op::kPrmt, Op::kCopysign, Op::kTestp};
  if (std::any_of(in.ops.begin(), in.ops.end(), ReadsTime)) return false;
  if (in.op == Op::kLd) return in.space == Space::kParam;  // parameters do not change in a run
  return std::find(std::begin(kArithmetic), std::end(kArithmetic), in.op) != std::end(kArithmetic);
}

// The registers `in` writes: its first operand, where that is a register or a list of them.
template <typename F>
void ForEachWritten(const Instr& in, F&& f) {
  if (in.ops.empty()) return;
  const Operand& d = in.ops[0];
  if (d.kind == Operand::Kind::kReg) f(d.reg);
  if (d.kind == Operand::Kind::kVector)
    for (int r : d.regs) f(r);
}

// The entry's basic blocks and their edges.
struct Cfg {
  std::vector<int> first;                       // by block: its first instruction
  std::vector<int> block_of;                    // by instruction
  std::vector<std::vector<int>> succ, pred;     // by block
  int End(int block, int instructions) const {  // one past its last instruction
    return block + 1 < static_cast<int>(first.size()) ? first[block + 1] : instructions;
  }
};

Cfg BuildCfg(const Entry& e) {
  const int n = static_cast<int>(e.code.size());
  std::vector<bool> leader(n + 1, false);
  leader[0] = true;
  for (int i = 0; i < n; ++i) {
    const Instr& in = e.code[i];
    if (in.op == Op::kBra || in.op == Op::kBrx || in.op == Op::kRet || in.op == Op::kExit ||
        in.op == Op::kTrap)
      leader[i + 1] = true;
    if (in.op == Op::kBra && !in.ops.empty() && in.ops[0].target >= 0)
      leader[in.ops[0].target] = true;
    if (in.op == Op::kBrx && in.ops.size() > 1)
      for (int t : in.ops[1].regs) leader[t] = true;
  }
  Cfg g;
  g.block_of.resize(n);
  for (int i = 0; i < n; ++i) {
    if (leader[i]) g.first.push_back(i);
    g.block_of[i] = static_cast<int>(g.first.size()) - 1;
  }
  const int blocks = static_cast<int>(g.first.size());
  g.succ.resize(blocks), g.pred.resize(blocks);
  for (int b = 0; b < blocks; ++b) {
    const int last = g.End(b, n) - 1;
    const Instr& in = e.code[last];
    auto edge = [&](int to) {
      if (to >= 0 && to < n) g.succ[b].push_back(g.block_of[to]);
    };
    if (in.op == Op::kBra) {
      if (!in.ops.empty()) edge(in.ops[0].target);
      if (in.guard >= 0) edge(last + 1);
    } else if (in.op == Op::kBrx) {
      if (in.ops.size() > 1)
        for (int t : in.ops[1].regs) edge(t);
    } else if ((in.op != Op::kRet && in.op != Op::kExit && in.op != Op::kTrap) || in.guard >= 0) {
      edge(last + 1);  // (a guarded exit, return or trap may fall through)
    }
    for (int s : g.succ[b]) g.pred[s].push_back(b);
  }
  return g;
}

// By block: its immediate dominator (-1 where unreachable), by Cooper, Harvey and Kennedy's
// iteration over the blocks in reverse postorder.
std::vector<int> Dominators(const Cfg& g) {
  const int blocks = static_cast<int>(g.first.size());
  std::vector<int> order, rpo_index(blocks, -1);
  std::vector<std::pair<int, size_t>> stack = {{0, 0}};
  std::vector<bool> seen(blocks, false);
  seen[0] = true;
  while (!stack.empty()) {
    auto& [b, next] = stack.back();
    if (next < g.succ[b].size()) {
      const int s = g.succ[b][next++];
      if (!seen[s]) seen[s] = true, stack.push_back({s, 0});
    } else {
      order.push_back(b);
      stack.pop_back();
    }
  }
  std::reverse(order.begin(), order.end());
  for (size_t i = 0; i < order.size(); ++i) rpo_index[order[i]] = static_cast<int>(i);
  std::vector<int> idom(blocks, -1);
  idom[0] = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 1; i < order.size(); ++i) {
      const int b = order[i];
      int d = -1;
      for (int p : g.pred[b]) {
        if (idom[p] < 0) continue;
        if (d < 0) {
          d = p;
          continue;
        }
        int x = p;
        while (x != d) {
          while (rpo_index[x] > rpo_index[d]) x = idom[x];
          while (rpo_index[d] > rpo_index[x]) d = idom[d];
        }
      }
      if (d >= 0 && idom[b] != d) idom[b] = d, changed = true;
    }
  }
  return idom;
}

bool Dominates(const std::vector<int>& idom, int a, int b) {
  for (int x = b; x >= 0; x = idom[x]) {
    if (x == a) return true;
    if (idom[x] == x) return false;
  }
  return false;
}

// The registers a loop ends or goes on by, closed under the loop's writes; empty where the loop
// cannot be watched (a write of the set that is not plain arithmetic).
std::vector<int> LoopCondition(const Entry& e, const std::vector<int>& code, int exit_branch) {
  std::set<int> regs = {e.code[exit_branch].guard};
  for (int i : code)  // a pass's path depends on every branch inside the loop
    if (e.code[i].op == Op::kBra && e.code[i].guard >= 0) regs.insert(e.code[i].guard);
  for (bool grew = true; grew;) {
    grew = false;
    for (int i : code) {
      const Instr& in = e.code[i];
      bool writes = false;
      ForEachWritten(in, [&](int r) { writes |= r >= 0 && regs.count(r); });
      if (!writes) continue;
      if (!Pure(in)) return {};
      const size_t before = regs.size();
      if (in.guard >= 0) regs.insert(in.guard);
      for (size_t o = 1; o < in.ops.size(); ++o) {
        if (in.ops[o].kind == Operand::Kind::kLabel) continue;
        if (in.ops[o].reg >= 0) regs.insert(in.ops[o].reg);
        for (int r : in.ops[o].regs)
          if (r >= 0) regs.insert(r);
      }
      grew |= regs.size() != before;
    }
  }
  return {regs.begin(), regs.end()};
}

// Marks the loop's one way out, where it has one: a conditional branch one of whose directions
// stays in the loop and the other leaves it, with no other edge out and no exit, return or trap
// inside. A loop with no edge out at all (the compiler proved its condition never changes and
// dropped the test) has every branch in it marked.
void MarkLoop(Entry& e, const Cfg& g, const std::vector<int>& loop) {
  const int n = static_cast<int>(e.code.size());
  std::vector<bool> in_loop(g.first.size(), false);
  for (int b : loop) in_loop[b] = true;
  int exit_branch = -1;
  std::vector<int> code;
  for (int b : loop) {
    for (int i = g.first[b]; i < g.End(b, n); ++i) code.push_back(i);
    const int last = g.End(b, n) - 1;
    const Instr& in = e.code[last];
    if (in.op == Op::kRet || in.op == Op::kExit || in.op == Op::kTrap || in.op == Op::kBrx)
      return;  // a way out that is not an edge (or edges this watch does not follow)
    for (int s : g.succ[b]) {
      if (in_loop[s]) continue;
      if (in.op != Op::kBra || in.guard < 0 || (exit_branch >= 0 && exit_branch != last)) return;
      exit_branch = last;
    }
  }
  if (exit_branch < 0) {  // no way out: every branch inside it says so when a thread runs it
    for (int i : code)
      if (e.code[i].op == Op::kBra && e.code[i].loop_guard == kNotWatched)
        e.code[i].loop_guard = kNoWayOut;
    return;
  }
  if (e.code[exit_branch].loop_guard >= 0) return;
  std::vector<int> regs = LoopCondition(e, code, exit_branch);
  if (regs.empty()) return;
  Instr& in = e.code[exit_branch];
  in.loop_guard = static_cast<int>(e.loop_guards.size());
  in.loop_exit_taken = !in_loop[g.block_of[in.ops[0].target]];
  e.loop_guards.push_back(std::move(regs));
  e.loop_backs_off.push_back(
      std::any_of(code.begin(), code.end(), [&](int i) { return e.code[i].op == Op::kNanosleep; }));
}

}  // namespace

void MarkLoopGuards(Entry& e) {
  if (e.code.empty()) return;
  const Cfg g = BuildCfg(e);
  const std::vector<int> idom = Dominators(g);
  const int blocks = static_cast<int>(g.first.size());
  // Natural loops by header: the header and every block that reaches one of its back edges
  // without passing it.
  std::vector<std::vector<int>> back_edges(blocks);
  for (int u = 0; u < blocks; ++u)
    for (int h : g.succ[u])
      if (idom[u] >= 0 && Dominates(idom, h, u)) back_edges[h].push_back(u);
  for (int h = blocks - 1; h >= 0; --h) {
    if (back_edges[h].empty()) continue;
    std::vector<bool> in(blocks, false);
    in[h] = true;
    std::vector<int> loop = {h}, work = back_edges[h];
    while (!work.empty()) {
      const int b = work.back();
      work.pop_back();
      if (in[b]) continue;
      in[b] = true;
      loop.push_back(b);
      for (int p : g.pred[b]) work.push_back(p);
    }
    MarkLoop(e, g, loop);
  }
}

}  // namespace ptx

namespace detail {
namespace {

uint64_t HashRegisters(const Thread& t, const std::vector<int>& regs) {
  uint64_t h = 1469598103934665603ull;
  for (int r : regs) h = (h ^ t.r[r]) * 1099511628211ull;
  return h;
}

}  // namespace

absl::Status Cta::WatchLoop(Thread& t, const Instr& in) {
  if (in.loop_guard == ptx::kNoWayOut)
    return Fail(t, in,
                "an endless loop: no path leads out of the loop this branch is in (the compiler "
                "found that its condition never changes and dropped the test). A For whose "
                "step is 0, or a While whose counter never advances");
  const std::vector<int>& regs = e_.loop_guards[in.loop_guard];
  if (t.loops.size() < e_.loop_guards.size()) t.loops.resize(e_.loop_guards.size());
  LoopPass& last = t.loops[in.loop_guard];
  const uint64_t now = HashRegisters(t, regs);
  // A loop that backs off waits for another thread, which may end it without a register here
  // changing (the GPU debug mode's losers of the race to report wait so for the winner's trap):
  // endless only once no other thread runs.
  if (!last.entered || last.registers != now ||
      (e_.loop_backs_off[in.loop_guard] && AnotherThreadRuns(t))) {
    last = {.entered = true, .registers = now};
    return absl::OkStatus();
  }
  std::string values;
  for (size_t i = 0; i < regs.size() && i < 6; ++i)
    absl::StrAppend(&values, i ? ", " : "", e_.reg_names.at(regs[i]), " = ",
                    static_cast<int64_t>(t.r[regs[i]]));
  if (regs.size() > 6) absl::StrAppend(&values, ", ...");
  return Fail(t, in,
              absl::StrCat("an endless loop: a pass of this loop left every register its "
                           "condition depends on as it was (",
                           values,
                           "), so each pass repeats the last and the loop never ends. A For "
                           "whose run-time step is 0, or a While whose counter never advances"));
}

bool Cta::AnotherThreadRuns(const Thread& t) const {
  const std::vector<Cta*> self = {const_cast<Cta*>(this)};
  for (const Cta* c : cluster_ ? cluster_->ctas : self)
    for (const Thread& u : c->threads_)
      if (&u != &t && u.state == Thread::State::kRun) return true;
  return false;
}

void Cta::LeaveLoop(Thread& t, const Instr& in) {
  if (in.loop_guard >= 0 && static_cast<size_t>(in.loop_guard) < t.loops.size())
    t.loops[in.loop_guard].entered = false;
}

}  // namespace detail
}  // namespace kiln::emu
