// The emulator's view of a PTX module: entries with their parameters, registers and decoded
// instructions. Decoding follows the PTX ISA's syntax (opcode, dot-separated modifiers, operands)
// for the subset kiln's lowering emits; anything else is an error that names the PTX line.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::emu::ptx {

// The value kinds an instruction reads or writes.
enum class Ty : uint8_t {
  kNone,
  kPred,
  kB8,
  kB16,
  kB32,
  kB64,
  kU8,
  kU16,
  kU32,
  kU64,
  kS8,
  kS16,
  kS32,
  kS64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kBF16x2,
  kF16x2,
  kE4M3x2,
  kE5M2x2
};
int TyBits(Ty t);
bool TyIsFloat(Ty t);
bool TyIsSigned(Ty t);

enum class Space : uint8_t { kGeneric, kGlobal, kShared, kParam, kLocal, kConst };

enum class Special : uint8_t {
  kTidX,
  kTidY,
  kTidZ,
  kNtidX,
  kNtidY,
  kNtidZ,
  kCtaidX,
  kCtaidY,
  kCtaidZ,
  kNctaidX,
  kNctaidY,
  kNctaidZ,
  kLaneId,
  kWarpId,
  kClusterCtaRank,
  kClusterNctaRank,
  kClusterIdX,
  kClusterIdY,
  kClusterIdZ,
  kNClusterIdX,
  kNClusterIdY,
  kNClusterIdZ,
  kClusterCtaIdX,
  kClusterCtaIdY,
  kClusterCtaIdZ,
  kClusterNctaIdX,
  kClusterNctaIdY,
  kClusterNctaIdZ,
  // Time: the launch's instructions executed so far stand for nanoseconds (%globaltimer) and
  // for cycles (%clock, %clock64): monotone over the launch, and the same run to run.
  kGlobalTimer,
  kGlobalTimerLo,
  kGlobalTimerHi,
  kClock,
  kClock64
};

struct Operand {
  enum class Kind : uint8_t { kNone, kReg, kImm, kSpecial, kVector, kAddress, kLabel, kSymbol };
  Kind kind = Kind::kNone;
  int reg = -1;                 // kReg; kAddress: base register (or -1)
  uint64_t imm = 0;             // kImm (bits; float immediates already as their bits)
  bool imm_is_float = false;    // 0fXXXXXXXX / 0dXXXX...
  bool imm_is_decimal = false;  // 1.5, 2e-3: a double (PTX), narrowed where read as 32 bits
  Special special{};
  std::vector<int> regs;  // kVector (-1: the sink "_"); kAddress: TMA coordinates "[map, {c0, ..}]"
  std::string symbol;     // kSymbol, kAddress on a symbol, kLabel
  int64_t offset = 0;     // kAddress
  int target = -1;        // kLabel: instruction index
  bool negate = false;    // a "!" on a predicate source
};

enum class Op : uint16_t {
  kUnknown,
  kMov,
  kAdd,
  kSub,
  kMul,
  kMad,
  kFma,
  kDiv,
  kRem,
  kMin,
  kMax,
  kNeg,
  kAbs,
  kAnd,
  kOr,
  kXor,
  kNot,
  kShl,
  kShr,
  kSelp,
  kSetp,
  kCvt,
  kCvta,
  kEx2,
  kLg2,
  kRsqrt,
  kSqrt,
  kRcp,
  kTanh,
  kLd,
  kSt,
  kShfl,
  kBar,
  kBarArrive,
  kBra,
  kBrx,  // brx.idx: an indirect branch to one of a .branchtargets list (ops[1].regs: their indices)
  kRet,
  kExit,
  kAtom,
  kRed,
  kRedux,
  kCreatePolicy,
  kBrev,
  kPopc,
  kClz,
  kBfe,
  kPrmt,
  kCopysign,
  kTestp,
  kVote,
  kMembar,
  kFence,
  kCpAsync,
  kLdMatrix,
  kMma,
  kMbarrier,
  kCpAsyncBulk,
  kWgmma,
  kSetMaxNReg,
  kTcgen05,
  kElect,
  kMapa,
  kStMatrix,
  kPrefetch,
  kGriddepcontrol,
  kNanosleep,
  kTrap
};

