#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/gemm.h"
#include "kiln/runtime/driver.h"
#include "ops/gemm/gemm_fp8.h"

namespace kiln::rt {

bool ReadsAnyStrides(const std::string& kernel) {
  return kernel.rfind("reference/", 0) == 0 || kernel.rfind("gemm/bf16_strided", 0) == 0;
}

namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln gemm: ", message));
}

bool Has(const std::string& terms, const char* term) {
  for (size_t at = terms.find(term); at != std::string::npos; at = terms.find(term, at + 1)) {
    const size_t end = at + std::string(term).size();
    if ((at == 0 || terms[at - 1] == '.') && (end == terms.size() || terms[end] == '.'))
      return true;
  }
  return false;
}

// The leading dimensions of the problem the kernel sees (C column-major; A and B K-major, or
// MN-major where the plan says), packed where not given.
struct Leading {
  int64_t a, b, c;
};
Leading LeadingOf(const GemmSize& s, const GemmOperands& o, bool a_mn, bool b_mn) {
  return {o.lda ? o.lda : a_mn ? s.m : s.k, o.ldb ? o.ldb : b_mn ? s.n : s.k, o.ldc ? o.ldc : s.m};
}

// The operands as the plan takes them, and whether the kernel stores its C row-major. A
// column-major C of few columns, with A and B K-major and K a multiple of 8, is computed as
// C^T = B^T A^T, whose few rows are the skinny kernel's: it streams A once. One column is the same
// bytes as a row-major C with ldc 1, faster so than on the 128x64 tiles
// (docs/perf/2026-11-26-one-column-of-c.md); 2-4 columns, packed, take the skinny kernel's c_row
// variant, which stores C^T row-major: 2 columns at any size (its 2-row pass streams as fast as
// one row's), 3-4 where A is at most 2^24 elements, past which the 64x32 tiles streamed it faster
// (H200, with the 4-row pass: docs/perf/2026-11-26-c-of-few-columns.md,
// docs/perf/2026-11-26-two-to-four-rows.md). The skinny kernel
// loads 16 bytes at a time: A and B 16-byte aligned, else the problem stays as it is.
struct Orientation {
  GemmOperands operands;
  bool c_row = false;
};
Orientation Oriented(const GemmSize& size, const GemmOperands& o, int compute_capability) {
  Orientation v{o};
  const bool k_major = !o.c_row_major && !o.a_col_major && !o.b_row_major && size.k % 8 == 0 &&
                       compute_capability >= 80;
  const bool packed =
      (!o.lda || o.lda == size.k) && (!o.ldb || o.ldb == size.k) && (!o.ldc || o.ldc == size.m);
  const bool aligned = o.a % 16 == 0 && o.b % 16 == 0;
  const bool few_rows_streamed = size.n <= 2 || size.m * size.k <= (int64_t{1} << 24);
  if (k_major && aligned && size.n == 1) {
    v.operands.c_row_major = true, v.operands.ldc = 1;
  } else if (k_major && aligned && packed && size.n <= 4 && size.m > 4 && few_rows_streamed) {
    v.operands.c_row_major = true, v.operands.ldc = size.m;
    v.c_row = true;
  }
  return v;
}

// SwiGLU (CanonicalEpilogue's "swiglu") pairs the product's columns, the rows of a linear layer's
// gate/up weight (B) in the order rt::SwigluRowOf gives: C = silu(gate) * up is row-major, M x N/2
// and packed. Computed swapped, those are the kernel's rows, which its accumulator pairs.
absl::Status CheckSwiglu(const GemmSize& size, const GemmOperands& o) {
  if (!o.c_row_major)
    return Invalid(
        "swiglu pairs the columns of the product (the gate and up rows of a weight): C must be "
        "row-major (c_row_major), M x N/2");
  if (size.n % 16)
    return Invalid(
        absl::StrCat("swiglu takes N a multiple of 16 (gate and up rows interleaved in "
                     "blocks of 8), not ",
                     size.n));
  if (o.ldc && o.ldc != size.n / 2)
    return Invalid(
        absl::StrCat("swiglu stores C packed: ldc must be N/2 (", size.n / 2, "), not ", o.ldc));
  return absl::OkStatus();
}

