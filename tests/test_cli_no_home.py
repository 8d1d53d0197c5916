"""Without a home folder (``HOME`` unset and a user without a passwd entry: ``docker run --user
12345``, ``env -i``), :meth:`pathlib.Path.home` raises ``RuntimeError("Could not determine home
directory.")``. Before the fix that was a traceback from ``graph build`` (the default kubeconfig
``~/.kube/config``), ``fleet show`` (the synthetic openb trace's cache folder) and ``rca train``
(MLflow's import); now it is one line telling to set ``HOME`` (or ``FLEETMIND_CACHE_DIR``)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.cli.runner import run_main


@pytest.fixture
def no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HOME`` unset and no passwd entry for this user: ``Path.home()`` raises."""
    for name in ("HOME", "KUBECONFIG", "FLEETMIND_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(RuntimeError):
        Path.home()


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_graph_build_with_the_default_kubeconfig(
    no_home: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["graph", "build", "--out", str(tmp_path / "g.json")]) == 2
    line = _one_line(capsys)
    assert "~/.kube/config" in line and "set HOME" in line
    assert not (tmp_path / "g.json").exists()


def test_the_cache_folder(no_home: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetmind.data.errors import ConfigError
    from fleetmind.data.openb_synthetic import cache_dir

    with pytest.raises(ConfigError, match="set HOME or FLEETMIND_CACHE_DIR"):
        cache_dir()
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", "/tmp/fleetmind-cache")
    assert cache_dir() == Path("/tmp/fleetmind-cache")


def test_a_library_asking_for_home_is_one_line(
    no_home: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """What MLflow's import does (``Path.home()``), through the runner."""

    def command() -> int:
        Path.home()
        return 0

    assert run_main(command, prog="fleetmind") == 2
    line = _one_line(capsys)
    assert line.startswith("fleetmind: error: no home folder") and "set HOME" in line


def test_other_runtime_errors_keep_their_traceback() -> None:
    def command() -> int:
        raise RuntimeError("something else")

    with pytest.raises(RuntimeError, match="something else"):
        run_main(command, prog="fleetmind")


def test_home_still_used_when_it_is_there(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fleetmind.cli.kubeconfig import kubeconfig_paths

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_paths(None)[0] == [tmp_path / ".kube" / "config"]
    assert os.environ["HOME"] == str(tmp_path)


def test_an_unknown_user_is_not_a_missing_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``~nosuchuser/x`` fails to expand with ``HOME`` set: the message names the unknown user
    (was: "HOME is not set"). Without ``HOME``, ``~/x`` still says to set it."""
    from fleetmind.cli.kubeconfig import kubeconfig_paths
    from fleetmind.errors import NotAvailableError

    def no_user(name: str) -> pwd.struct_passwd:
        raise KeyError(f"getpwnam(): name not found: {name!r}")

    monkeypatch.setattr(pwd, "getpwnam", no_user)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(NotAvailableError) as info:
        kubeconfig_paths("~nosuchuser/x")
    assert "unknown user in ~nosuchuser" in str(info.value)
    assert "HOME" not in str(info.value)
    monkeypatch.delenv("HOME")
    with pytest.raises(NotAvailableError, match="unknown user in ~nosuchuser"):
        kubeconfig_paths("~nosuchuser")


def test_no_home_still_says_set_home(no_home: None) -> None:
    from fleetmind.cli.kubeconfig import kubeconfig_paths
    from fleetmind.errors import NotAvailableError

    for part in ("~", "~/.kube/config"):
        with pytest.raises(NotAvailableError, match="HOME is not set"):
            kubeconfig_paths(part)
