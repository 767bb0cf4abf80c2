// Hopper asynchronous machinery: TMA tensor maps and copies, mbarriers, bulk groups, fences,
// cluster and named barriers.
#include <optional>

#include "absl/strings/str_cat.h"
#include "dsl/kernel_state.h"
#include "dsl/watchdog.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln {

using detail::Access;
using detail::KernelState;

namespace {

bool NeedHopper(KernelState& s, const char* what, const Loc& loc) {
  if (s.target.compute_capability >= 90) return true;
  s.Fail(absl::StrCat(what, " needs sm_90 or later; this kernel targets ", s.target.chip), loc);
  return false;
}

// A cluster CTA rank is an i32 value or an integer constant.
bool RankIsI32(KernelState& s, const Operand& rank, const Loc& loc) {
  if (Access::IsImm(rank)
          ? !Access::IsFloatImm(rank)
          : !Access::Val(rank).valid() || Access::Val(rank).type() == Type::Of(Scalar::kI32))
    return true;
  s.Fail(absl::StrCat(
             "a cluster CTA rank is an i32 (e.g. k.ClusterCtaRank() ^ 1), not ",
             Access::IsImm(rank) ? "a floating-point constant" : Access::Val(rank).type().Str()),
         loc);
  return false;
}

mlir::Type SharedPtr(KernelState& s) {
  return mlir::LLVM::LLVMPointerType::get(s.context.get(), 3);
}

// Generic pointer to the CUtensorMap, whichever way the parameter is passed.
mlir::Value DescriptorPtr(KernelState& s, const TensorMap& map, mlir::Location l) {
  mlir::Value p = s.Unwrap(map.param());
  auto generic = mlir::LLVM::LLVMPointerType::get(s.context.get());
  if (p.getType() != generic) p = mlir::LLVM::AddrSpaceCastOp::create(s.builder, l, generic, p);
  return p;
}

// Checks that a TMA operation gives `map` one coordinate per dimension.
bool CheckCoordinates(KernelState& s, const TensorMap& map, const std::vector<Operand>& coords,
                      const Loc& loc) {
  if (static_cast<int>(coords.size()) != map.rank()) {
    s.Fail(absl::StrCat("a rank-", map.rank(), " tensor map takes ", map.rank(),
                        " coordinates, not ", coords.size()),
           loc);
    return false;
  }
  for (size_t i = 0; i < coords.size(); ++i) {
    const bool i32 = Access::IsImm(coords[i])
                         ? !Access::IsFloatImm(coords[i])
                         : Access::Val(coords[i]).type() == Type::Of(Scalar::kI32);
    if (!i32) {
      s.Fail(absl::StrCat("a tensor map's coordinates are i32 (TMA takes 32-bit ones); coordinate ",
                          i, " is ",
                          Access::IsImm(coords[i]) ? "a floating-point constant"
                                                   : Access::Val(coords[i]).type().Str()),
             loc);
      return false;
    }
  }
  return true;
}

// Checks that `tile` is what one box of `map` fills: the same bytes and swizzle.
bool CheckBoxFitsTile(KernelState& s, const TensorMap& map, const SmemTile& tile,
                      const std::vector<Operand>& coords, const Loc& loc) {
  if (!CheckCoordinates(s, map, coords, loc)) return false;
  const std::string the_map = absl::StrCat("the tensor map (", LocString(map.loc()), ")");
  // Elements of another size: said as such, before the box's bytes (which then differ too).
  const int map_bytes = rt::TmaElementBytes(map.spec().dtype);
  if (map_bytes != ScalarBytes(tile.elem())) {
    s.Fail(absl::StrCat(the_map, " holds elements of ", map_bytes, " bytes but the smem tile (",
                        LocString(tile.loc()), ") holds ", Type::Of(tile.elem()).Str(), ", of ",
                        ScalarBytes(tile.elem()), " bytes"),
           loc);
    return false;
  }
  if (map.box_bytes() != tile.stage_bytes()) {
    s.Fail(absl::StrCat(the_map, "'s box is ", map.box_bytes(), " bytes but the smem tile (",
                        LocString(tile.loc()), ") holds ", tile.stage_bytes(), " per stage",
                        tile.row_stride() != tile.cols()
                            ? absl::StrCat(": its rows are ", tile.row_stride(),
                                           " elements apart "
                                           "for ",
                                           tile.cols(),
                                           " columns (padding), and a TMA "
                                           "box lands dense; swizzle the tile instead")
                            : ""),
           loc);
    return false;
  }
  // The copy moves bytes either way; a tensor map of f16 into a bf16 tile (or back) is a mix-up
  // that only the numbers would show.
  const rt::TmaDtype dtype = map.spec().dtype;
  if ((dtype == rt::TmaDtype::kF16 && tile.elem() == Scalar::kBF16) ||
      (dtype == rt::TmaDtype::kBF16 && tile.elem() == Scalar::kF16)) {
    s.Fail(absl::StrCat(the_map, " holds ", dtype == rt::TmaDtype::kF16 ? "f16" : "bf16",
                        " but the smem tile (", LocString(tile.loc()), ") holds ",
                        Type::Of(tile.elem()).Str()),
           loc);
    return false;
  }
  const std::vector<uint32_t>& box = map.spec().box;
  const int es = ScalarBytes(tile.elem());
  if (tile.interleaved() &&
      (map.rank() < 3 || box[0] * es != 16 || box[1] != static_cast<uint32_t>(tile.rows()) ||
       box[2] * 16 != static_cast<uint32_t>(tile.cols() * es))) {
    s.Fail(absl::StrCat("the interleaved tile (", LocString(tile.loc()), ") takes one box of {",
                        16 / es, ", ", tile.rows(), ", ", tile.cols() * es / 16,
                        "} (16-byte slabs), or one 2D slab box per Slab()"),
           loc);
    return false;
  }
  if (!tile.interleaved() && tile.swizzle() == Swizzle::kNone &&
      box[0] != static_cast<uint32_t>(tile.row_stride())) {
    s.Fail(absl::StrCat(the_map, "'s box rows are ", box[0], " elements but the smem tile (",
                        LocString(tile.loc()), ") has rows of ", tile.row_stride()),
           loc);
    return false;
  }
  if (tile.unit_swizzle().period > 1) {
    s.Fail(absl::StrCat("the smem tile (", LocString(tile.loc()), ") has an Ampere-style unit ",
                        "swizzle, which TMA cannot write; declare it with SmemSwizzled"),
           loc);
    return false;
  }
  if (map.swizzle() != tile.swizzle()) {
    s.Fail(absl::StrCat(the_map, " swizzles ", SwizzleBytes(map.swizzle()), "B but the smem tile (",
                        LocString(tile.loc()), ") is laid out with ", SwizzleBytes(tile.swizzle()),
                        "B swizzle"),
           loc);
    return false;
  }
  return true;
}

// The destination of a TMA load, in the shared::cluster window (address space 7). The PTX ISA
// makes an address of the executing CTA's shared::cta window valid in the shared::cluster window,
// naming that CTA's memory (on an H200 it already carries the CTA's cluster rank:
// docs/perf/2026-11-30-descriptors-and-tma-destinations.md), so the 32-bit address is reused as
// it is: an addrspacecast would go through a generic address (cvta twice, a 64-bit pair and the
// window's base read each time; docs/perf/2026-11-28-paged-prefill.md, "The TMA destination
// without a generic round trip").
mlir::Value ClusterDst(KernelState& s, const SmemTile& dst, const Loc& loc, mlir::Location l) {
  auto cluster_ptr = mlir::LLVM::LLVMPointerType::get(s.context.get(), 7);
  return mlir::LLVM::IntToPtrOp::create(s.builder, l, cluster_ptr,
                                        s.SharedAddress32(s.Unwrap(dst.Base(loc)), l));
}

llvm::SmallVector<mlir::Value> Coordinates(KernelState& s, const std::vector<Operand>& coords) {
  llvm::SmallVector<mlir::Value> out;
  for (const Operand& c : coords) out.push_back(s.Materialize(c, Type::Of(Scalar::kI32)));
  return out;
}

}  // namespace

