#include "examples/gemm.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kiln/bundle/epilogue_terms.h"
#include "kiln/bundle/schedule.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

// An element type by its GemmSpec name; an unknown name fails the build at `loc`.
Scalar ScalarNamed(Kernel& k, const std::string& name, Loc loc) {
  if (name == "f16") return f16;
  if (name == "f32") return f32;
  if (name != "bf16")
    k.Fail(absl::StrCat("unknown element type '", name, "' (bf16, f16 or f32)"), loc);
  return bf16;
}

// rows x cols matrix stored row-major (stride cols) or column-major (stride rows).
GlobalTensor Matrix(const Value& base, const Value& rows, const Value& cols,
                    const std::string& order, Kernel& k, Loc loc) {
  Value one = k.I32(1, loc);
  if (order == "row") return GlobalTensor(base, {rows, cols}, {cols, one});
  return GlobalTensor(base, {rows, cols}, {one, rows});
}

}  // namespace

void DescribeGemm(Kernel& k, GemmSpec spec, Loc loc) {
  if (spec.tile_m <= 0 || spec.tile_n <= 0 || spec.tile_k <= 0)
    return k.Fail("GEMM tile sizes must be positive", loc);
  spec.source = LocString(loc);
  k.Attribute("gemm", spec.ToString(), loc);
  for (auto [name, tile] :
       {std::pair{"M", spec.tile_m}, std::pair{"N", spec.tile_n}, std::pair{"K", spec.tile_k}})
    if (tile > 1) k.RequireMultiple(name, tile, loc);
}

StridedGemm DeclareStridedGemm(Kernel& k, Scalar in, const EpilogueSpec& epi, Loc loc) {
  Value A = k.PtrParam("A", in, loc), B = k.PtrParam("B", in, loc),
        C = k.PtrParam("C", epi.out, loc);
  StridedGemm g;
  g.M = k.I32Param("M", loc), g.N = k.I32Param("N", loc), g.K = k.I32Param("K", loc);
  Value s[6];
  const char* names[] = {"sA0", "sA1", "sB0", "sB1", "sC0", "sC1"};
  for (int i = 0; i < 6; ++i) s[i] = k.I32Param(names[i], loc);
  g.a = GlobalTensor(A, {g.M, g.K}, {s[0], s[1]});
  g.b = GlobalTensor(B, {g.K, g.N}, {s[2], s[3]});
  g.c = GlobalTensor(C, {g.M, g.N}, {s[4], s[5]});
  g.epilogue = Epilogue::Declare(k, epi, g.M, g.N, s[4], s[5], loc);
  return g;
}

GemmOperands DeclareGemm(Kernel& k, const GemmSpec& spec, Loc loc) {
  DescribeGemm(k, spec, loc);
  Value a = k.PtrParam("A", ScalarNamed(k, spec.in_type, loc), loc);
  Value b = k.PtrParam("B", ScalarNamed(k, spec.in_type, loc), loc);
  Value c = k.PtrParam("C", ScalarNamed(k, spec.out_type, loc), loc);
  GemmOperands g;
  g.M = k.I32Param("M", loc);
  g.N = k.I32Param("N", loc);
  g.K = k.I32Param("K", loc);
  g.A = Matrix(a, g.M, g.K, spec.a_order, k, loc);
  g.B = Matrix(b, g.K, g.N, spec.b_order, k, loc);
  g.C = Matrix(c, g.M, g.N, spec.c_order, k, loc);
  return g;
}

namespace {
// A launch-time expression over M, N, K; one that does not parse fails the build at `loc` (and
// one naming something other than an integer parameter, at Build).
rt::GridExpr Expr(Kernel& k, const std::string& text, Loc loc) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (e.ok()) return *e;
  k.Fail(absl::StrCat("tensor map expression '", text, "': ", e.status().message()), loc);
  return *rt::GridExpr::Parse("1");
}