// RoPE (CanonicalEpilogue's "rope") turns pairs of the product's columns, the rows of a QKV
// projection's weight (B) in the order rt::RopeRowOf gives; computed swapped, those are the
// kernel's rows, which its accumulator pairs.
absl::Status CheckRope(const GemmSize& size, const GemmOperands& o) {
  if (!o.c_row_major)
    return Invalid(
        "rope turns pairs of the product's columns (the features of a QKV projection): C must be "
        "row-major (c_row_major)");
  if (size.n % 16) return Invalid(absl::StrCat("rope takes N a multiple of 16, not ", size.n));
  if (o.rope_dim <= 0 || o.rope_dim % 16)
    return Invalid(absl::StrCat(
        "rope_dim (a head's columns) must be a positive multiple of 16, not ", o.rope_dim));
  if (o.rope_rows <= 0 || o.rope_rows % o.rope_dim || o.rope_rows > size.n)
    return Invalid(
        absl::StrCat("rope_rows (the query and key heads' columns) must be a positive "
                     "multiple of rope_dim (",
                     o.rope_dim, ") up to N (", size.n, "), not ", o.rope_rows));
  if (o.rope_period <= 0 || o.rope_period > std::numeric_limits<int32_t>::max() / o.rope_dim)
    return Invalid(
        absl::StrCat("rope_period (the positions of the angle table) must be positive, and "
                     "the table under 2^31 words, not ",
                     o.rope_period));
  if (size.m > (int64_t{1} << 23))  // the kernel's columns (EpilogueSpec::rope's positions)
    return Invalid(absl::StrCat("rope takes at most 2^23 rows (tokens), not ", size.m));
  if (!o.rope_angles) return Invalid("rope needs the angle words rope_angles");
  return absl::OkStatus();
}

// Whether `kernel` stores C through a TMA map (the tile kernels with bf16 or f16 out), which
// takes C at any leading dimension that is a multiple of 8 (checked after the choice).
bool StoresCThroughMap(const std::string& kernel, const GemmOptions& options) {
  return kernel.rfind("gemm/bf16_sm90", 0) == 0 && !Has(kernel, "any_m") &&
         !Has(kernel, "swiglu") && options.out_type != "f32";
}

// Whether `kernel` stores C (and reads C_in and residual) at leading dimension `ldc`: the strided
// kernel any; one with a C map, where no epilogue input is laid out like C; every other kernel C
// packed (`c_packed`).
bool TakesCAsGiven(const std::string& kernel, const GemmOptions& options, const std::string& terms,
                   int64_t ldc, int64_t c_packed) {
  return ReadsAnyStrides(kernel) || ldc == c_packed ||
         (StoresCThroughMap(kernel, options) && !EpilogueReadsMatrices(terms));
}