int SwizzleBytes(Swizzle s) { return s == Swizzle::kNone ? 0 : 16 << static_cast<int>(s); }

// ---- tensor maps

TensorMap HopperOps::TmaParam(const std::string& name, const rt::TensorMapParam& spec, Loc loc) {
  KernelState& s = state();
  TensorMap map;
  map.spec_ = spec;
  map.loc_ = loc;
  NeedHopper(s, "TMA", loc);
  if (spec.box.empty() || spec.box.size() > 5 ||
      (!spec.bound_at_launch() &&
       (spec.dims.size() != spec.box.size() || spec.strides.size() + 1 != spec.dims.size())))
    self().Fail(
        "a tensor map has rank 1..5: one box extent per dim, and either no dims (bound at launch) "
        "or one "
        "dims rule per box extent and rank-1 strides",
        loc);
  else if (absl::Status box = rt::ValidateTmaBox(spec.box, spec.dtype, spec.swizzle); !box.ok())
    self().Fail(absl::StrCat("tensor map ", name, ": ", box.message()), loc);
  for (const std::vector<rt::GridExpr>* rules : {&spec.dims, &spec.strides})
    for (const rt::GridExpr& e : *rules)
      if (!e.error.empty())
        self().Fail(absl::StrCat("tensor map ", name, ": ", e.error), loc);
      else
        (void)s.ParseRule(absl::StrCat("tensor map ", name), e.ToString(), loc);
  // By value: a __grid_constant__ CUtensorMap in the parameter space, addressed in place.
  // By pointer: a global pointer to a copy the launcher made.
  mlir::Block* entry = &s.func.getBody().front();
  auto generic = mlir::LLVM::LLVMPointerType::get(s.context.get());
  auto global = mlir::LLVM::LLVMPointerType::get(s.context.get(), 1);
  mlir::Value arg = entry->addArgument(spec.by_value ? generic : global, s.ToLoc(loc));
  s.func.setFunctionTypeAttr(mlir::TypeAttr::get(mlir::LLVM::LLVMFunctionType::get(
      mlir::LLVM::LLVMVoidType::get(s.context.get()), llvm::to_vector(entry->getArgumentTypes()))));
  const unsigned index = entry->getNumArguments() - 1;
  if (spec.by_value) {
    mlir::Type bytes = mlir::LLVM::LLVMArrayType::get(s.builder.getI8Type(), 128);
    s.SetArgAttrs(index, {s.builder.getNamedAttr(mlir::LLVM::LLVMDialect::getByValAttrName(),
                                                 mlir::TypeAttr::get(bytes)),
                          s.builder.getNamedAttr(mlir::LLVM::LLVMDialect::getAlignAttrName(),
                                                 s.builder.getI64IntegerAttr(64)),
                          s.builder.getNamedAttr(mlir::NVVM::NVVMDialect::getGridConstantAttrName(),
                                                 s.builder.getUnitAttr())});
  } else if (s.func.getArgAttrsAttr()) {
    s.SetArgAttrs(index, {});
  }
  detail::CheckParamName(s, name, loc);
  rt::ParamSpec p;
  p.name = name;
  p.kind = rt::ParamSpec::Kind::kTensorMap;
  p.tensor_map = spec;
  p.tensor_map.source = LocString(loc);
  s.manifest.params.push_back(p);
  map.param_ = s.Wrap(arg, Type::Ptr(Space::kGlobal, Scalar::kI32));  // opaque to the user
  return map;
}

