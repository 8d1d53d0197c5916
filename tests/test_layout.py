"""The folder-to-namespace mapping is stated where a reader looks, and agrees with pyproject.toml.

The folders (``rca/``, ``rl/``, ...) import as ``fleetmind.rca``, ``fleetmind.rl``, ... through
setuptools' ``package-dir``. Each package's ``__init__.py`` docstring opens with that mapping,
``docs/layout.md`` tabulates it and the README's layout section names it.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from fleetmind.data.paths import REPO_ROOT

SETUPTOOLS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def folder_of(name: str) -> str:
    """The checkout folder (posix, relative to the root) of package ``name``, by ``package-dir``."""
    mapped = SETUPTOOLS["package-dir"]
    top = max((k for k in mapped if name == k or name.startswith(k + ".")), key=len)
    rest = name[len(top) :].lstrip(".").split(".") if name != top else []
    return Path(mapped[top], *rest).as_posix()


def test_folder_of_follows_package_dir() -> None:
    assert folder_of("fleetmind.rca") == "rca"
    assert folder_of("fleetmind.serving.migrations.versions") == "serving/migrations/versions"
    assert folder_of("fleetmind") == "fleetmind"


def test_every_init_opens_with_its_import_name_and_folder() -> None:
    wrong = []
    for name in SETUPTOOLS["packages"]:
        folder = folder_of(name)
        doc = ast.get_docstring(ast.parse((REPO_ROOT / folder / "__init__.py").read_text()))
        if name == "fleetmind":
            # the namespace's own docstring names every top-level part and how they are mapped
            tops = [k for k in SETUPTOOLS["package-dir"] if k != "fleetmind"]
            if not doc or "package-dir" not in doc or not all(f":mod:`{t}`" in doc for t in tops):
                wrong.append(name)
            continue
        first = (doc or "").splitlines()[0] if doc else ""
        if first != f"``{name}``, the folder ``{folder}/``.":
            wrong.append(f"{folder}/__init__.py: {first!r}")
    assert not wrong, wrong


def test_layout_page_tabulates_every_package_with_its_folder() -> None:
    text = (REPO_ROOT / "docs" / "layout.md").read_text()
    rows = dict(
        (name, folder)
        for folder, name in re.findall(r"^\| `([\w/]+)/` \| `([\w.]+)` \|", text, re.MULTILINE)
    )
    assert rows == {name: folder_of(name) for name in SETUPTOOLS["packages"]}


def test_readme_layout_section_states_the_mapping() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert "package-dir" in section and "docs/layout.md" in section
    for top, folder in SETUPTOOLS["package-dir"].items():
        if top not in ("fleetmind", "fleetmind.models"):
            assert f"`{folder}/`" in section, folder


def test_errors_live_in_fleetmind_errors_and_the_old_module_reexports_them() -> None:
    import fleetmind.data.errors as old
    import fleetmind.errors as errors

    names = ["FleetMindError", "DataError", "ConfigError", "ModelLoadError", "NotAvailableError"]
    for name in names:
        cls = getattr(errors, name)
        assert getattr(old, name) is cls and cls.__module__ == "fleetmind.errors"
        assert issubclass(cls, errors.FleetMindError)
    assert sorted(old.__all__) == sorted(names)
