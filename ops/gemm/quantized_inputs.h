// The GEMM harnesses' random inputs: normal values, rounded to bf16 or quantized to e4m3 with
// per-group scales, made in parallel chunks of their own seeds (the same values whatever the host's
// threads): the large problems' inputs are hundreds of millions of values.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::examples {

// body(i) for i in [0, count), spread over the host's threads.
void InParallel(int64_t count, const std::function<void(int64_t)>& body);

// `count` normal(0, 1) values times `scale`, from `seed`.
std::vector<double> NormalValues(int64_t count, uint64_t seed, double scale = 1);

uint16_t Bf16Of(double x);  // to nearest even (x finite)
double Bf16Value(uint16_t h);

// e4m3's value of `code` (0 to 0x7e, no sign), and the nearest code of x, ties to even, saturating
// at 448 (as cvt.rn.satfinite): the PTX ISA's format (bias 7, no infinities, 0x7f NaN).
double E4m3Value(int code);
uint8_t E4m3Of(double x);
// The same for e5m2 (codes 0 to 0x7b, bias 15, largest 57344; 0x7c infinity, past it NaN).
double E5m2Value(int code);
uint8_t E5m2Of(double x);

// One operand of `rows` x K quantized per group of `group_rows` x `group_k` (rows or K: all of it)
// with scales at scale[(r / group_rows) * row_stride + (k / group_k) * k_stride] (a group's largest
// magnitude to 448, e4m3's largest, or with `e5m2` to 57344; 1 for a group of zeros). `exact` is
// kept for the caller.
struct Quantized {
  std::vector<double> exact, dequantized;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};
// With `power_of_two`, each scale is the least power of two that takes the group's largest
// magnitude within the type's (as MXFP8's UE8M0 scales are).
Quantized Quantize(std::vector<double> exact, int64_t rows, int64_t K, int64_t group_rows,
                   int64_t group_k, int64_t row_stride, int64_t k_stride, int64_t scale_count,
                   bool e5m2 = false, bool power_of_two = false);

// Power-of-two scales per 1 x 32 (row r, group j at scales[r * ceil(K / 32) + j]) as UE8M0 bytes
// (2^(e - 127)), a row's in K order, rows of 4 * ceil(K / 128) bytes, the padding 127 (1.0).
std::vector<uint8_t> Ue8m0Rows(const std::vector<float>& scales, int64_t rows, int64_t K);

}  // namespace kiln::examples
