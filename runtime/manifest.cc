#include "kiln/runtime/manifest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::rt {
namespace {

constexpr absl::string_view kMagic = "kiln-bundle 1";

absl::Status ParseError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("manifest line ", line, ": ", what));
}

bool IsSymbol(absl::string_view s) { return s == "M" || s == "N" || s == "K" || s == "sms"; }

int64_t SizeOf(const ProblemSize& size, absl::string_view symbol) {
  return symbol == "M" ? size.m : symbol == "N" ? size.n : size.k;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<GridExpr> GridExpr::Parse(absl::string_view text) {
  GridExpr expr;
  for (absl::string_view part : absl::StrSplit(text, '*')) {
    Factor f;
    std::vector<absl::string_view> sym_div = absl::StrSplit(part, '/');
    if (sym_div.size() == 1 && absl::SimpleAtoi(part, &f.value) && f.value > 0) {
      expr.factors.push_back(f);
      continue;
    }
    if (!IsSymbol(sym_div[0]) || sym_div.size() > 2)
      return absl::InvalidArgumentError(absl::StrCat("bad grid factor '", part, "'"));
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
    if (f.symbol.empty()) absl::StrAppend(out, f.value);
    else if (f.value == 1) absl::StrAppend(out, f.symbol);
    else absl::StrAppend(out, f.symbol, "/", f.value);
  });
}

absl::StatusOr<unsigned> GridExpr::Evaluate(const ProblemSize& size, int sm_count) const {
  int64_t total = 1;
  for (const Factor& f : factors) {
    if (f.symbol.empty()) total *= f.value;
    else if (f.symbol == "sms") total *= sm_count;
    else total *= (SizeOf(size, f.symbol) + f.value - 1) / f.value;
  }
  if (total <= 0 || total > (int64_t{1} << 31) - 1)
    return absl::InvalidArgumentError(absl::StrCat("grid dimension ", ToString(), " = ", total,
                                                   " is out of range"));
  return static_cast<unsigned>(total);
}

std::string Manifest::Serialize() const {
  std::string out = absl::StrCat(kMagic, "\n");
  absl::StrAppend(&out, "name ", name, "\nentry ", entry, "\ntarget ", target, "\n");
  absl::StrAppend(&out, "block ", block.x, " ", block.y, " ", block.z, "\n");
  absl::StrAppend(&out, "cluster ", cluster.x, " ", cluster.y, " ", cluster.z, "\n");
  absl::StrAppend(&out, "smem ", smem_bytes, "\n");
  absl::StrAppend(&out, "grid ", grid[0].ToString(), " ", grid[1].ToString(), " ",
                  grid[2].ToString(), "\n");
  for (const ParamSpec& p : params)
    absl::StrAppend(&out, "param ", p.name, " ", p.kind == ParamSpec::Kind::kI32 ? "i32" : "ptr",
                    "\n");
  absl::StrAppend(&out, "gemm ", gemm.in_type, " ", gemm.out_type, " ", gemm.acc_type, " ",
                  gemm.a_order, " ", gemm.b_order, " ", gemm.c_order, " ", gemm.tile_m, " ",
                  gemm.tile_n, " ", gemm.tile_k, "\n");
  absl::StrAppend(&out, "source ", source, "\n");
  return out;
}

