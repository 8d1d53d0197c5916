"""In headless Chromium: what a screen reader is given for each propagation drawing, and a phone's
fleet page (the HTML side is ``test_ui_accessibility.py``).

- Chromium's accessibility tree gave each drawing (``role="img"``) its title alone: the nodes it
  explains, its edge kinds and its "Not explained by this cause" line were in no node of the
  tree. Each drawing's accessible description (Chrome DevTools Protocol,
  ``Accessibility.getFullAXTree``: https://chromedevtools.github.io/devtools-protocol/tot/Accessibility/)
  now holds them.
- At 375 px a cluster's heading touched its first figure ("Cluster4 nodes"): the row now wraps.

Pages are rendered by TestClient and opened from files (as ``test_ui_readability_browser.py``
does). Needs Debian's ``chromium`` and ``chromium-driver`` and Selenium; skipped with the reason
when they are missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_ui_accessibility import client  # noqa: F401 (the fixture)

webdriver = pytest.importorskip("selenium.webdriver")
from test_ui_browser import browser  # noqa: E402, F401 (the fixture)
from test_ui_readability_browser import open_page  # noqa: E402

pytestmark = pytest.mark.external
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def test_each_drawing_has_its_nodes_and_notes_as_its_description(
    tmp_path: Path,
    client: TestClient,  # noqa: F811
    browser: object,  # noqa: F811
) -> None:
    open_page(browser, client.get("/ui/incidents/1").text, tmp_path / "incident.html", 1280)
    # the causes after the first are collapsed: open them, as a reader would
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    tree = browser.execute_cdp_cmd("Accessibility.getFullAXTree", {})["nodes"]
    drawings = {}
    for node in tree:
        name = (node.get("name") or {}).get("value", "")
        if (node.get("role") or {}).get("value") == "image" and name.startswith("Propagation"):
            drawings[name] = (node.get("description") or {}).get("value", "")
    assert len(drawings) >= 3, drawings
    for name, said in drawings.items():  # each names its cause and says what it is
        cause = name.split("(", 1)[1].split(")", 1)[0]
        assert said.startswith(f"Nodes drawn, from the cause: {cause} ("), (name, said)
    reached = [s for s in drawings.values() if "reached from" in s and ", alerting)" in s]
    assert reached and all(" along " in s for s in reached), drawings
    notes = [s for s in drawings.values() if "Not explained by this cause" in s]
    assert notes and all("c0/host/c0-h1" in s for s in notes), drawings


# each cluster card's heading text (a Range over it) and first figure, in CSS px
HEAD_JS = """
return [...document.querySelectorAll(".card.cluster")].map(card => {
  const h = card.querySelector("h2"), stat = card.querySelector(".stats > div");
  const r = document.createRange(); r.selectNodeContents(h);
  const t = r.getBoundingClientRect(), s = stat.getBoundingClientRect();
  return {name: h.textContent, right: t.right, bottom: t.bottom, left: s.left, top: s.top};
});
"""


@pytest.mark.parametrize("width", [320, 375, 1280])
def test_a_clusters_heading_never_touches_its_figures(
    tmp_path: Path,
    client: TestClient,  # noqa: F811
    browser: object,  # noqa: F811
    width: int,
) -> None:
    open_page(browser, client.get("/ui/fleet").text, tmp_path / "fleet.html", width)
    heads = browser.execute_script(HEAD_JS)
    assert heads
    for h in heads:  # beside the heading with room between, or under it
        assert h["left"] - h["right"] >= 8 or h["top"] >= h["bottom"], (width, h)
