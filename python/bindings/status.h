// kiln's errors in Python: an absl::Status that is not OK becomes a kiln.Error (a RuntimeError)
// carrying kiln's message, which names the DSL line where there is one.
#pragma once

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::py {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw Error(std::string(s.message()));
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

}  // namespace kiln::py
