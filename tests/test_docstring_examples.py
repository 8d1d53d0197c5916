"""Docstring examples parse and run under ``doctest`` (and so under ``pytest --doctest-modules``).

A directive is read up to the end of the line (https://docs.python.org/3/library/doctest.html#directives):
a note after ``+SKIP`` makes the whole module's doctests a collection error, and a line that uses a
name only a skipped line defines fails with ``NameError``.
"""

from __future__ import annotations

import doctest
import importlib
import tomllib

import pytest

from fleetmind.data.paths import REPO_ROOT

PACKAGE_DIRS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"
]


def _modules_with_examples() -> list[str]:
    """Every ``fleetmind.*`` module whose source holds a ``>>>`` prompt (found without importing it),
    walking the folders pyproject.toml maps onto the namespace."""
    names = set()
    for top, folder in PACKAGE_DIRS.items():
        root = REPO_ROOT / folder
        for path in root.rglob("*.py"):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts or ">>> " not in path.read_text(encoding="utf-8"):
                continue
            parts = [*rel.parts[:-1]] + ([] if rel.stem == "__init__" else [rel.stem])
            names.add(".".join([top, *parts]))
    return sorted(names)


def test_examples_are_found() -> None:
    names = _modules_with_examples()
    # the package docstring and the dataset reader carry examples; an empty walk would pass anything
    assert {"fleetmind", "fleetmind.data.rca_dataset"} <= set(names), names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
