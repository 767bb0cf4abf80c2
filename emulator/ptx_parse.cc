// PTX text -> ptx::Module: statements, scopes (inline asm blocks declare their own registers),
// labels, and each instruction decoded into its opcode, modifiers and operands.
#include <algorithm>
#include <bit>
#include <cctype>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "emulator/ptx.h"

namespace kiln::emu::ptx {

int TyBits(Ty t) {
  switch (t) {
    case Ty::kPred:
      return 1;
    case Ty::kB8:
    case Ty::kU8:
    case Ty::kS8:
      return 8;
    case Ty::kB16:
    case Ty::kU16:
    case Ty::kS16:
    case Ty::kF16:
    case Ty::kBF16:
    case Ty::kE4M3x2:
    case Ty::kE5M2x2:
      return 16;
    case Ty::kB32:
    case Ty::kU32:
    case Ty::kS32:
    case Ty::kF32:
    case Ty::kBF16x2:
    case Ty::kF16x2:
      return 32;
    case Ty::kB64:
    case Ty::kU64:
    case Ty::kS64:
    case Ty::kF64:
      return 64;
    case Ty::kNone:
      return 0;
  }
  return 0;
}
bool TyIsFloat(Ty t) {
  return t == Ty::kF16 || t == Ty::kBF16 || t == Ty::kF32 || t == Ty::kF64 || t == Ty::kBF16x2 ||
         t == Ty::kF16x2 || t == Ty::kE4M3x2 || t == Ty::kE5M2x2;
}
bool TyIsSigned(Ty t) { return t == Ty::kS8 || t == Ty::kS16 || t == Ty::kS32 || t == Ty::kS64; }

bool Instr::Has(const std::string& mod) const {
  return std::find(mods.begin(), mods.end(), mod) != mods.end();
}

std::string Module::DslLine(const Instr& in) const {
  auto f = files.find(in.dsl_file);
  if (in.dsl_line <= 0 || f == files.end()) return "";
  return absl::StrCat(f->second, ":", in.dsl_line);
}

const Entry* Module::Find(const std::string& name) const {
  for (const Entry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {

const std::map<std::string, Ty>& Types() {
  static const auto* m = new std::map<std::string, Ty>{
      {"pred", Ty::kPred},   {"b8", Ty::kB8},         {"b16", Ty::kB16},
      {"b32", Ty::kB32},     {"b64", Ty::kB64},       {"u8", Ty::kU8},
      {"u16", Ty::kU16},     {"u32", Ty::kU32},       {"u64", Ty::kU64},
      {"s8", Ty::kS8},       {"s16", Ty::kS16},       {"s32", Ty::kS32},
      {"s64", Ty::kS64},     {"f16", Ty::kF16},       {"bf16", Ty::kBF16},
      {"f32", Ty::kF32},     {"f64", Ty::kF64},       {"bf16x2", Ty::kBF16x2},
      {"f16x2", Ty::kF16x2}, {"e4m3x2", Ty::kE4M3x2}, {"e5m2x2", Ty::kE5M2x2}};
  return *m;
}

const std::map<std::string, Op>& Ops() {
  static const auto* m = new std::map<std::string, Op>{{"mov", Op::kMov},
                                                       {"add", Op::kAdd},
                                                       {"sub", Op::kSub},
                                                       {"mul", Op::kMul},
                                                       {"mad", Op::kMad},
                                                       {"fma", Op::kFma},
                                                       {"div", Op::kDiv},
                                                       {"rem", Op::kRem},
                                                       {"min", Op::kMin},
                                                       {"max", Op::kMax},
                                                       {"neg", Op::kNeg},
                                                       {"abs", Op::kAbs},
                                                       {"and", Op::kAnd},
                                                       {"or", Op::kOr},
                                                       {"xor", Op::kXor},
                                                       {"not", Op::kNot},
                                                       {"shl", Op::kShl},
                                                       {"shr", Op::kShr},
                                                       {"selp", Op::kSelp},
                                                       {"setp", Op::kSetp},
                                                       {"cvt", Op::kCvt},
                                                       {"cvta", Op::kCvta},
                                                       {"ex2", Op::kEx2},
                                                       {"lg2", Op::kLg2},
                                                       {"rsqrt", Op::kRsqrt},
                                                       {"sqrt", Op::kSqrt},
                                                       {"rcp", Op::kRcp},
                                                       {"tanh", Op::kTanh},
                                                       {"ld", Op::kLd},
                                                       {"st", Op::kSt},
                                                       {"shfl", Op::kShfl},
                                                       {"bar", Op::kBar},
                                                       {"barrier", Op::kBar},
                                                       {"bra", Op::kBra},
                                                       {"brx", Op::kBrx},
                                                       {"ret", Op::kRet},
                                                       {"exit", Op::kExit},
                                                       {"atom", Op::kAtom},
                                                       {"red", Op::kRed},
                                                       {"redux", Op::kRedux},
                                                       {"createpolicy", Op::kCreatePolicy},
                                                       {"brev", Op::kBrev},
                                                       {"popc", Op::kPopc},
                                                       {"clz", Op::kClz},
                                                       {"bfe", Op::kBfe},
                                                       {"prmt", Op::kPrmt},
                                                       {"copysign", Op::kCopysign},
                                                       {"testp", Op::kTestp},
                                                       {"vote", Op::kVote},
                                                       {"membar", Op::kMembar},
                                                       {"fence", Op::kFence},
                                                       {"ldmatrix", Op::kLdMatrix},
                                                       {"mma", Op::kMma},
                                                       {"mbarrier", Op::kMbarrier},
                                                       {"wgmma", Op::kWgmma},
                                                       {"setmaxnreg", Op::kSetMaxNReg},
                                                       {"tcgen05", Op::kTcgen05},
                                                       {"elect", Op::kElect},
                                                       {"mapa", Op::kMapa},
                                                       {"stmatrix", Op::kStMatrix},
                                                       {"prefetch", Op::kPrefetch},
                                                       {"prefetchu", Op::kPrefetch},
                                                       {"griddepcontrol", Op::kGriddepcontrol},
                                                       {"nanosleep", Op::kNanosleep},
                                                       {"trap", Op::kTrap}};
  return *m;
}

const std::map<std::string, Special>& Specials() {
  static const auto* m =
      new std::map<std::string, Special>{{"%tid.x", Special::kTidX},
                                         {"%tid.y", Special::kTidY},
                                         {"%tid.z", Special::kTidZ},
                                         {"%ntid.x", Special::kNtidX},
                                         {"%ntid.y", Special::kNtidY},
                                         {"%ntid.z", Special::kNtidZ},
                                         {"%ctaid.x", Special::kCtaidX},
                                         {"%ctaid.y", Special::kCtaidY},
                                         {"%ctaid.z", Special::kCtaidZ},
                                         {"%nctaid.x", Special::kNctaidX},
                                         {"%nctaid.y", Special::kNctaidY},
                                         {"%nctaid.z", Special::kNctaidZ},
                                         {"%laneid", Special::kLaneId},
                                         {"%warpid", Special::kWarpId},
                                         {"%cluster_ctarank", Special::kClusterCtaRank},
                                         {"%cluster_nctarank", Special::kClusterNctaRank},
                                         {"%clusterid.x", Special::kClusterIdX},
                                         {"%clusterid.y", Special::kClusterIdY},
                                         {"%clusterid.z", Special::kClusterIdZ},
                                         {"%nclusterid.x", Special::kNClusterIdX},
                                         {"%nclusterid.y", Special::kNClusterIdY},
                                         {"%nclusterid.z", Special::kNClusterIdZ},
                                         {"%cluster_ctaid.x", Special::kClusterCtaIdX},
                                         {"%cluster_ctaid.y", Special::kClusterCtaIdY},
                                         {"%cluster_ctaid.z", Special::kClusterCtaIdZ},
                                         {"%cluster_nctaid.x", Special::kClusterNctaIdX},
                                         {"%cluster_nctaid.y", Special::kClusterNctaIdY},
                                         {"%cluster_nctaid.z", Special::kClusterNctaIdZ},
                                         {"%globaltimer", Special::kGlobalTimer},
                                         {"%globaltimer_lo", Special::kGlobalTimerLo},
                                         {"%globaltimer_hi", Special::kGlobalTimerHi},
                                         {"%clock", Special::kClock},
                                         {"%clock64", Special::kClock64}};
  return *m;
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
  });
}

// Splits at commas outside brackets and braces.
std::vector<std::string> SplitOperands(absl::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!absl::StripAsciiWhitespace(cur).empty())
    out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
  return out;
}

absl::Status Error(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("PTX line ", line, ": ", what));
}

