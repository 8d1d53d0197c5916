"""``fleetmind serve``: ``--workers`` / ``FLEETMIND_WORKERS`` and the checks made before uvicorn starts
(uvicorn is replaced by a recorder)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from data.errors import ConfigError
from training import cli_serve


@pytest.fixture(autouse=True)
def _tmp_database(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI opens the database before uvicorn starts: keep it out of the working directory."""
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")


def args(**kw: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    ns = parser.parse_args(["serve"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_workers_from_option_env_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    seen: list[int] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw["workers"]))
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    assert cli_serve.run(args()) == 0
    monkeypatch.setenv("FLEETMIND_WORKERS", "3")
    assert cli_serve.run(args()) == 0
    assert cli_serve.run(args(workers=2)) == 0  # the option wins over the variable
    assert seen == [1, 3, 2]
    for bad in ("0", "two"):
        monkeypatch.setenv("FLEETMIND_WORKERS", bad)
        with pytest.raises(ConfigError, match="FLEETMIND_WORKERS|--workers"):
            cli_serve.run(args())


def test_rca_processes_option_sets_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv("FLEETMIND_RCA_PROCESSES", "0")  # restored after the test
    parsed = argparse.ArgumentParser()
    sub = parsed.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    ns = parsed.parse_args(["serve", "--rca-processes", "2"])
    assert cli_serve.run(ns) == 0
    assert os.environ["FLEETMIND_RCA_PROCESSES"] == "2"
    with pytest.raises(ConfigError, match="FLEETMIND_"):
        cli_serve.run(args(rca_processes=-1))


def test_bad_settings_name_every_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv("FLEETMIND_RCA_PROCESSES", "abc")
    monkeypatch.setenv("FLEETMIND_SQLITE_SYNCHRONOUS", "maybe")
    with pytest.raises(ConfigError) as err:
        cli_serve.run(args())
    msg = str(err.value)
    assert "FLEETMIND_RCA_PROCESSES='abc'" in msg and "integer" in msg
    assert "FLEETMIND_SQLITE_SYNCHRONOUS='maybe'" in msg and "\n" not in msg


def test_unusable_database_is_a_config_error_before_uvicorn(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    started: list[bool] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(True))
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'no' / 'such' / 'x.db'}")
    with pytest.raises(ConfigError, match="cannot open the database at sqlite:///.*x.db"):
        cli_serve.run(args())
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", "not-a-url")
    with pytest.raises(ConfigError, match="cannot use database URL 'not-a-url'"):
        cli_serve.run(args())
    assert started == []
    good = tmp_path / "ok.db"
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{good}")
    assert cli_serve.run(args()) == 0 and started == [True]
    assert good.is_file()  # the tables the server's startup would create


def test_keep_warm_option_sets_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv("FLEETMIND_KEEP_WARM_S", "0")  # restored after the test
    parsed = argparse.ArgumentParser()
    sub = parsed.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    assert cli_serve.run(parsed.parse_args(["serve", "--keep-warm", "1.5"])) == 0
    assert os.environ["FLEETMIND_KEEP_WARM_S"] == "1.5"
    with pytest.raises(ConfigError, match=r"FLEETMIND_KEEP_WARM_S='-2\.0'.*greater than or equal"):
        cli_serve.run(args(keep_warm=-2.0))
