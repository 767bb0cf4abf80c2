// The glue of a transformer layer between kiln's GEMMs, norms and attention, one element (or one
// rotated pair) per thread, bf16 in and out:
// - ops/rope_qkv: a fused QKV projection's rows [T, (Hq + 2 Hkv) * D] (T = B * S tokens, each
//   row Hq query heads, then Hkv key heads, then Hkv value heads) into q [B, Hq, S, D], k and v
//   [B, Hkv, S, D], the layout attention reads, with rotary embeddings applied to q and k in the
//   same pass: pair (x_i, x_{i+D/2}) at position s becomes (x_i c - x_{i+D/2} s',
//   x_{i+D/2} c + x_i s') with c, s' = cos, sin[s][i] from f32 tables [S, D/2] (the rotate-half
//   convention of Llama).
// - ops/swiglu: silu(gate) * up over rows [T, 2F] holding gate then up, into [T, F].
// - ops/heads_to_rows: [B, H, S, D] into [B, S, H, D], the rows an output projection reads.
// Each also as "...8": eight elements (pairs) a thread in 16-byte accesses, for F, D and D / 2 a
// multiple of 8 (docs/perf/2026-11-28-llama-layer-first.md: one element a thread moved a third of
// what the device copies).
#include <vector>

#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int THREADS = 256;

