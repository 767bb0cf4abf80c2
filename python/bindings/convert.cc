#include "python/bindings/convert.h"

#include <cstring>

#include "examples/host_data.h"

namespace kiln::py {

namespace {
size_t Bytes(const std::string& type) { return type == "f32" ? 4 : 2; }

// Where element i (row-major) of `a` goes, or comes from, in column-major order.
size_t ColumnMajorIndex(const Array& a, size_t i) {
  const size_t rows = a.shape(0), cols = a.shape(1);
  return i % cols * rows + i / cols;
}
}  // namespace

std::vector<uint8_t> Narrowed(const Array& a, const std::string& type, bool column_major) {
  const float* f = static_cast<const float*>(reinterpret_cast<void*>(Address(a)));
  std::vector<uint8_t> out(a.size() * Bytes(type));
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t to = column_major ? ColumnMajorIndex(a, i) : i;
    if (type == "f32") {
      std::memcpy(&out[4 * to], &f[i], 4);
      continue;
    }
    const uint16_t h = type == "f16" ? examples::FloatToHalf(f[i]) : examples::FloatToBf16(f[i]);
    std::memcpy(&out[2 * to], &h, 2);
  }
  return out;
}

void Widen(const std::vector<uint8_t>& bytes, const std::string& type, Array& out,
           bool column_major) {
  float* f = static_cast<float*>(reinterpret_cast<void*>(Address(out)));
  if (bytes.size() < out.size() * Bytes(type)) return;
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t from = column_major ? ColumnMajorIndex(out, i) : i;
    if (type == "f32") {
      std::memcpy(&f[i], &bytes[4 * from], 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * from], 2);
    f[i] = type == "f16" ? examples::HalfToFloat(h) : examples::Bf16ToFloat(h);
  }
}

std::vector<uint8_t> Poisoned(size_t count, const std::string& type) {
  return std::vector<uint8_t>(count * Bytes(type), 0xff);
}

}  // namespace kiln::py
