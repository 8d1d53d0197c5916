"""When the openb data counts as present: the node list and the default pod list, not merely an
``openb/csv`` folder (which a failed or partial fetch may leave)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.data.paths import (
    OPENB_FALLBACK_ENV,
    allow_synthetic_openb,
    openb_csv_dir,
    openb_is_synthetic,
)

REQUIRED = ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv")
"""What ``fleetmind.data.openb`` reads by default: the node list and the default pod list."""


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(tmp_path))
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(OPENB_FALLBACK_ENV, "")  # restored (unset) afterwards
    return tmp_path


def test_an_empty_or_partial_openb_folder_keeps_the_fallback(shared: Path) -> None:
    csv = shared / "openb" / "csv"
    csv.mkdir(parents=True)
    assert allow_synthetic_openb() is not None and openb_is_synthetic()
    assert "openb-synthetic" in str(openb_csv_dir())
    (csv / "openb_node_list_gpu_node.csv").write_text("sn\n")  # the pod list is still missing
    assert openb_is_synthetic() and openb_csv_dir() != csv


def test_the_node_list_and_default_pod_list_count_as_the_data(shared: Path) -> None:
    csv = shared / "openb" / "csv"
    csv.mkdir(parents=True)
    for name in REQUIRED:
        (csv / name).write_text("x\n")
    assert allow_synthetic_openb() is None
    assert not openb_is_synthetic() and openb_csv_dir() == csv
