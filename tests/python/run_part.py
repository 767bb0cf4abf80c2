"""Runs one part of the Python tests, so that ctest spreads them over its jobs.

    python run_part.py PART

A part names test classes of the test files here (test*.py); the part `rest` runs every class no
other part names, so a new class or file is never left out.
"""
import os
import sys
import unittest

PARTS = {
    "attention": ["Attention"],
    "gemm": ["Gemm"],
    "fp8_grouped": ["GemmFp8", "GroupedGemm"],
}


def classes_of(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from classes_of(item)
        else:
            yield type(item).__name__, item


def main():
    if len(sys.argv) != 2 or (sys.argv[1] not in PARTS and sys.argv[1] != "rest"):
        sys.exit(f"usage: run_part.py {{{','.join([*PARTS, 'rest'])}}}")
    part = sys.argv[1]
    named = {c for classes in PARTS.values() for c in classes}
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    here = os.path.dirname(os.path.abspath(__file__))
    for cls, test in classes_of(loader.discover(here, top_level_dir=here)):
        if (cls in PARTS[part]) if part != "rest" else (cls not in named):
            suite.addTest(test)
    if suite.countTestCases() == 0:
        sys.exit(f"part {part} holds no test")
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
