// The tile kernels' declaration: operands, launch parameters, shared memory, the work walk, and
// the producer and consumer roles (tile_sm90.h says the algorithm).
#include "ops/gemm/kernels/tile_sm90.h"

#include <algorithm>
#include <bit>
#include <string>

#include "absl/strings/str_cat.h"
#include "kiln/ops/gemm_tiles.h"

namespace kiln::ops {
namespace {

using examples::TmaGemmOperands;
using examples::WorkUnit;

// Where B is read by few rows of tiles (M <= 1024) and fills at most ~5 L2s (N * K <= 2^27
// elements), its loads carry an L2 evict_first policy: its lines, read once or by a few CTAs side
// by side, make room before lines that were in L2 at the start (a writer's dirty output, which
// would be written back). Where other rows of tiles read B again it costs time
// (docs/perf/2026-11-26-b-lines-evicted-first.md). Elsewhere the copies carry no policy.
Value StreamsB(const TmaGemmOperands& g) { return (g.M <= 1024) & (g.K <= Operand(1 << 27) / g.N); }
// The same for A where it is the weights: C of few columns (N <= 128), M of 4096 or more, A at
// most ~5 L2s (docs/perf/2026-11-26-c-of-few-columns.md). Never where StreamsB holds.
Value StreamsA(const TmaGemmOperands& g) {
  return (g.N <= 128) & (g.M >= 4096) & (g.K <= Operand(1 << 27) / g.M);
}

}  // namespace

// Columns of C per staged TMA store: the whole tile up to 128, else 128-column pieces, or two
// halves where 128 does not divide it (160: two of 80). A grouped GEMM's wide tile stores 64 at a
// time: its C buffers make room for the groups' counts. A row-major C's piece is at most one
// swizzle span of its rows (64 columns).
int TileShape::piece_n() const {
  if ((grouped() || variant.c_row) && bn > 64) return 64;
  return bn <= 128 ? bn : bn % 128 == 0 ? 128 : bn / 2;
}

// C goes from registers where it is f32 (stmatrix moves 16-bit elements) or where M is no multiple
// of 8 (C's map would need 16-byte column strides). (A grouped GEMM stores the tiles that cross a
// group's end from registers too: FinishTileUnit.)
bool TileShape::direct_out() const { return out() == f32 || variant.any_m; }

// Accumulator pairs whose fused-epilogue loads (C_in, bias, residual) go out together, all before
// any is used: as many as the registers beside the accumulator hold (ptxas gives each thread
// 65536 / threads, at most 255; ~40 for the rest, ~8 a pair of loads and addresses); more spill
// (docs/perf/2026-11-26-fused-epilogue-loads-together.md).
int TileShape::epi_pairs() const {
  const int regs = std::min(255, 65536 / (128 * (1 + consumers())) / 8 * 8);
  return std::clamp(std::bit_floor(static_cast<unsigned>(std::max(regs - bn / 2 - 40, 0) / 8)), 4u,
                    32u);
}

// Where a tile takes more than two groups of such loads and C leaves through its map, C_in and the
// residual come in the way C goes out: a piece at a time by TMA into the consumer's C buffer, read
// back in the accumulator's order (ldmatrix.trans), whole lines and no registers held for loads
// in flight (docs/perf/2026-11-26-c-in-and-residual-through-tma.md).
bool TileShape::staged_inputs() const {
  return !direct_out() && !variant.c_row && (epi().scale || epi().residual) &&
         2 * epi_pairs() < bn / 4;
}

absl::StatusOr<KernelDef> BuildTileKernel(const char* name, const TileShape& shape) {
  const int BM = shape.bm, BN = shape.bn, BK = shape.bk(), STAGES = shape.stages,
            CLUSTER = shape.cluster;
  const int GROUPS = 128 / CLUSTER, CONSUMERS = shape.consumers(), PIECE_N = shape.piece_n();
  const Scalar in = shape.in(), out = shape.out();
  const bool direct_out = shape.direct_out();
  // A tile with at most half its rows before M loads A in boxes of 16 rows, those before M only,
  // or in a 128-row tile with more than 32 rows before M one box of 64 (ACopies): TMA's zero fill
  // of rows past M costs throughput, and so does each box issued
  // (docs/perf/2026-11-25-a-rows-past-m.md, docs/perf/2026-11-26-a-rows-past-m-128-row-tiles.md).
  const int A_EDGE = !shape.variant.a_mn && !shape.grouped() ? 16 : 0;
  const bool c_row = shape.variant.c_row;
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (1 + CONSUMERS))});
  // A tile of one consumer warpgroup, or of fewer than 64 accumulator registers a thread, needs
  // fewer registers than its launch share, and ptxas, left to choose the entry's count, ignores
  // the roles' setmaxnreg (kiln check's C7508 finding): pin it
  // (docs/perf/2026-12-01-setmaxnreg-pinned.md).
  if (CONSUMERS == 1 || BM / CONSUMERS * BN / 128 < 64) k.MinBlocksPerSm(1);
  if (c_row && (shape.grouped() || shape.epi().swiglu || shape.epi().rope))
    k.Fail(absl::StrCat(name,
                        ": a row-major C (c_row) is for plain tile kernels: no grouping, no "
                        "swiglu, no rope"));
  TmaGemmOperands g = examples::DeclareTmaGemm(k, {.bm = BM,
                                                   .bn = BN,
                                                   .bk = BK,
                                                   .rank = 2,
                                                   .by_value = true,
                                                   .c_box_rows = direct_out ? 0 : PIECE_N,
                                                   .c_swizzle = !direct_out,
                                                   .divide_m = BM * CLUSTER,
                                                   .c_row_major = c_row,
                                                   .a_edge_rows = A_EDGE,
                                                   .ragged = true,
                                                   .in_type = examples::ScalarName(in),
                                                   .out_type = examples::ScalarName(out),
                                                   .epilogue = shape.variant.epilogue.Terms(),
                                                   .a_mn = shape.variant.a_mn,
                                                   .b_mn = shape.variant.b_mn,
                                                   .grouped_a = shape.grouped()});
  // The work table (whole tiles, split-K or stream-K, as the launch's split says); a split tile's
  // parts meet in the workspaces (ReducePartials). A grouped GEMM walks its groups instead.
  Value table, partials, counters;
  GroupedWork grouped;
  if (shape.grouped()) {
    grouped = DeclareGroupedWork(k, shape);
    if (!direct_out)  // the tiles that cross a group's end go out from registers
      g.Cptr = GlobalTensor(k.PtrParam("C", out), {g.M, g.N}, {k.I32(1), g.M});
  } else {
    k.I32Param("split");
    table = k.ScheduleTableParam("schedule",
                                 examples::GemmWork(BM * CLUSTER, BN, BK, GROUPS, kWorkSlots));
    partials = k.WorkspaceParam("partials", f32, "schedule", int64_t{CLUSTER} * BM * BN * 4);
    counters = k.WorkspaceParam("counters", i32, "schedule", int64_t{CLUSTER} * CONSUMERS * 4);
  }
  const EpilogueSpec& epi = shape.variant.epilogue;
  const Epilogue epilogue = Epilogue::Declare(k, epi, g.M, g.N, /*column_major=*/!c_row);
  Value scale_a, scale_b, sa_row, sa_k, sb_row, sb_k;  // 8-bit inputs' scales (TileKernel)
  if (shape.fp8()) {
    scale_a = k.PtrParam("scale_a", f32), scale_b = k.PtrParam("scale_b", f32);
    sa_row = k.I64Param("sa_row"), sa_k = k.I64Param("sa_k");
    sb_row = k.I64Param("sb_row"), sb_k = k.I64Param("sb_k");
  }
  const bool staged_inputs = shape.staged_inputs();
  TensorMap tm_c_in, tm_residual;
  if (staged_inputs) {
    auto like_c = [&](const char* tensor, const char* map_name) {
      rt::TensorMapParam spec = g.C.spec();
      spec.tensor = tensor;
      return k.TmaParam(map_name, spec);
    };
    if (epi.scale) tm_c_in = like_c("C_in", "tmC_in");
    if (epi.residual) tm_residual = like_c("residual", "tmResidual");
  }
  k.Grid(std::to_string(rt::kTileKernelCtas));  // the choice rule weighs tiles in flight by it
  if (CLUSTER > 1) k.ClusterDims({static_cast<unsigned>(CLUSTER), 1, 1});
  // The ring takes the tile's stages, or as many as fit beside the consumers' C buffers (three
  // consumers' column-major C buffers leave room for fewer than a row-major C's); 2 KB stay for
  // the barriers, flags and alignment.
  const int stage_bytes = (BM + BN) * BK * ScalarBytes(in),
            c_bytes =
                direct_out ? 0 : CONSUMERS * PIECE_N * (epi.swiglu ? 32 : 64) * ScalarBytes(out);
  const int fit = (k.target().smem_budget_bytes - c_bytes - 2048) / stage_bytes;
  if (fit < 2)
    k.Fail(absl::StrCat(name, ": ", BM, "x", BN, " tiles leave room for ", std::max(fit, 0),
                        " stages of the ring beside the C buffers; a ring needs two"));
  const int ring_stages = std::clamp(fit, 1, STAGES);
  SmemTile sA = k.SmemSwizzled(in, BM, BK, Swizzle::k128B, ring_stages);
  SmemTile sB = k.SmemSwizzled(shape.variant.b_type(), BN, BK, Swizzle::k128B, ring_stages);
  SmemTile sC[3];  // [n][m] (a row-major C's: [m][n]), one per consumer
  if (!direct_out)
    for (int x = 0; x < CONSUMERS; ++x)  // a swiglu's C: 32 rows a consumer
      sC[x] = epi.swiglu ? k.SmemSwizzled(out, PIECE_N, 32, Swizzle::k64B)
              : c_row    ? k.SmemSwizzled(out, 64, PIECE_N, examples::SwizzleOfRow(PIECE_N * 2))
                         : k.SmemSwizzled(out, PIECE_N, 64, Swizzle::k128B);
  Barriers input_bars;
  if (staged_inputs) input_bars = k.SmemBarriers(CONSUMERS);
  SmemTile last_flags =
      k.Smem(i32, CONSUMERS, 1);  // per consumer: its share of a split tile came last
  Pipeline ring(k, ring_stages, CONSUMERS, CLUSTER);
  std::function<void(const examples::WorkUnitBody&)> work_walk;
  if (!shape.grouped()) work_walk = examples::ScheduledWork(k, table, kWorkSlots);
  Value tid = k.ThreadIdx(), rank = CLUSTER > 1 ? k.ClusterCtaRank() : k.I32(0);
  TileKernel tk{k,          shape,      g,
                epilogue,   tm_c_in,    tm_residual,
                sA,         sB,         {sC[0], sC[1], sC[2]},
                last_flags, input_bars, partials,
                counters,   rank,       ring,
                nullptr};
  if (shape.fp8())
    tk.scale_a = scale_a, tk.scale_b = scale_b, tk.sa_row = sa_row, tk.sa_k = sa_k,
    tk.sb_row = sb_row, tk.sb_k = sb_k;
  if (shape.variant.scaling == examples::Fp8Scaling::kBlockT)
    tk.scale_cols = k.Smem(f32, 2 * CONSUMERS, BN);
  tk.for_each_unit = [&](const auto& body) {
    if (shape.grouped()) return ForEachGroupedUnit(k, shape, grouped, g, rank, body);
    work_walk([&](const WorkUnit& u) {
      body(u.m_index * (BM * CLUSTER) + rank * BM, u.n_index * BN, u);
    });
  };
  if (shape.grouped()) CountGroupTiles(k, shape, grouped, g, tid, 128 * (1 + CONSUMERS));
  k.If(tid == 0, [&] {
    g.PrefetchDescriptors(k);  // under the barriers' setup and the cluster's sync
    for (int x = 0; x < input_bars.size(); ++x) input_bars[x].Init(1);
    ring.Init();
  });
  if (CLUSTER > 1)
    k.ClusterSync();
  else
    k.SyncThreads();

  // Programmatic dependent launch: the setup above overlaps the end of the kernel before this one
  // in the stream, which may still write what this one reads; each role waits for it
  // (WaitForPriorGrids) before it touches global memory, and the producer lets the next kernel
  // launch once it has asked for its last copy.
  examples::MulticastProducer(
      k, ring, g, sA, sB, BK, rank, examples::ForEachSpan([&](const examples::SpanBody& body) {
        tk.for_each_unit([&](Value m0, Value n0, const WorkUnit& u) {
          body(u.a_row.valid() ? u.a_row : m0, n0, u.k_begin * BK, u.k_end * BK);
        });
      }),
      CLUSTER, k.L2Policy(CacheHint::kL2EvictFirst), StreamsB(g), StreamsA(g),
      /*wait_prior_grids=*/true);
  // The consumers take what the producer's 24 registers leave of the register file, at most 240.
  const int consumer_regs = std::min(240, (65536 - 128 * 24) / (128 * CONSUMERS) / 8 * 8);
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = consumer_regs},
         [&](Value t) { shape.fp8() ? RunFp8TileConsumer(tk, t) : RunTileConsumer(tk, t); });
  if (CLUSTER > 1)
    k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace kiln::ops
