"""Accessibility and validity of the incident pages, checked in the rendered HTML and SVG (the
browser side is ``test_ui_a11y_browser.py``).

- The incident list's 10 s refresh replaced the table under the focused link (focus fell to
  ``<body>``, WCAG 2.1 SC 2.4.3) and could not be paused (SC 2.2.2): it now has a pause button
  and keeps focus on the same link. It waited while that link was gone from the fresh list, for
  good when the link was "older incidents" (whose href changes with every new incident): paging
  links now have ids, and a link that left the list hands focus to the row at its position.
- "and N more alert names (timeline below)": the timeline draws at most 40 bars, so most of those
  names were not below; the note no longer says so.
- The timeline told firing from resolved by colour alone (SC 1.4.1): resolved bars now have a
  dashed outline, each bar a tooltip with its status, and the page a key.
- Each cause's Confirm ``<form>`` sat inside its ``<h3>`` (HTML: a heading's content model is
  phrasing content, which a form is not), and every drawing declared ``<marker id="arrow">``
  (an id must be unique in its document, HTML "The id attribute"; WCAG 2.1 SC 4.1.1).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_ui import _alert_row, _flood, _incident_row, login, make_settings, storm

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.ui.svg import timeline_svg

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        storm(c)
        login(c)
        yield c


def test_the_list_refresh_has_a_pause_button_and_keeps_focus(client: TestClient) -> None:
    html = client.get("/ui/").text
    button = re.search(r'<button type="button"[^>]*id="refresh-toggle"[^>]*>([^<]+)</button>', html)
    assert button and button.group(1) == "Pause auto-refresh"  # a labelled, native button
    script = html.split("<script", 1)[1]
    assert 'toggle.addEventListener("click"' in script and "if (paused) return;" in script
    # focus on a link in a refreshed part: the same link is focused again (a paging link by its
    # id), or, when it left the list, one at its place; the refresh never waits on it
    assert "focusedLink()" in script and "again.focus(" in script and "standIn(row)" in script
    assert "if (!again) return;" not in script
    _flood(client, ui_router.LIST_INCIDENTS + 1)
    pages = client.get("/ui/").text.split('id="pages"', 1)[1].split("</div>", 1)[0]
    assert re.search(r'<a href="/ui/\?show=open&amp;before=\d+" id="page-older">', pages)
    pages = client.get("/ui/?before=10").text.split('id="pages"', 1)[1].split("</div>", 1)[0]
    assert '<a href="/ui/?show=open" id="page-newest">newest</a>' in pages
    assert " on" + "click=" not in html  # no inline handler (the CSP allows nonce'd scripts only)


def test_the_timeline_tells_status_by_more_than_colour() -> None:
    events = [
        (0.0, None, ("GPUFallenOffBus", "c1-h2/3"), "firing"),
        (30.0, 90.0, ("GPUXidFlap", "c1-h2/3"), "resolved"),
    ]
    svg = timeline_svg(events)
    bars = re.findall(r"<rect [^>]*>(?:<title>[^<]*</title></rect>)?", svg)
    firing = next(b for b in bars if 'fill="#dc2626"' in b)
    resolved = next(b for b in bars if 'fill="#94a3b8"' in b)
    assert "stroke-dasharray" in resolved and "stroke-dasharray" not in firing
    assert "<title>GPUFallenOffBus · c1-h2/3 (firing since +0.0 min)</title>" in firing
    assert "<title>GPUXidFlap · c1-h2/3 (resolved, +0.5 to +1.5 min)</title>" in resolved
    title = re.search(r'<svg class="timeline"[^>]*><title>([^<]*)</title>', svg).group(1)
    assert title.startswith("Alert timeline: 2 alerts (1 firing, 1 resolved) over 1.5 min")


def test_the_incident_page_has_a_timeline_key(client: TestClient) -> None:
    html = client.get("/ui/incidents/1").text
    key = re.search(r'<p class="muted timeline-key" id="timeline-key">(.*?)</p>', html, re.S)
    assert key and "firing" in key.group(1) and "resolved (dashed outline)" in key.group(1)


def test_no_form_in_a_heading_and_no_duplicate_ids(client: TestClient) -> None:
    html = client.get("/ui/incidents/1").text
    causes = re.findall(r'<div class="cause[^"]*" data-rank="(\d+)"', html)
    assert len(causes) >= 2  # several drawings on the page
    headings = re.findall(r"<h3>.*?</h3>", html, re.S)
    assert headings and not any("<form" in h or "<button" in h for h in headings)
    assert html.count('class="confirm"') == len(causes)  # each cause still has its Confirm
    ids = Counter(re.findall(r'\sid="([^"]+)"', html))
    assert not [i for i, n in ids.items() if n > 1], ids
    # each drawing's arrows use its own marker
    for rank in causes:
        svg = html.split(f'data-rank="{rank}"', 1)[1].split("</svg>", 1)[0]
        if "marker-end" in svg:
            assert f'<marker id="arrow-{rank}"' in svg
            assert set(re.findall(r'marker-end="url\(#([^)]+)\)"', svg)) == {f"arrow-{rank}"}


def test_more_alert_names_are_not_said_to_be_in_the_timeline(client: TestClient) -> None:
    """60 alert names: the sidebar lists 10, the timeline draws 40 bars; the note used to send
    the reader to the timeline for the other 50."""
    with client.app.state.services.db.write() as conn:
        inc = _incident_row(conn, alert_count=60, firing_count=60)
        for i in range(60):
            _alert_row(conn, inc, f"names-{i}", starts_ts=1000.0 + i, alertname=f"Name{i:02d}")
    html = client.get(f"/ui/incidents/{inc}").text
    note = re.search(r"and (\d+) more alert names([^<]*)</div>", html)
    assert note and note.group(1) == "50" and note.group(2) == ""
    assert "(timeline below)" not in html
