"""``rca fit``'s synthesiser with latency metrics in different units, and its console output.

Chain ``front -> cart -> db``. When the callers report ``latency_ms`` and ``db`` reports
``latency_seconds`` (an Istio sidecar in milliseconds in front of an OpenTelemetry service in
seconds), a latency rise at ``db`` must reach the callers in milliseconds; before the conversion it
was added in seconds (0.1 on a 200 ms latency) and the callers never alerted. Systems whose latency
columns agree in unit, or name none, take the path without conversion.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetmind import cli
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.petshop import read_graph_csv
from fleetmind.data.synth_incidents import SynthConfig, SynthIncident, SystemModel, latency_unit_s
from fleetmind.training.rca_fit import read_system


def _graph(tmp: Path) -> DependencyGraph:
    p = tmp / "graph.csv"
    p.write_text("microservice,front,cart,db\nfront,0,1,0\ncart,0,0,1\ndb,0,0,0\n")
    return read_graph_csv(p, "shop")


def _normal(lat: dict[str, tuple[str, float]], rows: int = 120, seed: int = 0) -> pd.DataFrame:
    """A normal period: per node its latency column (name, level) and ``requests`` (100), 5 % noise."""
    rng = np.random.default_rng(seed)
    cols, level = [], []
    for node, (metric, lv) in lat.items():
        cols += [(node, metric, "Average"), (node, "requests", "Sum")]
        level += [lv, 100.0]
    x = np.array(level) * (1 + 0.05 * rng.standard_normal((rows, len(cols))))
    return pd.DataFrame(
        x,
        index=pd.Index(1.7e9 + 60.0 * np.arange(rows), name="time"),
        columns=pd.MultiIndex.from_tuples(cols),
    )


def _digest(incs: list[SynthIncident]) -> str:
    blob = json.dumps(
        [(i.alerts, i.root, i.fault, i.silent, i.window_rows) for i in incs], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


MIXED = {
    "front": ("latency_ms", 200.0),
    "cart": ("latency_ms", 150.0),
    "db": ("latency_seconds", 0.1),
}


def test_unit_words() -> None:
    assert latency_unit_s("istio_request_duration_milliseconds") == 1e-3
    assert latency_unit_s("http_server_request_duration_seconds") == 1.0
    assert latency_unit_s("latency_us") == 1e-6
    assert latency_unit_s("latency") is None


def test_callers_in_ms_alert_on_a_root_in_seconds(tmp_path: Path) -> None:
    system = SystemModel(_graph(tmp_path), _normal(MIXED))
    n, hits = 0, {"cart": 0, "front": 0}
    for inc in system.incidents(SynthConfig(n_incidents=200, seed=0)):
        if inc.root_id != "db" or inc.fault != "latency" or inc.silent:
            continue
        n += 1
        lat = {a["labels"]["service"] for a in inc.alerts if "latency" in a["labels"]["metric"]}
        for s in hits:
            hits[s] += s in lat
    assert n >= 20
    # before the conversion: 0 of n for both callers
    assert hits["cart"] / n > 0.3 and hits["front"] / n > 0.1, (n, hits)


def test_a_root_in_ms_does_not_swamp_callers_in_seconds(tmp_path: Path) -> None:
    lat = {
        "front": ("latency_seconds", 0.2),
        "cart": ("latency_seconds", 0.15),
        "db": ("latency_ms", 100.0),
    }
    system = SystemModel(_graph(tmp_path), _normal(lat))
    assert system._unit_s is not None
    # the reference rise is in seconds: the median latency of the three, 0.15 s
    assert system.latency_ref == pytest.approx(0.15, rel=0.1)


@pytest.mark.parametrize(
    "lat",
    [
        {
            "front": ("latency_ms", 200.0),
            "cart": ("latency_ms", 150.0),
            "db": ("latency_ms", 100.0),
        },
        {"front": ("latency", 0.2), "cart": ("latency", 0.15), "db": ("latency", 0.1)},
    ],
)
def test_same_unit_systems_take_the_unconverted_path(
    tmp_path: Path, lat: dict[str, tuple[str, float]]
) -> None:
    """No conversion table: every rise is added as before the conversion existed (the value
    helpers are the identity), so the development systems' synthetic incidents are unchanged."""
    system = SystemModel(_graph(tmp_path), _normal(lat))
    assert system._unit_s is None
    assert system._to_seconds(0, 0.25) == 0.25 and system._from_seconds(0, 0.25) == 0.25


def _write_scenario(root: Path, metrics: tuple[str, ...], rows: int = 60) -> Path:
    (root / "noissue").mkdir(parents=True)
    _graph(root)
    cols = [(s, m) for s in ("front", "cart", "db") for m in metrics]
    rng = np.random.default_rng(0)
    lines = [
        "microservice," + ",".join(c[0] for c in cols),
        "metric," + ",".join(c[1] for c in cols),
        "statistic," + ",".join("Average" for _ in cols),
        "unix_timestamp," + "," * (len(cols) - 1),
    ]
    for i in range(rows):
        vals = 100.0 * (1 + 0.05 * rng.standard_normal(len(cols)))
        lines.append(f"{1.7e9 + 60 * i:.0f}," + ",".join(f"{v:.4f}" for v in vals))
    (root / "noissue" / "metrics.csv").write_text("\n".join(lines) + "\n")
    return root


def test_fit_with_only_unrecognised_names_says_so(tmp_path: Path) -> None:
    scen = _write_scenario(tmp_path / "shop", ("go_goroutines", "foo_bar"))
    graph, normal = read_system(scen)
    system = SystemModel(graph, normal)
    with pytest.raises(DataError) as err:
        list(system.incidents(SynthConfig(n_incidents=50, seed=0)))
    msg = str(err.value)
    assert "every scored metric has role other" in msg
    assert "go_goroutines" in msg and "roles.yaml" in msg


def test_fit_prints_the_metric_roles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    scen = _write_scenario(tmp_path / "shop", ("latency", "requests"))
    rc = cli.main(
        ["rca", "fit", "--scenario", str(scen), "--out", str(tmp_path / "m")]
        + ["--incidents", "50", "--epochs", "1", "--seed", "1"]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "shop: metric roles latency=latency, requests=traffic  (* = role map override)" in out
