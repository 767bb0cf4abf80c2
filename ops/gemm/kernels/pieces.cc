#include "ops/gemm/kernels/pieces.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kiln/bundle/schedule.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {

ScheduleTable GemmWork(int tile_m, int tile_n, int bk, int groups, int slots) {
  return {absl::StrCat("M/", tile_m),
          absl::StrCat("N/", tile_n),
          groups,
          slots,
          absl::StrCat("K/", bk),
          "split"};
}

std::function<void(const WorkUnitBody&)> ScheduledWork(Kernel& k, const Value& table, int slots) {
  const int words = rt::kWorkWords;
  return [&k, table, slots](const WorkUnitBody& body) {
    GlobalTensor flat(table, {}, {k.I32(1)});
    Value row = Min(k.Load(flat.At({k.I32(0)})), slots);  // the header: slots in each group's row
    Value first = (k.ClusterIdx() * row + 1) * words;     // this cluster's row, past the header
    // Entry `slot` into w; past the row, the end mark (every row ends with one anyway).
    Regs it = k.Registers(Type::Of(i32), 1), w = k.Registers(Type::Of(i32), words);
    auto fetch = [&](const Value& slot) {
      Value inside = slot < row, at = first + Min(slot, row - 1) * words;
      for (int j = 0; j < words; ++j)
        w[j] = LoadGlobal(flat.At({at + j}), 1, {.mask = inside, .fill = -1});
    };
    it[0] = k.I32(0);
    fetch(k.I32(0));
    k.While([&] { return Value(w[0]) != -1; },
            [&] {
              Value tile = w[0], ks = w[1], first_slot = w[2], part = w[3];
              it[0] += 1;
              fetch(it[0]);  // the next entry's load is under this unit's work
              body({tile >> 16, tile & 0xffff, ks >> 16, ks & 0xffff, first_slot, part >> 16,
                    part & 0xffff});
            });
  };
}

void StepMmas(Kernel& k, Scalar in, const Value& b_lo, const Value& b_hi,
              const std::vector<Value>& a, const Regs& acc) {
  for (int h = 0; h < 2; ++h) {
    // B^T's rows quad and quad+8 at slots (2t, 2t+1) then (2t+8, 2t+9): words 2h, 2h+1.
    std::vector<Value> bt = {b_lo.Lane(2 * h), b_hi.Lane(2 * h), b_lo.Lane(2 * h + 1),
                             b_hi.Lane(2 * h + 1)};
    for (size_t g = 0; g < a.size(); ++g) {
      auto d = k.MmaM16N8K16(in, bt, {a[g].Lane(2 * h), a[g].Lane(2 * h + 1)},
                             {acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3]});
      for (int i = 0; i < 4; ++i) acc[4 * g + i] = d[i];
    }
  }
}

void StoreStepSums(Kernel& k, const SmemTile& partial, const Value& warp, const Value& lane,
                   int groups, int rows, const Regs& acc) {
  Value quad = lane / 4, t = lane % 4;
  for (int g = 0; g < groups; ++g)
    for (int i = 0; i < 4; ++i) {
      Value n = quad + 8 * (i / 2), m = 8 * g + t * 2 + i % 2;
      k.Store(partial.At(warp, n * rows + m), acc[4 * g + i]);
    }
}

namespace {
// A rank-2 map of a packed 16-bit operand: `inner` elements a row (contiguous), `outer` rows.
rt::TensorMapParam PackedMap(const std::string& operand, Scalar in, const std::string& inner,
                             const std::string& outer, int box_inner, int box_outer,
                             rt::TmaSwizzle swizzle) {
  rt::TensorMapParam t;
  t.tensor = operand;
  t.dtype = in == f16 ? rt::TmaDtype::kF16 : rt::TmaDtype::kBF16;
  t.dims = {inner, outer};  // a rule that does not parse fails at the TmaParam using it
  t.strides = {inner + "*2"};
  t.box = {static_cast<uint32_t>(box_inner), static_cast<uint32_t>(box_outer)};
  t.swizzle = swizzle;
  return t;
}
}  // namespace

rt::TensorMapParam PackedKMajorMap(const std::string& operand, const std::string& rows, Scalar in,
                                   int box_k, int box_rows, rt::TmaSwizzle swizzle) {
  return PackedMap(operand, in, "K", rows, box_k, box_rows, swizzle);
}

rt::TensorMapParam PackedMnMajorMap(const std::string& operand, const std::string& rows, Scalar in,
                                    int box_k, int box_rows, rt::TmaSwizzle swizzle) {
  return PackedMap(operand, in, rows, "K", box_rows, box_k, swizzle);
}

