#include "kiln/bundle/manifest.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::rt {
namespace {

constexpr absl::string_view kMagic = "kiln-bundle 1";

absl::Status ParseError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("manifest line ", line, ": ", what));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool IsSymbol(absl::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

int SmemBudgetBytes(absl::string_view target) {
  if (target == "sm_80") return 163 * 1024;
  if (target == "sm_90a" || target == "sm_100a") return 227 * 1024;
  return 0;
}

GridExpr::GridExpr(const std::string& rule) : GridExpr(rule.c_str()) {}
GridExpr::GridExpr(const char* rule) {
  absl::StatusOr<GridExpr> e = Parse(rule);
  if (e.ok())
    factors = std::move(e->factors);
  else
    error = absl::StrCat("rule '", rule, "': ", e.status().message());
}

absl::StatusOr<GridExpr> GridExpr::Parse(absl::string_view text) {
  GridExpr expr;
  for (absl::string_view part : absl::StrSplit(text, '*')) {
    Factor f;
    std::vector<absl::string_view> sym_div = absl::StrSplit(part, '/');
    if (sym_div.size() == 1 && absl::SimpleAtoi(part, &f.value) && f.value > 0) {
      expr.factors.push_back(f);
      continue;
    }
    f.value = 1;  // SimpleAtoi above may have written it
    if (!IsSymbol(sym_div[0]) || sym_div.size() > 2)
      return absl::InvalidArgumentError(absl::StrCat(
          part.empty() ? absl::StrCat("an empty grid factor in '", text,
                                      "' (a '*' with no factor "
                                      "beside it)")
                       : absl::StrCat("bad grid factor '", part, "'"),
          ": a factor is a positive integer, or a symbol (the name ",
          "of an integer parameter of the kernel, e.g. M or rows, or sms: the SM count), ",
          "optionally divided by a positive integer, e.g. M/128; factors multiply with '*'"));
    f.symbol = std::string(sym_div[0]);
    if (sym_div.size() == 2 && (!absl::SimpleAtoi(sym_div[1], &f.value) || f.value <= 0))
      return absl::InvalidArgumentError(absl::StrCat("bad grid divisor in '", part, "'"));
    expr.factors.push_back(f);
  }
  if (expr.factors.empty()) return absl::InvalidArgumentError("empty grid expression");
  return expr;
}

std::string GridExpr::ToString() const {
  if (factors.empty()) return "1";
  return absl::StrJoin(factors, "*", [](std::string* out, const Factor& f) {
    if (f.symbol.empty())
      absl::StrAppend(out, f.value);
    else if (f.value == 1)
      absl::StrAppend(out, f.symbol);
    else
      absl::StrAppend(out, f.symbol, "/", f.value);
  });
}

std::vector<std::string> GridExpr::SymbolNames() const {
  std::vector<std::string> names;
  for (const Factor& f : factors)
    if (!f.symbol.empty() && f.symbol != "sms") names.push_back(f.symbol);
  return names;
}

namespace {

// A product past int64 saturates (at the largest or the smallest value, by its sign) rather than
// wrapping into a value a range check would pass: a hand-written rule of large factors is refused.
int64_t SaturatingProduct(int64_t a, int64_t b) {
  int64_t p;
  if (!__builtin_mul_overflow(a, b, &p)) return p;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

// v / d rounded up (d > 0) as (v + d - 1) / d has always taken it (toward 0 below 0), without
// that sum's overflow near int64's end. (Evaluate refuses a symbol below 0 first.)
int64_t CeilDiv(int64_t v, int64_t d) {
  return v > 0 ? v / d + (v % d != 0 ? 1 : 0) : (v + d - 1) / d;
}

}  // namespace

int64_t GridExpr::Value(const Symbols& symbols, int sm_count) const {
  int64_t total = 1;
  for (const Factor& f : factors) {
    if (f.symbol.empty())
      total = SaturatingProduct(total, f.value);
    else if (f.symbol == "sms")
      total = SaturatingProduct(total, std::max<int64_t>(1, sm_count / f.value));  // sms/2*2: even
    else {
      auto it = symbols.find(f.symbol);
      const int64_t v = it == symbols.end() ? 0 : it->second;
      total = SaturatingProduct(total, CeilDiv(v, f.value));
    }
  }
  return total;
}

absl::Status GridExpr::NoSizeBelowZero(const Symbols& symbols) const {
  for (const Factor& f : factors)
    if (auto it = symbols.find(f.symbol);
        !f.symbol.empty() && it != symbols.end() && it->second < 0)
      return absl::InvalidArgumentError(absl::StrCat(ToString(), " reads ", f.symbol, " = ",
                                                     it->second, ": a size is 0 or more"));
  return absl::OkStatus();
}

absl::StatusOr<unsigned> GridExpr::Evaluate(const Symbols& symbols, int sm_count) const {
  for (const Factor& f : factors)
    if (!f.symbol.empty() && f.symbol != "sms" && !symbols.contains(f.symbol))
      return absl::InvalidArgumentError(absl::StrCat("grid dimension ", ToString(), " needs ",
                                                     f.symbol, ", which has no value here"));
  // A size below 0 is no size, whatever the product (two of them would multiply to a grid).
  if (absl::Status sizes = NoSizeBelowZero(symbols); !sizes.ok())
    return absl::InvalidArgumentError(absl::StrCat("grid dimension ", sizes.message()));
  const int64_t total = Value(symbols, sm_count);
  if (total <= 0 || total > (int64_t{1} << 31) - 1) {
    std::vector<std::string> values;  // what the rule read
    for (const Factor& f : factors)
      if (!f.symbol.empty() && f.symbol != "sms" &&
          std::find(values.begin(), values.end(),
                    absl::StrCat(f.symbol, " = ", symbols.at(f.symbol))) == values.end())
        values.push_back(absl::StrCat(f.symbol, " = ", symbols.at(f.symbol)));  // (each once)
    return absl::InvalidArgumentError(
        absl::StrCat("grid dimension ", ToString(), " = ",
                     total == std::numeric_limits<int64_t>::max()   ? std::string("2^63 or more")
                     : total == std::numeric_limits<int64_t>::min() ? std::string("-2^63 or less")
                                                                    : absl::StrCat(total),
                     " is out of range (1 to 2^31-1 blocks)",
                     values.empty() ? "" : absl::StrCat(" with ", absl::StrJoin(values, ", "))));
  }
  return static_cast<unsigned>(total);
}

TensorMapSpec TensorMapParam::Resolve(const Symbols& symbols) const {
  TensorMapSpec spec;
  spec.dtype = dtype;
  spec.swizzle = swizzle;
  spec.box = box;
  for (const GridExpr& d : dims) spec.dims.push_back(d.Value(symbols, 0));
  for (const GridExpr& s : strides) spec.strides_bytes.push_back(s.Value(symbols, 0));
  return spec;
}

int TensorMapParam::BoxBytes() const {
  int bytes = TmaElementBytes(dtype);
  for (uint32_t b : box) bytes *= b;
  return bytes;
}

namespace {
const char* const kSwizzleNames[] = {"none", "32B", "64B", "128B"};
const std::pair<const char*, TmaDtype> kDtypeNames[] = {{"u8", TmaDtype::kU8},
                                                        {"u16", TmaDtype::kU16},
                                                        {"f16", TmaDtype::kF16},
                                                        {"f32", TmaDtype::kF32},
                                                        {"bf16", TmaDtype::kBF16}};

std::string ExprList(const std::vector<GridExpr>& list) {
  if (list.empty()) return "-";
  return absl::StrJoin(list, ",",
                       [](std::string* out, const GridExpr& e) { out->append(e.ToString()); });
}

// A source place (file:line) as one word of a manifest line: a path may hold spaces (a project
// in "My Kernels/"), which would split it, so spaces and the escape's own % are %-escaped.
std::string SourceWord(absl::string_view place) {
  return absl::StrReplaceAll(place, {{"%", "%25"}, {" ", "%20"}});
}
std::string SourceOfWord(absl::string_view word) {
  return absl::StrReplaceAll(word, {{"%20", " "}, {"%25", "%"}});
}

std::string TensorMapLine(const TensorMapParam& t) {
  const char* dtype = "?";
  for (auto [name, d] : kDtypeNames)
    if (d == t.dtype) dtype = name;
  return absl::StrCat(t.tensor, " ", t.by_value ? "value" : "pointer", " ", dtype, " ",
                      ExprList(t.dims), " ", ExprList(t.strides), " ", absl::StrJoin(t.box, ","),
                      " ", kSwizzleNames[static_cast<int>(t.swizzle)]);
}

// Fields after "param NAME tmap": operand, pass mode, dtype, dims, strides, box, swizzle.
absl::StatusOr<TensorMapParam> ParseTensorMap(const std::vector<std::string>& w) {
  TensorMapParam t;
  t.tensor = w[0];
  if (w[1] != "value" && w[1] != "pointer")
    return absl::InvalidArgumentError("bad tensor map pass mode");
  t.by_value = w[1] == "value";
  bool dtype_ok = false;
  for (auto [name, d] : kDtypeNames)
    if (w[2] == name) t.dtype = d, dtype_ok = true;
  if (!dtype_ok) return absl::InvalidArgumentError("bad tensor map dtype");
  for (auto [text, out] : {std::pair{&w[3], &t.dims}, std::pair{&w[4], &t.strides}}) {
    if (*text == "-") continue;
    for (absl::string_view part : absl::StrSplit(*text, ',')) {
      absl::StatusOr<GridExpr> e = GridExpr::Parse(part);
      if (!e.ok()) return e.status();
      out->push_back(*e);
    }
  }
  for (absl::string_view part : absl::StrSplit(w[5], ',')) {
    uint32_t b;
    if (!absl::SimpleAtoi(part, &b)) return absl::InvalidArgumentError("bad tensor map box");
    t.box.push_back(b);
  }
  int swizzle = -1;
  for (int i = 0; i < 4; ++i)
    if (w[6] == kSwizzleNames[i]) swizzle = i;
  if (swizzle < 0) return absl::InvalidArgumentError("bad tensor map swizzle");
  t.swizzle = static_cast<TmaSwizzle>(swizzle);
  if (t.box.empty() || t.box.size() > 5 ||
      (!t.dims.empty() && (t.dims.size() != t.box.size() || t.strides.size() + 1 != t.dims.size())))
    return absl::InvalidArgumentError("tensor map rank, box and strides disagree");
  return t;
}
// Every rule (grid, dynamic shared memory, tensor maps' dims and strides, tables) and every
// requirement names integer parameters only, as the builder checks (KernelState::ParseRule): an
// unknown name would read as 0 at launch.
absl::Status CheckRuleSymbols(const Manifest& m) {
  std::set<std::string> ints, tables;
  for (const ParamSpec& p : m.params) {
    if (p.kind == ParamSpec::Kind::kI32 || p.kind == ParamSpec::Kind::kI64) ints.insert(p.name);
    if (p.kind == ParamSpec::Kind::kScheduleTable) tables.insert(p.name);
  }
  auto check = [&](absl::string_view where, const std::string& symbol) -> absl::Status {
    if (ints.count(symbol)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest of ", m.name, ": the ", where, " names ", symbol,
        ", which is not an integer parameter of the kernel (",
        ints.empty() ? "it has none" : absl::StrCat("it has ", absl::StrJoin(ints, ", ")), ")"));
  };
  auto check_rule = [&](absl::string_view where, const GridExpr& e) -> absl::Status {
    for (const std::string& symbol : e.SymbolNames())
      if (absl::Status s = check(absl::StrCat(where, " rule ", e.ToString()), symbol); !s.ok())
        return s;
    return absl::OkStatus();
  };
  for (const GridExpr& g : m.grid)
    if (absl::Status s = check_rule("grid", g); !s.ok()) return s;
  if (absl::Status s = check_rule("smem_extra", m.smem_extra); !s.ok()) return s;
  for (const Requirement& r : m.requirements)
    if (absl::Status s = check("requirement", r.symbol); !s.ok()) return s;
  for (const ParamSpec& p : m.params) {
    const std::string where = absl::StrCat("parameter ", p.name, "'s");
    for (const GridExpr& e : p.tensor_map.dims)
      if (absl::Status s = check_rule(where, e); !s.ok()) return s;
    for (const GridExpr& e : p.tensor_map.strides)
      if (absl::Status s = check_rule(where, e); !s.ok()) return s;
    if (p.kind == ParamSpec::Kind::kScheduleTable) {
      for (const GridExpr* e : {&p.schedule.tiles_m, &p.schedule.tiles_n, &p.schedule.k_tiles})
        if (absl::Status s = check_rule(where, *e); !s.ok()) return s;
      if (p.schedule.work())
        if (absl::Status s = check(absl::StrCat(where, " split"), p.schedule.split); !s.ok())
          return s;
    }
    if (p.kind == ParamSpec::Kind::kWorkspace && !p.workspace.table.empty() &&
        !tables.count(p.workspace.table))
      return absl::InvalidArgumentError(absl::StrCat("manifest of ", m.name, ": workspace ", p.name,
                                                     " names table ", p.workspace.table,
                                                     ", which is not a table parameter"));
  }
  return absl::OkStatus();
}
}  // namespace

std::string Manifest::Serialize() const {
  std::string out = absl::StrCat(kMagic, "\n");
  absl::StrAppend(&out, "name ", name, "\nentry ", entry, "\ntarget ", target, "\n");
  absl::StrAppend(&out, "block ", block.x, " ", block.y, " ", block.z, "\n");
  absl::StrAppend(&out, "cluster ", cluster.x, " ", cluster.y, " ", cluster.z,
                  cluster_source.empty() ? "" : " " + SourceWord(cluster_source), "\n");
  absl::StrAppend(&out, "smem ", smem_bytes, "\n");
  absl::StrAppend(&out, "grid ", grid[0].ToString(), " ", grid[1].ToString(), " ",
                  grid[2].ToString(), grid_source.empty() ? "" : " " + SourceWord(grid_source),
                  "\n");
  for (const ParamSpec& p : params) {
    absl::StrAppend(&out, "param ", p.name, " ");
    switch (p.kind) {
      case ParamSpec::Kind::kPointer:
        absl::StrAppend(&out, "ptr", p.elem.empty() ? "" : " ", p.elem, "\n");
        break;
      case ParamSpec::Kind::kI32:
        absl::StrAppend(&out, "i32\n");
        break;
      case ParamSpec::Kind::kI64:
        absl::StrAppend(&out, "i64\n");
        break;
      case ParamSpec::Kind::kF32:
        absl::StrAppend(&out, "f32\n");
        break;
      case ParamSpec::Kind::kTensorMap:
        absl::StrAppend(&out, "tmap ", TensorMapLine(p.tensor_map),
                        p.tensor_map.source.empty() ? "" : " ", SourceWord(p.tensor_map.source),
                        "\n");
        break;
      case ParamSpec::Kind::kScheduleTable: {
        const ScheduleTableParam& t = p.schedule;
        absl::StrAppend(&out, "table ", t.curve, " ", t.tiles_m.ToString(), " ",
                        t.tiles_n.ToString(), " ", t.groups, " ", t.slots);
        if (t.work()) absl::StrAppend(&out, " work ", t.k_tiles.ToString(), " ", t.split);
        absl::StrAppend(&out, "\n");
        break;
      }
      case ParamSpec::Kind::kWorkspace:
        absl::StrAppend(&out, "workspace ", p.workspace.table.empty() ? "-" : p.workspace.table,
                        " ", p.workspace.bytes_per_partial, "\n");
        break;
    }
  }
  if (!smem_extra.factors.empty())
    absl::StrAppend(&out, "smem_extra ", smem_extra.ToString(), " ", SourceWord(smem_extra_source),
                    "\n");
  for (const Requirement& r : requirements)
    absl::StrAppend(&out, r.at_most >= 0 ? "require_at_most " : "require ", r.symbol, " ",
                    r.at_most >= 0 ? r.at_most : r.multiple, " ", SourceWord(r.source), "\n");
  for (const auto& [key, value] : attributes) absl::StrAppend(&out, "attr ", key, " ", value, "\n");
  if (watchdog_ms > 0) absl::StrAppend(&out, "watchdog ", watchdog_ms, "\n");
  if (waits_for_prior_grids) absl::StrAppend(&out, "waits_for_prior_grids\n");
  for (size_t i = 0; i < watch_sites.size(); ++i)
    absl::StrAppend(&out, "watch ", i, " ", SourceWord(watch_sites[i]), "\n");
  absl::StrAppend(&out, "source ", SourceWord(source), "\n");
  return out;
}

namespace {
// "grid X Y Z [SOURCE]": three grid rules, then the rule's line where the bundle records it.
absl::Status ParseGridLine(const std::vector<std::string>& w, Manifest& m) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<GridExpr> g = GridExpr::Parse(w[i + 1]);
    if (!g.ok() && absl::StrContains(w[i + 1], ':'))  // a source where a dimension belongs
      return absl::InvalidArgumentError(
          absl::StrCat("'", w[i + 1],
                       "' is no grid dimension: a grid line is three dimensions (X Y Z), then "
                       "the rule's line"));
    if (!g.ok()) return g.status();
    m.grid[i] = *g;
  }
  if (w.size() == 5) m.grid_source = SourceOfWord(w[4]);
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<Manifest> Manifest::Parse(absl::string_view text) {
  Manifest m;
  int line_no = 0;
  bool magic = false, seen_block = false, seen_grid = false;
  std::set<std::string> single_seen;  // the keys a manifest holds once
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++line_no;
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!magic) {
      if (line != kMagic) return ParseError(line_no, "not a kiln bundle manifest");
      magic = true;
      continue;
    }
    const std::string& key = w[0];
    // A second block, grid, name... line would silently replace the first (a hand-edited bundle).
    static const std::set<std::string> kSingle = {"name",       "entry",   "target", "source",
                                                  "block",      "cluster", "smem",   "grid",
                                                  "smem_extra", "watchdog"};
    if (kSingle.count(key) && !single_seen.insert(key).second)
      return ParseError(line_no, absl::StrCat("a second '", key, "' line"));
    auto want = [&](size_t n) { return w.size() == n + 1; };
    auto num = [&](size_t i, auto* out) { return absl::SimpleAtoi(w[i], out); };
    if (key == "param" && w.size() > 1 &&
        std::any_of(m.params.begin(), m.params.end(),
                    [&](const ParamSpec& p) { return p.name == w[1]; }))
      return ParseError(line_no, absl::StrCat("a second parameter named '", w[1],
                                              "' (written by an older kiln? bundle it again)"));
    if (key == "name" && want(1))
      m.name = w[1];
    else if (key == "entry" && want(1))
      m.entry = w[1];
    else if (key == "target" && want(1))
      m.target = w[1];
    else if (key == "source" && want(1))
      m.source = SourceOfWord(w[1]);
    else if ((key == "block" && want(3)) || (key == "cluster" && (want(3) || want(4)))) {
      seen_block |= key == "block";
      Dim3& d = key == "block" ? m.block : m.cluster;
      if (!num(1, &d.x) || !num(2, &d.y) || !num(3, &d.z) || d.count() == 0)
        return ParseError(line_no, "bad dims");
      if (w.size() == 5) m.cluster_source = SourceOfWord(w[4]);  // (ClusterDims' line)
    } else if (key == "smem" && want(1)) {
      if (!num(1, &m.smem_bytes)) return ParseError(line_no, "bad smem size");
    } else if (key == "grid" && (want(3) || want(4))) {  // (the rule's line, where recorded)
      seen_grid = true;
      if (absl::Status st = ParseGridLine(w, m); !st.ok()) return ParseError(line_no, st.message());
    } else if (key == "param" && want(3) && w[2] == "ptr") {
      static const std::set<std::string> kElems = {"bf16", "f16", "f32", "e4m3", "e5m2",
                                                   "i1",   "i8",  "i16", "i32",  "i64"};
      if (!kElems.count(w[3])) return ParseError(line_no, "bad pointer element type");
      ParamSpec p;
      p.name = w[1];
      p.kind = ParamSpec::Kind::kPointer;
      p.elem = w[3];
      m.params.push_back(p);
    } else if (key == "param" && want(2)) {
      static const std::map<std::string, ParamSpec::Kind> kKinds = {
          {"ptr", ParamSpec::Kind::kPointer},
          {"i32", ParamSpec::Kind::kI32},
          {"i64", ParamSpec::Kind::kI64},
          {"f32", ParamSpec::Kind::kF32}};
      auto kind = kKinds.find(w[2]);
      if (kind == kKinds.end())
        return ParseError(line_no, "bad param kind (ptr, i32, i64, f32, tmap, table, workspace)");
      ParamSpec p;
      p.name = w[1];
      p.kind = kind->second;
      m.params.push_back(p);
    } else if (key == "param" && (w.size() == 10 || w.size() == 11) && w[2] == "tmap") {
      absl::StatusOr<TensorMapParam> t =
          ParseTensorMap(std::vector<std::string>(w.begin() + 3, w.begin() + 10));
      if (!t.ok()) return ParseError(line_no, t.status().message());
      ParamSpec p;
      p.name = w[1];
      p.kind = ParamSpec::Kind::kTensorMap;
      p.tensor_map = *std::move(t);
      if (w.size() == 11) p.tensor_map.source = SourceOfWord(w[10]);  // (where recorded)
      m.params.push_back(p);
    } else if (key == "param" && (w.size() == 8 || (w.size() == 11 && w[8] == "work")) &&
               w[2] == "table") {
      ParamSpec p;
      p.name = w[1];
      p.kind = ParamSpec::Kind::kScheduleTable;
      ScheduleTableParam& t = p.schedule;
      t.curve = w[3];
      absl::StatusOr<GridExpr> tm = GridExpr::Parse(w[4]), tn = GridExpr::Parse(w[5]);
      if (t.curve != "hilbert" || !tm.ok() || !tn.ok() || !num(6, &t.groups) || !num(7, &t.slots) ||
          t.groups <= 0 || t.slots <= 0)
        return ParseError(line_no, "bad schedule table");
      t.tiles_m = *tm;
      t.tiles_n = *tn;
      if (w.size() == 11) {
        absl::StatusOr<GridExpr> kt = GridExpr::Parse(w[9]);
        if (!kt.ok()) return ParseError(line_no, "bad work table k-tiles");
        t.k_tiles = *kt;
        t.split = w[10];
      }
      m.params.push_back(p);
    } else if (key == "param" && w.size() == 5 && w[2] == "workspace") {
      ParamSpec p;
      p.name = w[1];
      p.kind = ParamSpec::Kind::kWorkspace;
      p.workspace.table = w[3] == "-" ? "" : w[3];
      if (!num(4, &p.workspace.bytes_per_partial) || p.workspace.bytes_per_partial <= 0)
        return ParseError(line_no, "bad workspace");
      m.params.push_back(p);
    } else if (key == "smem_extra" && want(2)) {
      absl::StatusOr<GridExpr> e = GridExpr::Parse(w[1]);
      if (!e.ok()) return ParseError(line_no, e.status().message());
      m.smem_extra = *e;
      m.smem_extra_source = SourceOfWord(w[2]);
    } else if (key == "require" && want(3)) {
      Requirement r{w[1], 0, SourceOfWord(w[3])};
      if (!num(2, &r.multiple) || r.multiple <= 0) return ParseError(line_no, "bad requirement");
      m.requirements.push_back(r);
    } else if (key == "require_at_most" && want(3)) {
      Requirement r{w[1], 1, SourceOfWord(w[3])};
      if (!num(2, &r.at_most) || r.at_most < 0) return ParseError(line_no, "bad requirement");
      m.requirements.push_back(r);
    } else if (key == "watchdog" && want(1)) {
      if (!num(1, &m.watchdog_ms) || m.watchdog_ms <= 0)
        return ParseError(line_no, "bad watchdog time");
    } else if (key == "waits_for_prior_grids" && want(0)) {
      m.waits_for_prior_grids = true;
    } else if (key == "watch" && want(2)) {
      size_t index;
      if (!num(1, &index) || index != m.watch_sites.size())
        return ParseError(line_no, "watch sites out of order");
      m.watch_sites.push_back(SourceOfWord(w[2]));
    } else if (key == "attr" && w.size() >= 2) {
      std::vector<std::string> rest(w.begin() + 2, w.end());
      m.attributes.emplace_back(w[1], absl::StrJoin(rest, " "));
    } else {
      return ParseError(line_no, absl::StrCat("unknown or malformed entry '", line, "'"));
    }
  }
  if (!magic) return absl::InvalidArgumentError("manifest is empty (it has no line of entries)");
  if (m.name.empty() || m.entry.empty() || m.target.empty() || !seen_block || !seen_grid)
    return absl::InvalidArgumentError("manifest lacks name, entry, target, block or grid");
  if (SmemBudgetBytes(m.target) == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("manifest of ", m.name, ": target ", m.target, " (sm_80, sm_90a or sm_100a)"));
  // CUDA's block: at most 1024 threads, 1024 x, 1024 y, 64 z (a GPU refuses more at launch).
  if (m.block.count() > 1024 || m.block.x > 1024 || m.block.y > 1024 || m.block.z > 64)
    return absl::InvalidArgumentError(absl::StrCat("manifest of ", m.name, ": a block of ",
                                                   m.block.x, "x", m.block.y, "x", m.block.z,
                                                   " threads, past CUDA's 1024"));
  if (absl::Status s = CheckRuleSymbols(m); !s.ok()) return s;
  return m;
}

