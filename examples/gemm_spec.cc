#include "examples/gemm_spec.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::examples {

std::string GemmSpec::ToString() const {
  return absl::StrCat(in_type, " ", out_type, " ", acc_type, " ", a_order, " ", b_order, " ",
                      c_order, " ", tile_m, " ", tile_n, " ", tile_k, " ",
                      source.empty() ? "-" : source,
                      block_m || block_n || block_k
                          ? absl::StrCat(" block=", BlockM(), "x", BlockN(), "x", BlockK())
                          : "",
                      epilogue.empty() ? "" : absl::StrCat(" epilogue=", epilogue));
}

absl::StatusOr<GemmSpec> GemmSpec::Parse(absl::string_view text) {
  std::vector<std::string> w = absl::StrSplit(text, ' ', absl::SkipEmpty());
  GemmSpec g;
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad gemm description '", text, "'"));
  };
  while (w.size() > 10) {  // key=value options: block=MxNxK, epilogue=TERMS
    const std::string option = w.back();
    w.pop_back();
    if (absl::StartsWith(option, "epilogue=")) {
      g.epilogue = std::string(absl::StripPrefix(option, "epilogue="));
      continue;
    }
    std::vector<std::string> b = absl::StrSplit(absl::StripPrefix(option, "block="), 'x');
    if (!absl::StartsWith(option, "block=") || b.size() != 3 ||
        !absl::SimpleAtoi(b[0], &g.block_m) || !absl::SimpleAtoi(b[1], &g.block_n) ||
        !absl::SimpleAtoi(b[2], &g.block_k) || g.block_m <= 0 || g.block_n <= 0 || g.block_k <= 0)
      return bad();
  }
  if (w.size() != 10 || !absl::SimpleAtoi(w[6], &g.tile_m) || !absl::SimpleAtoi(w[7], &g.tile_n) ||
      !absl::SimpleAtoi(w[8], &g.tile_k) || g.tile_m <= 0 || g.tile_n <= 0 || g.tile_k <= 0)
    return bad();
  g.in_type = w[0], g.out_type = w[1], g.acc_type = w[2];
  g.a_order = w[3], g.b_order = w[4], g.c_order = w[5];
  g.source = w[9] == "-" ? "" : w[9];
  return g;
}

rt::Symbols ProblemSymbols(const rt::GemmSize& size) {
  return {{"M", size.m}, {"N", size.n}, {"K", size.k}};
}

rt::GemmSize ProtocolSize(const rt::Bundle& b, const GemmSpec& g) {
  const rt::Manifest& m = b.manifest;
  int64_t ring = 1;
  if (const std::string* text = m.Attribute("ring");
      !text || !absl::SimpleAtoi(*text, &ring) || ring < 1)
    ring = 1;
  auto round_up = [](int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; };
  rt::GemmSize size = {round_up(2 * g.BlockM(), g.tile_m), round_up(2 * g.BlockN(), g.tile_n),
                       round_up((2 * ring + 1) * g.BlockK(), g.tile_k)};
  if (!HasBuiltInCtaCount(b)) return size;
  // Twice as many tiles as CTAs, so each one the emulator runs (EmulatedClusters) takes two.
  for (int doubled = 0; doubled < 8; ++doubled) {
    absl::StatusOr<rt::Dim3> grid = GemmGrid(m, g, size, /*sm_count=*/132);
    if (!grid.ok() || Tiles(g, size) >= 2 * static_cast<int64_t>(grid->count())) break;
    size.m *= 2;
  }
  return size;
}

bool TakesAWorkTable(const rt::Manifest& m) {
  for (const rt::ParamSpec& p : m.params)
    if (p.kind == rt::ParamSpec::Kind::kScheduleTable) return true;
  return false;
}

namespace {
bool GridNamesTheProblem(const rt::Manifest& m) {
  for (const rt::GridExpr& e : m.grid)
    for (const std::string& symbol : e.SymbolNames())
      if (symbol == "M" || symbol == "N" || symbol == "K") return true;
  return false;
}
}  // namespace

int64_t Tiles(const GemmSpec& g, const rt::GemmSize& size) {
  return (size.m + g.BlockM() - 1) / g.BlockM() * ((size.n + g.BlockN() - 1) / g.BlockN());
}

