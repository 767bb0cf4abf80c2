// Arrays as the bindings see them: any object with __dlpack__ (a torch tensor on the GPU, a NumPy
// array on the host), read through nanobind's ndarray without a copy.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::py {

using Array = nanobind::ndarray<>;

// Where an array lives: the kernels run on the GPU for CUDA arrays and on the emulator for host
// ones; a call mixing the two is refused.
enum class Where { kHost, kCuda };

// "bf16", "f16", "f32", "i32", ... ; "?" for a type kiln has no name for.
std::string DtypeName(const Array& a);
// Throws for a device kiln cannot use (neither the host nor CUDA).
Where WhereOf(const Array& a, const std::string& what);
// The address of the first element (data + byte offset).
uint64_t Address(const Array& a);
// Row-major and packed.
bool IsContiguous(const Array& a);
// Its elements fill one block from its first on, in some order of its dimensions (row-major, a
// transpose of one, ...): no gaps, no negative strides.
bool IsDense(const Array& a);
std::vector<int64_t> ShapeOf(const Array& a);
std::string ShapeText(const Array& a);  // "(4, 100)"

// Throws kiln.Error "<call>: <what> must ..." unless `a` is of rank `rank` (-1: any), of one of
// `dtypes` and, with `contiguous`, row-major and packed. `result`: `a` is the caller's out=, which
// a packed copy would not help (the message says what to do instead).
void Require(const Array& a, const std::string& call, const std::string& what, int rank,
             const std::vector<std::string>& dtypes, bool contiguous = true, bool result = false);

// Throws kiln.Error "<call>: ..." unless a GEMM epilogue's c and residual, where given, have out's
// shape and its bias holds `n` values (one per column of the product).
void RequireEpilogueShapes(const std::string& call, const std::optional<Array>& c,
                           const std::optional<Array>& bias, const std::optional<Array>& residual,
                           const Array& out, int64_t n);
// A GPU bias is read as n packed values: a strided one (a slice with a step) would be misread.
void RequirePackedBias(const std::string& call, const Array& bias);

}  // namespace kiln::py
