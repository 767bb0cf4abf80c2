// The glue of a transformer layer between kiln's GEMMs, norms and attention, one element (or one
// rotated pair) per thread, bf16 in and out:
// - ops/rope_qkv: a fused QKV projection's rows [T, (Hq + 2 Hkv) * D] (T = B * S tokens, each
//   row Hq query heads, then Hkv key heads, then Hkv value heads) into q [B, Hq, S, D], k and v
//   [B, Hkv, S, D], the layout attention reads, with rotary embeddings applied to q and k in the
//   same pass: pair (x_i, x_{i+D/2}) at position s becomes (x_i c - x_{i+D/2} s',
//   x_{i+D/2} c + x_i s') with c, s' = cos, sin[s][i] from f32 tables [S, D/2] (the rotate-half
//   convention of Llama). ops/rope_qkv_rows writes them in the rows layout [B, S, H, D] instead
//   (attention's ".rows" form reads it, and its O is then the output projection's rows).
// - ops/swiglu: silu(gate) * up over rows [T, 2F] holding gate then up, into [T, F].
// - ops/heads_to_rows: [B, H, S, D] into [B, S, H, D], the rows an output projection reads.
// - ops/paged_append: a decode step's new keys and values [B * S, Hkv, D] (S new tokens a
//   sequence) into their pages of a paged cache [pages, page, Hkv, D] (block table [B, max_pages],
//   token j of sequence b at page block_table[b][j / page], row j % page), the keys rotated as
//   ops/rope_qkv's at their positions seq_lens[b] + s (the lengths before the step). 8 pairs a
//   thread only (D a multiple of 16). A token whose position lies past the block table or the
//   cos/sin tables, or whose page entry lies past the cache, is not written: the kernel uses no
//   index it has not checked.
// Each is built twice from one builder: one element (pair) a thread, and as "...8", eight a
// thread in 16-byte accesses, for F, D and D / 2 a multiple of 8
// (docs/perf/2026-11-28-llama-layer-first.md: one element a thread moved a third of what the
// device copies).
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int THREADS = 256;

// `width` 16-bit floats (bf16 or f16: `ptr`'s type) at `ptr` as f32 values: one load, or one
// 16-byte read-only load of 8.
std::vector<Value> Load16(Kernel& k, const Value& ptr, int width) {
  if (width == 1) return {k.Load(ptr).To(f32)};
  Value v = LoadGlobal(ptr, width, {.cache = CacheHint::kReadOnly});
  std::vector<Value> out;
  for (int e = 0; e < width; ++e) out.push_back(v.Lane(e).To(f32));
  return out;
}

// `width` f32 at `ptr`: one load, or 16-byte loads of 4.
std::vector<Value> LoadF32(Kernel& k, const Value& ptr, int width) {
  if (width == 1) return {k.Load(ptr)};
  std::vector<Value> out;
  for (int at = 0; at < width; at += 4) {
    Value v = LoadGlobal(ptr + at, 4, {.cache = CacheHint::kReadOnly});
    for (int e = 0; e < 4; ++e) out.push_back(v.Lane(e));
  }
  return out;
}

// f32 values stored as `ptr`'s 16-bit float type (bf16 or f16): one store, or one streaming 16-byte
// store of 8.
void Store16(Kernel& k, const Value& ptr, const std::vector<Value>& y) {
  const Scalar type = ptr.type().elem;
  if (y.size() == 1) {
    k.Store(ptr, y[0].To(type));
    return;
  }
  std::vector<Value> lanes;
  for (size_t e = 0; e < y.size(); e += 2) {
    Value pair = type == f16 ? PackF16x2(y[e], y[e + 1]) : PackBf16x2(y[e], y[e + 1]);
    lanes.push_back(pair.Lane(0));
    lanes.push_back(pair.Lane(1));
  }
  StoreGlobal(ptr, k.Vector(lanes), {.cache = CacheHint::kStreaming});
}

