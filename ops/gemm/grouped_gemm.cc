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

absl::Status CheckSize(const GroupedGemmSize& s, GroupedLayout layout) {
  if (s.groups < 1 || s.groups > kMaxGroupedGroups)
    return Invalid(absl::StrCat("groups must be 1 to ", kMaxGroupedGroups, ", not ", s.groups));
  if (s.rows < 0 || s.n < 1 || s.k < 1)
    return Invalid(absl::StrCat("sizes must be rows >= 0, N >= 1, K >= 1, not rows ", s.rows,
                                ", N ", s.n, ", K ", s.k));
  // TMA reads x's and w's rows and writes out's: 16 bytes apart.
  if (s.k % 8 || s.n % 8)
    return Invalid(absl::StrCat("K and N must be multiples of 8 (bf16 rows 16 bytes apart), not K ",
                                s.k, ", N ", s.n));
  // The kernel indexes in 32 bits: out's elements, w's rows.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (s.rows * s.n > kMax || s.n * s.groups > kMax || s.rows > kMax)
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
  if (absl::Status s = CheckSize(size, options.layout); !s.ok()) return s;
  if (!options.kernel.empty()) {
    const GroupedTile* t = FindTile(options.kernel);
    if (!t || t->layout != options.layout) {
      std::string names;
      for (const GroupedTile& g : kGroupedTiles)
        if (g.layout == options.layout)
          absl::StrAppend(&names, names.empty() ? "" : ", ", g.kernel);
      return Invalid(absl::StrCat("no ", GroupedLayoutName(options.layout), " kernel '",
                                  options.kernel, "' (", names, ")"));
    }
    return options.kernel;
  }
  // Groups of few rows waste most of a 256-column tile; the narrow tile streams the weights.
  const bool few = size.rows <= 64 * int64_t{size.groups};
  for (const GroupedTile& t : kGroupedTiles)
    if (t.layout == options.layout && (t.cta_n == 64) == few) return std::string(t.kernel);
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
  if (o.x % 16 || o.w % 16 || o.out % 16)
    return Invalid("x, w and out must be 16-byte aligned (TMA reads and writes them)");
  if (o.sizes % 4) return Invalid("the group sizes must be 4-byte aligned (int32)");
  if (size.rows == 0) return absl::OkStatus();
  absl::StatusOr<const Manifest*> manifest = device.ManifestOf(*kernel);
  if (!manifest.ok()) return manifest.status();
  // The kernel's problem: C (N x rows, column-major: out) = A (w, N rows a group) times B (x).
  const std::map<std::string, int64_t> ints = {
      {"M", size.n}, {"N", size.rows}, {"K", size.k}, {"groups", size.groups}};
  const std::map<std::string, cu::CUdeviceptr> pointers = {
      {"A", o.w}, {"B", o.x}, {"C", o.out}, {"group_ends", o.sizes}, {"group_counts", o.sizes}};
  std::vector<Arg> args;
  for (const ParamSpec& p : (*manifest)->params) {
    using Kind = ParamSpec::Kind;
    if (p.kind == Kind::kPointer && pointers.count(p.name)) {
      args.push_back(Arg::Ptr(pointers.at(p.name)));
    } else if (p.kind == Kind::kI32 && ints.count(p.name)) {
      args.push_back(Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    } else if (p.kind == Kind::kTensorMap && p.tensor_map.tensor == "C") {  // out, N x rows
      args.push_back(Arg::Tensor(o.out,
                                 {static_cast<uint64_t>(size.n), static_cast<uint64_t>(size.rows)},
                                 {static_cast<uint64_t>(size.n) * 2}));
    } else if (p.kind == Kind::kTensorMap &&
               (p.tensor_map.tensor == "A" || p.tensor_map.tensor == "B")) {
      const bool a = p.tensor_map.tensor == "A";
      const uint64_t rows = a ? size.n * size.groups : size.rows;
      args.push_back(Arg::Tensor(a ? o.w : o.x, {static_cast<uint64_t>(size.k), rows},
                                 {static_cast<uint64_t>(size.k) * 2}));
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
