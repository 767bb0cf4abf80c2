#include "kiln/runtime/gemm.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kiln/runtime/driver.h"
#include "kiln/runtime/manifest.h"

namespace kiln::rt {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(absl::StrCat("kiln gemm: ", message)); }

bool Has(const std::string& terms, const char* term) {
  for (size_t at = terms.find(term); at != std::string::npos; at = terms.find(term, at + 1)) {
    const size_t end = at + std::string(term).size();
    if ((at == 0 || terms[at - 1] == '.') && (end == terms.size() || terms[end] == '.')) return true;
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

}  // namespace

bool ReadsAnyStrides(const std::string& kernel) {
  return kernel.rfind("reference/", 0) == 0 || kernel.rfind("gemm/bf16_strided", 0) == 0;
}

absl::StatusOr<GemmPlan> PlanGemm(const GemmSize& size, const GemmOptions& options, const GemmOperands& o,
                                  int compute_capability, const GemmTuneCache* tuned) {
  if (size.m < 1 || size.n < 1 || size.k < 1)
    return Invalid(absl::StrCat("M, N, K must be at least 1 (got ", size.m, "x", size.n, "x", size.k, ")"));
  if (size.m > INT32_MAX || size.n > INT32_MAX || size.k > INT32_MAX) return Invalid("M, N and K must fit in 32 bits");
  if (options.in_type != "bf16" && options.in_type != "f16")
    return Invalid(absl::StrCat("input type '", options.in_type, "': bf16 or f16"));
  if (options.out_type != "bf16" && options.out_type != "f16" && options.out_type != "f32")
    return Invalid(absl::StrCat("output type '", options.out_type, "': bf16, f16 or f32"));
  absl::StatusOr<std::string> terms = CanonicalEpilogue(options.epilogue);
  if (!terms.ok()) return terms.status();
  if (!o.a || !o.b || !o.c) return Invalid("A, B and C need device pointers");
  for (auto [term, ptr, name] : {std::tuple{"scale", o.c_in, "C_in"}, std::tuple{"bias_row", o.bias, "bias"},
                                 std::tuple{"bias_col", o.bias, "bias"}, std::tuple{"residual", o.residual, "residual"}})
    if (Has(*terms, term) && !ptr) return Invalid(absl::StrCat("the epilogue's '", term, "' needs ", name));
  const int64_t a_rows = o.a_col_major ? size.m : size.k, b_rows = o.b_row_major ? size.n : size.k;
  if (o.lda && o.lda < a_rows)
    return Invalid(absl::StrCat("lda = ", o.lda, " is less than ", o.a_col_major ? "M = " : "K = ", a_rows));
  if (o.ldb && o.ldb < b_rows)
    return Invalid(absl::StrCat("ldb = ", o.ldb, " is less than ", o.b_row_major ? "N = " : "K = ", b_rows));
  const int64_t c_rows = o.c_row_major ? size.n : size.m;  // what ldc strides over
  if (o.ldc && o.ldc < c_rows)
    return Invalid(absl::StrCat("ldc = ", o.ldc, " is less than ", o.c_row_major ? "N = " : "M = ", c_rows));

  // A row-major C is computed as C^T = B^T A^T: the same kernels with A and B, M and N, and the
  // bias's axis swapped.
  GemmPlan plan;
  plan.swapped = o.c_row_major;
  plan.size = o.c_row_major ? GemmSize{size.n, size.m, size.k} : size;
  GemmOptions kernel_options = options;
  kernel_options.epilogue = *terms;
  // Swapped, the kernel's A is B^T (MN-major where B is row-major) and its B is A^T.
  kernel_options.a_mn = o.c_row_major ? o.b_row_major : o.a_col_major;
  kernel_options.b_mn = o.c_row_major ? o.a_col_major : o.b_row_major;
  if (o.c_row_major) {
    kernel_options.epilogue = absl::StrReplaceAll(*terms, {{"bias_row", "bias_col"}, {"bias_col", "bias_row"}});
    absl::StatusOr<std::string> reordered = CanonicalEpilogue(kernel_options.epilogue);
    if (!reordered.ok()) return reordered.status();
    kernel_options.epilogue = *reordered;
  }
  plan.choice = ChooseGemm(plan.size, compute_capability, kernel_options, tuned);
  plan.a_mn = kernel_options.a_mn, plan.b_mn = kernel_options.b_mn;

  // What the chosen kernel can take beyond packed operands.
  GemmOperands k = o;
  if (o.c_row_major) std::swap(k.a, k.b), std::swap(k.lda, k.ldb);
  const Leading ld = LeadingOf(plan.size, k, plan.a_mn, plan.b_mn);
  const std::string& name = plan.choice.kernel;
  const bool any_strides = ReadsAnyStrides(name);
  const bool tiles = name.rfind("gemm/bf16_sm90", 0) == 0;
  const bool c_map = tiles && !Has(name, "any_m") && options.out_type != "f32";
  const bool c_like_inputs = Has(*terms, "scale") || Has(*terms, "residual");  // laid out with column stride M
  if (!any_strides && !tiles && (plan.a_mn || plan.b_mn))  // ChooseGemm does not pick it then
    return absl::InternalError(absl::StrCat(name, " reads K-major A and B only"));
  if (!any_strides && !tiles && (ld.a != plan.size.k || ld.b != plan.size.k))
    return Invalid(absl::StrCat(name, " reads packed A and B: lda and ldb must be K (", plan.size.k, ")"));
  if (!any_strides && ld.c != plan.size.m && (!c_map || c_like_inputs))
    return Invalid(absl::StrCat(name, " takes ", c_like_inputs ? "C, C_in and residual" : "C",
                                " packed: ldc must be ", o.c_row_major ? "N (" : "M (", plan.size.m, ")"));
  if (!any_strides) {  // TMA (the tiles) or 16-byte loads (the skinny kernel): 16-byte strides and addresses
    const std::string reads = absl::StrCat(name, " reads A and B 16 bytes at a time: ");
    if (ld.a % 8 || ld.b % 8) return Invalid(reads + "lda and ldb must be multiples of 8");
    if (k.a % 16 || k.b % 16) return Invalid(reads + "16-byte aligned pointers");
    if (c_map && (ld.c % 8 || k.c % 16))
      return Invalid("the tile kernels store C through TMA: ldc a multiple of 8 and C 16-byte aligned");
  }
  return plan;
}

absl::Status GemmRunner::Run(const GemmSize& size, const GemmOptions& options, const GemmOperands& operands,
                             cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const GemmTuneCache* tuned = nullptr;
  if (!tune_path_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tuned_) {
      absl::StatusOr<GemmTuneCache> read = GemmTuneCache::Read(tune_path_);
      if (!read.ok()) return read.status();
      tuned_ = *std::move(read);
    }
    tuned = &*tuned_;
  }
  absl::StatusOr<GemmPlan> plan = PlanGemm(size, options, operands, (*d)->compute_capability(), tuned);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<const LoadedKernel*> kernel = kernels_.Get(plan->choice.kernel, stream);
  if (!kernel.ok()) return kernel.status();
  GemmOperands o = operands;
  if (plan->swapped) std::swap(o.a, o.b), std::swap(o.lda, o.ldb);
  const GemmSize& s = plan->size;
  const Leading ld = LeadingOf(s, o, plan->a_mn, plan->b_mn);
  // Element strides of (row, col) of A (M x K), B (K x N), C, for kernels that index generically.
  const std::map<std::string, int64_t> ints = {
      {"M", s.m},
      {"N", s.n},
      {"K", s.k},
      {"sA0", plan->a_mn ? 1 : ld.a},
      {"sA1", plan->a_mn ? ld.a : 1},
      {"sB0", plan->b_mn ? ld.b : 1},
      {"sB1", plan->b_mn ? 1 : ld.b},
      {"sC0", 1},
      {"sC1", ld.c},
      {"split", plan->choice.split}};
  const std::map<std::string, cu::CUdeviceptr> pointers = {{"A", o.a},       {"B", o.b},       {"C", o.c},
                                                           {"C_in", o.c_in}, {"bias", o.bias}, {"residual", o.residual}};
  const Manifest& m = (*kernel)->manifest();
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    using Kind = ParamSpec::Kind;
    if (p.kind == Kind::kPointer && pointers.count(p.name)) {
      args.push_back(Arg::Ptr(pointers.at(p.name)));
    } else if (p.kind == Kind::kI32 && ints.count(p.name)) {
      args.push_back(Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    } else if (p.kind == Kind::kF32 && (p.name == "alpha" || p.name == "beta")) {
      args.push_back(Arg::F32(p.name == "alpha" ? o.alpha : o.beta));
    } else if (p.kind == Kind::kScheduleTable) {
      args.push_back(Arg::Schedule());
    } else if (p.kind == Kind::kWorkspace) {
      args.push_back(Arg::Workspace());
    } else if (p.kind == Kind::kTensorMap && pointers.count(p.tensor_map.tensor) && p.tensor_map.rank() == 2) {
      // The ragged kernels' rank-2 maps: {K, rows} for K-major A and B, {rows, K} for MN-major
      // ones, {M, N} for C; the leading dimension is the one stride.
      const std::string& t = p.tensor_map.tensor;
      const bool mn = (t == "A" && plan->a_mn) || (t == "B" && plan->b_mn);
      const uint64_t rows = t == "A" ? s.m : s.n;
      const uint64_t inner = t == "C" ? s.m : mn ? rows : s.k, outer = t == "C" ? s.n : mn ? s.k : rows;
      const int64_t stride = t == "A" ? ld.a : t == "B" ? ld.b : ld.c;
      const uint64_t bytes = p.tensor_map.dtype == TmaDtype::kF32 ? 4 : 2;
      args.push_back(Arg::Tensor(pointers.at(t), {inner, outer}, {static_cast<uint64_t>(stride) * bytes}));
    } else {
      return absl::InternalError(absl::StrCat(m.name, " (", m.source, "): the GEMM entry point has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return (*kernel)->Launch(std::move(args), stream);
}

}  // namespace kiln::rt