namespace {
// A rule for one grid axis that covers what `rule` does in whole clusters of `c`, where the rule
// is one symbol's division ("n/128" -> "n/512*4", "sms" -> "sms/4*4"); else empty.
std::string RuleInClusters(const GridExpr& rule, unsigned c) {
  if (rule.factors.size() != 1 || rule.factors[0].symbol.empty()) return "";
  const GridExpr::Factor& f = rule.factors[0];
  const int64_t d = f.symbol == "sms" ? c : f.value * c;
  return absl::StrCat(f.symbol, "/", d, "*", c);
}
}  // namespace

absl::Status Manifest::CheckClusterTiling(Dim3 launch) const {
  const unsigned g[3] = {launch.x, launch.y, launch.z}, c[3] = {cluster.x, cluster.y, cluster.z};
  for (int axis = 0; axis < 3; ++axis) {
    if (c[axis] != 0 && g[axis] % c[axis] == 0) continue;
    const std::string xyz(1, "xyz"[axis]);
    std::string rule, fix;
    if (!grid_source.empty()) {
      rule = absl::StrCat("; the grid rule (", grid_source, ") gives ", xyz, " as \"",
                          grid[axis].ToString(), "\"");
      if (std::string r = RuleInClusters(grid[axis], c[axis]); !r.empty())
        fix = absl::StrCat(": \"", r, "\" covers as much in whole clusters");
      else
        fix = ": make it a multiple of the cluster's";
    }
    return absl::InvalidArgumentError(absl::StrCat(
        cluster_source.empty() ? source : cluster_source, ": ", name, ": clusters of ", cluster.x,
        "x", cluster.y, "x", cluster.z, " (ClusterDims) do not tile a grid of ", launch.x, "x",
        launch.y, "x", launch.z, ": ", xyz, " = ", g[axis], " is no multiple of ", c[axis], rule,
        fix));
  }
  return absl::OkStatus();
}

