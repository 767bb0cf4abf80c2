// A TMA descriptor's description, as a manifest records it and as cuTensorMapEncodeTiled takes
// it, with the encoder's rules checked here so that a bad spec is a message rather than
// CUDA_ERROR_INVALID_VALUE. Encoding it is the runtime's (kiln/runtime/tensor_map.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace kiln::rt {

enum class TmaDtype { kU8 = 0, kU16 = 1, kF16 = 6, kF32 = 7, kBF16 = 9 };  // CUtensorMapDataType
enum class TmaSwizzle { kNone = 0, k32B = 1, k64B = 2, k128B = 3 };        // CUtensorMapSwizzle
enum class TmaL2Promotion { kNone = 0, k64B = 1, k128B = 2, k256B = 3 };
enum class TmaOobFill { kZero = 0, kNanRequestZeroFma = 1 };

struct TensorMapSpec {
  TmaDtype dtype = TmaDtype::kBF16;
  std::vector<uint64_t> dims;           // innermost first, elements
  std::vector<uint64_t> strides_bytes;  // rank - 1 entries: strides of dims 1.., in bytes
  std::vector<uint32_t> box;            // innermost first, elements
  TmaSwizzle swizzle = TmaSwizzle::kNone;
  TmaL2Promotion l2 = TmaL2Promotion::kNone;
  TmaOobFill oob = TmaOobFill::kZero;
};

int TmaElementBytes(TmaDtype dtype);
// The bytes from a map's address to the end of its last element (0 for an empty tensor; past
// 2^64, UINT64_MAX): what the array under it must hold.
uint64_t TensorMapSpanBytes(const TensorMapSpec& spec);
// The box rules alone (extents 1..256, inner extent a multiple of 16 bytes within the swizzle
// span): what a kernel can check when it declares a map, before any size is known.
absl::Status ValidateTmaBox(const std::vector<uint32_t>& box, TmaDtype dtype, TmaSwizzle swizzle);
// Checks the spec against the rules of cuTensorMapEncodeTiled (rank 1..5, 16-byte strides,
// box <= 256 per dim, swizzle span).
absl::Status ValidateTensorMap(const TensorMapSpec& spec, uint64_t address);

}  // namespace kiln::rt
