// Typed launch arguments checked against a manifest on the CPU (no driver needed); the same
// checks on a loaded kernel run in the GPU tests (LaunchGpu).
#include "kiln/runtime/launch.h"

#include "gtest/gtest.h"

namespace kiln::rt {
namespace {

Manifest Saxpy() {
  Manifest m;
  m.name = "ops/saxpy";
  m.source = "examples/ops/saxpy.cc:9";
  m.params = {{"x", ParamSpec::Kind::kPointer}, {"y", ParamSpec::Kind::kPointer},
              {"a", ParamSpec::Kind::kF32}, {"n", ParamSpec::Kind::kI64}};
  return m;
}

TEST(LaunchArgs, MatchingKindsPass) {
  EXPECT_TRUE(CheckArgs(Saxpy(), {Arg::Ptr(0x1000), Arg::Ptr(0x2000), Arg::F32(2), Arg::I64(7)}).ok());
}

TEST(LaunchArgs, CountNamesTheSignatureAndLine) {
  absl::Status s = CheckArgs(Saxpy(), {Arg::Ptr(0x1000), Arg::F32(2)});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(), "examples/ops/saxpy.cc:9: ops/saxpy takes 4 arguments (ptr x, ptr y, f32 a, i64 n), not 2");
}

TEST(LaunchArgs, KindNamesTheParameter) {
  // An int where the kernel takes an f32 would be reinterpreted bit for bit: refused.
  absl::Status s = CheckArgs(Saxpy(), {Arg::Ptr(0x1000), Arg::Ptr(0x2000), Arg::I32(2), Arg::I64(7)});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("examples/ops/saxpy.cc:9: ops/saxpy argument 2 (a) is f32, not i32"),
            std::string::npos) << s;
  s = CheckArgs(Saxpy(), {Arg::Ptr(0x1000), Arg::Ptr(0x2000), Arg::F32(2), Arg::I32(7)});
  EXPECT_NE(s.message().find("argument 3 (n) is i64, not i32"), std::string::npos) << s;
}

TEST(LaunchArgs, ArgumentsKeepTheirBytes) {
  Arg f = Arg::F32(1.5f), i = Arg::I64(-3);
  EXPECT_EQ(*static_cast<float*>(f.data()), 1.5f);
  EXPECT_EQ(*static_cast<int64_t*>(i.data()), -3);
}

}  // namespace
}  // namespace kiln::rt
