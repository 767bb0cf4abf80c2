#!/usr/bin/env python3
"""check_layers.py on small trees made here: a clean one passes, and each kind of break is found
with its file named. Usage: check_layers_test.py (exits 1 on a failed case)."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layers.py")
sys.path.insert(0, os.path.dirname(CHECK))
from check_layers import LONG_FUNCTIONS  # noqa: E402
FUNCTION = "void F() {\n" + "  x();\n" * 160 + "}\n"


def tree(files):
    root = tempfile.mkdtemp()
    # The files LONG_FUNCTIONS lists, each with its long function, so that a clean tree is clean.
    listed = {rel: f"void {name}() {{\n" + "  x();\n" * 160 + "}\n"
              for rel, name in LONG_FUNCTIONS}
    base = {**listed, ".clang-format": "BasedOnStyle: Google\nColumnLimit: 100\n",
            "runtime/include/kiln/runtime/driver.h": "// the driver\n",
            "dsl/include/kiln/kernel.h": "// the builder\n",
            "dsl/kernel.cc": '#include "kiln/kernel.h"\n'}
    for path, text in {**base, **files}.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


def run(files):
    p = subprocess.run([sys.executable, CHECK, tree(files)], capture_output=True, text=True)
    return p.returncode, p.stdout


CASES = [
    ("clean", {}, 0, "layers: ok"),
    ("an include upward", {"dsl/bad.cc": '#include "kiln/runtime/driver.h"\n'}, 1,
     "dsl/bad.cc: includes kiln/runtime/driver.h (runtime/)"),
    ("the kiln command including the compiler outside its guard",
     {"tools/kiln/check.cc": '#include "kiln/kernel.h"\n'}, 1,
     "tools/kiln/check.cc:1: includes kiln/kernel.h outside #ifdef KILN_HAVE_COMPILER"),
    ("the kiln command including the compiler inside its guard",
     {"tools/kiln/check.cc": '#ifdef KILN_HAVE_COMPILER\n#include "kiln/kernel.h"\n#endif\n'}, 0,
     "layers: ok"),
    ("a link upward", {"dsl/CMakeLists.txt": "target_link_libraries(kiln_dsl PUBLIC kiln_runtime)\n"},
     1, "kiln_dsl links kiln_runtime"),
    ("a kernel named in the runtime", {"runtime/x.cc": 'const char* k = "gemm/bf16_sm90";\n'}, 1,
     "runtime/x.cc:1: names a kernel"),
    ("a long function", {"ops/x.cc": FUNCTION}, 1, "ops/x.cc:1: F is 162 lines"),
    ("a figure in a comment", {"ops/y.cc": "int a;  // 1.05x cuBLAS\n"}, 1,
     "ops/y.cc:1: a figure in a comment"),
    ("a listed function cut short", {"emulator/exec.cc": "void Short() {}\n"}, 1,
     "Cta::Arith is no longer over 150 lines"),
    ("a long line", {"bundle/z.cc": "int " + "a" * 100 + ";\n"}, 1, "bundle/z.cc:1: 105 columns"),
    ("a long public header", {"dsl/include/kiln/big.h": "int a;\n" * 301}, 1,
     "dsl/include/kiln/big.h: 301 lines, over 300"),
]

failed = 0
for name, files, code, text in CASES:
    got_code, out = run(files)
    if got_code != code or text not in out:
        failed += 1
        print(f"FAIL {name}: exit {got_code} (want {code}), output:\n{out}")
    else:
        print(f"ok   {name}")
print(f"{len(CASES) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
