// Reading and writing GEMM tuning tables (kiln/ops/gemm_table.h says the format).
#include "kiln/ops/gemm_table.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/ops/gemm_tiles.h"

namespace kiln::rt {

// The tables the build embeds: {name, text} pairs ending in {nullptr, nullptr}
// (generated from ops/gemm/tables/*.tune).
extern const char* const kBuiltInGemmTables[][2];

namespace {

// Comments Write emits itself, dropped on reading so that they are not written twice.
constexpr const char* kMeasuredHeader =
    "# measured by kiln tune: sm_<cc> M N K kernel split ms (split 1: whole tiles, S: split-K in "
    "S parts, 0: stream-K)";
constexpr const char* kMeasuredFp8Header =
    "# measured by kiln tune --dtype e4m3: sm_<cc> fp8 scaling M N K kernel split ms (the tile "
    "kernel's problem and scaling)";
bool WrittenByWrite(const std::string& line) {
  return line == kMeasuredHeader || line == kMeasuredFp8Header ||
         line.rfind("# kiln tune: the fastest GEMM kernel", 0) == 0 ||
         line.rfind("# split 1: whole tiles", 0) == 0;
}

// The key=value words of a record, each handed to the setter for its key.
using Setter = std::function<bool(const std::string&)>;
absl::Status ReadKeys(const std::vector<std::string>& words, size_t first,
                      const std::map<std::string, Setter>& setters,
                      const std::vector<std::string>& required) {
  std::map<std::string, bool> seen;
  for (size_t i = first; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    const std::string key = words[i].substr(0, eq);
    auto it = setters.find(key);
    if (eq == std::string::npos || it == setters.end())
      return absl::InvalidArgumentError(
          absl::StrCat("'", words[i], "' is no key=value of this record"));
    if (!it->second(words[i].substr(eq + 1)))
      return absl::InvalidArgumentError(absl::StrCat("'", words[i], "': not a value for ", key));
    seen[key] = true;
  }
  std::vector<std::string> missing;
  for (const std::string& key : required)
    if (!seen[key]) missing.push_back(key + "=...");
  if (!missing.empty())
    return absl::InvalidArgumentError(absl::StrCat("it needs ", absl::StrJoin(missing, ", ")));
  return absl::OkStatus();
}

Setter Number(double& x) {
  return [&x](const std::string& v) { return absl::SimpleAtod(v, &x) && x >= 0; };
}
Setter Count(int64_t& x) {
  return [&x](const std::string& v) { return absl::SimpleAtoi(v, &x) && x >= 0; };
}
Setter Count(int& x) {
  return [&x](const std::string& v) { return absl::SimpleAtoi(v, &x) && x >= 0; };
}
Setter Flag(bool& x) {
  return [&x](const std::string& v) { return (v == "0" || v == "1") && ((x = v == "1"), true); };
}
// LO:HI, either end left out (LO 0, HI unbounded), or one size.
Setter Range(SizeRange& r) {
  return [&r](const std::string& v) {
    const size_t colon = v.find(':');
    if (colon == std::string::npos)
      return absl::SimpleAtoi(v, &r.lo) && absl::SimpleAtoi(v, &r.hi) && r.lo >= 0;
    const std::string lo = v.substr(0, colon), hi = v.substr(colon + 1);
    return (lo.empty() || absl::SimpleAtoi(lo, &r.lo)) &&
           (hi.empty() || absl::SimpleAtoi(hi, &r.hi)) && r.lo >= 0 && r.lo <= r.hi;
  };
}

absl::Status ReadModel(const std::vector<std::string>& w, GemmRules& rules) {
  GemmModel m;
  const std::map<std::string, Setter> keys = {
      {"weight_bound_rows", Count(m.weight_bound_rows)},
      {"partial_cost", Number(m.partial_cost)},
      {"stream_bytes_per_us", Number(m.stream_bytes_per_us)},
      {"stream_cap_bytes_per_us", Number(m.stream_cap_bytes_per_us)},
      {"idle_latency_us", Number(m.idle_latency_us)},
      {"launch_us", Number(m.launch_us)},
      {"partial_us", Number(m.partial_us)}};
  std::vector<std::string> every_key;  // a model needs all of them
  for (const auto& [key, set] : keys) every_key.push_back(key);
  absl::Status st = ReadKeys(w, 2, keys, every_key);
  if (st.ok() && rules.model) st = absl::InvalidArgumentError("a second model record");
  if (st.ok() && (m.stream_bytes_per_us <= 0 || m.stream_cap_bytes_per_us <= 0))
    st = absl::InvalidArgumentError("the stream rates must be positive");
  if (st.ok()) rules.model = m;
  return st;
}

absl::Status ReadTile(int cc, const std::vector<std::string>& w, GemmRules& rules) {
  if (w.size() < 3) return absl::InvalidArgumentError("a tile record names its kernel");
  TileWeights t{.kernel = w[2]};
  if (cc != 90 || !FindSm90Tile(t.kernel))
    return absl::InvalidArgumentError(absl::StrCat(t.kernel, " is no tile kernel of sm_", cc,
                                                   " (kiln/ops/gemm_tiles.h lists them)"));
  for (const TileWeights& x : rules.tiles)
    if (x.kernel == t.kernel) return absl::InvalidArgumentError(t.kernel + " is weighed twice");
  absl::Status st = ReadKeys(w, 3,
                             {{"speed", Number(t.speed)},
                              {"speed_unaligned", Number(t.speed_unaligned)},
                              {"weight_bound", Flag(t.weight_bound)},
                              {"max_parts", Count(t.max_parts)},
                              {"splits", Flag(t.splits)},
                              {"streams", Flag(t.streams)},
                              {"max_n", Count(t.max_n)},
                              {"plain_c", Flag(t.plain_c)}},
                             {"speed"});
  if (st.ok()) rules.tiles.push_back(t);
  return st;
}

absl::Status ReadRegion(const std::vector<std::string>& w, GemmRules& rules) {
  if (w.size() < 3) return absl::InvalidArgumentError("a region record names its kernel");
  GemmRegion r{.kernel = w[2]};
  if (std::find(std::begin(kRegionKernels), std::end(kRegionKernels), r.kernel) ==
      std::end(kRegionKernels))
    return absl::InvalidArgumentError(absl::StrCat(
        r.kernel, " is none of the kernels a region can name (kiln/ops/gemm_tiles.h lists them)"));
  absl::Status st = ReadKeys(w, 3,
                             {{"m", Range(r.m)},
                              {"n", Range(r.n)},
                              {"k", Range(r.k)},
                              {"only",
                               [&r](const std::string& v) {
                                 return (v == "b_mn" || v == "c_row") && (r.only = v, true);
                               }}},
                             {});
  if (st.ok()) rules.regions.push_back(r);
  return st;
}

}  // namespace

absl::StatusOr<GemmTuneCache> GemmTuneCache::Parse(const std::string& text,
                                                   const std::string& name) {
  GemmTuneCache table;
  if (absl::Status st = table.Add(text, name); !st.ok()) return st;
  return table;
}

absl::Status GemmTuneCache::Add(const std::string& text, const std::string& name) {
  GemmTuneCache& table = *this;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string record = line.substr(0, line.find('#'));
    std::vector<std::string> w = absl::StrSplit(record, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int cc = 0;
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", number, ": ", why, ": ", line));
    };
    if (w.empty()) {
      if (!WrittenByWrite(line)) table.kept_lines_.push_back(line);
      continue;
    }
    if (w[0].rfind("sm_", 0) != 0 || !absl::SimpleAtoi(w[0].substr(3), &cc) || w.size() < 2)
      return error("a record starts sm_<cc> and its kind (model, tile, region, fp8 or M N K)");
    if (w[1] == "model" || w[1] == "tile" || w[1] == "region") {
      GemmRules& rules = table.rules_[cc];
      absl::Status st = w[1] == "model"  ? ReadModel(w, rules)
                        : w[1] == "tile" ? ReadTile(cc, w, rules)
                                         : ReadRegion(w, rules);
      if (!st.ok()) return error(st.message());
      table.kept_lines_.push_back(line);
      continue;
    }
    int split = 1;
    GemmSize s;
    double ms = 0;
    // A record's size and time: what a measurement can give (a time that is not a positive
    // finite number compares wrongly with every other).
    auto measured = [&] { return s.m >= 1 && s.n >= 1 && s.k >= 1 && ms > 0 && std::isfinite(ms); };
    if (w[1] == "fp8") {
      static const std::set<std::string> kScalings = {"tensorwise", "rowwise", "blockwise",
                                                      "blockwise_t", "blockwise.c_row"};
      if (w.size() != 9 || !kScalings.count(w[2]) || !absl::SimpleAtoi(w[3], &s.m) ||
          !absl::SimpleAtoi(w[4], &s.n) || !absl::SimpleAtoi(w[5], &s.k) ||
          !absl::SimpleAtoi(w[7], &split) || split < 0 || !absl::SimpleAtod(w[8], &ms))
        return error(
            "not 'sm_<cc> fp8 tensorwise|rowwise|blockwise|blockwise_t|blockwise.c_row M N K "
            "kernel split ms'");
      if (!measured()) return error("M, N, K must be at least 1 and ms a positive finite time");
      table.SetFp8(cc, w[2], s, w[6], split, ms);
      continue;
    }
    if ((w.size() != 6 && w.size() != 7) || !absl::SimpleAtoi(w[1], &s.m) ||
        !absl::SimpleAtoi(w[2], &s.n) || !absl::SimpleAtoi(w[3], &s.k) ||
        (w.size() == 7 && (!absl::SimpleAtoi(w[5], &split) || split < 0)) ||
        !absl::SimpleAtod(w.back(), &ms))
      return error("not 'sm_<cc> M N K kernel split ms'");
    if (!measured()) return error("M, N, K must be at least 1 and ms a positive finite time");
    table.Set(cc, s, w[4], split, ms);
  }
  return absl::OkStatus();
}

