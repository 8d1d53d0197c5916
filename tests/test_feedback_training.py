"""Feedback as training labels (serving/feedback.py, training/rca_feedback.py,
rca/lightning_module.py, training/rca_train.py; docs/operators.md, "Feedback that becomes labels").

* A fault type is a label only where the fault catalog allows it at the node
  (``data/rca_gen/faults/catalog.py``, ``plausible_fault_types``, the rule of the GAT's fault-type
  mask): another value is a 422, and feedback without one trains the root only (fault class -1,
  which the loss skips, as an unlabelled ``Data.fault`` of ``rca/lightning_module.py`` always did),
  never a class ``unknown``; the analyzer never gives a type outside the catalog.
* Feedback is always trained on: validation graphs and the ``--max-train`` subsample are drawn
  from the dataset's own incidents (as Lightning's DataModule example keeps the seeded split apart
  from what is added to training), and those dropped (root outside the candidate subgraph) are
  named by id.
* ``--feedback-since`` / ``--feedback-until`` keep a later period aside, and ``rca evaluate`` says
  how many of its incidents the model's training used.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from sqlalchemy import update
from test_feedback import host_storms

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.gat_analyzer import UNKNOWN_FAULT, GATAnalyzer
from fleetmind.rca.lightning_module import RCADataModule, crop_incident
from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, incident_feedback, incidents
from fleetmind.serving.feedback import feedback_incidents
from fleetmind.serving.settings import Settings
from fleetmind.training.rca_feedback import merge_feedback

TOKEN = "feedback-training-token"
H = {"Authorization": f"Bearer {TOKEN}"}
FAR = "c1/host/c1-h3"
"""The node one incident is (wrongly) labelled with: outside its 1-hop candidate subgraph."""


def _settings(db: Path, **kw: object) -> Settings:
    base = {
        "database_url": f"sqlite:///{db}",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "api_token": TOKEN,
    }
    base.update(kw)
    return Settings(**base)


@dataclass
class World:
    data: Path
    """a generated dataset (train, val, test)"""
    noval: Path
    """the same without ``val.jsonl``"""
    url: str
    """a service database with 8 labelled incidents, none with a fault type"""
    ids: list[int]
    """their incident ids (the first labelled with :data:`FAR`)"""
    graph: DependencyGraph
    """the served graph"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    tmp = tmp_path_factory.mktemp("feedback-training")
    data = tmp / "ds"
    gen = ["rca", "generate", "--out", str(data), "--incidents", "80", "--seed", "0"]
    gen += ["--graphs", "4", "--min-nodes", "60", "--max-nodes", "120", "--min-clusters", "2"]
    gen += ["--max-clusters", "2", "--large-fraction", "0", "--workers", "1"]
    assert main(gen) == 0
    noval = tmp / "noval"
    shutil.copytree(data, noval)
    (noval / "val.jsonl").unlink()
    settings = _settings(tmp / "svc.db")
    with TestClient(create_app(settings)) as c:
        c.post("/api/v1/alerts", json=webhook(host_storms()), headers=H)
        c.app.state.services.incidents.process_pending()
        graph = c.app.state.services.graphs.graph
        incs = sorted(c.get("/api/v1/incidents", headers=H).json(), key=lambda i: i["id"])
        assert len(incs) == 8
        for k, inc in enumerate(incs):
            host = next(n for n in inc["nodes"] if "/host/" in n)
            node = FAR if k == 0 else host
            r = c.post(
                f"/api/v1/incidents/{inc['id']}/feedback",
                json={"root_cause": node, "by": "oncall"},
                headers=H,
            )
            assert r.status_code == 201, r.text
            assert r.json()["fault_type"] is None  # the baseline types nothing
    return World(data, noval, settings.database_url, [i["id"] for i in incs], graph)


# ------------------------------------------------------------------------- fault types (API)
@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    with TestClient(create_app(_settings(tmp_path / "fb.db"))) as c:
        c.headers.update(H)
        c.post("/api/v1/alerts", json=webhook(host_storms()[:2]))
        c.app.state.services.incidents.process_pending()
        yield c


