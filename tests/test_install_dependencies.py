"""What a plain ``pip install fleetmind`` brings: every module FleetMind's code (or a dependency,
for the options FleetMind passes it) imports must come from a declared dependency.

``tests/test_packaging.py``'s wheel check reuses the test venv's site-packages, where the dev extras
bring packages a user's install lacks (``rich`` came only through schemathesis), so that check
cannot see a missing dependency; these read ``[project].dependencies`` instead.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fleetmind.data.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
DECLARED = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
OPTIONAL = {
    extra: [Requirement(r) for r in reqs]
    for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items()
}

LAZY_IMPORTS: dict[str, tuple[str, ...]] = {
    # none at present: ``sched train`` no longer passes stable-baselines3's
    # ``learn(progress_bar=True)``, whose ProgressBarCallback imports ``tqdm.rich`` (SB3 declares
    # tqdm and rich only in its ``[extra]``) and draws on stdout; its bar is
    # fleetmind.training.progress.timestep_bar (tqdm on stderr)
}
"""Modules a dependency imports only for an option FleetMind passes it -> the files passing it."""


def _closure(reqs: list[Requirement]) -> set[str]:
    """Canonical names of ``reqs`` and of everything they require (no extras), as installed here."""
    seen: set[str] = set()
    todo = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return seen


def _imported_top_modules() -> set[str]:
    """Top-level modules imported anywhere in the package folders (lazy imports included)."""
    mods: set[str] = set()
    for folder in set(PYPROJECT["tool"]["setuptools"]["package-dir"].values()):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    mods.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods.add(node.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in ("fleetmind",)}


def test_modules_dependencies_import_for_fleetmind_options_are_declared_directly() -> None:
    direct = {canonicalize_name(r.name) for r in DECLARED}
    for module, users in LAZY_IMPORTS.items():
        assert any("progress_bar=" in (REPO_ROOT / u).read_text() for u in users), module
        assert canonicalize_name(module) in direct, (
            f"{module} is imported by a dependency for an option FleetMind passes ({users}); "
            "declare it in [project].dependencies"
        )


def test_every_imported_module_comes_from_a_declared_dependency() -> None:
    installed = _closure(DECLARED)
    optional = set().union(*(_closure(reqs) for reqs in OPTIONAL.values()))
    owners = metadata.packages_distributions()
    missing = []
    for module in sorted(_imported_top_modules()):
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        if not dists:
            continue  # not installed here either: a guarded optional import (checked elsewhere)
        if dists & installed:
            continue
        if dists & optional:  # e.g. kubernetes: `fleetmind graph build` through the [k8s] extra
            continue
        missing.append(f"{module} ({', '.join(sorted(dists))})")
    assert not missing, f"imported but not declared in [project].dependencies: {missing}"


def test_rich_has_a_lower_bound() -> None:
    (rich,) = [r for r in DECLARED if canonicalize_name(r.name) == "rich"]
    assert re.search(r">=\s*\d", str(rich.specifier)), rich
