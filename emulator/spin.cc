// Waits that can never end, found as they start rather than at the instruction budget. The
// emulator runs a launch's clusters one after another, so a flag that only another cluster sets
// never changes while this one runs; a wait on it used to spin until the budget ran out. A thread
// spins when it reads the same memory at the same instruction, gets the same value and holds the
// same registers as on its previous pass; its next pass is then the same again unless something
// else writes. When every thread of the cluster still running spins so, and the others wait at
// barriers with no asynchronous copy in flight to wake them, nothing can write: no schedule
// of this cluster ends the wait.
#include "absl/strings/str_format.h"
#include "emulator/cta.h"

namespace kiln::emu::detail {
namespace {

// Passes of the same loop before the cluster is examined: far more than a wait that ends takes
// on its own thread, and cheap to reach (the loop is a few instructions).
constexpr int64_t kSpinRepeats = 1024;

uint64_t Fnv(const uint8_t* bytes, uint64_t n, uint64_t h = 1469598103934665603ull) {
  for (uint64_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

}  // namespace

bool Cta::SpinsNow(const Thread& t) const {
  // Its last pass was the latest loop it ran: no more than one period of the loop ago.
  return t.spin.repeats >= kSpinRepeats && t.steps - t.spin.last_step <= t.spin.period;
}

absl::Status Cta::NoteSpinRead(Thread& t, const Instr& in, uint64_t address, const uint8_t* bytes,
                               uint64_t n, bool shared) {
  SpinWatch& w = t.spin;
  if (w.at != &in || w.address != address) {  // the common case, kept cheap: another read
    w.at = &in, w.address = address, w.repeats = -1;
    return absl::OkStatus();
  }
  const uint64_t value = Fnv(bytes, n);
  if (w.repeats < 0 || w.value != value) {
    w.value = value, w.repeats = 0, w.last_step = t.steps, w.releases = t.releases;
    return absl::OkStatus();
  }
  // The same read again: a pass of a loop if the registers and the loop's length repeat too.
  const uint64_t regs =
      Fnv(reinterpret_cast<const uint8_t*>(t.r.data()), t.r.size() * sizeof(uint64_t));
  const int64_t period = t.steps - w.last_step;
  // A pass that went through a barrier, a warp collective or an mbarrier wait is not a spin: the
  // threads parked there may be the ones that will write (a polling loop that meets each pass).
  const bool same =
      w.repeats > 0 && regs == w.regs && period == w.period && t.releases == w.releases;
  w.repeats = same ? w.repeats + 1 : 1;
  w.regs = regs, w.period = period, w.last_step = t.steps, w.releases = t.releases;
  if (w.repeats % kSpinRepeats != 0) return absl::OkStatus();
  yield_ = true;
  int spinning = 0, waiting = 0;
  const std::vector<Cta*> self = {this};
  for (const Cta* c : cluster_ ? cluster_->ctas : self) {
    if (c->AsyncWorkInFlight()) return absl::OkStatus();
    for (const Thread& u : c->threads_) {
      if (u.state == Thread::State::kDone) continue;
      if (u.state != Thread::State::kRun)
        ++waiting;
      else if (c->SpinsNow(u))
        ++spinning;
      else
        return absl::OkStatus();  // someone still works, and may write
    }
  }
  const std::string what = shared ? absl::StrFormat("shared memory at offset %d", address)
                                  : absl::StrFormat("global memory at 0x%x", address);
  return Fail(
      t, in,
      absl::StrFormat(
          "a wait that cannot end: this thread reads %s and gets the same value, pass after "
          "pass of the same loop (%d times), and so do %d other threads of the cluster while %d "
          "wait; nothing left to run writes it. %s",
          what, w.repeats, spinning - 1, waiting,
          shared ? "Check which thread should set it, and that it does before waiting itself"
                 : "If another block sets it: the emulator runs a launch's clusters one after "
                   "another, so a block cannot wait for one that has not run (on a GPU such a "
                   "wait needs every block resident at once, a cooperative launch)"));
}

}  // namespace kiln::emu::detail
