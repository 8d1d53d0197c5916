"""No library function or method is over :data:`MAX_LINES` lines, except the documented ones.

A function's length runs from its ``def`` line to its last line (docstring, comments and blank
lines included; decorators not), as :mod:`ast` reports them. A nested function counts within its
enclosing one and on its own. Read from the source folders, so a failure names the file and line.
A long function is shortened by extracting well-named helpers; where that is not possible yet,
:data:`EXCEPTIONS` lists it with a one-line reason, and an exception that no longer applies fails
the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools

from fleetmind.data.paths import REPO_ROOT

MAX_LINES = 100
"""The most lines a library function may span, ``def`` to last line."""

LIBRARY = ("data", "rca", "envs", "rl", "training", "serving", "cli", "fleetmind")
"""The library's source folders (see ``docs/layout.md``)."""

EXCEPTIONS: dict[str, str] = {
    # path::qualified name -> why it may stay long for now
}
"""Functions allowed over :data:`MAX_LINES`, each with its reason."""


def lengths_in(source: str, path: str) -> dict[str, tuple[int, int]]:
    """``path::qualified name -> (def line, lines)`` of every function and method in ``source``.

    Qualified names join enclosing classes and functions with dots (``CandidateBuilder.build``,
    ``run.on_step``); of two definitions under one name (``if``/``else`` variants) the longer counts.
    """
    found: dict[str, tuple[int, int]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                key, end = f"{path}::{prefix}{child.name}", child.end_lineno or child.lineno
                span = (child.lineno, end - child.lineno + 1)
                found[key] = max(found.get(key, span), span, key=lambda ln: ln[1])
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(source, filename=path), "")
    return found


@functools.cache
def function_lengths() -> dict[str, tuple[int, int]]:
    """:func:`lengths_in` over every module of :data:`LIBRARY`; paths posix, relative to the root."""
    found: dict[str, tuple[int, int]] = {}
    for folder in LIBRARY:
        for file in sorted((REPO_ROOT / folder).rglob("*.py")):
            if "__pycache__" not in file.parts:
                rel = file.relative_to(REPO_ROOT).as_posix()
                found.update(lengths_in(file.read_text(), rel))
    return found


def test_the_walk_sees_methods_nested_functions_and_branches() -> None:
    """Methods and nested functions are named by their path; ``def`` to last line is counted."""
    src = (
        "import sys\n"
        "class A:\n"
        "    @staticmethod\n"
        "    def m():\n"
        "        def inner():\n"
        "            return 1\n"
        "\n"
        "        return inner\n"
        "if sys.platform:\n"
        "    async def b(): ...\n"
        "else:\n"
        "    def b():\n"
        "        pass\n"
    )
    assert lengths_in(src, "x.py") == {
        "x.py::A.m": (4, 5),
        "x.py::A.m.inner": (5, 2),
        "x.py::b": (12, 2),
    }
    assert "data/rca_gen/faults/__init__.py::alertnames" in function_lengths()


def test_no_library_function_is_over_the_limit() -> None:
    long = [
        f"{key.split('::')[0]}:{line} {key.split('::')[1]} ({n} lines)"
        for key, (line, n) in sorted(function_lengths().items())
        if n > MAX_LINES and key not in EXCEPTIONS
    ]
    assert not long, f"over {MAX_LINES} lines; extract helpers:\n" + "\n".join(long)


def test_every_exception_is_still_needed() -> None:
    lengths = function_lengths()
    stale = [key for key in EXCEPTIONS if lengths.get(key, (0, 0))[1] <= MAX_LINES]
    assert not stale, f"no longer over {MAX_LINES} lines (or gone); drop from EXCEPTIONS: {stale}"
