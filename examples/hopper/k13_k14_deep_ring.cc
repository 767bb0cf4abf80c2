// Beyond fast.cu: kernel 12 with a deeper ring (k13), then with its epilogue hidden (k14).
// k13: a 4-stage ring, room for the fourth 48 KB stage coming from the epilogue: each consumer
// writes its 64x256 half in two 64x128 pieces through one 16 KB buffer, 128B-swizzled instead of
// padded (the swizzle spreads stmatrix's rows over the banks; the TMA store undoes it). In the
// mainloop a consumer issues stage s's wgmmas, then waits only for stage s-1's group
// (wait_group 1) and releases that stage, so the tensor cores never drain between stages.
// k14: when a tile's last group retires, each consumer packs its accumulator to bf16 in
// registers (64 of them, freeing the 128 accumulators), issues the next tile's first group, and
// only then writes the packed tile out while the tensor cores work on that group.
// The entry point's kernels (gemm/bf16_sm90*) walk a work table of (tile, k range) units instead:
// a tile split over several CTAs (split-K, stream-K) is finished by whichever part ends last,
// which sums the parts in a fixed order (ReducePartials) before the epilogue.
#include <algorithm>
#include <bit>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "examples/gemm.h"
#include "examples/registry.h"
#include "kiln/pipeline.h"

