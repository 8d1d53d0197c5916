"""The library's import structure: every module imports, no cycle hides behind a function-level
import, and the dependency rule of DESIGN.md holds.

Read with :mod:`ast` from the source folders (no import needed for the rules), so a violation names
the file and line.

* **No fleetmind import inside a function**, except (a) of a module that is heavy to import (one
  whose import loads torch, MLflow, ONNX Runtime, stable-baselines3, Lightning or PyG, directly or
  through its own top-level fleetmind imports: lazy loading of an optional heavy dependency), and
  (b) in the few places of :data:`LAZY_IMPORTERS`, each with its reason. Everything else imports
  at the top, so that a cycle is an ``ImportError`` at once rather than a latent one.
* **Layers**: ``rca`` and ``envs`` import only ``data``; ``rl`` imports ``envs`` and ``data``;
  ``serving`` never imports ``training``; ``cli`` may import every layer, and no other layer
  imports ``cli``; nothing in the library imports ``benchmarks`` or ``notebooks``.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from fleetmind.data.paths import REPO_ROOT

FOLDERS: dict[str, str] = {
    "fleetmind": "fleetmind",
    "data": "fleetmind.data",
    "rca": "fleetmind.rca",
    "envs": "fleetmind.envs",
    "rl": "fleetmind.rl",
    "training": "fleetmind.training",
    "serving": "fleetmind.serving",
    "models": "fleetmind.models",
    "cli": "fleetmind.cli",
}
"""Source folder -> the package it installs as (pyproject's ``package-dir``)."""

HEAVY_DEPS = frozenset(
    {
        "torch",
        "torch_geometric",
        "pytorch_lightning",
        "lightning",
        "stable_baselines3",
        "sb3_contrib",
        "mlflow",
        "onnx",
        "onnxruntime",
        "onnxscript",
    }
)
"""Third-party packages whose import costs seconds; a module that loads one may be imported lazily."""

LAZY_IMPORTERS: dict[str, str] = {
    "fleetmind.cli*": "the CLI loads a subcommand's modules only when that subcommand runs,"
    " so `fleetmind --help` and a mistyped command answer at once",
    "fleetmind.serving.telemetry.base": "make_source() imports only the telemetry source the"
    " settings name (NVML, Prometheus or the simulator), not all three",
}
"""Modules (fnmatch patterns) allowed to import light fleetmind modules inside functions, with why."""

RUN_BY_A_TOOL: dict[str, str] = {
    "fleetmind.serving.migrations.env": "Alembic's env script: runs only inside alembic's context",
}
"""Modules that are executed by a tool rather than imported (left out of the import check only)."""

LAYERS: dict[str, frozenset[str]] = {
    "rca": frozenset({"data"}),
    "envs": frozenset({"data"}),
    "rl": frozenset({"envs", "data"}),
    "data": frozenset(),
}
"""Subpackage -> the other subpackages it may import (DESIGN.md, "Layout")."""


@dataclass(frozen=True)
class Import:
    module: str  # importing module
    target: str  # imported module (fleetmind.* resolved to a module where possible) or top name
    line: int
    lazy: bool  # inside a function body
    path: Path


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: list[Import] = []

    def resolve(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_pkg else 0)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue  # never executed
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append(Import(module, a.name, child.lineno, lazy, path))
            elif isinstance(child, ast.ImportFrom):
                base = resolve(child)
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    target = sub if sub in MODULES else base
                    out.append(Import(module, target, child.lineno, lazy, path))
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, inner)

    visit(tree, False)
    return out


IMPORTS: dict[str, list[Import]] = {m: _imports(m, p) for m, p in MODULES.items()}


def _heavy_modules() -> set[str]:
    """fleetmind modules whose import loads a :data:`HEAVY_DEPS` package (fixed point over the
    top-level imports, parents included: importing ``a.b`` runs ``a/__init__``)."""
    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for m, imps in IMPORTS.items():
            if m in heavy:
                continue
            parents = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
            for imp in imps:
                if imp.lazy:
                    continue
                top = imp.target.split(".")[0]
                if top in HEAVY_DEPS or imp.target in heavy or parents & heavy:
                    heavy.add(m)
                    changed = True
                    break
    return heavy


HEAVY = _heavy_modules()


def _lazy_allowed(module: str) -> bool:
    return any(fnmatch(module, pattern) for pattern in LAZY_IMPORTERS)


def test_every_library_module_imports() -> None:
    for name in MODULES:
        if name not in RUN_BY_A_TOOL:
            importlib.import_module(name)


def test_fleetmind_imports_inside_functions_are_only_of_heavy_modules() -> None:
    bad = [
        f"{imp.path.relative_to(REPO_ROOT)}:{imp.line}: {imp.module} imports {imp.target}"
        for imps in IMPORTS.values()
        for imp in imps
        if imp.lazy
        and imp.target.split(".")[0] == "fleetmind"
        and imp.target not in HEAVY
        and not _lazy_allowed(imp.module)
    ]
    assert not bad, (
        "import these at the top of the module (or move the shared piece):\n" + "\n".join(bad)
    )


def test_the_lazy_importers_exist_and_the_heavy_rule_sees_torch() -> None:
    for pattern in [*LAZY_IMPORTERS, *RUN_BY_A_TOOL]:
        assert any(fnmatch(m, pattern) for m in MODULES), pattern
    assert {"fleetmind.rca.model", "fleetmind.rl.policy"} <= HEAVY
    assert "fleetmind.data.graph" not in HEAVY and "fleetmind.envs.core" not in HEAVY


def _layer(module: str) -> str:
    """The subpackage of ``module``; "" for the ``fleetmind`` package's own modules (the public
    API and :mod:`fleetmind.compat`, which any layer may use)."""
    path = MODULES.get(module)
    if path is not None and path.parent == REPO_ROOT / "fleetmind":
        return ""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_subpackages_import_only_the_layers_below() -> None:
    bad = []
    for module, imps in IMPORTS.items():
        layer = _layer(module)
        for imp in imps:
            top = imp.target.split(".")[0]
            where = f"{imp.path.relative_to(REPO_ROOT)}:{imp.line}: {module} imports {imp.target}"
            if top in {"benchmarks", "notebooks", "tests"}:
                bad.append(where)
            if top != "fleetmind" or imp.target == "fleetmind":
                continue
            other = _layer(imp.target)
            if other == layer or other in ("", "models"):
                continue
            if layer in LAYERS and other not in LAYERS[layer]:
                bad.append(where)
            if layer == "serving" and other == "training":
                bad.append(where)
            if other == "cli":  # the command line sits above every layer
                bad.append(where)
    assert not bad, "imports against the dependency rule (DESIGN.md):\n" + "\n".join(bad)


@pytest.mark.parametrize("old", ["data", "rca", "envs", "rl", "training", "serving"])
def test_no_library_module_imports_a_bare_old_name(old: str) -> None:
    bad = [
        f"{imp.path.relative_to(REPO_ROOT)}:{imp.line}"
        for imps in IMPORTS.values()
        for imp in imps
        if imp.target == old or imp.target.startswith(old + ".")
    ]
    assert not bad
