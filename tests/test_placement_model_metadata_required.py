"""A placement model the service cannot use without a workload trace is refused at load.

The service places pods without a trace, so :meth:`PPOPlacementPolicy.reset` takes FGD's typical
pods from ``metadata.json`` (``typical_pods``) and, for a model that observes penalty features,
its ``penalty_context``. A folder whose ``metadata.json`` was missing, a directory, or without
``typical_pods`` used to load: ``POST /api/v1/models/reload`` answered 200, ``/readyz`` said ready,
and every ``POST /api/v1/placements`` then answered 422 ("the PPO policy needs the workload
trace ..."). Now the load raises ModelLoadError: a reload answers 409 and keeps the served model,
a start falls back to the heuristic with the reason.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import ModelLoadError
from fleetmind.rl.policy_adapter import RELEASED_DIR, PPOPlacementPolicy, load_ppo_policy
from fleetmind.serving.app import create_app
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings


def _no_metadata(folder: Path) -> None:
    (folder / "metadata.json").unlink()


def _metadata_dir(folder: Path) -> None:
    (folder / "metadata.json").unlink()
    (folder / "metadata.json").mkdir()


def _no_typical_pods(folder: Path) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    del meta["typical_pods"]
    (folder / "metadata.json").write_text(json.dumps(meta))


def _bad_typical_pods(folder: Path) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["typical_pods"] = {"count": [1]}
    (folder / "metadata.json").write_text(json.dumps(meta))


def _cut_typical_pods(folder: Path) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["typical_pods"]["count"] = meta["typical_pods"]["count"][:1]  # parses; lengths differ
    (folder / "metadata.json").write_text(json.dumps(meta))


def _empty_typical_pods(folder: Path) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["typical_pods"] = {k: [] for k in meta["typical_pods"]}  # parses; FGD divides by zero
    (folder / "metadata.json").write_text(json.dumps(meta))


BREAKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (_no_metadata, "typical_pods"),
    "a directory": (_metadata_dir, "not a readable regular file"),
    "without typical_pods": (_no_typical_pods, "typical_pods"),
    "unreadable typical_pods": (_bad_typical_pods, "typical_pods is unreadable"),
    "typical_pods of two lengths": (_cut_typical_pods, "typical_pods is unreadable"),
    "empty typical_pods": (_empty_typical_pods, "typical_pods is unreadable"),
}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "placement"
    shutil.copytree(RELEASED_DIR, folder)
    return folder


def test_the_released_model_needs_no_trace() -> None:
    load_ppo_policy(None).check_standalone()  # must not raise
    m = ModelRegistry("baseline:upstream-coverage", None).load().placement
    assert m.method == "ppo" and m.fallback_reason is None


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_fresh_start_falls_back_with_the_reason(model: Path, case: str) -> None:
    breaks, why = BREAKS[case]
    breaks(model)
    m = ModelRegistry("baseline:upstream-coverage", str(model)).load().placement
    assert m.method != "ppo"
    assert why in (m.fallback_reason or "") and "metadata.json" in (m.fallback_reason or "")
    assert "\n" not in (m.fallback_reason or "")


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_a_reload_keeps_the_served_model(model: Path, case: str) -> None:
    reg = ModelRegistry("baseline:upstream-coverage", str(model))
    assert reg.load().placement.method == "ppo"
    BREAKS[case][0](model)
    with pytest.raises(ModelLoadError, match="kept the served models"):
        reg.reload()
    assert reg.current.placement.method == "ppo" and reg.current.placement.fallback_reason is None


def test_a_metadata_directory_is_a_load_error(model: Path) -> None:
    _metadata_dir(model)
    with pytest.raises(ModelLoadError, match="not a readable regular file"):
        load_ppo_policy(model)


def test_penalty_features_need_a_stored_context() -> None:
    meta = json.loads((RELEASED_DIR / "metadata.json").read_text())
    policy = PPOPlacementPolicy(
        object(), meta["n_candidates"], {**meta, "builder": {"penalty_features": True}}, "m.onnx"
    )
    with pytest.raises(ModelLoadError, match="penalty_context"):
        policy.check_standalone()


def test_api_reload_answers_409_and_placements_go_on(model: Path, tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/p.db",
        rca_model="baseline:upstream-coverage",
        placement_model=str(model),
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        assert c.post("/api/v1/placements", json={"num_gpu": 1}).status_code == 200
        _no_metadata(model)
        r = c.post("/api/v1/models/reload")
        assert r.status_code == 409 and "typical_pods" in r.json()["detail"]
        p = c.post("/api/v1/placements", json={"num_gpu": 1})
        assert p.status_code == 200 and p.json()["policy"] == "ppo"