constexpr int kNotWatched = -1, kNoWayOut = -2;  // Instr::loop_guard

struct Instr {
  Op op = Op::kUnknown;
  std::string text;                // as written, for messages
  int line = 0;                    // in the PTX file
  int dsl_file = 0, dsl_line = 0;  // from the .loc before it (PTX with line tables), else 0
  std::vector<std::string> mods;   // dot-separated parts after the opcode
  Ty type = Ty::kNone;             // the last type modifier (the operation's)
  Ty src_type = Ty::kNone;         // cvt: the source type
  Space space = Space::kGeneric;
  int vec = 1;  // .v2 / .v4
  bool wide = false, lo = false, hi = false, approx = false, ftz = false, sat = false;
  std::string rounding;  // rn, rz, rm, rp, rni, rzi, ...
  std::string cmp;       // setp / shfl mode / atom op / redux op
  int guard = -1;        // @%p: predicate register; -1 none
  bool guard_negated = false;
  std::vector<Operand> ops;
  // Not a wgmma, and it names a register that some wgmma.mma_async of the entry holds as its
  // accumulator or A fragment (the wgmma.fence rule: Entry::wgmma_regs).
  bool touches_wgmma_regs = false;
  // A loop's way out, watched for a pass that changes nothing its condition depends on
  // (loops.cc): its index in Entry::loop_guards; kNoWayOut for a branch inside a loop that has
  // none; kNotWatched for any other instruction.
  int loop_guard = kNotWatched;
  bool loop_exit_taken = false;  // that loop's way out is the branch taken, not its fall-through
  bool Has(const std::string& mod) const;
};

// Calls f(register) for each register `in` names in its operands (not its guard): a plain
// register, a vector's or a TMA address's (-1 entries included, for f to skip); not a brx label
// list, whose entries are instruction indices.
template <typename F>
void ForEachRegister(const Instr& in, F&& f) {
  for (const Operand& o : in.ops) {
    if (o.kind == Operand::Kind::kLabel) continue;
    f(o.reg);
    for (int r : o.regs) f(r);
  }
}

struct Param {
  std::string name;
  bool floating = false;  // declared .f16, .f32 or .f64
  bool untyped = false;   // declared .b8 to .b64: bits of either kind
  int bytes = 0;
  int offset = 0;  // in the parameter buffer (aligned to its size)
};

struct Entry {
  std::string name;
  std::vector<Param> params;
  int param_bytes = 0;
  int min_ctas_per_sm = 1;  // .minnctapersm: the CTAs an SM must hold at once (its register share)
  int max_threads = 0;      // .maxntid's product, 0 where not declared (or not read)
  int num_regs = 0;
  std::vector<std::string> reg_names;  // by id, for messages
  // By id: declared of 32 bits or fewer. An address [reg+imm] in such a register is a 32-bit sum
  // that wraps (LLVM folds constants into the immediate and leaves the register's part below 0).
  std::vector<bool> reg_narrow;
  // Registers the parser made for the immediates in vector operands ("{0f00000000, %r1}"), with
  // their bits: every thread's copy starts with them.
  std::vector<std::pair<int, uint64_t>> constant_regs;
  std::vector<Instr> code;
  // By register: held by some wgmma.mma_async as its accumulator or A fragment.
  std::vector<bool> wgmma_regs;
  // By watched loop (Instr::loop_guard): the registers its condition depends on, and whether it
  // backs off (a nanosleep inside: a wait for what another thread does, its trap included).
  std::vector<std::vector<int>> loop_guards;
  std::vector<bool> loop_backs_off;
};

// Marks the backward branches whose loops can be watched for endless passes (loops.cc).
void MarkLoopGuards(Entry& e);

struct Module {
  std::string target;
  std::map<std::string, int64_t> shared_symbols;  // name -> offset in the CTA's shared memory
  std::map<std::string, int64_t> global_symbols;  // module-scope .global variables: name -> bytes
  std::vector<Entry> entries;
  std::map<int, std::string> files;  // .file directives
  const Entry* Find(const std::string& name) const;
  // "file:line" of the DSL line that built `in`, or "" when the PTX has no line tables.
  std::string DslLine(const Instr& in) const;
};

absl::StatusOr<Module> Parse(const std::string& text);

}  // namespace kiln::emu::ptx