// PlanGemm past its checks, with the operands Oriented (`c_row`: the kernel stores C row-major).
absl::StatusOr<GemmPlan> PlanChecked(const GemmSize& size, const GemmOptions& options,
                                     const std::string& terms, const GemmOperands& o, bool c_row,
                                     int compute_capability, const GemmTuneCache* tuned) {
  // A row-major C is computed as C^T = B^T A^T: the same kernels with A and B, M and N, and the
  // bias's axis swapped.
  GemmPlan plan;
  plan.swapped = o.c_row_major;
  plan.c_row = c_row;
  plan.size = o.c_row_major ? GemmSize{size.n, size.m, size.k} : size;
  GemmOptions kernel_options = options;
  kernel_options.epilogue = terms;
  kernel_options.c_row = c_row;
  // Swapped, the kernel's A is B^T (MN-major where B is row-major) and its B is A^T.
  kernel_options.a_mn = o.c_row_major ? o.b_row_major : o.a_col_major;
  kernel_options.b_mn = o.c_row_major ? o.a_col_major : o.b_row_major;
  if (o.c_row_major) {
    kernel_options.epilogue =
        absl::StrReplaceAll(terms, {{"bias_row", "bias_col"}, {"bias_col", "bias_row"}});
    absl::StatusOr<std::string> reordered = CanonicalEpilogue(kernel_options.epilogue);
    if (!reordered.ok()) return reordered.status();
    kernel_options.epilogue = *reordered;
  }
  // The operands as the kernel sees them. On sm_90 those TMA cannot stride (rows, or MN-major
  // columns, off 16 bytes, or a pointer off 16 bytes) are copied first into ones it can.
  GemmOperands k = o;
  if (o.c_row_major) std::swap(k.a, k.b), std::swap(k.lda, k.ldb);
  Leading ld = LeadingOf(plan.size, k, kernel_options.a_mn, kernel_options.b_mn);
  // Not for a problem so small that its launches are its time (at most 2^24 flops), nor for
  // K <= 32, one k-step of the strided kernel, whose loads are then all it does (copying first was
  // slower there: docs/perf/2026-11-26-operands-tma-cannot-stride-copied-first.md): the strided
  // kernel reads the operands as they are there. A small problem with K past 128 is copied all
  // the same: the strided kernel spreads only C's 128x128 tiles over the GPU and walks K one
  // element a thread at a time, so its time grows with K while the copies and a tile kernel cost
  // about the same at any small size; it still won at K = 100 and lost from K = 130
  // (docs/perf/2026-11-26-small-problems-long-k.md).
  const bool strided_suffices =
      (2.0 * size.m * size.n * size.k <= double(1 << 24) && size.k <= 128) || size.k <= 32;
  bool strided_instead = false;
  if (compute_capability == 90) {
    const GemmSize& s = plan.size;
    auto padded = [](int64_t n) { return (n + 7) / 8 * 8; };
    if (ld.a % 8 || k.a % 16) plan.restrided_lda = padded(kernel_options.a_mn ? s.m : s.k);
    if (ld.b % 8 || k.b % 16) plan.restrided_ldb = padded(kernel_options.b_mn ? s.n : s.k);
    strided_instead = strided_suffices && (plan.restrided_lda || plan.restrided_ldb);
    if (strided_instead) plan.restrided_lda = plan.restrided_ldb = 0;
    kernel_options.tma_strides = !strided_instead;
    // The rows as the tile kernel will read them: the copy's (its buffer 256-byte aligned) or the
    // caller's.
    auto rows_128b = [](int64_t to_ld, int64_t from_ld, cu::CUdeviceptr ptr) {
      return to_ld ? to_ld % 64 == 0 : from_ld % 64 == 0 && ptr % 128 == 0;
    };
    kernel_options.rows_128b =
        rows_128b(plan.restrided_lda, ld.a, k.a) && rows_128b(plan.restrided_ldb, ld.b, k.b);
    // As the kernel will read them: A's K-major rows K apart (the caller's or the copy's), B's the
    // same or, row-major, N apart, and C M apart.
    auto packed_rows = [&](int64_t to_ld, int64_t from_ld, cu::CUdeviceptr ptr, int64_t row) {
      return to_ld ? to_ld == row : from_ld == row && ptr % 16 == 0;
    };
    kernel_options.packed =
        !kernel_options.a_mn && !c_row && ld.c == s.m &&
        packed_rows(plan.restrided_lda, ld.a, k.a, s.k) &&
        packed_rows(plan.restrided_ldb, ld.b, k.b, kernel_options.b_mn ? s.n : s.k);
  }
  // kiln tune may have measured a tile kernel there, which stores C column-major only.
  plan.choice = ChooseGemm(plan.size, compute_capability, kernel_options, c_row ? nullptr : tuned);
  if (c_row && plan.choice.kernel.rfind("gemm/bf16_skinny", 0) != 0)
    return absl::InternalError(
        absl::StrCat("kiln gemm: ", plan.choice.kernel, " cannot store C row-major"));
  auto use_strided = [&] {
    GemmOptions any = kernel_options;
    any.a_mn = any.b_mn = any.any_m = any.c_row =
        false;  // its C strides (sC0, sC1) follow plan.c_row
    plan.choice = {
        GemmVariantName("gemm/bf16_strided", any),
        "operands its kernel cannot stride as given, in a problem of at most 2^24 flops and "
        "K <= 128, or K <= 32: the strided mma.sync kernel (a copy first would cost more than it "
        "saves)"};
  };
  if (strided_instead && !ReadsAnyStrides(plan.choice.kernel))
    use_strided();  // TMA-able sizes, odd strides
  plan.a_mn = kernel_options.a_mn, plan.b_mn = kernel_options.b_mn;
  if (compute_capability == 90 && plan.choice.kernel.rfind("gemm/bf16_skinny", 0) == 0 &&
      (ld.a != plan.size.k || ld.b != plan.size.k)) {  // it reads packed rows
    if (strided_suffices) {
      use_strided();
    } else {
      if (ld.a != plan.size.k) plan.restrided_lda = plan.size.k;
      if (ld.b != plan.size.k) plan.restrided_ldb = plan.size.k;
    }
  }
  // A C whose leading dimension the chosen kernel cannot store (it takes C packed): the strided
  // kernel, which takes any, rather than a refusal (not for the swiglu and rope forms, which
  // check their own C).
  if (!TakesCAsGiven(plan.choice.kernel, options, terms, ld.c, c_row ? plan.size.n : plan.size.m) &&
      terms != "swiglu" && terms != "rope") {
    use_strided();
    plan.restrided_lda = plan.restrided_ldb = 0;  // (it reads A and B as given too)
  }
  if (plan.restrided_lda || plan.restrided_ldb) {
    // The copy's grid: a block per row and 2048 columns (y at most 65535).
    const int64_t longest = std::max(plan.restrided_lda, plan.restrided_ldb);
    if (longest > int64_t{65535} * 2048)
      return Invalid(absl::StrCat(
          "rows of ", longest, " elements past what ", kRestrideKernel,
          " copies (65535 * 2048): give A and B leading dimensions that are multiples of 8"));
    if (plan.restrided_lda) ld.a = plan.restrided_lda, k.a = 16;  // the copy's, aligned
    if (plan.restrided_ldb) ld.b = plan.restrided_ldb, k.b = 16;
    const char* which = plan.restrided_lda && plan.restrided_ldb ? "A and B"
                        : plan.restrided_lda                     ? "A"
                                                                 : "B";
    absl::StrAppend(&plan.choice.why, "; ", which, " first copied into rows 16 bytes apart (",
                    kRestrideKernel, "): the kernel cannot stride ",
                    plan.restrided_lda && plan.restrided_ldb ? "them" : "it", " as given");
  }

  // What the chosen kernel can take beyond packed operands.
  const std::string& name = plan.choice.kernel;
  const bool any_strides = ReadsAnyStrides(name);
  const bool tiles = name.rfind("gemm/bf16_sm90", 0) == 0;
  const bool c_map = StoresCThroughMap(name, options);
  const bool c_like_inputs = EpilogueReadsMatrices(terms);  // laid out with column stride M
  const bool wide = IsWideStageKernel(name);                // a row-major B too
  if (!any_strides && !tiles &&
      (plan.a_mn || (plan.b_mn && !wide)))  // ChooseGemm does not pick it then
    return absl::InternalError(
        absl::StrCat(name, wide ? " reads a K-major A only" : " reads K-major A and B only"));
  const int64_t b_packed = plan.b_mn ? plan.size.n : plan.size.k;
  if (!any_strides && !tiles && (ld.a != plan.size.k || ld.b != b_packed))
    return Invalid(absl::StrCat(name, " reads packed A and B: lda must be K (", plan.size.k,
                                ") and ldb ", plan.b_mn ? "N (" : "K (", b_packed, ")"));
  const int64_t c_packed = c_row ? plan.size.n : plan.size.m;  // a row-major C's rows are N apart
  if (!TakesCAsGiven(name, options, terms, ld.c, c_packed))    // (swiglu, rope: checked here)
    return Invalid(absl::StrCat(name, " takes ", c_like_inputs ? "C, C_in and residual" : "C",
                                " packed: ldc must be ", o.c_row_major != c_row ? "N (" : "M (",
                                c_packed, ")"));
  if (!any_strides) {  // TMA (the tiles) or 16-byte loads (the skinny kernel): 16-byte strides and
                       // addresses
    const std::string reads = absl::StrCat(name, " reads A and B 16 bytes at a time: ");
    if (ld.a % 8 || ld.b % 8) return Invalid(reads + "lda and ldb must be multiples of 8");
    if (k.a % 16 || k.b % 16) return Invalid(reads + "16-byte aligned pointers");
    if (c_map && (ld.c % 8 || k.c % 16))
      return Invalid(
          "the tile kernels store C through TMA: ldc a multiple of 8 and C 16-byte aligned");
    if (c_map &&
        ((Has(terms, "scale") && k.c_in % 16) || (Has(terms, "residual") && k.residual % 16)))
      return Invalid(
          "the tile kernels read the epilogue's C_in and residual through TMA: 16-byte aligned "
          "pointers");
  }
  return plan;
}