// A K-major matrix of `rows` x K (rows "M" or "N"): 128B-swizzled boxes of box_rows x 64 (rank 3:
// box_k / 64 of them at once), or with `interleaved`, unswizzled boxes of 8-column slabs in the
// tensor cores' no-swizzle layout (rank 3: box_k / 8 slabs at once; rank 2: one slab).
rt::TensorMapParam KMajorMap(Kernel& k, const std::string& operand, const std::string& rows,
                             int box_rows, int rank, bool by_value, int box_k, bool interleaved,
                             Loc loc, int es = 2) {
  auto Expr = [&](const std::string& text) { return examples::Expr(k, text, loc); };
  rt::TensorMapParam t;
  t.tensor = operand;
  t.by_value = by_value;
  t.swizzle = interleaved ? rt::TmaSwizzle::kNone : rt::TmaSwizzle::k128B;
  if (es == 1) t.dtype = rt::TmaDtype::kU8;        // 8-bit floats: TMA moves bytes
  const int slab = (interleaved ? 16 : 128) / es;  // one 16-byte slab, or one 128B swizzle span
  if (rank == 2) {
    t.dims = {Expr("K"), Expr(rows)};
    t.strides = {Expr(es == 1 ? "K" : "K*2")};
    t.box = {static_cast<uint32_t>(slab), static_cast<uint32_t>(box_rows)};  // one slab per box
    return t;
  }
  t.dims = {Expr(std::to_string(slab)), Expr(rows), Expr("K/" + std::to_string(slab))};
  t.strides = {Expr("K*2"), Expr(std::to_string(slab * 2))};
  t.box = {static_cast<uint32_t>(slab), static_cast<uint32_t>(box_rows),
           static_cast<uint32_t>(box_k / slab)};
  for (int d = 3; d < rank; ++d) {  // unit dims: any legal stride
    t.dims.push_back(Expr("1"));
    t.strides.push_back(Expr(rows + "*K*2"));
    t.box.push_back(1);
  }
  return t;
}
}  // namespace

namespace {
// An MN-major matrix of K x `rows` (rows "M" or "N" contiguous: a column-major A, a row-major B):
// rank 2 {rows, K}, 128B-swizzled boxes of 64 of its rows by bk of K.
rt::TensorMapParam MnMajorMap(Kernel& k, const std::string& operand, const std::string& rows,
                              int bk, bool by_value, Loc loc) {
  rt::TensorMapParam t;
  t.tensor = operand;
  t.by_value = by_value;
  t.swizzle = rt::TmaSwizzle::k128B;
  t.dims = {Expr(k, rows, loc), Expr(k, "K", loc)};
  t.strides = {Expr(k, rows + "*2", loc)};
  t.box = {64, static_cast<uint32_t>(bk)};
  return t;
}
}  // namespace

ElementAt RowsOf(const GlobalTensor& a) {
  return [a](const Value& m, const Value& kk) { return a.At({m, kk}); };
}
ElementAt ColumnsOf(const GlobalTensor& b) {
  return [b](const Value& n, const Value& kk) { return b.At({kk, n}); };
}

namespace {

// Calls chunk(r, c) for each 16-byte chunk of `tile` this thread owns (chunk i goes to thread
// i % threads, or in warp strips); `what` names the caller in the error.
void ForEachChunk(Kernel& k, const SmemTile& tile, const Value& tid, int threads, bool warp_strips,
                  const char* what, const std::function<void(Value row, Value col)>& chunk) {
  const int per_chunk = 16 / ScalarBytes(tile.elem()), chunks_per_row = tile.cols() / per_chunk;
  if (tile.cols() % per_chunk != 0)
    return k.Fail(
        absl::StrCat(what, ": rows of ", tile.cols(), " elements are not whole 16-byte chunks"));
  const int chunks = tile.rows() * chunks_per_row;
  if (warp_strips) {
    const int warps = threads / 32, share = chunks / std::max(warps, 1);
    if (warps == 0 || threads % 32 != 0 || chunks % warps != 0 || share % 32 != 0)
      return k.Fail(absl::StrCat(what, ": ", chunks,
                                 " chunks do not split into strips of whole 32-chunk steps for ",
                                 threads, " threads"));
    Value strip = tid / 32 * share + tid % 32;
    for (int step = 0; step < share; step += 32) {
      Value i = strip + step;
      chunk(i / chunks_per_row, i % chunks_per_row * per_chunk);
    }
    return;
  }
  for (int first = 0; first < chunks; first += threads) {
    Value i = tid + first, r = i / chunks_per_row, c = i % chunks_per_row * per_chunk;
    if (chunks - first >= threads)
      chunk(r, c);
    else
      k.If(i < chunks, [&] { chunk(r, c); });
  }
}

}  // namespace

void CopyTile(Kernel& k, const SmemTile& dst, const ElementAt& src, const Value& tid, int threads,
              bool async, Chunking how) {
  ForEachChunk(k, dst, tid, threads, how.warp_strips, "CopyTile", [&](Value r, Value c) {
    if (async)
      k.CpAsync(dst, r, c, src(r, c), 16, Kernel::CacheAt::kL2, how.l2_prefetch);
    else
      k.Store(dst.At(r, c), k.Load(src(r, c), 16 / ScalarBytes(dst.elem())));
  });
}

void StoreTile(Kernel& k, const SmemTile& src, const ElementAt& dst, const Value& tid, int threads,
               Chunking how) {
  ForEachChunk(k, src, tid, threads, how.warp_strips, "StoreTile", [&](Value r, Value c) {
    k.Store(dst(r, c), k.Load(src.At(r, c), 16 / ScalarBytes(src.elem())));
  });
}

