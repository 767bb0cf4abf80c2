// PTX -> cubin -> SASS through the CUDA toolkit's ptxas and cuobjdump (run as processes).
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln/lowering.h"

namespace kiln {
namespace {

std::string CudaHome() {
  const char* env = std::getenv("KILN_CUDA_HOME");
  return env && *env ? env : "/usr/local/cuda";
}

std::string Tool(const char* name) { return absl::StrCat(CudaHome(), "/bin/", name); }

// A scratch directory removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-XXXXXX").string();
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a command with stdout+stderr to `log`; returns the exit status.
int Run(const std::string& command, const std::string& log) {
  return std::system(absl::StrCat(command, " >", log, " 2>&1").c_str());
}

}  // namespace

bool HaveToolkit() { return access(Tool("ptxas").c_str(), X_OK) == 0; }

absl::StatusOr<PtxasResult> RunPtxas(const std::string& ptx, const std::string& chip) {
  if (!HaveToolkit())
    return absl::UnavailableError(absl::StrCat("ptxas not found at ", Tool("ptxas"),
                                               " (set KILN_CUDA_HOME to the CUDA toolkit)"));
  ScratchDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a scratch directory");
  const std::string in = dir.path() + "/kernel.ptx", out = dir.path() + "/kernel.cubin",
                    log = dir.path() + "/ptxas.log";
  std::ofstream(in) << ptx;
  const int rc = Run(absl::StrCat(Tool("ptxas"), " -arch=", chip, " -v -o ", out, " ", in), log);
  PtxasResult result{Slurp(out), Slurp(log)};
  if (rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("ptxas rejected the PTX for ", chip, ":\n", result.log));
  return result;
}

absl::StatusOr<std::string> Disassemble(const std::string& cubin) {
  // cuobjdump where the toolkit has it, else nvdisasm; some slim toolkits carry neither.
  std::string command;
  if (access(Tool("cuobjdump").c_str(), X_OK) == 0)
    command = Tool("cuobjdump") + " -sass ";
  else if (access(Tool("nvdisasm").c_str(), X_OK) == 0)
    command = Tool("nvdisasm") + " ";
  else
    return absl::UnavailableError(
        absl::StrCat("SASS needs cuobjdump or nvdisasm, and neither is in ", CudaHome(),
                     "/bin (set KILN_CUDA_HOME to a full CUDA toolkit)"));
  ScratchDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a scratch directory");
  const std::string in = dir.path() + "/kernel.cubin", log = dir.path() + "/sass.txt";
  std::ofstream(in, std::ios::binary) << cubin;
  if (Run(command + in, log) != 0)
    return absl::InternalError(absl::StrCat("disassembling failed:\n", Slurp(log)));
  return Slurp(log);
}

}  // namespace kiln
