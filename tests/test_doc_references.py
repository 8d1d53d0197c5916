"""Every ``:mod:``, ``:class:`` and ``:func:`` reference in the library's docstrings and in the
docs names something that imports.

A reference resolves the way Sphinx's Python domain reads it: ``~`` only shortens the displayed
text and a trailing ``()`` is ignored; a name with a leading dot is looked up in the current module
and then in each package above it; any other name is first taken as absolute (``numpy.ndarray``,
``fleetmind.rca.metrics``) and then in the enclosing class, the current module and builtins. The folders'
bare names (``data.petshop``) are not absolute names: the library imports only as ``fleetmind.*``
(see ``docs/layout.md``), so such a reference is reported.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import tomllib
from pathlib import Path

import pytest

from fleetmind.data.paths import REPO_ROOT

FOLDERS: dict[str, str] = {
    folder: package
    for package, folder in tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"].items()
}
"""Source folder -> the package it installs as (pyproject's ``package-dir``)."""

NOT_IMPORTED = {"fleetmind.serving.migrations.env"}  # Alembic runs it inside its own context
BARE = frozenset(FOLDERS) - {"fleetmind"}
ROLE = re.compile(r":(mod|class|func):`([^`]+)`")


@functools.cache
def _resolve(name: str) -> bool:
    """Whether dotted ``name`` is a module, or an attribute path below the longest module prefix."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts) or parts[0] in BARE:
        return False
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def resolves(target: str, module: str | None, cls: str | None = None) -> bool:
    """Whether reference ``target`` (the text between the backquotes) written in ``module``
    (and class ``cls``, if any) names something that exists."""
    target = target.lstrip("~!").removesuffix("()")
    if "<" in target:  # explicit title: "text <target>"
        target = target.rsplit("<", 1)[1].rstrip(">").lstrip("~!").removesuffix("()")
    if module is None:
        return _resolve(target)
    scopes = [module] if cls is None else [f"{module}.{cls}", module]
    if target.startswith("."):
        pkg = module.split(".")
        chain = [".".join(pkg[:i]) for i in range(len(pkg), 0, -1)]
        return any(_resolve(scope + target) for scope in [*scopes[:-1], *chain])
    scopes.append("builtins")
    return _resolve(target) or any(_resolve(f"{scope}.{target}") for scope in scopes)


def _modules() -> list[tuple[str, Path]]:
    found = []
    for folder, package in FOLDERS.items():
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if "__pycache__" not in rel.parts and name not in NOT_IMPORTED:
                found.append((name, path))
    return found


def _docstrings(tree: ast.Module) -> list[tuple[str | None, int, str]]:
    """``(enclosing class, line, docstring)`` of the module, its classes and functions."""
    out: list[tuple[str | None, int, str]] = []

    def walk(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(child, clean=False)
                inner = child.name if isinstance(child, ast.ClassDef) else cls
                if doc:
                    out.append((inner, child.body[0].lineno, doc))
                walk(child, inner)

    doc = ast.get_docstring(tree, clean=False)
    if doc:
        out.append((None, 1, doc))
    walk(tree, None)
    return out


def test_resolver_rejects_the_bare_folder_names_and_missing_names() -> None:
    assert resolves("fleetmind.data.petshop", None)
    assert resolves("~fleetmind.rca.metrics.mrr", "fleetmind.rl")
    assert not resolves("data.petshop", "fleetmind.rca.metrics")
    assert not resolves("fleetmind.rca.metrics.no_such_function", None)
    assert resolves(".fgd.FgdArgs", "fleetmind.training.recipes")
    assert resolves(".core.ClusterState", "fleetmind.envs.policies.base")
    assert resolves("ValueError", "fleetmind.rl.ppo")


@pytest.mark.parametrize("name,path", _modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_docstring_reference_resolves(name: str, path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line}: :{role}:`{target}`"
        for cls, line, doc in _docstrings(tree)
        for role, target in ROLE.findall(doc)
        if not resolves(target, name, cls)
    ]
    assert not bad, "\n".join(bad)


def test_every_docs_reference_resolves() -> None:
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    bad = [
        f"{page.relative_to(REPO_ROOT)}: :{role}:`{target}`"
        for page in pages
        for role, target in ROLE.findall(page.read_text())
        if not resolves(target, None)
    ]
    assert not bad, "\n".join(bad)


def test_docs_and_model_cards_name_no_scratch_run_folder() -> None:
    """Prose and commands name a neutral ``$RUN_DIR``, not the folder one run happened to use
    (result JSON keeps what was recorded; ``benchmarks/INDEX.md`` shows it as ``$RUN_DIR``)."""
    pages = [
        REPO_ROOT / "README.md",
        REPO_ROOT / "benchmarks" / "INDEX.md",
        *sorted((REPO_ROOT / "docs").rglob("*.md")),
        *sorted((REPO_ROOT / "models").rglob("*.md")),
    ]
    hits = [str(p.relative_to(REPO_ROOT)) for p in pages if "/tmp/train" in p.read_text()]
    assert not hits, hits
