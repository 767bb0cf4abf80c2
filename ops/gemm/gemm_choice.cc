#include "kiln/ops/gemm_choice.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/bundle/schedule.h"

namespace kiln::rt {
namespace {

// A persistent Hopper kernel the entry point may run: its tile (one cluster's, for the clustered
// one), how many tiles it keeps in flight (its 128 CTAs / the cluster), and its speed per tile
// relative to the widest where each fills the GPU (measured on an H100:
// docs/perf/2026-11-23-second-tile-per-shape-choice.md,
// docs/perf/2026-11-23-third-tile-narrow-deep-shapes.md). For M <= 128,
// where the weight read bounds the time: the bytes of B its ring keeps in flight per CTA (0: not
// weighed there), and the most parts it splits a tile into (0: any, stream-K included).
struct Candidate {
  const char* kernel;
  int tile_m, tile_n, in_flight;
  double speed;
  // Its speed where the operands' rows are not 128 bytes apart (K no multiple of 64 for K-major
  // A and B): each 128-byte row of a box then spans two L2 lines, and the kernels slow down as
  // far as their bytes per flop make them (docs/perf/2026-11-26-rows-off-128-bytes.md). Measured at
  // 4096x4096x4104 against the 256x256 pairs, whole tiles (H200).
  double speed_unaligned = 0;
  int ring_b_bytes = 0, max_parts = 0;
  // Past the weight-bound rows (the compute model): whether its tiles are split (split-K) and
  // streamed (stream-K) there at all.
  bool splits = true, streams = true;
  // The widest C it is for (0: any): kiln tune times it there only.
  int max_n = 0;
};
constexpr Candidate kSm90[] = {
    {.kernel = "gemm/bf16_sm90",
     .tile_m = 256,
     .tile_n = 256,
     .in_flight = 64,
     .speed = 1.0,
     .speed_unaligned = 1.0},
    // Before the others, so that where all of B's time bounds both it wins the tie (its deeper
    // ring measured faster there). Split in more than two parts it is slower than the 128x128
    // tiles at every size tried (docs/perf/2026-11-24-m64-64-row-tile-bandwidth-model.md): not
    // weighed. Its speed fits kiln tune at M = 160 to 512, N = K = 4096
    // (docs/perf/2026-11-25-64-row-tiles-past-128-rows.md).
    // Past 128 rows it runs whole tiles only: split in 2 it lost to its own whole tiles or to
    // 128x80 tiles split at every such shape of a kiln tune run over 80 shapes of M = 128 to 2048
    // (docs/perf/2026-11-26-tune-run-over-80-shapes.md).
    {.kernel = "gemm/bf16_sm90_m64",
     .tile_m = 64,
     .tile_n = 128,
     .in_flight = 128,
     .speed = 0.75,
     .speed_unaligned = 0.39,
     .ring_b_bytes = 8 * 128 * 128,
     .max_parts = 2,
     .splits = false},
    {.kernel = "gemm/bf16_sm90_n128",
     .tile_m = 128,
     .tile_n = 128,
     .in_flight = 128,
     .speed = 0.9,
     .speed_unaligned = 0.57,
     .ring_b_bytes = 6 * 128 * 128},
    // Not weighed for M <= 128: its 64-wide tiles streamed B slower than the model says at every
    // shape but two, where it was fastest
    // (docs/perf/2026-11-24-m64-64-row-tile-bandwidth-model.md).
    {.kernel = "gemm/bf16_sm90_n64",
     .tile_m = 128,
     .tile_n = 64,
     .in_flight = 128,
     .speed = 0.6,
     .speed_unaligned = 0.39},
    // Tiles that let the 128 CTAs hold a 128- or 256-row problem in one wave (N = 6144: 128 tiles
    // of 96 for 256 rows; N = 10240: 128 of 80 for 128 rows, 64 pairs of 160 for 256). Speeds from
    // kiln tune at those shapes, where they fill the GPU
    // (docs/perf/2026-11-24-tiles-for-one-wave.md); n160's is high enough that the rule takes it
    // over the 256x256 tiles streamed at 1024x10240x8192 (4 full waves), where it is faster
    // (docs/perf/2026-11-25-partials-bytes.md). Neither is streamed: where the rule took 128x96
    // tiles streamed (320 and 384 rows at N = 10240, 11008 and 28672, 768x4096x4096), whole tiles
    // of them or of another were faster at most shapes in the same tune run
    // (docs/perf/2026-11-26-tune-run-over-80-shapes.md). The 128x80 tiles' speed was lowered once
    // A's edge rows stopped costing the 128x128 tiles their fill: those are faster at M = 264 to
    // 384, N = 10240, K = 8192 (docs/perf/2026-11-26-128x80-tiles-speed.md).
    {.kernel = "gemm/bf16_sm90_n80",
     .tile_m = 128,
     .tile_n = 80,
     .in_flight = 128,
     .speed = 0.75,
     .speed_unaligned = 0.44,
     .ring_b_bytes = 7 * 80 * 128,
     .streams = false},
    {.kernel = "gemm/bf16_sm90_n96",
     .tile_m = 128,
     .tile_n = 96,
     .in_flight = 128,
     .speed = 0.9,
     .speed_unaligned = 0.48,
     .ring_b_bytes = 7 * 96 * 128,
     .streams = false},
    {.kernel = "gemm/bf16_sm90_n160",
     .tile_m = 256,
     .tile_n = 160,
     .in_flight = 64,
     .speed = 0.97,
     .speed_unaligned = 0.79},
    // For M <= 128 only: 64x64 tiles in pairs sharing B by multicast (cuBLAS's choice at
    // 128x4096x4096), so that at N = 4096 all 128 CTAs stream B, a pair its 64 columns. Fastest in
    // kiln tune at M = 16, 64 and 128, N = K = 4096 and at 128x4096x14336; in 4 parts it is far
    // slower, so it splits in 2 at most (docs/perf/2026-11-25-64x64-pairs.md).
    {.kernel = "gemm/bf16_sm90_m64n64",
     .tile_m = 128,
     .tile_n = 64,
     .in_flight = 64,
     .speed = 0,
     .ring_b_bytes = 13 * 64 * 128,
     .max_parts = 2},
    // For M <= 128 only: 64-row tiles narrow enough that 128 of them cover N = 4096, 6144 and
    // 10240, so that every CTA streams B (the 64x128 tiles leave 48 to 96 of 128 idle there).
    // Fastest in kiln tune at 10 of the sweep's 12 shapes of M = 16 and 64
    // (docs/perf/2026-11-25-narrow-tiles-m64.md).
    {.kernel = "gemm/bf16_sm90_m64n32",
     .tile_m = 64,
     .tile_n = 32,
     .in_flight = 128,
     .speed = 0,
     .ring_b_bytes = 17 * 32 * 128,
     .max_parts = 2},
    {.kernel = "gemm/bf16_sm90_m64n48",
     .tile_m = 64,
     .tile_n = 48,
     .in_flight = 128,
     .speed = 0,
     .ring_b_bytes = 15 * 48 * 128,
     .max_parts = 2},
    {.kernel = "gemm/bf16_sm90_m64n80",
     .tile_m = 64,
     .tile_n = 80,
     .in_flight = 128,
     .speed = 0,
     .ring_b_bytes = 11 * 80 * 128,
     .max_parts = 2},
    // For a C of 16 columns or fewer whose A (the weights) has few blocks of 64 rows over a long
    // K: 22 stages of 8 KB of A each (FewColumnsChoice).
    {.kernel = "gemm/bf16_sm90_m64n16",
     .tile_m = 64,
     .tile_n = 16,
     .in_flight = 128,
     .speed = 0,
     .max_n = 16},
};

// A split tile part's partial round trip (written by every part, read back by the last, with a
// fence and a count between), in k-tiles of mainloop time: fitted to the H100 measurements, where
// 4 picked splits that lost to whole tiles (docs/perf/2026-11-23-split-k-and-stream-k.md). The
// last part reads the others' partials one after another, so a tile in S parts pays it S - 1 times
// (at 256x4096x14336 256x256 tiles in 4 parts lose to 128x128 tiles in 2:
// docs/perf/2026-11-25-split-partials-64-row-tile.md).
constexpr double kPartialCost = 8;
// The splits the rule weighs, and kiln tune measures, for the tile kernels (8 and 16 where few
// tiles leave CTAs idle: Weighed).
constexpr int kSplits[] = {1, 0, 2, 4, 8, 16};

// Tiles of c covering M x N (rounded up).
int64_t TilesOf(const Candidate& c, const GemmSize& s) {
  return ((s.m + c.tile_m - 1) / c.tile_m) * ((s.n + c.tile_n - 1) / c.tile_n);
}

// The share of the machine's time that does useful work: tiles padded past M and N are lost,
// and so are the in-flight slots the busiest group's units leave the others idle for, and the
// partials' round trips of split tiles.
double Efficiency(const Candidate& c, const GemmSize& s, int split, bool aligned_rows) {
  const int64_t tiles_m = (s.m + c.tile_m - 1) / c.tile_m,
                tiles_n = (s.n + c.tile_n - 1) / c.tile_n;
  const int64_t tiles = tiles_m * tiles_n, k_tiles = (s.k + 63) / 64;
  const double padding =
      static_cast<double>(s.m) / (tiles_m * c.tile_m) * s.n / (tiles_n * c.tile_n);
  const double useful =
      static_cast<double>(tiles * k_tiles) / c.in_flight;  // k-tiles per group, evenly
  double busiest;                                          // the busiest group's time in k-tiles
  if (split == 0 &&
      tiles >= c.in_flight) {  // stream-K: even shares, a group's costing up to two partials
    busiest = tiles % c.in_flight == 0 ? useful : std::ceil(useful) + 2 * kPartialCost;
  } else if (split == 0) {
    // Fewer tiles than groups: every tile is cut among about sharers / tiles groups (shares of 4
    // k-tiles at least, kMostStreamedParts parts at most: StreamSharers), and its last part reads
    // the others' partials one after another (one tile in 32 parts at 130x130x8192 ran far under
    // cuBLAS: docs/perf/2026-11-26-stream-k-of-few-tiles.md).
    const int64_t run = tiles * k_tiles, sharers = StreamSharers(tiles, k_tiles, c.in_flight);
    const int64_t pieces = std::max<int64_t>(2, (sharers + tiles - 1) / tiles);
    busiest = std::ceil(static_cast<double>(run) / sharers) + kPartialCost * pieces;
  } else {
    const int64_t parts = std::min<int64_t>(split, k_tiles), units = tiles * parts;
    const int64_t waves = (units + c.in_flight - 1) / c.in_flight;
    busiest =
        waves * (std::ceil(static_cast<double>(k_tiles) / parts) + kPartialCost * (parts - 1));
  }
  return padding * useful / busiest * (aligned_rows ? c.speed : c.speed_unaligned);
}

// M <= 128 (kWeightBoundRows): the time is the weight read's. A CTA streams B at
// R / (active CTAs + c) bytes/us, c = R * L0 / (bytes its ring keeps in flight): Little's law with
// a latency that grows as the CTAs' loads queue at the memory; all of B comes no faster than
// kStreamCapBytesPerUs; the busiest CTA's bytes set the time; each wave of split tiles adds a
// partial round trip, and the partials' bytes move at R. The constants were fitted to `kiln tune`
// runs of every candidate at 14 shapes with M = 8 to 64 on an H100
// (docs/perf/2026-11-24-m64-64-row-tile-bandwidth-model.md); with the partials' bytes, its picks
// among the 64-row and 128x128 tiles are the fastest measured at all 14 and at the three of
// M = 128 (without them it lost at 64x4096x4096 and 128x4096x4096:
// docs/perf/2026-11-25-partials-bytes.md). At M = 256 they were no better than the compute
// model's. The cap was lower until the narrow 64-row tiles came: with it the model took their 103
// CTAs at 16x8192x28672 (8192 / 80) for as fast as the 64x128 tiles in 2 parts on 128, which
// streamed faster than that cap there and won; the cap now changes none of the picks among the
// other tiles (docs/perf/2026-11-25-narrow-tiles-m64.md).
constexpr int64_t kWeightBoundRows = 128;
constexpr double kStreamBytesPerUs = 3.0e6, kStreamCapBytesPerUs = 2.6e6, kIdleLatencyUs = 1.0;
constexpr double kLaunchUs = 5, kPartialUs = 4;

// Whole tiles or split-K; stream-K is not weighed here: in the tune runs it was never clearly
// faster than the best split-K, and where every tile streams (128x28672x4096) it lost to whole
// tiles by more than its two round trips account for
// (docs/perf/2026-11-24-m64-64-row-tile-bandwidth-model.md).
double StreamUs(const Candidate& c, const GemmSize& s, int split) {
  const int64_t tiles = TilesOf(c, s);
  const int64_t k_tiles = (s.k + 63) / 64;
  const int64_t parts = std::min<int64_t>(split, k_tiles), units = tiles * parts;
  const int64_t waves = (units + c.in_flight - 1) / c.in_flight;
  const int64_t busiest = waves * ((k_tiles + parts - 1) / parts);  // k-tiles of the busiest CTA
  const int64_t active = std::min<int64_t>(units, c.in_flight);     // CTAs streaming
  // The CTAs of one column of tiles (64-row tiles at M = 128) read the same B side by side (the
  // schedule's order keeps them together): the memory streams it once for them, L2 serves the rest.
  const int64_t tiles_m = (s.m + c.tile_m - 1) / c.tile_m;
  const int64_t streams = (active + tiles_m - 1) / tiles_m;
  const int64_t partials = parts > 1 ? waves : 0;  // round trips
  // What the round trips carry: every part but the last writes its rows of the tile in f32, the
  // last reads them back. At M = 128 that is eight times the bytes of M = 16, enough to make the
  // 128x128 tiles in 4 parts slower there than at M = 16 and than the 64-row tiles whole
  // (docs/perf/2026-11-25-partials-bytes.md).
  const double partial_bytes = static_cast<double>(tiles) * (parts - 1) *
                               std::min<int64_t>(c.tile_m, s.m) * c.tile_n * 4 * 2;
  const double queue = kStreamBytesPerUs * kIdleLatencyUs / c.ring_b_bytes;
  const double busiest_bytes = static_cast<double>(busiest) * c.tile_n * 64 * 2;
  const double all_bytes = static_cast<double>(s.n) * s.k * 2;
  return kLaunchUs +
         std::max(busiest_bytes * (streams + queue) / kStreamBytesPerUs,
                  all_bytes / kStreamCapBytesPerUs) +
         partials * kPartialUs + partial_bytes / kStreamBytesPerUs;
}

// Splits past 4 only where a candidate's tiles in 4 parts would leave over half its CTAs idle, in
// parts of 4 k-tiles or more, and for tiles of 128x96 or less: there the last part's serial sum
// of the others' partials costs less than the idle CTAs. Measured on an H200
// (docs/perf/2026-11-26-few-tiles-long-k.md): with 8 tiles of 128x64 (256x256x65536) 8 and 16
// parts beat 4; with 32 and 64 such tiles (512x512x32768, 2048x256x32768) 8 parts lost to 4;
// 128x128 tiles in 8 parts (64 KB partials) lost to 128x64 in 4 at 512x512x65536 and
// 768x256x65536.
bool Weighed(const Candidate& c, const GemmSize& s, int split) {
  if (split > 4 && (c.tile_m * c.tile_n > 128 * 96 || 2 * 4 * TilesOf(c, s) > c.in_flight ||
                    4 * split > (s.k + 63) / 64))
    return false;
  return c.max_parts == 0 || (split >= 1 && split <= c.max_parts);
}

// Stream-K where the tiles fill fewer than two waves streams every tile, each in two or three
// parts with a partial's round trip and a reduction each. For the unclustered 128-row tiles that
// measured far below the model's two round trips a group: 128x96 tiles streamed at M = 320, 384
// and 640, N = K = 4096 lost to whole tiles, and at K = 14336 to 256x256 pairs in 2 parts. The
// 256x256 pairs streamed every tile well (768x4096x14336, 1536x4096x14336, 768x8192x8192: ahead
// of the stricter rule's picks), and with a full wave of whole tiles first stream-K was the
// fastest measured (768x11008x4096, 1536x4096x4096, 5000x4096x4096:
// docs/perf/2026-11-25-stream-k-every-tile-streams.md).
bool StreamsWell(const Candidate& c, const GemmSize& s) {
  const int64_t tiles = TilesOf(c, s);
  const bool clustered = c.in_flight < 128;  // 128 CTAs, in_flight clusters of them
  return clustered || tiles >= 2 * c.in_flight;
}

static_assert(std::string_view(kSm90[3].kernel) == "gemm/bf16_sm90_n64",
              "LongKOverFewTiles names the 128x64 tiles");

// Among the weight-bound rows (the caller's), M a multiple of 8 (the kernel with C's map), K of
// 8192 or more, and at most half as many 128x64 tiles as the 128 CTAs: those tiles streamed, each
// cut along K among 128 / tiles CTAs or more. The bandwidth model weighs B's bytes alone; here
// A's weigh too (the 128-row tile reads it once per 64 columns of B, the 64-row tiles once per
// 32-80), and no CTA idles.
// Measured on an H200 against the model's picks (docs/perf/2026-11-26-long-k-over-few-tiles.md):
// less time at 10 shapes of M = 16-128, N = 1024-4096, K = 8192-16384, level at two
// (64x4096x8192, 128x4096x28672); with 96 tiles (128x6144x8192) more than 128x96 tiles in 2
// parts, hence the half.
bool LongKOverFewTiles(const GemmSize& s) {
  return s.m % 8 == 0 && s.k >= 8192 && 2 * TilesOf(kSm90[3], s) <= kSm90[3].in_flight;
}

// A tile of kSm90 by its kernel's name (the first where none has it: the asserts below).
constexpr const Candidate& Named(std::string_view kernel) {
  for (const Candidate& c : kSm90)
    if (kernel == c.kernel) return c;
  return kSm90[0];
}
static_assert(Named("gemm/bf16_sm90_m64n32").tile_n == 32 &&
                  Named("gemm/bf16_sm90_m64n64").tile_n == 64 &&
                  Named("gemm/bf16_sm90_n64").tile_m == 128 &&
                  Named("gemm/bf16_sm90_m64n16").tile_n == 16,
              "FewColumnsChoice names these tiles");

// C of few columns (N <= 64, M >= 512): A is the weights. The 64-row narrow tiles stream it 64
// rows a CTA where the compute model's 128x64 tiles stream 128, so twice as many CTAs read it:
// 64x32 tiles, and past 32 columns two columns of them up to one wave, else 64x64 pairs;
// in 2 parts where A has 32 blocks of 64 rows or fewer (the second column of tiles reads its
// rows from L2), or the tiles are 64 or fewer and K >= 8192. Measured by kiln tune on an H200 at
// 51 shapes of M = 256 to 28672, N = 2 to 128 (docs/perf/2026-11-26-c-of-few-columns.md): these
// picks are the fastest measured or close to it at N <= 64, M >= 768; past 64 columns the
// 128-row tiles were as fast, under 512 rows the 128x64 tiles in 4 parts the fastest. Then, from
// A/B runs against the rule before:
// - 16 blocks of rows or fewer and K >= 16384: the 128x64 tiles streamed, 16 parts a tile
//   (faster than in 4 parts at 512x64x65536); K = 8192 to 16383 there keeps the compute model's
//   pick (in 4 parts faster than streamed at 512x64x8192).
// - past 32 columns and K = 16384 the two columns of 64x32 tiles read A twice from memory
//   (slower than in 4 parts at 4096x64x32768): the compute model's pick (the pairs, which
//   read it once, not measured there either).
// - 16 columns or fewer, 16 blocks of rows or fewer and K >= 8192: 64x16 tiles, whose ring keeps
//   22 stages of 8 KB of A in flight against the 64x32 tiles' 17, in parts making ~64 CTAs: 8 for
//   8 blocks, 4 for 9-16, faster than the picks before at every shape measured, and at 1024 rows
//   than 8 parts or stream-K (H200, docs/perf/2026-11-27-few-row-blocks-long-k.md).
bool FewColumns(const GemmSize& s) {
  if (s.m < 512 || s.n > 64) return false;
  if ((s.m + 63) / 64 <= 16) return s.k < 8192 || s.k >= 16384 || s.n <= 16;
  return s.n <= 32 || s.k <= 16384;
}
GemmChoice FewColumnsChoice(const GemmSize& s) {
  const int64_t rows = (s.m + 63) / 64;  // 64-row tiles along M
  const bool pairs = s.n > 32 && 2 * rows > 128;
  const Candidate& c = Named(pairs ? "gemm/bf16_sm90_m64n64" : "gemm/bf16_sm90_m64n32");
  const int64_t ctas = pairs ? rows : rows * ((s.n + 31) / 32);
  if (s.n <= 16 && rows <= 16 && s.k >= 8192) {
    const int parts = rows <= 8 ? 8 : 4;
    return {
        Named("gemm/bf16_sm90_m64n16").kernel,
        absl::StrFormat(
            "N = %d: A is the weights, K = %d over %d blocks of 64 rows: 64x16 tiles in %d parts, "
            "their deep ring streaming A",
            static_cast<int>(s.n), static_cast<int>(s.k), static_cast<int>(rows), parts),
        parts};
  }
  if (rows <= 16 && s.k >= 16384)
    return {Named("gemm/bf16_sm90_n64").kernel,
            absl::StrFormat(
                "N = %d: A is the weights, K = %d over %d blocks of 64 rows: 128x64 tiles streamed "
                "(stream-K), each cut along K",
                static_cast<int>(s.n), static_cast<int>(s.k), static_cast<int>(rows)),
            0};
  const int split = rows <= 32 || (ctas <= 64 && s.k >= 8192) ? 2 : 1;
  return {c.kernel,
          absl::StrFormat(
              "N = %d: A is the weights; 64x%d tiles%s, %s, so that a CTA streams 64 rows of A",
              static_cast<int>(s.n), pairs ? 64 : 32, pairs ? " in pairs" : "", SplitName(split)),
          split};
}

// MN-major operands are read in 64-wide blocks of the tile's M and N.
bool Reads(const Candidate& c, bool mn_major) {
  return !mn_major || (c.tile_n % 64 == 0 && c.tile_m % 64 == 0);
}

// The skinny kernel's build for the GPU: on Hopper the one launched while the kernel before it
// ends.
std::string SkinnyKernel(int compute_capability) {
  return compute_capability == 90 ? "gemm/bf16_skinny_sm90" : "gemm/bf16_skinny";
}

// Up to 4 rows, reading B once on CUDA cores beats the tensor-core tiles
// (docs/perf/2026-11-23-m16-weights-streamed-once.md), but for 3-4 rows and N past 4096, where
// the narrow 64-row tiles (their A boxes load only the rows up to M) give every CTA columns of B
// to stream and the skinny kernel's 3- and 4-row passes stream B slower than its 1- and 2-row
// passes: there the tiles took less time at the sweep's shapes, while at N <= 4096 they are
// level or slower (H200, docs/perf/2026-11-26-two-to-four-rows.md). The planner's transpose of a
// C of 2-4 columns (`c_row`) is the skinny kernel's always: the tiles cannot store C row-major.
bool Skinny(const GemmSize& s, bool c_row) {
  return s.k % 8 == 0 && (s.m <= 2 || (s.m <= 4 && (c_row || s.n <= 4096)));
}

// 3 to 16 rows on Hopper with N of 1024 to 4096 (at most 2048 only up to K = 8192): the weights
// read in 16-byte chunks straight into mma.sync fragments, a block per 16 columns of C
// (gemm/bf16_mma16_sm90). Measured on an H200 against the picks before, in steady state
// (docs/perf/2026-11-27-up-to-16-rows-mma-sync.md): ahead of the picks before (at 3-4 rows the
// skinny kernel) at 3-16 rows, N = 2048 and 4096, K up to 14336. Not past N = 4096,
// where its blocks (one per 16 columns, 2 an SM) no longer fit one wave and the 64-row tiles are
// faster, nor at N = 2048 and a long K, where half the SMs get none and the 128x64 tiles are
// faster; 1-2 rows stay the skinny kernel's, faster there.
// It reads packed operands only (GemmOptions::packed): elsewhere the tiles or the skinny kernel.
constexpr const char* kMma16Kernel = "gemm/bf16_mma16_sm90";
bool Mma16(const GemmSize& s, const GemmOptions& o) {
  return !o.c_row && o.packed.value_or(true) && s.k % 8 == 0 && s.m >= 3 && s.m <= 16 &&
         s.n >= 1024 && s.n <= 4096 && (s.n > 2048 || s.k <= 8192);
}

// 12 to 16 rows on Hopper, N of 2048 to 3583 (from 3584 the wide stages, below, read faster), over
// a longer K (N = 2048: K of 4096 to 8192; N past 2048: K of 8192 or more): the mma16 kernel's
// blocks with the weights read by TMA boxes of 256 k (gemm/bf16_tma16_sm90). Measured on an H200
// against the picks before (docs/perf/2026-11-27-weights-by-tma-boxes-mma-sync.md): ahead in
// steady state at every such shape, single calls about level. Not at 8 rows or fewer (the mma16
// kernel is faster), at 4096x4096 (a tie), or at N = 2048 with K past 8192 (the 128x64 tiles are
// faster). Packed operands only, as the mma16 kernel, and rows 128 bytes apart (K a multiple of
// 64): its boxes of rows off 128 bytes read the weights far slower (14x4000x8200, 13x3000x9000).
constexpr const char* kTma16Kernel = "gemm/bf16_tma16_sm90";
bool Tma16(const GemmSize& s, const GemmOptions& o) {
  return !o.c_row && o.packed.value_or(true) && o.rows_128b.value_or(s.k % 64 == 0) &&
         s.k % 8 == 0 && s.m >= 12 && s.m <= 16 && s.n >= 2048 && s.n < 3584 &&
         (s.n > 2048 ? s.k >= 8192 : s.k >= 4096 && s.k <= 8192);
}
// 3 to 8 rows, N of 2048 to 4096, K of 4096 or more: the same with A's box of 8 rows (at 8 rows or
// fewer the 16-row box's rows past M slow the kernel). Ahead of the mma16 kernel in steady state
// at every such shape measured, single calls level or a little under it
// (docs/perf/2026-11-27-a-box-of-8-rows.md; the kernel:
// docs/perf/2026-11-27-weights-by-tma-boxes-mma-sync.md). Same operands as above.
constexpr const char* kTma8Kernel = "gemm/bf16_tma8_sm90";
bool Tma8(const GemmSize& s, const GemmOptions& o) {
  return !o.c_row && o.packed.value_or(true) && o.rows_128b.value_or(s.k % 64 == 0) &&
         s.k % 8 == 0 && s.m >= 3 && s.m <= 8 && s.n >= 2048 && s.n <= 4096 && s.k >= 4096;
}

// 17 to 64 rows (3 to 64 over a long K) on Hopper where 64-row blocks of 32 or 64 columns make one
// wave: a block owns its columns over the whole K in stages of 128 k, A's box the pass's rows
// before M (gemm/bf16_k128n32_sm90, gemm/bf16_k128n64_sm90; ops/gemm/kernels/wide_k.cc). The 64-row
// tiles hand over stages of 64 k (4-5 KB of B); these twice the bytes, each freed while the next
// one's wgmmas run. Measured on an H200 with rings of 8 and 6 stages, single calls and steady state
// (docs/perf/2026-11-27-stages-128-256-k-17-64-rows.md): at 17-64 rows level with or ahead of the
// picks before with 32 columns at N = 4096 (K = 1024 to 14336) and with 64 columns at N = 8192
// (K = 8192 to 28672). Not at N = 3072 (96 blocks), N = 6144 (48 columns: the 64x48 tiles as fast
// or faster), nor with 64 columns at K = 4096 (single calls slower). Under 17 rows only the
// 64-column kernel and only where K >= 12288 (at K = 8192 single calls slower); there the mma.sync
// kernels read as fast at N = 4096. Packed K-major operands with rows 128 bytes apart.
// The 32-column kernel also from 9 rows, and from 3 rows past N = 4096 (where no mma.sync kernel
// reads, and the 64x48 tiles are far slower in steady state at 16x4224x4096). At 12-16 rows and
// N = 4096 (blocks of 32 launches), against the picks before: level or a little under in single
// calls, ahead in steady state (docs/perf/2026-11-27-32-column-wide-stages-from-9-rows.md). At 3-8
// rows the 8-row TMA boxes read as fast or faster.
// A row-major B (b_mn: a [K][N] weight, rows N apart, N a multiple of 64) lands in MN-major boxes
// (64B swizzle at 32 columns, 128B at 64). On an H100, against the 64x64 tiles' b_mn variant and
// at 1-8 rows against the tiles the rule took: ahead in steady state at every shape measured (or
// level), mostly behind in single calls (docs/perf/2026-11-27-row-major-b-wide-stages.md). No
// mma.sync or skinny kernel reads a row-major B, so with one both take 1-64 rows, the 32-column
// one whatever M.
constexpr const char* kWide32Kernel = "gemm/bf16_k128n32_sm90";
constexpr const char* kWide64Kernel = "gemm/bf16_k128n64_sm90";
const char* WideStages(const GemmSize& s, const GemmOptions& o) {
  if (o.c_row || o.a_mn || !o.packed.value_or(true) ||
      !o.rows_128b.value_or(s.k % 64 == 0 && (!o.b_mn || s.n % 64 == 0)) || s.k % 8 ||
      s.m < (o.b_mn ? 1 : 3) || s.m > 64)
    return nullptr;
  if ((s.m >= 9 || s.n > 4096 || o.b_mn) && s.n >= 3584 && s.n <= 32 * 132 && s.k >= 1024)
    return kWide32Kernel;
  if (s.n >= 7680 && s.n <= 64 * 132 && s.k >= (s.m >= 17 ? 8192 : 12288)) return kWide64Kernel;
  return nullptr;
}

// A packed MN-major operand strides its columns by M (A) or N (B) elements: TMA needs those at
// 16 bytes, a multiple of 8 elements.
bool TmaStrides(const GemmSize& s, bool a_mn, bool b_mn) {
  return !(a_mn && s.m % 8) && !(b_mn && s.n % 8);
}

GemmChoice ChooseGemmTile(const GemmSize& s, int compute_capability, const GemmOptions& options) {
  const bool a_mn = options.a_mn, b_mn = options.b_mn, tma_strides = options.tma_strides;
  const bool mn_major = a_mn || b_mn;
  if (compute_capability == 90 && Tma8(s, options) && !mn_major)
    return {kTma8Kernel,
            absl::StrCat("M = ", s.m, ", N = ", s.n, ", K = ", s.k,
                         ": the weights by TMA boxes of 256 k into mma.sync, A's box of 8 rows")};
  if (const char* wide = compute_capability == 90 ? WideStages(s, options) : nullptr)
    return {wide, absl::StrCat("M = ", s.m, ", N = ", s.n, ", K = ", s.k, ": 64-row blocks of ",
                               wide == kWide32Kernel ? "32" : "64", " columns in stages of 128 k",
                               ", one wave, A's box of the rows before M")};
  if (compute_capability == 90 && Tma16(s, options) && !mn_major)
    return {
        kTma16Kernel,
        absl::StrCat("M = ", s.m, ", N = ", s.n, ", K = ", s.k,
                     ": the weights by TMA boxes of 256 k into mma.sync, a block per 16 columns")};
  if (compute_capability == 90 && Mma16(s, options) && !mn_major)
    return {kMma16Kernel,
            absl::StrCat("M = ", s.m, ", N = ", s.n,
                         ": the weights read in 16-byte chunks into mma.sync fragments, "
                         "a block per 16 columns")};
  if (Skinny(s, options.c_row) && !mn_major && compute_capability >= 80)
    return {SkinnyKernel(compute_capability),
            absl::StrCat("M = ", s.m, ": the weights streamed once on CUDA cores, 16-byte chunks")};
  // Where TMA cannot read the operands, or no tuned kernel exists for the GPU: the strided
  // mma.sync kernel (any size and strides; a fraction of the tile kernels' speed).
  constexpr const char* kStrided = "gemm/bf16_strided";
  if (compute_capability != 90)
    return {compute_capability >= 80 ? kStrided : "reference/bf16",
            absl::StrCat("no tuned kernel for sm_", compute_capability,
                         compute_capability >= 80 ? " yet: the strided mma.sync kernel (any size)"
                                                  : ": the reference kernel (any size, not fast)")};
  if (s.k % 8 != 0 && !(a_mn && b_mn) && !tma_strides)  // K strides the rows of a K-major operand
    return {kStrided,
            absl::StrCat("K = ", s.k,
                         ": TMA needs K a multiple of 8 (16-byte rows of K-major A and B), so the "
                         "strided mma.sync kernel (any size, elements loaded one by one)")};
  if (!TmaStrides(s, a_mn, b_mn) && !tma_strides)
    return {kStrided,
            absl::StrCat(
                a_mn && s.m % 8 ? absl::StrCat("A column-major with M = ", s.m)
                                : absl::StrCat("B row-major with N = ", s.n),
                ": TMA needs its columns 16 bytes apart (a multiple of 8 elements), so the strided "
                "mma.sync kernel (any size, elements loaded one by one)")};
  // Unless the planner says: packed operands, K-major rows K elements apart, MN-major ones M (A) or
  // N (B).
  const bool aligned_rows =
      options.rows_128b.value_or((a_mn ? s.m : s.k) % 64 == 0 && (b_mn ? s.n : s.k) % 64 == 0);
  if (s.m <= kWeightBoundRows) {  // bound by the weight read: the least time streaming B
    if (LongKOverFewTiles(s) && !mn_major && aligned_rows) {
      const Candidate& n64 = kSm90[3];
      return {n64.kernel,
              absl::StrFormat("M = %d, K = %d over %d 128x64 tiles: those tiles streamed "
                              "(stream-K), each cut along K, "
                              "so that every CTA streams B and A is read once per 64 columns",
                              static_cast<int>(s.m), static_cast<int>(s.k),
                              static_cast<int>(TilesOf(n64, s))),
              0};
    }
    const Candidate* best = nullptr;
    int best_split = 1;
    for (const Candidate& c : kSm90)
      // (4 parts at most: the model's constants were fitted to those; kiln tune still times more.)
      for (int split : kSplits)  // a tie keeps the earlier: whole tiles before splits
        if (split != 0 && split <= 4 && c.ring_b_bytes && Weighed(c, s, split) &&
            Reads(c, mn_major) &&
            (!best || StreamUs(c, s, split) < StreamUs(*best, s, best_split) - 1e-9))
          best = &c, best_split = split;
    return {best->kernel,
            absl::StrFormat("M = %d: the weight read bounds the time; %dx%d tiles, %s: %.0f us "
                            "predicted streaming B",
                            static_cast<int>(s.m), best->tile_m, best->tile_n,
                            SplitName(best_split), StreamUs(*best, s, best_split)),
            best_split};
  }
  if (FewColumns(s) && !mn_major && aligned_rows) return FewColumnsChoice(s);
  auto efficiency = [&](const Candidate& c, int split) {
    return Efficiency(c, s, split, aligned_rows);
  };
  const Candidate* best = &kSm90[0];
  int best_split = 1;
  for (const Candidate& c : kSm90)
    for (int split : kSplits)  // a tie keeps the earlier: whole tiles before splits
      if (Weighed(c, s, split) && Reads(c, mn_major) && (split == 1 || c.splits) &&
          (split != 0 || (c.streams && StreamsWell(c, s))) &&
          efficiency(c, split) > efficiency(*best, best_split) + 1e-9)
        best = &c, best_split = split;
  return {best->kernel,
          absl::StrFormat("%dx%d tiles, %d in flight, %s: %.*f%% of the machine's time useful by "
                          "the tile, wave and "
                          "partial counts%s",
                          best->tile_m, best->tile_n, best->in_flight, SplitName(best_split),
                          // a problem of a few tiles: two decimals, not "0%"
                          efficiency(*best, best_split) < 0.01 ? 2 : 0,
                          100 * efficiency(*best, best_split),
                          aligned_rows ? "" : " (rows off 128 bytes: the tiles' speeds there)"),
          best_split};
}

}  // namespace

std::string SplitName(int split) {
  return split == 1 ? "whole tiles" : split == 0 ? "stream-K" : absl::StrCat("split-K ", split);
}

bool IsWideStageKernel(const std::string& kernel) {
  for (const std::string base : {kWide32Kernel, kWide64Kernel})
    if (kernel == base || kernel.rfind(base + ".", 0) == 0) return true;
  return false;
}

std::string GemmVariantName(const std::string& base, const GemmOptions& o) {
  if (o.in_type == "bf16" && o.out_type == "bf16" && o.epilogue.empty() && !o.any_m && !o.a_mn &&
      !o.b_mn && !o.c_row)
    return base;
  return absl::StrCat(base, ".", o.in_type, "-", o.out_type, o.any_m ? ".any_m" : "",
                      o.a_mn ? ".a_mn" : "", o.b_mn ? ".b_mn" : "", o.c_row ? ".c_row" : "",
                      o.epilogue.empty() ? "" : ".", o.epilogue);
}

absl::StatusOr<GemmTuneCache> GemmTuneCache::ReadExisting(const std::string& path) {
  if (!std::ifstream(path))
    return absl::NotFoundError(
        absl::StrCat("tune cache ", path,
                     ": cannot open it (`kiln tune --sizes ... --tune_cache FILE` writes one)"));
  return Read(path);
}

absl::StatusOr<GemmTuneCache> GemmTuneCache::Read(const std::string& path) {
  GemmTuneCache cache;
  std::ifstream in(path);
  if (!in) return cache;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = line.substr(0, line.find('#'));
    std::vector<std::string> w = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (w.empty()) continue;
    int cc = 0, split = 1;
    GemmSize s;
    double ms = 0;
    if ((w.size() != 6 && w.size() != 7) || w[0].rfind("sm_", 0) != 0 ||
        !absl::SimpleAtoi(w[0].substr(3), &cc) || !absl::SimpleAtoi(w[1], &s.m) ||
        !absl::SimpleAtoi(w[2], &s.n) || !absl::SimpleAtoi(w[3], &s.k) ||
        (w.size() == 7 && (!absl::SimpleAtoi(w[5], &split) || split < 0)) ||
        !absl::SimpleAtod(w.back(), &ms))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": not 'sm_<cc> M N K kernel split ms': ", line));
    cache.Set(cc, s, w[4], split, ms);
  }
  return cache;
}

