// A GEMM tuning table: what the entry point's choice rule reads per GPU (docs/GEMM_CHOICE.md).
// A text file, one record per line, each for one compute capability; '#' starts a comment:
//
//   sm_<cc> model weight_bound_rows=R partial_cost=P stream_bytes_per_us=B
//           stream_cap_bytes_per_us=C idle_latency_us=L launch_us=U partial_us=Q
//   sm_<cc> tile <kernel> speed=S [speed_unaligned=S] [weight_bound=1] [max_parts=N]
//           [splits=0] [streams=0] [max_n=N] [plain_c=1]
//   sm_<cc> region <kernel> [m=LO:HI] [n=LO:HI] [k=LO:HI] [only=b_mn|c_row]
//   sm_<cc> <M> <N> <K> <kernel> [<split>] <milliseconds>        (a `kiln tune` entry)
//   sm_<cc> fp8 <scaling> <M> <N> <K> <tile> <split> <milliseconds>   (`kiln tune --dtype e4m3`)
//
// The table the build embeds (ops/gemm/tables/sm_<cc>.tune) holds the model's constants, its
// tiles' weights and the special kernels' regions; `kiln tune` adds its entries, and a table
// given at run time (GemmRunner's tune_cache, `kiln gemm --tune_cache`) adds its own records.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/bundle/dims.h"

namespace kiln::rt {

struct GemmChoice {
  std::string kernel;  // a registered kernel (bundle) name
  std::string why;     // one line for the user
  // The tile kernels' work table: 1 whole tiles, S >= 2 each tile's K in S parts (split-K), 0
  // stream-K. Split tiles are summed in a fixed order (deterministic); see rt::WorkSchedule.
  int split = 1;
};

// The choice model's constants for one GPU (docs/GEMM_CHOICE.md says what each weighs).
struct GemmModel {
  int64_t weight_bound_rows = 0;       // up to this M, the weight read bounds the time
  double partial_cost = 0;             // a split part's partial round trip, in k-tiles of mainloop
  double stream_bytes_per_us = 0;      // the memory's rate, as one CTA's stream sees it
  double stream_cap_bytes_per_us = 0;  // the fastest all of B streams
  double idle_latency_us = 0;          // a load's latency on an idle memory
  double launch_us = 0, partial_us = 0;  // a launch; a wave of partials' round trip
};

// How the model weighs one tile kernel of kiln/ops/gemm_tiles.h.
struct TileWeights {
  std::string kernel;
  double speed = 0;  // per tile where each fills the GPU, relative to the widest (0: not weighed)
  double speed_unaligned = 0;  // the same where the operands' rows are not 128 bytes apart
  bool weight_bound = false;   // weighed up to weight_bound_rows (by its ring's bytes of B)
  int max_parts = 0;           // the most parts a tile splits into (0: any, stream-K included)
  bool splits = true, streams = true;  // past weight_bound_rows: split-K, stream-K weighed
  int max_n = 0;                       // the widest C it is for (0: any)
  bool plain_c =
      false;  // for a 16-bit C without fused terms only (the rule weighs it for no other)
};

// Sizes from lo to hi, both included.
struct SizeRange {
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
  bool Holds(int64_t v) const { return v >= lo && v <= hi; }
};

// A box of sizes where a kernel is taken outright, where it reads the operands as given; the
// first region holding the size wins.
struct GemmRegion {
  std::string kernel;
  SizeRange m, n, k;
  std::string only;  // "b_mn": only for a row-major B; "c_row": only for a row-major C
};

// One GPU's records.
struct GemmRules {
  std::optional<GemmModel> model;
  std::vector<TileWeights> tiles;  // in the table's order: a tie keeps the earlier
  std::vector<GemmRegion> regions;
  bool empty() const { return !model && tiles.empty() && regions.empty(); }
};

class GemmTuneCache {
 public:
  // An absent file is an empty table; a line that does not parse is an error naming it. The
  // file's rule records add to the built-in table's (MergedWithBuiltIn).
  static absl::StatusOr<GemmTuneCache> Read(const std::string& path);
  // The same for a reader of the choices (kiln gemm, GemmRunner), to whom an absent file is an
  // error: a mistyped path must not drop the table's choices silently.
  static absl::StatusOr<GemmTuneCache> ReadExisting(const std::string& path);
  // `text` as a file named `name` (in messages).
  static absl::StatusOr<GemmTuneCache> Parse(const std::string& text, const std::string& name);
  // Adds the records of `text`, a table named `name`; stops at the first bad line, naming it.
  absl::Status Add(const std::string& text, const std::string& name);
  // A GPU's rules where this table has some: the built-in table's, with this table's model in
  // place of its model, its tile records in place of the same kernels' (others added), and its
  // regions ahead of the built-in ones: a table of one tile or region line changes the rule by
  // that line alone, and a whole table (the built-in one's file, edited) takes its place.
  void MergeWithBuiltIn();
  // The tables the build embeds (ops/gemm/tables/); empty where one fails to parse (a test checks
  // that none does: BuiltInStatus).
  static const GemmTuneCache& BuiltIn();
  static absl::Status BuiltInStatus();

  // Writes the records and comments read, then every kiln tune entry.
  absl::Status Write(const std::string& path) const;
  const GemmChoice* Find(int compute_capability, const GemmSize& size) const;  // kernel and split
  void Set(int compute_capability, const GemmSize& size, const std::string& kernel, int split,
           double ms);
  // 8-bit entries (`sm_<cc> fp8 SCALING M N K kernel split ms`), which `kiln tune --dtype e4m3`
  // writes: the tile and split for the problem the tile kernel sees (`size`: C^T's where the plan
  // swaps it) with its scaling as the kernel takes it (tensorwise, rowwise, blockwise_t,
  // blockwise, blockwise.c_row: Fp8TuneScaling).
  const GemmChoice* FindFp8(int compute_capability, const std::string& scaling,
                            const GemmSize& size) const;
  void SetFp8(int compute_capability, const std::string& scaling, const GemmSize& size,
              const std::string& kernel, int split, double ms);
  size_t size() const { return entries_.size() + fp8_entries_.size(); }
  // This GPU's model, tiles and regions (nullptr where the table has none).
  const GemmRules* Rules(int compute_capability) const;

 private:
  struct Entry {
    GemmChoice choice;
    double ms = 0;
  };
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, Entry> entries_;
  std::map<std::tuple<int, std::string, int64_t, int64_t, int64_t>, Entry> fp8_entries_;
  std::map<int, GemmRules> rules_;
  std::vector<std::string> kept_lines_;  // every line but the kiln tune entries, as read
};

}  // namespace kiln::rt