def test_a_fault_type_must_be_one_the_node_can_have(client: TestClient) -> None:
    inc = client.get("/api/v1/incidents").json()[0]
    url = f"/api/v1/incidents/{inc['id']}/feedback"
    host = "c0/host/c0-h0"
    r = client.post(url, json={"root_cause": host, "by": "a", "fault_type": "banana"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "banana" in detail and "host_not_ready" in detail and "thermal_throttling" in detail
    r = client.post(url, json={"root_cause": host, "by": "a", "fault_type": "gpu_xid_error"})
    assert r.status_code == 422 and "host node" in r.json()["detail"]
    r = client.post(url, json={"root_cause": "c0", "by": "a", "fault_type": "host_not_ready"})
    assert r.status_code == 422 and "leave fault_type out" in r.json()["detail"]
    r = client.post(url, json={"root_cause": host, "by": "a", "fault_type": "host_not_ready"})
    assert r.status_code == 201 and r.json()["fault_type"] == "host_not_ready"
    # without a type: the latest feedback's for the same node (an agreeing verdict keeps it)
    r = client.post(url, json={"root_cause": host, "by": "a"})
    assert r.status_code == 201 and r.json()["fault_type"] == "host_not_ready"


def test_a_models_unknown_type_is_no_label(client: TestClient) -> None:
    inc = client.get("/api/v1/incidents").json()[0]
    db: Database = client.app.state.services.db
    host = "c0/host/c0-h0"
    causes = [{"node": host, "kind": "host", "score": 0.9, "fault_type": UNKNOWN_FAULT}]
    with db.write() as conn:
        conn.execute(update(incidents).where(incidents.c.id == inc["id"]).values(causes=causes))
    url = f"/api/v1/incidents/{inc['id']}/feedback"
    r = client.post(url, json={"root_cause": host, "by": "a"})
    assert r.status_code == 201 and r.json()["fault_type"] is None
    causes[0]["fault_type"] = "thermal_throttling"  # one the host can have: the default
    with db.write() as conn:
        conn.execute(update(incidents).where(incidents.c.id == inc["id"]).values(causes=causes))
    r = client.post(url, json={"root_cause": host, "by": "a"})
    assert r.json()["fault_type"] == "thermal_throttling"
    # rows stored before the check ("unknown", a misspelt name) read as no fault type
    with db.write() as conn:
        conn.execute(update(incident_feedback).values(fault_type=UNKNOWN_FAULT))
    labelled, _ = feedback_incidents(client.app.state.services.settings.database_url)
    assert [i["fault_type"] for i in labelled] == [None]


def test_the_analyzer_never_gives_a_learned_unknown_class(world: World) -> None:
    from fleetmind.serving.feedback import node_fault_types

    alerts = host_storms()[:2]
    top = GATAnalyzer.load(None).find_root_causes(world.graph, alerts, top_k=1).causes[0]
    allowed = node_fault_types(world.graph.node(top.node))
    assert top.fault_type in allowed and len(allowed) > 1
    # a model whose best class for it is "unknown" (learned from untyped labels): the next best
    # type the node can have instead, masked or not
    other = GATAnalyzer.load(None)
    other.fault_types = ["unknown" if t == top.fault_type else t for t in other.fault_types]
    for masked in (True, False):
        other.config.mask_fault_types = masked
        other._fault_mask_cache.clear()
        c = other.find_root_causes(world.graph, alerts, top_k=1).causes[0]
        assert c.node == top.node and c.fault_type != "unknown", (masked, c)
        assert c.fault_type in (allowed if masked else other.fault_types), (masked, c)
    # another dataset's fault names (outside the catalog) are the model's own: given as learned
    other.fault_types = ["banana" if t == "unknown" else t for t in other.fault_types]
    other.config.mask_fault_types = True
    other._fault_mask_cache.clear()
    assert other.find_root_causes(world.graph, alerts, top_k=1).causes[0].fault_type == "banana"


# ------------------------------------------------------------------ feedback in the data module
def _merged(world: World, src: Path, tmp: Path) -> Path:
    return Path(merge_feedback(src, world.url, tmp / "merged", weight=10)["dir"])


def _incidents(data: list) -> list[tuple[int, int, float]]:
    """What tells incident ``Data`` apart: size, root and the sum of its inputs."""
    return [(int(d.num_nodes), int(d.root_index), round(float(d.x.sum()), 3)) for d in data]


@pytest.mark.parametrize("seed", [0, 13])  # 13: the feedback graph is the one drawn first
def test_validation_is_held_out_from_the_dataset_alone(
    world: World, tmp_path: Path, seed: int
) -> None:
    plain = RCADataModule(world.noval, seed=seed, use_cache=False)
    plain.setup()
    dm = RCADataModule(_merged(world, world.noval, tmp_path), seed=seed, use_cache=False)
    dm.setup()
    # the same validation incidents with and without feedback; every kept copy is trained on
    assert _incidents(dm.val_data) == _incidents(plain.val_data)
    assert len(dm.train_data) == len(plain.train_data) + 70
    assert len(dm.feedback["incidents"]) == 7 and dm.feedback["copies"] == 70
    assert len(dm.feedback_data) == 7


def test_max_train_subsamples_the_dataset_only(world: World, tmp_path: Path) -> None:
    dm = RCADataModule(_merged(world, world.data, tmp_path), seed=0, max_train=5, use_cache=False)
    dm.setup()
    assert dm.info["n_train"] == 5 + 80  # 5 simulated, every feedback copy
    # feedback without a fault type: the root only (class -1), no class of its own
    assert "unknown" not in dm.fault_types and "None" not in dm.fault_types
    assert sum(int(d.fault) == -1 for d in dm.train_data) >= 70
    assert dm.feedback["copies"] == 70 and dm.feedback["dropped_copies"] == 10
    assert dm.feedback["dropped"] == [f"feedback-{world.ids[0]}"]


# ------------------------------------------------------------------------- train and evaluate
def test_untyped_feedback_trains_the_root_and_keeps_real_fault_types(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.serving.feedback import node_fault_types

    g = world.graph
    first = feedback_incidents(world.url)[0][0]
    assert first["root_cause"] == FAR
    crop = crop_incident(g, first["alerts"], 1)
    assert g.index[FAR] not in set(crop.keep.tolist())  # the premise: outside the crop
    out = tmp_path / "train.json"
    args = ["rca", "train", "--data", str(world.data), "--epochs", "4", "--hidden", "16"]
    args += ["--heads", "2", "--layers", "2", "--seed", "0", "--patience", "100"]
    args += ["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--out", str(tmp_path / "r")]
    args += ["--feedback-db", world.url, "--feedback-weight", "10", "--json", str(out)]
    args += ["--feedback-until", "2100-01-01"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "training with 7 of 8 feedback incidents (x10: 70 copies)" in text, text
    assert "8 of them without a fault type" in text, text
    assert "dropped 1 feedback incidents (10 copies)" in text, text
    assert f"feedback-{world.ids[0]}" in text
    assert "feedback (training fit, not a test): AC@1" in text and "on the 7 feedback" in text
    assert "registered fleetmind-rca version 1 (val AC@1 " in text, text
    res = json.loads(out.read_text())
    gat = GATAnalyzer.load(res["artifact"])
    assert "unknown" not in gat.fault_types and gat.fault_types
    labelled, graphs = feedback_incidents(world.url)
    for inc in labelled[1:]:
        for c in gat.find_root_causes(graphs[inc["graph"]], inc["alerts"], top_k=5).causes:
            allowed = node_fault_types(graphs[inc["graph"]].node(c.node))
            assert c.fault_type in allowed or (c.fault_type == UNKNOWN_FAULT and not allowed), c
    # evaluating on the same feedback says that training used it
    ev = ["rca", "evaluate", "--feedback-db", world.url, "--methods", "gat"]
    ev += ["--model", res["artifact"], "--json", str(tmp_path / "ev.json")]
    assert main(ev) == 0
    text = capsys.readouterr().out
    assert f"(7 of them used by training run {res['run_name']} of the gat model" in text, text
    used = json.loads((tmp_path / "ev.json").read_text())["feedback"]["used_by_training"]
    assert used["gat"]["n"] == 7 and used["gat"]["run_id"] == res["run_id"]


# ---------------------------------------------------------------------------- feedback periods
def test_a_period_keeps_later_feedback_aside(world: World, tmp_path: Path) -> None:
    from fleetmind.serving.feedback import feedback_time

    shutil.copy(world.url.removeprefix("sqlite:///"), tmp_path / "p.db")
    url = f"sqlite:///{tmp_path}/p.db"
    db = Database(url)
    nov, dec = feedback_time("2026-11-15"), feedback_time("2026-12-01T00:00:00Z")
    with db.write() as conn:
        for k, inc_id in enumerate(world.ids):
            ts = nov if k < 4 else dec + 60
            conn.execute(
                update(incident_feedback)
                .where(incident_feedback.c.incident_id == inc_id)
                .values(created_ts=ts)
            )
    db.dispose()
    before, _ = feedback_incidents(url, until=dec)
    after, _ = feedback_incidents(url, since=dec)
    assert [i["id"] for i in before] == [f"feedback-{i}" for i in world.ids[:4]]
    assert [i["id"] for i in after] == [f"feedback-{i}" for i in world.ids[4:]]
    assert feedback_incidents(url, since=nov, until=dec + 61)[0] == feedback_incidents(url)[0]
    out = Path(merge_feedback(world.data, url, tmp_path / "m", until=dec)["dir"])
    lines = (out / "train.jsonl").read_text().splitlines()
    assert sum('"feedback": {' in line for line in lines) == 4


def test_feedback_period_flags_are_checked(world: World, tmp_path: Path) -> None:
    from fleetmind.serving.feedback import feedback_time

    assert feedback_time("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert feedback_time("2026-12-01T01:00:00+01:00") == feedback_time("2026-12-01")
    with pytest.raises(ConfigError, match="--feedback-until must be an ISO 8601"):
        feedback_time("last week", "--feedback-until")
    base = ["rca", "evaluate", "--methods", "gat"]
    assert main([*base, "--data", str(world.data), "--feedback-since", "2026-12-01"]) == 2
    db = ["--feedback-db", world.url]
    assert main([*base, *db, "--feedback-since", "yesterday"]) == 2
    assert main([*base, *db, "--feedback-since", "2026-12-02", "--feedback-until", "2026-12-01"])
    # a period without feedback: one line, not AC@1 over nothing
    assert main([*base, *db, "--feedback-since", "2100-01-01"]) == 2
    train = ["rca", "train", "--data", str(world.data), "--out", str(tmp_path)]
    assert main([*train, "--feedback-until", "2026-12-01"]) == 2


# -------------------------------------------------------------------------- the promotion line
def test_the_promotion_line_gives_both_scores() -> None:
    from fleetmind.training.rca_train import promotion_line

    reg = {"registered_model": "fleetmind-rca", "version": "3", "previous_champion": "1"}
    line = promotion_line({**reg, "champion": False, "score": 0.5, "champion_score": 0.5})
    assert line == (
        "registered fleetmind-rca version 3 (val AC@1 0.500 equals champion version 1's 0.500; "
        "tie: champion kept)"
    )
    line = promotion_line({**reg, "champion": False, "score": 0.4, "champion_score": 0.5})
    assert "val AC@1 0.400, champion version 1's 0.500: champion stays 1" in line
    line = promotion_line({**reg, "champion": True, "score": 0.583334, "champion_score": 0.583333})
    assert "val AC@1 0.583334 beats champion version 1's 0.583333: champion now" in line
    first = {**reg, "previous_champion": None, "champion": True, "score": 0.5}
    assert promotion_line(first).endswith("(val AC@1 0.500; no champion before: champion now)")
    why = "champion stays version 1: its val_ac1 was measured on another evaluation set"
    refused = {**reg, "champion": False, "score": 0.5, "champion_score": 0.75}
    line = promotion_line({**refused, "champion_refused": why})
    assert line == (
        f"registered fleetmind-rca version 3 ({why})\n"
        "  val AC@1 0.500 (this version); 0.750 (champion version 1): not compared"
    )


# ------------------------------------------------------------------ a batch of untyped incidents
@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # no Trainer here
def test_a_batch_without_fault_types_still_reaches_the_fault_head() -> None:
    """Under DDP every parameter must get a gradient each step (torch's
    ``DistributedDataParallel``: "parameters that were not used in producing the loss" stop
    it): a batch of feedback without fault types passes a zero loss through the head."""
    import numpy as np
    from gat_helpers import toy_graph, toy_incident
    from torch_geometric.loader import DataLoader

    from fleetmind.rca.lightning_module import GATLightning, incidents_to_data

    g = toy_graph("g0")
    rng = np.random.default_rng(0)
    incs = [{**toy_incident(g, rng, i), "fault_type": None} for i in range(4)]
    data = incidents_to_data(incs, {"g0": g}, ["host_down"], crop_hops=1)
    assert all(int(d.fault) == -1 for d in data)
    module = GATLightning(fault_types=["host_down"], hidden=8, heads=1, layers=2)
    batch = next(iter(DataLoader(data, batch_size=4)))
    module._shared_step(batch, "train").backward()
    head = [p.grad for p in module.model.fault_head.parameters()]
    assert all(grad is not None and float(grad.abs().sum()) == 0.0 for grad in head)
