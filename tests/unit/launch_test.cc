// Typed launch arguments checked against a manifest on the CPU (no driver needed); the same
// checks on a loaded kernel run in the GPU tests (LaunchGpu).
#include "kiln/runtime/launch.h"

#include "gtest/gtest.h"
#include "kiln/ops/op_device.h"

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

// A kernel over a tensor map whose dims are rules, one bound at launch, and a schedule table.
Manifest TmaKernel() {
  absl::StatusOr<Manifest> m = Manifest::Parse(
      "kiln-bundle 1\nname test/tma\nentry tma\ntarget sm_90a\nblock 128 1 1\ncluster 1 1 1\nsmem 0\n"
      "grid M/64 1 1\nparam M i32\nparam tmA tmap A value bf16 K,M K*2 64,64 128B\n"
      "param tmX tmap x value f32 - - 32,8 none\nparam s table hilbert M/64 M/64 4 16\n"
      "param K i32\nrequire M 64 t.cc:3\nsource t.cc:1\n");
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

TEST(LaunchArgs, TensorsAndTables) {
  const Manifest m = TmaKernel();
  EXPECT_TRUE(CheckArgs(m, {Arg::I32(128), Arg::Tensor(0x1000), Arg::Tensor(0x2000, {32, 100}, {128}),
                            Arg::Schedule(), Arg::I32(64)})
                  .ok());
  // A pointer where the kernel takes a tensor map.
  absl::Status s = CheckArgs(m, {Arg::I32(128), Arg::Ptr(0x1000), Arg::Tensor(0x2000, {32, 100}, {128}),
                                 Arg::Schedule(), Arg::I32(64)});
  EXPECT_EQ(s.message().substr(0, 65), "t.cc:1: test/tma argument 1 (tmA) is tensor map, not ptr; it take");
  // Dims bound at launch must come with the launch.
  s = CheckArgs(m, {Arg::I32(128), Arg::Tensor(0x1000), Arg::Tensor(0x2000), Arg::Schedule(), Arg::I32(64)});
  EXPECT_NE(s.message().find("argument 2 (tensor map tmX over x) has its dims bound at launch: pass "
                             "Arg::Tensor(address, dims, strides) with 2 dims and 1 strides"),
            std::string::npos) << s;
  s = CheckArgs(m, {Arg::I32(128), Arg::Tensor(0x1000, {1, 2, 3}, {4, 5}), Arg::Tensor(0x2000, {32, 100}, {128}),
                    Arg::Schedule(), Arg::I32(64)});
  EXPECT_NE(s.message().find("argument 1 (tensor map tmA over A) is rank 2: it takes 2 dims and 1 strides, not 3 and 2"),
            std::string::npos) << s;
  EXPECT_EQ(SymbolsOf(m, {Arg::I32(128), Arg::Tensor(0), Arg::Tensor(0), Arg::Schedule(), Arg::I32(64)}),
            (Symbols{{"K", 64}, {"M", 128}}));
}

// A runner's LaunchMemo repeats a call whose key matches byte for byte, so two calls that differ
// anywhere must give two keys: strings carry their lengths, optionals whether they hold a value.
TEST(LaunchMemoKey, FieldsNeverRunTogether) {
  auto key = [](const std::string& a, const std::string& b) {
    return CallKey().Add(a).Add(b).Take();
  };
  EXPECT_NE(key("ab", "c"), key("a", "bc"));
  EXPECT_NE(key("", "x"), key("x", ""));
  EXPECT_EQ(key("bf16", "f32"), key("bf16", "f32"));
  auto flag = [](std::optional<bool> b) { return CallKey().Add(b).Take(); };
  EXPECT_NE(flag(std::nullopt), flag(false));
  EXPECT_NE(flag(false), flag(true));
  EXPECT_NE(CallKey().Add(int64_t{1}).Add(int64_t{2}).Take(),
            CallKey().Add(int64_t{2}).Add(int64_t{1}).Take());
  EXPECT_NE(CallKey().Add(1.0f).Take(), CallKey().Add(2.0f).Take());
}

}  // namespace
}  // namespace kiln::rt
