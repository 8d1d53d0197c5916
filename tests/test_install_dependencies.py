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


FLOORS: dict[str, tuple[str, str, str]] = {
    # distribution -> (lowest version that has it, file, what the file uses). Each was found by
    # installing the version the floor used to allow and running the code that breaks on it.
    "numpy": ("2.0", "envs/core.py", "np.bitwise_count("),  # NumPy 2.0 added it
    "mlflow": ("3.0", "training/tracking.py", 'name="model"'),  # 2.x: log_model(artifact_path=)
    # 1.18 wheels are built against NumPy 1 and fail to import beside NumPy 2
    # (microsoft/onnxruntime#21063; 1.19 is the first built against NumPy 2)
    "onnxruntime": ("1.19", "rl/export.py", "onnxruntime"),
    # pandas 2.1 wheels are built against NumPy 1 ("numpy.dtype size changed" beside NumPy 2);
    # 2.2.2 is the first built against NumPy 2 (pandas 2.2.2 release notes)
    "pandas": ("2.2.2", "data/synth_incidents.py", "import pandas as pd"),
    # before 2.10 pydantic protected the whole model_ prefix and warned at every start (pydantic#9177);
    # 2.10.0-2.10.3 (pydantic-core before 2.27.2) raise on a year-0 datetime, a 500 for
    # POST /api/v1/rca instead of a 422 (pydantic#10967)
    "pydantic": ("2.10.4", "serving/schemas.py", "model_version:"),
    # Table.autoincrement_column is SQLAlchemy 2.0.4's (its docstring's versionadded); before it
    # every command failed at start
    "sqlalchemy": ("2.0.4", "serving/db.py", "autoincrement_column"),
    # 0.6.0-0.6.2 bundle llhttp 8.1.1: a header name with a space is taken (200, not 400), and
    # CVE-2024-27982 (MagicStack/httptools#111)
    "httptools": ("0.6.3", "serving/http_guard.py", "httptools_impl"),
    # TestClient(client=...) came in Starlette 0.44; the library imports starlette directly
    "starlette": ("0.44", "tests/test_auth_throttle.py", "TestClient(app, client="),
}
"""Lower bounds that the code's own use of a library forces (each checked against the version the
floor used to allow)."""


def _just_below(version: str) -> str:
    """The newest-looking release under ``version``: "2.0" -> "1.99.99", "1.19" -> "1.18.99"."""
    parts = [int(x) for x in version.split(".")]
    i = max(k for k, v in enumerate(parts) if v > 0)
    return ".".join(map(str, parts[:i] + [parts[i] - 1] + [99] * (len(parts) - i)))


def test_declared_floors_admit_no_version_the_code_cannot_run_on() -> None:

    by_name = {canonicalize_name(r.name): r for r in DECLARED}
    for dist, (lowest, path, usage) in FLOORS.items():
        assert usage in (REPO_ROOT / path).read_text(), (
            f"{path} no longer uses {usage}: drop {dist}"
        )
        spec = by_name[dist].specifier
        below = _just_below(lowest)
        assert not spec.contains(below), (
            f"{dist}{spec} admits {below}, which lacks {usage} ({path})"
        )
        assert spec.contains(lowest), f"{dist}{spec} refuses {lowest}"


def test_torch_is_a_range_for_users_and_pinned_only_at_install() -> None:
    """``pip install fleetmind`` into an environment with a newer torch must not fail or downgrade
    it (a downgrade from PyPI brings the CUDA build); the exact CPU-wheel pin lives in
    constraints.txt, which ``make`` passes to pip."""
    (torch,) = [r for r in DECLARED if canonicalize_name(r.name) == "torch"]
    assert torch.specifier.contains("2.14.1") and torch.specifier.contains("2.13.0"), torch
    pins = (REPO_ROOT / "constraints.txt").read_text().split()
    assert "torch==2.13.0" in pins
    assert "-c constraints.txt" in (REPO_ROOT / "Makefile").read_text()
