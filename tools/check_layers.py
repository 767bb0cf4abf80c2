#!/usr/bin/env python3
"""The layers' rules (docs/ARCHITECTURE.md), checked over the tree so that a break cannot come back
silently:

  * each layer's sources #include only the layers below it (and itself);
  * each layer's CMake targets link only the kiln libraries of those layers;
  * the layers below examples/ name no kernel ("gemm/...", "attention/..." literals);
  * no function in ops/, examples/, runtime/, dsl/, bundle/ or emulator/ is longer than
    MAX_FUNCTION_LINES, except those listed in LONG_FUNCTIONS (each waits to be split; the list
    may only shrink: the check fails once one of them is short enough);
  * no line of C++ under the layers is longer than the .clang-format column limit (format with
    clang-format -i; tests/ keeps its own layout: its cases compute the source lines their
    messages must name from __LINE__, which a reformatting moves);
  * no public header (a layer's include/kiln/) is longer than MAX_HEADER_LINES: a longer one
    holds more than one concern;
  * the kiln command's sources (tools/kiln/), which a runtime-only build compiles without the
    compiler's layers, include a dsl/ or lowering/ header only inside #ifdef KILN_HAVE_COMPILER;
  * no code comment carries a measured figure (a speed ratio, a percentage, a time, a rate): the
    comment states the rule and cites the dated entry in docs/perf/ that holds the figures.

Usage: check_layers.py [repo root]. Prints each violation and exits 1 if there is one.
"""
import os
import re
import sys

# Which layers each layer may include; the order is the stack's, ground first.
ALLOWED = {
    "bundle": {"bundle"},
    "emulator": {"bundle", "emulator"},
    "runtime": {"bundle", "runtime"},
    "dsl": {"bundle", "dsl"},
    "lowering": {"bundle", "dsl", "lowering"},
    "examples": {"bundle", "emulator", "runtime", "dsl", "lowering", "examples"},
    "ops": {"bundle", "emulator", "runtime", "dsl", "lowering", "examples", "ops"},
    "tools": {"bundle", "emulator", "runtime", "dsl", "lowering", "examples", "ops", "tools"},
}

# The kiln libraries each layer's CMake file defines.
LIBRARY_LAYER = {
    "kiln_bundle": "bundle",
    "kiln_emulator": "emulator",
    "kiln_runtime": "runtime",
    "kiln_dsl": "dsl",
    "kiln_lowering": "lowering",
    "kiln_all": "lowering",
    "kiln_harness": "examples",
    "kiln_examples": "examples",
    "kiln_ops": "ops",
    "kiln_ops_check": "ops",
    "kiln_ops_kernels": "ops",
}

MAX_FUNCTION_LINES = 150
MAX_HEADER_LINES = 300
# Functions over the limit today, by file and name: each is to be cut into named pieces.
LONG_FUNCTIONS = {
    ("emulator/emulate.cc", "LaunchChecked"),
    ("emulator/exec.cc", "Cta::Arith"),
    ("emulator/ptx_parse.cc", "Parse"),
}

# Comment text that reads as a measured figure: 1.05x, 93%, 73 us, 2.2 ms, 3.3 TB/s, 600 TFLOPS.
FIGURE = re.compile(r"(\b\d+(\.\d+)?x\b(?!\s*\d)|\d+(\.\d+)?\s*%|\b\d+(\.\d+)?\s*(us|ms|GB/s|TB/s|TFLOPS)\b)")
# Comments whose number is a setting or a format, not a measurement: (file, text in the line).
NOT_FIGURES = {
    ("examples/probes/watchdog.cc", "after 200 ms"),  # the deadline the probe sets
    ("ops/gemm/gemm_choice.cc", 'not "0%"'),           # the printed format
}

