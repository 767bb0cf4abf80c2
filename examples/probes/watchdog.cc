// Planted bugs for the GPU debug mode (Kernel::Watchdog). planted/lost_arrival: an mbarrier that
// expects two arrivals and gets one, so every thread waits forever: after 200 ms the first wait
// past its deadline records itself and traps, and rt::Synchronize says which wait it was.
// planted/row_past_tile: a shared tile indexed one row past its end by a run-time value, which
// would write the next tile's bytes: the index check records the At's line and traps. Run each
// alone (kiln run planted/...): the trap leaves the process's CUDA context unusable.
#include "examples/registry.h"
#include "kiln/hopper.h"

namespace kiln::examples {
namespace {

absl::StatusOr<KernelDef> BuildLostArrival() {
  Kernel k("planted/lost_arrival", sm90a(), {128});
  k.Watchdog(200);
  k.Grid("1");
  k.Attribute("planted", "expects the watchdog to stop it at the wait");
  Barriers bars = k.SmemBarriers(1);
  Value tid = k.ThreadIdx();
  k.If(tid == 0, [&] { bars[0].Init(2); });  // two arrivals expected
  k.FenceBarrierInit();
  k.SyncThreads();
  k.If(tid == 0, [&] { bars[0].Arrive(); });  // only one comes
  bars[0].Wait(0);
  return k.Build();
}

absl::StatusOr<KernelDef> BuildRowPastTile() {
  Kernel k("planted/row_past_tile", sm90a(), {64});
  k.Watchdog(200);
  k.Grid("1");
  k.Attribute("planted", "expects the debug mode to stop it at the index");
  SmemTile a = k.Smem(f32, 4, 32), b = k.Smem(f32, 4, 32);
  Value tid = k.ThreadIdx();
  k.Store(b.At(tid / 32, tid % 32), k.F32(0));
  k.Store(a.At(tid / 32 * 2 + 3, tid % 32), k.F32(1));  // warp 1: row 5 of 4, b's row 1
  return k.Build();
}

}  // namespace
KILN_EXAMPLE("planted/row_past_tile",
             "a planted shared index past its tile that the debug mode stops with its line",
             BuildRowPastTile);
KILN_EXAMPLE("planted/lost_arrival",
             "a planted hang (one arrival of two) that the watchdog stops with its line",
             BuildLostArrival);
}  // namespace kiln::examples
