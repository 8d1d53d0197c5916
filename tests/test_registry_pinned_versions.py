"""Registry versions across workers, reloads that leave a model on its fallback, and what
``/api/v1/models`` and ``/readyz`` say about them.

* With ``--workers N`` the worker that gets ``POST /api/v1/models/reload`` resolves
  ``models:/<name>@<alias>`` once; the others used to resolve the alias again when they caught up,
  so workers served different versions when the alias moved in between. The reload generation now
  records the versions loaded (``models:/<name>/<version>``, as
  :func:`fleetmind.data.mlflow_store.download` pins them) and the others load those.
* A reload that fails while a model is already on its fallback answered 200 with
  ``reload_error`` null; it is the documented 409 with the reason.
* ``/readyz`` listed no warning while a model was on its fallback.
* A placement model from the registry showed its metadata version, never ``fleetmind-placement/N``
  (the GAT shows ``fleetmind-rca/N``).

Upstream references: MLflow model registry aliases ("Deploy and organize models with aliases and
tags": an alias is a mutable pointer to one version; ``models:/<name>@<alias>`` resolves it at
load time); uvicorn's ``--workers`` starts separate processes that share only the database.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from fleetmind.data.errors import ModelLoadError
from fleetmind.rca.base import BaseAnalyzer, RCAResult
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings

REPO = Path(__file__).resolve().parents[1]
ALIAS = "models:/fleetmind-rca@champion"


class FakeGAT(BaseAnalyzer):
    name = "gat"

    def __init__(self, version: str) -> None:
        super().__init__(None)
        self._version = version

    @property
    def version(self) -> str:
        return self._version

    def find_root_causes(self, graph, alerts, top_k=None):  # noqa: ANN001, ANN201
        return RCAResult([], "gat", self._version)


@pytest.fixture
def registry_store(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fake ``rca.gat_analyzer`` over a fake registry: ``models:/fleetmind-rca@champion``
    resolves to ``state['champion']`` at each load, ``models:/fleetmind-rca/<n>`` to ``n``."""
    state: dict = {"champion": 1, "refs": [], "fail": None}

    class GATAnalyzer:
        @staticmethod
        def load(ref):  # noqa: ANN001, ANN205
            state["refs"].append(ref)
            if state["fail"]:
                raise ModelLoadError(state["fail"])
            n = state["champion"] if ref == ALIAS else int(str(ref).rsplit("/", 1)[1])
            return FakeGAT(f"fleetmind-rca/{n}")

    mod = types.ModuleType("fleetmind.rca.gat_analyzer")
    mod.GATAnalyzer = GATAnalyzer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fleetmind.rca.gat_analyzer", mod)
    return state


def _worker(db: Database) -> ModelRegistry:
    reg = ModelRegistry(ALIAS, "heuristic:builtin-bestfit")
    reg.load()
    reg.follow(db, interval_s=3600.0)
    return reg