namespace {
// For the static transaction-byte check (KernelState::tx_records).
void RecordTx(KernelState& s, const Barrier& bar, int64_t bytes, bool announced, const Loc& loc) {
  if (Access::BarrierArray(bar) < 0) return;
  s.tx_records.push_back({Access::BarrierArray(bar), Access::BarrierIndex(bar), bytes, announced,
                          loc, s.loop_stack.back()});
}
}  // namespace

namespace {
// The copy's L2::cache_hint operand: none, or an i64 policy of this kernel.
std::optional<mlir::Value> PolicyOperand(KernelState& s, const Value& policy, const char* op,
                                         const Loc& loc) {
  if (!policy.valid()) return mlir::Value();
  if (Access::State(policy) != &s || policy.type() != Type::Of(Scalar::kI64)) {
    s.Fail(absl::StrCat(op, "'s L2 policy is an i64 of this kernel (Kernel::L2Policy), not ",
                        policy.type().Str()),
           loc);
    return std::nullopt;
  }
  return s.Unwrap(policy);
}
}  // namespace

Value HopperOps::L2Policy(CacheHint hint, Loc loc) {
  KernelState& s = state();
  if (hint != CacheHint::kL2EvictFirst && hint != CacheHint::kL2EvictLast) {
    s.Fail("an L2 policy is kL2EvictFirst or kL2EvictLast (a copy with no policy has the default)",
           loc);
    return Value();
  }
  const char* priority = hint == CacheHint::kL2EvictFirst ? "evict_first" : "evict_last";
  mlir::Location l = s.ToLoc(loc);
  mlir::Value policy =
      s.InlineAsm(absl::StrCat("createpolicy.fractional.L2::", priority, ".b64 $0, 1.0;"), "=l", {},
                  s.builder.getI64Type(), l, /*side_effects=*/false);
  return s.Wrap(policy, Type::Of(Scalar::kI64));
}

void HopperOps::TmaLoad(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
                        std::vector<Operand> coords, const Value& l2_policy, Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "TMA", loc) || !CheckBoxFitsTile(s, map, dst, coords, loc)) return;
  std::optional<mlir::Value> policy = PolicyOperand(s, l2_policy, "a TMA load", loc);
  if (!policy) return;
  RecordTx(s, bar, map.box_bytes(), /*announced=*/false, loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      s.builder, l, ClusterDst(s, dst, loc, l), DescriptorPtr(s, map, l), Coordinates(s, coords),
      s.Unwrap(bar.ptr()), mlir::ValueRange{}, mlir::Value(), *policy,
      mlir::NVVM::TMALoadMode::TILE, false, nullptr, mlir::Value());
  s.tma_loads.push_back({s.LastOp(), Access::BarrierArray(bar), Access::BarrierIndex(bar), loc});
}