void MmaWarpStep(Kernel& k, Scalar ab, const SmemTile& As, const SmemTile& Bs,
                 const Kernel::WarpTile& w, const Value& lane, int kk, const Regs& acc) {
  std::vector<std::vector<Value>> b;
  for (int n = 0; n < w.mmas_n; ++n)
    b.push_back(k.LdMatrix(Bs, w.n0 + n * 8 + lane % 8, lane / 8 % 2 * 8 + kk, 2));
  for (int m = 0; m < w.mmas_m; ++m) {
    auto a = k.LdMatrix(As, w.m0 + m * 16 + lane % 16, lane / 16 * 8 + kk, 4);
    for (int n = 0; n < w.mmas_n; ++n) {
      const int base = (m * w.mmas_n + n) * 4;
      auto d = k.MmaM16N8K16(ab, a, b[n], {acc[base], acc[base + 1], acc[base + 2], acc[base + 3]});
      for (int i = 0; i < 4; ++i) acc[base + i] = d[i];
    }
  }
}

void StoreAccumulator(Kernel& k, const Regs& acc, int mmas_m, int mmas_n, const ElementAt& dst) {
  Value lane = k.LaneId();
  for (int m = 0; m < mmas_m; ++m)
    for (int n = 0; n < mmas_n; ++n)
      for (int half = 0; half < 2; ++half) {
        const int i = (m * mmas_n + n) * 4 + half * 2;
        k.Store(dst(lane / 4 + (m * 16 + half * 8), lane % 4 * 2 + n * 8),
                k.Vector({Value(acc[i]).To(bf16), Value(acc[i + 1]).To(bf16)}));
      }
}

void StoreTmemRows(Kernel& k, const Tmem& acc, const Value& lane0, const Value& col0, int n,
                   int per_load, const ElementAt& dst, bool no_l1) {
  Value row = lane0 + k.LaneId();
  for (int c = 0; c < n; c += per_load) {
    std::vector<Value> x = k.TcgenLoad(acc, lane0, col0 + c, per_load);  // waits for its registers
    for (int h = 0; h < per_load; h += 8) {
      std::vector<Value> eight;
      for (int i = h; i < h + 8; ++i) eight.push_back(x[i].To(bf16));
      if (no_l1)
        k.StoreNoL1Allocate(dst(row, k.I32(c + h)), k.Vector(eight));
      else
        k.Store(dst(row, k.I32(c + h)), k.Vector(eight));
    }
  }
}

std::function<void(const TileIndexBody&)> ScheduledTiles(Kernel& k, const Value& table, int slots) {
  SmemTile order = k.Smem(i32, slots, 1);
  Value tid = k.ThreadIdx();
  GlobalTensor rows(table, {}, {k.I32(slots), k.I32(1)});  // [cluster][slot]
  k.If(tid < slots, [&] { k.Store(order.At(tid, 0), k.Load(rows.At({k.ClusterIdx(), tid}))); });
  return [&k, order, slots](const TileIndexBody& body) {
    Regs it = k.Registers(Type::Of(i32), 1);
    auto entry = [&] { return k.Load(order.At(Min(it[0], slots - 1), 0)); };
    k.While([&] { return (it[0] < slots) & (entry() != -1); },
            [&] {
              Value e = entry();
              body(e >> 16, e & 0xffff);
              it[0] += 1;
            });
  };
}

std::string ScalarName(Scalar s) {
  return s == f16 ? "f16" : s == f32 ? "f32" : s == e4m3 ? "e4m3" : s == e5m2 ? "e5m2" : "bf16";
}

const char* Fp8ScalingName(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::kTensor:
      return "tensorwise";
    case Fp8Scaling::kRow:
      return "rowwise";
    case Fp8Scaling::kBlock:
      return "blockwise";
    case Fp8Scaling::kBlockT:
      return "blockwise_t";
    case Fp8Scaling::kNone:
      break;
  }
  return "";
}

