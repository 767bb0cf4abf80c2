// Timing device work for the harnesses: medians of interleaved runs, timed with events.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/runtime/driver.h"

namespace kiln::examples {

// Medians of `iterations` timed calls of each of `fns`, in ms, after `warmup` untimed calls of
// each. The calls alternate (f0, f1, f0, f1, ...) so that every function sees the same clocks
// and temperature: a GPU that throttles during a run skews back-to-back blocks of timings.
// `before_each`, when set, runs untimed before every timed call (L2Evictor, examples/harness.h).
template <typename Fn>
absl::StatusOr<std::vector<double>> InterleavedMediansMs(
    const std::vector<Fn>& fns, int warmup, int iterations,
    const std::function<absl::Status()>& before_each = nullptr) {
  if (iterations < 1) return absl::InvalidArgumentError("timing needs at least one run (--iters)");
  for (int i = 0; i < warmup; ++i)
    for (const Fn& fn : fns)
      if (absl::Status s = fn(); !s.ok()) return s;
  absl::StatusOr<rt::EventTimer> timer = rt::EventTimer::Create();
  if (!timer.ok()) return timer.status();
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < iterations; ++i) {
    for (size_t f = 0; f < fns.size(); ++f) {
      if (before_each)
        if (absl::Status s = before_each(); !s.ok()) return s;
      if (absl::Status s = timer->Start(); !s.ok()) return s;
      if (absl::Status s = fns[f](); !s.ok()) return s;
      absl::StatusOr<float> t = timer->StopMs();
      if (!t.ok()) return t.status();
      ms[f].push_back(*t);
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& m : ms) {
    std::sort(m.begin(), m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

}  // namespace kiln::examples
