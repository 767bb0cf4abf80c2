#include "kiln/target.h"

#include "absl/strings/str_cat.h"
#include "kiln/bundle/manifest.h"

namespace kiln {

// PTX versions: the lowest that holds every instruction kiln emits for the chip (mma.sync and
// cp.async: 7.0+; wgmma, setmaxnreg, TMA multicast: 8.0; tcgen05: 8.6). Shared memory budgets are
// the bundle format's (rt::SmemBudgetBytes), which the emulator checks launches against too.
const Target& sm80() {
  static const Target t{"sm_80", 78, rt::SmemBudgetBytes("sm_80"), 80};
  return t;
}
const Target& sm90a() {
  static const Target t{"sm_90a", 80, rt::SmemBudgetBytes("sm_90a"), 90};
  return t;
}
const Target& sm100a() {
  static const Target t{"sm_100a", 86, rt::SmemBudgetBytes("sm_100a"), 100};
  return t;
}

absl::StatusOr<Target> Target::Named(absl::string_view chip) {
  for (const Target* t : {&sm80(), &sm90a(), &sm100a()})
    if (t->chip == chip) return *t;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown target '", chip, "' (known: sm_80, sm_90a, sm_100a)"));
}

}  // namespace kiln
