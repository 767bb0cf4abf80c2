// gemm/bf16_mma16_ring_sm90 and gemm/bf16_mma64_ring_sm90: C = A * B for a few rows (up to 16
// or 64 a tile), the weights B streamed once through a deep ring of cp.async stages into mma.sync
// from shared memory. Built to read the weights once at up to 64 rows, where the mma16 kernel
// (mma16.cc) reads A from L2 in every warp (at 64 rows four times the weights' bytes through L2
// for each block of 16 columns) and its registers bound the loads in flight. Here a block's 8
// warps own 16 columns of C each (128 a block) over the same k-tiles, so one copy of A's tile
// serves 128 columns of B, and cp.async holds no registers: 4-5 stages of 128 k, 96-128 KB of B
// in flight an SM.
// Computed as C^T = B^T A^T: B's columns are the mma's rows (ldmatrix x4 from B's stage), A's
// rows its N (ldmatrix x4: two n8 groups); both stages XOR-swizzled (Row8).
// Work: a persistent grid walks a work table (rt::WorkSchedule) of (tile, k range) units: whole
// tiles, split-K or stream-K, the launch's split says; a split tile's parts meet in the workspace
// in a fixed order (ReducePartials). Rows past M, columns past N and k past K copy as zeros
// (cp.async's source size 0). K a multiple of 8; packed K-major A and B, column-major C.
// Each k-tile is bound by the latency of its chain of instructions (a wait, a block barrier, the
// copies' addresses, ldmatrix, mma) and each unit by filling its ring, so no rule of the entry
// point takes it (docs/perf/2026-11-27-cp-async-ring-64-rows-not-picked.md).
// `kiln run NAME --split S`.
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"
#include "ops/gemm/kernels/pieces.h"