bool ParseInt(absl::string_view s, uint64_t* out) {
  bool neg = absl::ConsumePrefix(&s, "-");
  uint64_t v = 0;
  if (absl::StartsWith(s, "0x") || absl::StartsWith(s, "0X")) {
    s.remove_prefix(2);
    if (s.empty() || s.size() > 16) return false;
    for (char c : s) {
      int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10);
      if (d < 0 || d > 15) return false;
      v = v * 16 + d;
    }
  } else if (!absl::SimpleAtoi(s, &v)) {
    return false;
  }
  *out = neg ? ~v + 1 : v;
  return true;
}

// Builds one entry: registers in scopes, labels, instructions.
class EntryBuilder {
 public:
  explicit EntryBuilder(Entry* e) : e_(e) { scopes_.emplace_back(); }

  void Open() { scopes_.emplace_back(); }
  void Close() { scopes_.pop_back(); }
  int depth() const { return static_cast<int>(scopes_.size()); }

  absl::Status Declare(absl::string_view decl, int line) {
    // .reg .TYPE name<N> | name, name, ...
    std::vector<std::string> w = absl::StrSplit(decl, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (w.size() < 3) return Error(line, absl::StrCat("bad register declaration '", decl, "'"));
    std::string names = absl::StrJoin(std::vector<std::string>(w.begin() + 2, w.end()), "");
    const bool narrow = !absl::EndsWith(w[1], "64") && !absl::EndsWith(w[1], "128");
    for (absl::string_view n : absl::StrSplit(names, ',', absl::SkipEmpty())) {
      size_t lt = n.find('<');
      if (lt == absl::string_view::npos) {
        Add(std::string(n), narrow);
        continue;
      }
      int count = 0;
      if (!absl::SimpleAtoi(n.substr(lt + 1, n.size() - lt - 2), &count))
        return Error(line, "bad register range");
      for (int i = 0; i < count; ++i) Add(absl::StrCat(n.substr(0, lt), i), narrow);
    }
    return absl::OkStatus();
  }

  int Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return -1;
  }

