// The golden-PTX gate: every registered kernel's PTX hashes to what tests/golden/ptx.sha256
// records, so a change that claims "PTX byte-identical" is checked, and one that changes PTX says
// so in the diff of that file. tools/refresh_golden.sh rewrites it (KILN_UPDATE_GOLDEN=1).
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "examples/registry.h"
#include "gtest/gtest.h"
#include "kiln/lowering.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/SHA256.h"

namespace kiln::examples {
namespace {

const char* const kHeader = "# sha256 of each kernel's PTX (kiln ptx NAME), LLVM ";

std::string Sha256(const std::string& text) {
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(text)), /*LowerCase=*/true);
}

TEST(GoldenPtx, EveryKernelMatchesItsRecordedHash) {
  std::map<std::string, std::string> now;
  for (const Example& e : All()) {
    absl::StatusOr<KernelDef> def = e.build();
    ASSERT_TRUE(def.ok()) << e.name << ": " << def.status();
    absl::StatusOr<std::string> ptx = EmitPtx(*def);
    ASSERT_TRUE(ptx.ok()) << e.name << ": " << ptx.status();
    now[e.name] = Sha256(*ptx);
  }
  if (std::getenv("KILN_UPDATE_GOLDEN") != nullptr) {
    std::ofstream out(KILN_GOLDEN_FILE);
    out << kHeader << LLVM_VERSION_STRING << "; refresh: tools/refresh_golden.sh\n";
    for (const auto& [name, hash] : now) out << name << " " << hash << "\n";
    ASSERT_TRUE(out.good()) << "cannot write " << KILN_GOLDEN_FILE;
    GTEST_SKIP() << "wrote " << now.size() << " hashes to " << KILN_GOLDEN_FILE;
  }
  std::ifstream in(KILN_GOLDEN_FILE);
  ASSERT_TRUE(in.good()) << "no " << KILN_GOLDEN_FILE << "; run tools/refresh_golden.sh";
  std::string header;
  std::getline(in, header);
  const std::string llvm = std::string(kHeader) + LLVM_VERSION_STRING + ";";
  if (header.rfind(llvm, 0) != 0)
    GTEST_SKIP() << "the hashes were recorded with another LLVM (" << header << "); this is LLVM "
                 << LLVM_VERSION_STRING << ", whose PTX may differ in ways kiln does not control";
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name, hash;
    if (fields >> name >> hash) golden[name] = hash;
  }
  for (const auto& [name, hash] : now) {
    auto it = golden.find(name);
    if (it == golden.end()) {
      ADD_FAILURE() << name << " has no recorded hash; run tools/refresh_golden.sh and commit the file";
      continue;
    }
    EXPECT_EQ(hash, it->second) << name << ": its PTX changed. If that is intended, say why in the "
                                << "commit and run tools/refresh_golden.sh";
  }
  for (const auto& [name, hash] : golden)
    EXPECT_TRUE(now.count(name)) << name << " is recorded but no longer registered";
}

}  // namespace
}  // namespace kiln::examples
