"""Each dataset is looked up across the dataset folders (``shared/data`` beside a checkout, then
``./fleetmind-data``): a dataset fetched into ``./fleetmind-data`` is found even when
``shared/data`` exists without it; ``FLEETMIND_SHARED_DATA`` stays the only folder when set."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.data import paths


@pytest.fixture
def two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A checkout whose ``shared/data`` holds openb only; ``./fleetmind-data`` holds petshop and
    nezha_tt. Returns ``(shared/data, ./fleetmind-data)``."""
    root = tmp_path / "main"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "fleetmind"\n')
    shared = tmp_path / "shared" / "data"
    csv = shared / "openb" / "csv"
    csv.mkdir(parents=True)
    for name in paths.OPENB_REQUIRED_FILES:
        (csv / name).write_text("x\n")
    work = tmp_path / "work"
    fetched = work / paths.FETCH_DEFAULT_DIR
    (fetched / "petshop" / "low_traffic").mkdir(parents=True)
    (fetched / "nezha_tt").mkdir()
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    monkeypatch.delenv("FLEETMIND_SHARED_DATA", raising=False)
    monkeypatch.delenv(paths.OPENB_FALLBACK_ENV, raising=False)
    monkeypatch.chdir(work)
    return shared, fetched


def test_each_dataset_from_the_folder_that_holds_it(two_folders: tuple[Path, Path]) -> None:
    shared, fetched = two_folders
    assert paths.shared_data_candidates() == [shared, fetched]
    assert paths.shared_data_dir("petshop") == fetched  # was shared/data, which lacks it
    assert paths.shared_data_dir("nezha_tt") == fetched
    assert paths.shared_data_dir("openb") == shared
    assert paths.shared_data_dir() == shared  # no dataset named: the first folder, as before
    assert paths.shared_data_dir("nosuch") == shared  # the reader then names what it misses


def test_openb_fetched_beside_a_shared_folder_without_it(
    two_folders: tuple[Path, Path],
) -> None:
    shared, fetched = two_folders
    for name in paths.OPENB_REQUIRED_FILES:
        (shared / "openb" / "csv" / name).unlink()  # a partial shared/data/openb does not count
    csv = fetched / "openb" / "csv"
    csv.mkdir(parents=True)
    for name in paths.OPENB_REQUIRED_FILES:
        (csv / name).write_text("x\n")
    assert paths.openb_csv_dir() == csv
    assert paths.allow_synthetic_openb() is None  # the real data is found: no synthetic fallback
    assert not paths.openb_is_synthetic()


def test_environment_variable_is_the_only_folder(
    two_folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(mine))
    assert paths.shared_data_dir("petshop") == mine  # not ./fleetmind-data, which holds it
    assert paths.shared_data_dir("openb") == mine
