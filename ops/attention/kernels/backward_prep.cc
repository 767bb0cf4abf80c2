// attention/bwd_prep: the backward pass's per-row inputs, from the forward's O and lse and the
// incoming gradient dO. For each query row i of each head:
//   delta[i] = sum_d dO[i, d] * O[i, d]      (rowsum(dO * O), in f32)
//   lse2[i]  = lse[i] * log2(e)              (+inf where lse = -inf: a row that saw no key)
// written to a workspace of Sp rows a head (S rounded up to whole 64-row tiles), its rows past S
// delta = 0 and lse2 = +inf, so that attention/hopper_dkdv reads whole tiles of both by TMA and
// the P = 2^(s - lse2) of a row past S (or of a row that saw no key) is 0.
//
// With zero_dq = 1 it also zeroes dQacc [B, Hq, Sp, D] f32, the accumulator attention/hopper_dkdv
// .dqadd adds dQ into; attention/bwd_dq_convert then writes dQ = scale * dQacc rounded.
//
// Rows: Q, O and dO [B, Hq, S, D]; lse [B, Hq, S]; the workspace [B, Hq, Sp] twice. Packed
// sequences (".varlen"): O and dO [T, Hq, D], lse [Hq, T], the workspace [Hq, Sp]. Each thread
// takes 8 elements of one row (16-byte loads of O and dO); the D / 8 threads of a row meet by
// shuffles. D a multiple of 8 up to 256.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/math.h"
#include "kiln/memory_ops.h"
#include "kiln/warp.h"