  absl::StatusOr<Operand> ParseOperand(std::string s, int line) {
    Operand o;
    s = std::string(absl::StripAsciiWhitespace(s));
    if (absl::StartsWith(s, "!")) {
      o.negate = true;
      s = s.substr(1);
    }
    if (size_t bar = s.find('|');
        bar != std::string::npos && !absl::StartsWith(s, "{")) {  // d|p: two results
      Operand v;
      v.kind = Operand::Kind::kVector;
      for (const std::string part : {s.substr(0, bar), s.substr(bar + 1)}) {
        int r = Lookup(std::string(absl::StripAsciiWhitespace(part)));
        if (r < 0) return Error(line, absl::StrCat("unknown register in '", s, "'"));
        v.regs.push_back(r);
      }
      return v;
    }
    if (absl::StartsWith(s, "{")) {
      o.kind = Operand::Kind::kVector;
      for (const std::string& part : SplitOperands(s.substr(1, s.size() - 2))) {
        if (part == "_") {
          o.regs.push_back(-1);
          continue;
        }
        int r = Lookup(part);
        if (r < 0) {  // an immediate element: a register of its own holding it
          absl::StatusOr<Operand> imm = ParseOperand(part, line);
          if (!imm.ok() || imm->kind != Operand::Kind::kImm || imm->imm_is_decimal)
            return Error(line, absl::StrCat("unknown register '", part, "'"));
          r = e_->num_regs++;
          e_->reg_names.push_back(part);
          e_->reg_narrow.push_back(false);
          e_->constant_regs.push_back({r, imm->imm});
        }
        o.regs.push_back(r);
      }
      return o;
    }
    if (absl::StartsWith(s, "[")) {
      o.kind = Operand::Kind::kAddress;
      std::string inner = s.substr(1, s.size() - 2);
      if (size_t comma = inner.find(',');
          comma != std::string::npos) {  // [tensor map, {coordinates}]
        absl::StatusOr<Operand> coords = ParseOperand(inner.substr(comma + 1), line);
        if (!coords.ok()) return coords.status();
        o.regs = coords->regs;
        inner = inner.substr(0, comma);
      }
      std::string base = inner;
      size_t plus = inner.find('+');
      if (plus != std::string::npos) {
        base = std::string(absl::StripAsciiWhitespace(inner.substr(0, plus)));
        uint64_t off;
        if (!ParseInt(absl::StripAsciiWhitespace(inner.substr(plus + 1)), &off))
          return Error(line, absl::StrCat("bad address offset in '", s, "'"));
        o.offset = static_cast<int64_t>(off);
      }
      uint64_t abs_addr;
      if (int r = Lookup(base); r >= 0)
        o.reg = r;
      else if (ParseInt(base, &abs_addr))
        o.offset += static_cast<int64_t>(abs_addr);
      else
        o.symbol = base;
      return o;
    }
    if (auto sp = Specials().find(s); sp != Specials().end()) {
      o.kind = Operand::Kind::kSpecial;
      o.special = sp->second;
      return o;
    }
    if (int r = Lookup(s); r >= 0) {
      o.kind = Operand::Kind::kReg;
      o.reg = r;
      return o;
    }
    if (absl::StartsWith(s, "0f") && s.size() == 10) {
      uint64_t bits;
      if (!ParseInt("0x" + s.substr(2), &bits))
        return Error(line, absl::StrCat("bad float immediate '", s, "'"));
      o.kind = Operand::Kind::kImm, o.imm = bits, o.imm_is_float = true;
      return o;
    }
    if (absl::StartsWith(s, "0d") && s.size() == 18) {
      uint64_t bits;
      if (!ParseInt("0x" + s.substr(2), &bits))
        return Error(line, absl::StrCat("bad double immediate '", s, "'"));
      o.kind = Operand::Kind::kImm, o.imm = bits, o.imm_is_float = true;
      return o;
    }
    if (uint64_t v; ParseInt(s, &v)) {
      o.kind = Operand::Kind::kImm, o.imm = v;
      return o;
    }
    if (double d; s.find_first_of(".eE") != std::string::npos && !s.empty() &&
                  (absl::ascii_isdigit(s[0]) || s[0] == '-' || s[0] == '.') &&
                  absl::SimpleAtod(s, &d)) {  // a decimal literal: f64
      o.kind = Operand::Kind::kImm, o.imm = std::bit_cast<uint64_t>(d),
      o.imm_is_float = o.imm_is_decimal = true;
      return o;
    }
    if (IsIdentifier(s) && !absl::StartsWith(s, "%")) {
      o.kind = absl::StartsWith(s, "$") ? Operand::Kind::kLabel : Operand::Kind::kSymbol;
      o.symbol = s;
      return o;
    }
    return Error(line, absl::StrCat("cannot read operand '", s, "'"));
  }

  void SetLoc(int file, int line) { loc_file_ = file, loc_line_ = line; }