// Pairs (x1_e, x2_e) rotated by angles with cosines c_e and sines s_e (rotate-half RoPE).
std::pair<std::vector<Value>, std::vector<Value>> Rotated(const std::vector<Value>& x1,
                                                          const std::vector<Value>& x2,
                                                          const std::vector<Value>& c,
                                                          const std::vector<Value>& s) {
  std::vector<Value> y1, y2;
  for (size_t e = 0; e < x1.size(); ++e) {
    y1.push_back(x1[e] * c[e] - x2[e] * s[e]);
    y2.push_back(x2[e] * c[e] + x1[e] * s[e]);
  }
  return {y1, y2};
}

// The kernel's name with its width and, for f16 data, its type ("ops/swiglu", "ops/swiglu8",
// "ops/swiglu8.f16").
std::string Named(const char* name, int width, Scalar type = bf16) {
  return absl::StrCat(name, width == 1 ? "" : absl::StrCat(width), type == f16 ? ".f16" : "");
}
// Declares the i64 parameter `units` (how many units of `width` elements there are) and the grid
// over them, and runs `body` with the first element of this thread's unit, where there is one.
void FirstOfUnit(Kernel& k, int width, const std::function<void(Value)>& body) {
  Value units = k.I64Param("units");
  k.Grid("units/256");
  Value unit = k.BlockIdx(0) * THREADS + k.ThreadIdx();
  k.If(unit.To(i64) < units, [&] { body(width == 1 ? unit : unit * width); });
}