absl::StatusOr<GemmVariant> ParseGemmVariant(const std::string& options) {
  const size_t dot = options.find('.');
  const std::string types = options.substr(0, dot);
  const size_t dash = types.find('-');  // (within the types: a name that starts otherwise)
  const std::string in = types.substr(0, dash),
                    out = dash == std::string::npos ? "" : types.substr(dash + 1);
  std::string terms = dot == std::string::npos ? "" : options.substr(dot + 1);
  if (dot != std::string::npos && (terms.empty() || terms.front() == '.' || terms.back() == '.' ||
                                   terms.find("..") != std::string::npos))
    return absl::InvalidArgumentError(
        absl::StrCat("options '", options, "': an empty option between dots"));
  // Flags in their order, each followed by '.' or the end.
  auto flag = [&terms](const std::string& f) {
    const bool on = terms == f || terms.rfind(f + ".", 0) == 0;
    if (on) terms = terms.substr(std::min(terms.size(), f.size() + 1));
    return on;
  };
  const bool any_m = flag("any_m"), a_mn = flag("a_mn"), b_mn = flag("b_mn"), c_row = flag("c_row");
  Fp8Scaling scaling = Fp8Scaling::kNone;
  for (Fp8Scaling s :
       {Fp8Scaling::kTensor, Fp8Scaling::kRow, Fp8Scaling::kBlockT, Fp8Scaling::kBlock})
    if (scaling == Fp8Scaling::kNone && flag(Fp8ScalingName(s))) scaling = s;
  auto scalar = [](const std::string& t) -> std::optional<Scalar> {
    if (t == "bf16") return bf16;
    if (t == "f16") return f16;
    if (t == "f32") return f32;
    if (t == "e4m3") return e4m3;
    if (t == "e5m2") return e5m2;
    return std::nullopt;
  };
  // 8-bit A and B of two types: "<a>x<b>".
  const size_t x = in.find('x');
  const std::optional<Scalar> in_type = scalar(in.substr(0, x)), out_type = scalar(out);
  const std::optional<Scalar> in_b =
      x == std::string::npos ? std::nullopt : scalar(in.substr(x + 1));
  if (!in_type || !out_type || *in_type == f32 || IsFp8(*out_type) ||
      (x != std::string::npos && (!in_b || !IsFp8(*in_type) || !IsFp8(*in_b) || *in_b == *in_type)))
    return absl::InvalidArgumentError(
        absl::StrCat("options '", options,
                     "': they start with the input and output types, "
                     "<bf16|f16|e4m3|e5m2>-<bf16|f16|f32>, or 8-bit A and B of two types "
                     "e4m3xe5m2 or e5m2xe4m3 (then the epilogue's terms)"));
  if (IsFp8(*in_type) != (scaling != Fp8Scaling::kNone))
    return absl::InvalidArgumentError(absl::StrCat(
        "options '", options, "': ",
        IsFp8(*in_type) ? "8-bit inputs take a scaling after the flags: tensorwise, rowwise, "
                          "blockwise or blockwise_t"
                        : "a scaling (tensorwise, rowwise, blockwise, blockwise_t) is for 8-bit "
                          "inputs (e4m3, e5m2)"));
  if (IsFp8(*in_type) && (a_mn || b_mn))
    return absl::InvalidArgumentError(absl::StrCat(
        "options '", options, "': 8-bit inputs are read K-major only (no a_mn, b_mn)"));
  // A flag or scaling left over (given twice, or after a later one) is told as such, not as an
  // unknown epilogue term.
  const std::string next = terms.substr(0, terms.find('.'));
  for (const char* f :
       {"any_m", "a_mn", "b_mn", "c_row", "tensorwise", "rowwise", "blockwise", "blockwise_t"})
    if (next == f)
      return absl::InvalidArgumentError(absl::StrCat(
          "options '", options, "': '", next,
          "' given twice or out of order: the flags come in the order any_m, a_mn, b_mn, c_row, "
          "then one scaling, then the epilogue's terms"));
  absl::StatusOr<EpilogueSpec> epilogue = ParseEpilogueTerms(terms, *out_type);
  if (!epilogue.ok()) return epilogue.status();
  // One name a variant: the runtime looks a kernel up by its terms in their canonical order.
  if (absl::StatusOr<std::string> canonical = rt::CanonicalEpilogue(terms);
      canonical.ok() && *canonical != terms)
    return absl::InvalidArgumentError(
        absl::StrCat("options '", options, "': the epilogue's terms go in the order '", *canonical,
                     "' (the name the entry point looks the kernel up by)"));
  return GemmVariant{*in_type, any_m, a_mn, b_mn, c_row, scaling, *epilogue, in_b};
}

ExampleFamily GemmFamily(const std::string& base, const std::string& summary, bool tile,
                         GemmVariantBuild build, bool c_row, bool b_mn) {
  return {
      base, summary,
      [tile, build, c_row, b_mn](const std::string& name,
                                 const std::string& options) -> absl::StatusOr<KernelDef> {
        absl::StatusOr<GemmVariant> v = ParseGemmVariant(options);
        if (!v.ok())
          return absl::InvalidArgumentError(absl::StrCat(name, ": ", v.status().message()));
        if (IsFp8(v->in) && !tile)
          return absl::InvalidArgumentError(absl::StrCat(
              name, ": 8-bit inputs are multiplied by the tile kernels (gemm/bf16_sm90*) alone"));
        if (v->any_m && (!tile || v->epilogue.out == f32))
          return absl::InvalidArgumentError(absl::StrCat(name, ": takes any M already (no any_m)"));
        if ((v->a_mn || (v->b_mn && !b_mn)) && !tile)
          return absl::InvalidArgumentError(
              absl::StrCat(name, b_mn ? ": reads K-major A only (no a_mn)"
                                      : ": reads K-major A and B only (no a_mn, b_mn)"));
        for (auto [pairs, term] :
             {std::pair{v->epilogue.swiglu, "swiglu"}, std::pair{v->epilogue.rope, "rope"}})
          if (pairs && (!tile || v->any_m || (v->epilogue.rope && IsFp8(v->in))))
            return absl::InvalidArgumentError(
                absl::StrCat(name, ": ", term,
                             !tile      ? " is fused by the tile kernels (gemm/bf16_sm90*) alone"
                             : v->any_m ? " takes M a multiple of 16 (no any_m)"
                                        : " takes 16-bit inputs"));
        if (v->c_row && !c_row && !tile)
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": stores C column-major only (no c_row)"));
        return build(name, *v);
      },
      tile    ? kBundledTileVariants
      : c_row ? kBundledRowCVariants
      : b_mn  ? kBundledWideVariants
              : kBundledGemmVariants};
}