  absl::Status Instruction(std::string text, int line) {
    Instr in;
    in.text = text;
    in.line = line;
    in.dsl_file = loc_file_, in.dsl_line = loc_line_;
    std::string s = text;
    if (absl::StartsWith(s, "@")) {
      size_t sp = s.find_first_of(" \t");
      std::string g = s.substr(1, sp - 1);
      if (absl::StartsWith(g, "!")) in.guard_negated = true, g = g.substr(1);
      in.guard = Lookup(g);
      if (in.guard < 0) return Error(line, absl::StrCat("unknown predicate '", g, "'"));
      s = std::string(absl::StripAsciiWhitespace(s.substr(sp)));
    }
    size_t sp = s.find_first_of(" \t");
    std::string opcode = s.substr(0, sp);
    std::string rest = sp == std::string::npos ? "" : s.substr(sp);
    std::vector<std::string> parts = absl::StrSplit(opcode, '.');
    if (parts.size() > 2 && parts[0] == "cp" && parts[1] == "async" &&
        parts[2] == "bulk") {  // TMA, bulk groups
      in.op = Op::kCpAsyncBulk;
      in.mods.assign(parts.begin() + 3, parts.end());
    } else if (parts.size() > 3 && parts[0] == "cp" && parts[1] == "reduce" &&
               parts[2] == "async" && parts[3] == "bulk") {  // a TMA store that adds ("reduce")
      in.op = Op::kCpAsyncBulk;
      in.mods.assign(parts.begin() + 4, parts.end());
      in.mods.push_back("reduce");
    } else if (parts.size() > 1 && parts[0] == "cp" &&
               parts[1] == "async") {  // cp.async[.commit_group|...]
      in.op = Op::kCpAsync;
      in.mods.assign(parts.begin() + 2, parts.end());
    } else {
      auto op = Ops().find(parts[0]);
      if (op == Ops().end())
        return Error(line,
                     absl::StrCat("the emulator does not know '", parts[0], "' in '", text, "'"));
      in.op = op->second;
      in.mods.assign(parts.begin() + 1, parts.end());
      // bar.sync, bar.arrive and bar.red are barrier.*.aligned (PTX ISA, bar): said as such.
      if (parts[0] == "bar" && !in.Has("warp")) in.mods.push_back("aligned");
    }
    std::vector<Ty> types;
    static const std::vector<std::string> kCmp = {"eq",  "ne",  "lt",  "le",  "gt",  "ge",
                                                  "lo",  "ls",  "hi",  "hs",  "equ", "neu",
                                                  "ltu", "leu", "gtu", "geu", "num", "nan"};
    static const std::vector<std::string> kModes = {"up",  "down", "bfly", "idx", "add",  "min",
                                                    "max", "inc",  "dec",  "cas", "exch", "and",
                                                    "or",  "xor",  "all",  "any", "uni",  "ballot"};
    for (const std::string& m : in.mods) {
      if (auto t = Types().find(m); t != Types().end())
        types.push_back(t->second);
      else if (m == "global")
        in.space = Space::kGlobal;
      else if (m == "shared" || absl::StartsWith(m, "shared::"))
        in.space = Space::kShared;
      else if (m == "param")
        in.space = Space::kParam;
      else if (m == "local")
        in.space = Space::kLocal;
      else if (m == "const")
        in.space = Space::kConst;
      else if (m == "v2")
        in.vec = 2;
      else if (m == "v4" || m == "x4")
        in.vec = 4;
      else if (m == "x2")
        in.vec = 2;
      else if (m == "wide")
        in.wide = true;
      else if (m == "lo")
        in.lo = true;
      else if (m == "hi" && in.op != Op::kSetp)
        in.hi = true;
      else if (m == "approx")
        in.approx = true;
      else if (m == "ftz")
        in.ftz = true;
      else if (m == "sat" || m == "satfinite")
        in.sat = true;
      else if (m == "rn" || m == "rz" || m == "rm" || m == "rp" || m == "rni" || m == "rzi" ||
               m == "rmi" || m == "rpi")
        in.rounding = m;
      else if (in.op == Op::kSetp && std::find(kCmp.begin(), kCmp.end(), m) != kCmp.end())
        in.cmp = m;
      else if (std::find(kModes.begin(), kModes.end(), m) != kModes.end() && in.cmp.empty())
        in.cmp = m;
    }
    const bool first_type =
        in.op == Op::kCvt || in.op == Op::kMma;  // the destination's type comes first
    if (!types.empty()) in.type = first_type ? types.front() : types.back();
    if (in.op == Op::kCvt && types.size() == 2) in.src_type = types.back();
    if (in.op == Op::kMma && types.size() == 4) in.src_type = types[1];  // d, a, b, c types
    for (const std::string& o : SplitOperands(rest)) {
      absl::StatusOr<Operand> parsed = ParseOperand(o, line);
      if (!parsed.ok()) return parsed.status();
      in.ops.push_back(*parsed);
    }
    if (absl::Status s = CheckForm(in); !s.ok()) return s;
    e_->code.push_back(std::move(in));
    return absl::OkStatus();
  }

  // An instruction's opcode and modifiers as written ("add.s32"), its guard left out.
  static std::string Opcode(absl::string_view text) {
    if (absl::StartsWith(text, "@"))
      text = absl::StripLeadingAsciiWhitespace(
          text.substr(std::min(text.size(), text.find_first_of(" \t"))));
    return std::string(text.substr(0, text.find_first_of(" \t")));
  }

