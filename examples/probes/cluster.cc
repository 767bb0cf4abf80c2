// probe/cluster: distributed shared memory and the split cluster barrier, in clusters of four CTAs
// of 128 threads (probe/cluster16: of sixteen, the non-portable size). Each CTA puts its slice of x
// in its shared memory, meets its cluster (every CTA started), puts twice its slice in the next
// CTA's (a store to a peer), meets its cluster again (ClusterArrive, ClusterWait, with work
// between), then reads the previous CTA's slice (a scalar load from a peer, lanes permuted), the
// CTA two on's (16-byte loads from a peer) and what the previous CTA stored into its own, and
// counts into CTA 0's counter by atomics on a peer. The check (examples/probe_check.cc) recomputes
// every output from x and the cluster's ranks; the layout of the outputs is probe::kClusterPlanes.
#include "absl/strings/str_cat.h"
#include "examples/probes/probes.h"
#include "examples/registry.h"
#include "kiln/hopper.h"
#include "kiln/memory_ops.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildClusterProbe(const std::string& name, int kCluster) {
  constexpr int kThreads = probe::kClusterThreads;
  Kernel k(name, sm90a(), {kThreads});
  k.ClusterDims({static_cast<unsigned>(kCluster), 1, 1});
  Value x = k.PtrParam("x", f32), y = k.PtrParam("y", f32);
  Value n = k.I64Param("n"), stride = k.I64Param("stride");
  // Whole clusters (the division rounds up) of kCluster CTAs of 128 elements each.
  k.Grid(absl::StrCat("n/", kThreads * kCluster, "*", kCluster));
  SmemTile mine = k.Smem(f32, 1, kThreads), given = k.Smem(f32, 1, kThreads);
  SmemTile count = k.Smem(i32, 1, 1);
  Value tid = k.ThreadIdx(), rank = k.ClusterCtaRank();
  Value g = k.BlockIdx(0).To(i64) * kThreads + tid.To(i64);
  Value in_range = g < n;
  // Threads past n take part in every barrier with a 0 of their own.
  Value v = Select(in_range, k.Load(x + Min(g, n - 1)), k.F32(0));
  k.If(tid == 0, [&] { k.Store(count.At(0, 0), k.I32(0)); });
  k.Store(mine.At(0, tid), v);
  // Every CTA of the cluster has started before any reaches a peer's shared memory. The arrive
  // orders nothing: the next barrier's arrive releases the stores above to the peers.
  k.ClusterArrive(/*relaxed=*/true);
  k.ClusterWait();
  k.Store(k.PeerPointer(given.At(0, tid), (rank + 1) % kCluster), v * 2.0);
  k.ClusterArrive();
  Value permuted = tid * 5 % kThreads, quad = tid / 4 * 4;  // (independent of the peers' bytes)
  k.ClusterWait();
  RedAdd(k.PeerPointer(count.At(0, 0), 0), tid + 1);
  Value from_previous =
      k.Load(k.PeerPointer(mine.At(0, permuted), (rank + kCluster - 1) % kCluster));
  Value four = k.Load(k.PeerPointer(mine.At(0, quad), (rank + 2) % kCluster), 4);
  Value from_store = k.Load(given.At(0, tid));
  k.If(in_range, [&] {
    k.Store(y + g, from_previous);
    k.Store(y + stride + g, from_store);
    k.Store(y + stride * 2 + g, four.Lane(0) + four.Lane(1) + four.Lane(2) + four.Lane(3));
  });
  // Every CTA's atomics have landed in CTA 0 (and no CTA reads a peer's memory past here, so
  // each may exit after it).
  k.ClusterArrive();
  k.ClusterWait();
  k.If((rank == 0) & (tid == 0),
       [&] { k.Store(y + stride * 3 + k.ClusterIdx(0).To(i64), k.Load(count.At(0, 0)).To(f32)); });
  return k.Build();
}

}  // namespace
KILN_EXAMPLE_VARIANT(
    cluster4, "probe/cluster",
    "distributed shared memory (a peer's loads, stores and atomics) between the halves "
    "of a split cluster barrier, in clusters of 4 CTAs",
    [] { return BuildClusterProbe("probe/cluster", probe::kClusterCtas); });
KILN_EXAMPLE_VARIANT(cluster16, "probe/cluster16",
                     "probe/cluster in clusters of 16 CTAs, past the portable 8 (sm_90's largest)",
                     [] {
                       return BuildClusterProbe("probe/cluster16", probe::kClusterCtasLargest);
                     });
}  // namespace kiln::examples