namespace kiln::examples {
namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32, BN = 16 * WARPS, WORK_SLOTS = 1 << 14;
constexpr int GROUPS = 132;             // blocks (persistent): one an SM of an H100 SXM / H200
constexpr int kRingBytes = 200 * 1024;  // the stages' shared memory, at most
// Stages of 128 k: a stage of 64 k runs twice the instruction chains a byte
// (docs/perf/2026-11-27-cp-async-ring-64-rows-not-picked.md).
constexpr int BK = 128;  // k a stage

absl::StatusOr<KernelDef> BuildMmaRows(const std::string& name, const GemmVariant& v, int rows) {
  const int groups_m = rows / 8;  // n8 tiles of the mma over A's rows
  const int stage_bytes = (BN + rows) * BK * 2, stages = std::min(8, kRingBytes / stage_bytes);
  Kernel k(name, sm90a(), {THREADS});
  GemmOperands g = DeclareGemm(k, {.in_type = ScalarName(v.in),
                                   .out_type = ScalarName(v.epilogue.out),
                                   .c_order = "col",
                                   .tile_m = 1,
                                   .tile_n = 1,
                                   .tile_k = 8,
                                   .epilogue = v.epilogue.Terms()});
  k.I32Param("split");
  Value table = k.ScheduleTableParam("schedule", GemmWork(rows, BN, BK, GROUPS, WORK_SLOTS));
  Value partials = k.WorkspaceParam("partials", f32, "schedule", int64_t{rows} * BN * 4);
  Value counters = k.WorkspaceParam("counters", i32, "schedule", 4);
  const Epilogue epilogue = Epilogue::Declare(k, v.epilogue, g.M, g.N, /*column_major=*/true);
  k.Grid(absl::StrCat(GROUPS));
  const SmemLayout ring{.swizzle = UnitSwizzle::Row8(), .stages = stages};
  SmemTile sB = k.Smem(v.in, BN, BK, ring);    // [column of C][k]
  SmemTile sA = k.Smem(v.in, rows, BK, ring);  // [row of A][k]
  SmemTile flag = k.Smem(i32, 1, 1);
  Value tid = k.ThreadIdx(), lane = k.LaneId(), warp = k.WarpId();
  Value quad = lane / 4, t = lane % 4;  // the mma fragment's row (group) and k slot pair
  k.WaitForPriorGrids();
  auto walk = ScheduledWork(k, table, WORK_SLOTS);
  walk([&](const WorkUnit& u) {
    Value m0 = u.m_index * rows, n0 = u.n_index * BN, k_end = Min(u.k_end * BK, g.K);
    // k-tile kt's B (BN columns) and A (rows) into `stage`, 16 bytes a copy; outside the operands
    // nothing is read and zeros land.
    const int kChunks = BK / 8;  // 16-byte chunks a row of a stage
    auto copy = [&](const SmemTile& tile, int tile_rows, const Value& kt, const Value& stage,
                    const std::function<Value(const Value&, const Value&)>& at,
                    const Value& rows_left) {
      for (int j = 0; j < (tile_rows * kChunks + THREADS - 1) / THREADS; ++j) {
        Value c = tid + j * THREADS, row = c / kChunks, col = (c % kChunks) * 8, k0 = kt * BK + col;
        auto one = [&] {
          Value in = (k0 < k_end) & (row < rows_left);
          k.CpAsync(tile.Stage(stage), row, col, at(Select(in, row, 0), Select(in, k0, 0)), 16,
                    Kernel::CacheAt::kL2, 0, Select(in, k.I32(16), k.I32(0)));
        };
        if ((j + 1) * THREADS <= tile_rows * kChunks)
          one();
        else
          k.If(c < tile_rows * kChunks, one);
      }
    };
    auto issue = [&](const Value& kt, const Value& stage) {
      k.If(kt < u.k_end, [&] {
        copy(
            sB, BN, kt, stage,
            [&](const Value& r, const Value& k0) {
              return g.B.At({k0, n0 + r});
            },
            g.N - n0);
        copy(
            sA, rows, kt, stage,
            [&](const Value& r, const Value& k0) {
              return g.A.At({m0 + r, k0});
            },
            g.M - m0);
      });
      k.CpAsyncCommit();  // a group each k-tile, empty past the unit, so the waits count tiles
    };
    Regs acc = k.Registers(Type::Of(f32), 4 * groups_m);
    for (int i = 0; i < 4 * groups_m; ++i) acc[i] = k.F32(0);
    k.SyncThreads();  // every warp is done with the last unit's stages
    for (int s = 0; s + 1 < stages; ++s) issue(u.k_begin + s, k.I32(s));
    k.For(u.k_begin, u.k_end, 1, [&](Value kt) {
      Value rel = kt - u.k_begin;
      k.CpAsyncWait(stages - 2);  // this thread's copies of k-tile kt have landed
      k.SyncThreads();            // and everyone's; the stage read last k-tile is free
      issue(kt + stages - 1, (rel + stages - 1) % stages);
      SmemTile b = sB.Stage(rel % stages), a = sA.Stage(rel % stages);
      for (int kk = 0; kk < BK; kk += 16) {
        // B^T's rows 16 * warp .. +15 (lanes 0-15 rows at k kk, 16-31 at kk + 8): a0..a3.
        std::vector<Value> bt = k.LdMatrix(b, warp * 16 + lane % 16, kk + lane / 16 * 8, 4);
        for (int gp = 0; gp < groups_m / 2; ++gp) {
          // A's rows 16 gp .. +7 at k kk and kk + 8, then rows +8 .. +15: two n8 groups' b0, b1.
          std::vector<Value> x =
              k.LdMatrix(a, gp * 16 + lane % 8 + lane / 16 * 8, kk + lane / 8 % 2 * 8, 4);
          for (int h = 0; h < 2; ++h) {
            const int gm = 2 * gp + h;
            auto d =
                k.MmaM16N8K16(v.in, bt, {x[2 * h], x[2 * h + 1]},
                              {acc[4 * gm], acc[4 * gm + 1], acc[4 * gm + 2], acc[4 * gm + 3]});
            for (int i = 0; i < 4; ++i) acc[4 * gm + i] = d[i];
          }
        }
      }
    });
    // d[i] of n8 group gm: B^T's row (C's column) quad + 8 * (i / 2), A's row 8 * gm + 2t + i % 2.
    Value col = n0 + warp * 16 + quad;
    auto row_of = [&](int r) { return m0 + 8 * (r / 4) + 2 * t + r % 2; };
    auto col_of = [&](int r) { return col + 8 * ((r % 4) / 2); };
    auto live = [&](int r) { return (row_of(r) < g.M) & (col_of(r) < g.N); };
    Regs writes = k.Registers(Type::Of(i32), 1);
    writes[0] = k.I32(1);
    k.If(u.slot != -1, [&] {
      Value last = ReducePartials(k, acc, 4 * groups_m, u, partials, counters, k.I32(0), 1, tid,
                                  THREADS, 1, flag.At(0, 0), live);
      writes[0] = Select(last, k.I32(1), k.I32(0));
    });
    k.If(Value(writes[0]) == 1, [&] {
      for (int r = 0; r < 4 * groups_m; ++r) {
        Value row = row_of(r), c = col_of(r), inside = live(r);
        k.If(inside, [&] { k.Store(g.C.At({row, c}), epilogue.Output(acc[r], row, c, inside)); });
      }
    });
  });
  k.LaunchDependents();
  return k.Build();
}

void RegisterRows(const char* name, int rows) {
  Register({name,
            absl::StrCat("up to ", rows,
                         " rows a tile: B streamed through cp.async stages into mma.sync, ",
                         "A shared by 8 warps (not the entry point's pick)"),
            [name, rows] { return BuildMmaRows(name, {}, rows); }});
}

const bool kMmaRowsRegistered = [] {
  RegisterRows("gemm/bf16_mma16_ring_sm90", 16);
  RegisterRows("gemm/bf16_mma64_ring_sm90", 64);
  return true;
}();

}  // namespace
}  // namespace kiln::examples