  // What the PTX ISA allows of an instruction's form, where a mistake would otherwise be run as
  // something else: a type of no width PTX has, an ld/st modifier it does not know or a vector
  // whose register list is not its width, and the operand count of the integer and float ALU ops.
  absl::Status CheckForm(const Instr& in) const {
    for (const std::string& m : in.mods) {
      const bool type_like = m.size() > 1 &&
                             (m[0] == 'b' || m[0] == 's' || m[0] == 'u' || m[0] == 'f') &&
                             std::all_of(m.begin() + 1, m.end(), ::isdigit);
      static const std::set<std::string> kWidths = {"1", "2", "4", "8", "16", "32", "64", "128"};
      if (type_like && !kWidths.count(m.substr(1)))
        return Error(in.line, absl::StrCat("'.", m, "' is no PTX type, in '", in.text, "'"));
    }
    if (in.op == Op::kLd || in.op == Op::kSt) {
      static const std::set<std::string> kLdSt = {
          "global",  "shared",  "local",   "param", "const", "nc",      "ca",
          "cg",      "cs",      "lu",      "cv",    "wb",    "wt",      "volatile",
          "relaxed", "acquire", "release", "weak",  "mmio",  "cta",     "cluster",
          "gpu",     "sys",     "v2",      "v4",    "v8",    "unified", "b128"};
      for (const std::string& m : in.mods)
        if (!kLdSt.count(m) && !Types().count(m) && !absl::StartsWith(m, "shared::") &&
            !absl::StartsWith(m, "param::") && !absl::StartsWith(m, "L1::") &&
            !absl::StartsWith(m, "L2::"))
          return Error(in.line,
                       absl::StrCat("'.", m, "' is no modifier of ", in.op == Op::kLd ? "ld" : "st",
                                    ", in '", in.text, "'"));
      const size_t data = in.op == Op::kLd ? 0 : 1;  // (st: after its address)
      if (data < in.ops.size()) {
        const size_t n = in.ops[data].regs.empty() ? 1 : in.ops[data].regs.size();
        if (n != static_cast<size_t>(in.vec) && !(n == 1 && in.vec == 1))
          return Error(in.line,
                       absl::StrCat(in.vec, " element", in.vec > 1 ? "s" : "", " (.v", in.vec,
                                    ") and ", n, " registers, in '", in.text, "'"));
      }
    }
    if (absl::Status alu = CheckAluModifiers(in); !alu.ok()) return alu;
    static const std::map<Op, size_t> kOperands = {
        {Op::kAdd, 3}, {Op::kSub, 3},  {Op::kMul, 3},  {Op::kDiv, 3}, {Op::kRem, 3}, {Op::kMin, 3},
        {Op::kMax, 3}, {Op::kAnd, 3},  {Op::kOr, 3},   {Op::kXor, 3}, {Op::kShl, 3}, {Op::kShr, 3},
        {Op::kMad, 4}, {Op::kFma, 4},  {Op::kSelp, 4}, {Op::kNeg, 2}, {Op::kAbs, 2}, {Op::kNot, 2},
        {Op::kMov, 2}, {Op::kPopc, 2}, {Op::kClz, 2},  {Op::kBrev, 2}};
    if (auto want = kOperands.find(in.op); want != kOperands.end() && in.ops.size() != want->second)
      return Error(in.line, absl::StrCat(in.ops.size(), " operands where '", Opcode(in.text),
                                         "' takes ", want->second, ", in '", in.text, "'"));
    return absl::OkStatus();
  }

  // The modifiers each ALU op and cvt has in the PTX ISA besides its types (a modifier it does
  // not have, or a type PTX does not name, was run as if it were not there), at most the types
  // the op takes, and no rounding the emulator does not model: the float ops round to nearest
  // (.rn) here, so .rz, .rm and .rp are refused rather than run as .rn.
  absl::Status CheckAluModifiers(const Instr& in) const {
    static const std::set<std::string> kDirected = {"rz", "rm", "rp", "rs"};
    static const std::map<Op, std::set<std::string>> kMods = {
        {Op::kAdd, {"rn", "rz", "rm", "rp", "ftz", "sat", "cc"}},
        {Op::kSub, {"rn", "rz", "rm", "rp", "ftz", "sat", "cc"}},
        {Op::kMul, {"rn", "rz", "rm", "rp", "ftz", "sat", "lo", "hi", "wide"}},
        {Op::kMad, {"rn", "rz", "rm", "rp", "ftz", "sat", "lo", "hi", "wide", "cc"}},
        {Op::kFma, {"rn", "rz", "rm", "rp", "ftz", "sat", "relu", "oob"}},
        {Op::kDiv, {"rn", "rz", "rm", "rp", "ftz", "approx", "full"}},
        {Op::kRem, {}},
        {Op::kMin, {"ftz", "NaN", "xorsign", "abs", "relu"}},
        {Op::kMax, {"ftz", "NaN", "xorsign", "abs", "relu"}},
        {Op::kNeg, {"ftz"}},
        {Op::kAbs, {"ftz"}},
        {Op::kAnd, {}},
        {Op::kOr, {}},
        {Op::kXor, {}},
        {Op::kNot, {}},
        {Op::kShl, {}},
        {Op::kShr, {}},
        {Op::kPopc, {}},
        {Op::kClz, {}},
        {Op::kBrev, {}},
        {Op::kSelp, {}},
        {Op::kCvt,
         {"rn", "rz", "rm", "rp", "rna", "rs", "rni", "rzi", "rmi", "rpi", "ftz", "sat",
          "satfinite", "relu"}}};
    auto allowed = kMods.find(in.op);
    if (allowed == kMods.end()) return absl::OkStatus();
    const std::string opcode = Opcode(in.text);
    const std::string name = opcode.substr(0, opcode.find('.'));
    int types = 0;
    std::vector<std::string> type_names;
    for (const std::string& m : in.mods) {
      if (Types().count(m)) {
        ++types, type_names.push_back(m);
        continue;
      }
      if (!allowed->second.count(m))
        return Error(in.line, absl::StrCat("'.", m, "' is no modifier of ", name,
                                           " (nor a PTX type), in '", in.text, "'"));
    }
    // Two types: cvt's destination and source, and fma's mixed form (f32 by f16 or bf16).
    const bool mixed_fma = in.op == Op::kFma && types == 2 && type_names[0] == "f32" &&
                           (type_names[1] == "f16" || type_names[1] == "bf16");
    const int most = in.op == Op::kCvt || mixed_fma ? 2 : 1;
    if (types > most)
      return Error(in.line, absl::StrCat(name, " takes ", most == 1 ? "one type" : "two types",
                                         ", not ", types, ", in '", in.text, "'"));
    // Directed rounding of a float result: not modelled here (kiln emits .rn alone).
    const bool float_result =
        !type_names.empty() &&
        (type_names[0][0] == 'f' || absl::StartsWith(type_names[0], "bf") ||
         absl::StartsWith(type_names[0], "e4m3") || absl::StartsWith(type_names[0], "e5m2"));
    for (const std::string& m : in.mods)
      if (kDirected.count(m) && float_result)
        return absl::UnimplementedError(
            absl::StrCat("PTX line ", in.line, ": '.", m,
                         "' rounding is not emulated (the float ops round to "
                         "nearest here), in '",
                         in.text, "'"));
    return absl::OkStatus();
  }