// The terms gemm/epilogue_pass computes (all but the row-pairing swiglu and rope).
bool EpiloguePassTakes(const std::string& terms) {
  return !terms.empty() && !Has(terms, "swiglu") && !Has(terms, "rope");
}

}  // namespace

absl::Status RunGemm(const GemmSize& size, const GemmOptions& options, const GemmOperands& operands,
                     int compute_capability, GemmDevice& device, const GemmTuneCache* tuned);

// The product into an f32 scratch M x N (column-major, packed) by the plain kernel, then
// gemm/epilogue_pass.<out> over it into C. `missing`: the fused variant's absence, reported where
// the pass cannot run either (its own bundle, or the plain f32 kernel's, absent too).
absl::Status RunEpiloguePass(const GemmSize& size, const GemmOptions& options,
                             const GemmOperands& o, int compute_capability, GemmDevice& device,
                             const GemmTuneCache* tuned, const absl::Status& missing) {
  const std::string pass = absl::StrCat(kEpiloguePassKernel, ".", options.out_type);
  auto or_missing = [&](const absl::Status& s) {
    return absl::IsNotFound(s) && !missing.ok() ? missing : s;
  };
  if (absl::StatusOr<const Manifest*> m = device.ManifestOf(pass); !m.ok())
    return or_missing(m.status());
  absl::StatusOr<uint64_t> acc = device.Scratch(2, static_cast<size_t>(size.m * size.n * 4));
  if (!acc.ok()) return acc.status();
  GemmOptions plain = options;
  plain.epilogue = "", plain.out_type = "f32";
  GemmOperands p = o;
  p.c = *acc, p.ldc = 0, p.c_row_major = false, p.alpha = 1, p.beta = 0;
  p.c_in = p.bias = p.residual = 0;
  if (absl::Status st = RunGemm(size, plain, p, compute_capability, device, tuned); !st.ok())
    return or_missing(st);
  const std::string& t = options.epilogue;
  const int activation = Has(t, "relu") ? 1 : Has(t, "gelu") ? 2 : Has(t, "silu") ? 3 : 0;
  const int64_t ldc = o.ldc ? o.ldc : o.c_row_major ? size.n : size.m;
  auto or_acc = [&](cu::CUdeviceptr ptr) { return Arg::Ptr(ptr ? ptr : *acc); };  // (unread)
  const bool scale = Has(t, "scale");
  return device.Launch(
      pass,
      {Arg::Ptr(*acc), Arg::Ptr(o.c), or_acc(scale ? o.c_in : 0),
       or_acc(Has(t, "bias_row") || Has(t, "bias_col") ? o.bias : 0),
       or_acc(Has(t, "residual") ? o.residual : 0), Arg::I32(static_cast<int32_t>(size.m)),
       Arg::I64(o.c_row_major ? ldc : 1), Arg::I64(o.c_row_major ? 1 : ldc),
       Arg::F32(scale ? o.alpha : 1.0f), Arg::F32(scale ? o.beta : 0.0f),
       Arg::I32(scale && o.c_in ? 1 : 0),
       Arg::I32(Has(t, "bias_row")   ? 1
                : Has(t, "bias_col") ? 2
                                     : 0),
       Arg::I32(activation), Arg::I32(Has(t, "residual") ? 1 : 0), Arg::I64(size.m * size.n)});
}

