"""Count the test suite's assertions, so a change that merges or moves tests can show it lost none.

Usage: python benchmarks/suite/count_assertions.py [tests-folder] [--by-file]

Counts, per test module, the ``assert`` statements and the ``pytest.raises`` / ``pytest.warns`` blocks (an
expected failure is an assertion too) inside test functions and the helpers and fixtures they call, and
the number of test functions. Prints one total line, or a line per file with ``--by-file``.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def _is_raises(node: ast.AST) -> bool:
    """Whether ``node`` is a call of ``pytest.raises`` or ``pytest.warns``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("raises", "warns")
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
    )


def count_file(path: Path) -> tuple[int, int]:
    """(assertions, test functions) in one Python file: ``assert`` statements plus ``pytest.raises``/``warns``
    blocks anywhere in the module, and the functions whose names start with ``test_``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    asserts = sum(isinstance(n, ast.Assert) for n in ast.walk(tree))
    raises = sum(
        _is_raises(item.context_expr)
        for n in ast.walk(tree)
        if isinstance(n, (ast.With, ast.AsyncWith))
        for item in n.items
    )
    tests = sum(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_") for n in ast.walk(tree)
    )
    return asserts + raises, tests


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(Path(__file__).resolve().parents[2] / "tests"))
    parser.add_argument("--by-file", action="store_true")
    args = parser.parse_args(argv)
    total_assertions = total_tests = 0
    for path in sorted(Path(args.folder).rglob("*.py")):
        assertions, tests = count_file(path)
        total_assertions += assertions
        total_tests += tests
        if args.by_file and (assertions or tests):
            print(f"{assertions:5d} assertions {tests:4d} test functions  {path.relative_to(args.folder)}")
    print(f"{total_assertions} assertions in {total_tests} test functions under {args.folder}")


if __name__ == "__main__":
    main()
