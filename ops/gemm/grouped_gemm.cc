// Grouped GEMMs: the checks, the tile rule and the launch (kiln/ops/grouped_gemm.h).
#include "kiln/ops/grouped_gemm.h"

#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/ops/gemm.h"

namespace kiln::rt {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln grouped-gemm: ", message));
}

const GroupedTile* FindTile(const std::string& kernel) {
  for (const GroupedTile& t : kGroupedTiles)
    if (kernel == t.kernel) return &t;
  return nullptr;
}

absl::Status CheckSize(const GroupedGemmSize& s, const GroupedGemmOptions& o) {
  const GroupedLayout layout = o.layout;
  if (o.in_type != "bf16" && o.in_type != "e4m3")
    return Invalid(absl::StrCat("in_type must be bf16 or e4m3, not '", o.in_type, "'"));
  if (s.groups < 1 || s.groups > kMaxGroupedGroups)
    return Invalid(absl::StrCat("groups must be 1 to ", kMaxGroupedGroups, ", not ", s.groups));
  // Each size named alone: the bindings take N = 0 (nothing to launch) before a call gets here.
  if (s.k < 1) return Invalid(absl::StrCat("K must be at least 1, not ", s.k));
  if (s.rows < 0 || s.n < 1)
    return Invalid(absl::StrCat("sizes must be rows >= 0, N >= 1, not rows ", s.rows, ", N ", s.n));
  // TMA reads x's and w's rows and writes out's: 16 bytes apart.
  if (s.k % 8 || s.n % 8)
    return Invalid(absl::StrCat("K and N must be multiples of 8 (bf16 rows 16 bytes apart), not K ",
                                s.k, ", N ", s.n));
  // e4m3: a row of x or w is K bytes; an expert's weights cover whole 128 x 128 scale blocks.
  if (o.in_type == "e4m3" && (s.k % 16 || s.n % 128))
    return Invalid(absl::StrCat(
        "e4m3: K must be a multiple of 16 (rows 16 bytes apart) and N of ",
        "128 (each expert's weights in whole 128 x 128 scale blocks), not K ", s.k, ", N ", s.n));
  // The kernel indexes in 32 bits: out's elements, w's rows.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.rows > kMax || s.n > kMax || s.rows * s.n > kMax || s.n * s.groups > kMax)  // (no overflow)
    return Invalid(absl::StrCat("out (", s.rows, " x ", s.n, ") and w (", s.groups, " x ", s.n,
                                " rows) must each hold fewer than 2^31 elements"));
  if (layout == GroupedLayout::kMasked && s.rows % s.groups)
    return Invalid(absl::StrCat("the masked layout's rows (", s.rows,
                                ") must be groups x capacity: a multiple of ", s.groups));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ChooseGroupedKernel(const GroupedGemmSize& size,
                                                const GroupedGemmOptions& options) {
  if (absl::Status s = CheckSize(size, options); !s.ok()) return s;
  const bool fp8 = options.in_type == "e4m3";
  auto fits = [&](const GroupedTile& t) { return t.layout == options.layout && t.fp8 == fp8; };
  if (!options.kernel.empty()) {
    const GroupedTile* t = FindTile(options.kernel);
    if (!t || !fits(*t)) {
      std::string names;
      for (const GroupedTile& g : kGroupedTiles)
        if (fits(g)) absl::StrAppend(&names, names.empty() ? "" : ", ", g.kernel);
      return Invalid(absl::StrCat("no ", GroupedLayoutName(options.layout), " ", options.in_type,
                                  " kernel '", options.kernel, "' (", names, ")"));
    }
    return options.kernel;
  }
  // Groups of few rows waste most of a wide tile; the narrow tile streams the weights.
  const bool few = size.rows <= 64 * int64_t{size.groups};
  for (const GroupedTile& t : kGroupedTiles)
    if (fits(t) && (t.cta_n == 64) == few) return std::string(t.kernel);
  return absl::InternalError("kiln grouped-gemm: no kernel for the layout");
}

absl::Status RunGroupedGemm(const GroupedGemmSize& size, const GroupedGemmOptions& options,
                            const GroupedGemmOperands& o, int cc, OpDevice& device) {
  absl::StatusOr<std::string> kernel = ChooseGroupedKernel(size, options);
  if (!kernel.ok()) return kernel.status();
  if (cc != 90)
    return Invalid(absl::StrCat("the grouped kernels run on sm_90 (Hopper), not sm_", cc));
  if (!o.x || !o.w || !o.out || !o.sizes)
    return Invalid(absl::StrCat("x, w, out and the group ",
                                options.layout == GroupedLayout::kMasked ? "counts" : "ends",
                                " must all be given"));
  const bool fp8 = options.in_type == "e4m3";
  if (fp8 && (!o.scale_x || !o.scale_w || o.scale_x % 4 || o.scale_w % 4))
    return Invalid("e4m3: scale_x and scale_w (f32, 4-byte aligned) must be given");
  if (o.x % 16 || o.w % 16 || o.out % 16)
    return Invalid("x, w and out must be 16-byte aligned (TMA reads and writes them)");
  if (o.sizes % 4) return Invalid("the group sizes must be 4-byte aligned (int32)");
  if (size.rows == 0) return absl::OkStatus();
  absl::StatusOr<const Manifest*> manifest = device.ManifestOf(*kernel);
  if (!manifest.ok()) return manifest.status();
  // The kernel's problem: C (N x rows, column-major: out) = A (w, N rows a group) times B (x).
  // The weights' scales by 128-row block of the kernel's A (all experts' rows), then k-block; the
  // tokens' by row, then k-block (GroupedGemmOperands).
  const int64_t k_blocks = (size.k + 127) / 128;
  const NamedArgs named{
      .i32 = {{"M", size.n}, {"N", size.rows}, {"K", size.k}, {"groups", size.groups}},
      .i64 = {{"sa_row", k_blocks}, {"sa_k", 1}, {"sb_row", 1}, {"sb_k", size.rows}},
      .pointers = {{"A", o.w},
                   {"B", o.x},
                   {"C", o.out},
                   {"group_ends", o.sizes},
                   {"group_counts", o.sizes},
                   {"scale_a", o.scale_w},
                   {"scale_b", o.scale_x}}};
  std::vector<Arg> args;
  for (const ParamSpec& p : (*manifest)->params) {
    using Kind = ParamSpec::Kind;
    if (std::optional<Arg> arg = NamedArg(p, named)) {
      args.push_back(*std::move(arg));
    } else if (p.kind == Kind::kTensorMap && p.tensor_map.tensor == "C") {  // out, N x rows
      args.push_back(Arg::Tensor(o.out,
                                 {static_cast<uint64_t>(size.n), static_cast<uint64_t>(size.rows)},
                                 {static_cast<uint64_t>(size.n) * 2}));
    } else if (p.kind == Kind::kTensorMap &&
               (p.tensor_map.tensor == "A" || p.tensor_map.tensor == "B")) {
      const bool a = p.tensor_map.tensor == "A";
      const uint64_t rows = a ? size.n * size.groups : size.rows,
                     bytes = TmaElementBytes(p.tensor_map.dtype);
      args.push_back(Arg::Tensor(a ? o.w : o.x, {static_cast<uint64_t>(size.k), rows},
                                 {static_cast<uint64_t>(size.k) * bytes}));
    } else {
      return absl::InternalError(absl::StrCat((*manifest)->name, " (", (*manifest)->source,
                                              "): the grouped GEMM has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return device.Launch(*kernel, std::move(args));
}

absl::Status GemmRunner::RunGrouped(const GroupedGemmSize& size, const GroupedGemmOptions& options,
                                    const GroupedGemmOperands& operands, cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  GpuOpDevice device(kernels_, stream, [](int, size_t) -> absl::StatusOr<cu::CUdeviceptr> {
    return absl::InternalError("kiln grouped-gemm: takes no scratch buffer");
  });
  return RunGroupedGemm(size, options, operands, (*d)->compute_capability(), device);
}

}  // namespace kiln::rt
