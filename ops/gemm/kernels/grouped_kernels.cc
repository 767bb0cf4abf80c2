// The grouped tile kernels by name (kiln/ops/grouped_gemm.h lists their tiles): the entry point's
// tile kernel walking groups of C's columns, bf16 in and out, or e4m3 in with blockwise scales
// (the problem swapped: A, the weights, per 128 x 128; B, the tokens, per 1 x 128).
#include "absl/strings/str_cat.h"
#include "examples/registry.h"
#include "kiln/ops/grouped_gemm.h"
#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {
namespace {

static_assert(rt::kMaxGroupedGroups == kMaxGroups);

std::string Summary(const rt::GroupedTile& t) {
  return absl::StrCat(
      "grouped GEMM (", rt::GroupedLayoutName(t.layout), " groups; each group's own A",
      t.fp8 ? "; e4m3, blockwise scales" : "", "): ", t.cta_m, "x", t.cta_n, " CTA tiles",
      t.cluster > 1 ? absl::StrCat(" in clusters of ", t.cluster, " sharing B") : "", ", ",
      t.stages, " stages");
}

const bool kGroupedKernelsRegistered = [] {
  for (const rt::GroupedTile& t : rt::kGroupedTiles) {
    TileShape shape{.bm = t.cta_m,
                    .bn = t.cta_n,
                    .stages = t.stages,
                    .cluster = t.cluster,
                    .grouping = t.layout == rt::GroupedLayout::kMasked ? Grouping::kMasked
                                                                       : Grouping::kContiguous};
    if (t.fp8) shape.variant.in = e4m3, shape.variant.scaling = examples::Fp8Scaling::kBlockT;
    examples::Register(
        {t.kernel, Summary(t), [name = t.kernel, shape] { return BuildTileKernel(name, shape); }});
  }
  return true;
}();

}  // namespace
}  // namespace kiln::ops
