"""How the incident page and the notifier word, round and report a root cause's score.

* an RCA model without a fitted temperature reads "uncalibrated", not "calibrated";
* a critical page that was sent still reads "sent as critical" after the incident resolves
  (docs/operators.md: "a resolved incident keeps it");
* the FleetMindRootCause ``score`` annotation is rounded down as the page rounds (0.69996 is below
  a 0.7 threshold: "0.6999", not "0.7000"), and the webhook's JSON carries the unrounded float;
* a baseline ranker's "confidence unknown" says what the notifier did, as for models.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM as AM
from serving_helpers import NOTIFY_HOOK as HOOK
from serving_helpers import NotifyPosts, mock_notifier, notify_settings, webhook
from ui_helpers import TRUE_ROOT, ranked_storm, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.notify import Notifier, confidence_words, score_annotation
from fleetmind.serving.settings import Settings

REPO = Path(__file__).resolve().parents[1]
T0 = datetime.now(UTC) - timedelta(minutes=5)


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def _settings(tmp_path: Path, **kw: object) -> Settings:
    """The notifier tests' settings, settling at once."""
    return notify_settings(tmp_path, **{"notify_settle_s": 0.0, **kw})


@pytest.fixture
def app(tmp_path: Path) -> Iterator[TestClient]:
    with ranked_storm(_settings(tmp_path), T0) as c:
        yield c


def _storm_incident(c: TestClient) -> dict:
    return next(i for i in c.get("/api/v1/incidents").json() if i["alert_count"] == 7)


def _rank_as_gat(c: TestClient, inc: dict, score: float) -> None:
    """Store ``inc``'s causes as the GAT's, its top cause (the host) scored ``score``."""
    causes = [dict(x) for x in inc["causes"]]
    causes[0]["score"] = score
    causes[0]["fault_type"] = causes[0].get("fault_type") or "host_not_ready"
    c.app.state.services.db.set_incident_rca(inc["id"], causes, "gat", None)


def _words(c: TestClient, inc_id: int) -> str:
    page = c.get(f"/ui/incidents/{inc_id}").text
    return html.unescape(re.search(r'id="confidence">(.*?)</div>', page, re.S).group(1)).strip()