ScheduleTable GemmTiles(int tile_m, int tile_n, int groups, int slots) {
  return {absl::StrCat("M/", tile_m), absl::StrCat("N/", tile_n), groups, slots};
}

TmaGemmOperands DeclareTmaGemm(Kernel& k, const TmaGemmShape& shape, Loc loc) {
  if (shape.ragged &&
      (shape.rank != 2 || shape.interleaved || (!shape.c_box_rows && shape.c_swizzle) ||
       (shape.c_box_rows && shape.out_type == "f32") ||
       (shape.c_row_major && (shape.epilogue == "swiglu" || shape.c_box_rows > 64))))
    k.Fail(
        "a ragged TMA GEMM takes rank-2 A and B maps and a C through a 16-bit map or a pointer "
        "(row-major: no swiglu, boxes of at most 64 columns)",
        loc);
  if (!shape.ragged &&
      (shape.in_type != "bf16" || shape.out_type != "bf16" || !shape.epilogue.empty()))
    k.Fail("other element types and epilogues are for ragged TMA GEMMs", loc);
  if ((shape.a_mn || shape.b_mn) && (!shape.ragged || shape.bk != 64))
    k.Fail("MN-major A or B is for ragged TMA GEMMs with k-tiles of 64 (one 128B swizzle span)",
           loc);
  // Ragged: the tile divides nothing. M a multiple of 8 where C goes through a map (its packed
  // columns 16 bytes apart); K any, A's and B's strides being the caller's (the entry point
  // copies operands whose rows are off 16 bytes first, gemm/restride16; a packed K-major operand
  // of K % 8 != 0 fails at its tensor map, naming it).
  if (shape.grouped_a && (!shape.ragged || shape.a_mn || shape.a_edge_rows))
    k.Fail("grouped A is for ragged TMA GEMMs with K-major A and no edge boxes", loc);
  if (shape.ragged && !shape.grouped_a)
    DescribeGemm(k,
                 {.in_type = shape.in_type,
                  .out_type = shape.out_type,
                  .a_order = shape.a_mn ? "col" : "row",
                  .b_order = shape.b_mn ? "row" : "col",
                  .c_order = shape.c_row_major ? "row" : "col",
                  // swiglu pairs rows 8 apart in blocks of 16 (EpilogueSpec::swiglu); C's map
                  // takes rows 16 bytes apart
                  .tile_m = shape.epilogue == "swiglu"               ? 16
                            : shape.c_box_rows && !shape.c_row_major ? 8
                                                                     : 1,
                  .tile_n = shape.c_box_rows && shape.c_row_major ? 8 : 1,
                  .tile_k = 1,
                  .block_m = shape.bm,
                  .block_n = shape.bn,
                  .block_k = shape.bk,
                  .epilogue = shape.epilogue},
                 loc);
  else if (!shape.ragged)
    DescribeGemm(k,
                 {.c_order = shape.c_row_major ? "row" : "col",
                  .tile_m = shape.divide_m ? shape.divide_m : shape.bm,
                  .tile_n = shape.divide_n ? shape.divide_n : shape.bn,
                  .tile_k = shape.bk,
                  .block_m = shape.divide_m || shape.divide_n ? shape.bm : 0,
                  .block_n = shape.divide_m || shape.divide_n ? shape.bn : 0},
                 loc);
  TmaGemmOperands g;
  g.rank = shape.rank;
  g.c_rank = shape.ragged ? 2 : 3;
  g.c_row = shape.c_row_major;
  g.M = k.I32Param("M", loc);
  g.N = k.I32Param("N", loc);
  g.K = k.I32Param("K", loc);
  if (shape.c_box_rows) {
    rt::TensorMapParam c;
    c.tensor = "C";
    c.by_value = shape.by_value;
    if (shape.ragged && shape.epilogue == "swiglu") {  // C has half the product's rows
      c.dims = {Expr(k, "M/2", loc), Expr(k, "N", loc)};
      c.strides = {Expr(k, "M", loc)};
      c.box = {32, static_cast<uint32_t>(shape.c_box_rows)};
    } else if (shape.ragged && shape.c_row_major) {  // {N, M}: rows of N, a box past is clipped
      c.dims = {Expr(k, "N", loc), Expr(k, "M", loc)};
      c.strides = {Expr(k, "N*2", loc)};
      c.box = {static_cast<uint32_t>(shape.c_box_rows), 64};
    } else if (shape.ragged) {  // the map's bounds are M and N: a box past them is clipped
      c.dims = {Expr(k, "M", loc), Expr(k, "N", loc)};
      c.strides = {Expr(k, "M*2", loc)};
      c.box = {64, static_cast<uint32_t>(shape.c_box_rows)};
    } else {
      c.dims = {Expr(k, "64", loc), Expr(k, "N", loc), Expr(k, "M/64", loc)};
      c.strides = {Expr(k, "M*2", loc), Expr(k, "128", loc)};
      c.box = {static_cast<uint32_t>(64 + shape.c_pad), static_cast<uint32_t>(shape.c_box_rows),
               static_cast<uint32_t>(shape.c_box_cols / 64)};
    }
    if (shape.c_swizzle && shape.c_pad != 0)
      k.Fail("a 128B-swizzled C box is 64 elements wide: no padding (c_pad) with c_swizzle", loc);
    if (shape.c_swizzle)  // a swiglu's boxes are 32 elements wide, a row-major C's c_box_rows
      c.swizzle = shape.epilogue == "swiglu" ? rt::TmaSwizzle::k64B
                  : shape.c_row_major
                      ? static_cast<rt::TmaSwizzle>(SwizzleOfRow(shape.c_box_rows * 2))
                      : rt::TmaSwizzle::k128B;
    if (shape.out_type == "f16") c.dtype = rt::TmaDtype::kF16;
    g.C = k.TmaParam("tmC", c, loc);
  } else {
    g.Cptr = Matrix(k.PtrParam("C", ScalarNamed(k, shape.out_type, loc), loc), g.M, g.N,
                    shape.c_row_major ? "row" : "col", k, loc);
  }
  const int es = shape.in_type == "e4m3" || shape.in_type == "e5m2" ? 1 : 2;
  if (es == 1 && (shape.rank != 2 || shape.interleaved || shape.a_mn || shape.b_mn))
    k.Fail("8-bit operands are read K-major through rank-2 128B-swizzled maps only", loc);
  const int box_k = shape.rank == 3 ? shape.bk : 128 / es;  // rank 3: one box covers the k-tile
  g.slab = (shape.interleaved ? 16 : 128) / es;
  rt::TensorMapParam a =
      shape.a_mn ? MnMajorMap(k, "A", "M", shape.bk, shape.by_value, loc)
                 : KMajorMap(k, "A", shape.grouped_a ? "M*groups" : "M", shape.bm, shape.rank,
                             shape.by_value, box_k, shape.interleaved, loc, es);
  rt::TensorMapParam b =
      shape.b_mn ? MnMajorMap(k, "B", "N", shape.bk, shape.by_value, loc)
                 : KMajorMap(k, "B", "N", shape.b_box_rows ? shape.b_box_rows : shape.bn,
                             shape.rank, shape.by_value, box_k, shape.interleaved, loc, es);
  g.a_mn = shape.a_mn, g.b_mn = shape.b_mn;
  if (shape.in_type == "f16") a.dtype = b.dtype = rt::TmaDtype::kF16;
  g.A = k.TmaParam("tmA", a, loc);
  g.B = k.TmaParam("tmB", b, loc);
  if (shape.a_edge_rows) {
    // ACopies loads the first half of an edge tile in these boxes: they must divide it.
    if (!shape.ragged || shape.a_mn || shape.interleaved || (shape.bm / 2) % shape.a_edge_rows ||
        shape.a_edge_rows % 8)
      k.Fail(absl::StrCat("A's edge boxes (a_edge_rows ", shape.a_edge_rows,
                          ") are for ragged K-major A, ",
                          "8-row multiples dividing half the tile's ", shape.bm, " rows"),
             loc);
    rt::TensorMapParam edge = a;
    edge.box[1] = static_cast<uint32_t>(shape.a_edge_rows);
    g.A_edge = k.TmaParam("tmA_edge", edge, loc);
    g.a_edge = true;
    if (shape.bm / 2 > 2 * shape.a_edge_rows) {
      rt::TensorMapParam half = a;
      half.box[1] = static_cast<uint32_t>(shape.bm / 2);
      g.A_half = k.TmaParam("tmA_half", half, loc);
    }
  }
  return g;
}

