// PTX -> cubin -> SASS through the CUDA toolkit's ptxas and cuobjdump (run as processes).
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

// The longest a toolkit program may run ($KILN_TOOL_SECONDS, else 600): ptxas takes seconds on
// kiln's largest kernels; one that hangs (a broken install) must not hang kiln.
int ToolSeconds() {
  const char* env = std::getenv("KILN_TOOL_SECONDS");
  int seconds = 0;
  if (env && *env && (!absl::SimpleAtoi(env, &seconds) || seconds <= 0)) {
    static bool told = false;  // (once a process)
    if (!told)
      std::cerr << "kiln: KILN_TOOL_SECONDS='" << env
                << "' is not a whole number of seconds above 0; using 600\n";
    told = true;
  }
  return seconds > 0 ? seconds : 600;
}

// `text` as one word of a POSIX shell command: single-quoted, each ' closed, escaped and reopened
// (a toolkit or scratch path with spaces or quotes is a path, not more words or commands).
std::string ShellWord(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command with stdout+stderr to `log`, under coreutils' timeout; returns its exit code, or
// -1 where it was stopped at ToolSeconds() (a line saying so ends the log).
int Run(const std::string& command, const std::string& log) {
  const int status = std::system(
      absl::StrCat("timeout -k 5 ", ToolSeconds(), " ", command, " >", ShellWord(log), " 2>&1")
          .c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == 124 || code == 137) {
    std::ofstream(log, std::ios::app)
        << "\n(stopped: it did not finish within " << ToolSeconds() << " s)\n";
    return -1;
  }
  return code;
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
  const int rc = Run(absl::StrCat(ShellWord(Tool("ptxas")), " -arch=", ShellWord(chip), " -v -o ",
                                  ShellWord(out), " ", ShellWord(in)),
                     log);
  PtxasResult result{Slurp(out), Slurp(log)};
  // A PTX ptxas refuses (its log names an error), a ptxas stopped at the limit, or a ptxas that
  // failed without saying why (a broken install): the first is the kernel's, the others the tool's,
  // told with what ptxas printed, if anything, before the line Run adds where it stopped it.
  const absl::string_view said = absl::StripAsciiWhitespace(
      absl::string_view(result.log)
          .substr(0, rc == -1 ? result.log.rfind("\n(stopped:") : std::string::npos));
  const std::string printed = said.empty() ? "" : absl::StrCat(":\n", said);
  if (rc == -1)
    return absl::DeadlineExceededError(
        absl::StrCat("ptxas did not finish within ", ToolSeconds(), " s for ", chip,
                     " (KILN_TOOL_SECONDS sets the limit)", printed));
  if (rc != 0 && !absl::StrContains(result.log, "error") && !absl::StrContains(result.log, "fatal"))
    return absl::InternalError(absl::StrCat("ptxas (", Tool("ptxas"), ") failed with exit code ",
                                            rc, " and no error message for ", chip, printed));
  if (rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("ptxas rejected the PTX for ", chip, ":\n", result.log));
  return result;
}

absl::StatusOr<std::string> Disassemble(const std::string& cubin) {
  // cuobjdump where the toolkit has it, else nvdisasm; some slim toolkits carry neither.
  std::string command;
  if (access(Tool("cuobjdump").c_str(), X_OK) == 0)
    command = ShellWord(Tool("cuobjdump")) + " -sass ";
  else if (access(Tool("nvdisasm").c_str(), X_OK) == 0)
    command = ShellWord(Tool("nvdisasm")) + " ";
  else
    return absl::UnavailableError(
        absl::StrCat("SASS needs cuobjdump or nvdisasm, and neither is in ", CudaHome(),
                     "/bin (set KILN_CUDA_HOME to a full CUDA toolkit, or to a folder whose bin/ "
                     "holds ptxas and the nvdisasm of PyPI's nvidia-cuda-nvdisasm wheel: "
                     "docs/CLI.md)"));
  ScratchDir dir;
  if (dir.path().empty()) return absl::InternalError("cannot create a scratch directory");
  const std::string in = dir.path() + "/kernel.cubin", log = dir.path() + "/sass.txt";
  std::ofstream(in, std::ios::binary) << cubin;
  if (Run(command + ShellWord(in), log) != 0)
    return absl::InternalError(absl::StrCat("disassembling failed:\n", Slurp(log)));
  return Slurp(log);
}

}  // namespace kiln
