#include "examples/host_data.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kiln::examples {
namespace {

TEST(HostData, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0xffff)));  // the harness's poison value
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.140625f)), 3.140625f);
}

TEST(HostData, HalfConversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.5f), 0xc100);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(FloatToHalf(0.1f)), 0.0999755859375f);
  EXPECT_TRUE(std::isnan(HalfToFloat(0xffff)));
}

TEST(HostData, RandomNormalHasUnitMomentsAndNoZeros) {
  std::vector<uint16_t> v = RandomNormal16(1 << 20, 42, false);
  double sum = 0, sq = 0;
  size_t zeros = 0;
  for (uint16_t x : v) {
    const double f = Bf16ToFloat(x);
    sum += f, sq += f * f, zeros += f == 0;
  }
  const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_LT(zeros, v.size() / 1000);
  EXPECT_EQ(RandomNormal16(1000, 42, false), RandomNormal16(1000, 42, false));
  EXPECT_NE(RandomNormal16(1000, 42, false), RandomNormal16(1000, 43, false));
}

}  // namespace
}  // namespace kiln::examples
