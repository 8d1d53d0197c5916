"""``fleetmind serve --workers`` / ``FLEETMIND_WORKERS`` (uvicorn is replaced by a recorder)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from data.errors import ConfigError
from training import cli_serve


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
