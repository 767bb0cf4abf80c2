// kiln's errors in Python: an absl::Status that is not OK becomes a kiln.Error (a RuntimeError)
// carrying kiln's message, which names the DSL line where there is one.
#pragma once

#include <nanobind/nanobind.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::py {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The host API's messages name the command line's commands ("kiln gemm: ..."); in Python the
// same message names the function the caller called.
inline std::string AsPython(std::string message) {
  // A launch's error ends with the line that launched it: here a line of these bindings, which
  // tells a Python caller nothing.
  if (const size_t at = message.rfind(" (launched at ");
      at != std::string::npos && message.find("python/bindings/", at) != std::string::npos &&
      message.back() == ')')
    message.erase(at);
  for (const auto& [command, function] : {std::pair{"kiln gemm:", "kiln.gemm:"},
                                          std::pair{"kiln grouped-gemm:", "kiln.grouped_gemm:"},
                                          std::pair{"kiln attention:", "kiln.attention:"}})
    if (message.rfind(command, 0) == 0)
      return function + message.substr(std::string(command).size());
  return message;
}

// The status of an emulated launch that a Python signal handler stopped (module.cc): the
// exception the handler raised (KeyboardInterrupt) is already set, and goes up as it is.
inline constexpr const char* kInterrupted = "interrupted by a Python signal handler";
inline void RaiseIfInterrupted(const absl::Status& s) {
  if (s.message().find(kInterrupted) != absl::string_view::npos && PyErr_Occurred())
    throw nanobind::python_error();
}

inline void ThrowIfError(const absl::Status& s) {
  if (s.ok()) return;
  RaiseIfInterrupted(s);
  throw Error(AsPython(std::string(s.message())));
}

// The same for a call that the host API's attention entry point serves under its own name
// (kiln.varlen_attention, kiln.decode_attention, ...): its messages name that call.
inline void ThrowIfError(const absl::Status& s, const std::string& call) {
  if (s.ok()) return;
  RaiseIfInterrupted(s);
  std::string message = AsPython(std::string(s.message()));
  bool named = false;
  for (const std::string prefix : {"kiln.attention:", "kiln attention backward:"})
    if (message.rfind(prefix, 0) == 0)
      message = call + ":" + message.substr(prefix.size()), named = true;
  // Messages from below the entry point (a bundle not found, the emulator's) name the call too.
  if (!named && message.rfind(call, 0) != 0) message = call + ": " + message;
  throw Error(message);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

}  // namespace kiln::py