void HopperOps::TmaLoadPair(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
                            std::vector<Operand> coords, Loc loc) {
  KernelState& s = state();
  if (s.target.chip != "sm_100a")
    return self().Fail("a CTA-pair TMA load (cta_group::2) needs sm_100a", loc);
  if (s.manifest.cluster.count() % 2 != 0)
    return self().Fail("a CTA-pair TMA load needs clusters of CTA pairs", loc);
  if (!detail::UseTcgenGroup(s, 2, loc)) return;
  if (!CheckBoxFitsTile(s, map, dst, coords, loc)) return;
  RecordTx(s, bar, map.box_bytes(), /*announced=*/false, loc);
  mlir::Location l = s.ToLoc(loc);
  const Type i32 = Type::Of(Scalar::kI32);
  // The leader's barrier: the same smem offset in the even CTA of the pair (mapa).
  std::vector<mlir::Value> args = {s.SharedAddress32(s.Unwrap(dst.Base(loc)), l),
                                   DescriptorPtr(s, map, l)};
  std::string list;
  for (size_t i = 0; i < coords.size(); ++i) {
    args.push_back(s.Materialize(coords[i], i32));
    absl::StrAppend(&list, i ? ", " : "", "$", i + 2);
  }
  args.push_back(s.SharedAddress32(s.Unwrap(bar.ptr()), l));
  args.push_back(s.Unwrap(self().ClusterCtaRank(loc) & Operand(~1, loc)));
  const size_t n = coords.size();
  std::string constraints = "r,l";
  for (size_t i = 0; i < n; ++i) constraints += ",r";
  constraints += ",r,r,~{memory}";
  s.InlineAsm(absl::StrCat("{\n.reg .b32 leader;\nmapa.shared::cluster.u32 leader, $", n + 2, ", $",
                           n + 3, ";\ncp.async.bulk.tensor.", n,
                           "d.shared::cluster.global.mbarrier::complete_tx::bytes",
                           ".cta_group::2 [$0], [$1, {", list, "}], [leader];\n}"),
              constraints, args, mlir::Type(), l);
  s.tma_loads.push_back({s.LastOp(), Access::BarrierArray(bar), Access::BarrierIndex(bar), loc});
  s.cross_cta_loads.push_back(s.tma_loads.back());
}

void HopperOps::TmaLoadMulticast(const TensorMap& map, const SmemTile& dst, const Barrier& bar,
                                 std::vector<Operand> coords, const Operand& cta_mask,
                                 const Value& l2_policy, Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "TMA multicast", loc) || !CheckBoxFitsTile(s, map, dst, coords, loc)) return;
  std::optional<mlir::Value> policy = PolicyOperand(s, l2_policy, "a TMA multicast load", loc);
  if (!policy) return;
  if (s.manifest.cluster.count() < 2)
    return self().Fail("TMA multicast needs a cluster of 2 or more CTAs (ClusterDims)", loc);
  RecordTx(s, bar, map.box_bytes(), /*announced=*/false,
           loc);  // the bytes landing in each CTA of the mask
  mlir::Location l = s.ToLoc(loc);
  mlir::Value mask = s.Materialize(cta_mask, Type::Of(Scalar::kI32));
  mask = mlir::arith::TruncIOp::create(s.builder, l, s.builder.getI16Type(), mask);
  mlir::NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      s.builder, l, ClusterDst(s, dst, loc, l), DescriptorPtr(s, map, l), Coordinates(s, coords),
      s.Unwrap(bar.ptr()), mlir::ValueRange{}, mask, *policy, mlir::NVVM::TMALoadMode::TILE, false,
      nullptr, mlir::Value());
  s.tma_loads.push_back({s.LastOp(), Access::BarrierArray(bar), Access::BarrierIndex(bar), loc});
  s.cross_cta_loads.push_back(s.tma_loads.back());
}

void HopperOps::TmaPrefetchL2(const TensorMap& map, std::vector<Operand> coords, Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "TMA", loc)) return;
  if (!CheckCoordinates(s, map, coords, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::CpAsyncBulkTensorPrefetchOp::create(s.builder, l, DescriptorPtr(s, map, l),
                                                  Coordinates(s, coords), mlir::ValueRange{},
                                                  mlir::NVVM::TMALoadMode::TILE, mlir::Value());
}

void HopperOps::TmaPrefetchDescriptor(const TensorMap& map, Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "prefetch.tensormap", loc)) return;
  if (!map.param().valid())
    return s.Fail("TmaPrefetchDescriptor of a tensor map that was never declared", loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::PrefetchOp::create(s.builder, l, /*cacheLevel=*/nullptr, /*evictPriority=*/nullptr,
                                 DescriptorPtr(s, map, l), /*predicate=*/mlir::Value(),
                                 /*tensormap=*/true,
                                 /*uniform=*/false, /*in_param_space=*/map.spec().by_value);
}

void HopperOps::TmaStore(const TensorMap& map, const SmemTile& src, std::vector<Operand> coords,
                         Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "TMA", loc) || !CheckBoxFitsTile(s, map, src, coords, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
      s.builder, l, DescriptorPtr(s, map, l), s.Unwrap(src.Base(loc)), Coordinates(s, coords),
      mlir::Value(), mlir::NVVM::TMAStoreMode::TILE, mlir::Value());
}

