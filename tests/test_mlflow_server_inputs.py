"""What the model loaders and the RCA trainer make of an MLflow tracking server: passwords in its
URI, its artifact proxy's ``mlflow-artifacts:/`` sources, a registry alias that moves, answers that
time out or are 5xx, versions that hold something else, and the downloaded copies.

Found on 2026-12-05 against ``mlflow server`` 3.17.2. The server here is a stand-in for its
artifact proxy (``mlflow server --serve-artifacts``): ``GET /api/2.0/mlflow-artifacts/artifacts?
path=...`` lists a folder and ``GET /api/2.0/mlflow-artifacts/artifacts/<path>`` sends a file, the
two calls of ``mlflow/store/artifact/http_artifact_repo.py`` (``list_artifacts``,
``_download_file``). The registry tests use an embedded ``sqlite:///`` store.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import mlflow
import numpy as np
import pytest

from fleetmind.data.errors import ModelLoadError
from fleetmind.data.mlflow_store import BOUNDED, is_mlflow_uri, reason, safe_uri
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.registry import ModelRegistry
from fleetmind.training import rca_train

PASSWORD = "S3cretPassw0rd-XYZ"
PREFIX = "/api/2.0/mlflow-artifacts/artifacts"


class _Artifacts(BaseHTTPRequestHandler):
    """The artifact proxy's two GETs over ``server.root``; ``server.mode`` breaks it: ``404``
    (``model.pt`` listed but gone), ``500`` (every answer), ``hang`` (no answer)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        srv: Any = self.server
        if srv.mode == "hang":
            time.sleep(3)
            return
        url = urlsplit(self.path)
        if srv.mode == "500":
            return self._send(500, b'{"error_code": "INTERNAL_ERROR"}')
        if url.path == PREFIX:  # list: names relative to the folder asked for
            files = [
                {"path": f.name, "is_dir": False, "file_size": f.stat().st_size}
                for f in sorted(srv.root.iterdir())
            ]
            return self._send(200, json.dumps({"files": files}).encode())
        name = url.path.rsplit("/", 1)[-1]
        if srv.mode == "404" and name == "model.pt":
            return self._send(404, b"")
        self._send(200, (srv.root / name).read_bytes())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def artifact_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in server, as ``MLFLOW_TRACKING_URI`` with a user and password in it; serves the
    released RCA artifact (``server.root``) until a test points it elsewhere."""
    srv: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Artifacts)
    srv.daemon_threads = True
    srv.root, srv.mode = MODELS_DIR / "rca", "ok"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    for k in BOUNDED:
        monkeypatch.setenv(k, {"MLFLOW_HTTP_REQUEST_TIMEOUT": "1"}.get(k, "0"))
    srv.port = srv.server_address[1]
    uri = f"http://admin:{PASSWORD}@127.0.0.1:{srv.port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)  # process-wide: an earlier test's URI would win over the env
    try:
        yield srv
    finally:
        mlflow.set_tracking_uri(None)
        srv.shutdown()
        srv.server_close()


SOURCE = "mlflow-artifacts:/1/models/m-0123/artifacts"
"""What ``MlflowClient.get_model_version_download_uri`` gives for a version logged through a
server that proxies artifacts (``mlflow/server/handlers.py``: the ``mlflow-artifacts:`` scheme)."""


def test_mlflow_artifacts_sources_load_in_both_loaders(artifact_server: Any) -> None:
    """A ``mlflow-artifacts:/`` source is an MLflow URI to both loaders (before: the GAT loader
    took it for a missing folder, the placement loader for a path it then mangled); a local path,
    a Windows drive letter included, stays local."""
    gat = GATAnalyzer.load(SOURCE)
    assert gat.version == json.loads((MODELS_DIR / "rca" / "config.json").read_text())["version"]
    artifact_server.root = MODELS_DIR / "placement"
    policy = load_ppo_policy(SOURCE)
    assert policy.source == f"{SOURCE}/policy.onnx"
    assert all(map(is_mlflow_uri, ["models:/m@a", "runs:/r/model", SOURCE, "file:///tmp/x"]))
    assert not any(map(is_mlflow_uri, ["models/rca", "C:/models/rca", "c:\\m", "/tmp/a:b"]))


def test_a_password_in_the_tracking_uri_reaches_no_reason(artifact_server: Any) -> None:
    """``http://user:password@host`` is how MLflow takes basic-auth credentials
    (``mlflow/utils/rest_utils.py``; the docs' "Authenticating to MLflow" page), and MLflow's
    download error names the artifact URL with them: ``The following failures occurred while
    downloading one or more artifacts from <url>:`` and, on the next lines, the cause (before:
    the first line alone, password and all, in ``fallback_reason`` and the service's log)."""
    artifact_server.mode = "404"
    for load in (GATAnalyzer.load, load_ppo_policy):
        with pytest.raises(ModelLoadError) as exc:
            load(SOURCE)
        msg = str(exc.value)
        assert PASSWORD not in msg and "http://***@127.0.0.1" in msg, msg
        assert "model.pt: " in msg and "404" in msg and "\n" not in msg, msg
    reg = ModelRegistry(SOURCE, "heuristic:builtin-bestfit")
    why = reg.load().rca.fallback_reason or ""
    assert "404" in why and PASSWORD not in why
    assert safe_uri(f"postgresql://fm:{PASSWORD}@db/x and s3://k@b/p") == (
        "postgresql://***@db/x and s3://***@b/p"
    )


@pytest.mark.parametrize(
    "mode,says",
    [
        (
            "hang",
            "the server did not answer in time (MLFLOW_HTTP_REQUEST_TIMEOUT sets the seconds)",
        ),
        ("500", "the server answered with HTTP 500 on every try (MLFLOW_HTTP_REQUEST_MAX_RETRIES"),
    ],
)
def test_timeouts_and_5xx_are_not_connection_failures(
    artifact_server: Any, mode: str, says: str
) -> None:
    """urllib3 reports both as ``Max retries exceeded ... (Caused by ReadTimeoutError(...Read
    timed out...))`` / ``(Caused by ResponseError('too many 500 error responses'))``, the retry
    MLflow sets up in ``mlflow/utils/request_utils.py`` (``status_forcelist`` 429, 500, 502,
    503, 504); before, both read "the server did not answer (connection failed; ...)"."""
    artifact_server.mode = mode
    with pytest.raises(ModelLoadError) as exc:
        GATAnalyzer.load(SOURCE)
    assert says in str(exc.value), str(exc.value)
    assert PASSWORD not in str(exc.value)
    assert reason(RuntimeError("first:\n##### File a #####\n" + "x" * 999)).endswith("x...")


# ---------------------------------------------------------------------- an embedded registry
def _register(name: str, folder: Path) -> str:
    """Log ``folder`` as a run's ``model`` and register it as a new version of ``name``."""
    client = mlflow.MlflowClient()
    # an experiment of this store by id: an earlier test's active experiment is process-wide
    exp = client.get_experiment_by_name("fleetmind-test")
    exp_id = exp.experiment_id if exp else client.create_experiment("fleetmind-test")
    with mlflow.start_run(experiment_id=exp_id) as run:
        mlflow.log_artifacts(str(folder), "model")
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    mv = client.create_model_version(name, f"{run.info.artifact_uri}/model", run.info.run_id)
    return str(mv.version)


def _gat_copy(tmp_path: Path, version: str) -> Path:
    out = tmp_path / f"src-{version}"
    shutil.copytree(MODELS_DIR / "rca", out)
    cfg = json.loads((out / "config.json").read_text())
    # the label alone no longer tells copies apart (a folder's version is its weights' hash):
    # a marker the loader keeps does
    (out / "config.json").write_text(json.dumps({**cfg, "version": version, "copy": version}))
    return out


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An embedded registry in ``tmp_path``; temporary files go to ``tmp_path / "tmp"`` (yielded)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    try:
        yield scratch
    finally:
        mlflow.set_tracking_uri(None)


def test_an_alias_is_resolved_once(
    registry: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``download_artifacts("models:/m@alias")`` resolves the alias again
    (``mlflow/store/artifact/models_artifact_repo.py``); a promotion between the loader's own
    lookup and the download made it report version 2 and serve version 1's weights. Now it
    downloads ``models:/m/<the version it looked up>``; the placement loader too, and names it."""
    client = mlflow.MlflowClient()
    for v in ("1", "2"):
        assert _register("fleetmind-rca", _gat_copy(tmp_path, f"gat-v{v}")) == v
    client.set_registered_model_alias("fleetmind-rca", "champion", "2")
    real = mlflow.MlflowClient.get_model_version_by_alias

    def racing(self: Any, name: str, alias: str) -> Any:
        mv = real(self, name, alias)
        client.set_registered_model_alias(name, alias, "1")  # a promotion meanwhile
        return mv

    monkeypatch.setattr(mlflow.MlflowClient, "get_model_version_by_alias", racing)
    with caplog.at_level(logging.WARNING, logger="fleetmind.rca"):
        gat = GATAnalyzer.load("models:/fleetmind-rca@champion")
    assert (gat.version, gat.meta["copy"]) == ("fleetmind-rca/2", "gat-v2")
    # the label 'gat-v2' is not the weights' hash: the warning names the model, not the temporary
    # download folder, and the version it is served as
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "fleetmind.rca"]
    assert (
        warning.startswith("models:/fleetmind-rca/2: ") and "served as fleetmind-rca/2" in warning
    )
    _register("fleetmind-placement", MODELS_DIR / "placement")
    client.set_registered_model_alias("fleetmind-placement", "champion", "1")
    policy = load_ppo_policy("models:/fleetmind-placement@champion")
    assert policy.source == "models:/fleetmind-placement/1/policy.onnx"


def test_loads_leave_no_downloaded_copy(
    artifact_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``download_artifacts`` without ``dst_path`` downloads a remote model into a new temporary
    folder that the caller owns (``ArtifactRepository.download_artifacts``' docstring,
    ``mlflow/store/artifact/artifact_repo.py``: ``create_tmp_dir()``); every load from a server
    (each service reload) left one in /tmp. The loaders now download into a folder they remove
    once the model is in memory: the ONNX session still answers afterwards."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    gat = GATAnalyzer.load(SOURCE)
    artifact_server.root = MODELS_DIR / "placement"
    policy = load_ppo_policy(SOURCE)
    torch_policy = load_ppo_policy(SOURCE, backend="torch")
    assert list(scratch.iterdir()) == []
    assert gat.meta["version"].startswith("gat-")
    k = policy.builder.n_candidates
    obs, mask = np.zeros(policy.builder.obs_dim, np.float32), np.ones(k, bool)
    assert int(policy.actor.predict(obs, mask)) == int(torch_policy.actor.predict(obs, mask))


def test_a_foreign_version_names_the_version_and_what_it_holds(registry: Path, tmp_path) -> None:
    """A version of ``fleetmind-rca`` that holds someone else's model (an sklearn ``MLmodel`` +
    ``model.pkl``): the reason named only the temporary folder (``/tmp/tmpXXXX is not a GAT
    artifact``)."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "MLmodel").write_text("flavors: {sklearn: {}}\n")
    (foreign / "model.pkl").write_bytes(b"\x80\x04N.")
    _register("fleetmind-rca", foreign)
    with pytest.raises(ModelLoadError) as exc:
        GATAnalyzer.load("models:/fleetmind-rca/1")
    # older MLflow releases add their own ``registered_model_meta`` (3.18 does not)
    assert re.fullmatch(
        re.escape(
            "MLflow model models:/fleetmind-rca/1 is not a GAT artifact (no config.json + model.pt; "
            "it holds MLmodel, model.pkl"
        )
        + r"(, registered_model_meta)?\)",
        str(exc.value),
    ), str(exc.value)
    broken = _gat_copy(tmp_path, "gat-v2")
    (broken / "model.pt").write_bytes(b"not torch")
    _register("fleetmind-rca", broken)
    with pytest.raises(ModelLoadError, match=r"^MLflow model models:/fleetmind-rca/2/model\.pt is"):
        GATAnalyzer.load("models:/fleetmind-rca/2")


# ---------------------------------------------------------------------- rca train's params
class _Stop(Exception):
    pass


def test_rca_train_logs_no_password_as_a_param(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rca train`` logs its arguments as MLflow params, which everyone who can read the
    experiment sees (``MlflowClient.get_run(...).data.params``): the ``--feedback-db`` URL went in
    with its password, the tracking URI with its user and password."""
    from types import SimpleNamespace

    from pytorch_lightning.loggers import MLFlowLogger

    from fleetmind.data.rca_gen.faults import FAULT_TYPES

    seen: dict[str, Any] = {}

    def log_hyperparams(self: Any, params: dict[str, Any]) -> None:
        seen.update(params)
        raise _Stop

    info = {"n_train": 1}
    dm = SimpleNamespace(fault_types=list(FAULT_TYPES), info=info)
    monkeypatch.setattr(rca_train, "_check_and_seed", lambda args: None)
    monkeypatch.setattr(rca_train, "ready_store", lambda uri, **kw: None)
    monkeypatch.setattr(rca_train, "_data_module", lambda args: (dm, None, 0.0))
    monkeypatch.setattr(MLFlowLogger, "log_hyperparams", log_hyperparams)
    args = rca_train.Args(
        data="d",
        tracking_uri=f"http://admin:{PASSWORD}@127.0.0.1:1",
        feedback_db=f"postgresql+psycopg://fm:{PASSWORD}@db.example:5432/fleetmind",
    )
    try:
        with pytest.raises(_Stop):
            rca_train.run(replace(args))
    finally:
        mlflow.set_tracking_uri(None)
    assert PASSWORD not in json.dumps(seen, default=str)
    assert seen["feedback_db"] == "postgresql+psycopg://fm:***@db.example:5432/fleetmind"
    assert seen["tracking_uri"] == "http://***@127.0.0.1:1"


def test_placement_runs_log_no_tracking_password() -> None:
    """The placement recipes log every setting as an MLflow param: a tracking URI with
    ``user:password@`` showed its password to everyone who can read the run."""
    from dataclasses import dataclass

    from fleetmind.training.recipes.tracking import run_params

    @dataclass
    class _Args:
        mode: str = "fgd"
        tracking_uri: str = "http://admin:S3cret@mlflow.example:5000"

    params = run_params(_Args())
    assert "S3cret" not in str(params) and params["tracking_uri"].endswith("@mlflow.example:5000")
