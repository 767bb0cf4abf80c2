// cuBLAS through dlopen: the harness's reference and baseline where the library is installed.
#pragma once

#include "absl/status/statusor.h"
#include "examples/gemm_spec.h"

namespace kiln::examples {

class Cublas {
 public:
  // Unavailable when no libcublas can be loaded.
  static absl::StatusOr<Cublas*> Get();
  // C = A * B for the spec's dtypes and storage orders on the default stream, in fp32 compute
  // (the reference), or with `spec_accumulator` in the spec's accumulator type (fp16 compute
  // for an f16 accumulator: the like-for-like baseline the harness times).
  absl::Status Gemm(const GemmSpec& spec, const rt::GemmSize& size, uint64_t a, uint64_t b,
                    uint64_t c, bool spec_accumulator = false) const;
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
