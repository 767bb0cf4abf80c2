// TMA descriptors through cuTensorMapEncodeTiled, the spec checked first
// (kiln/bundle/tensor_map_spec.h).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kiln/bundle/tensor_map_spec.h"
#include "kiln/runtime/cuda_api.h"

namespace kiln::rt {

absl::StatusOr<cu::CUtensorMap> EncodeTensorMap(const TensorMapSpec& spec, uint64_t address);

}  // namespace kiln::rt