absl::Status Manifest::CheckRequirements(const Symbols& symbols) const {
  for (const Requirement& r : requirements) {
    auto it = symbols.find(r.symbol);
    if (r.at_most >= 0) {
      if (it == symbols.end() || it->second > r.at_most)
        return absl::InvalidArgumentError(
            absl::StrCat(r.source, ": ", name, " requires ", r.symbol, " to be at most ", r.at_most,
                         it == symbols.end() ? absl::StrCat(", but has no ", r.symbol)
                                             : absl::StrCat("; it is ", it->second)));
      continue;
    }
    if (it == symbols.end())
      return absl::InvalidArgumentError(absl::StrCat(r.source, ": ", name, " requires ", r.symbol,
                                                     " to be a multiple of ", r.multiple,
                                                     ", but has no ", r.symbol));
    if (it->second % r.multiple != 0)
      return absl::InvalidArgumentError(absl::StrCat(r.source, ": ", name, " requires ", r.symbol,
                                                     " to be a multiple of ", r.multiple,
                                                     "; it is ", it->second));
  }
  return absl::OkStatus();
}

int64_t Manifest::SmemBytes(const Symbols& symbols) const {
  const int64_t extra = smem_extra.factors.empty() ? 0 : smem_extra.Value(symbols, 0);
  int64_t total;  // saturated as the rule's product is: past int64, the largest (refused)
  if (__builtin_add_overflow(int64_t{smem_bytes}, extra, &total))
    total = extra > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  return total;
}

