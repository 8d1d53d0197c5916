"""``fleetmind_model_loads_total`` as the ``ModelWeightLoadFailures`` rule needs it.

``rate()`` sees only increases between scraped samples: a series created by its first failure is
scraped at 1 and shows no increase, so the rule never fired on a real failure. Prometheus's
instrumentation guide ("Avoid missing metrics", prometheus.io/docs/practices/instrumentation)
says to initialise every known label combination to 0; prometheus-client creates a child at 0 on
``labels()`` (client_python ``metrics.py``, ``MetricWrapperBase.labels``). The rule is checked with
``promtool test rules`` (Prometheus ``cmd/promtool/unittest.go``) on the series a fresh app exports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.metrics import LOAD_RESULTS, MODEL_KINDS, Metrics

RULES = REPO_ROOT / "deploy" / "fleetmind-rules.yml"
SERIES = re.compile(r"^fleetmind_model_loads_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)


def _loads(exposition: str) -> dict[tuple[str, str], float]:
    """``(kind, result) -> value`` of every ``fleetmind_model_loads_total`` sample in ``exposition``."""
    out = {}
    for m in SERIES.finditer(exposition):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        out[(labels["kind"], labels["result"])] = float(m["value"])
    return out


def _fresh_app_loads(tmp_path: Path) -> dict[tuple[str, str], float]:
    """What /metrics of a started app shows before any model file was loaded (baseline models)."""
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    settings = Settings(
        telemetry="sim",
        database_url=f"sqlite:///{tmp_path / 'fm.db'}",
        rca_model="baseline:deepest",
        placement_model="heuristic:bestfit",
    )
    with TestClient(create_app(settings)) as client:
        return _loads(client.get("/metrics").text)


def test_every_kind_and_result_is_exported_at_zero_before_any_load(tmp_path: Path) -> None:
    expected = {(kind, result): 0.0 for kind in MODEL_KINDS for result in LOAD_RESULTS}
    assert _loads(Metrics().render()[0].decode()) == expected
    assert _fresh_app_loads(tmp_path) == expected
    # the first failure is then an increase from 0 to 1
    metrics = Metrics()
    metrics.on_model_load("rca", ok=False)
    assert _loads(metrics.render()[0].decode())[("rca", "failure")] == 1.0


def _remedy(alert: str) -> dict[str, str]:
    """The ``description`` and ``runbook_url`` annotations of rule ``alert`` (static text)."""
    rules = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = [r for g in rules for r in g["rules"] if r.get("alert") == alert]
    return {k: rule["annotations"][k] for k in ("description", "runbook_url")}


def _promtool_test(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    path = tmp_path / "loads.test.yml"
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)


def test_model_weight_load_failures_fires_on_a_failed_reload_of_the_exported_series(
    tmp_path: Path,
) -> None:
    """A fresh app's series, scraped at 0; at minute 10 a reload fails for RCA (its placement
    load succeeds). One failure in two loads is above the rule's 7 %: it fires after its 5 m."""
    exported = _fresh_app_loads(tmp_path)
    assert ("rca", "failure") in exported, "the failure series must exist before its first failure"
    target = 'cluster="c0",service="fleetmind",instance="10.244.0.5:8000",job="fleetmind"'
    changed = {("rca", "failure"), ("placement", "success")}
    series = [
        {
            "series": f'fleetmind_model_loads_total{{{target},kind="{k}",result="{r}"}}',
            "values": f"{v:g}x9 {v + 1:g}x20" if (k, r) in changed else f"{v:g}x29",
        }
        for (k, r), v in exported.items()
    ]
    alert = {
        "exp_labels": {
            "severity": "critical",
            "cluster": "c0",
            "service": "fleetmind",
            "instance": "10.244.0.5:8000",
        },
        "exp_annotations": {
            "summary": "fleetmind 10.244.0.5:8000 in c0: more than 7 % of model-weight loads fail",
            **_remedy("ModelWeightLoadFailures"),
        },
    }
    checks = [
        {"eval_time": "9m", "alertname": "ModelWeightLoadFailures", "exp_alerts": []},
        {"eval_time": "16m", "alertname": "ModelWeightLoadFailures", "exp_alerts": [alert]},
    ]
    tests = [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]
    out = _promtool_test(tmp_path, tests)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_failure_at_start_up_is_paged_by_the_fallback_alert(tmp_path: Path) -> None:
    """A load that fails before the first scrape is in the first sample (no increase for
    ModelWeightLoadFailures); the failed model's fallback is what pages: FleetMindModelFallback."""
    target = 'instance="10.244.0.5:8000",job="fleetmind",cluster="c0",service="fleetmind"'
    series = [
        {"series": f'fleetmind_model_loads_total{{{target},kind="rca",result="failure"}}',
         "values": "1x20"},
        {"series": f'fleetmind_model_loads_total{{{target},kind="rca",result="success"}}',
         "values": "0x20"},
        {"series": f'fleetmind_model_info{{{target},kind="rca",method="deepest",version="",'
                   'fallback="true"}', "values": "1x20"},
    ]  # fmt: skip
    fallback = {
        "exp_labels": {"severity": "warning", "instance": "10.244.0.5:8000", "kind": "rca",
                       "method": "deepest"},
        "exp_annotations": {"summary": "FleetMind 10.244.0.5:8000: its rca model did not load; "
                            "deepest answers instead", **_remedy("FleetMindModelFallback")},
    }  # fmt: skip
    checks = [
        {"eval_time": "10m", "alertname": "ModelWeightLoadFailures", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "FleetMindModelFallback", "exp_alerts": [fallback]},
    ]
    tests = [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]
    out = _promtool_test(tmp_path, tests)
    assert out.returncode == 0, out.stdout + out.stderr
    # and the rule says so where it is defined
    comment = RULES.read_text().split("alert: ModelWeightLoadFailures")[1].split("expr:")[0]
    assert "FleetMindModelFallback" in comment
