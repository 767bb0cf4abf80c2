// The entry point's tile kernels by name (the GEMM entry point picks one per shape:
// ops/gemm/gemm_choice.cc), each registered alone and as a family of types, storage orders and
// fused epilogues (gemm/bf16_sm90.f16-f32.gelu).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/gemm_spec.h"
#include "examples/registry.h"
#include "kiln/ops/gemm_tiles.h"
#include "ops/gemm/kernels/tile_sm90.h"

namespace kiln::ops {
namespace {

// What each tile kernel is for; its tile, ring and cluster come from kiln/ops/gemm_tiles.h.
struct EntryKernel {
  const char* name;
  const char* purpose;
};
constexpr EntryKernel kEntryKernels[] = {
    {"gemm/bf16_sm90",
     "the GEMM entry point's Hopper kernel: k14 at any M, N, K (M, K multiples of 8), edges by TMA "
     "bounds; whole tiles, split-K or stream-K as the launch's split says"},
    {"gemm/bf16_sm90_n128", "the entry point's kernel for shapes with few 256x256 tiles"},
    {"gemm/bf16_sm90_m64",
     "the entry point's kernel for M <= 64, where the weight read bounds the time"},
    {"gemm/bf16_sm90_n64", "the entry point's kernel for narrow deep shapes"},
    {"gemm/bf16_sm90_n80",
     "the entry point's kernel for 128-row problems whose N splits into 128 columns of 80"},
    {"gemm/bf16_sm90_n96",
     "the entry point's kernel for problems whose tiles of 96 columns fill the GPU"},
    {"gemm/bf16_sm90_n160",
     "the entry point's kernel for 256-row problems whose N splits into 64 columns of 160"},
    {"gemm/bf16_sm90_m64n64",
     "the entry point's kernel for M <= 128 with 4096-wide weights, where their read bounds the "
     "time"},
    // For M <= 64, tiles narrow enough that 128 of them cover N (4096, 6144, 10240), so that every
    // CTA streams the weights; each with a ring as deep as the shared memory holds.
    {"gemm/bf16_sm90_m64n32", "the entry point's kernel for M <= 64 where N is about 4096"},
    {"gemm/bf16_sm90_m64n48", "the entry point's kernel for M <= 64 where N is about 6144"},
    {"gemm/bf16_sm90_m64n16",
     "the entry point's kernel for a C of 16 columns or fewer whose A is the weights"},
    {"gemm/bf16_sm90_m64n80", "the entry point's kernel for M <= 64 where N is 10240 or more"},
    {"gemm/bf16_sm90_n192",
     "the entry point's kernel where N splits into whole tiles of 192 columns (2112 = 11 x 192) "
     "and its table's measured lines pick it, and for 8-bit inputs scaled tensorwise or rowwise "
     "where each CTA takes 8 tiles or more"},
};
// 8-bit inputs take tiles of at most 128 columns, or 128x192 ones (TakesFp8); in pairs sharing B,
// each CTA reads a quarter less per stage from L2 than alone (docs/perf/2026-11-29-fp8-gemm.md).
constexpr EntryKernel kFp8EntryKernels[] = {
    {"gemm/bf16_sm90_n128c2",
     "128x128 tiles for 8-bit inputs in pairs sharing B (by name: the rule takes 128x128 alone)"},
    {"gemm/bf16_sm90_m192",
     "192x128 tiles for 8-bit inputs: three consumer warpgroups, so that two keep the tensor cores "
     "busy while one promotes"},
};
static_assert(std::size(kFp8EntryKernels) == std::size(rt::kSm90Fp8Tiles));
static_assert(
    std::size(kEntryKernels) == std::size(rt::kSm90Tiles) &&
        [] {
          for (const EntryKernel& e : kEntryKernels)
            if (!rt::HasSm90Tile(e.name)) return false;
          return true;
        }(),
    "one purpose per tile of kiln/ops/gemm_tiles.h, by its name");

// The kernel's shape as kiln/ops/gemm_tiles.h lists it.
TileShape ShapeOf(const rt::Sm90Tile& t) {
  return {.bm = t.cta_m, .bn = t.cta_n, .stages = t.stages, .cluster = t.cluster};
}

// Its summary in `kiln list`: the purpose, then the shape.
std::string Summary(const EntryKernel& e, const rt::Sm90Tile& t) {
  return absl::StrCat(
      e.purpose, ": ", t.cta_m, "x", t.cta_n, " CTA tiles",
      t.cluster > 1 ? absl::StrCat(" in clusters of ", t.cluster, " sharing B") : "", ", ",
      t.stages, " stages");
}

// Whether a tile takes 8-bit inputs scaled so (rt::TakesFp8).
bool TakesFp8(const TileShape& shape, examples::Fp8Scaling scaling) {
  return rt::TakesFp8(
      shape.bm, shape.bn,
      scaling == examples::Fp8Scaling::kBlock || scaling == examples::Fp8Scaling::kBlockT);
}

// Whether it takes any 8-bit inputs, and the bundled 8-bit variants it takes.
bool TakesFp8(const TileShape& shape) { return TakesFp8(shape, examples::Fp8Scaling::kTensor); }
std::vector<std::string> BundledFp8Variants(const TileShape& shape) {
  std::vector<std::string> v = examples::kBundledFp8Variants;
  if (!TakesFp8(shape, examples::Fp8Scaling::kBlock))
    std::erase_if(v, [](const std::string& x) { return x.find("block") != std::string::npos; });
  return v;
}

// The same kernels with other element types and fused epilogues, by name. MN-major operands are
// read in 64-wide blocks of M and N: tiles of 80, 96 or 160 columns take K-major ones only (the
// name says so at build time, and the entry point does not pick them).
examples::ExampleFamily Family(const char* base, TileShape shape, bool fp8_only = false) {
  examples::ExampleFamily f = examples::GemmFamily(
      base, "the entry point's kernel with other types and a fused epilogue", /*tile=*/true,
      [shape](const std::string& name, const GemmVariant& v) -> absl::StatusOr<KernelDef> {
        if ((v.a_mn || v.b_mn) && shape.bn % 64)
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": MN-major operands need tiles of whole 64-wide blocks, not ",
                           shape.bn, " columns"));
        if (IsFp8(v.in) && !TakesFp8(shape, v.scaling))
          return absl::InvalidArgumentError(absl::StrCat(
              name, ": 8-bit inputs take tiles of at most 128 columns that divide 128, or 128x192 ",
              "tiles tensorwise or rowwise; not ", shape.bm, "x", shape.bn, " ",
              examples::Fp8ScalingName(v.scaling),
              " (gemm/bf16_sm90_n128, _m192, _n192, _m64, _n64, _m64n64, _m64n32, _m64n16)"));
        TileShape s = shape;
        s.variant = v;
        return BuildTileKernel(name.c_str(), s);
      });
  if (shape.bn % 64)
    std::erase_if(f.bundled,
                  [](const std::string& v) { return v.find("_mn") != std::string::npos; });
  if (fp8_only) f.bundled.clear();  // its 16-bit variants build by name
  if (TakesFp8(shape)) {
    const std::vector<std::string> fp8 = BundledFp8Variants(shape);
    f.bundled.insert(f.bundled.end(), fp8.begin(), fp8.end());
  }
  return f;
}

void RegisterEntryKernel(const EntryKernel& e, bool fp8_only) {
  const rt::Sm90Tile* tile = rt::FindSm90Tile(e.name);  // never null: the asserts above
  const TileShape shape = ShapeOf(*tile);
  const char* name = e.name;
  examples::Register(
      {name, Summary(e, *tile), [name, shape] { return BuildTileKernel(name, shape); }});
  examples::RegisterFamily(Family(name, shape, fp8_only));
}

const bool kEntryKernelsRegistered = [] {
  for (const EntryKernel& e : kEntryKernels) RegisterEntryKernel(e, false);
  for (const EntryKernel& e : kFp8EntryKernels) RegisterEntryKernel(e, true);
  return true;
}();

}  // namespace
}  // namespace kiln::ops