# ------------------------------------------------------------------ calibrated / uncalibrated
def test_the_words_say_uncalibrated_for_a_model_without_a_temperature(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    assert confidence_words(0.93, s, "gat").startswith(
        "high confidence (93 %, calibrated on simulated incidents)"
    )
    uncal = confidence_words(0.93, s, "gat", calibrated=False)
    assert uncal.startswith("high confidence (93 %, uncalibrated)")
    assert confidence_words(0.93, s, "gat", calibrated=None).startswith("high confidence (93 %)")
    held = confidence_words(0.68, s, "gat", held="critical", calibrated=False)
    assert held.startswith("critical held (68 %, uncalibrated;")


def test_the_page_says_uncalibrated_for_a_served_gat_without_a_temperature(
    tmp_path: Path,
) -> None:
    """A GAT folder whose config.json has no ``calibration`` (as ``fleetmind rca fit`` writes it):
    ``GET /api/v1/models`` says ``calibrated: false``; the page said "calibrated" all the same."""
    model = tmp_path / "uncal"
    model.mkdir()
    shutil.copy(REPO / "models/rca/model.pt", model / "model.pt")
    cfg = json.loads((REPO / "models/rca/config.json").read_text())
    cfg.pop("calibration")
    (model / "config.json").write_text(json.dumps(cfg))
    s = _settings(tmp_path, rca_model=str(model), notify_alertmanager_url="", notify_webhook_url="")
    with TestClient(create_app(s)) as c:
        assert c.get("/api/v1/models").json()["rca"]["calibrated"] is False
        c.post("/api/v1/alerts", json=webhook(storm_alerts(T0))).raise_for_status()
        c.app.state.services.incidents.process_pending()
        c.app.state.services.incidents.rank_due()
        inc = _storm_incident(c)
        assert inc["method"] == "gat"
        words = _words(c, inc["id"])
        assert "uncalibrated" in words and ", calibrated" not in words, words


# ------------------------------------------------------------------ resolved keeps "sent"
def test_a_sent_critical_page_stays_sent_after_the_incident_resolves(app: TestClient) -> None:
    """Sent as critical at 0.72, held critical at 0.67 (within the 0.05 margin), then the incident
    resolves: the page said "not sent as a warning (the incident closed first)"."""
    inc = _storm_incident(app)
    posts = NotifyPosts()
    n = mock_notifier(app, posts)
    _rank_as_gat(app, inc, 0.72)
    n.poll()
    n.poll()
    assert _words(app, inc["id"]).endswith(": sent as critical")
    _rank_as_gat(app, inc, 0.67)
    n.poll()
    assert _words(app, inc["id"]).startswith("critical held (67 %")
    done = datetime.now(UTC).isoformat()
    resolved = [{**a, "status": "resolved", "endsAt": done} for a in storm_alerts(T0)]
    app.post("/api/v1/alerts", json=webhook(resolved)).raise_for_status()
    app.app.state.services.incidents.process_pending()
    n.poll()
    assert app.get(f"/api/v1/incidents/{inc['id']}").json()["status"] == "resolved"
    am = [
        a
        for body in posts.to(AM + "/api/v2/alerts")
        for a in body
        if a["labels"]["incident"] == str(inc["id"])
    ]
    assert am[-1]["labels"]["severity"] == "critical" and "endsAt" in am[-1]
    words = _words(app, inc["id"])
    assert words.endswith(": sent as critical"), words
    assert "not sent" not in words


# ------------------------------------------------------------------ rounding
def test_the_score_annotation_rounds_down() -> None:
    assert score_annotation(0.69996) == "0.6999"
    assert score_annotation(0.7) == "0.7000"
    assert score_annotation(0.72) == "0.7200"
    assert score_annotation(1.0) == "1.0000"


def test_just_below_critical_is_not_sent_as_0_7(app: TestClient) -> None:
    """0.69996 is a warning (below FLEETMIND_NOTIFY_CRITICAL_SCORE 0.7): the alert read
    "score 0.7000" with severity=warning; the page reads 0.699 / 69 %."""
    inc = _storm_incident(app)
    posts = NotifyPosts()
    _rank_as_gat(app, inc, 0.69996)
    n = mock_notifier(app, posts)
    n.poll()
    n.poll()
    [am] = [
        a
        for body in posts.to(AM + "/api/v2/alerts")
        for a in body
        if a["labels"]["incident"] == str(inc["id"])
    ]
    assert am["labels"]["severity"] == "warning"
    assert am["annotations"]["score"] == "0.6999"
    assert set(am["annotations"]) == {
        "summary", "description", "path", "score", "fault_type", "incident_url"
    }  # fmt: skip
    [hook] = [h for h in posts.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    assert hook["fleetmind"]["score"] == 0.69996  # the float, unrounded
    assert "score 0.6999," in hook["text"]
    assert _words(app, inc["id"]).startswith("medium confidence (69 %)")


def test_an_older_row_without_the_exact_score_still_gives_a_webhook_score() -> None:
    row = {
        "state": "firing",
        "labels": {"incident": "3", "cause_node": "n", "cause_kind": "host", "cluster": "c"},
        "annotations": {"incident_url": "u", "path": "n", "score": "0.9000"},
        "starts_at": "2026-01-01T00:00:00Z",
        "ends_at": None,
    }
    assert Notifier.webhook_body(row)["fleetmind"]["score"] == 0.9


# ------------------------------------------------------------------ baseline outcome
def test_a_baseline_says_confidence_unknown_and_what_the_notifier_did(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    off = _settings(tmp_path, notify_alertmanager_url="", notify_webhook_url="")
    base = "upstream-coverage"
    assert confidence_words(3.4, s, base).startswith("confidence unknown")
    assert confidence_words(3.4, s, base).endswith(": notifies as a warning once settled")
    assert confidence_words(3.4, s, base, sent=True).endswith(": sent as a warning")
    assert confidence_words(3.4, off, base).endswith(
        ": would notify as a warning (notifications are off)"
    )


def test_the_page_of_a_baseline_ranking_says_it_was_sent(app: TestClient) -> None:
    inc = _storm_incident(app)
    assert inc["method"] == "upstream-coverage"
    posts = NotifyPosts()
    n = mock_notifier(app, posts)
    n.poll()
    n.poll()
    am = [a for body in posts.to(AM + "/api/v2/alerts") for a in body]
    assert any(
        a["labels"]["cause_node"] == TRUE_ROOT and a["labels"]["severity"] == "warning" for a in am
    )
    words = _words(app, inc["id"])
    assert words.startswith("confidence unknown") and words.endswith(": sent as a warning"), words
