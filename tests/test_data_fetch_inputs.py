"""``fleetmind data fetch`` on a bad ``--base-url`` and on a failed download: one line, and no
dataset folder left behind that would read as the data being there."""

from __future__ import annotations

from pathlib import Path

import pytest
from fetch_helpers import toy_manifest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.data.fetch import fetch_dataset
from fleetmind.data.paths import OPENB_FALLBACK_ENV, allow_synthetic_openb

NODES, DEFAULT, OTHER = (
    "csv/openb_node_list_gpu_node.csv",
    "csv/openb_pod_list_default.csv",
    "csv/openb_pod_list_other.csv",
)
FILES = {NODES: b"sn,cpu_milli\n", DEFAULT: b"name\np0\n", OTHER: b"name\np1\n"}


def _manifest(files: dict[str, bytes]) -> dict:
    return toy_manifest("openb", files, "c", "t")


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999/", "ftp://mirror/"])
def test_bad_base_url_is_one_line(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``http://[::1`` raised httpx.InvalidURL, which is no HTTPError: a traceback."""
    dest = tmp_path / "d"
    assert main(["data", "fetch", "openb", "--dest", str(dest), "--base-url", url]) == 2
    out = capsys.readouterr()
    err = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("fleetmind: error: --base-url"), err
    assert out.out == ""  # the error is all it says: no "N files into ..." line first
    assert not dest.exists()
    with pytest.raises(ConfigError, match="--base-url"):
        fetch_dataset("openb", dest, base_url=url, manifest=_manifest(FILES))


def test_failed_fetch_leaves_no_folder(
    http_dir: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An offline fetch left ``openb/csv``, and its existence turned the synthetic fallback off
    for sched, fleet show and demo."""
    url, _ = http_dir  # serves nothing: every file is a 404
    dest = tmp_path / "shared"
    with pytest.raises(NotAvailableError, match="HTTP 404"):
        fetch_dataset("openb", dest, base_url=url, manifest=_manifest(FILES))
    assert not dest.exists()
    dest.mkdir()  # a folder that was there before is kept
    with pytest.raises(NotAvailableError):
        fetch_dataset("openb", dest, base_url="http://127.0.0.1:9/", manifest=_manifest(FILES))
    assert dest.is_dir() and not any(dest.iterdir())
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(dest))
    monkeypatch.setenv(OPENB_FALLBACK_ENV, "")  # restored (unset) afterwards
    assert allow_synthetic_openb() is not None  # the fallback still applies


def test_partial_fetch_keeps_verified_files_only(
    http_dir: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, root = http_dir
    (root / "openb_node_list_gpu_node.csv").write_bytes(FILES[NODES])  # only the first file
    dest = tmp_path / "shared"
    with pytest.raises(NotAvailableError, match="HTTP 404"):
        fetch_dataset("openb", dest, base_url=url, manifest=_manifest(FILES))
    csv = dest / "openb" / "csv"
    assert sorted(p.name for p in csv.iterdir()) == ["openb_node_list_gpu_node.csv"]
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(dest))
    monkeypatch.setenv(OPENB_FALLBACK_ENV, "")  # restored (unset) afterwards
    assert allow_synthetic_openb() is not None  # no default pod list: not the openb data
    (root / "openb_pod_list_default.csv").write_bytes(FILES[DEFAULT])
    (root / "openb_pod_list_other.csv").write_bytes(FILES[OTHER])
    rep = fetch_dataset("openb", dest, base_url=url, manifest=_manifest(FILES))
    assert rep.kept == [NODES] and sorted(rep.downloaded) == [DEFAULT, OTHER]
    monkeypatch.setenv(OPENB_FALLBACK_ENV, "")  # restored (unset) afterwards
    assert allow_synthetic_openb() is None  # now it is