  void Label(const std::string& name) {
    labels_[name] = static_cast<int>(e_->code.size());
    last_label_ = name;
  }

  // "LABEL: .branchtargets L0, L1, ...;" (the label just before it names the list brx.idx reads).
  absl::Status BranchTargets(const std::string& stmt, int line) {
    if (last_label_.empty() || labels_.at(last_label_) != static_cast<int>(e_->code.size()))
      return Error(line, ".branchtargets without a label of its own before it");
    std::vector<std::string> names;
    for (absl::string_view n : absl::StrSplit(stmt.substr(std::string(".branchtargets").size()),
                                              ',', absl::SkipWhitespace()))
      names.emplace_back(absl::StripAsciiWhitespace(n));
    if (names.empty()) return Error(line, ".branchtargets with no label");
    target_lists_[last_label_] = std::move(names);
    return absl::OkStatus();
  }

  absl::Status ResolveLabels() {
    for (Instr& in : e_->code)
      for (Operand& o : in.ops)
        if (o.kind == Operand::Kind::kLabel && in.op == Op::kBrx) {
          auto list = target_lists_.find(o.symbol);
          if (list == target_lists_.end())
            return Error(in.line,
                         absl::StrCat("brx.idx: ", o.symbol, " is no .branchtargets list"));
          for (const std::string& name : list->second) {
            auto it = labels_.find(name);
            if (it == labels_.end()) return Error(in.line, absl::StrCat("unknown label ", name));
            o.regs.push_back(it->second);
          }
        } else if (o.kind == Operand::Kind::kLabel ||
                   (in.op == Op::kBra && o.kind == Operand::Kind::kSymbol)) {
          // (A label is any identifier, `$L__BB0_1` or `LOOP`: a branch's operand names one.)
          auto it = labels_.find(o.symbol);
          if (it == labels_.end()) return Error(in.line, absl::StrCat("unknown label ", o.symbol));
          o.kind = Operand::Kind::kLabel;
          o.target = it->second;
        }
    return absl::OkStatus();
  }

 private:
  void Add(const std::string& name, bool narrow) {
    scopes_.back()[name] = e_->num_regs++;
    e_->reg_names.push_back(name);
    e_->reg_narrow.push_back(narrow);
  }

  Entry* e_;
  int loc_file_ = 0, loc_line_ = 0;
  std::vector<std::map<std::string, int>> scopes_;
  std::map<std::string, int> labels_;
  std::string last_label_;
  std::map<std::string, std::vector<std::string>> target_lists_;  // .branchtargets, by label
};

// The registers wgmma.mma_async holds (accumulators, an A fragment) and the other instructions
// that name one: the PTX ISA asks for a wgmma.fence between such an access and the next wgmma
// that uses the register, which the emulator checks as it runs (exec_hopper.cc).
void MarkWgmmaRegisterAccesses(Entry& e) {
  e.wgmma_regs.assign(e.num_regs, false);
  bool any = false;
  for (const Instr& in : e.code) {
    if (in.op != Op::kWgmma || in.mods.empty() || in.mods[0] != "mma_async") continue;
    for (size_t i = 0; i < 2 && i < in.ops.size(); ++i)
      if (in.ops[i].kind == Operand::Kind::kVector)
        for (int r : in.ops[i].regs)
          if (r >= 0) e.wgmma_regs[r] = any = true;
  }
  if (!any) return;
  auto held = [&](int r) { return r >= 0 && r < e.num_regs && e.wgmma_regs[r]; };
  for (Instr& in : e.code)
    if (in.op != Op::kWgmma) ForEachRegister(in, [&](int r) { in.touches_wgmma_regs |= held(r); });
}

