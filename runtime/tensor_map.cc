#include "kiln/runtime/tensor_map.h"

#include "kiln/runtime/driver.h"

namespace kiln::rt {

absl::StatusOr<cu::CUtensorMap> EncodeTensorMap(const TensorMapSpec& spec, uint64_t address) {
  if (absl::Status s = ValidateTensorMap(spec, address); !s.ok()) return s;
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  std::vector<uint32_t> element_strides(spec.dims.size(), 1);
  cu::CUtensorMap map{};
  if (absl::Status s =
          (*d)->Check((*d)->api().cuTensorMapEncodeTiled(
                          &map, static_cast<int>(spec.dtype), spec.dims.size(),
                          reinterpret_cast<void*>(address), spec.dims.data(),
                          spec.strides_bytes.data(), spec.box.data(), element_strides.data(),
                          /*interleave=*/0, static_cast<int>(spec.swizzle),
                          static_cast<int>(spec.l2), static_cast<int>(spec.oob)),
                      "cuTensorMapEncodeTiled");
      !s.ok())
    return s;
  return map;
}

}  // namespace kiln::rt