void HopperOps::TmaReduceAdd(const TensorMap& map, const SmemTile& src, std::vector<Operand> coords,
                             Loc loc) {
  KernelState& s = state();
  if (!NeedHopper(s, "TMA", loc) || !CheckBoxFitsTile(s, map, src, coords, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::CpAsyncBulkTensorReduceOp::create(
      s.builder, l, DescriptorPtr(s, map, l), s.Unwrap(src.Base(loc)),
      mlir::NVVM::TMAReduxKind::ADD, mlir::NVVM::TMAStoreMode::TILE, Coordinates(s, coords),
      mlir::Value());
}

void HopperOps::BulkCommit(Loc loc) {
  if (!NeedHopper(state(), "cp.async.bulk", loc)) return;
  mlir::NVVM::CpAsyncBulkCommitGroupOp::create(state().builder, state().ToLoc(loc));
}

void HopperOps::BulkWait(int pending, bool smem_reads_only, Loc loc) {
  if (!NeedHopper(state(), "cp.async.bulk", loc)) return;
  if (pending < 0 || pending > 63) return self().Fail("BulkWait takes 0..63 pending groups", loc);
  mlir::NVVM::CpAsyncBulkWaitGroupOp::create(
      state().builder, state().ToLoc(loc), static_cast<uint32_t>(pending),
      smem_reads_only ? state().builder.getUnitAttr() : mlir::UnitAttr());
}

// ---- fences and barriers

void HopperOps::FenceBarrierInit(Loc loc) {
  if (!NeedHopper(state(), "fence.mbarrier_init", loc)) return;
  mlir::NVVM::FenceMbarrierInitOp::create(state().builder, state().ToLoc(loc));
}

void HopperOps::FenceProxyAsync(Loc loc) {
  if (!NeedHopper(state(), "fence.proxy.async", loc)) return;
  mlir::NVVM::FenceProxyOp::create(
      state().builder, state().ToLoc(loc), mlir::NVVM::ProxyKind::async_shared,
      mlir::NVVM::SharedSpaceAttr::get(state().context.get(), mlir::NVVM::SharedSpace::shared_cta));
}

void HopperOps::FenceGpu(Loc loc) {
  mlir::NVVM::MembarOp::create(state().builder, state().ToLoc(loc), mlir::NVVM::MemScopeKind::GPU);
}

void HopperOps::ClusterSync(Loc loc) {
  if (!NeedHopper(state(), "barrier.cluster", loc)) return;
  mlir::Location l = state().ToLoc(loc);
  mlir::NVVM::ClusterArriveOp::create(state().builder, l, state().builder.getUnitAttr());
  mlir::NVVM::ClusterWaitOp::create(state().builder, l, state().builder.getUnitAttr());
  state().waits.push_back({state().LastOp(), -1, "", loc});
  state().cluster_syncs.push_back({state().LastOp(), -1, "", loc});
}

void HopperOps::ClusterArrive(bool relaxed, Loc loc) {
  if (!NeedHopper(state(), "barrier.cluster", loc)) return;
  mlir::Location l = state().ToLoc(loc);
  // (Not .aligned: the halves may sit under conditions that split a warp.)
  if (relaxed)
    mlir::NVVM::ClusterArriveRelaxedOp::create(state().builder, l, mlir::UnitAttr());
  else
    mlir::NVVM::ClusterArriveOp::create(state().builder, l, mlir::UnitAttr());
  ++state().cluster_arrives;
}

void HopperOps::ClusterWait(Loc loc) {
  if (!NeedHopper(state(), "barrier.cluster", loc)) return;
  if (state().cluster_arrives == 0)
    return self().Fail(
        "ClusterWait with no ClusterArrive before it: each thread arrives, then waits (PTX ISA, "
        "barrier.cluster)",
        loc);
  mlir::NVVM::ClusterWaitOp::create(state().builder, state().ToLoc(loc), mlir::UnitAttr());
  state().waits.push_back({state().LastOp(), -1, "", loc});
  state().cluster_syncs.push_back({state().LastOp(), -1, "", loc});
}

Value HopperOps::PeerPointer(const Value& smem_ptr, const Operand& cta_rank, Loc loc) {
  KernelState& s = state();
  const Type& pt = smem_ptr.type();
  auto poison = [&] { return s.Poison(Type::Ptr(Space::kSharedCluster, pt.elem), loc); };
  if (!NeedHopper(s, "distributed shared memory", loc)) return poison();
  if (pt.kind != Type::Kind::kPointer || pt.space != Space::kShared) {
    self().Fail(absl::StrCat("PeerPointer takes a pointer into this CTA's shared memory (e.g. "
                             "tile.At(r, c)), not ",
                             pt.Str()),
                loc);
    return poison();
  }
  const int cluster = static_cast<int>(s.manifest.cluster.count());
  if (cluster < 2) {
    self().Fail("a peer's shared memory needs a cluster of 2 or more CTAs (ClusterDims first)",
                loc);
    return poison();
  }
  if (!RankIsI32(s, cta_rank, loc)) return poison();
  if (Access::IsImm(cta_rank) && (Access::Imm(cta_rank) < 0 || Access::Imm(cta_rank) >= cluster)) {
    self().Fail(
        absl::StrCat("cluster CTA rank ", Access::Imm(cta_rank), " is outside the cluster of ",
                     cluster, " (ranks 0..", cluster - 1, ")"),
        loc);
    return poison();
  }
  mlir::Location l = s.ToLoc(loc);
  mlir::Type peer = mlir::LLVM::LLVMPointerType::get(s.context.get(), 7);  // shared::cluster
  mlir::Value at = mlir::NVVM::MapaOp::create(s.builder, l, peer, s.Unwrap(smem_ptr, loc),
                                              s.Materialize(cta_rank, Type::Of(Scalar::kI32)));
  return s.Wrap(at, Type::Ptr(Space::kSharedCluster, pt.elem));
}

void HopperOps::WaitForPriorGrids(Loc loc) {
  if (!NeedHopper(state(), "griddepcontrol", loc)) return;
  mlir::NVVM::GriddepcontrolOp::create(state().builder, state().ToLoc(loc),
                                       mlir::NVVM::GridDepActionKind::wait);
  state().manifest.waits_for_prior_grids = true;
}

void HopperOps::LaunchDependents(Loc loc) {
  if (!NeedHopper(state(), "griddepcontrol", loc)) return;
  mlir::NVVM::GriddepcontrolOp::create(state().builder, state().ToLoc(loc),
                                       mlir::NVVM::GridDepActionKind::launch_dependents);
}

namespace {
bool CheckNamedBarrier(KernelState& s, const Operand& id, int threads, const Loc& loc) {
  if (Access::IsImm(id) && (Access::Imm(id) < 0 || Access::Imm(id) > 15)) {
    s.Fail("named barriers are numbered 0..15", loc);
    return false;
  }
  if (threads <= 0 || threads % 32 || threads > static_cast<int>(s.manifest.block.count())) {
    s.Fail(
        absl::StrCat("a named barrier counts whole warps of the block, not ", threads, " threads"),
        loc);
    return false;
  }
  if (Access::IsImm(id) && Access::Imm(id) >= 1) {
    if (s.own_barrier_ids.empty())
      s.final_checks.push_back([&s] {
        for (const auto& [size, first] : s.group_barrier_base) {
          const int groups = static_cast<int>(s.manifest.block.count()) / size;
          for (const auto& [own, where] : s.own_barrier_ids)
            if (own >= first && own < first + groups)
              s.Fail(absl::StrCat("named barrier ", own, " is also GroupReduce's (its groups of ",
                                  size, " threads meet at ids ", first, "..", first + groups - 1,
                                  "): a group and these threads would count as one; take an id "
                                  "past ",
                                  s.next_group_barrier - 1),
                     where);
        }
      });
    s.own_barrier_ids.try_emplace(static_cast<int>(Access::Imm(id)), loc);
  }
  return true;
}
}  // namespace

void HopperOps::NamedBarrierArrive(const Operand& id, int threads, Loc loc) {
  KernelState& s = state();
  if (!CheckNamedBarrier(s, id, threads, loc)) return;
  s.InlineAsm(absl::StrCat("bar.arrive $0, ", threads, ";"), "r,~{memory}",
              {s.Materialize(id, Type::Of(Scalar::kI32))}, nullptr, s.ToLoc(loc));
}

void HopperOps::NamedBarrier(const Operand& id, int threads, Loc loc) {
  KernelState& s = state();
  if (!CheckNamedBarrier(s, id, threads, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::Value n = mlir::arith::ConstantIntOp::create(s.builder, l, threads, 32);
  mlir::NVVM::BarrierOp::create(s.builder, l, mlir::Type(),
                                s.Materialize(id, Type::Of(Scalar::kI32)), n, nullptr,
                                mlir::Value());
}

Barriers HopperOps::SmemBarriers(int count, Loc loc) {
  Barriers b;
  // (Its waits are try_wait loops and its arrivals may carry transaction bytes: sm_90's forms.)
  NeedHopper(state(),
             "SmemBarriers (mbarriers waited on with try_wait; on sm_80 a block synchronises "
             "with SyncThreads or NamedBarrier, and cp.async with its wait_group)",
             loc);
  b.count_ = count;
  b.tile_ = self().Smem(Scalar::kI64, std::max(count, 1), 1, 0, 8, loc);
  if (count <= 0) self().Fail(absl::StrCat("an array of ", count, " barriers"), loc);
  return b;
}

Barrier Barriers::operator[](const Operand& i) const {
  Barrier b;
  KernelState& s = detail::Owner(Access::State(tile_), "Barriers", &tile_.loc());
  if (Access::IsImm(i) && (Access::Imm(i) < 0 || Access::Imm(i) >= count_))
    s.Fail(absl::StrCat("barrier ", Access::Imm(i), " of an array of ", count_), i.loc());
  if (!Access::IsImm(i) && Access::Val(i).type() != Type::Of(Scalar::kI32))
    s.Fail(absl::StrCat("a barrier index is an i32, not ", Access::Val(i).type().Str()), i.loc());
  b.ptr_ = tile_.At(i, 0, i.loc());
  b.array_ = tile_.offset_bytes();
  b.index_ = Access::IsImm(i) ? absl::StrCat(Access::Imm(i))
                              : absl::StrCat("v", Access::Id(Access::Val(i)));
  return b;
}

namespace {
KernelState& StateOf(const Barrier& b, const Loc& use) {
  return detail::OwnerOfOp(Access::State(b.ptr()), "Barrier", use);
}
}  // namespace

void Barrier::Init(int count, Loc loc) const { Init(count, PhasesPerRound{}, loc); }

void Barrier::Init(int count, PhasesPerRound phases, Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  if (phases.n < 1)
    return s.Fail(absl::StrCat("PhasesPerRound{", phases.n, "}: at least one phase a round"), loc);
  if (count <= 0 || count >= (1 << 20))
    return s.Fail(absl::StrCat("an mbarrier expects 1..2^20-1 arrivals, not ", count), loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value n = mlir::arith::ConstantIntOp::create(s.builder, l, count, 32);
  mlir::NVVM::MBarrierInitOp::create(s.builder, l, s.Unwrap(ptr_), n, mlir::Value());
  const size_t records = s.arrival_records.size();
  s.RecordArrival(array_, index_, count, loc);
  if (s.arrival_records.size() > records) s.arrival_records.back().phases = phases.n;
}

void Barrier::Arrive(Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  mlir::NVVM::MBarrierArriveOp::create(s.builder, s.ToLoc(loc), mlir::Type(), s.Unwrap(ptr_),
                                       mlir::Value());
  s.RecordArrival(array_, index_, 0, loc);
}

void Barrier::ArriveWhenCopiesLand(Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  if (s.target.compute_capability < 80) return s.Fail("cp.async needs sm_80 or later", loc);
  mlir::NVVM::CpAsyncMBarrierArriveOp::create(s.builder, s.ToLoc(loc), s.Unwrap(ptr_),
                                              /*noinc=*/true);
  s.RecordArrival(array_, index_, 0, loc);
}

void Barrier::ArriveExpectTx(const std::vector<const TensorMap*>& maps, Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  int bytes = 0;
  for (const TensorMap* m : maps) bytes += m->box_bytes();
  if (bytes <= 0 || bytes >= (1 << 20))
    return s.Fail(absl::StrCat("an mbarrier transaction count is 1..2^20-1 bytes, not ", bytes),
                  loc);
  RecordTx(s, *this, bytes, /*announced=*/true, loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value tx = mlir::arith::ConstantIntOp::create(s.builder, l, bytes, 32);
  mlir::NVVM::MBarrierArriveExpectTxOp::create(s.builder, l, mlir::Type(), s.Unwrap(ptr_), tx,
                                               mlir::NVVM::MemScopeKind::CTA, false, mlir::Value());
  s.RecordArrival(array_, index_, 0, loc);
}

void Barrier::ArriveExpectTxIf(const std::vector<std::pair<const TensorMap*, Value>>& maps_if,
                               Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  std::vector<const TensorMap*> always;
  int most = 0;  // every condition holding
  Value bytes;   // the conditional boxes' bytes, where their conditions hold
  for (const auto& [m, when] : maps_if) {
    most += m->box_bytes();
    if (!when.valid()) {
      always.push_back(m);
      continue;
    }
    const Type i32 = Type::Of(Scalar::kI32);
    Value b = Select(when, s.Wrap(s.Materialize(m->box_bytes(), i32), i32), 0);
    bytes = bytes.valid() ? bytes + b : b;
  }
  if (!bytes.valid()) return ArriveExpectTx(always, loc);
  if (most <= 0 || most >= (1 << 20))
    return s.Fail(
        absl::StrCat("an mbarrier transaction count is 1..2^20-1 bytes, not up to ", most), loc);
  for (const TensorMap* m : always) bytes = bytes + m->box_bytes();
  // The static check balances each box against its copy: a conditional copy must be issued under
  // the same condition (Pipeline::Produce does).
  RecordTx(s, *this, most, /*announced=*/true, loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::NVVM::MBarrierArriveExpectTxOp::create(s.builder, l, mlir::Type(), s.Unwrap(ptr_),
                                               s.Materialize(bytes, Type::Of(Scalar::kI32)),
                                               mlir::NVVM::MemScopeKind::CTA, false, mlir::Value());
  s.RecordArrival(array_, index_, 0, loc);
}

void Barrier::ArriveCluster(const Operand& cta_rank, Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  if (s.manifest.cluster.count() < 2)
    return s.Fail("a remote arrive needs a cluster of 2 or more CTAs (ClusterDims)", loc);
  if (!RankIsI32(s, cta_rank, loc)) return;
  mlir::Location l = s.ToLoc(loc);
  mlir::Value addr = s.SharedAddress32(s.Unwrap(ptr_), l);
  s.InlineAsm(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, $0, $1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}",
      "r,r,~{memory}", {addr, s.Materialize(cta_rank, Type::Of(Scalar::kI32))}, mlir::Type(), l);
  s.RecordArrival(array_, index_, 0, loc, /*remote=*/true);
}

void Barrier::ArriveExpectTxCluster(const std::vector<const TensorMap*>& maps,
                                    const Operand& cta_rank, Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  if (s.manifest.cluster.count() < 2)
    return s.Fail("a remote arrive needs a cluster of 2 or more CTAs (ClusterDims)", loc);
  if (!RankIsI32(s, cta_rank, loc)) return;
  int bytes = 0;
  for (const TensorMap* m : maps) bytes += m->box_bytes();
  if (bytes <= 0 || bytes >= (1 << 20))
    return s.Fail(absl::StrCat("an mbarrier transaction count is 1..2^20-1 bytes, not ", bytes),
                  loc);
  RecordTx(s, *this, bytes, /*announced=*/true, loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value addr = s.SharedAddress32(s.Unwrap(ptr_), l);
  mlir::Value tx = mlir::arith::ConstantIntOp::create(s.builder, l, bytes, 32);
  s.InlineAsm(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, $0, $1;\n"
      "mbarrier.arrive.expect_tx.release.cta.shared::cluster.b64 _, [remote], $2;\n}",
      "r,r,r,~{memory}", {addr, s.Materialize(cta_rank, Type::Of(Scalar::kI32)), tx}, mlir::Type(),
      l);
  s.RecordArrival(array_, index_, 0, loc, /*remote=*/true);
}

void Barrier::Wait(const Operand& phase, Loc loc) const {
  KernelState& s = StateOf(*this, loc);
  // The parity is an i32 (0 or 1): another type would be converted to its bit pattern's low bit.
  if (Access::IsImm(phase) ? Access::IsFloatImm(phase)
                           : Access::Val(phase).type() != Type::Of(Scalar::kI32))
    return s.Fail(absl::StrCat("an mbarrier wait's parity is an i32 (0 or 1), not ",
                               Access::IsImm(phase) ? "a floating-point constant"
                                                    : Access::Val(phase).type().Str()),
                  loc);
  // A constant past 1 would wait on its low bit only (the PTX ISA's phaseParity): say so here.
  if (Access::IsImm(phase) && Access::Imm(phase) != 0 && Access::Imm(phase) != 1)
    return s.Fail(absl::StrCat("an mbarrier wait's parity is 0 or 1, not ",
                               static_cast<int64_t>(Access::Imm(phase)),
                               " (a phase number's parity is phase % 2, or phase & 1)"),
                  loc);
  mlir::Location l = s.ToLoc(loc);
  mlir::Value addr = s.SharedAddress32(s.Unwrap(ptr_), l);
  ++s.waits_built;
  if (s.watchdog_ms > 0) {
    auto [record, claim] = detail::WatchdogGlobals(s, l);
    const int site = static_cast<int>(s.manifest.watch_sites.size());
    s.manifest.watch_sites.push_back(LocString(loc));
    // The wait with a deadline on %globaltimer (ns); the first wait past it reports and traps.
    const std::string ptx = absl::StrCat(
        "{\n.reg .pred done, more;\n.reg .u64 t0, t1, rec;\n.reg .b32 old, v;\n"
        "mov.u64 t0, %globaltimer;\n"
        "kiln_wait_${:uid}:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
        "@done bra kiln_waited_${:uid};\n"
        "mov.u64 t1, %globaltimer;\nsub.u64 t1, t1, t0;\n",
        "setp.lt.u64 more, t1, ", static_cast<int64_t>(s.watchdog_ms) * 1000000, ";\n",
        "@more bra kiln_wait_${:uid};\n",
        detail::WatchdogReportPtx(site, detail::WatchdogStop::kWait, "$0", "$1", "$2", "$3"),
        "kiln_waited_${:uid}:\n}");
    s.InlineAsm(ptx, "r,r,l,l,~{memory}",
                {addr, s.Materialize(phase, Type::Of(Scalar::kI32)), record, claim}, mlir::Type(),
                l);
    s.waits.push_back({s.LastOp(), array_, index_, loc});
    return;
  }
  // try_wait returns after a hardware time limit even when the phase is incomplete: loop.
  s.InlineAsm(
      "{\n.reg .pred done;\nkiln_wait_${:uid}:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
      "@!done bra.uni kiln_wait_${:uid};\n}",
      "r,r,~{memory}", {addr, s.Materialize(phase, Type::Of(Scalar::kI32))}, mlir::Type(), l);
  s.waits.push_back({s.LastOp(), array_, index_, loc});
}

}  // namespace kiln