// ".param .u64 .ptr .global .align 1 NAME" or ".param .align 64 .b8 NAME[128]".
absl::StatusOr<Param> ParseParam(absl::string_view text, int line) {
  std::vector<std::string> w = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  Param p;
  int elem = 0, align = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == ".align" && i + 1 < w.size()) {
      absl::SimpleAtoi(w[++i], &align);
      continue;
    }
    if (absl::StartsWith(w[i], ".")) {
      if (auto t = Types().find(w[i].substr(1)); t != Types().end()) {
        elem = TyBits(t->second) / 8;
        p.floating = w[i][1] == 'f';
        p.untyped = w[i][1] == 'b';
      }
      continue;
    }
    p.name = w[i];
  }
  int count = 1;
  if (size_t lb = p.name.find('['); lb != std::string::npos) {
    if (!absl::SimpleAtoi(p.name.substr(lb + 1, p.name.size() - lb - 2), &count))
      return Error(line, absl::StrCat("bad parameter array '", text, "'"));
    p.name = p.name.substr(0, lb);
  }
  if (p.name.empty() || elem == 0)
    return Error(line, absl::StrCat("cannot read parameter '", text, "'"));
  p.bytes = elem * count;
  p.offset = std::max(align, elem);  // the alignment, for now; offsets are assigned by the caller
  return p;
}

}  // namespace