absl::StatusOr<GemmTuneCache> GemmTuneCache::Read(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("tune cache ", path, " is a directory: name the file `kiln tune` writes"));
  std::ifstream in(path);
  if (!in) return GemmTuneCache();
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<GemmTuneCache> table = Parse(text.str(), path);
  if (table.ok()) table->MergeWithBuiltIn();
  return table;
}

void GemmTuneCache::MergeWithBuiltIn() {
  for (auto& [cc, given] : rules_) {
    if (given.empty()) continue;
    const GemmRules* built_in = BuiltIn().Rules(cc);
    if (!built_in || built_in == &given) continue;
    GemmRules merged = *built_in;
    if (given.model) merged.model = given.model;
    for (const TileWeights& t : given.tiles) {
      auto same = std::find_if(merged.tiles.begin(), merged.tiles.end(),
                               [&](const TileWeights& m) { return m.kernel == t.kernel; });
      if (same != merged.tiles.end())
        *same = t;
      else
        merged.tiles.push_back(t);
    }
    merged.regions.insert(merged.regions.begin(), given.regions.begin(), given.regions.end());
    given = std::move(merged);
  }
}

absl::StatusOr<GemmTuneCache> GemmTuneCache::ReadExisting(const std::string& path) {
  if (!std::ifstream(path))
    return absl::NotFoundError(
        absl::StrCat("tune cache ", path,
                     ": cannot open it (`kiln tune --sizes ... --tune_cache FILE` writes one)"));
  return Read(path);
}

