"""``deploy/grafana/fleetmind-dashboard.json`` imports as docs/deploy.md says it does.

Grafana's import page asks for a data source only for the entries of a dashboard's ``__inputs``
(the "Export for sharing externally" form, whose ``${DS_...}`` placeholders the import replaces;
Grafana docs, "Export and import dashboards"); a provisioned dashboard (kube-prometheus-stack's
sidecar) never replaces them. This dashboard has no ``__inputs``: its panels read a ``datasource``
template variable instead. docs/deploy.md said the import asks to pick the data source, which it
never did.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleetmind.data.paths import REPO_ROOT

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "fleetmind-dashboard.json"
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"


def _datasources(node: Any) -> list[Any]:
    """Every ``datasource`` value in the dashboard (panels, targets, variables), recursively."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                found.append(value)
            found.extend(_datasources(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_datasources(item))
    return found


def test_every_reference_names_a_variable_or_an_input() -> None:
    text = DASHBOARD.read_text()
    dash = json.loads(text)
    assert dash.get("id") is None  # an id would overwrite whichever dashboard has it
    variables = {v["name"] for v in dash["templating"]["list"]}
    inputs = {i["name"] for i in dash.get("__inputs", [])}
    # built-ins Grafana fills itself (global variables): __interval, __rate_interval, ...
    refs = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text))  # $job, ${datasource}, ${job:regex}
    assert {r for r in refs if not r.startswith("__")} <= variables | inputs
    (ds_var,) = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["query"] == "prometheus"
    for ds in _datasources(dash["panels"]) + _datasources(dash["templating"]["list"]):
        assert ds == {"type": "prometheus", "uid": "${" + ds_var["name"] + "}"}, ds


def test_the_doc_describes_the_import_the_dashboard_gets() -> None:
    dash = json.loads(DASHBOARD.read_text())
    doc = DEPLOY_DOC.read_text()
    section = doc[doc.index("## Grafana dashboard") :]
    section = section[: section.index("\n## ", 1)]
    asks = "pick the Prometheus data" in section or "asks for the data source" in section
    assert asks == bool(dash.get("__inputs")), section
    if not dash.get("__inputs"):
        assert "`Data source` variable" in section
