"""Model registry: loading through the peer loaders, fallbacks with reasons, atomic reload that
never downgrades a served model. The loaders are replaced by fakes (no torch, no artifacts)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert

from fleetmind.data.errors import ModelLoadError
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.serving.app import create_app
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings


class FakeGAT(BaseAnalyzer):
    name = "gat"

    def __init__(self, version: str) -> None:
        super().__init__(None)
        self._version = version

    @property
    def version(self) -> str:
        return self._version

    def find_root_causes(self, graph, alerts, top_k=None):  # noqa: ANN001, ANN201
        n = graph.nodes[0]
        return RCAResult(
            [RankedCause(n.id, n.kind, n.cluster, 1.0, "gpu_xid", (n.id,))], "gat", self._version
        )


@pytest.fixture
def gat_loader(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fake ``rca.gat_analyzer`` whose ``GATAnalyzer.load`` serves ``state['version']``."""
    state: dict = {"version": "fleetmind-rca/1", "fail": None, "refs": []}

    class GATAnalyzer:
        @staticmethod
        def load(ref):  # noqa: ANN001, ANN205
            state["refs"].append(ref)
            if state["fail"]:
                raise ModelLoadError(state["fail"])
            return FakeGAT(state["version"])

    mod = types.ModuleType("fleetmind.rca.gat_analyzer")
    mod.GATAnalyzer = GATAnalyzer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fleetmind.rca.gat_analyzer", mod)
    return state


def test_loads_model_by_uri_and_reloads_champion(gat_loader: dict) -> None:
    reg = ModelRegistry("models:/fleetmind-rca@champion", "heuristic:builtin-bestfit")
    first = reg.load()
    assert first.rca.method == "gat" and first.rca.version == "fleetmind-rca/1"
    assert first.rca.fallback_reason is None and gat_loader["refs"] == [
        "models:/fleetmind-rca@champion"
    ]
    gat_loader["version"] = "fleetmind-rca/2"  # the champion alias moved
    second = reg.reload()
    assert second.generation == 2 and reg.current.rca.version == "fleetmind-rca/2"
    assert first.rca.version == "fleetmind-rca/1"  # the old set is untouched (requests in flight)


def test_failed_reload_keeps_served_model(gat_loader: dict) -> None:
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")
    reg.load()
    gat_loader["fail"] = "GAT model not found: models/rca"
    with pytest.raises(ModelLoadError, match="kept the served models"):
        reg.reload()
    assert reg.current.rca.method == "gat" and reg.current.generation == 1


def test_a_failed_reload_logs_what_it_kept_not_a_fallback(
    gat_loader: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload that cannot load the model keeps the one served (the 409 of
    ``POST /api/v1/models/reload``); its log said "RCA falls back to deepest", which it did not.
    The fallback is logged when one is served (the first load), the kept model on a failed reload."""
    reg = ModelRegistry("models:/fleetmind-rca@champion", "heuristic:builtin-bestfit")
    reg.load()
    caplog.clear()  # the fake GAT's "no fitted temperature" warning of the first load
    gat_loader["fail"] = "cannot load GAT model 'models:/fleetmind-rca@champion' from MLflow: x"
    with caplog.at_level("WARNING", logger="fleetmind.serving"):
        with pytest.raises(ModelLoadError):
            reg.reload()
        assert [r.getMessage() for r in caplog.records] == [
            "RCA reload failed, kept gat fleetmind-rca/1: GAT model not loaded: cannot load GAT "
            "model 'models:/fleetmind-rca@champion' from MLflow: x"
        ]
        caplog.clear()
        ModelRegistry("models:/fleetmind-rca@champion", "heuristic:builtin-bestfit").load()
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["RCA falls back to deepest"]


def test_fallback_reports_reason(gat_loader: dict) -> None:
    gat_loader["fail"] = "corrupt artifact models/rca/model.pt"
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")
    m = reg.load()
    assert m.rca.method != "gat" and "corrupt artifact" in (m.rca.fallback_reason or "")


def test_api_reload_409_and_fallback_in_responses(gat_loader: dict, tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/r.db",
        rca_model="models:/fleetmind-rca@champion",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        out = c.post(
            "/api/v1/rca", json={"alerts": [alert({"alertname": "x", "cluster": "c0"})]}
        ).json()
        assert out["method"] == "gat" and out["model_version"] == "fleetmind-rca/1"
        assert out["causes"][0]["fault_type"] == "gpu_xid" and out["fallback_reason"] is None
        gat_loader["fail"] = "registry unreachable"
        r = c.post("/api/v1/models/reload")
        assert r.status_code == 409 and "registry unreachable" in r.json()["detail"]
        assert c.get("/api/v1/models").json()["rca"]["version"] == "fleetmind-rca/1"
        assert (
            'fleetmind_model_loads_total{kind="rca",result="failure"} 1.0' in c.get("/metrics").text
        )


def test_ppo_policy_is_served_through_the_adapter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.envs import policies as envs_policies

    class FakePPO(envs_policies.BestFit):  # the PPO adapter implements the same Policy interface
        name = "ppo"
        version = "fleetmind-placement/3"

    mod = types.ModuleType("fleetmind.rl.policy_adapter")
    mod.load_ppo_policy = lambda ref=None: FakePPO()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fleetmind.rl.policy_adapter", mod)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/p.db",
        rca_model="baseline:upstream-coverage",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        p = c.post("/api/v1/placements", json={"num_gpu": 2, "alternatives": 2}).json()
        assert p["policy"] == "ppo" and p["model_version"] == "fleetmind-placement/3"
        assert p["fallback_reason"] is None and len(p["gpus"]) == 2 and len(p["alternatives"]) == 2


def test_an_uncalibrated_gat_is_named_so(
    gat_loader: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """The notifier reads a GAT's top score as a probability (its severity thresholds): a model
    without a fitted temperature says so in ``/api/v1/models`` and the log; the released model,
    calibrated, does not. Temperature scaling: Guo et al. 2017, "On Calibration of Modern Neural
    Networks"."""
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")
    with caplog.at_level("WARNING", logger="fleetmind.serving"):
        info = reg.load().rca.info()
    assert info["calibrated"] is False
    assert any("no fitted temperature" in r.getMessage() for r in caplog.records)
    assert reg.load().placement.info()["calibrated"] is None


def test_the_released_gat_is_calibrated() -> None:
    info = ModelRegistry(None, "heuristic:builtin-bestfit").load().rca.info()
    assert info["method"] == "gat" and info["calibrated"] is True
