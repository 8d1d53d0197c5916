"""An incident page whose stored causes name nodes the served graph no longer has.

The graph can be replaced after an incident was ranked (``PUT /api/v1/graph``, the refresher);
feedback on a node outside the served graph is refused (422, as ``POST /api/v1/feedback`` refuses
it), so such a cause is marked "not in the current graph" and gets no Confirm button, and the
feedback form does not suggest it. Grafana's alerting UI does the same for a rule whose data
source is gone: the rule is listed with a note, its actions disabled
(``public/app/features/alerting/unified``).
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient
from serving_helpers import webhook
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

TOKEN = "ui-gone-cause-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def _cause_heads(html: str) -> dict[str, str]:
    """Each cause's node -> its head's HTML (its heading, the Confirm form and the score)."""
    return {
        m.group(1): html[m.end() :].split('<div class="cause-head">', 1)[1].split("</div>", 1)[0]
        for m in re.finditer(r'class="cause[^"]*" data-rank="\d+" data-node="([^"]+)">', html)
    }


def test_a_cause_outside_the_served_graph_is_marked_and_not_confirmable(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ui.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=TOKEN,
    )
    with TestClient(create_app(settings)) as c:
        assert c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=H).status_code == 200
        services = c.app.state.services
        services.incidents.process_pending()
        inc = next(i for i in c.get("/api/v1/incidents", headers=H).json() if i["alert_count"] == 7)
        # one host per cluster now: c0-h1, the ranked root, is gone; services s0..s3 stay
        smaller = build_example_graph(clusters=2, hosts=1, name="smaller")
        services.graphs.replace(smaller)
        c.get("/ui/login")
        c.post(
            "/ui/login",
            data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/"},
        )
        html = c.get(f"/ui/incidents/{inc['id']}").text
    heads = _cause_heads(html)
    assert list(heads) == [cause["node"] for cause in inc["causes"]]
    assert heads[TRUE_ROOT] and TRUE_ROOT not in smaller.index
    assert any(node in smaller.index for node in heads)  # both kinds on the page
    for node, head in heads.items():
        kept = node in smaller.index
        assert ("not in the current graph" in head) is not kept, node
        assert ("<form" in head) is kept, node  # Confirm only where feedback is taken
    assert re.search(r'id="fb-root" name="root_cause" list="fb-nodes" required\s+value=""', html)
    suggested = re.findall(r'<option value="([^"]+)">', html.split('id="fb-nodes"', 1)[1])
    assert TRUE_ROOT not in suggested
