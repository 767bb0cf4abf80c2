// Shuffles and reductions across lanes, warps and warp groups (kiln/warp.h).
#include "kiln/warp.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "kiln/kernel.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {

bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

const char* ModeName(ShflMode m) {
  switch (m) {
    case ShflMode::kIdx:
      return "idx";
    case ShflMode::kUp:
      return "up";
    case ShflMode::kDown:
      return "down";
    case ShflMode::kXor:
      return "bfly";
  }
  return "?";
}

bool CheckReducible(KernelState& s, const Value& v, const char* op, const Loc& loc) {
  const Type& t = v.type();
  if (t == Type::Of(Scalar::kF32) || t == Type::Of(Scalar::kI32)) return true;
  s.Fail(absl::StrCat(op, " reduces f32 or i32 values, not ", t.Str()), loc);
  return false;
}

Value Combine(Reduce op, const Value& a, const Value& b, const Loc& loc) {
  switch (op) {
    case Reduce::kSum:
      return Operand(a, loc) + Operand(b, loc);
    case Reduce::kMax:
      return Max(Operand(a, loc), Operand(b, loc));
    case Reduce::kMin:
      return Min(Operand(a, loc), Operand(b, loc));
  }
  return a;
}

// The value x with x op v == v for every v.
double Identity(Reduce op, const Type& t) {
  const bool f = t.IsFloat();
  switch (op) {
    case Reduce::kSum:
      return 0;
    case Reduce::kMax:
      return f ? -std::numeric_limits<double>::infinity() : 0;
    case Reduce::kMin:
      return f ? std::numeric_limits<double>::infinity() : 4294967295.0;
  }
  return 0;
}

}  // namespace

Value Shfl(ShflMode mode, const Value& v, const Operand& src, int width, Loc loc) {
  KernelState* s = Access::State(v);
  if (!s) return v;
  const Type t = v.type();
  if (t.Bytes() != 4 || t.kind == Type::Kind::kPointer) {
    s->Fail(absl::StrCat("Shfl moves 32-bit values, not ", t.Str()), loc);
    return s->Poison(t, loc);
  }
  if (!IsPowerOfTwo(width) || width > 32) {
    s->Fail(absl::StrCat("Shfl width is a power of two up to 32, not ", width), loc);
    return s->Poison(t, loc);
  }
  if (!Access::IsImm(src) && Access::Val(src).valid() &&
      Access::Val(src).type() != Type::Of(Scalar::kI32)) {
    s->Fail(absl::StrCat("Shfl's lane, distance or mask is an i32, not ",
                         Access::Val(src).type().Str()),
            loc);
    return s->Poison(t, loc);
  }
  // A constant lane, distance or mask: shfl reads its low 5 bits only (33 would act as 1), a
  // distance of the width or more leaves every lane its own value, and a mask of the width or
  // more reaches across the segments (PTX ISA, shfl.sync): a mistake, not a move.
  if (Access::IsImm(src)) {
    const int64_t b = static_cast<int64_t>(Access::Imm(src));
    const int64_t limit = mode == ShflMode::kIdx ? 32 : width;
    const char* what = mode == ShflMode::kIdx   ? "lane"
                       : mode == ShflMode::kXor ? "mask"
                                                : "distance";
    if (b < 0 || b >= limit) {
      const std::string why =
          b < 0 || b >= 32 ? "shfl reads only its low 5 bits"
          : mode == ShflMode::kXor
              ? absl::StrCat("width ", width, ": it would reach lanes of another segment")
              : absl::StrCat("width ", width, ": every lane would keep its own value");
      s->Fail(
          absl::StrCat("Shfl's ", what, " ", b, " lies outside 0 to ", limit - 1, " (", why, ")"),
          loc);
      return s->Poison(t, loc);
    }
  }
  // The c operand (PTX ISA, shfl.sync): the segment mask in bits 8..12 and the clamp lane in
  // bits 0..4 (the segment's last lane; for up, its first).
  const int segment = (32 - width) << 8;
  const int c = mode == ShflMode::kUp ? segment : segment | 0x1f;
  const Type i32 = Type::Of(Scalar::kI32);
  mlir::Location l = s->ToLoc(loc);
  mlir::Value bits = s->Unwrap(t == i32 ? v : v.Bitcast(i32, loc), loc);
  // A constant source is written into the instruction (shfl takes an immediate b).
  const bool imm = Access::IsImm(src);
  const std::string b = imm ? absl::StrCat(static_cast<int>(Access::Imm(src))) : "$2";
  std::vector<mlir::Value> operands = {bits};
  if (!imm) operands.push_back(s->Materialize(src, i32));
  mlir::Value out =
      s->InlineAsm(absl::StrCat("shfl.sync.", ModeName(mode), ".b32 $0, $1, ", b, ", ", c, ", -1;"),
                   imm ? "=r,r" : "=r,r,r", operands, s->builder.getI32Type(), l);
  Value r = s->Wrap(out, i32);
  return t == i32 ? r : r.Bitcast(t, loc);
}

