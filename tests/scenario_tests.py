#!/usr/bin/env python3
"""The tests the other torches' suites leave out (tests/scenario_tests.txt; Note [The other
torches' suite] in the Makefile) and the tests that mostly wait (tests/waiting_tests.txt; Note
[Waiting tests]). Checks that every name of both lists is a test ctest runs (`ctest -N` in the
build folder given with --build; without it, a gtest TEST/TEST_F under tests/ or an add_test in
CMakeLists.txt), so a renamed test cannot leave a list naming nothing; with --regex prints the
ctest -E pattern of the scenarios instead.

Run: python3 tests/scenario_tests.py SOURCE_DIR [--regex | --ctest CTEST --build BUILD_DIR]
(ctest: Build.ScenarioListNamesRealTests).
"""
import argparse
import pathlib
import re
import subprocess
import sys

GTEST = re.compile(r"^TEST(?:_F)?\(\s*([A-Za-z0-9_]+)\s*,\s*([A-Za-z0-9_]+)\s*\)", re.M)
CMAKE_TEST = re.compile(r"^\s*add_test\(\s*NAME\s+([A-Za-z0-9_.]+)", re.M)
CTEST_LINE = re.compile(r"^\s*Test\s+#\d+:\s+(\S+)\s*$", re.M)


LISTS = ("scenario_tests.txt", "waiting_tests.txt")


def listed(root: pathlib.Path, name: str = LISTS[0]) -> list:
    lines = (root / "tests" / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def tree_tests(root: pathlib.Path) -> set:
    names = set()
    for path in (root / "tests").rglob("*.cpp"):
        names.update(f"{suite}.{name}" for suite, name in GTEST.findall(path.read_text()))
    names.update(CMAKE_TEST.findall((root / "CMakeLists.txt").read_text()))
    return names


def registered_tests(ctest: str, build: str) -> set:
    out = subprocess.run([ctest, "-N"], cwd=build, capture_output=True, text=True, check=True).stdout
    return set(CTEST_LINE.findall(out))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--regex", action="store_true")
    parser.add_argument("--ctest")
    parser.add_argument("--build")
    args = parser.parse_args()
    root = pathlib.Path(args.root)
    if args.regex:
        print("^(" + "|".join(re.escape(n) for n in listed(root)) + ")$")
        return 0
    known = registered_tests(args.ctest, args.build) if args.ctest else tree_tests(root)
    if not known:
        print("no tests found to check the lists against")
        return 1
    failed = False
    for list_name in LISTS:
        names = listed(root, list_name)
        missing = [n for n in names if n not in known]
        twice = sorted({n for n in names if names.count(n) > 1})
        for n in missing:
            print(f"tests/{list_name} names {n}, which is no test ctest runs: rename or remove it")
        for n in twice:
            print(f"tests/{list_name} names {n} more than once")
        if not names:
            print(f"tests/{list_name} names no test")
        if missing or twice or not names:
            failed = True
        else:
            print(f"tests/{list_name}: {len(names)} listed, each a test ctest runs (of {len(known)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
