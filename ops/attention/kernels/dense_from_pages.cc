// attention/dense_from_pages.dD: a paged KV cache's keys and values (vLLM's layout, [pages, page,
// Hkv, D]; sequence b's key j in page block_table[b * max_pages + j / page], row j % page) copied
// into dense K and V [B, Hkv, Skv, D] (Skv = max_pages * page), the layout the prefill kernels over
// sequences of their own lengths (".lens") read. The attention entry point runs it before such a
// kernel where a paged prefill is long enough that copying the cache costs less than the small
// pages' TMA boxes cost the paged kernel (PlanAttention).
// - Only each sequence's first seq_lens[b] keys are copied (a length past Skv, or negative, reads
//   as Skv, as the attention kernels read it); the rows past it are left as they were (the
//   ".lens" kernels zero V's rows past the length themselves and mask the keys).
// - A table entry past the cache's pages (or negative) copies zeros, as the paged kernels' TMA
//   boxes read past their map: the kernel uses no index it has not checked.
// - 16 bytes of K and 16 of V a thread, in the cache's order: a page's rows of all heads read in
//   one sweep, each head's rows written as one run of a page's keys. The elements are moved as
//   16-bit words: the same kernel for bf16 and f16 caches.
// - Programmatic dependent launch: a kernel after it that waits for the grids before it may launch
//   once its last CTAs run (the prefill kernels do not: they start when it ends), and it waits for
//   the kernel before it (a paged_append of the step) before it reads the cache or writes K and V
//   (which the last call's attention kernel may still read).
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256, kWidth = 8;

absl::StatusOr<KernelDef> BuildDenseFromPages(int d) {
  Kernel k(absl::StrCat("attention/dense_from_pages.d", d), sm90a(), {kThreads});
  Value k_pages = k.PtrParam("K_pages", i16), v_pages = k.PtrParam("V_pages", i16);
  Value table = k.PtrParam("block_table", i32), lens = k.PtrParam("seq_lens", i32);
  Value k_out = k.PtrParam("K", i16), v_out = k.PtrParam("V", i16);
  k.Attribute("writes_part", "K,V");  // each sequence's keys up to its length
  Value Hkv = k.I32Param("Hkv"), Skv = k.I32Param("Skv"), page = k.I32Param("page");
  Value max_pages = k.I32Param("max_pages"), pages = k.I32Param("pages");
  Value units = k.I64Param("units");  // B * Hkv * Skv * D / 8
  k.Grid(absl::StrCat("units/", kThreads));
  k.LaunchDependents();
  k.WaitForPriorGrids();
  Value unit = k.BlockIdx(0) * kThreads + k.ThreadIdx();
  const int per_row = d / kWidth;  // a power of two: the row and column by shift and mask
  int shift = 0;
  while ((1 << shift) < per_row) ++shift;
  k.If(unit.To(i64) < units, [&] {
    // In the cache's order: a token's row of Hkv heads, then the token after it (a page's
    // tokens, Hkv * D * page elements, read in one sweep).
    Value col = (unit & (per_row - 1)) * kWidth, rest = unit >> shift;
    Value h = rest % Hkv, token = rest / Hkv;  // token: b * Skv + j
    Value j = token % Skv, b = token / Skv;
    Value len = Min(k.Load(lens + b.To(i64)), Skv);
    k.If(j < len, [&] {
      Value entry = k.Load(table + (b * max_pages + j / page).To(i64));
      Value to = ((b * Hkv + h).To(i64) * Skv.To(i64) + j.To(i64)) * d + col.To(i64);
      std::vector<Value> kv = k.IfElse(
          entry < pages,
          [&] {
            Value slot = entry * page + j % page;
            Value from = (slot.To(i64) * Hkv.To(i64) + h.To(i64)) * d + col.To(i64);
            return std::vector<Value>{
                LoadGlobal(k_pages + from, kWidth, {.cache = CacheHint::kReadOnly}),
                LoadGlobal(v_pages + from, kWidth, {.cache = CacheHint::kReadOnly})};
          },
          [&] {
            Value zero = k.Vector(std::vector<Value>(kWidth, k.I32(0).To(i16)));
            return std::vector<Value>{zero, zero};
          });
      StoreGlobal(k_out + to, kv[0]);
      StoreGlobal(v_out + to, kv[1]);
    });
  });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(attention_dense_from_pages_d64, "attention/dense_from_pages.d64",
                     "a paged KV cache's keys and values copied into dense K and V [B, Hkv, Skv, "
                     "D], D = 64 (the attention entry point's long paged prefills)",
                     [] { return BuildDenseFromPages(64); });
KILN_EXAMPLE_VARIANT(attention_dense_from_pages_d128, "attention/dense_from_pages.d128",
                     "attention/dense_from_pages at D = 128",
                     [] { return BuildDenseFromPages(128); });
KILN_EXAMPLE_VARIANT(attention_dense_from_pages_d256, "attention/dense_from_pages.d256",
                     "attention/dense_from_pages at D = 256",
                     [] { return BuildDenseFromPages(256); });
}  // namespace kiln::examples
