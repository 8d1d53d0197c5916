"""The ``fleetmind`` namespace: package list, banned bare imports, old pickles, and a wheel install."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from fleetmind.data.paths import MODELS_DIR, REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Every importable package of the checkout, by its ``fleetmind.*`` name."""
    found: dict[str, Path] = {}
    for top, folder in SETUPTOOLS["package-dir"].items():
        root = REPO_ROOT / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            found[".".join([top, *rel.parts]) if rel.parts else top] = init.parent
    return found


def test_every_package_folder_is_listed_and_mapped_under_fleetmind() -> None:
    listed = set(SETUPTOOLS["packages"])
    assert listed == set(_package_folders()), "pyproject's packages list is out of date"
    assert all(name == "fleetmind" or name.startswith("fleetmind.") for name in listed)


def test_released_models_are_package_data() -> None:
    assert MODELS_DIR == REPO_ROOT / "models"  # the checkout's folder, through importlib.resources
    for artifact in ("rca/model.pt", "placement/policy.onnx", "placement-dynamic/policy.onnx"):
        assert (MODELS_DIR / artifact).is_file()


def test_ruff_bans_the_old_bare_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from data.fleet import Fleet\nimport rca.metrics\nfrom envs import core\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(REPO_ROOT / "pyproject.toml"),
            str(probe),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert out.stdout.count("TID251") == 3


def test_old_module_names_resolve_only_inside_the_compat_block(monkeypatch) -> None:
    # In a checkout the folders themselves are importable from its root; an installed user is not.
    here = {"", ".", str(REPO_ROOT), os.getcwd()}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])
    from fleetmind.compat import legacy_module_names
    from fleetmind.training.rca_pyfunc import GATPyfunc

    # A protocol-0 pickle of the pyfunc wrapper class as 0.1.0 wrote it (module ``training...``).
    old = b"ctraining.rca_pyfunc\nGATPyfunc\n."
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)
    with legacy_module_names():
        assert pickle.loads(old) is GATPyfunc
    assert "training" not in sys.modules and "training.rca_pyfunc" not in sys.modules


def test_placement_pyfunc_pickled_under_its_old_module_loads_in_the_compat_block() -> None:
    import fleetmind.training
    from fleetmind.compat import legacy_module_names
    from fleetmind.training.placement_pyfunc import PlacementPyfunc

    # 0.1.0 and the first 0.2.0 builds logged the wrapper from the training script's module
    for module in (b"training.sched_train", b"fleetmind.training.sched_train"):
        old = b"c" + module + b"\nPlacementPyfunc\n."
        with legacy_module_names():
            assert pickle.loads(old) is PlacementPyfunc
        with pytest.raises(ModuleNotFoundError):
            pickle.loads(old)
    assert not hasattr(fleetmind.training, "sched_train")


def test_shipped_ppo_zips_load_through_load_sb3_model() -> None:
    # both now pickle fleetmind.rl.policy; a zip saved before the move (rl.policy) is built and
    # loaded in tests/test_shipped_ppo_zip.py
    from fleetmind.rl.export import load_sb3_model
    from fleetmind.rl.policy import CandidateScorerPolicy

    for name in ("placement", "placement-dynamic"):
        model = load_sb3_model(MODELS_DIR / name / "ppo.zip")
        assert isinstance(model.policy, CandidateScorerPolicy)
    assert "rl" not in sys.modules


def test_corrupt_sb3_zip_is_a_model_load_error(tmp_path: Path) -> None:
    from fleetmind.data.errors import ModelLoadError
    from fleetmind.rl.export import load_sb3_model

    bad = tmp_path / "ppo.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="cannot load SB3 model"):
        load_sb3_model(bad)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_the_demo(tmp_path: Path) -> None:
    """``python -m build`` a wheel, install it alone into a new venv, run ``fleetmind demo`` elsewhere.

    The new venv reaches the dependencies of the test venv through a ``.pth`` path line (no
    downloads), but not its editable install of this checkout: a ``.pth`` in a folder added that way
    is not processed, so only the wheel provides ``fleetmind``.
    """
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(dist),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("fleetmind-*.whl")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    # the venv below reuses this venv's packages, dev extras included, so a dependency the wheel
    # does not declare goes unseen there: check the declared ones (tests/test_install_dependencies.py
    # checks every import); rich: stable-baselines3's progress bar, which `sched train` turns on
    version = PYPROJECT["project"]["version"]
    metadata = zipfile.ZipFile(wheel).read(f"fleetmind-{version}.dist-info/METADATA").decode()
    requires = {
        line.split(":", 1)[1].strip().split(">")[0].split("=")[0].split(";")[0].strip().lower()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert {"rich", "tqdm", "stable-baselines3"} <= requires, sorted(requires)
    for page in ("base", "incidents", "incident", "fleet", "login"):  # the /ui templates
        assert f"fleetmind/serving/ui/templates/{page}.html" in names
    # PEP 561 (https://peps.python.org/pep-0561/): without it mypy/pyright treat fleetmind as untyped
    assert "fleetmind/py.typed" in names
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "test-deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "data").mkdir()  # a user's own folder named like an old top-level package
    (work / "data" / "__init__.py").write_text("MINE = True\n")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": ""}
    probe = subprocess.run(
        [
            str(py),
            "-c",
            "import data, fleetmind, fleetmind.data.paths as p; "
            "print(data.MINE, fleetmind.__file__, p.MODELS_DIR)",
        ],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert probe[0] == "True"  # the user's module is untouched
    assert probe[1].startswith(str(env_dir)) and probe[2].startswith(str(env_dir))
    demo = subprocess.run(
        [str(env_dir / "bin" / "fleetmind"), "demo", "--out", str(work / "out")],
        cwd=work,
        env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert (work / "out" / "demo_summary.json").is_file()
    assert "released" in demo.stdout.lower()