def test_followers_load_the_version_the_reload_resolved(
    registry_store: dict, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{tmp_path}/w.db")
    db.migrate()
    a, b = _worker(db), _worker(db)
    registry_store["champion"] = 2
    generation, models = a.request_reload()
    assert models.rca.version == "fleetmind-rca/2"
    registry_store["champion"] = 3  # the alias moves before B catches up
    registry_store["refs"].clear()
    assert b.sync() is not None
    assert registry_store["refs"] == ["models:/fleetmind-rca/2"]  # not the alias again
    assert b.current.rca.version == a.current.rca.version == "fleetmind-rca/2"
    assert b.current.rca.source == ALIAS  # the configured reference, as before
    assert b.reload_generation == generation == 1
    # a process whose reference differs loads its own, not another's pin
    other = ModelRegistry("models:/fleetmind-rca@staging", "heuristic:builtin-bestfit")
    other.load()
    other.follow(db, interval_s=3600.0)
    assert a.request_reload()[0] == 2
    registry_store["refs"].clear()
    other.sync()
    assert registry_store["refs"] == ["models:/fleetmind-rca@staging"]
    db.dispose()


def test_a_request_counted_by_a_release_before_pins_loads_no_stale_pin(
    registry_store: dict, tmp_path: Path
) -> None:
    """During a rolling upgrade a process of a release before revision 0008 counts a reload by
    updating ``generation`` and ``requested_ts`` only (its upsert, emulated here): the pins of
    the earlier request stayed in the row and the followers loaded that old version. The pins now
    carry the generation they were recorded for, and pins of another generation are ignored."""
    from sqlalchemy.dialects.sqlite import insert

    from fleetmind.serving.db import model_reloads

    db = Database(f"sqlite:///{tmp_path}/w.db")
    db.migrate()
    a, b = _worker(db), _worker(db)
    registry_store["champion"] = 2
    assert a.request_reload()[0] == 1
    assert db.model_reload_record()[2] == {
        "rca": {"ref": ALIAS, "pinned": "models:/fleetmind-rca/2"}
    }
    assert b.sync() is not None and b.current.rca.version == "fleetmind-rca/2"
    registry_store["champion"] = 3  # the alias moves; an old-release process gets the request
    old = insert(model_reloads).values(id=1, generation=1, requested_ts=2e9)
    old = old.on_conflict_do_update(
        index_elements=["id"],
        set_={"generation": model_reloads.c.generation + 1, "requested_ts": 2e9},
    )
    with db.write() as conn:
        conn.execute(old)
    assert db.model_reload_record() == (2, 2e9, {})
    registry_store["refs"].clear()
    assert b.sync() is not None
    assert registry_store["refs"] == [ALIAS]  # resolved again, not the pin of generation 1
    assert b.current.rca.version == "fleetmind-rca/3"
    db.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_pins_are_read_only_for_the_generation_they_were_recorded_for(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``Database.request_model_reload`` stores the generation with the pins (one transaction);
    ``model_reload_record`` gives ``{}`` for pins of another generation, on both databases."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/w.db"
    else:
        pg = request.getfixturevalue("pg")
        pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        url = pg.url
    db = Database(url)
    db.migrate()
    pins = {"rca": {"ref": ALIAS, "pinned": "models:/fleetmind-rca/2"}}
    assert db.request_model_reload(10.0, pins) == 1
    assert db.model_reload_record() == (1, 10.0, pins)
    with db.write() as conn:  # a release before pins counts a request: generation only
        conn.execute(
            text("UPDATE model_reloads SET generation = generation + 1, requested_ts = 20")
        )
    assert db.model_reload_record() == (2, 20.0, {})
    assert db.request_model_reload(30.0, None) == 3
    assert db.model_reload_record() == (3, 30.0, {})
    assert db.request_model_reload(40.0, pins) == 4
    assert db.model_reload_record() == (4, 40.0, pins)
    db.dispose()


def test_a_reload_that_leaves_a_model_on_its_fallback_is_a_409(
    registry_store: dict, tmp_path: Path
) -> None:
    registry_store["fail"] = "GAT model not found: /srv/models/rca"
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/r.db",
        rca_model=ALIAS,
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        assert c.get("/api/v1/models").json()["rca"]["fallback_reason"] is not None
        r = c.post("/api/v1/models/reload")
        assert r.status_code == 409, r.text
        assert "rca stays on its fallback" in r.json()["detail"]
        assert "GAT model not found" in r.json()["detail"]
        got = c.get("/api/v1/models").json()
        assert "GAT model not found" in (got["reload_error"] or "")
        ready = c.get("/readyz")
        assert ready.status_code == 200  # readiness unchanged
        (warning,) = ready.json()["warnings"]
        assert warning.startswith("rca: serving the fallback deepest, because the GAT failed")
        assert "/srv/models" not in warning  # /readyz needs no token: no paths in it
        registry_store["fail"] = None  # the model is back: 200, no warning
        assert c.post("/api/v1/models/reload").status_code == 200
        assert c.get("/api/v1/models").json()["reload_error"] is None
        assert c.get("/readyz").json()["warnings"] == []


def test_a_reload_still_on_the_fallback_raises_with_the_reason(registry_store: dict) -> None:
    registry_store["fail"] = "GAT model not found: /srv/models/rca"
    reg = ModelRegistry(ALIAS, "heuristic:builtin-bestfit")
    assert reg.load().rca.fallback_reason is not None
    with pytest.raises(ModelLoadError, match="rca stays on its fallback deepest: GAT model not"):
        reg.reload()


def test_the_readyz_warning_names_each_fallback(registry_store: dict) -> None:
    from fleetmind.serving.registry import fallback_warnings

    registry_store["fail"] = "x"
    models = ModelRegistry(ALIAS, "heuristic:builtin-bestfit").load()
    assert [w.split(",")[0] for w in fallback_warnings(models)] == [
        "rca: serving the fallback deepest"
    ]


def test_a_placement_model_from_the_registry_shows_its_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.rl import policy_adapter

    def download(uri: str, dst: str) -> tuple[Path, str, str]:
        local = Path(dst) / "model" / "artifacts" / "placement"
        local.mkdir(parents=True)
        for f in ("policy.onnx", "metadata.json"):
            shutil.copy(REPO / "models" / "placement" / f, local / f)
        return Path(dst) / "model", "models:/fleetmind-placement/4", "fleetmind-placement/4"

    monkeypatch.setattr(policy_adapter, "download", download)
    policy = policy_adapter.load_ppo_policy("models:/fleetmind-placement@champion")
    assert policy.version == "fleetmind-placement/4"
    assert policy.metadata["version"].startswith("GpuPlacement-v0__")  # still there
    models = ModelRegistry(
        "baseline:upstream-coverage", "models:/fleetmind-placement@champion"
    ).load()
    assert models.placement.version == "fleetmind-placement/4"
    assert models.placement.method == "ppo"


def test_readyz_warns_while_a_model_is_on_its_fallback(
    registry_store: dict, tmp_path: Path
) -> None:
    registry_store["fail"] = "GAT model not found: /srv/models/rca"
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/h.db",
        rca_model=ALIAS,
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        r = c.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert [w.split(",")[0] for w in r.json()["warnings"]] == ["rca: serving the fallback deepest"]
