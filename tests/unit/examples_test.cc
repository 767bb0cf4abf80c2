// Every registered example builds, lowers to PTX, and ptxas accepts it for its target with no
// spills and no stack frame.
#include "examples/registry.h"
#include "gtest/gtest.h"
#include "kiln/lowering.h"

namespace kiln::examples {
namespace {

class ExampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleTest, LowersAndPtxasAccepts) {
  const Example* e = Find(GetParam());
  ASSERT_NE(e, nullptr);
  absl::StatusOr<KernelDef> def = e->build();
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<std::string> ptx = EmitPtx(*def);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(".target " + def->target().chip), std::string::npos);
  if (!HaveToolkit()) GTEST_SKIP() << "no CUDA toolkit (ptxas) here; PTX emitted but not assembled";
  absl::StatusOr<PtxasResult> cubin = RunPtxas(*ptx, def->target().chip);
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  EXPECT_FALSE(cubin->cubin.empty());
  EXPECT_NE(cubin->log.find("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
            std::string::npos)
      << cubin->log;
  std::cout << GetParam() << ": " << cubin->log.substr(cubin->log.find("Used")) << std::endl;
}

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const Example& e : All()) names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(All, ExampleTest, ::testing::ValuesIn(Names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (!isalnum(c)) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln::examples