Value WarpReduce(const Value& v, Reduce op, int width, Loc loc) {
  KernelState* s = Access::State(v);
  if (!s) return v;
  if (!CheckReducible(*s, v, "WarpReduce", loc)) return s->Poison(v.type(), loc);
  if (!IsPowerOfTwo(width) || width > 32) {
    s->Fail(absl::StrCat("WarpReduce width is a power of two up to 32, not ", width), loc);
    return s->Poison(v.type(), loc);
  }
  Value acc = v;
  for (int mask = width / 2; mask >= 1; mask /= 2)
    acc = Combine(op, acc, ShflXor(acc, mask, width, loc), loc);
  return acc;
}

Value ReduxSync(const Value& v, Reduce op, Loc loc) {
  KernelState* s = Access::State(v);
  if (!s) return v;
  const Type i32 = Type::Of(Scalar::kI32);
  if (v.type() != i32) {
    s->Fail(absl::StrCat("ReduxSync reduces i32 values (redux.sync.*.u32), not ", v.type().Str()),
            loc);
    return s->Poison(v.type(), loc);
  }
  if (s->target.compute_capability < 80) {
    s->Fail(absl::StrCat("redux.sync needs sm_80 or later, not ", s->target.chip), loc);
    return s->Poison(i32, loc);
  }
  const char* name = op == Reduce::kSum ? "add" : op == Reduce::kMax ? "max" : "min";
  return s->Wrap(s->InlineAsm(absl::StrCat("redux.sync.", name, ".u32 $0, $1, -1;"), "=r,r",
                              {s->Unwrap(v, loc)}, s->builder.getI32Type(), s->ToLoc(loc)),
                 i32);
}

