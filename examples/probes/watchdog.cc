// planted/lost_arrival: an mbarrier that expects two arrivals and gets one, so every thread
// waits forever, built in the GPU debug mode (Kernel::Watchdog): after 200 ms the first wait
// past its deadline records itself and traps, and rt::Synchronize says which wait it was. Run
// it alone (kiln run planted/lost_arrival): the trap leaves the process's CUDA context unusable.
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

}  // namespace
KILN_EXAMPLE("planted/lost_arrival",
             "a planted hang (one arrival of two) that the watchdog stops with its line",
             BuildLostArrival);
}  // namespace kiln::examples