absl::StatusOr<int64_t> Manifest::LaunchSmem(const Symbols& symbols, int64_t budget,
                                             absl::string_view whose) const {
  if (absl::Status sizes = smem_extra.NoSizeBelowZero(symbols); !sizes.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(smem_extra_source, ": ", name, ": dynamic shared memory ", sizes.message()));
  const int64_t smem = SmemBytes(symbols);
  if (smem < 0 || (budget && smem > budget))
    return absl::ResourceExhaustedError(
        absl::StrCat(smem_extra.factors.empty() ? source : smem_extra_source, ": ", name,
                     ": needs ", smem, " bytes of shared memory (", smem_bytes, " planned",
                     smem_extra.factors.empty() ? "" : absl::StrCat(" + ", smem_extra.ToString()),
                     "); ", whose, " ", budget));
  return smem;
}

const std::string* Manifest::Attribute(absl::string_view key) const {
  for (const auto& [k, v] : attributes)
    if (k == key) return &v;
  return nullptr;
}

absl::StatusOr<Dim3> Manifest::GridFor(const Symbols& symbols, int sm_count) const {
  unsigned d[3];
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<unsigned> v = grid[i].Evaluate(symbols, sm_count);
    if (!v.ok()) return v.status();
    // CUDA's grid: y and z at most 65535 blocks (x up to 2^31 - 1, as Evaluate checks).
    if (i > 0 && *v > 65535)
      return absl::InvalidArgumentError(absl::StrCat("grid dimension ", i == 1 ? "y" : "z", " = ",
                                                     grid[i].ToString(), " = ", *v,
                                                     " is past CUDA's 65535 blocks"));
    d[i] = *v;
  }
  return Dim3{d[0], d[1], d[2]};
}

