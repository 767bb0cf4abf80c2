#include "examples/ops/row_kernel.h"

#include <iterator>

namespace kiln::examples::ops {
namespace {

// `threads` per row, the rows that fit side by side, in turn until the block's rows are done.
void Layout(Kernel& k, const Value& rows, int threads, int chunks,
            const std::function<void(const RowCtx&)>& body, const Loc& loc) {
  const int side_by_side = kBlockThreads / threads;
  Value tid = k.ThreadIdx(0, loc);
  Value first = Operand(Operand(k.BlockIdx(0, loc), loc) * Operand(kRowsPerBlock, loc), loc) +
                Operand(Operand(tid, loc) / Operand(threads, loc), loc);
  Value t = Operand(tid, loc) % Operand(threads, loc);
  auto one = [&](const Value& row) {
    RowCtx r{row, t, threads, chunks};
    k.If(
        Operand(row, loc) < Operand(rows, loc), [&] { body(r); }, loc);
  };
  if (side_by_side == kRowsPerBlock) return one(first);
  k.For(
      0, kRowsPerBlock, side_by_side, [&](Value i) { one(Operand(first, loc) + Operand(i, loc)); },
      loc);
}

}  // namespace

void ForEachRow(Kernel& k, const Value& rows, const Value& cols,
                const std::function<void(const RowCtx&)>& fast,
                const std::function<void(const RowCtx&)>& general, Loc loc) {
  struct Shape {
    int max_cols, threads, chunks;
  };
  static constexpr Shape kShapes[] = {{256, 32, 1},   {512, 32, 2},   {1024, 32, 4},  {2048, 64, 4},
                                      {4096, 128, 4}, {8192, 256, 4}, {16384, 512, 4}};
  // The first shape whose rows reach cols; past the last, the general body.
  auto loop = [&] { Layout(k, rows, 32, 0, general, loc); };
  std::function<void(int)> from = [&](int i) {
    if (i == static_cast<int>(std::size(kShapes))) return loop();
    const Shape& l = kShapes[i];
    k.If(
        Operand(cols, loc) <= Operand(l.max_cols, loc),
        [&] { Layout(k, rows, l.threads, l.chunks, fast, loc); }, [&] { from(i + 1); }, loc);
  };
  Value vectorized = Operand(Operand(cols, loc) % Operand(kVec, loc), loc) == Operand(0, loc);
  k.If(
      vectorized, [&] { from(0); }, loop, loc);
}

namespace {
// Elements of `row_ptr`'s type in one 16-byte access (8 bf16 or f16, 4 f32): a chunk is one
// access or two.
int LanesPerAccess(const Value& row_ptr) { return 16 / ScalarBytes(row_ptr.type().elem); }

// The first column of this thread's access j of chunk c (RowRegs: the chunk's accesses are
// threads * lanes columns apart).
Value AccessColumn(const RowCtx& r, int c, int j, int lanes, const Loc& loc) {
  const int accesses = kVec / lanes;
  return (Operand(r.t, loc) + Operand((c * accesses + j) * r.threads, loc)) * Operand(lanes, loc);
}
}  // namespace

RowRegs LoadChunk(const Value& row_ptr, const RowCtx& r, const Value& cols, int c, double fill,
                  CacheHint hint, Loc loc) {
  RowRegs regs;
  const int lanes = LanesPerAccess(row_ptr);
  regs.per_access = lanes;
  for (int j = 0; j < kVec / lanes; ++j) {
    Value col = AccessColumn(r, c, j, lanes, loc);
    Value in = Operand(col, loc) < Operand(cols, loc);
    Value v = LoadGlobal(Operand(row_ptr, loc) + Operand(col, loc), lanes,
                         {.cache = hint, .mask = in, .fill = fill}, loc);
    for (int e = 0; e < lanes; ++e) regs.x.push_back(v.Lane(e, loc).To(f32, loc));
    regs.in.push_back(in);
  }
  return regs;
}

RowRegs LoadRow(const Value& row_ptr, const RowCtx& r, const Value& cols, double fill,
                CacheHint hint, Loc loc) {
  RowRegs regs;
  regs.per_access = LanesPerAccess(row_ptr);
  for (int c = 0; c < r.chunks; ++c) {
    RowRegs one = LoadChunk(row_ptr, r, cols, c, fill, hint, loc);
    regs.x.insert(regs.x.end(), one.x.begin(), one.x.end());
    regs.in.insert(regs.in.end(), one.in.begin(), one.in.end());
  }
  return regs;
}

void StoreChunk(Kernel& k, const Value& row_ptr, const RowCtx& r, int c,
                const std::vector<Value>& in, const std::vector<Value>& y8, Loc loc) {
  const Scalar type = row_ptr.type().elem;
  std::vector<Value> lanes;
  for (int e = 0; e < kVec; e += 2) {
    if (type == f32) {
      lanes.push_back(y8[e]);
      lanes.push_back(y8[e + 1]);
      continue;
    }
    Value pair = type == f16 ? PackF16x2(y8[e], y8[e + 1], loc) : PackBf16x2(y8[e], y8[e + 1], loc);
    lanes.push_back(pair.Lane(0, loc));
    lanes.push_back(pair.Lane(1, loc));
  }
  const int per_access = LanesPerAccess(row_ptr);
  for (int j = 0; j < kVec / per_access; ++j) {
    const int first = j * per_access;
    // The output is not read again here: .cs keeps it from displacing the input in L2.
    StoreGlobal(
        Operand(row_ptr, loc) + Operand(AccessColumn(r, c, j, per_access, loc), loc),
        k.Vector(std::vector<Value>(lanes.begin() + first, lanes.begin() + first + per_access),
                 loc),
        {.cache = CacheHint::kStreaming, .mask = in[j]}, loc);
  }
}

void StoreRow(Kernel& k, const Value& row_ptr, const RowCtx& r, const RowRegs& like,
              const std::vector<Value>& y, Loc loc) {
  for (int c = 0; c < r.chunks; ++c)
    StoreChunk(k, row_ptr, r, c, like.ChunkIn(c),
               std::vector<Value>(y.begin() + c * kVec, y.begin() + (c + 1) * kVec), loc);
}

void ForEachColumn(Kernel& k, const RowCtx& r, const Value& cols,
                   const std::function<void(Value col)>& body, Loc loc) {
  k.For(r.t, cols, r.threads, body, loc);
}

std::string RowKernelName(const std::string& base, Scalar type) {
  return base + (type == f16 ? ".f16" : type == f32 ? ".f32" : "");
}

Value SumOf(std::vector<Value> v, Loc loc) {
  while (v.size() > 1) {
    std::vector<Value> next;
    for (size_t i = 0; i + 1 < v.size(); i += 2)
      next.push_back(Operand(v[i], loc) + Operand(v[i + 1], loc));
    if (v.size() % 2) next.push_back(v.back());
    v = std::move(next);
  }
  return v[0];
}

}  // namespace kiln::examples::ops