absl::StatusOr<GemmPlan> PlanGemm(const GemmSize& size, const GemmOptions& options,
                                  const GemmOperands& o, int compute_capability,
                                  const GemmTuneCache* tuned) {
  if (compute_capability < 80)
    return Invalid(absl::StrCat("compute capability ", compute_capability,
                                ": kiln's GEMM kernels run on sm_80 and later (80, 90, 100)"));
  if (size.m < 1 || size.n < 1 || size.k < 1)
    return Invalid(
        absl::StrCat("M, N, K must be at least 1 (got ", size.m, "x", size.n, "x", size.k, ")"));
  if (size.m > INT32_MAX || size.n > INT32_MAX || size.k > INT32_MAX)
    return Invalid("M, N and K must fit in 32 bits");
  absl::StatusOr<std::string> terms = CanonicalEpilogue(options.epilogue);
  if (!terms.ok()) return terms.status();
  const bool fp8 = IsFp8Type(options.in_type);
  if (!fp8 && !options.scaling.empty())
    return Invalid(absl::StrCat("a scaling ('", options.scaling, "') is for 8-bit inputs"));
  if (!fp8 && options.in_type != "bf16" && options.in_type != "f16")
    return Invalid(absl::StrCat("input type '", options.in_type, "': bf16, f16, e4m3 or e5m2"));
  if (!options.in_type_b.empty() && (!fp8 || !IsFp8Type(options.in_type_b)))
    return Invalid(absl::StrCat("B's own type '", options.in_type_b, "' is for 8-bit A and B (",
                                options.in_type, " A given): e4m3 or e5m2 each"));
  if (options.out_type != "bf16" && options.out_type != "f16" && options.out_type != "f32")
    return Invalid(absl::StrCat("output type '", options.out_type, "': bf16, f16 or f32"));
  if (!o.a || !o.b || !o.c) return Invalid("A, B and C need device pointers");
  // Each operand on its element's boundary: a load of an element across it faults on a GPU
  // (misaligned address), which no kernel can take as given.
  const int in_bytes = fp8 ? 1 : 2, out_bytes = options.out_type == "f32" ? 4 : 2;
  for (auto [name, ptr, bytes] :
       {std::tuple{"A", o.a, in_bytes}, std::tuple{"B", o.b, in_bytes},
        std::tuple{"C", o.c, out_bytes}, std::tuple{"C_in", o.c_in, out_bytes},
        std::tuple{"residual", o.residual, out_bytes}})
    if (ptr % bytes)
      return Invalid(absl::StrCat(name, " at 0x", absl::Hex(ptr), " is not on a ", bytes,
                                  "-byte boundary (its elements' size)"));
  // alpha and beta other than 1 and 0 say a term the epilogue does not name (C = A B would drop
  // them without a word).
  if (!Has(*terms, "scale") && (o.alpha != 1 || o.beta != 0))
    return Invalid(absl::StrCat("alpha = ", o.alpha, " and beta = ", o.beta,
                                " are read with the epilogue's 'scale' term only; the epilogue '",
                                *terms, "' has none (add \"scale\" to GemmOptions::epilogue)"));
  // (alpha alone, beta = 0, reads no C_in: RunGemm computes it in the epilogue pass.)
  for (auto [term, ptr, name] :
       {std::tuple{"scale", o.c_in, "C_in"}, std::tuple{"bias_row", o.bias, "bias"},
        std::tuple{"bias_col", o.bias, "bias"}, std::tuple{"residual", o.residual, "residual"}})
    if (Has(*terms, term) && !ptr && (std::string(term) != "scale" || o.beta != 0))
      return Invalid(absl::StrCat(
          "the epilogue's '", term, "' needs ", name,
          std::string(term) != "scale" ? "" : absl::StrCat(" (beta = ", o.beta, " scales it)")));
  const int64_t a_rows = o.a_col_major ? size.m : size.k, b_rows = o.b_row_major ? size.n : size.k;
  if (o.lda && o.lda < a_rows)
    return Invalid(
        absl::StrCat("lda = ", o.lda, " is less than ", o.a_col_major ? "M = " : "K = ", a_rows));
  if (o.ldb && o.ldb < b_rows)
    return Invalid(
        absl::StrCat("ldb = ", o.ldb, " is less than ", o.b_row_major ? "N = " : "K = ", b_rows));
  if (fp8) return PlanFp8Gemm(size, options, *terms, o, compute_capability, tuned);
  const bool swiglu = *terms == "swiglu", rope = *terms == "rope";
  if (swiglu) {
    if (absl::Status st = CheckSwiglu(size, o); !st.ok()) return st;
  } else {
    if (rope)
      if (absl::Status st = CheckRope(size, o); !st.ok()) return st;
    const int64_t c_rows = o.c_row_major ? size.n : size.m;  // what ldc strides over
    if (o.ldc && o.ldc < c_rows)
      return Invalid(
          absl::StrCat("ldc = ", o.ldc, " is less than ", o.c_row_major ? "N = " : "M = ", c_rows));
  }
  GemmOperands given = o;
  if (swiglu) given.ldc = 0;  // packed (CheckSwiglu): the kernel's C is its M / 2 rows apart
  const Orientation oriented = Oriented(size, given, compute_capability);
  absl::StatusOr<GemmPlan> plan = PlanChecked(size, options, *terms, oriented.operands,
                                              oriented.c_row, compute_capability, tuned);
  if (plan.ok() && (swiglu || rope) && plan->choice.kernel.rfind("gemm/bf16_sm90", 0) != 0)
    return Invalid(absl::StrCat(
        *terms, " is fused by the sm_90 tile kernels (gemm/bf16_sm90*) alone; ", size.m, "x",
        size.n, "x", size.k, " takes ", plan->choice.kernel, " (", plan->choice.why, ")"));
  if (plan.ok() && oriented.operands.c_row_major != o.c_row_major)
    absl::StrAppend(&plan->choice.why, "; C of ",
                    size.n == 1 ? "one column" : absl::StrCat(size.n, " columns"),
                    ", computed as its transpose C^T = B^T A^T (M and N swapped",
                    oriented.c_row ? ", C^T row-major)" : ")");
  return plan;
}

