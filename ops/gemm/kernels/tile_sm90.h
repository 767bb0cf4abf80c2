// The GEMM entry point's tile kernels on Hopper (gemm/bf16_sm90*): hopper/k14 (a TMA producer
// warpgroup feeding a ring of stages to one or two wgmma consumer warpgroups, clusters sharing B
// by multicast, the epilogue under the next tile's first wgmma group) at any M, N, K.
//
// Algorithm: the CTA walks a work table of (tile, k range) units built by the launcher (whole
// tiles, split-K or stream-K as the launch's split says). For each unit the producer loads A's and
// B's boxes of 64 k into the ring; each consumer issues a stage's wgmma group, waits for the group
// before it and frees that group's stage. A split tile's parts meet in a workspace, summed in
// a fixed tree by whichever ends last at each node (deterministic). The epilogue applies the fused
// terms and writes C (column-major, or row-major: c_row): packed to 16 bits and out through staged
// TMA stores under the next tile's first group, or element by element from registers (an f32 C, or
// C's contiguous extent no multiple of 8).
//
// Constraints (checked at build or launch): K a multiple of 8 (TMA's 16-byte strides); M too where
// C goes through its map; MN-major operands need tiles of whole 64-column blocks.
//
// The pieces: tile_sm90.cc declares the kernel and its roles; tile_consumer.cc is the consumers'
// mainloop; tile_epilogue.cc their epilogue.
#pragma once

#include <algorithm>
#include <functional>

#include "absl/status/statusor.h"
#include "examples/gemm.h"
#include "kiln/pipeline.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::ops {

using examples::GemmVariant;

// Grouped GEMMs (tile_groups.cc): C's columns (a row-major product's rows: the tokens) fall into
// groups, each multiplied by its own A (an expert's weights), either one after another with each
// group's end in `group_ends` (contiguous) or `groups` blocks of equal capacity with each one's
// count in `group_counts` (masked).
enum class Grouping { kNone, kContiguous, kMasked };

// The CTA tile (64 rows a consumer warpgroup), the ring's depth, the cluster (CTAs along M sharing
// B by multicast), and the variant: element types, storage orders and fused epilogue.
// What follows from them is computed here alone (tile_sm90.cc).
struct TileShape {
  int bm = 128, bn = 256, stages = 4, cluster = 2;
  GemmVariant variant = {};
  Grouping grouping = Grouping::kNone;

  int consumers() const { return bm / 64; }  // consumer warpgroups
  // Named barriers, one per consumer warpgroup each (id + the warpgroup's index), in blocks of
  // max(2, consumers) ids after the epilogue's at 2 (examples::WritePackedTile): a split tile's
  // reduction, then blockwise_t's factors.
  int reduce_barrier() const { return 2 + std::max(2, consumers()); }
  int factors_barrier() const { return 2 + 2 * std::max(2, consumers()); }
  // K per stage: one 128-byte swizzle span of each row (64 of 16-bit types, 128 of 8-bit ones, the
  // blockwise scales' granularity along K).
  int bk() const { return 128 / ScalarBytes(in()); }
  bool fp8() const { return IsFp8(in()); }
  bool grouped() const { return grouping != Grouping::kNone; }
  int piece_n() const;  // columns of C a staged TMA store writes
  Scalar in() const { return variant.in; }
  Scalar out() const { return variant.epilogue.out; }
  const EpilogueSpec& epi() const { return variant.epilogue; }
  bool direct_out() const;  // C stored from registers (f32, or any M), not staged by TMA
  // The last tile's staged C goes out under the next tile's first wgmma group, or, with three
  // consumers (160 registers a thread), before that group is issued: its packed registers live
  // beside a group in flight made ptxas serialise every wgmma (kiln check says so).
  bool out_under_first_group() const { return !direct_out() && consumers() < 3; }
  int epi_pairs() const;       // accumulator pairs whose epilogue inputs load together
  bool staged_inputs() const;  // C_in and residual come in by TMA through the C buffers
};

absl::StatusOr<KernelDef> BuildTileKernel(const char* name, const TileShape& shape);

// ---- shared by the pieces (tile_sm90.cc, tile_consumer.cc, tile_epilogue.cc)

// At most this many work units per CTA group (16383 waves of tiles): the table is read from
// global memory, rows as long as the launch needs.
inline constexpr int kWorkSlots = 1 << 14;

// What the kernel declared, as the consumers read it.
struct TileKernel {
  Kernel& k;
  TileShape shape;
  examples::TmaGemmOperands g;
  Epilogue epilogue;
  TensorMap tm_c_in, tm_residual;
  SmemTile sA, sB, sC[3], last_flags;  // sC: one per consumer
  Barriers input_bars;                 // per consumer: its staged C_in or residual piece has landed
  Value partials, counters, rank;
  Pipeline& ring;
  // body(m0, n0, unit): this CTA's rows of each unit's tile.
  std::function<void(const std::function<void(Value, Value, const examples::WorkUnit&)>&)>
      for_each_unit;
  // 8-bit inputs: the f32 scales of A and B, and each one's element strides per row (or block of
  // 128 rows) and per 128 of K (Fp8Factors in tile_consumer_fp8.cc reads them).
  Value scale_a, scale_b, sa_row, sa_k, sb_row, sb_k;
  SmemTile scale_cols;  // blockwise_t: per consumer, two k-tiles' B scales, a row each
};

// ---- grouped GEMMs (tile_groups.cc)

// At most this many groups: a CTA keeps a count of tiles per group in shared memory.
inline constexpr int kMaxGroups = 1024;

// The grouped walk's parameters ("groups", then "group_ends" or "group_counts") and shared memory.
struct GroupedWork {
  Value groups, rows;           // the group count; each group's end or count (i32)
  SmemTile tiles_before, sums;  // [groups + 1] column tiles before each group; a warp's sum each
};
GroupedWork DeclareGroupedWork(Kernel& k, const TileShape& shape);
// Every thread of the CTA, once, before the roles: each group's tiles counted and summed into
// tiles_before (the caller synchronises the CTA after it).
void CountGroupTiles(Kernel& k, const TileShape& shape, const GroupedWork& w,
                     const examples::TmaGemmOperands& g, const Value& tid, int threads);
// The cluster's units, whole tiles, in bands of column tiles (tile_groups.cc): body(m0, n0, unit)
// with the unit's a_row and n_end set.
void ForEachGroupedUnit(Kernel& k, const TileShape& shape, const GroupedWork& w,
                        const examples::TmaGemmOperands& g, const Value& rank,
                        const std::function<void(Value, Value, const examples::WorkUnit&)>& body);

// The consumer warpgroups' role: thread `t` of 128 * consumers.
void RunTileConsumer(TileKernel& tk, const Value& t);
// The same for 8-bit inputs: each stage's wgmmas into a partial accumulator, promoted into the
// f32 one with its scales after the stage (tile_consumer_fp8.cc).
void RunFp8TileConsumer(TileKernel& tk, const Value& t);

}  // namespace kiln::ops