// `type`: the projection's and q, k, v's (bf16, or f16: the ".f16" kernels); so for the glue below.
absl::StatusOr<KernelDef> BuildRopeQkv(int width, bool rows, Scalar type) {
  Kernel k(Named(rows ? "ops/rope_qkv_rows" : "ops/rope_qkv", width, type), sm80(), {THREADS});
  Value qkv = k.PtrParam("qkv", type), cos = k.PtrParam("cos", f32), sin = k.PtrParam("sin", f32);
  Value q = k.PtrParam("q", type), kk = k.PtrParam("k", type), v = k.PtrParam("v", type);
  Value S = k.I32Param("S"), Hq = k.I32Param("Hq"), Hkv = k.I32Param("Hkv"), D = k.I32Param("D");
  if (width > 1) k.RequireMultiple("D", 2 * width);
  // units: T * (Hq + 2 Hkv) * D / 2 / width, `width` pairs each.
  FirstOfUnit(k, width, [&](Value idx) {
    Value half = D / 2, heads = Hq + Hkv * 2;
    Value i = idx % half, row = idx / half;
    Value head = row % heads, t = row / heads;
    Value s = t % S, b = t / S;
    Value from = qkv + (t * heads + head) * D + i;
    std::vector<Value> x1 = Load16(k, from, width), x2 = Load16(k, from + half, width);
    // Where the pairs go: their head's row s of q, k or v ([B, H, S, D]), or head h of their
    // token's row ([B, S, H, D]).
    auto store = [&](const Value& base, const Value& h, const Value& count,
                     const std::vector<Value>& y1, const std::vector<Value>& y2) {
      Value to = base + (rows ? t * count + h : (b * count + h) * S + s) * D + i;
      Store16(k, to, y1);
      Store16(k, to + half, y2);
    };
    k.If(head < Hq + Hkv, [&] {
      std::vector<Value> c = LoadF32(k, cos + s * half + i, width),
                         sn = LoadF32(k, sin + s * half + i, width);
      auto [y1, y2] = Rotated(x1, x2, c, sn);
      k.If(head < Hq, [&] { store(q, head, Hq, y1, y2); });
      k.If(head >= Hq, [&] { store(kk, head - Hq, Hkv, y1, y2); });
    });
    k.If(head >= Hq + Hkv, [&] { store(v, head - Hq - Hkv, Hkv, x1, x2); });
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildSwiglu(int width, Scalar type) {
  Kernel k(Named("ops/swiglu", width, type), sm80(), {THREADS});
  Value x = k.PtrParam("x", type), y = k.PtrParam("y", type);
  Value F = k.I32Param("F");
  if (width > 1) k.RequireMultiple("F", width);
  FirstOfUnit(k, width, [&](Value idx) {  // units: T * F / width
    Value t = idx / F, j = idx % F;
    Value at = x + t * (F * 2) + j;
    std::vector<Value> gate = Load16(k, at, width), up = Load16(k, at + F, width), out;
    for (int e = 0; e < width; ++e) out.push_back(gate[e] / (Exp(-gate[e]) + 1.0f) * up[e]);
    Store16(k, y + idx, out);
  });
  return k.Build();
}

absl::StatusOr<KernelDef> BuildHeadsToRows(int width, Scalar type) {
  Kernel k(Named("ops/heads_to_rows", width, type), sm80(), {THREADS});
  Value x = k.PtrParam("x", type), y = k.PtrParam("y", type);
  Value H = k.I32Param("H"), S = k.I32Param("S"), D = k.I32Param("D");
  if (width > 1) k.RequireMultiple("D", width);
  FirstOfUnit(k, width, [&](Value idx) {  // units: B * H * S * D / width
    Value d = idx % D, rest = idx / D;
    Value s = rest % S, bh = rest / S;
    Value h = bh % H, b = bh / H;
    Value to = y + ((b * S + s) * H + h) * D + d;
    if (width == 1)
      k.Store(to, k.Load(x + idx));
    else
      StoreGlobal(to, LoadGlobal(x + idx, width, {.cache = CacheHint::kReadOnly}),
                  {.cache = CacheHint::kStreaming});
  });
  return k.Build();
}

// `type`: the caches' and the new rows' (bf16, or f16: ops/paged_append.f16).
absl::StatusOr<KernelDef> BuildPagedAppend(Scalar type) {
  constexpr int width = 8;
  Kernel k(Named("ops/paged_append", 1, type), sm80(), {THREADS});
  Value k_new = k.PtrParam("k_new", type), v_new = k.PtrParam("v_new", type);
  Value cos = k.PtrParam("cos", f32), sin = k.PtrParam("sin", f32);
  Value table = k.PtrParam("block_table", i32), lens = k.PtrParam("seq_lens", i32);
  Value k_cache = k.PtrParam("k_cache", type), v_cache = k.PtrParam("v_cache", type);
  k.Attribute("writes_part", "k_cache,v_cache");  // the new rows alone (the emulator's check)
  Value S = k.I32Param("S"), H = k.I32Param("Hkv"), D = k.I32Param("D");
  Value page = k.I32Param("page"), max_pages = k.I32Param("max_pages");
  Value pages = k.I32Param("pages"), positions = k.I32Param("positions");  // the bounds
  k.RequireMultiple("D", 2 * width);
  FirstOfUnit(k, width, [&](Value idx) {  // units: B * S * Hkv * D / 2 / width
    Value half = D / 2, i = idx % half, row = idx / half;
    Value h = row % H, t = row / H;                           // t: the token, b * S + s
    Value b = t / S, pos = k.Load(lens + b.To(i64)) + t % S;  // (unsigned: negative is past)
    k.If((pos / page < max_pages) & (pos < positions), [&] {
      Value entry = k.Load(table + (b * max_pages + pos / page).To(i64));
      k.If(entry < pages, [&] {
        Value slot = entry * page + pos % page;
        Value from = k_new + ((t * H + h) * D + i).To(i64);
        Value to = (slot.To(i64) * H.To(i64) + h.To(i64)) * D.To(i64) + i.To(i64);
        std::vector<Value> x1 = Load16(k, from, width), x2 = Load16(k, from + half, width);
        std::vector<Value> c = LoadF32(k, cos + pos * half + i, width),
                           sn = LoadF32(k, sin + pos * half + i, width);
        auto [y1, y2] = Rotated(x1, x2, c, sn);
        Store16(k, k_cache + to, y1);
        Store16(k, k_cache + to + half.To(i64), y2);
        Value v_from = v_new + ((t * H + h) * D + i).To(i64);
        for (const Value& at : {k.I32(0), half})
          StoreGlobal(v_cache + to + at.To(i64),
                      LoadGlobal(v_from + at, width, {.cache = CacheHint::kReadOnly}));
      });
    });
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(paged_append, "ops/paged_append",
                     "a decode step's new keys (rotated) and values into their pages of a paged "
                     "KV cache",
                     [] { return BuildPagedAppend(bf16); });
KILN_EXAMPLE_VARIANT(paged_append_f16, "ops/paged_append.f16", "ops/paged_append over f16 caches",
                     [] { return BuildPagedAppend(f16); });
KILN_EXAMPLE_VARIANT(
    rope_qkv, "ops/rope_qkv",
    "a fused QKV projection's rows into q, k, v [B, H, S, D] with rotary embeddings",
    [] { return BuildRopeQkv(1, false, bf16); });
KILN_EXAMPLE_VARIANT(rope_qkv8, "ops/rope_qkv8",
                     "ops/rope_qkv, 8 pairs a thread (D a multiple of 16)",
                     [] { return BuildRopeQkv(8, false, bf16); });
KILN_EXAMPLE_VARIANT(rope_qkv_rows, "ops/rope_qkv_rows",
                     "ops/rope_qkv into q, k, v [B, S, H, D] (attention's rows layout)",
                     [] { return BuildRopeQkv(1, true, bf16); });
KILN_EXAMPLE_VARIANT(rope_qkv_rows8, "ops/rope_qkv_rows8",
                     "ops/rope_qkv_rows, 8 pairs a thread (D a multiple of 16)",
                     [] { return BuildRopeQkv(8, true, bf16); });
KILN_EXAMPLE_VARIANT(swiglu, "ops/swiglu", "silu(gate) * up over rows [T, 2F] of gate then up",
                     [] { return BuildSwiglu(1, bf16); });
KILN_EXAMPLE_VARIANT(swiglu8, "ops/swiglu8", "ops/swiglu, 8 elements a thread (F a multiple of 8)",
                     [] { return BuildSwiglu(8, bf16); });
KILN_EXAMPLE_VARIANT(heads_to_rows, "ops/heads_to_rows", "[B, H, S, D] into [B, S, H, D]",
                     [] { return BuildHeadsToRows(1, bf16); });
KILN_EXAMPLE_VARIANT(heads_to_rows8, "ops/heads_to_rows8",
                     "ops/heads_to_rows, 8 elements a thread (D a multiple of 8)",
                     [] { return BuildHeadsToRows(8, bf16); });
// The same over f16 data.
KILN_EXAMPLE_VARIANT(rope_qkv_f16, "ops/rope_qkv.f16", "ops/rope_qkv over f16",
                     [] { return BuildRopeQkv(1, false, f16); });
KILN_EXAMPLE_VARIANT(rope_qkv8_f16, "ops/rope_qkv8.f16", "ops/rope_qkv8 over f16",
                     [] { return BuildRopeQkv(8, false, f16); });
KILN_EXAMPLE_VARIANT(rope_qkv_rows_f16, "ops/rope_qkv_rows.f16", "ops/rope_qkv_rows over f16",
                     [] { return BuildRopeQkv(1, true, f16); });
KILN_EXAMPLE_VARIANT(rope_qkv_rows8_f16, "ops/rope_qkv_rows8.f16", "ops/rope_qkv_rows8 over f16",
                     [] { return BuildRopeQkv(8, true, f16); });
KILN_EXAMPLE_VARIANT(swiglu_f16, "ops/swiglu.f16", "ops/swiglu over f16",
                     [] { return BuildSwiglu(1, f16); });
KILN_EXAMPLE_VARIANT(swiglu8_f16, "ops/swiglu8.f16", "ops/swiglu8 over f16",
                     [] { return BuildSwiglu(8, f16); });
KILN_EXAMPLE_VARIANT(heads_to_rows_f16, "ops/heads_to_rows.f16", "ops/heads_to_rows over f16",
                     [] { return BuildHeadsToRows(1, f16); });
KILN_EXAMPLE_VARIANT(heads_to_rows8_f16, "ops/heads_to_rows8.f16", "ops/heads_to_rows8 over f16",
                     [] { return BuildHeadsToRows(8, f16); });
}  // namespace kiln::examples