std::vector<Operand> TmaGemmOperands::Box(const Value& row0, const Value& k0) const {
  if (rank == 2) return {k0, row0};
  std::vector<Operand> c = {0, row0, k0 / slab};
  for (int d = 3; d < rank; ++d) c.push_back(0);
  return c;
}

std::vector<TmaCopy> TmaGemmOperands::StageCopies(const TensorMap& map, bool mn_major,
                                                  const SmemTile& tile, const Value& row0,
                                                  const Value& k0, int bk) const {
  if (!mn_major) return {{&map, tile, Box(row0, k0)}};
  std::vector<TmaCopy> copies;
  for (int j = 0; j < tile.rows() / bk; ++j)
    copies.push_back({&map, tile.Rows(j * bk, bk), {row0 + 64 * j, k0}});
  return copies;
}

void TmaGemmOperands::PrefetchDescriptors(Kernel& k) const {
  for (const TensorMap* map : {&A, &B, &A_edge, &A_half, &C})
    if (map->param().valid()) k.TmaPrefetchDescriptor(*map);
}

std::vector<TmaCopy> TmaGemmOperands::ACopies(const SmemTile& tile, const Value& row0,
                                              const Value& k0, int bk) const {
  std::vector<TmaCopy> copies = StageCopies(A, a_mn, tile, row0, k0, bk);
  if (!a_edge) return copies;
  // Edge boxes win where at most half the tile's rows lie before M; past that, each more box
  // issued costs more than the fill it saves (docs/perf/2026-11-25-a-rows-past-m.md).
  const int half = tile.rows() / 2, rows = static_cast<int>(A_edge.spec().box[1]);
  Value edge = row0 + half >= M;
  copies[0].only_if = row0 + half < M;
  const bool with_half = A_half.param().valid();
  // Edge boxes for up to two of them before M; past that (with A_half) the half box.
  const int boxes = with_half ? 2 : half / rows;
  Value few = with_half ? edge & (row0 + boxes * rows >= M) : edge;
  if (with_half)
    copies.push_back({.map = &A_half,
                      .tile = tile.Rows(0, half),
                      .coords = Box(row0, k0),
                      .only_if = edge & (row0 + boxes * rows < M)});
  for (int j = 0; j < boxes; ++j) {
    Value first = row0 + j * rows;
    copies.push_back({.map = &A_edge,
                      .tile = tile.Rows(j * rows, rows),
                      .coords = Box(first, k0),
                      .only_if = few & (first < M)});
  }
  return copies;
}