std::vector<Value> GroupReduce(Kernel& k, const std::vector<Value>& vs, Reduce op, int threads,
                               Loc loc) {
  KernelState& s = *Access::State(k);
  if (vs.empty()) return {};
  for (const Value& v : vs)
    if (!Access::State(v)) return vs;
  auto poisoned = [&] {
    std::vector<Value> out;
    for (const Value& v : vs) out.push_back(s.Poison(v.type(), loc));
    return out;
  };
  for (const Value& v : vs) {
    if (Access::State(v) != &s) {
      s.Fail("GroupReduce of a value another kernel made", loc);
      return poisoned();
    }
    if (!CheckReducible(s, v, "GroupReduce", loc)) return poisoned();
    if (v.type() != vs.front().type()) {
      s.Fail(absl::StrCat("GroupReduce of values of one type, not ", vs.front().type().Str(),
                          " and ", v.type().Str()),
             loc);
      return poisoned();
    }
  }
  const int block = static_cast<int>(s.manifest.block.count());
  if (threads == 0) threads = block;
  if (threads % 32 != 0 || block % threads != 0 || block % 32 != 0) {
    s.Fail(absl::StrCat("GroupReduce over groups of ", threads,
                        " threads: a group is whole warps and ", "the block (", block,
                        " threads) is whole groups"),
           loc);
    return poisoned();
  }
  std::vector<Value> out;
  if (threads == 32) {  // a warp needs no barrier
    for (const Value& v : vs) out.push_back(WarpReduce(v, op, 32, loc));
    return out;
  }
  const int groups = block / threads;
  // Barrier ids: reused by every call with this group size (the same groups meet there in
  // order), never shared with another size, whose groups would arrive with another count.
  int first_id = 0;
  if (groups > 1) {
    auto [it, fresh] = s.group_barrier_base.try_emplace(threads, s.next_group_barrier);
    if (fresh && it->second + groups > 16) {
      s.Fail(absl::StrCat("GroupReduce: ", groups, " groups of ", threads, " threads need ", groups,
                          " named barriers of their own; the kernel's other group sizes hold ",
                          it->second - 1, " of a block's 15 (ids 1..15)"),
             loc);
      s.group_barrier_base.erase(it);
      return poisoned();
    }
    if (fresh) s.next_group_barrier += groups;
    first_id = it->second;
  }
  std::vector<Value> partial;
  for (const Value& v : vs) partial.push_back(WarpReduce(v, op, 32, loc));
  const Type t = vs.front().type();
  const int n = static_cast<int>(vs.size()), group_warps = threads / 32;
  SmemTile slots = k.Smem(t.elem, n, block / 32, /*pad=*/0, /*align=*/16, loc);  // a row a value
  Value warp = k.WarpId(loc), lane = k.LaneId(loc);
  Value group = Operand(warp, loc) / Operand(group_warps, loc);
  auto sync = [&] {
    if (groups == 1) return k.SyncThreads(loc);
    k.NamedBarrier(Operand(group, loc) + Operand(first_id, loc), threads, loc);
  };
  sync();  // the previous use of these slots (a loop) has been read by every warp of the group
  k.If(
      Operand(lane, loc) == Operand(0, loc),
      [&] {
        for (int i = 0; i < n; ++i) k.Store(slots.At(i, warp, loc), partial[i], loc);
      },
      loc);
  sync();
  const Value first = Operand(group, loc) * Operand(group_warps, loc);
  if (group_warps <= 4) {  // a few broadcast loads beat five shuffles
    for (int i = 0; i < n; ++i) {
      Value acc = k.Load(slots.At(i, first, loc), 1, loc);
      for (int w = 1; w < group_warps; ++w)
        acc = Combine(op, acc,
                      k.Load(slots.At(i, Operand(first, loc) + Operand(w, loc), loc), 1, loc), loc);
      out.push_back(acc);
    }
    return out;
  }
  // Lane i of each warp reads the group's warp i; then a warp reduction over the lanes.
  const Value column =
      Operand(first, loc) + Operand(Min(Operand(lane, loc), Operand(group_warps - 1, loc)), loc);
  std::vector<Value> mine;
  for (int i = 0; i < n; ++i) mine.push_back(k.Load(slots.At(i, column, loc), 1, loc));
  const double id = Identity(op, t);
  Value in_group = Operand(lane, loc) < Operand(group_warps, loc);
  for (int i = 0; i < n; ++i) {
    Value masked = t.IsFloat()
                       ? Select(Operand(in_group, loc), Operand(mine[i], loc), Operand(id, loc))
                       : Select(Operand(in_group, loc), Operand(mine[i], loc),
                                Operand(static_cast<int>(static_cast<uint32_t>(id)), loc));
    out.push_back(WarpReduce(masked, op, 32, loc));
  }
  return out;
}

Value GroupReduce(Kernel& k, const Value& v, Reduce op, int threads, Loc loc) {
  if (!Access::State(v)) return v;
  return GroupReduce(k, std::vector<Value>{v}, op, threads, loc).front();
}

}  // namespace kiln
