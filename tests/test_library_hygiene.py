"""Library calls leave the caller's process as they found it.

* ``rca_train.run(Args(...))`` gives back, on return and on an exception, the torch thread count
  (``Args.threads`` 1 stayed set for good), the warnings filters, Lightning's logger levels, MLflow's
  tracking URI and ``MLFLOW_TRACKING_URI``/``PL_GLOBAL_SEED``/``PL_SEED_WORKERS`` (set by
  ``mlflow.set_tracking_uri``, mlflow/tracking/_tracking_service/utils.py, and by Lightning's
  ``seed_everything``, lightning_fabric/utilities/seed.py) and torch's deterministic algorithms
  setting (Lightning's ``Trainer(deterministic=False)`` calls
  ``torch.use_deterministic_algorithms(False)``, lightning/pytorch/trainer/connectors/
  accelerator_connector.py ``_set_torch_flags``); ``rca_fit.fit`` its thread count.
* Loading a GAT, fitted GAT or placement model does not advance the caller's torch random sequence (the
  models were built with random initial weights, then overwritten).
* Scoring with a GAT model does not import Lightning (2.3 s and 85 MiB; its ``rich`` draws from
  Python's global ``random`` at import).
* A ``models:/`` URI with no tracking store configured is a one-line error, and MLflow's default
  ``sqlite:///mlflow.db`` is not created in the working directory. A store in a folder with a
  space is found at its percent-encoded URI (``%20``, as older releases of
  ``path_to_local_sqlite_uri`` in mlflow/utils/file_utils.py wrote it) and at its raw one (as
  MLflow 3.18 writes it), and a ``models:/`` URI needs only the registry store
  (``MLFLOW_REGISTRY_URI``), not the tracking one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fleetmind.data.errors import ModelLoadError
from fleetmind.training import rca_train

_ENV = ("MLFLOW_TRACKING_URI", "PL_GLOBAL_SEED", "PL_SEED_WORKERS")
_LOGGERS = ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric")


def _state() -> dict[str, object]:
    import mlflow

    return {
        "threads": torch.get_num_threads(),
        "filters": list(warnings.filters),
        "levels": {name: logging.getLogger(name).level for name in _LOGGERS},
        "env": {name: os.environ.get(name) for name in _ENV},
        "mlflow_uri": mlflow.get_tracking_uri(),
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
    }


@pytest.fixture
def own_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, object]]:
    """A caller's own settings, unlike a run's: 2 torch threads, a tracking URI of its own, no
    Lightning variables, logger levels NOTSET, deterministic algorithms on (warn only); returns
    their snapshot."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'own.db'}")
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    det = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True, warn_only=True)
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield _state()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det, warn_only=warn_only)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_a_failed_training_run_gives_the_process_state_back(
    own_state: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stop the run after seeding, quieting and setting the tracking URI: at the logger's setup
    monkeypatch.setattr(rca_train, "ready_store", lambda *a, **k: None)
    monkeypatch.setattr(rca_train, "_data_module", lambda args: (object(), None, 0.0))

    def logger(**kwargs: object) -> None:
        assert torch.get_num_threads() == 1  # the run itself runs on Args.threads
        assert os.environ["MLFLOW_TRACKING_URI"].endswith("run.db")
        raise RuntimeError("stop")

    monkeypatch.setattr(rca_train, "lightning_mlflow_logger", logger)
    args = rca_train.Args(
        data=str(tmp_path), out=str(tmp_path / "runs"), tracking_uri=f"sqlite:///{tmp_path}/run.db"
    )
    with pytest.raises(RuntimeError, match="stop"):
        rca_train.run(args)
    assert _state() == own_state


def test_a_training_run_gives_the_process_state_back(
    own_state: dict[str, object], tmp_path: Path
) -> None:
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=60)
    generate_dataset(data, DatasetSpec(n_incidents=20, seed=1, graphs=small, workers=1))
    args = rca_train.Args(
        data=str(data),
        epochs=1,
        out=str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path}/run.db",
        register=False,
        progress=False,
        hidden=8,
        heads=1,
        layers=2,
    )
    res = rca_train.run(args)
    assert res["epochs"] >= 1
    assert _state() == own_state
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ.get("PL_GLOBAL_SEED") is None


