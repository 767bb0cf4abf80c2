// Host-side data for the harness: 16-bit float conversions and random normal matrices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::examples {

uint16_t FloatToBf16(float f);  // round to nearest even
float Bf16ToFloat(uint16_t h);
uint16_t FloatToHalf(float f);  // round to nearest even
float HalfToFloat(uint16_t h);

// n samples of normal(0, 1) times `scale`, encoded as bf16 (or f16), reproducible for a seed; uses
// all cores.
std::vector<uint16_t> RandomNormal16(size_t n, uint64_t seed, bool half, double scale = 1.0);

// Which element a wrong result's report names (the GEMM, row-op and attention harnesses): one that
// is NaN or off by more than ten times the norm-relative tolerance times the reference's RMS
// (`ref2`, the sum of squares of `count` reference values): past what rounding within the
// tolerance can do to one element.
double WrongElementLimit(double tolerance, double ref2, int64_t count);
bool IsWrongElement(double got, double want, double limit);

}  // namespace kiln::examples
