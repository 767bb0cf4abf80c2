#include "kiln/bundle/tensor_map_spec.h"

#include "absl/strings/str_cat.h"

namespace kiln::rt {

uint64_t TensorMapSpanBytes(const TensorMapSpec& spec) {
  if (spec.dims.empty()) return 0;
  for (uint64_t d : spec.dims)
    if (d == 0) return 0;
  uint64_t bytes = 0, term = 0;  // (past 2^64: the most there is, which no array holds)
  if (__builtin_mul_overflow(spec.dims[0], uint64_t(TmaElementBytes(spec.dtype)), &bytes))
    return UINT64_MAX;
  for (size_t i = 1; i < spec.dims.size() && i - 1 < spec.strides_bytes.size(); ++i)
    if (__builtin_mul_overflow(spec.dims[i] - 1, spec.strides_bytes[i - 1], &term) ||
        __builtin_add_overflow(bytes, term, &bytes))
      return UINT64_MAX;
  return bytes;
}

int TmaElementBytes(TmaDtype dtype) {
  switch (dtype) {
    case TmaDtype::kU8:
      return 1;
    case TmaDtype::kU16:
    case TmaDtype::kF16:
    case TmaDtype::kBF16:
      return 2;
    case TmaDtype::kF32:
      return 4;
  }
  return 0;
}

absl::Status ValidateTmaBox(const std::vector<uint32_t>& box, TmaDtype dtype, TmaSwizzle swizzle) {
  for (size_t i = 0; i < box.size(); ++i)
    if (box[i] == 0 || box[i] > 256)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor map box dim ", i, " = ", box[i], " must be in 1..256"));
  if (box.empty()) return absl::InvalidArgumentError("tensor map box is empty");
  const uint64_t inner_bytes = box[0] * TmaElementBytes(dtype);
  const uint64_t span[] = {0, 32, 64, 128};
  if (swizzle != TmaSwizzle::kNone && inner_bytes > span[static_cast<int>(swizzle)])
    return absl::InvalidArgumentError(absl::StrCat("tensor map inner box of ", inner_bytes,
                                                   " bytes exceeds its swizzle span of ",
                                                   span[static_cast<int>(swizzle)]));
  if (inner_bytes % 16 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor map inner box must be a multiple of 16 bytes, not ", inner_bytes, " (",
                     box[0], " elements of ", TmaElementBytes(dtype), " bytes)"));
  return absl::OkStatus();
}

absl::Status ValidateTensorMap(const TensorMapSpec& spec, uint64_t address) {
  const size_t rank = spec.dims.size();
  if (rank < 1 || rank > 5) return absl::InvalidArgumentError("tensor map rank must be 1..5");
  if (spec.box.size() != rank || spec.strides_bytes.size() != rank - 1)
    return absl::InvalidArgumentError("tensor map box/strides do not match its rank");
  if (address % 16 != 0)
    return absl::InvalidArgumentError("tensor map base address must be 16-byte aligned");
  // The driver's limits (cuTensorMapEncodeTiled): strides multiples of 16 under 2^40 bytes, 1 to
  // 2^32 elements a dimension; a size below 0 (an i32 the caller got wrong) reads as a huge one
  // here, and is printed signed.
  for (uint64_t s : spec.strides_bytes)
    if (s % 16 != 0 || s >= (uint64_t{1} << 40))
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor map stride ", static_cast<int64_t>(s), " bytes",
          s % 16 ? " is not a multiple of 16" : ": at most 2^40 - 1 (a negative size?)"));
  for (size_t i = 0; i < rank; ++i) {
    if (spec.dims[i] == 0)
      return absl::InvalidArgumentError(absl::StrCat("tensor map dim ", i, " is empty"));
    if (spec.dims[i] > (uint64_t{1} << 32))
      return absl::InvalidArgumentError(absl::StrCat("tensor map dim ", i, " is ",
                                                     static_cast<int64_t>(spec.dims[i]),
                                                     ": 1 to 2^32 elements (a negative size?)"));
  }
  return ValidateTmaBox(spec.box, spec.dtype, spec.swizzle);
}

}  // namespace kiln::rt