SOURCE_EXTENSIONS = (".cc", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KERNEL_NAME = re.compile(r'"(gemm|attention|hopper|ampere|blackwell|hgemm|reference|ops|probe)/[a-z0-9_]')


def header_layer(root, include):
    """The layer an #include "..." names, or None for a third-party or system header."""
    first = include.split("/", 1)[0]
    if first in ALLOWED and os.path.exists(os.path.join(root, include)):
        return first  # a private header by its path from the root: dsl/kernel_state.h
    for layer, base in (("bundle", "bundle/include"), ("emulator", "emulator/include"),
                        ("runtime", "runtime/include"), ("dsl", "dsl/include"),
                        ("lowering", "lowering/include"), ("ops", "ops/gemm/include"),
                        ("ops", "ops/attention/include")):
        if os.path.exists(os.path.join(root, base, include)):
            return layer
    return None


def sources(root, top):
    for directory, _, files in os.walk(os.path.join(root, top)):
        for name in files:
            if name.endswith(SOURCE_EXTENSIONS):
                path = os.path.join(directory, name)
                yield os.path.relpath(path, root), path


# A user's project built against the installed package (tests/package): any installed header.
OUTSIDE_THE_LAYERS = ("examples/standalone/",)


def check_includes(root, problems):
    for top in ALLOWED:
        for rel, path in sources(root, top):
            if rel.startswith(OUTSIDE_THE_LAYERS):
                continue
            text = open(path, encoding="utf-8").read()
            for include in INCLUDE.findall(text):
                layer = header_layer(root, include)
                if layer and layer not in ALLOWED[top]:
                    problems.append(f"{rel}: includes {include} ({layer}/), above {top}/")


# Compiled by a runtime-only build too (-DKILN_RUNTIME_ONLY=ON), which has no dsl/ or lowering/.
RUNTIME_ONLY_SOURCES = ("tools/kiln/",)
COMPILER_LAYERS = ("dsl", "lowering")


def check_runtime_only_includes(root, problems):
    for rel, path in sources(root, "tools"):
        if not rel.startswith(RUNTIME_ONLY_SOURCES):
            continue
        depth = 0  # open #if blocks; inside a KILN_HAVE_COMPILER one from `guarded` on
        guarded = None
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            directive = line.strip()
            if directive.startswith("#if"):
                depth += 1
                if guarded is None and "KILN_HAVE_COMPILER" in directive and "!" not in directive:
                    guarded = depth
            elif directive.startswith("#endif"):
                if guarded == depth:
                    guarded = None
                depth -= 1
            elif directive.startswith("#else") and guarded == depth:
                guarded = None
            match = INCLUDE.match(line)
            if match and guarded is None and header_layer(root, match.group(1)) in COMPILER_LAYERS:
                problems.append(f"{rel}:{number}: includes {match.group(1)} outside #ifdef "
                                "KILN_HAVE_COMPILER (a runtime-only build has no "
                                f"{header_layer(root, match.group(1))}/)")


def check_links(root, problems):
    link = re.compile(r"target_link_libraries\(\s*(\S+)([^)]*)\)", re.S)
    for top in ALLOWED:
        cmake = os.path.join(root, top, "CMakeLists.txt")
        if not os.path.exists(cmake):
            continue
        for target, rest in link.findall(open(cmake, encoding="utf-8").read()):
            for library in re.findall(r"\bkiln_[a-z_]+", rest):
                layer = LIBRARY_LAYER.get(library)
                if layer and layer not in ALLOWED[top]:
                    problems.append(f"{top}/CMakeLists.txt: {target} links {library} ({layer}/)")


def check_kernel_names(root, problems):
    for top in ("bundle", "emulator", "runtime", "dsl", "lowering"):
        for rel, path in sources(root, top):
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                code = line.split("//", 1)[0]
                if KERNEL_NAME.search(code):
                    problems.append(f"{rel}:{number}: names a kernel: {line.strip()}")


def long_functions(path):
    """(name, first line, length) of each function body over MAX_FUNCTION_LINES that starts at
    namespace scope."""
    found, depth, namespaces, start, name, header = [], 0, 0, None, None, []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line.split("//", 1)[0])
        opens, closes = code.count("{"), code.count("}")
        if depth == namespaces and start is None:
            header = (header + [code.strip()])[-6:]
            if re.match(r"^\s*(namespace\b.*|extern\s+\"\"\s*)\{\s*$", code):
                namespaces += 1
            elif opens > closes and not re.match(r"^\s*(struct|class|enum|union)\b", code):
                signature = " ".join(header)
                match = re.search(r"([A-Za-z_][\w:~]*)\s*\(", signature)
                if ")" in signature and "=" not in signature.split("(")[0] and match:
                    start, name = number, match.group(1)
        depth += opens - closes
        if depth < namespaces:  # a namespace closed
            namespaces = depth
        if start is not None and depth == namespaces:
            if number - start + 1 > MAX_FUNCTION_LINES:
                found.append((name, start, number - start + 1))
            start, header = None, []
        elif depth == namespaces and start is None and ";" in code:
            header = []
    return found


def check_function_lengths(root, problems):
    seen = set()
    for top in ("ops", "examples", "runtime", "dsl", "bundle", "emulator"):
        for rel, path in sources(root, top):
            for name, first, length in long_functions(path):
                key = (rel, name)
                seen.add(key)
                if key not in LONG_FUNCTIONS:
                    problems.append(f"{rel}:{first}: {name} is {length} lines (at most "
                                    f"{MAX_FUNCTION_LINES}; cut it into named pieces)")
    for rel, name in sorted(LONG_FUNCTIONS - seen):
        if not os.path.exists(os.path.join(root, rel)):
            problems.append(f"{rel}: listed in LONG_FUNCTIONS, but there is no such file")
            continue
        problems.append(f"{rel}: {name} is no longer over {MAX_FUNCTION_LINES} lines: take it off "
                        "LONG_FUNCTIONS in tools/check_layers.py")


def column_limit(root):
    match = re.search(r"ColumnLimit:\s*(\d+)", open(os.path.join(root, ".clang-format")).read())
    return int(match.group(1)) if match else 80


def check_line_lengths(root, problems):
    limit = column_limit(root)
    for top in ALLOWED:
        for rel, path in sources(root, top):
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                if len(line.rstrip("\n")) > limit:
                    problems.append(f"{rel}:{number}: {len(line.rstrip())} columns, over .clang-format's {limit}")


def check_header_lengths(root, problems):
    for top in ALLOWED:
        for rel, path in sources(root, top):
            if "/include/kiln/" in rel and rel.endswith(".h"):
                lines = sum(1 for _ in open(path, encoding="utf-8"))
                if lines > MAX_HEADER_LINES:
                    problems.append(f"{rel}: {lines} lines, over {MAX_HEADER_LINES} for a public "
                                    "header (split it by concern)")


def check_comment_figures(root, problems):
    for top in ALLOWED:
        for rel, path in sources(root, top):
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                if "//" not in line:
                    continue
                comment = line.split("//", 1)[1]
                if FIGURE.search(comment) and not any(rel == f and t in line for f, t in NOT_FIGURES):
                    problems.append(f"{rel}:{number}: a figure in a comment (state the rule, cite the "
                                    f"docs/perf/ entry): {line.strip()}")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    check_includes(root, problems)
    check_links(root, problems)
    check_runtime_only_includes(root, problems)
    check_kernel_names(root, problems)
    check_function_lengths(root, problems)
    check_comment_figures(root, problems)
    check_line_lengths(root, problems)
    check_header_lengths(root, problems)
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} problems" if problems else "layers: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