// DeclareTmaGemm gives C's map this swizzle as a TMA code: the two enums number spans alike.
static_assert(static_cast<int>(Swizzle::k32B) == static_cast<int>(rt::TmaSwizzle::k32B) &&
              static_cast<int>(Swizzle::k64B) == static_cast<int>(rt::TmaSwizzle::k64B) &&
              static_cast<int>(Swizzle::k128B) == static_cast<int>(rt::TmaSwizzle::k128B));
Swizzle SwizzleOfRow(int bytes) {
  return bytes >= 128 ? Swizzle::k128B : bytes >= 64 ? Swizzle::k64B : Swizzle::k32B;
}

std::vector<Operand> TmaGemmOperands::CBox(const Value& m0, const Value& n0) const {
  if (c_rank == 2) return c_row ? std::vector<Operand>{n0, m0} : std::vector<Operand>{m0, n0};
  return {0, n0, m0 / 64};
}

void SuperTiles(Kernel& k, const Value& first, int groups, const Value& count, const Value& tiles_n,
                int tm, int tn, const TileBody& body) {
  k.For(first, count, groups, [&](Value num) {
    Value super = num / (tm * tn), pos = num % (tm * tn);
    Value m = super / (tiles_n / tn) * tm + pos / tn, n = super % (tiles_n / tn) * tn + pos % tn;
    body(m, n);
  });
}

void MulticastProducer(Kernel& k, Pipeline& ring, const TmaGemmOperands& g, const SmemTile& sA,
                       const SmemTile& sB, int bk, const Value& rank,
                       const ForEachTile& for_each_tile, int cluster) {
  MulticastProducer(k, ring, g, sA, sB, bk, rank, ForEachSpan([&](const SpanBody& body) {
                      for_each_tile([&](Value m0, Value n0) { body(m0, n0, Value(), g.K); });
                    }),
                    cluster);
}

