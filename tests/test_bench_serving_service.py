"""``benchmarks.serving.service``: a model given on the command line that the server does not load
stops the run (one line, status 2, the server stopped first), and the smoke modes never write the
committed headline result ``benchmarks/results/serving/serving.json``.

The server is replaced by a stand-in: ``start_server`` returns a fake process and
``GET /api/v1/models`` answers what the registry reports when it falls back
(``fallback_reason``, ``serving/registry.py``). Nothing here starts a process or runs a phase.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.serving import service
from fleetmind.cli.runner import run_main

PROG = "benchmarks.serving.service"


class _FakeProc:
    pid = 0

    def __init__(self) -> None:
        self.stopped = False

    def terminate(self) -> None:
        self.stopped = True

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def kill(self) -> None:
        self.stopped = True


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def json(self) -> dict[str, Any]:
        return self.body


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setattr(sys, "argv", [PROG, *argv])
    return run_main(service.main, prog=PROG)


class _WentOn(Exception):
    """Raised where the run would go on to its phases."""


@pytest.mark.parametrize("kind", ["rca", "placement"])
def test_a_model_the_server_falls_back_from_stops_the_run(
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc = _FakeProc()
    monkeypatch.setattr(service, "start_server", lambda *a, **k: proc)
    models = {
        "rca": {"method": "gat", "source": "models/rca", "fallback_reason": None},
        "placement": {"method": "ppo", "source": "models/placement", "fallback_reason": None},
    }
    fallback = {"rca": "baseline:upstream-coverage", "placement": "heuristic:builtin-bestfit"}
    models[kind] = {
        "method": fallback[kind],
        "source": None,
        "fallback_reason": "cannot load /nonexistent: no such folder",
    }
    monkeypatch.setattr(httpx, "get", lambda *a, **k: _Answer(models))

    def went_on(*a: object, **k: object) -> None:
        raise _WentOn

    monkeypatch.setattr(service, "sim_incidents", went_on)
    out = tmp_path / "s.json"
    argv = [f"--{kind}-model", "/nonexistent", "--skip-ingest", "--out", str(out)]
    assert _run(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"{PROG}: error: --{kind}-model /nonexistent: the server fell back to ")
    assert "no such folder" in err
    assert proc.stopped  # the server was stopped before the error
    assert not out.exists()


def test_a_served_model_is_not_refused() -> None:
    models = {"rca": {"method": "gat", "fallback_reason": None}, "placement": {"method": "ppo"}}
    assert service.fallback_error(models, {"rca": "models/rca", "placement": None}) is None
    # a fallback of a kind not given on the command line is the registry's choice: not refused
    models["placement"]["fallback_reason"] = "no model"
    assert service.fallback_error(models, {"rca": "models/rca", "placement": None}) is None


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        (["--quick"], "serving_quick.json"),
        (["--breakdown-only"], "serving_breakdown.json"),
        (["--skip-ingest"], "serving_partial.json"),
        (["--skip-breakdown"], "serving_partial.json"),
        (["--rca-model", "runs/candidate"], "serving_partial.json"),
        (["--placement-model", "runs/candidate"], "serving_partial.json"),
        (["--ingest-alerts", "10", "--rca-requests", "1"], "serving_partial.json"),
        (["--place-clients", "2"], "serving_partial.json"),
        (["--ingest-alerts", "20000"], None),  # the default size, spelled out
        ([], None),  # the full run on the released models: the committed result
    ],
)
def test_only_the_full_run_defaults_to_the_committed_result(
    flags: list[str], name: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def stop(args: Any) -> None:  # where the run would start its server or its breakdown
        seen.append(args.out)
        raise _WentOn

    monkeypatch.setattr(service, "breakdown_only", stop)
    monkeypatch.setattr(service, "benchmark_graph", lambda: stop(service_args()))
    captured: dict[str, Any] = {}

    real_parse = service.argparse.ArgumentParser.parse_args

    def parse(self: Any, *a: Any, **k: Any) -> Any:
        captured["args"] = real_parse(self, *a, **k)
        return captured["args"]

    def service_args() -> Any:
        return captured["args"]

    monkeypatch.setattr(service.argparse.ArgumentParser, "parse_args", parse)
    monkeypatch.setattr(sys, "argv", [PROG, *flags])
    with pytest.raises(_WentOn):
        service.main()
    assert len(seen) == 1
    out = Path(seen[0]).resolve()
    committed = (service.RESULTS / "serving" / "serving.json").resolve()
    if name is None:
        assert out == committed
    else:
        assert out != committed
        assert out == (service.REPO / "runs" / "serving" / name).resolve()