namespace kiln::examples {
namespace {

constexpr int kThreads = 256, kWidth = 8;

absl::StatusOr<KernelDef> BuildBackwardPrep(Scalar in, bool varlen, bool sm100 = false) {
  Kernel k(absl::StrCat("attention/bwd_prep", in == f16 ? ".f16" : "", varlen ? ".varlen" : "",
                        sm100 ? ".sm100a" : ""),
           sm100 ? sm100a() : sm90a(), {kThreads});
  Value o = k.PtrParam("O", in), d_o = k.PtrParam("dO", in), lse = k.PtrParam("lse", f32);
  Value lse2 = k.PtrParam("lse2", f32), delta = k.PtrParam("delta", f32);
  Value dq_acc = k.PtrParam("dQacc", f32);
  // (varlen: T rows a head, [T, Hq, D] in memory)
  Value S = k.I32Param(varlen ? "T" : "S"), Sp = k.I32Param("Sp"), D = k.I32Param("D");
  Value Hq = varlen ? k.I32Param("Hq") : Value();
  Value zero_dq = k.I32Param("zero_dq");
  Value units = k.I64Param("units");  // B * Hq * Sp * D / 8
  k.RequireMultiple("D", kWidth);
  k.RequireMultiple("Sp", 64);
  k.Grid("units/256");
  // A row's D / 8 threads are consecutive lanes of one warp (D / 8 divides 32 for D <= 256).
  Value unit = k.BlockIdx(0) * kThreads + k.ThreadIdx();
  Value per_row = D / kWidth;
  Value padded_row = unit / per_row, d0 = unit % per_row * kWidth;
  Value head = padded_row / Sp, i = padded_row % Sp;
  Value inside = (unit.To(i64) < units) & (i < S);
  Value row = varlen ? i.To(i64) * Hq.To(i64) + head.To(i64) : head.To(i64) * S.To(i64) + i.To(i64);
  Value at = row * D.To(i64) + d0.To(i64);
  Value ov = LoadGlobal(o + at, kWidth, {.mask = inside});
  Value gv = LoadGlobal(d_o + at, kWidth, {.mask = inside});
  Value sum = k.F32(0);
  for (int e = 0; e < kWidth; ++e) sum = Fma(ov.Lane(e).To(f32), gv.Lane(e).To(f32), sum);
  // The row's partial sums meet across its lanes (a width of D / 8: 8, 16 or 32).
  Regs total = k.Registers(Type::Of(f32), 1);
  total[0] = sum;
  for (int width : {8, 16, 32})
    k.If(per_row == width, [&] { total[0] = WarpReduce(sum, Reduce::kSum, width); });
  k.If((unit.To(i64) < units) & (zero_dq != 0), [&] {
    Value zeros = k.Vector({k.F32(0), k.F32(0), k.F32(0), k.F32(0)});
    Value acc = dq_acc + (padded_row.To(i64) * D.To(i64) + d0.To(i64));
    k.Store(acc, zeros);
    k.Store(acc + 4, zeros);
  });
  k.If((unit.To(i64) < units) & (d0 == 0), [&] {
    Value out = head.To(i64) * Sp.To(i64) + i.To(i64);
    Value l = LoadGlobal(lse + (head.To(i64) * S.To(i64) + Min(i, S - 1).To(i64)), 1,
                         {.mask = i < S, .fill = -INFINITY});
    k.Store(lse2 + out, Select(l == -INFINITY, k.F32(INFINITY), l * M_LOG2E));
    k.Store(delta + out, Select(i < S, total[0], k.F32(0)));
  });
  return k.Build();
}

}  // namespace
// dQ = scale * dQacc rounded to `in`, its rows of [B, Hq, S, D] from [B, Hq, Sp, D]; 8 elements a
// thread.
absl::StatusOr<KernelDef> BuildDqConvert(Scalar in) {
  Kernel k(absl::StrCat("attention/bwd_dq_convert", in == f16 ? ".f16" : ""), sm90a(), {kThreads});
  Value dq_acc = k.PtrParam("dQacc", f32), dq = k.PtrParam("dQ", in);
  Value S = k.I32Param("S"), Sp = k.I32Param("Sp"), D = k.I32Param("D");
  Value scale = k.F32Param("scale");
  Value units = k.I64Param("out_units");  // B * Hq * S * D / 8
  k.RequireMultiple("D", kWidth);
  k.Grid("out_units/256");
  Value unit = (k.BlockIdx(0) * kThreads + k.ThreadIdx()).To(i64);
  k.If(unit < units, [&] {
    Value row = unit / (D / kWidth).To(i64), d0 = unit % (D / kWidth).To(i64) * kWidth;
    Value head = row / S.To(i64), i = row % S.To(i64);
    Value from = (head * Sp.To(i64) + i) * D.To(i64) + d0;
    Value lo = LoadGlobal(dq_acc + from, 4), hi = LoadGlobal(dq_acc + from + 4, 4);
    std::vector<Value> out;
    for (int e = 0; e < kWidth; ++e) out.push_back(((e < 4 ? lo : hi).Lane(e % 4) * scale).To(in));
    StoreGlobal(dq + (row * D.To(i64) + d0), k.Vector(out));
  });
  return k.Build();
}

KILN_EXAMPLE_VARIANT(attention_bwd_dq_convert, "attention/bwd_dq_convert",
                     "the attention backward's dQ: scale * the f32 accumulator, rounded",
                     [] { return BuildDqConvert(bf16); });
KILN_EXAMPLE_VARIANT(attention_bwd_dq_convert_f16, "attention/bwd_dq_convert.f16",
                     "attention/bwd_dq_convert, f16", [] { return BuildDqConvert(f16); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep, "attention/bwd_prep",
                     "the attention backward's row inputs: rowsum(dO * O) and lse in log2 units, "
                     "padded to whole 64-row tiles",
                     [] { return BuildBackwardPrep(bf16, false); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep_f16, "attention/bwd_prep.f16", "attention/bwd_prep, f16",
                     [] { return BuildBackwardPrep(f16, false); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep_sm100a, "attention/bwd_prep.sm100a",
                     "attention/bwd_prep for sm_100a (attention/blackwell_dkdv, blackwell_dq)",
                     [] { return BuildBackwardPrep(bf16, false, true); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep_f16_sm100a, "attention/bwd_prep.f16.sm100a",
                     "attention/bwd_prep for sm_100a, f16",
                     [] { return BuildBackwardPrep(f16, false, true); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep_varlen, "attention/bwd_prep.varlen",
                     "attention/bwd_prep over packed sequences",
                     [] { return BuildBackwardPrep(bf16, true); });
KILN_EXAMPLE_VARIANT(attention_bwd_prep_f16_varlen, "attention/bwd_prep.f16.varlen",
                     "attention/bwd_prep over packed sequences, f16",
                     [] { return BuildBackwardPrep(f16, true); });
}  // namespace kiln::examples