absl::StatusOr<KernelDef> BuildRopeQkv() {
  Kernel k("ops/rope_qkv", sm80(), {THREADS});
  Value qkv = k.PtrParam("qkv", bf16), cos = k.PtrParam("cos", f32), sin = k.PtrParam("sin", f32);
  Value q = k.PtrParam("q", bf16), kk = k.PtrParam("k", bf16), v = k.PtrParam("v", bf16);
  Value S = k.I32Param("S"), Hq = k.I32Param("Hq"), Hkv = k.I32Param("Hkv"), D = k.I32Param("D");
  Value pairs = k.I64Param("pairs");  // T * (Hq + 2 Hkv) * D / 2
  k.Grid("pairs/256");
  Value idx = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(idx.To(i64) < pairs, [&] {
    Value half = D / 2, heads = Hq + Hkv * 2;
    Value i = idx % half, row = idx / half;
    Value head = row % heads, t = row / heads;
    Value s = t % S, b = t / S;
    Value from = qkv + (t * heads + head) * D + i;
    Value x1 = k.Load(from).To(f32), x2 = k.Load(from + half).To(f32);
    // Where the pair goes: its head's row s of q, k or v.
    auto store = [&](const Value& base, const Value& h, const Value& count, const Value& y1,
                     const Value& y2) {
      Value to = base + ((b * count + h) * S + s) * D + i;
      k.Store(to, y1.To(bf16));
      k.Store(to + half, y2.To(bf16));
    };
    k.If(head < Hq + Hkv, [&] {
      Value c = k.Load(cos + s * half + i), sn = k.Load(sin + s * half + i);
      Value y1 = x1 * c - x2 * sn, y2 = x2 * c + x1 * sn;
      k.If(head < Hq, [&] { store(q, head, Hq, y1, y2); });
      k.If(head >= Hq, [&] { store(kk, head - Hq, Hkv, y1, y2); });
    });
    k.If(head >= Hq + Hkv, [&] { store(v, head - Hq - Hkv, Hkv, x1, x2); });
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildSwiglu() {
  Kernel k("ops/swiglu", sm80(), {THREADS});
  Value x = k.PtrParam("x", bf16), y = k.PtrParam("y", bf16);
  Value F = k.I32Param("F");
  Value n = k.I64Param("n");  // T * F
  k.Grid("n/256");
  Value idx = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(idx.To(i64) < n, [&] {
    Value t = idx / F, j = idx % F;
    Value at = x + t * (F * 2) + j;
    Value gate = k.Load(at).To(f32), up = k.Load(at + F).To(f32);
    Value silu = gate / (Exp(-gate) + 1.0f);
    k.Store(y + idx, (silu * up).To(bf16));
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildHeadsToRows() {
  Kernel k("ops/heads_to_rows", sm80(), {THREADS});
  Value x = k.PtrParam("x", bf16), y = k.PtrParam("y", bf16);
  Value H = k.I32Param("H"), S = k.I32Param("S"), D = k.I32Param("D");
  Value n = k.I64Param("n");  // B * H * S * D
  k.Grid("n/256");
  Value idx = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(idx.To(i64) < n, [&] {
    Value d = idx % D, rest = idx / D;
    Value s = rest % S, bh = rest / S;
    Value h = bh % H, b = bh / H;
    k.Store(y + ((b * S + s) * H + h) * D + d, k.Load(x + idx));
  });
  return k.Build();
}

// 8 bf16 at `ptr` (16 bytes, aligned) as f32 values.
std::vector<Value> Load8(const Value& ptr) {
  Value v = LoadGlobal(ptr, 8, {.cache = CacheHint::kReadOnly});
  std::vector<Value> out;
  for (int e = 0; e < 8; ++e) out.push_back(v.Lane(e).To(f32));
  return out;
}

// 8 f32 at `ptr` (two 16-byte loads).
std::vector<Value> Load8F32(const Value& ptr) {
  std::vector<Value> out;
  for (int half = 0; half < 2; ++half) {
    Value v = LoadGlobal(ptr + half * 4, 4, {.cache = CacheHint::kReadOnly});
    for (int e = 0; e < 4; ++e) out.push_back(v.Lane(e));
  }
  return out;
}

// 8 f32 values stored as bf16 at `ptr` (16 bytes, aligned).
void Store8(Kernel& k, const Value& ptr, const std::vector<Value>& y) {
  std::vector<Value> lanes;
  for (int e = 0; e < 8; e += 2) {
    Value pair = PackBf16x2(y[e], y[e + 1]);
    lanes.push_back(pair.Lane(0));
    lanes.push_back(pair.Lane(1));
  }
  StoreGlobal(ptr, k.Vector(lanes), {.cache = CacheHint::kStreaming});
}

absl::StatusOr<KernelDef> BuildRopeQkv8() {
  Kernel k("ops/rope_qkv8", sm80(), {THREADS});
  Value qkv = k.PtrParam("qkv", bf16), cos = k.PtrParam("cos", f32), sin = k.PtrParam("sin", f32);
  Value q = k.PtrParam("q", bf16), kk = k.PtrParam("k", bf16), v = k.PtrParam("v", bf16);
  Value S = k.I32Param("S"), Hq = k.I32Param("Hq"), Hkv = k.I32Param("Hkv"), D = k.I32Param("D");
  Value units = k.I64Param("units");  // T * (Hq + 2 Hkv) * D / 16: 8 pairs each
  k.Grid("units/256");
  k.RequireMultiple("D", 16);
  Value unit = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(unit.To(i64) < units, [&] {
    Value half = D / 2, heads = Hq + Hkv * 2;
    Value idx = unit * 8;
    Value i = idx % half, row = idx / half;
    Value head = row % heads, t = row / heads;
    Value s = t % S, b = t / S;
    Value from = qkv + (t * heads + head) * D + i;
    std::vector<Value> x1 = Load8(from), x2 = Load8(from + half);
    auto store = [&](const Value& base, const Value& h, const Value& count,
                     const std::vector<Value>& y1, const std::vector<Value>& y2) {
      Value to = base + ((b * count + h) * S + s) * D + i;
      Store8(k, to, y1);
      Store8(k, to + half, y2);
    };
    k.If(head < Hq + Hkv, [&] {
      std::vector<Value> c = Load8F32(cos + s * half + i), sn = Load8F32(sin + s * half + i);
      std::vector<Value> y1, y2;
      for (int e = 0; e < 8; ++e) {
        y1.push_back(x1[e] * c[e] - x2[e] * sn[e]);
        y2.push_back(x2[e] * c[e] + x1[e] * sn[e]);
      }
      k.If(head < Hq, [&] { store(q, head, Hq, y1, y2); });
      k.If(head >= Hq, [&] { store(kk, head - Hq, Hkv, y1, y2); });
    });
    k.If(head >= Hq + Hkv, [&] { store(v, head - Hq - Hkv, Hkv, x1, x2); });
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildSwiglu8() {
  Kernel k("ops/swiglu8", sm80(), {THREADS});
  Value x = k.PtrParam("x", bf16), y = k.PtrParam("y", bf16);
  Value F = k.I32Param("F");
  Value units = k.I64Param("units");  // T * F / 8
  k.Grid("units/256");
  k.RequireMultiple("F", 8);
  Value unit = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(unit.To(i64) < units, [&] {
    Value idx = unit * 8;
    Value t = idx / F, j = idx % F;
    Value at = x + t * (F * 2) + j;
    std::vector<Value> gate = Load8(at), up = Load8(at + F), out;
    for (int e = 0; e < 8; ++e) out.push_back(gate[e] / (Exp(-gate[e]) + 1.0f) * up[e]);
    Store8(k, y + idx, out);
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildHeadsToRows8() {
  Kernel k("ops/heads_to_rows8", sm80(), {THREADS});
  Value x = k.PtrParam("x", bf16), y = k.PtrParam("y", bf16);
  Value H = k.I32Param("H"), S = k.I32Param("S"), D = k.I32Param("D");
  Value units = k.I64Param("units");  // B * H * S * D / 8
  k.Grid("units/256");
  k.RequireMultiple("D", 8);
  Value unit = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(unit.To(i64) < units, [&] {
    Value idx = unit * 8;
    Value d = idx % D, rest = idx / D;
    Value s = rest % S, bh = rest / S;
    Value h = bh % H, b = bh / H;
    StoreGlobal(y + ((b * S + s) * H + h) * D + d,
                LoadGlobal(x + idx, 8, {.cache = CacheHint::kReadOnly}),
                {.cache = CacheHint::kStreaming});
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("ops/rope_qkv8", "ops/rope_qkv, 8 pairs a thread (D a multiple of 16)", BuildRopeQkv8);
KILN_EXAMPLE("ops/swiglu8", "ops/swiglu, 8 elements a thread (F a multiple of 8)", BuildSwiglu8);
KILN_EXAMPLE("ops/heads_to_rows8", "ops/heads_to_rows, 8 elements a thread (D a multiple of 8)",
             BuildHeadsToRows8);
KILN_EXAMPLE("ops/rope_qkv",
             "a fused QKV projection's rows into q, k, v [B, H, S, D] with rotary embeddings",
             BuildRopeQkv);
KILN_EXAMPLE("ops/swiglu", "silu(gate) * up over rows [T, 2F] of gate then up", BuildSwiglu);
KILN_EXAMPLE("ops/heads_to_rows", "[B, H, S, D] into [B, S, H, D]", BuildHeadsToRows);
}  // namespace kiln::examples