absl::Status GemmTuneCache::Write(const std::string& path) const {
  std::ofstream out(path);
  out << "# kiln tune: the fastest GEMM kernel measured per GPU and size (sm_<cc> M N K kernel "
         "split ms;\n"
      << "# split 1: whole tiles, S: split-K in S parts, 0: stream-K)\n";
  for (const auto& [key, e] : entries_)
    out << "sm_" << std::get<0>(key) << " " << std::get<1>(key) << " " << std::get<2>(key) << " "
        << std::get<3>(key) << " " << e.choice.kernel << " " << e.choice.split << " "
        << absl::StrFormat("%.4f", e.ms) << "\n";
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

std::vector<GemmChoice> GemmCandidates(const GemmSize& s, int compute_capability) {
  std::vector<GemmChoice> c;
  if (s.k % 8 == 0 && compute_capability == 90)
    for (const Candidate& t : kSm90)
      for (int split : kSplits)
        if (Weighed(t, s, split) && (t.max_n == 0 || s.n <= t.max_n))
          c.push_back({t.kernel, "", split});
  if (s.k % 8 == 0 && compute_capability >= 80 && s.m <= 64)
    c.push_back({SkinnyKernel(compute_capability), ""});
  if (s.k % 8 == 0 && compute_capability == 90 && s.m <= 16) {
    c.push_back({kMma16Kernel, ""});
    c.push_back({kTma16Kernel, ""});
    c.push_back({kTma8Kernel, ""});
  }
  if (s.k % 8 == 0 && compute_capability == 90 && s.m >= 3 && s.m <= 64) {
    c.push_back({kWide32Kernel, ""});
    c.push_back({kWide64Kernel, ""});
  }
  if (c.empty()) c.push_back({"gemm/bf16_strided", ""});
  return c;
}

GemmChoice ChooseGemm(const GemmSize& s, int compute_capability, const GemmOptions& options,
                      const GemmTuneCache* tuned) {
  const bool mn_major = options.a_mn || options.b_mn;
  GemmChoice c = ChooseGemmTile(s, compute_capability, options);
  // kiln tune times packed operands: where those pack rows off 16 bytes it timed the strided
  // kernel alone, which the tile kernels on aligned strides outrun.
  const GemmChoice* best = tuned && TmaStrides(s, options.a_mn, options.b_mn) && s.k % 8 == 0
                               ? tuned->Find(compute_capability, s)
                               : nullptr;
  // Its pick stands only where that kernel reads the operands as given: the mma.sync kernels
  // packed K-major ones only, the wide-stage kernels a packed K-major A and either B, the skinny
  // kernel and the tiles of 80, 96, 160 columns K-major ones only.
  auto reads_as_given = [&](const std::string& kernel) {
    if (IsWideStageKernel(kernel)) return !options.a_mn && options.packed.value_or(true);
    if (kernel == kMma16Kernel || kernel == kTma16Kernel || kernel == kTma8Kernel)
      return !mn_major && options.packed.value_or(true);
    if (!mn_major) return true;
    for (const Candidate& x : kSm90)
      if (kernel == x.kernel) return Reads(x, true);
    return false;
  };
  if (best && !reads_as_given(best->kernel)) best = nullptr;
  if (best) {
    const std::vector<GemmChoice> can = GemmCandidates(s, compute_capability);
    if (std::any_of(can.begin(), can.end(), [&](const GemmChoice& x) {
          return x.kernel == best->kernel && x.split == best->split;
        }))
      c = {best->kernel,
           absl::StrCat("the fastest kiln tune measured at this size (", SplitName(best->split),
                        ")"),
           best->split};
  }
  GemmOptions o = options;
  // A tile kernel at an M its C map cannot take stores C from registers (f32 ones always do).
  const bool tiles = c.kernel.rfind("gemm/bf16_sm90", 0) == 0;
  o.any_m = tiles && s.m % 8 != 0 && options.out_type != "f32";
  if (o.any_m) c.why += "; C stored from registers (M is no multiple of 8: no TMA store)";
  // There an epilogue reading C_in or a residual loads them element by element, a few pairs at a
  // time: 4 in the 128x256 tiles, whose accumulator fills the registers, 8 in the 128x128 ones.
  // The 128x128 tiles were faster than the 256x256 and 256x160 pairs at all 8 shapes of K = 40 to
  // 4096 measured, whole tiles (docs/perf/2026-11-26-c-from-registers-with-c-in.md).
  if (o.any_m && EpilogueReadsMatrices(options.epilogue) && !best && c.split == 1 &&
      (c.kernel == Named("gemm/bf16_sm90").kernel ||
       c.kernel == Named("gemm/bf16_sm90_n160").kernel)) {
    c.kernel = Named("gemm/bf16_sm90_n128").kernel;
    c.why += "; 128x128 tiles instead, whose registers hold more of the epilogue's loads in flight";
  }
  // The reference reads through strides; the wide-stage kernels take a row-major B as b_mn.
  o.a_mn = tiles && options.a_mn, o.b_mn = (tiles || IsWideStageKernel(c.kernel)) && options.b_mn;
  c.kernel = GemmVariantName(c.kernel, o);
  return c;
}

}  // namespace kiln::rt