void StoreSumOfWarps(Kernel& k, const SmemTile& partial, int warps, const Value& slot,
                     const Value& row, const Value& col, const GemmOperands& g,
                     const Epilogue& epilogue) {
  Regs total = k.Registers(Type::Of(f32), 1);
  total[0] = k.F32(0);
  for (int w = 0; w < warps; ++w) total[0] = Value(total[0]) + k.Load(partial.At(w, slot));
  Value inside = (row < g.M) & (col < g.N);
  k.If(inside, [&] { k.Store(g.C.At({row, col}), epilogue.Output(total[0], row, col, inside)); });
}

namespace {
// Into `acc`, a node's children in their order, this thread's own (child `mine`, in `acc`) in its
// place: the loads of a chunk's other children go out together, so a node costs (children - 1)
// round trips a chunk. `at(part, r)` is register r of the partial in part's slot.
void SumChildrenInOrder(Kernel& k, const Regs& acc, int regs,
                        const std::function<Value(const Value&, int)>& at,
                        const std::function<Value(int)>& mask, const Value& start,
                        const Value& child, const Value& mine, const Value& children) {
  constexpr int kChunk = 32;  // registers summed at once: few beyond the accumulator's
  for (int r0 = 0; r0 < regs; r0 += kChunk) {
    const int n = std::min(kChunk, regs - r0);
    Regs sum = k.Registers(Type::Of(f32), n);
    for (int j = 0; j < n; ++j) sum[j] = k.F32(0);
    auto add_children = [&](const Operand& from, const Operand& to) {
      k.For(from, to, 1, [&](Value c) {
        for (int j = 0; j < n; ++j)
          sum[j] =
              Value(sum[j]) + LoadGlobal(at(start + c * child, r0 + j), 1, {.mask = mask(r0 + j)});
      });
    };
    add_children(0, mine);
    for (int j = 0; j < n; ++j) sum[j] = Value(sum[j]) + acc[r0 + j];
    add_children(mine + 1, children);
    for (int j = 0; j < n; ++j) acc[r0 + j] = sum[j];
  }
}
}  // namespace

Value ReducePartials(Kernel& k, const Regs& acc, int regs, const WorkUnit& u, const Value& partials,
                     const Value& counters, const Value& share, int shares, const Value& thread,
                     int threads, const Operand& barrier, const Value& flag,
                     const std::function<Value(int)>& live) {
  // [slot * shares + share][register][thread]: each register's store is one coalesced row.
  GlobalTensor ws(partials, {}, {k.I32(regs * threads), k.I32(threads), k.I32(1)});
  GlobalTensor count(counters, {}, {k.I32(1)});
  auto at = [&](const Value& part, int r) {
    return ws.At({(u.slot + part) * shares + share, k.I32(r), thread});
  };
  auto mask = [&](int r) { return live ? live(r) : Value(); };  // none: every register
  // The parts meet in a tree of up to kPartsSummedAtOnce children a node, so the part that ends
  // last reads a few partials a level over a few levels rather than every other part's
  // (docs/perf/2026-12-03-split-partials-in-a-tree.md). A node of `span`-part children starting
  // at part `start` holds its sum in slot `start` and counts its children at slot start + span
  // (which no other node's count uses); its children are added in their order, so the sum is
  // the same whichever part carries it. Up to kPartsSummedAtOnce parts, one node: the sum in part
  // order.
  Regs carrying = k.Registers(Type::Of(i32), 1), span = k.Registers(Type::Of(i32), 1);
  carrying[0] = k.I32(1);
  span[0] = k.I32(1);
  auto level = [&] {
    Value child = span[0], width = child * rt::kPartsSummedAtOnce;
    Value start = u.part / width * width, mine = (u.part - start) / child;
    Value children = Min(rt::kPartsSummedAtOnce, (u.parts - start + child - 1) / child);
    k.If(children > 1, [&] {  // (a node of one child passes it up as it is)
      for (int r = 0; r < regs; ++r)
        StoreGlobal(at(start + mine * child, r), acc[r], {.mask = mask(r)});
      k.FenceGpu();  // the partial is out before the count says so
      k.NamedBarrier(barrier, threads);
      k.If(thread == 0, [&] {
        Value counter = count.At({(u.slot + start + child) * shares + share});
        Value last = AtomicAdd(counter, 1) == children - 1;
        k.If(last, [&] { k.Store(counter, k.I32(0)); });  // ready for the next launch
        k.Store(flag, Select(last, k.I32(1), k.I32(0)));
      });
      k.NamedBarrier(barrier, threads);
      Value last = k.Load(flag) == 1;
      carrying[0] = Select(last, k.I32(1), k.I32(0));
      k.If(last, [&] {
        // The other children's partials, seen through their count, are read after this fence.
        k.FenceGpu();
        SumChildrenInOrder(k, acc, regs, at, mask, start, child, mine, children);
      });
    });
    span[0] = child * rt::kPartsSummedAtOnce;
  };
  k.While([&] { return (Value(carrying[0]) == 1) & (Value(span[0]) < u.parts); }, level);
  return Value(carrying[0]) == 1;
}

}  // namespace kiln::examples