namespace {
struct BuiltInTables {
  GemmTuneCache table;
  absl::Status status;
};
const BuiltInTables& ParsedBuiltIns() {
  static const BuiltInTables* parsed = [] {
    auto* b = new BuiltInTables;
    for (int i = 0; kBuiltInGemmTables[i][0] && b->status.ok(); ++i)
      b->status = b->table.Add(kBuiltInGemmTables[i][1], kBuiltInGemmTables[i][0]);
    if (!b->status.ok()) b->table = GemmTuneCache();  // none of a table that does not parse
    return b;
  }();
  return *parsed;
}
}  // namespace

const GemmTuneCache& GemmTuneCache::BuiltIn() { return ParsedBuiltIns().table; }
absl::Status GemmTuneCache::BuiltInStatus() { return ParsedBuiltIns().status; }

absl::Status GemmTuneCache::Write(const std::string& path) const {
  std::ofstream out(path);
  for (const std::string& line : kept_lines_) out << line << "\n";
  if (!entries_.empty()) out << kMeasuredHeader << "\n";
  for (const auto& [key, e] : entries_)
    out << "sm_" << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key) << " "
        << std::get<3>(key) << " " << e.choice.kernel << " " << e.choice.split << " "
        << absl::StrFormat("%.4f", e.ms) << "\n";
  if (!fp8_entries_.empty()) out << kMeasuredFp8Header << "\n";
  for (const auto& [key, e] : fp8_entries_) {
    const auto& [cc, scaling, m, n, k] = key;
    out << "sm_" << cc << " fp8 " << scaling << " " << m << " " << n << " " << k << " "
        << e.choice.kernel << " " << e.choice.split << " " << absl::StrFormat("%.4f", e.ms) << "\n";
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

const GemmChoice* GemmTuneCache::Find(int cc, const GemmSize& s) const {
  auto it = entries_.find({cc, s.m, s.n, s.k});
  return it == entries_.end() ? nullptr : &it->second.choice;
}

void GemmTuneCache::Set(int cc, const GemmSize& s, const std::string& kernel, int split,
                        double ms) {
  entries_[{cc, s.m, s.n, s.k}] = {{kernel, "", split}, ms};
}

const GemmChoice* GemmTuneCache::FindFp8(int cc, const std::string& scaling,
                                         const GemmSize& s) const {
  auto it = fp8_entries_.find({cc, scaling, s.m, s.n, s.k});
  return it == fp8_entries_.end() ? nullptr : &it->second.choice;
}

void GemmTuneCache::SetFp8(int cc, const std::string& scaling, const GemmSize& s,
                           const std::string& kernel, int split, double ms) {
  fp8_entries_[{cc, scaling, s.m, s.n, s.k}] = {{kernel, "", split}, ms};
}

const GemmRules* GemmTuneCache::Rules(int cc) const {
  auto it = rules_.find(cc);
  return it == rules_.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace kiln::rt
