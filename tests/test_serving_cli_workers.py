"""``fleetmind serve``: ``--workers`` / ``FLEETMIND_WORKERS`` and the checks made before uvicorn starts
(uvicorn is replaced by a recorder)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from fleetmind.cli import serve as cli_serve
from fleetmind.data.errors import ConfigError


@pytest.fixture(autouse=True)
def _tmp_database(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI opens the database before uvicorn starts: keep it out of the working directory."""
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")


@pytest.fixture(autouse=True)
def _keep_sighup() -> Any:
    """``run`` installs a SIGHUP handler for a single-process server: give the test process its
    own back."""
    import signal

    if not hasattr(signal, "SIGHUP"):
        yield
        return
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def test_an_upgrade_of_the_schema_is_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI upgrades the schema before uvicorn starts, so the server's own log line saw only
    the upgraded schema; the CLI says what it upgraded, once."""
    import uvicorn

    from fleetmind.serving.migrations import head

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    assert cli_serve.run(args()) == 0
    assert f"database schema upgraded from none to {head()}" in capsys.readouterr().err
    assert cli_serve.run(args()) == 0  # current: nothing to say
    assert "upgraded" not in capsys.readouterr().err


def parse(*argv: str) -> argparse.Namespace:
    """``fleetmind serve ARGV`` as the CLI parses it."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_serve.register(sub, "serve", "serve")
    return parser.parse_args(["serve", *argv])


def args(**kw: Any) -> argparse.Namespace:
    ns = parse()
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
    for bad in ("0", "two", "257"):
        monkeypatch.setenv("FLEETMIND_WORKERS", bad)
        with pytest.raises(ConfigError, match="FLEETMIND_WORKERS|--workers"):
            cli_serve.run(args())
    # 10^20 workers began starting processes before the cap (uvicorn forks them one by one)
    monkeypatch.delenv("FLEETMIND_WORKERS")
    with pytest.raises(ConfigError, match=r"must lie in \[1, 256\], got 99999999999999999999"):
        cli_serve.run(args(workers=99999999999999999999))
    assert seen == [1, 3, 2]


@pytest.mark.parametrize(
    ("option", "value", "variable", "bad", "message"),
    [
        ("--rca-processes", "2", "FLEETMIND_RCA_PROCESSES", {"rca_processes": -1}, "FLEETMIND_"),
        (
            "--keep-warm",
            "1.5",
            "FLEETMIND_KEEP_WARM_S",
            {"keep_warm": -2.0},
            r"FLEETMIND_KEEP_WARM_S='-2\.0'.*greater than or equal",
        ),
    ],
)
def test_option_sets_its_variable(
    monkeypatch: pytest.MonkeyPatch,
    option: str,
    value: str,
    variable: str,
    bad: dict[str, Any],
    message: str,
) -> None:
    import os

    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv(variable, "0")  # restored after the test
    assert cli_serve.run(parse(option, value)) == 0
    assert os.environ[variable] == value
    with pytest.raises(ConfigError, match=message):
        cli_serve.run(args(**bad))


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


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        # inf passed every ge=0 check: a sleep or a database timeout would overflow at run time
        ("FLEETMIND_RETENTION_S", "inf", "finite number"),
        ("FLEETMIND_DB_STATEMENT_TIMEOUT_S", "inf", "finite number"),
        ("FLEETMIND_INCIDENT_RANK_INTERVAL_S", "inf", "finite number"),
        ("FLEETMIND_TELEMETRY_TIMEOUT_S", "inf", "finite number"),
        # URLs that only failed at the first scrape or the first notification
        ("FLEETMIND_PROMETHEUS_URL", "prometheus:9090", "http:// or https:// URL"),
        ("FLEETMIND_NOTIFY_ALERTMANAGER_URL", "not a url", "http:// or https:// URL"),
        ("FLEETMIND_NOTIFY_WEBHOOK_URL", "ftp://hooks.example", "http:// or https:// URL"),
        ("FLEETMIND_PUBLIC_URL", "fleetmind.example", "http:// or https:// URL"),
    ],
)
def test_infinite_durations_and_non_http_urls_are_refused_before_uvicorn(
    variable: str, value: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    started: list[bool] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(True))
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        cli_serve.run(args())
    if variable == "FLEETMIND_NOTIFY_WEBHOOK_URL":  # a chat webhook's path is its secret
        assert f"{variable} (value hidden)" in str(err.value) and value not in str(err.value)
    else:
        assert f"{variable}={value!r}" in str(err.value)
    assert words in str(err.value)
    assert started == []


def test_an_empty_notification_url_means_off() -> None:
    from fleetmind.serving.settings import Settings

    settings = Settings(notify_alertmanager_url="", notify_webhook_url=" ")
    assert settings.notify_alertmanager_url is None and settings.notify_webhook_url is None


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


def test_serve_logs_the_service_to_stderr_at_its_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    import uvicorn

    from fleetmind.serving.app import uvicorn_log_config
    from tests.serving_helpers import serve_logging

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw))
    monkeypatch.delenv("FLEETMIND_WORKERS", raising=False)
    assert cli_serve.run(parse("--log-level", "warning")) == 0
    config = seen[0]["log_config"]
    assert config == uvicorn_log_config("warning") and seen[0]["log_level"] == "warning"
    assert config["loggers"]["fleetmind"]["level"] == "WARNING"
    assert {"uvicorn", "uvicorn.access"} <= set(config["loggers"])  # uvicorn's own kept
    capsys.readouterr()
    with serve_logging("warning"):  # what uvicorn.run applies in each worker
        logging.getLogger("fleetmind.serving").info("not shown at --log-level warning")
        logging.getLogger("fleetmind.serving").warning("telemetry unavailable: test")
    err = capsys.readouterr().err
    assert "WARNING:  fleetmind: telemetry unavailable: test" in err and "not shown" not in err
