"""Tracking stores that cannot be used: a server that is down, a file that is not a database, a
scheme MLflow does not take. Each is one line and status 2 at once, before any work, and the model
loaders give up within MLflow retries bounded by ``fleetmind.data.mlflow_store``.

Before 2026-12-04 each of these was a traceback (``fleetmind rca train`` after loading its data),
and a ``models:/`` reference against a server that was down sat silent for 4 min 12 s under
MLflow's default of 7 retries with backoff factor 2 (``mlflow/environment_variables.py``:
``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import mlflow
import pytest

from fleetmind import cli
from fleetmind.data import mlflow_store
from fleetmind.data.errors import ConfigError, ModelLoadError
from fleetmind.data.mlflow_store import BOUNDED, bounded_requests, reason
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.training.tracking import ready_store
from tests.mlflow_helpers import RCA_TRAIN_ARGV, SCHED_TRAIN_ARGV


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


@pytest.fixture
def no_http_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in BOUNDED:
        monkeypatch.delenv(k, raising=False)


def test_bounded_requests_sets_only_what_the_user_left_unset(
    no_http_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with bounded_requests():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "5"
        with bounded_requests():  # nested: the inner exit keeps the outer block's setting
            pass
        assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    assert "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR" not in os.environ
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "5"
    assert mlflow_store._depth == 0


def test_a_server_that_is_down_is_one_line_naming_the_store(no_http_settings: None) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ConfigError) as exc:
        ready_store(uri)
    msg = str(exc.value)
    assert msg.startswith(f"MLflow tracking store {uri} cannot be used: the server did not answer")
    assert "Connection refused" in msg and "\n" not in msg and "HTTPConnectionPool" not in msg
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # given back


def test_a_file_that_is_not_a_database_and_an_unknown_scheme(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not a database\n")
    with pytest.raises(ConfigError, match=r"cannot be used: file is not a database \(set"):
        ready_store(f"sqlite:///{bad}")
    with pytest.raises(ConfigError, match=r"foo://bar cannot be used: .*unsupported URI"):
        ready_store("foo://bar")
    ready_store(f"sqlite:///{tmp_path / 'new' / 'ok.db'}")  # a new store is still made
    assert (tmp_path / "new" / "ok.db").is_file()


@pytest.mark.parametrize(
    "argv,where",
    [
        (  # the store comes before the data is read (an empty folder: no dataset in it)
            RCA_TRAIN_ARGV,
            "MLFLOW_TRACKING_URI or --tracking-uri",
        ),
        (  # sched train has no --tracking-uri (before 2026-12-05 its error named one)
            SCHED_TRAIN_ARGV,
            "MLFLOW_TRACKING_URI",
        ),
    ],
    ids=["rca-train", "sched-train"],
)
def test_training_stops_at_once_on_a_store_it_cannot_use(
    argv: list[str],
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty-dataset").mkdir()
    bad = tmp_path / "bad.db"
    bad.write_text("not a database\n")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{bad}")
    assert cli.main([*argv, "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == (
        f"fleetmind: error: MLflow tracking store sqlite:///{bad} cannot be used: file is not a "
        f"database (set {where}; the default is sqlite:///mlflow.db)"
    )
    assert not (tmp_path / "runs").exists()  # nothing was trained or written


def test_model_loaders_bound_mlflows_retries_and_say_why(
    no_http_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow's own client against a closed port: its real error, not one written here
    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    seen: list[str | None] = []
    real = mlflow.artifacts.download_artifacts

    def download(artifact_uri: str, dst_path: str | None = None) -> str:
        seen.append(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES"))
        return real(artifact_uri=artifact_uri, dst_path=dst_path)

    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", download)
    try:
        with pytest.raises(ModelLoadError) as gat:
            GATAnalyzer.load("runs:/abc/model")
        with pytest.raises(ModelLoadError) as ppo:
            load_ppo_policy("runs:/abc/model")
    finally:
        mlflow.set_tracking_uri(None)  # the process-wide URI goes back to the environment's
    assert seen == ["2", "2"]
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    for exc in (gat, ppo):
        assert str(exc.value).endswith(
            "the server did not answer (Connection refused; MLFLOW_HTTP_REQUEST_MAX_RETRIES sets "
            "how often to retry)"
        ), str(exc.value)


def test_reason_keeps_first_lines_and_drops_sql() -> None:
    assert reason(RuntimeError("one\ntwo")) == "one"
    assert reason(RuntimeError("")) == "RuntimeError"
    sql = (
        "(sqlite3.DatabaseError) file is not a database\n[SQL: SELECT name FROM sqlite_master]\n"
        "(Background on this error at: https://sqlalche.me/e/21/4xp6)"
    )
    assert reason(RuntimeError(sql)) == "file is not a database"


def test_a_password_in_the_tracking_uri_is_masked_where_the_store_is_named(
    no_http_settings: None,
) -> None:
    """MLflow takes basic-auth credentials in the tracking URI (``http://user:password@host``,
    ``mlflow/utils/rest_utils.py``), and urllib3's retry report names the URL it asked; the
    store's error printed both (before 2026-12-05)."""
    uri = f"http://admin:S3cret@127.0.0.1:{_closed_port()}"
    with pytest.raises(ConfigError) as exc:
        ready_store(uri)
    msg = str(exc.value)
    assert "S3cret" not in msg and msg.startswith("MLflow tracking store http://***@127.0.0.1:")
    err = RuntimeError(f"HTTPConnectionPool: Max retries exceeded with url: {uri}/api")
    assert "S3cret" not in reason(err)
    assert (
        reason(RuntimeError(f"boom at {uri}/x\nmore"))
        == f"boom at http://***@{uri.split('@')[1]}/x"
    )


def test_reason_tells_a_timeout_and_5xx_from_a_refused_connection() -> None:
    """urllib3 wraps a read timeout and too many 5xx answers in the same ``Max retries exceeded``
    report as a refused connection (``urllib3/connectionpool.py``: ``MaxRetryError(reason=
    ReadTimeoutError / ResponseError)``, the retry ``mlflow/utils/request_utils.py`` sets up);
    both read "the server did not answer (connection failed; ...)" before 2026-12-05."""
    from urllib3.exceptions import MaxRetryError, ReadTimeoutError, ResponseError

    def wrapped(cause: Exception) -> str:  # MLflow's message around urllib3's (requests keeps it)
        err = MaxRetryError(None, "/api/2.0/mlflow/experiments/search", cause)  # type: ignore[arg-type]
        return reason(RuntimeError(f"API request to http://h/api failed with exception {err}"))

    timeout = ReadTimeoutError(None, "/api", "Read timed out. (read timeout=2)")  # type: ignore[arg-type]
    assert wrapped(timeout) == (
        "the server did not answer in time (MLFLOW_HTTP_REQUEST_TIMEOUT sets the seconds)"
    )
    five = ResponseError(ResponseError.SPECIFIC_ERROR.format(status_code=503))
    assert wrapped(five).startswith("the server answered with HTTP 503 on every try")