def test_rca_fit_gives_the_thread_count_back(tmp_path: Path) -> None:
    from fleetmind.data.synth_system import make_system
    from fleetmind.training.rca_fit import FitArgs, fit

    make_system(tmp_path / "shop", n_services=4, normal_rows=40, issues=1, seed=1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fit(
            FitArgs(
                scenario=str(tmp_path / "shop"),
                out=str(tmp_path / "m"),
                threads=1,
                epochs=1,
                incidents=8,
            )
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _draws(load: object = None) -> list[float]:
    torch.manual_seed(0)
    if callable(load):
        load()
    return torch.rand(3).tolist()


def test_loading_a_gat_model_keeps_the_callers_random_sequence() -> None:
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    assert _draws(lambda: GATAnalyzer.load(None)) == _draws()


def test_loading_a_torch_placement_model_keeps_the_callers_random_sequence(
    tmp_path: Path,
) -> None:
    from fleetmind.rl.export import PlacementActor, load_torch, save_torch

    torch.manual_seed(5)
    path = save_torch(PlacementActor(4, 3, 2, 8), tmp_path / "policy.pt")
    assert _draws(lambda: load_torch(path)) == _draws()


SCORE = """
import sys
import numpy as np
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
g = build_example_graph(clusters=1, hosts=2, gpus=4, services=2, pods=2, name="x")
storm = IncidentSimulator(g, AlertSimConfig()).simulate(np.random.default_rng(9), "b0")
gat = GATAnalyzer.load(None)
p = gat.score(g, storm["alerts"])
gat.find_root_causes(g, storm["alerts"], top_k=3)
assert abs(p.sum() - 1) < 1e-6
print(sorted(m for m in ("pytorch_lightning", "lightning", "rich") if m in sys.modules))
"""


def test_scoring_does_not_import_lightning() -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(
        [sys.executable, "-c", SCORE], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_registry_uri_without_a_store_creates_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    from fleetmind.rca.gat_analyzer import load_model

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)
    try:
        with pytest.raises(ModelLoadError) as err:
            load_model("models:/fleetmind-rca@champion")
    finally:
        mlflow.set_tracking_uri(None)
    text = str(err.value)
    assert f"no MLflow registry at {tmp_path / 'mlflow.db'}" in text, text
    assert "set MLFLOW_TRACKING_URI" in text and "\n" not in text
    assert list(tmp_path.iterdir()) == []


def test_loading_a_fitted_model_keeps_the_callers_random_sequence(tmp_path: Path) -> None:
    from fleetmind.data.synth_system import make_system
    from fleetmind.rca.fit_model import FittedGATAnalyzer, load_fit_model
    from fleetmind.training.rca_fit import FitArgs, fit

    make_system(tmp_path / "shop", n_services=4, normal_rows=40, issues=1, seed=1)
    fit(FitArgs(scenario=str(tmp_path / "shop"), out=str(tmp_path / "m"), epochs=1, incidents=8))
    assert _draws(lambda: load_fit_model(tmp_path / "m")) == _draws()
    assert _draws(lambda: FittedGATAnalyzer.load(tmp_path / "m")) == _draws()


def _register(folder: Path, *, encoded: bool = True) -> str:
    """Register the shipped GAT model as ``fleetmind-rca`` version 1 in a new SQLite store in
    ``folder``; returns the store's URI, its path percent-encoded (as older MLflow releases wrote it
    and as a URL-minded user types it) or raw (as MLflow 3.18's ``path_to_local_sqlite_uri``
    writes it). MLflow opens the same file from either spelling."""
    from urllib.parse import quote

    import mlflow

    from fleetmind.data.paths import MODELS_DIR

    folder.mkdir(parents=True)
    path = str(folder / "mlflow.db")
    uri = "sqlite:///" + (quote(path) if encoded else path)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model("fleetmind-rca")
    client.create_model_version("fleetmind-rca", (MODELS_DIR / "rca").as_uri())
    assert (folder / "mlflow.db").is_file()
    return uri


@pytest.fixture
def no_mlflow_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No tracking or registry URI set, the working directory an empty ``tmp_path/cwd``."""
    import mlflow

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)
    yield tmp_path / "cwd"
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)


@pytest.mark.parametrize("encoded", [True, False], ids=["percent-encoded", "raw"])
def test_a_store_in_a_folder_with_a_space_is_found(
    no_mlflow_uris: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoded: bool
) -> None:
    from fleetmind.rca.gat_analyzer import load_model

    uri = _register(tmp_path / "my models", encoded=encoded)
    assert ("%20" in uri) is encoded
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _, meta, version = load_model("models:/fleetmind-rca/1")
    assert version == "fleetmind-rca/1" and meta["format"]


def test_a_models_uri_needs_only_the_registry_store(
    no_mlflow_uris: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.rca.gat_analyzer import load_model

    monkeypatch.setenv("MLFLOW_REGISTRY_URI", _register(tmp_path / "registry"))
    _, _, version = load_model("models:/fleetmind-rca/1")
    assert version == "fleetmind-rca/1"


def test_a_runs_uri_without_a_tracking_store_names_the_tracking_uri(
    no_mlflow_uris: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.rca.gat_analyzer import load_model

    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    with pytest.raises(ModelLoadError) as err:
        load_model("runs:/0123456789abcdef/model")
    assert f"no MLflow registry at {no_mlflow_uris / 'mlflow.db'}" in str(err.value)
    assert str(err.value).endswith("set MLFLOW_TRACKING_URI")
    assert list(no_mlflow_uris.iterdir()) == []


def test_a_models_uri_with_a_missing_registry_store_names_the_registry_uri(
    no_mlflow_uris: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.rca.gat_analyzer import load_model

    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'gone.db'}")
    with pytest.raises(ModelLoadError) as err:
        load_model("models:/fleetmind-rca/1")
    assert f"no MLflow registry at {tmp_path / 'gone.db'}" in str(err.value)
    assert str(err.value).endswith("set MLFLOW_REGISTRY_URI")
    assert not (tmp_path / "gone.db").exists()