void MulticastProducer(Kernel& k, Pipeline& ring, const TmaGemmOperands& g, const SmemTile& sA,
                       const SmemTile& sB, int bk, const Value& rank,
                       const ForEachSpan& for_each_span, int cluster, const Value& policy,
                       const Value& b_policy_if, const Value& a_policy_if, bool wait_prior_grids) {
  k.Role({.first_thread = 0, .threads = 128, .max_regs = 24}, [&](Value t) {
    k.If(t == 0, [&] {
      Pipeline::Cursor at = ring.Start();
      if (wait_prior_grids) k.WaitForPriorGrids();
      // The whole walk with each operand's policy fixed (none where invalid).
      auto walk = [&](const Value& a_policy, const Value& b_policy) {
        for_each_span([&](Value m0, Value n0, Value k_begin, Value k_end) {
          // An invalid k_begin is 0 as an immediate (the whole-tile kernels' loop, unchanged).
          auto loop = [&](const std::function<void(Value)>& body) {
            if (k_begin.valid())
              k.For(k_begin, k_end, bk, body);
            else
              k.For(0, k_end, bk, body);
          };
          loop([&](Value k0) {
            std::vector<TmaCopy> copies = g.ACopies(sA, m0, k0, bk);
            for (TmaCopy& a : copies) a.l2_policy = a_policy;
            for (TmaCopy& b : g.StageCopies(g.B, g.b_mn, sB, n0, k0, bk)) {
              if (cluster > 1)
                b.cta_mask = k.I32(0b11), b.issue_if = rank == 0;  // B multicast to the pair
              b.l2_policy = b_policy;
              copies.push_back(b);
            }
            ring.Produce(at, copies);
          });
        });
      };
      // A policy chosen at run time is a branch between walks with it and without (evict_normal
      // carried on a copy is slower than none: docs/perf/2026-11-26-b-lines-evicted-first.md),
      // taken once: a branch in the loop, each path its own code, slowed the short launches
      // (docs/perf/2026-11-26-c-of-few-columns.md).
      auto on_a = [&] {
        if (a_policy_if.valid())
          k.If(
              a_policy_if, [&] { walk(policy, Value()); }, [&] { walk(Value(), Value()); });
        else
          walk(Value(), Value());
      };
      if (b_policy_if.valid())
        k.If(
            b_policy_if, [&] { walk(Value(), policy); }, on_a);
      else if (a_policy_if.valid())
        on_a();
      else
        walk(Value(), policy);
      if (wait_prior_grids) k.LaunchDependents();
    });
  });
}

void WritePackedTile(Kernel& k, const TmaGemmOperands& g, const SmemTile* buffers, int consumers,
                     int bn, int piece_n, const Value& wg, const Value& c, const Value& lane,
                     const Regs& packed, const Regs& at) {
  for (int x = 0; x < consumers; ++x)
    k.If(wg == x, [&] {
      // Lane l addresses row (l % 8) + 8 * (l / 16) of matrix l / 8, transposed: n rows, m cols.
      // Row-major (not transposed), lane l addresses row l % 8 of matrix l / 8: matrices 1 and 3
      // are rows 8.. of 0 and 2, matrices 2 and 3 the columns 8.. of 0 and 1.
      Value n = lane % 8 + lane / 16 * 8, m = c / 32 * 16 + (lane & 8);
      if (g.c_row) n = lane / 16 * 8, m = c / 32 * 16 + lane % 8 + (lane & 8);
      for (int piece = 0; piece < bn / piece_n; ++piece) {
        k.If(c == 0, [&] { k.BulkWait(0, /*smem_reads_only=*/true); });  // buffer read out
        k.NamedBarrier(wg + 2, 128);
        for (int q = 0; q < piece_n / 16; ++q) {
          const int f = 4 * (piece * piece_n / 16 + q);
          k.StMatrix(g.c_row ? buffers[x].At(m, n + q * 16) : buffers[x].At(n + q * 16, m),
                     {packed[f], packed[f + 1], packed[f + 2], packed[f + 3]},
                     /*trans=*/!g.c_row);
        }
        k.FenceProxyAsync();
        k.NamedBarrier(wg + 2, 128);
        k.If(c == 0, [&] {
          k.TmaStore(g.C, buffers[x], g.CBox(at[1] + x * 64, at[2] + piece * piece_n));
          k.BulkCommit();
        });
      }
    });
}

void ConsumeTile(Kernel& k, Pipeline& ring, Pipeline::Cursor& at, const Value& thread,
                 WgmmaAccumulator& acc, const SmemTile& sA, const SmemTile& sB, const Value& row0,
                 int bk, const Value& K) {
  auto mma = [&](bool first) {
    return [&, first](Value s) {
      k.WgmmaFence();
      for (int kk = 0; kk < bk; kk += 16)
        k.Wgmma(acc, {.a = sA.Stage(s),
                      .a_row0 = row0,
                      .b = sB.Stage(s),
                      .k0 = kk,
                      .accumulate = !(first && kk == 0)});
      k.WgmmaCommit();
      k.WgmmaWait(0);
    };
  };
  ring.Consume(at, thread, mma(true));
  k.For(bk, K, bk, [&](Value) { ring.Consume(at, thread, mma(false)); });
}

}  // namespace kiln::examples