absl::Status RunGemm(const GemmSize& size, const GemmOptions& options, const GemmOperands& operands,
                     int compute_capability, GemmDevice& device, const GemmTuneCache* tuned) {
  absl::StatusOr<GemmPlan> plan = PlanGemm(size, options, operands, compute_capability, tuned);
  if (!plan.ok()) return plan.status();
  const bool fp8 = IsFp8Type(options.in_type);
  // An epilogue the planned kernel cannot fuse here (alpha without C_in) or whose variant is not
  // bundled: the product in f32, then the epilogue as a pass of its own (RunEpiloguePass). 8-bit
  // inputs on sm_90 too (their tile kernels store an f32 C in every scaling), and there a plain
  // product whose variant is not bundled (an f16 C; a C stored from registers for e5m2 inputs)
  // as a pass of no terms; not on sm_100, whose kernels store bf16 alone. 16-bit inputs into a
  // 16-bit C of the other type (bf16 by bf16 into f16) likewise.
  GemmOptions canonical = options;
  canonical.epilogue = CanonicalEpilogue(options.epilogue).value_or("");  // (PlanGemm checked it)
  const bool by_pass =
      fp8 ? compute_capability == 90 && (EpiloguePassTakes(canonical.epilogue) ||
                                         (canonical.epilogue.empty() && options.out_type != "f32"))
          : EpiloguePassTakes(canonical.epilogue) ||
                (canonical.epilogue.empty() && options.out_type != "f32");
  if (by_pass && Has(canonical.epilogue, "scale") && !operands.c_in)  // (PlanGemm: beta is 0)
    return RunEpiloguePass(size, canonical, operands, compute_capability, device, tuned,
                           absl::OkStatus());
  absl::StatusOr<const Manifest*> manifest = device.ManifestOf(plan->choice.kernel);
  if (!manifest.ok() && absl::IsNotFound(manifest.status()) && by_pass)
    return RunEpiloguePass(size, canonical, operands, compute_capability, device, tuned,
                           manifest.status());
  if (!manifest.ok()) return manifest.status();
  GemmOperands o = fp8 ? operands : Oriented(size, operands, compute_capability).operands;
  if (fp8) ResolveFp8Scales(size, options.scaling, o);
  if (plan->swapped) std::swap(o.a, o.b), std::swap(o.lda, o.ldb);
  if (plan->swapped && fp8) SwapFp8Scales(o);
  const GemmSize& s = plan->size;
  if (plan->c_row && !o.ldc) o.ldc = s.n;  // packed, N apart
  Leading ld = LeadingOf(s, o, plan->a_mn, plan->b_mn);
  // Operands TMA cannot stride: copied first, on the same stream, into rows 16 bytes apart.
  for (int which : {0, 1}) {
    const int64_t to_ld = which == 0 ? plan->restrided_lda : plan->restrided_ldb;
    if (!to_ld) continue;
    const bool mn = which == 0 ? plan->a_mn : plan->b_mn;
    const int64_t along = which == 0 ? s.m : s.n;  // the operand's M or N
    const int64_t rows = mn ? s.k : along, cols = mn ? along : s.k;
    cu::CUdeviceptr& ptr = which == 0 ? o.a : o.b;
    int64_t& from_ld = which == 0 ? ld.a : ld.b;
    absl::StatusOr<uint64_t> copy = device.Scratch(which, static_cast<size_t>(rows * to_ld * 2));
    if (!copy.ok()) return copy.status();
    absl::StatusOr<const Manifest*> restride = device.ManifestOf(kRestrideKernel);
    if (!restride.ok()) return restride.status();
    const std::map<std::string, int64_t> sizes = {
        {"rows", rows}, {"cols", cols}, {"lds", from_ld}, {"ldd", to_ld}};
    std::vector<Arg> args;
    for (const ParamSpec& p : (*restride)->params) {
      if (p.kind == ParamSpec::Kind::kPointer && (p.name == "src" || p.name == "dst"))
        args.push_back(Arg::Ptr(p.name == "src" ? ptr : *copy));
      else if (p.kind == ParamSpec::Kind::kI32 && sizes.count(p.name))
        args.push_back(Arg::I32(static_cast<int32_t>(sizes.at(p.name))));
      else
        return absl::InternalError(
            absl::StrCat(kRestrideKernel, ": no value for its parameter '", p.name, "'"));
    }
    if (absl::Status st = device.Launch(kRestrideKernel, std::move(args)); !st.ok()) return st;
    ptr = *copy, from_ld = to_ld;
  }
  // Element strides of (row, col) of A (M x K), B (K x N), C, for kernels that index generically.
  const NamedArgs named{
      .i32 = {{"M", s.m},
              {"N", s.n},
              {"K", s.k},
              {"sA0", plan->a_mn ? 1 : ld.a},
              {"sA1", plan->a_mn ? ld.a : 1},
              {"sB0", plan->b_mn ? ld.b : 1},
              {"sB1", plan->b_mn ? 1 : ld.b},
              {"sC0", plan->c_row ? ld.c : 1},
              {"sC1", plan->c_row ? 1 : ld.c},
              {"split", plan->choice.split},
              {"rope_rows", o.rope_rows},
              {"rope_dim", o.rope_dim},
              {"rope_period", o.rope_period}},
      .i64 = {{"sa_row", o.sa_row}, {"sa_k", o.sa_k}, {"sb_row", o.sb_row}, {"sb_k", o.sb_k}},
      .pointers = {{"A", o.a},
                   {"B", o.b},
                   {"C", o.c},
                   {"C_in", o.c_in},
                   {"bias", o.bias},
                   {"residual", o.residual},
                   {"rope_angles", o.rope_angles},
                   {"scale_a", o.scale_a},
                   {"scale_b", o.scale_b}}};
  const Manifest& m = **manifest;
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    using Kind = ParamSpec::Kind;
    if (std::optional<Arg> arg = NamedArg(p, named)) {
      args.push_back(*std::move(arg));
    } else if (p.kind == Kind::kF32 && (p.name == "alpha" || p.name == "beta")) {
      args.push_back(Arg::F32(p.name == "alpha" ? o.alpha : o.beta));
    } else if (p.kind == Kind::kScheduleTable) {
      args.push_back(Arg::Schedule());
    } else if (p.kind == Kind::kWorkspace) {
      args.push_back(Arg::Workspace());
    } else if (p.kind == Kind::kTensorMap && named.pointers.count(p.tensor_map.tensor) &&
               p.tensor_map.rank() == 2) {
      // The ragged kernels' rank-2 maps: {K, rows} for K-major A and B, {rows, K} for MN-major
      // ones, {M, N} for C and the epilogue's C_in and residual (packed); the leading dimension
      // is the one stride.
      const std::string& t = p.tensor_map.tensor;
      const bool mn = (t == "A" && plan->a_mn) || (t == "B" && plan->b_mn),
                 c_like = t != "A" && t != "B";
      const uint64_t rows = t == "A" ? s.m : s.n;
      // A swiglu's C has half the product's rows, packed (CheckSwiglu).
      const int64_t c_rows = t == "C" && Has(plan->choice.kernel, "swiglu") ? s.m / 2 : s.m;
      const bool c_row = c_like && plan->c_row;  // {N, M}: the rows are M's
      const uint64_t inner = c_row    ? s.n
                             : c_like ? c_rows
                             : mn     ? rows
                                      : s.k,
                     outer = c_row    ? s.m
                             : c_like ? s.n
                             : mn     ? s.k
                                      : rows;
      const int64_t stride = t == "A"   ? ld.a
                             : t == "B" ? ld.b
                             : t == "C" ? (c_rows == s.m ? ld.c : c_rows)
                             : c_row    ? s.n  // C_in, residual: packed as C
                                        : s.m;
      const uint64_t bytes = TmaElementBytes(p.tensor_map.dtype);
      args.push_back(Arg::Tensor(named.pointers.at(t), {inner, outer},
                                 {static_cast<uint64_t>(stride) * bytes}));
    } else {
      return absl::InternalError(absl::StrCat(m.name, " (", m.source,
                                              "): the GEMM entry point has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return device.Launch(plan->choice.kernel, std::move(args));
}

bool GemmRunner::Bundled(const std::string& kernel) const {
  std::error_code ec;
  return std::filesystem::exists(absl::StrCat(bundle_dir_, "/", BundleStem(kernel), ".manifest"),
                                 ec);
}

namespace {

// Every input that decides RunGemm's launches on one device and stream (GemmRunner's memo).
std::string GemmCallKey(const GemmSize& s, const GemmOptions& o, const GemmOperands& x, int cc,
                        cu::CUcontext context, cu::CUstream stream) {
  // A field added to these structs must join the key: a call differing only there would repeat
  // another's launches.
  static_assert(sizeof(GemmOperands) == 168 && sizeof(GemmOptions) == 6 * sizeof(std::string) + 16,
                "GemmCallKey: add the new field");
  CallKey k;
  k.Add(context).Add(stream).Add(cc).Add(s.m).Add(s.n).Add(s.k);
  k.Add(o.in_type).Add(o.out_type).Add(o.epilogue).Add(o.in_type_b).Add(o.scaling).Add(o.fp8_tile);
  k.Add(o.fp8_split).Add(o.any_m).Add(o.a_mn).Add(o.b_mn).Add(o.c_row).Add(o.tma_strides);
  k.Add(o.rows_128b).Add(o.packed);
  k.Add(x.a).Add(x.b).Add(x.c).Add(x.lda).Add(x.ldb).Add(x.ldc).Add(x.c_row_major);
  k.Add(x.a_col_major).Add(x.b_row_major).Add(x.alpha).Add(x.beta).Add(x.c_in).Add(x.bias);
  k.Add(x.residual).Add(x.rope_angles).Add(x.rope_rows).Add(x.rope_dim).Add(x.rope_period);
  k.Add(x.scale_a).Add(x.scale_b).Add(x.sa_row).Add(x.sa_k).Add(x.sb_row).Add(x.sb_k);
  return k.Take();
}

}  // namespace

absl::Status GemmRunner::Run(const GemmSize& size, const GemmOptions& options,
                             const GemmOperands& operands, cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const int cc = (*d)->compute_capability();
  const GemmTuneCache* tuned = nullptr;
  if (!tune_path_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tuned_) {
      absl::StatusOr<GemmTuneCache> read = GemmTuneCache::ReadExisting(tune_path_);
      if (!read.ok()) return read.status();
      tuned_ = *std::move(read);
    }
    tuned = &*tuned_;
  }
  GpuOpDevice device(kernels_, stream, [&](int which, size_t bytes) {
    return scratch_.Get(stream, which, bytes,
                        which == 2 ? std::string("kiln gemm: the product in f32 before the "
                                                 "epilogue pass")
                                   : absl::StrCat("kiln gemm: the copy of ", which == 0 ? "A" : "B",
                                                  " into rows 16 bytes apart"));
  });
  // A call made before on this device and stream repeats its prepared launches.
  return device.RunRemembered(memo_,
                              GemmCallKey(size, options, operands, cc, (*d)->context(), stream),
                              [&] { return RunGemm(size, options, operands, cc, device, tuned); });
}

}  // namespace kiln::rt