absl::StatusOr<Manifest> Manifest::Parse(absl::string_view text) {
  Manifest m;
  int line_no = 0;
  bool magic = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++line_no;
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!magic) {
      if (line != kMagic) return ParseError(line_no, "not a kiln bundle manifest");
      magic = true;
      continue;
    }
    const std::string& key = w[0];
    auto want = [&](size_t n) { return w.size() == n + 1; };
    auto num = [&](size_t i, auto* out) { return absl::SimpleAtoi(w[i], out); };
    if (key == "name" && want(1)) m.name = w[1];
    else if (key == "entry" && want(1)) m.entry = w[1];
    else if (key == "target" && want(1)) m.target = w[1];
    else if (key == "source" && want(1)) m.source = w[1];
    else if ((key == "block" || key == "cluster") && want(3)) {
      Dim3& d = key == "block" ? m.block : m.cluster;
      if (!num(1, &d.x) || !num(2, &d.y) || !num(3, &d.z) || d.count() == 0)
        return ParseError(line_no, "bad dims");
    } else if (key == "smem" && want(1)) {
      if (!num(1, &m.smem_bytes)) return ParseError(line_no, "bad smem size");
    } else if (key == "grid" && want(3)) {
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<GridExpr> g = GridExpr::Parse(w[i + 1]);
        if (!g.ok()) return ParseError(line_no, g.status().message());
        m.grid[i] = *g;
      }
    } else if (key == "param" && want(2)) {
      if (w[2] != "ptr" && w[2] != "i32") return ParseError(line_no, "bad param kind");
      m.params.push_back(
          {w[1], w[2] == "i32" ? ParamSpec::Kind::kI32 : ParamSpec::Kind::kPointer});
    } else if (key == "gemm" && want(9)) {
      GemmSpec& g = m.gemm;
      g.in_type = w[1], g.out_type = w[2], g.acc_type = w[3];
      g.a_order = w[4], g.b_order = w[5], g.c_order = w[6];
      if (!num(7, &g.tile_m) || !num(8, &g.tile_n) || !num(9, &g.tile_k))
        return ParseError(line_no, "bad gemm tile");
    } else {
      return ParseError(line_no, absl::StrCat("unknown or malformed entry '", line, "'"));
    }
  }
  if (!magic) return ParseError(0, "empty manifest");
  if (m.name.empty() || m.entry.empty() || m.target.empty())
    return absl::InvalidArgumentError("manifest lacks name, entry or target");
  return m;
}

absl::Status Manifest::CheckProblem(const ProblemSize& size) const {
  const int64_t dims[] = {size.m, size.n, size.k};
  const int64_t tiles[] = {gemm.tile_m, gemm.tile_n, gemm.tile_k};
  const char* names[] = {"M", "N", "K"};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] <= 0)
      return absl::InvalidArgumentError(absl::StrCat(names[i], " must be positive"));
    if (dims[i] % tiles[i] != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " cannot tile ", names[i], "=", dims[i], ": its tile is ", gemm.tile_m, "x",
          gemm.tile_n, "x", gemm.tile_k, " (", source, "), so ", names[i],
          " must be a multiple of ", tiles[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dim3> Manifest::GridFor(const ProblemSize& size, int sm_count) const {
  if (absl::Status s = CheckProblem(size); !s.ok()) return s;
  unsigned d[3];
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<unsigned> v = grid[i].Evaluate(size, sm_count);
    if (!v.ok()) return v.status();
    d[i] = *v;
  }
  return Dim3{d[0], d[1], d[2]};
}

std::string BundleStem(const std::string& kernel_name) {
  std::string stem = kernel_name;
  std::replace(stem.begin(), stem.end(), '/', '.');
  return stem;
}

absl::Status WriteBundle(const std::string& dir, const Bundle& bundle) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string stem = absl::StrCat(dir, "/", BundleStem(bundle.manifest.name));
  for (auto [path, text] : {std::pair{stem + ".manifest", bundle.manifest.Serialize()},
                            std::pair{stem + ".ptx", bundle.ptx}}) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<Bundle> ReadBundle(const std::string& dir, const std::string& kernel_name) {
  const std::string stem = absl::StrCat(dir, "/", BundleStem(kernel_name));
  absl::StatusOr<std::string> text = ReadFile(stem + ".manifest");
  if (!text.ok())
    return absl::NotFoundError(absl::StrCat("no bundle for '", kernel_name, "' in ", dir));
  absl::StatusOr<Manifest> manifest = Manifest::Parse(*text);
  if (!manifest.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(stem, ".manifest: ", manifest.status().message()));
  absl::StatusOr<std::string> ptx = ReadFile(stem + ".ptx");
  if (!ptx.ok()) return ptx.status();
  return Bundle{*std::move(manifest), *std::move(ptx)};
}

absl::StatusOr<std::vector<std::string>> ListBundles(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".manifest") continue;
    absl::StatusOr<std::string> text = ReadFile(entry.path().string());
    if (!text.ok()) return text.status();
    absl::StatusOr<Manifest> m = Manifest::Parse(*text);
    if (!m.ok()) return m.status();
    names.push_back(m->name);
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list bundles in ", dir, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::rt
