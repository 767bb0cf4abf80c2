// cuBLAS through dlopen: the harness's reference and baseline where the library is installed.
#pragma once

#include "absl/status/statusor.h"
#include "kiln/runtime/manifest.h"

namespace kiln::examples {

class Cublas {
 public:
  // Unavailable when no libcublas can be loaded.
  static absl::StatusOr<Cublas*> Get();
  // C = A * B for the spec's dtypes and storage orders, fp32 compute, on the default stream.
  absl::Status Gemm(const rt::GemmSpec& spec, const rt::ProblemSize& size, uint64_t a, uint64_t b,
                    uint64_t c) const;
  const std::string& library() const { return library_; }

 private:
  using Handle = void*;
  using CreateFn = int (*)(Handle*);
  using GemmExFn = int (*)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                           const void*, int, int, const void*, void*, int, int, int, int);
  Handle handle_ = nullptr;
  GemmExFn gemm_ex_ = nullptr;
  std::string library_;
};

}  // namespace kiln::examples