namespace {
// Whether a rule reads a size of 0: every symbol it names given, none below 0, the value 0.
bool ReadsZero(const GridExpr& g, const Symbols& symbols) {
  const std::vector<std::string> names = g.SymbolNames();
  return std::all_of(names.begin(), names.end(),
                     [&](const std::string& n) { return symbols.contains(n); }) &&
         g.NoSizeBelowZero(symbols).ok() && g.Value(symbols, 1) == 0;
}
}  // namespace

bool Manifest::GridIsEmpty(const Symbols& symbols) const {
  return std::any_of(std::begin(grid), std::end(grid),
                     [&](const GridExpr& g) { return ReadsZero(g, symbols); });
}

bool Manifest::TablesAreEmpty(const Symbols& symbols) const {
  return std::any_of(params.begin(), params.end(), [&](const ParamSpec& p) {
    return p.kind == ParamSpec::Kind::kScheduleTable &&
           (ReadsZero(p.schedule.tiles_m, symbols) || ReadsZero(p.schedule.tiles_n, symbols));
  });
}

std::string BundleStem(const std::string& kernel_name) {
  std::string stem = kernel_name;
  std::replace(stem.begin(), stem.end(), '/', '.');
  return stem;
}

absl::Status WriteBundle(const std::string& dir, const Bundle& bundle) {
  if (bundle.manifest.name.empty())
    return absl::InvalidArgumentError("a bundle with no name: its manifest names its files");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string stem = absl::StrCat(dir, "/", BundleStem(bundle.manifest.name));
  // Each file is written beside its place and renamed into it, so that a reader (another
  // process's launch, a build's bundling) never sees a file cut short; the PTX goes first, as
  // the manifest is what finds a bundle.
  for (auto [path, text] : {std::pair{stem + ".ptx", bundle.ptx},
                            std::pair{stem + ".manifest", bundle.manifest.Serialize()}}) {
    const std::string part = absl::StrCat(path, ".part.", getpid());
    errno = 0;
    std::ofstream out(part, std::ios::binary);
    out << text;
    out.close();  // (a full disk shows at the flush)
    const int error = errno;
    std::error_code renamed;
    if (out) std::filesystem::rename(part, path, renamed);
    if (!out || renamed) {
      std::error_code ignored;
      std::filesystem::remove(part, ignored);
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ",
                       ec ? absl::StrCat("the directory could not be made (", ec.message(), ")")
                       : renamed ? renamed.message()
                       : error   ? std::string(std::strerror(error))
                                 : std::string("the stream failed")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Bundle> ReadBundle(const std::string& dir, const std::string& kernel_name) {
  const std::string stem = absl::StrCat(dir, "/", BundleStem(kernel_name));
  absl::StatusOr<std::string> text = ReadFile(stem + ".manifest");
  if (!text.ok()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      return absl::NotFoundError(absl::StrCat("no bundle for '", kernel_name, "': ", dir,
                                              " is not a directory (of bundles)"));
    return absl::NotFoundError(absl::StrCat("no bundle for '", kernel_name, "' in ", dir));
  }
  absl::StatusOr<Manifest> manifest = Manifest::Parse(*text);
  if (!manifest.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(stem, ".manifest: ", manifest.status().message()));
  // A bundle is found by its file name; a manifest that names another kernel was renamed or
  // edited by hand, and whichever name it ran under, a message would name the other.
  std::string dotted = manifest->name;
  std::replace(dotted.begin(), dotted.end(), '/', '.');
  if (manifest->name != kernel_name && dotted == kernel_name)  // (the file's name, typed)
    return absl::NotFoundError(absl::StrCat("'", kernel_name,
                                            "' is the name of its bundle's files, which write the "
                                            "kernel's '/' as '.': the kernel is '",
                                            manifest->name, "'"));
  if (manifest->name != kernel_name)
    return absl::InvalidArgumentError(
        absl::StrCat(stem, ".manifest describes kernel '", manifest->name, "', not '", kernel_name,
                     "' (a bundle renamed or edited by hand: `kiln bundle` writes it anew)"));
  absl::StatusOr<std::string> ptx = ReadFile(stem + ".ptx");
  if (!ptx.ok())
    return absl::FailedPreconditionError(
        absl::StrCat("the bundle for '", kernel_name, "' in ", dir,
                     " has its manifest but not its PTX: ", ptx.status().message()));
  return Bundle{*std::move(manifest), *std::move(ptx)};
}

absl::StatusOr<std::vector<std::string>> ListBundles(const std::string& dir,
                                                     std::vector<std::string>* unreadable) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".manifest") continue;
    absl::StatusOr<std::string> text = ReadFile(entry.path().string());
    absl::StatusOr<Manifest> m =
        text.ok() ? Manifest::Parse(*text) : absl::StatusOr<Manifest>(text.status());
    if (!m.ok() && !unreadable)
      return absl::Status(m.status().code(),
                          absl::StrCat(entry.path().string(), ": ", m.status().message()));
    if (!m.ok()) {
      unreadable->push_back(absl::StrCat(entry.path().string(), ": ", m.status().message()));
      continue;
    }
    names.push_back(m->name);
  }
  if (ec)
    return absl::NotFoundError(absl::StrCat("cannot list bundles in ", dir, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
// Edits (insertions, deletions, substitutions; case aside) from a to b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string NearestName(const std::string& name, const std::vector<std::string>& names) {
  // bf16, the default type, is named by no option: "ops/softmax.bf16" is "ops/softmax".
  for (size_t at = name.find(".bf16"); at != std::string::npos; at = name.find(".bf16", at + 1))
    if (at + 5 == name.size() || name[at + 5] == '.') {
      const std::string plain = name.substr(0, at) + name.substr(at + 5);
      if (std::find(names.begin(), names.end(), plain) != names.end()) return plain;
    }
  std::string dotted = name;
  if (name.find('/') == std::string::npos)
    if (const size_t dot = dotted.find('.'); dot != std::string::npos) dotted[dot] = '/';
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const std::string& n : names) {
    const size_t d = std::min(EditDistance(name, n), EditDistance(dotted, n));
    if (!best || d < best_distance) best = &n, best_distance = d;
  }
  return best && best_distance <= std::max<size_t>(2, name.size() / 5) ? *best : "";
}

}  // namespace kiln::rt
