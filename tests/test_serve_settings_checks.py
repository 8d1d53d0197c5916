"""``fleetmind serve``'s checks before uvicorn starts: unknown ``baseline:``/``heuristic:`` names,
durations past their bound, and empty cluster names (uvicorn is replaced by a recorder)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from fleetmind.cli import main
from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving.settings import Settings, get_settings

YEAR_S = 365 * 86400.0


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A database under tmp_path, no tokens, one worker, and the test process's SIGHUP and
    environment back (a ``serve`` that starts leaves its options in ``os.environ`` for uvicorn's
    workers: ``--prometheus-url`` would reach the next test file's ``serve`` as
    ``FLEETMIND_PROMETHEUS_URL``)."""
    import os
    import signal

    options = {env: os.environ.get(env) for env in cli_serve._ENV_OPTIONS.values()}
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    for var in ("WORKERS", "RCA_MODEL", "PLACEMENT_MODEL"):
        monkeypatch.delenv(f"FLEETMIND_{var}", raising=False)
    before = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    yield
    for env, value in options.items():
        if value is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = value
    if before is not None:
        signal.signal(signal.SIGHUP, before)
    get_settings.cache_clear()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records each uvicorn start instead of serving."""
    import uvicorn

    seen: list[bool] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(True))
    return seen


def serve_args(**kw: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_serve.register(parser.add_subparsers(), "serve", "serve")
    ns = parser.parse_args(["serve"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


@pytest.mark.parametrize(
    ("variable", "value", "known"),
    [
        ("FLEETMIND_RCA_MODEL", "baseline:nope", "deepest"),
        ("FLEETMIND_PLACEMENT_MODEL", "heuristic:nope", "BestFit"),
    ],
)
def test_an_unknown_baseline_or_heuristic_is_one_line_exit_2(
    variable: str,
    value: str,
    known: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[bool],
) -> None:
    """They passed the checks, then the server's lifespan raised ConfigError: a traceback."""
    monkeypatch.setenv(variable, value)
    assert main(["serve"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(f"fleetmind: error: {variable}={value!r}")
    assert "'nope'" in err[0] and "known: " in err[0] and known in err[0]
    assert started == []


def test_known_baselines_and_heuristics_start(
    monkeypatch: pytest.MonkeyPatch, started: list[bool]
) -> None:
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", "baseline:Deepest")
    monkeypatch.setenv("FLEETMIND_PLACEMENT_MODEL", "heuristic:best_fit")
    assert cli_serve.run(serve_args()) == 0
    assert cli_serve.run(serve_args(rca_model="baseline:upstream-coverage")) == 0
    with pytest.raises(ConfigError, match=r"FLEETMIND_RCA_MODEL='baseline:pagerankk'"):
        cli_serve.run(serve_args(rca_model="baseline:pagerankk"))  # the option's value, named
    assert started == [True, True]


@pytest.mark.parametrize(
    "variable",
    [
        "FLEETMIND_GRAPH_REFRESH_S",  # its thread died with OverflowError in Event.wait
        "FLEETMIND_TELEMETRY_TTL_S",
        "FLEETMIND_INCIDENT_WINDOW_S",
        "FLEETMIND_INCIDENT_AUTO_RESOLVE_S",
        "FLEETMIND_RETENTION_S",
        "FLEETMIND_DB_STATEMENT_TIMEOUT_S",
        "FLEETMIND_RCA_DEADLINE_S",
        "FLEETMIND_NOTIFY_RESEND_S",
    ],
)
def test_a_duration_past_its_bound_is_refused_before_uvicorn(
    variable: str, monkeypatch: pytest.MonkeyPatch, started: list[bool]
) -> None:
    monkeypatch.setenv(variable, "1e12")
    with pytest.raises(ConfigError) as err:
        cli_serve.run(serve_args())
    msg = str(err.value)
    assert f"{variable}='1e12'" in msg and "less than or equal" in msg and "\n" not in msg
    assert started == []


def test_every_duration_setting_is_bounded_by_a_year_or_less() -> None:
    """Each ``*_s`` setting has an upper bound of at most a year (retention: ten years), below
    ``threading.TIMEOUT_MAX``, past which the graph refresh thread's ``Event.wait`` overflowed."""
    import threading

    for name, field in Settings.model_fields.items():
        if not name.endswith("_s"):
            continue
        bounds = [m.le for m in field.metadata if hasattr(m, "le")]
        limit = 10 * YEAR_S if name == "retention_s" else YEAR_S
        assert bounds and bounds[0] <= limit < threading.TIMEOUT_MAX, name
    assert Settings(graph_refresh_s=YEAR_S).graph_refresh_s == YEAR_S  # a year is still fine


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_cluster_name_means_unset(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``value: ""`` in a manifest kept cluster '': every GPU pod failed the extender's filter."""
    monkeypatch.setenv("FLEETMIND_SCHEDULER_CLUSTER", value)
    monkeypatch.setenv("FLEETMIND_TELEMETRY_CLUSTER", value)
    settings = Settings()
    assert settings.scheduler_cluster is None  # unset: node names looked up in every cluster
    assert settings.telemetry_cluster == "local"  # unset: the default
    monkeypatch.setenv("FLEETMIND_SCHEDULER_CLUSTER", "c0")
    monkeypatch.setenv("FLEETMIND_TELEMETRY_CLUSTER", "c1")
    assert (Settings().scheduler_cluster, Settings().telemetry_cluster) == ("c0", "c1")


def test_a_prometheus_url_without_prometheus_telemetry_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], started: list[bool]
) -> None:
    """``--prometheus-url`` alone left the service on the simulated fleet (telemetry ``sim``, the
    default): /readyz said ``telemetry: sim`` with no warning and placements named simulated
    nodes that looked real."""
    monkeypatch.delenv("FLEETMIND_TELEMETRY", raising=False)
    monkeypatch.delenv("FLEETMIND_PROMETHEUS_URL", raising=False)
    assert main(["serve", "--prometheus-url", "http://127.0.0.1:9/"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--telemetry prometheus" in err[0], err
    assert started == []
    # chosen explicitly, sim with a URL set elsewhere (a shared values file) still starts
    assert main(["serve", "--telemetry", "sim", "--prometheus-url", "http://127.0.0.1:9/"]) == 0
    assert started == [True]