namespace kiln::examples {
namespace {

constexpr int BK = 64, SLOTS = 128;
// The entry point's work tables (read from global memory, rows as long as the launch needs):
// at most this many units per CTA group (16383 waves of tiles).
constexpr int WORK_SLOTS = 1 << 14;

// The CTA tile (64 rows a consumer warpgroup), the ring's depth and the cluster (CTAs along M
// sharing B by multicast): k13/k14's 128x256, 4 and 2, or smaller tiles for the entry point's
// small-M shapes; and the entry point's variants: input type and fused epilogue (with the output
// type).
struct Shape {
  int bm = 128, bn = 256, stages = 4, cluster = 2;
  GemmVariant variant = {};
};

// Where the entry point's kernels load B with an L2 evict_first policy: where B is read by few
// rows of tiles (M <= 1024) and fills at most ~5 L2s (N * K <= 2^27 elements), so that its lines,
// read once or by a few CTAs side by side, make room before the lines that were in L2 at the
// start (a writer's dirty output), which would be written back. Measured on an H200 against the
// same kernels without it: 5-15% less time at M = 16-256 for B of 34-235 MB, neutral at M = 1024;
// 2-5% more at M = 4096 and 16384, where other rows of tiles read B again, and ~3% more where B
// is 470 MB (docs/PERF.md, "B's lines evicted first"). Elsewhere the copies carry no policy.
Value StreamsB(const TmaGemmOperands& g) { return (g.M <= 1024) & (g.K <= Operand(1 << 27) / g.N); }
// The same for A where it is the weights: C of few columns (N <= 128, A read by one or a few
// columns of tiles), M of 4096 or more (at 1024 and 2048 it measured no different) and A at most
// ~5 L2s. Measured on an H200 against the same kernels without it: 1-9% less time at M = 4096 to
// 28672, N = 2 to 128 (docs/PERF.md, "C of few columns"). Never where StreamsB holds (M <= 1024).
Value StreamsA(const TmaGemmOperands& g) {
  return (g.N <= 128) & (g.M >= 4096) & (g.K <= Operand(1 << 27) / g.M);
}

// `ragged`: any M, N, K (K a multiple of 8, and M where C goes through its map), through rank-2
// maps whose bounds zero-fill the loads and clip the stores (the entry point's gemm/bf16_sm90*).
absl::StatusOr<KernelDef> Build(const char* name, bool overlap_epilogue, bool ragged = false, Shape shape = {}) {
  const int BM = shape.bm, BN = shape.bn, STAGES = shape.stages, CLUSTER = shape.cluster, GROUPS = 128 / CLUSTER;
  const int CONSUMERS = BM / 64;
  // Columns of C per staged TMA store: the whole tile up to 128, else 128-column pieces, or two
  // halves where 128 does not divide it (160: two of 80).
  const int PIECE_N = BN <= 128 ? BN : BN % 128 == 0 ? 128 : BN / 2;
  const Scalar in = shape.variant.in, out = shape.variant.epilogue.out;
  // C stored from registers: f32 (stmatrix moves 16-bit elements), or where M is no multiple of 8
  // (C's map would need 16-byte column strides).
  const bool direct_out = out == f32 || shape.variant.any_m;
  // A tile with at most half its rows before M (the last row of tiles at M = 264, 320; every
  // 64-row tile at M <= 32) loads A in boxes of 16 rows, those before M only, or in a 128-row
  // tile with more than 32 rows before M one box of 64 (TmaGemmOperands::ACopies): TMA's zero
  // fill of the rows past M costs throughput, and so does each box issued (docs/PERF.md, "A's rows
  // past M" and "A's rows past M in the 128-row tiles").
  const int A_EDGE = ragged && !shape.variant.a_mn ? 16 : 0;
  Kernel k(name, sm90a(), {static_cast<unsigned>(128 * (1 + CONSUMERS))});
  TmaGemmOperands g = DeclareTmaGemm(k, {.bm = BM, .bn = BN, .bk = BK, .rank = ragged ? 2 : 3, .by_value = true,
                                          .c_box_rows = direct_out ? 0 : PIECE_N, .c_swizzle = !direct_out,
                                          .divide_m = BM * CLUSTER, .a_edge_rows = A_EDGE, .ragged = ragged,
                                          .in_type = ScalarName(in), .out_type = ScalarName(out),
                                          .epilogue = shape.variant.epilogue.Terms(),
                                          .a_mn = shape.variant.a_mn, .b_mn = shape.variant.b_mn});
  // The entry point's kernels walk a work table (whole tiles, split-K or stream-K, as the launch's
  // split says); a split tile's parts meet in the workspaces (ReducePartials).
  Value table, partials, counters;
  if (ragged) {
    k.I32Param("split");
    table = k.ScheduleTableParam("schedule", GemmWork(BM * CLUSTER, BN, BK, GROUPS, WORK_SLOTS));
    partials = k.WorkspaceParam("partials", f32, "schedule", int64_t{CLUSTER} * BM * BN * 4);
    counters = k.WorkspaceParam("counters", i32, "schedule", int64_t{CLUSTER} * CONSUMERS * 4);
  } else {
    table = k.ScheduleTableParam("schedule", GemmTiles(BM * CLUSTER, BN, GROUPS, SLOTS));
  }
  const EpilogueSpec& epi = shape.variant.epilogue;
  const Epilogue epilogue = Epilogue::Declare(k, epi, g.M, g.N, /*column_major=*/true);
  // A fused epilogue's loads (C_in, bias, residual) go out EPI_PAIRS pairs of a thread's
  // accumulators at a time, all before any is used: element by element, each waited on its own
  // round trip. As many pairs as the registers left beside the accumulator hold (ptxas gives each
  // thread 65536 / threads, at most 255; ~40 for the rest, ~8 a pair of loads and addresses): 16
  // pairs spilled in the 128x256 tiles and measured 1.1-1.3x their time (docs/PERF.md, "The fused
  // epilogue's loads together").
  const int regs = std::min(255, 65536 / (128 * (1 + CONSUMERS)) / 8 * 8);
  const int EPI_PAIRS = std::clamp(std::bit_floor(static_cast<unsigned>(std::max(regs - BN / 2 - 40, 0) / 8)), 4u, 32u);
  // Where a tile takes more than two such groups and C leaves through its map, C_in and the
  // residual come in the way C goes out: a piece at a time by TMA into the consumer's C staging
  // buffer, read back in the accumulator's order (ldmatrix.trans, the inverse of the stmatrix
  // that stages C), whole lines and no registers held for loads in flight. Measured (docs/PERF.md,
  // "C_in and residual through TMA"): 0.85-0.97 of the time in the 128x256 tiles, 0.95 in the
  // 128x160; 1.02-1.05 in tiles of one or two groups (64x128 at N = 128, 128x64 split in 4).
  const bool staged_inputs = ragged && !direct_out && (epi.scale || epi.residual) && 2 * EPI_PAIRS < BN / 4;
  TensorMap tm_c_in, tm_residual;
  if (staged_inputs) {
    auto like_c = [&](const char* tensor, const char* name) {
      rt::TensorMapParam spec = g.C.spec();
      spec.tensor = tensor;
      return k.TmaParam(name, spec);
    };
    if (epi.scale) tm_c_in = like_c("C_in", "tmC_in");
    if (epi.residual) tm_residual = like_c("residual", "tmResidual");
  }
  k.Grid("128");
  if (CLUSTER > 1) k.ClusterDims({static_cast<unsigned>(CLUSTER), 1, 1});
  SmemTile sA = k.SmemSwizzled(in, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(in, BN, BK, Swizzle::k128B, STAGES);
  SmemTile sC[2];  // [n][m], one per consumer
  if (!direct_out)
    for (int x = 0; x < CONSUMERS; ++x) sC[x] = k.SmemSwizzled(out, PIECE_N, 64, Swizzle::k128B);
  Barriers input_bars;  // per consumer: its staged C_in or residual piece has landed
  if (staged_inputs) input_bars = k.SmemBarriers(CONSUMERS);
  SmemTile last_flags;  // per consumer: whether its share of a split tile came last
  if (ragged) last_flags = k.Smem(i32, CONSUMERS, 1);
  Pipeline ring(k, STAGES, CONSUMERS, CLUSTER);
  std::function<void(const WorkUnitBody&)> work_walk;
  std::function<void(const TileIndexBody&)> tile_walk;
  if (ragged) work_walk = ScheduledWork(k, table, WORK_SLOTS);
  else tile_walk = ScheduledTiles(k, table, SLOTS);
  Value tid = k.ThreadIdx(), rank = CLUSTER > 1 ? k.ClusterCtaRank() : k.I32(0);
  // body(m0, n0, unit): this CTA's rows of each unit's tile; the whole-tile kernels' units have
  // no k range (the whole K) and no slot.
  std::function<void(const std::function<void(Value, Value, const WorkUnit&)>&)> for_each_unit;
  if (ragged)
    for_each_unit = [&](const auto& body) {
      work_walk([&](const WorkUnit& u) { body(u.m_index * (BM * CLUSTER) + rank * BM, u.n_index * BN, u); });
    };
  else
    for_each_unit = [&](const auto& body) {
      tile_walk([&](Value mi, Value ni) { body(mi * (BM * CLUSTER) + rank * BM, ni * BN, WorkUnit{}); });
    };
  k.If(tid == 0, [&] {
    if (ragged) g.PrefetchDescriptors(k);  // under the barriers' setup and the cluster's sync
    for (int x = 0; x < input_bars.size(); ++x) input_bars[x].Init(1);
    ring.Init();
  });
  if (CLUSTER > 1) k.ClusterSync();
  else k.SyncThreads();

  // Programmatic dependent launch (the entry point's kernels): the setup above overlaps the end of
  // the kernel before this one in the stream, which may still write what this one reads; each
  // role waits for it (WaitForPriorGrids) before it touches global memory, and the producer lets
  // the next kernel launch once it has asked for its last copy.
  if (ragged)
    MulticastProducer(k, ring, g, sA, sB, BK, rank, ForEachSpan([&](const SpanBody& body) {
                        for_each_unit([&](Value m0, Value n0, const WorkUnit& u) {
                          body(m0, n0, u.k_begin * BK, u.k_end * BK);
                        });
                      }), CLUSTER, k.L2Policy(CacheHint::kL2EvictFirst), StreamsB(g), StreamsA(g),
                      /*wait_prior_grids=*/true);
  else
    MulticastProducer(k, ring, g, sA, sB, BK, rank, ForEachTile([&](const TileBody& body) {
                        for_each_unit([&](Value m0, Value n0, const WorkUnit&) { body(m0, n0); });
                      }), CLUSTER);
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS, .max_regs = 240}, [&](Value t) {
    if (ragged) k.WaitForPriorGrids();
    Value c = t % 128, wg = t / 128, lane = c % 32, row0 = wg * 64;
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    Pipeline::Cursor at = ring.Start();
    Regs held = k.Registers(Type::Of(i32), 1);  // the stage the newest wgmma group reads
    auto mma = [&](bool first) {
      Value s = ring.Acquire(at);
      k.WgmmaFence();
      for (int kk = 0; kk < BK; kk += 16)
        k.Wgmma(acc, {sA.Stage(s), g.a_mn, BK}, row0, {sB.Stage(s), g.b_mn, BK}, 0, kk, /*scale_d=*/!(first && kk == 0));
      k.WgmmaCommit();
      return s;
    };
    Regs packed = k.Registers(Type::Of(i32), BN / 4);  // the tile to write, pairs of 16-bit elements
    Regs pending = k.Registers(Type::Of(i32), 3);        // {tile to write?, its m0, its n0}
    Regs input_phase;  // the parity input_bars[wg] completes next
    if (staged_inputs) {
      input_phase = k.Registers(Type::Of(i32), 1);
      input_phase[0] = k.I32(0);
    }
    auto write_out = [&] {
      for (int x = 0; x < CONSUMERS; ++x) k.If(wg == x, [&] {
        // Lane l addresses row (l % 8) + 8 * (l / 16) of matrix l / 8, transposed: n rows, m cols.
        Value n = lane % 8 + lane / 16 * 8, m = c / 32 * 16 + (lane & 8);
        for (int piece = 0; piece < BN / PIECE_N; ++piece) {
          k.If(c == 0, [&] { k.BulkWait(0, /*smem_reads_only=*/true); });  // buffer read out
          k.NamedBarrier(wg + 2, 128);
          for (int q = 0; q < PIECE_N / 16; ++q) {
            const int f = 4 * (piece * PIECE_N / 16 + q);
            k.StMatrix(sC[x].At(n + q * 16, m), {packed[f], packed[f + 1], packed[f + 2], packed[f + 3]},
                       /*trans=*/true);
          }
          k.FenceProxyAsync();
          k.NamedBarrier(wg + 2, 128);
          k.If(c == 0, [&] {
            k.TmaStore(g.C, sC[x], g.CBox(pending[1] + x * 64, pending[2] + piece * PIECE_N));
            k.BulkCommit();
          });
        }
      });
    };
    // The fused epilogue's loads (C_in, bias, residual) go out EPI_PAIRS pairs of elements at a
    // time, all before any is used (above).
    const bool fused = !epi.Plain();
    auto element_at = [&](Value m0, Value n0, int p, int e) {
      Value row = m0 + row0 + acc.Row(p), col = n0 + acc.Col(p) + e;
      return std::tuple{row, col, (row < g.M) & (col < g.N)};
    };
    // The bias of a tile's pairs, loaded once for the pairs that share it (a thread's two rows for
    // bias_row, each of its column pairs for bias_col), each load masked by its index alone.
    using BiasOfSlot = std::map<int, std::pair<Value, Value>>;
    auto bias_for = [&](BiasOfSlot& loaded, Value m0, Value n0, int p) -> std::pair<Value, Value> {
      if (epi.bias == BiasAxis::kNone) return {};
      const bool by_row = epi.bias == BiasAxis::kRow;
      const int slot = by_row ? WgmmaAccumulator::RowSlot(p) : WgmmaAccumulator::ColSlot(p);
      if (auto it = loaded.find(slot); it != loaded.end()) return it->second;
      auto bias_at = [&](int e) {
        auto [row, col, inside] = element_at(m0, n0, p, e);
        return epilogue.LoadBias(row, col);
      };
      Value b0 = bias_at(0), b1 = by_row ? b0 : bias_at(1);
      return loaded[slot] = {b0, b1};
    };
    auto in_groups = [&](Value m0, Value n0, const std::function<void(int, const Epilogue::Inputs*)>& body) {
      BiasOfSlot bias;
      for (int p0 = 0; p0 < BN / 4; p0 += EPI_PAIRS) {
        const int end = std::min(BN / 4, p0 + EPI_PAIRS);
        std::vector<Epilogue::Inputs> inputs;
        if (fused && !staged_inputs)
          for (int p = p0; p < end; ++p) {
            const auto [b0, b1] = bias_for(bias, m0, n0, p);
            for (int e = 0; e < 2; ++e) {
              auto [row, col, inside] = element_at(m0, n0, p, e);
              inputs.push_back(epilogue.LoadMatrices(row, col, inside));
              inputs.back().bias = e == 0 ? b0 : b1;
            }
          }
        for (int p = p0; p < end; ++p) body(p, inputs.empty() ? nullptr : &inputs[2 * (p - p0)]);
      }
    };
    auto store_direct = [&](Value m0, Value n0) {  // each element through the epilogue, where inside M x N
      in_groups(m0, n0, [&](int p, const Epilogue::Inputs* in) {
        for (int e = 0; e < 2; ++e) {
          auto [row, col, inside] = element_at(m0, n0, p, e);
          Value x = acc[2 * p + e];
          StoreGlobal(g.Cptr.At({row, col}), in ? epilogue.Output(x, in[e]) : x.To(out), {.mask = inside});
        }
      });
    };
    // The staged inputs: per piece, C_in's terms through the activation into the accumulator,
    // then the residual, each matrix's piece landing in sC[x] (free once the stores before have
    // read it and every thread its last ldmatrix).
    auto apply_staged = [&](Value m0, Value n0) {
      Value n = lane % 8 + lane / 16 * 8, m = c / 32 * 16 + (lane & 8);  // as write_out's stmatrix
      // The accumulator changes outside any branch on the warpgroup (inside one, ptxas spilled
      // 1.4 KB of it): only the copy's issue and the buffer's address depend on it.
      // (Both buffers 1024-byte aligned: the same swizzle at the same offset from either.)
      const int64_t next_buffer = CONSUMERS == 1 ? 0 : (sC[1].offset_bytes() - sC[0].offset_bytes()) / ScalarBytes(out);
      auto buffer_at = [&](int row) { return sC[0].At(n + row, m) + (wg * next_buffer).To(Scalar::kI64); };
      BiasOfSlot bias;
      for (int piece = 0; piece < BN / PIECE_N; ++piece) {
        auto stage = [&](const TensorMap& map) {
          // Every thread's ldmatrix reads of the buffer (the piece before) ordered before the
          // async proxy's write of the next box: without it the box may overtake a read (the
          // emulator's proxy check; on an H200 it did in gemm/bf16_tma16_sm90's ring).
          k.FenceProxyAsync();
          k.If(c == 0, [&] { k.BulkWait(0, /*smem_reads_only=*/true); });
          k.NamedBarrier(wg + 2, 128);
          k.If(c == 0, [&] {
            for (int x = 0; x < CONSUMERS; ++x) k.If(wg == x, [&] {
              input_bars[x].ArriveExpectTx({&map});
              k.TmaLoad(map, sC[x], input_bars[x], g.CBox(m0 + x * 64, n0 + piece * PIECE_N));
            });
          });
          input_bars[wg].Wait(input_phase[0]);
          input_phase[0] = input_phase[0] ^ 1;
        };
        // Pairs 4q .. 4q+3 of the piece: one ldmatrix.x4, each register a pair's two elements.
        auto each_pair = [&](const TensorMap* map, const std::function<void(int, Value, Value)>& body) {
          if (map) stage(*map);
          for (int q = 0; q < PIECE_N / 16; ++q) {
            std::vector<Value> words;
            if (map) words = k.LdMatrix(buffer_at(q * 16), 4, /*trans=*/true);
            for (int j = 0; j < 4; ++j) {
              Value v = map ? words[j].Bitcast(Type::Vec(out, 2)) : Value();
              body(4 * (piece * PIECE_N / 16 + q) + j, map ? v.Lane(0) : Value(), map ? v.Lane(1) : Value());
            }
          }
        };
        each_pair(epi.scale ? &tm_c_in : nullptr, [&](int p, Value c0, Value c1) {
          Epilogue::Inputs in0, in1;
          std::tie(in0.bias, in1.bias) = bias_for(bias, m0, n0, p);
          in0.c_in = c0, in1.c_in = c1;
          acc[2 * p] = epilogue.ApplyBeforeResidual(acc[2 * p], in0);
          acc[2 * p + 1] = epilogue.ApplyBeforeResidual(acc[2 * p + 1], in1);
        });
        if (epi.residual)
          each_pair(&tm_residual, [&](int p, Value r0, Value r1) {
            acc[2 * p] = epilogue.AddResidual(acc[2 * p], r0);
            acc[2 * p + 1] = epilogue.AddResidual(acc[2 * p + 1], r1);
          });
      }
    };
    auto pack = [&](Value m0, Value n0) {
      if (staged_inputs) apply_staged(m0, n0);
      in_groups(m0, n0, [&](int p, const Epilogue::Inputs* in) {
        Value x = acc[2 * p], y = acc[2 * p + 1];
        if (in) x = epilogue.Apply(x, in[0]), y = epilogue.Apply(y, in[1]);  // (none where staged)
        packed[p] = k.Vector({x.To(out), y.To(out)}).Bitcast(Type::Of(i32));
      });
      pending[0] = 1;
      pending[1] = m0;
      pending[2] = n0;
      if (!overlap_epilogue) write_out();
    };
    for_each_unit([&](Value m0, Value n0, const WorkUnit& u) {
      held[0] = mma(true);
      if (overlap_epilogue && !direct_out) k.If(pending[0] == 1, write_out);  // under the group just issued
      auto step = [&](Value) {
        Value s = mma(false);
        k.WgmmaWait(1);  // the previous group has retired: its stage is free
        ring.Release(held[0], c);
        held[0] = s;
      };
      if (ragged) k.For(u.k_begin * BK + BK, u.k_end * BK, BK, step);
      else k.For(BK, g.K, BK, step);
      k.WgmmaWait(0);
      ring.Release(held[0], c);
      auto finish = [&] {
        if (direct_out) store_direct(m0, n0);
        else pack(m0, n0);
      };
      if (!ragged) return finish();
      // A split tile's share: only the part that completes it writes C.
      Regs writes = k.Registers(Type::Of(i32), 1);
      writes[0] = k.I32(1);
      k.If(u.slot != -1, [&] {
        Value last = ReducePartials(k, acc.regs(), BN / 2, u, partials, counters, rank * CONSUMERS + wg,
                                    CLUSTER * CONSUMERS, c, 128, wg + 4, last_flags.At(wg, 0),
                                    [&](int r) { return m0 + row0 + acc.Row(r / 2) < g.M; });
        writes[0] = Select(last, k.I32(1), k.I32(0));
      });
      k.If(writes[0] == 1, finish, [&] { pending[0] = 0; });
    });
    if (overlap_epilogue && !direct_out) k.If(pending[0] == 1, write_out);
    k.If(c == 0, [&] { k.BulkWait(0); });
  });
  if (CLUSTER > 1) k.ClusterSync();  // the peer may still arrive on our barriers: stay until it is done
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(k13, "hopper/k13", "kiln: k12 with a 4-stage ring, wgmma groups in flight across stages, swizzled C pieces",
                     [] { return Build("hopper/k13", false); });
KILN_EXAMPLE_VARIANT(k14, "hopper/k14", "kiln: k13 with the epilogue overlapped with the next tile's first wgmma group",
                     [] { return Build("hopper/k14", true); });
namespace {

// The entry point's kernels (the GEMM entry point picks one per shape: ops/gemm/gemm_choice.cc),
// each registered by name and as a family of types and fused epilogues.
struct EntryKernel {
  const char* name;
  const char* summary;
  Shape shape;
};
const EntryKernel kEntryKernels[] = {
    {"gemm/bf16_sm90",
     "the GEMM entry point's Hopper kernel: k14 at any M, N, K (M, K multiples of 8), edges by TMA bounds; whole "
     "tiles, split-K or stream-K as the launch's split says",
     {}},
    {"gemm/bf16_sm90_n128", "the entry point's kernel for shapes with few 256x256 tiles: 128x128 CTA tiles, no cluster, 6 stages",
     {.bn = 128, .stages = 6, .cluster = 1}},
    {"gemm/bf16_sm90_m64",
     "the entry point's kernel for M <= 64, where the weight read bounds the time: 64x128 tiles, one consumer "
     "warpgroup, 8 stages",
     {.bm = 64, .bn = 128, .stages = 8, .cluster = 1}},
    {"gemm/bf16_sm90_n64", "the entry point's kernel for narrow deep shapes: 128x64 tiles, no cluster, 8 stages",
     {.bn = 64, .stages = 8, .cluster = 1}},
    {"gemm/bf16_sm90_n80",
     "the entry point's kernel for 128-row problems whose N splits into 128 columns of 80: 128x80 tiles, no cluster, "
     "7 stages",
     {.bn = 80, .stages = 7, .cluster = 1}},
    {"gemm/bf16_sm90_n96",
     "the entry point's kernel for problems whose tiles of 96 columns fill the GPU: 128x96 tiles, no cluster, 7 stages",
     {.bn = 96, .stages = 7, .cluster = 1}},
    {"gemm/bf16_sm90_n160",
     "the entry point's kernel for 256-row problems whose N splits into 64 columns of 160: 128x160 CTA tiles in "
     "pairs sharing B (256x160), 5 stages",
     {.bn = 160, .stages = 5, .cluster = 2}},
    {"gemm/bf16_sm90_m64n64",
     "the entry point's kernel for M <= 128 with 4096-wide weights, where their read bounds the time: 64x64 CTA "
     "tiles in pairs sharing B (128x64), one consumer warpgroup, 13 stages",
     {.bm = 64, .bn = 64, .stages = 13, .cluster = 2}},
    // For M <= 64, tiles narrow enough that 128 of them cover N (4096, 6144, 10240), so that every
    // CTA streams the weights; each with a ring as deep as the shared memory holds.
    {"gemm/bf16_sm90_m64n32",
     "the entry point's kernel for M <= 64 where N is about 4096: 64x32 tiles, one consumer warpgroup, 17 stages",
     {.bm = 64, .bn = 32, .stages = 17, .cluster = 1}},
    {"gemm/bf16_sm90_m64n48",
     "the entry point's kernel for M <= 64 where N is about 6144: 64x48 tiles, one consumer warpgroup, 15 stages",
     {.bm = 64, .bn = 48, .stages = 15, .cluster = 1}},
    {"gemm/bf16_sm90_m64n16",
     "the entry point's kernel for a C of 16 columns or fewer whose A is the weights: 64x16 tiles, one consumer "
     "warpgroup, 22 stages",
     {.bm = 64, .bn = 16, .stages = 22, .cluster = 1}},
    {"gemm/bf16_sm90_m64n80",
     "the entry point's kernel for M <= 64 where N is 10240 or more: 64x80 tiles, one consumer warpgroup, 11 stages",
     {.bm = 64, .bn = 80, .stages = 11, .cluster = 1}},
};

// The same kernels with other element types and fused epilogues, by name (gemm/bf16_sm90.f16-f32.gelu).
// MN-major operands are read in 64-wide blocks of M and N: tiles of 80, 96 or 160 columns take
// K-major ones only (the name says so at build time, and the entry point does not pick them).
ExampleFamily Family(const char* base, Shape shape) {
  ExampleFamily f = GemmFamily(base, "the entry point's kernel with other types and a fused epilogue", /*tile=*/true,
                               [shape](const std::string& name, const GemmVariant& v) -> absl::StatusOr<KernelDef> {
                                 if ((v.a_mn || v.b_mn) && shape.bn % 64)
                                   return absl::InvalidArgumentError(absl::StrCat(
                                       name, ": MN-major operands need tiles of whole 64-wide blocks, not ", shape.bn,
                                       " columns"));
                                 Shape s = shape;
                                 s.variant = v;
                                 return Build(name.c_str(), true, /*ragged=*/true, s);
                               });
  if (shape.bn % 64)
    std::erase_if(f.bundled, [](const std::string& v) { return v.find("_mn") != std::string::npos; });
  return f;
}

const bool kEntryKernelsRegistered = [] {
  for (const EntryKernel& e : kEntryKernels) {
    const Shape shape = e.shape;
    const char* name = e.name;
    Register({name, e.summary, [name, shape] { return Build(name, true, /*ragged=*/true, shape); }});
    RegisterFamily(Family(name, shape));
  }
  return true;
}();

}  // namespace
}  // namespace kiln::examples