absl::StatusOr<Module> Parse(const std::string& text) {
  Module m;
  // Strip comments, keep line numbers.
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (std::string& l : lines)
    if (size_t c = l.find("//"); c != std::string::npos) l = l.substr(0, c);
  size_t i = 0;
  int64_t static_shared = 0;
  std::vector<std::string> dynamic_shared;
  while (i < lines.size()) {
    std::string l = std::string(absl::StripAsciiWhitespace(lines[i]));
    const int line_no = static_cast<int>(i) + 1;
    if (l.empty()) {
      ++i;
      continue;
    }
    if (absl::StartsWith(l, ".target")) {
      std::vector<std::string> w = absl::StrSplit(l, absl::ByAnyChar(" \t,"), absl::SkipEmpty());
      if (w.size() > 1) m.target = w[1];
      ++i;
      continue;
    }
    if (absl::StartsWith(l, ".version") || absl::StartsWith(l, ".address_size")) {
      ++i;
      continue;
    }
    if (absl::StartsWith(l, ".file")) {  // .file N "name"
      std::vector<std::string> w = absl::StrSplit(l, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      int id = 0;
      if (w.size() >= 3 && absl::SimpleAtoi(w[1], &id))
        m.files[id] = std::string(absl::StripSuffix(absl::StripPrefix(w[2], "\""), "\""));
      ++i;
      continue;
    }
    if (absl::StartsWith(l, ".section")) {  // debug sections: skipped to their closing brace
      int depth = 0;
      bool opened = false;
      for (; i < lines.size(); ++i) {
        for (char c : lines[i]) depth += c == '{' ? 1 : c == '}' ? -1 : 0, opened |= c == '{';
        if (opened && depth == 0) break;
      }
      ++i;
      continue;
    }
    if ((absl::StartsWith(l, ".global") || absl::StartsWith(l, ".visible .global") ||
         absl::StartsWith(l, ".extern .global")) &&
        !absl::StrContains(l, ".entry")) {
      // [.visible] .global .align A .TYPE NAME[N] [= ...];  (zeroed: an initializer is not read)
      std::vector<std::string> w = absl::StrSplit(absl::StripSuffix(l.substr(0, l.find('=')), ";"),
                                                  absl::ByAnyChar(" \t"), absl::SkipEmpty());
      std::string name = w.back();
      int64_t count = 1, elem = 1;
      for (const std::string& t : w)
        if (absl::StartsWith(t, ".u") || absl::StartsWith(t, ".s") || absl::StartsWith(t, ".b") ||
            absl::StartsWith(t, ".f"))
          absl::SimpleAtoi(t.substr(2), &elem), elem = std::max<int64_t>(elem / 8, 1);
      if (size_t lb = name.find('['); lb != std::string::npos) {
        absl::SimpleAtoi(name.substr(lb + 1, name.size() - lb - 2), &count);
        name = name.substr(0, lb);
      }
      m.global_symbols[name] = std::max<int64_t>(count * elem, 1);
      ++i;
      continue;
    }
    if (absl::StrContains(l, ".shared") && !absl::StrContains(l, ".entry")) {
      // [.extern] .shared .align A .b8 NAME[N];  (extern: dynamic shared memory, after the static)
      std::vector<std::string> w =
          absl::StrSplit(absl::StripSuffix(l, ";"), absl::ByAnyChar(" \t"), absl::SkipEmpty());
      std::string name = w.back();
      int64_t count = 0, align = 16;
      for (size_t k = 0; k + 1 < w.size(); ++k)
        if (w[k] == ".align") absl::SimpleAtoi(w[k + 1], &align);
      if (size_t lb = name.find('['); lb != std::string::npos) {
        absl::SimpleAtoi(name.substr(lb + 1, name.size() - lb - 2), &count);
        name = name.substr(0, lb);
      }
      if (absl::StrContains(l, ".extern")) {
        dynamic_shared.push_back(name);
      } else {
        static_shared = (static_shared + align - 1) / align * align;
        m.shared_symbols[name] = static_shared;
        static_shared += count;
      }
      ++i;
      continue;
    }
    if (absl::StrContains(l, ".entry")) {
      Entry e;
      size_t at = l.find(".entry");
      std::string after = std::string(absl::StripAsciiWhitespace(l.substr(at + 6)));
      e.name = after.substr(0, after.find_first_of("( \t"));
      // Parameters until ')'.
      std::string header;
      while (i < lines.size() && !absl::StrContains(header, ")")) header += lines[i++] + "\n";
      size_t open = header.find('('), close = header.rfind(')');
      if (open == std::string::npos || close == std::string::npos)
        return Error(line_no, "bad .entry header");
      int offset = 0;
      for (absl::string_view p :
           absl::StrSplit(header.substr(open + 1, close - open - 1), ',', absl::SkipWhitespace())) {
        absl::StatusOr<Param> param = ParseParam(absl::StripAsciiWhitespace(p), line_no);
        if (!param.ok()) return param.status();
        const int align = param->offset;
        offset = (offset + align - 1) / align * align;
        param->offset = offset;
        offset += param->bytes;
        e.params.push_back(*param);
      }
      e.param_bytes = offset;
      // Directives (.maxntid, .reqntid, ...) until the body's '{'; .minnctapersm N sets the
      // register share a CTA launches with (65536 over N CTAs' threads).
      for (; i < lines.size() && absl::StripAsciiWhitespace(lines[i]) != "{"; ++i) {
        std::vector<std::string> w =
            absl::StrSplit(lines[i], absl::ByAnyChar(" \t"), absl::SkipEmpty());
        if (w.size() >= 2 && w[0] == ".minnctapersm" &&
            (!absl::SimpleAtoi(w[1], &e.min_ctas_per_sm) || e.min_ctas_per_sm < 1))
          return Error(static_cast<int>(i) + 1, absl::StrCat("bad .minnctapersm '", w[1], "'"));
        if (w.size() >= 2 && w[0] == ".maxntid") {  // ".maxntid 256, 1, 1" or "256,1,1"
          int threads = 1;
          bool read = true;
          for (absl::string_view d :
               absl::StrSplit(absl::string_view(lines[i]).substr(lines[i].find(".maxntid") + 8),
                              absl::ByAnyChar(", \t"), absl::SkipEmpty())) {
            int n = 0;
            read = read && absl::SimpleAtoi(d, &n) && n > 0;
            threads *= read ? n : 1;
          }
          e.max_threads = read ? threads : 0;
        }
      }
      if (i == lines.size()) return Error(line_no, "entry without a body");
      ++i;
      EntryBuilder b(&e);
      std::string cur;
      int cur_line = static_cast<int>(i) + 1;
      bool done = false;
      for (; i < lines.size() && !done; ++i) {
        const std::string& raw = lines[i];
        if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(raw),
                             ".loc")) {  // .loc FILE LINE COLUMN
          std::vector<std::string> w =
              absl::StrSplit(raw, absl::ByAnyChar(" \t"), absl::SkipEmpty());
          int file = 0, at = 0;
          if (w.size() >= 3 && absl::SimpleAtoi(w[1], &file) && absl::SimpleAtoi(w[2], &at))
            b.SetLoc(file, at);
          continue;
        }
        for (char c : raw) {
          const bool blank = absl::StripAsciiWhitespace(cur).empty();
          if (blank && c == '{') {
            b.Open();
            continue;
          }
          if (blank && c == '}') {
            if (b.depth() == 1) {
              done = true;
              break;
            }
            b.Close();
            continue;
          }
          if (blank && !std::isspace(static_cast<unsigned char>(c)))
            cur_line = static_cast<int>(i) + 1;
          if (c == ';') {
            std::string stmt = std::string(absl::StripAsciiWhitespace(cur));
            cur.clear();
            if (absl::StartsWith(stmt, ".reg")) {
              if (absl::Status s = b.Declare(stmt, cur_line); !s.ok()) return s;
            } else if (absl::StartsWith(stmt, ".branchtargets")) {
              if (absl::Status s = b.BranchTargets(stmt, cur_line); !s.ok()) return s;
            } else if (absl::StartsWith(stmt, ".")) {
              if (!absl::StartsWith(stmt, ".pragma") && !absl::StartsWith(stmt, ".loc"))
                return Error(cur_line,
                             absl::StrCat("the emulator does not know the directive '", stmt, "'"));
            } else if (!stmt.empty()) {
              if (absl::Status s = b.Instruction(stmt, cur_line); !s.ok()) return s;
            }
            continue;
          }
          if (c == ':' && IsIdentifier(absl::StripAsciiWhitespace(cur))) {
            b.Label(std::string(absl::StripAsciiWhitespace(cur)));
            cur.clear();
            continue;
          }
          cur += c;
        }
        cur += ' ';
      }
      if (!done) return Error(line_no, absl::StrCat("entry ", e.name, " has no closing brace"));
      if (absl::Status s = b.ResolveLabels(); !s.ok()) return s;
      MarkWgmmaRegisterAccesses(e);
      MarkLoopGuards(e);
      m.entries.push_back(std::move(e));
      continue;
    }
    ++i;  // other module-level directives (.globl, .visible .func declarations) carry nothing we
          // run
  }
  const int64_t dyn = (static_shared + 1023) / 1024 * 1024;
  for (const std::string& name : dynamic_shared) m.shared_symbols[name] = static_shared ? dyn : 0;
  return m;
}

}  // namespace kiln::emu::ptx