bool IsPersistent(const rt::Bundle& b) {
  if (GridNamesTheProblem(b.manifest)) return false;
  // Its work table deals the tiles to as many groups as it is built for; otherwise it strides
  // over the tiles by the grid it was launched with (a kernel that never reads %nctaid has its
  // CTA count built in, as the worklogs' grids of 128 do).
  return TakesAWorkTable(b.manifest) || b.ptx.find("%nctaid.x") != std::string::npos;
}

bool HasBuiltInCtaCount(const rt::Bundle& b) {
  return !GridNamesTheProblem(b.manifest) && !IsPersistent(b);
}

std::vector<uint64_t> EmulatedClusters(const rt::Bundle& b, const GemmSpec& g,
                                       const rt::GemmSize& size, rt::Dim3 grid) {
  const uint64_t ctas = grid.count(), cluster = std::max<uint64_t>(1, b.manifest.cluster.count());
  const int64_t tiles = Tiles(g, size);
  // Only where every CTA takes the same number of tiles, two or more: then what the clusters
  // run must write is their share of C (the harness checks it).
  if (!HasBuiltInCtaCount(b) || ctas < 2 * cluster || tiles < 2 * static_cast<int64_t>(ctas) ||
      tiles % static_cast<int64_t>(ctas))
    return {};
  return {0, ctas / cluster - 1};
}

absl::StatusOr<rt::Bundle> EmulatedGemmBundle(const rt::Bundle& b, const GemmSpec& g,
                                              const rt::GemmSize& size, int sm_count,
                                              rt::Dim3* grid) {
  absl::StatusOr<rt::Dim3> shrunk = EmulatedGemmGrid(b, g, size, sm_count);
  if (!shrunk.ok()) return shrunk.status();
  *grid = *shrunk;
  rt::Bundle out = b;
  if (!TakesAWorkTable(b.manifest) || !IsPersistent(b)) return out;  // the grid is the rule's
  const int groups = static_cast<int>(grid->x / std::max(1u, b.manifest.cluster.x));
  for (rt::ParamSpec& p : out.manifest.params)  // one row of the table per cluster launched
    if (p.kind == rt::ParamSpec::Kind::kScheduleTable) p.schedule.groups = groups;
  return out;
}

absl::StatusOr<rt::Dim3> EmulatedGemmGrid(const rt::Bundle& b, const GemmSpec& g,
                                          const rt::GemmSize& size, int sm_count) {
  const rt::Manifest& m = b.manifest;
  absl::StatusOr<rt::Dim3> grid = GemmGrid(m, g, size, sm_count);
  if (!grid.ok() || !IsPersistent(b) || grid->y != 1 || grid->z != 1) return grid;
  const int64_t tiles = Tiles(g, size);
  const int64_t cluster = std::max<int64_t>(1, m.cluster.x);
  const int64_t ctas = std::max(cluster, tiles / 2 / cluster * cluster);
  if (ctas < grid->x) grid->x = static_cast<unsigned>(ctas);
  return grid;
}

std::optional<GemmSpec> GemmOf(const rt::Manifest& m) {
  const std::string* text = m.Attribute("gemm");
  if (!text) return std::nullopt;
  absl::StatusOr<GemmSpec> g = GemmSpec::Parse(*text);
  if (!g.ok()) return std::nullopt;
  return *std::move(g);
}

void SetGemmSpec(rt::Manifest& m, const GemmSpec& g) {
  for (auto& [key, value] : m.attributes)
    if (key == "gemm") {
      value = g.ToString();
      return;
    }
  m.attributes.emplace_back("gemm", g.ToString());
}

absl::Status CheckProblem(const rt::Manifest& m, const GemmSpec& g, const rt::GemmSize& size) {
  const int64_t dims[] = {size.m, size.n, size.k};
  const int64_t tiles[] = {g.tile_m, g.tile_n, g.tile_k};
  const char* names[] = {"M", "N", "K"};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] <= 0)
      return absl::InvalidArgumentError(absl::StrCat(names[i], " must be positive"));
    if (dims[i] % tiles[i] != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          m.name, " cannot tile ", names[i], "=", dims[i], ": it takes M, N and K in multiples of ",
          g.tile_m, "x", g.tile_n, "x", g.tile_k, " (", g.source.empty() ? m.source : g.source,
          "), so ", names[i], " must be a multiple of ", tiles[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<rt::Dim3> GemmGrid(const rt::Manifest& m, const GemmSpec& g,
                                  const rt::GemmSize& size, int sm_count) {
  if (absl::Status s = CheckProblem(m, g, size); !s.ok()) return s;
  return m.GridFor(ProblemSymbols(size), sm_count);
}

}  // namespace kiln::examples
