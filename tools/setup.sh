#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), configures and builds kiln into build/, and runs
# the main job: list the kernels, print one kernel's PTX, and, where a GPU is present, the table.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ ninja-build ccache python3 python3-dev python3-venv llvm-22-dev llvm-22-tools
          libmlir-22-dev mlir-22-tools libzstd-dev libabsl-dev libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || {
      echo "== installing needs root: run this as root, or install sudo" >&2
      exit 1
    }
    sudo_cmd=sudo
  fi
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi

# The Python module's build and test dependencies (nanobind, NumPy) in .venv, from PyPI; without
# them (no network) the build skips the module and says so.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import nanobind, numpy" 2>/dev/null; then
  echo "== Python module dependencies into .venv (nanobind, numpy)"
  { python3 -m venv .venv && .venv/bin/pip install -q "nanobind>=2.4,<4" "numpy>=1.24"; } ||
    echo "== no nanobind: the kiln Python module will not be built"
fi

echo "== building into build/"
# (configure's own notes: what it leaves out, e.g. the Python module without nanobind)
mkdir -p build
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PWD/.venv/bin/python" \
  >build/configure.log 2>&1 || { cat build/configure.log; exit 1; }
grep -E "^-- kiln" build/configure.log || true
cmake --build build

names=$(build/bin/kiln list)
echo "== kernels (build/bin/kiln list: $(wc -l <<<"$names") of them; the first few)"
head -8 <<<"$names"
echo "== PTX of ampere/v1 (build/bin/kiln ptx ampere/v1)"
build/bin/kiln ptx ampere/v1
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "== the examples' table"
  build/bin/kiln bench --sizes 4096
else
  echo "== no GPU here: the table runs on a GPU machine (see README: tools/gpu_suite.sh)"
fi
