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
