"""FleetMind installed from a wheel (not a source checkout): released models are not overwritten,
packaged fleets are reachable by name, and the ``data fetch`` default folder is read.

The wheel layout is simulated by pointing :data:`fleetmind.data.paths.REPO_ROOT` and
:data:`fleetmind.data.paths.MODELS_DIR` into a temporary ``site-packages/fleetmind`` folder (no
``pyproject.toml`` there, as in a real install); nothing is downloaded or trained.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data import fleet_io, paths
from fleetmind.data.errors import ConfigError, DataError

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A simulated installed package (``<tmp>/site-packages/fleetmind``); returns its models folder."""
    pkg = tmp_path / "site-packages" / "fleetmind"
    models = pkg / "models"
    for name in ("placement", "placement-dynamic", "rca"):
        (models / name).mkdir(parents=True)
        (models / name / "metadata.json").write_text("{}\n")
    (models / "rca" / "config.json").write_text('{"calibration": null}\n')
    monkeypatch.setattr(paths, "REPO_ROOT", pkg)
    monkeypatch.setattr(paths, "MODELS_DIR", models)
    monkeypatch.delenv("FLEETMIND_SHARED_DATA", raising=False)
    monkeypatch.delenv(paths.OPENB_FALLBACK_ENV, raising=False)  # restored after the test
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return models


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_checkout_is_recognised() -> None:
    assert paths.is_source_checkout()  # these tests run from the checkout


# --- sched train --release ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fgd", "dynamic"])
def test_sched_train_release_in_a_pip_install_is_refused_before_training(
    mode: str, wheel: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.training.recipes import dynamic, fgd

    trained: list[str] = []
    for recipe in (fgd, dynamic):  # never train, whatever the CLI does first
        monkeypatch.setattr(recipe, "run", lambda a: trained.append(a.mode) or {})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{wheel.parent / 'mlflow.db'}")
    before = _snapshot(wheel)
    argv = ["sched", "train", "--mode", mode, "--trace", "default", "--timesteps", "64"]
    assert cli.main([*argv, "--no-register", "--release", "--out", "runs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # at most the synthetic-data note first (no openb data in the simulated install), then the error
    assert len(err) <= 2 and err[-1].startswith("fleetmind: error: --release would write"), err
    assert "into the installed package" in err[-1] and "--model" in err[-1]
    assert trained == []
    assert _snapshot(wheel) == before
    assert not Path("runs").exists()


def test_fgd_recipe_release_in_a_pip_install_is_refused_before_training(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library entry point refuses too (the CLI is not the only caller)."""
    from fleetmind.training.recipes import fgd

    monkeypatch.setattr(fgd, "RELEASED_DIR", wheel / "placement")
    monkeypatch.setattr(fgd, "_check", lambda args: None)

    def trained(*_: object) -> None:
        raise AssertionError("training started")

    monkeypatch.setattr(fgd, "seed_everything", trained)
    with pytest.raises(ConfigError, match="--release would write into the installed package"):
        fgd.run(fgd.FgdArgs(release=True))


def test_release_into_the_checkout_is_allowed(tmp_path: Path) -> None:
    from fleetmind.training.recipes.settings import check_release_target

    check_release_target(paths.MODELS_DIR / "placement")  # the checkout: --release as before


# --- rca calibrate --write --------------------------------------------------------------------------


def test_rca_calibrate_write_without_model_in_a_pip_install_is_refused(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.training import rca_calibrate

    monkeypatch.setattr(rca_calibrate, "RELEASED_DIR", wheel / "rca")
    before = _snapshot(wheel)
    assert cli.main(["rca", "calibrate", "--data", "out/rca", "--write"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--write without --model would write into the installed package" in err[0]
    assert "--model" in err[0].split(";", 1)[1]
    assert _snapshot(wheel) == before


def test_rca_calibrate_write_prints_the_absolute_config_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from fleetmind.training import rca_calibrate

    monkeypatch.chdir(tmp_path)
    payload = {"temperature": 1.5, "fitted_on": {"n": 10}, "splits": {}}
    monkeypatch.setattr(rca_calibrate, "calibrate", lambda args: payload)
    args = argparse.Namespace(model="rel/model", write=True, split="val", json=None)
    assert rca_calibrate.run(args) == 0
    out = capsys.readouterr().out
    assert f"wrote calibration into {tmp_path / 'rel' / 'model' / 'config.json'}\n" in out
    args.model = None
    rca_calibrate.run(args)
    assert (
        f"into {rca_calibrate.RELEASED_DIR.resolve() / 'config.json'}\n" in capsys.readouterr().out
    )


# --- packaged example fleets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["small", "small.yaml", "data/fleets/small.yaml", "example_multicluster"]
)
def test_packaged_fleet_by_name_or_checkout_path_from_any_folder(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no data/fleets here, as for a pip user
    if spec.startswith("data/"):  # the checkout path says which file it reads instead
        with pytest.warns(UserWarning, match="using the packaged example fleet"):
            fleet = fleet_io.load_fleet(spec)
    else:
        fleet = fleet_io.load_fleet(spec)
    stem = Path(spec).name.removesuffix(".yaml")
    assert fleet == fleet_io.load_fleet_yaml(fleet_io.PACKAGED_FLEETS_DIR / f"{stem}.yaml")


def test_fleet_show_small_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["fleet", "show", "--topology", "small", "--json", "fleet.json"]) == 0
    summary = json.loads((tmp_path / "fleet.json").read_text())
    assert summary["n_nodes"] > 0
    assert summary["source"] == str(fleet_io.PACKAGED_FLEETS_DIR / "small.yaml")


def test_a_local_file_wins_over_the_packaged_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").write_text("not: a fleet\n")
    with pytest.raises(DataError, match="small"):
        fleet_io.load_fleet("small")  # the user's own file is read, not silently replaced


def test_missing_fleet_names_the_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"not found .*example fleet name \(example_multicluster"):
        fleet_io.load_fleet("nosuch")


def test_fleet_help_and_nvml_hint_name_what_works(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["fleet", "show", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "data/fleets/" not in help_text and "'small'" in help_text
    assert "data/fleets/" not in fleet_io.NOT_AVAILABLE_HINT
    assert "--topology small" in fleet_io.NOT_AVAILABLE_HINT


# --- the shared data folder ------------------------------------------------------------------------


def test_pip_install_reads_the_data_fetch_default_folder(wheel: Path) -> None:
    fetched = Path.cwd() / "fleetmind-data"  # where `fleetmind data fetch openb` puts it
    (fetched / "openb" / "csv").mkdir(parents=True)
    assert paths.shared_data_dir() == fetched


def test_missing_data_folder_names_every_folder_tried(wheel: Path) -> None:
    with pytest.raises(DataError) as caught:
        paths.shared_data_dir()
    msg = str(caught.value)
    assert str(Path.cwd() / "fleetmind-data") in msg
    assert "site-packages" not in msg  # no folder inside the installed package is tried


def test_environment_variable_still_wins(wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (Path.cwd() / "fleetmind-data").mkdir()
    mine = wheel.parent / "mine"
    mine.mkdir()
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(mine))
    assert paths.shared_data_dir() == mine
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(mine / "missing"))
    with pytest.raises(DataError, match="missing"):
        paths.shared_data_dir()  # no silent fallback from an explicit folder
