"""The pages read well at any width: the rendered HTML and SVG of the incident list, an incident
and the fleet view (TestClient; ``test_ui_readability_browser.py`` measures the same in Chromium).

A fleet with long names (GKE node pools: every node of a pool shares its first 40 characters)
in two clusters, as ``long_client`` serves it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from test_ui import TOKEN, _alert_row, _flood, _incident_row, _page_csrf, login, make_settings
from ui_helpers import storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.ui.svg import (
    MIN_FONT_PX,
    MIN_SCALE,
    path_svg,
    propagation_tree,
    text_width,
    timeline_svg,
    tree_svg,
)

CLUSTERS = ("us-central1-prod-gpu-cluster-a", "europe-west4-prod-gpu-cluster-b")
POOL = "gke-{c}-prod-a100-highmem-pool-8f3c2d1e-x7k{i}"
LONG_ALERT = "GPUTemperatureAbove85CFor10MinutesOnTheAcceleratorBoardOfTheHost"


def host(cluster: int, i: int) -> str:
    return POOL.format(c=CLUSTERS[cluster].split("-prod")[0], i=i)


def long_graph(path: Path) -> Path:
    """Two clusters of two hosts with two A100s each, every host named like its pool."""
    nodes, edges = [], []
    for ci, c in enumerate(CLUSTERS):
        nodes.append({"id": c, "kind": "cluster", "cluster": c, "match": {"cluster": c}})
        for i in range(2):
            h = host(ci, i)
            hid = f"{c}/host/{h}"
            nodes.append({"id": hid, "kind": "host", "cluster": c,
                          "match": {"cluster": c, "node": h}})  # fmt: skip
            edges.append({"src": hid, "dst": c, "kind": "member_of"})
            for g in range(2):
                gid = f"{c}/gpu/{h}/{g}"
                nodes.append({"id": gid, "kind": "gpu", "cluster": c, "attrs": {"model": "A100"},
                              "match": {"cluster": c, "node": h, "gpu": str(g)}})  # fmt: skip
                edges.append({"src": gid, "dst": hid, "kind": "attached_to"})
    path.write_text(json.dumps({"name": "longnames", "nodes": nodes, "edges": edges}))
    return path


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The example graph with the storm of ``ui_helpers`` (host c0-h1 down), signed in."""
    with TestClient(create_app(make_settings(tmp_path))) as c:
        r = c.post("/api/v1/alerts", json=webhook(storm_alerts()),
                   headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        login(c)
        yield c


@pytest.fixture
def long_client(tmp_path: Path) -> Iterator[TestClient]:
    """The long-named fleet: GPU 1 of the second host of cluster a raises an XID, with a long
    alert name beside it; signed in."""
    graph = long_graph(tmp_path / "graph.json")
    with TestClient(create_app(make_settings(tmp_path, graph=str(graph)))) as c:
        labels = {"cluster": CLUSTERS[0], "node": host(0, 1), "gpu": "1", "severity": "critical"}
        alerts = [alert({**labels, "alertname": name}, fingerprint=name)
                  for name in ("GPUXidError", LONG_ALERT)]  # fmt: skip
        r = c.post("/api/v1/alerts", json=webhook(alerts),
                   headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        login(c)
        yield c


def css_rules(html: str) -> dict[str, str]:
    """The page's ``<style>`` rules outside ``@media``: selector -> declarations (no spaces);
    the ``@media (max-width: 600px)`` ones under ``"600:<selector>"``."""
    style = re.sub(
        r"/\*.*?\*/", "", re.search(r"<style>(.*?)</style>", html, re.S).group(1), flags=re.S
    )
    rules: dict[str, str] = {}
    narrow = re.search(r"@media \(max-width: 600px\) \{(.*?\})\s*\}", style, re.S)
    for prefix, text in (("", style.replace(narrow.group(0), "")), ("600:", narrow.group(1))):
        for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", text):
            for one in sel.split(","):
                key = prefix + " ".join(one.split())
                rules[key] = rules.get(key, "") + re.sub(r"\s+", "", body) + ";"
    return rules


# ------------------------------------------------------------------------------ the list's refresh
def test_the_list_refresh_replaces_its_paging_links(client: TestClient) -> None:
    """The list refreshed its rows and counts every 10 s but not the "older incidents" link:
    new incidents pushed rows off the first page, and the stale link (below the old last row)
    skipped them, so they were on no page. The refresh replaces every part the query decides."""
    html = client.get("/ui/").text
    script = html.split("<script", 1)[1]
    replaced = set(re.findall(r'"([^"]+)"', re.search(r"const PARTS = \[(.*?)\]", script).group(1)))
    assert {"#incidents tbody", ".sub", "#pages"} <= replaced
    assert "for (const part of PARTS)" in script and "fresh = doc.querySelector(part)" in script
    assert ".replaceWith(document.adoptNode(fresh))" in script
    # the server's side: page 1's link starts below its own last row, so page 2 follows on
    _flood(client, ui_router.LIST_INCIDENTS + 3)
    page1 = client.get("/ui/").text
    ids = [int(i) for i in re.findall(r'data-incident="(\d+)"', page1)]
    pages = re.search(r'<div class="muted" id="pages".*?</div>', page1, re.S).group(0)
    assert f"before={ids[-1]}" in pages


# --------------------------------------------------------------------- tables, badges and header
def test_words_times_and_badges_do_not_break_mid_word(client: TestClient) -> None:
    """At 1280 and 390 px cells broke inside words ("firin|g", "dn|s_f|ail|ure", "22:27:5|5
    UTC"): every cell had ``overflow-wrap: anywhere``. Only name and node cells may break
    anywhere (CSS Text 3, section 5.5), first at the ``<wbr>`` the page puts after slashes and
    between CamelCase words (HTML, "The wbr element"); badges, times and statuses stay whole."""
    html = client.get("/ui/incidents/1").text
    css = css_rules(html)
    assert "overflow-wrap" not in css["td"]
    assert "overflow-wrap:anywhere" in css["td.wrap"] and "min-width:" in css["td.wrap"]
    for sel in (".badge", "td.when", "td.nowrap"):
        assert "white-space:nowrap" in css[sel], sel
    # phones: a time may break between its date and its clock, never inside either
    assert "white-space:normal" in css["600:td.when"] and "nowrap" in css["600:td.when span"]
    table = re.search(
        r'<div class="table-scroll"><table[^>]*id="alert-table">(.*?)</table>', html, re.S
    )
    assert table, "the alert table does not scroll in its own box"
    rows = re.findall(r"<tr><td([^>]*)>(.*?)</td><td([^>]*)>.*?</td><td([^>]*)>.*?</td>\s*<td([^>]*)>",
                      table.group(1), re.S)  # fmt: skip
    assert rows
    for when, text, name, node, status in rows:
        assert 'class="muted when"' in when and re.fullmatch(
            r"<span>\d{4}-\d\d-\d\d</span> <span>\d\d:\d\d:\d\d UTC</span>", text
        )
        assert 'class="wrap"' in name and 'class="mono wrap"' in node
        assert 'class="nowrap"' in status
    assert "Gpu<wbr>Xid<wbr>Error" in table.group(
        1
    ) and "c0/<wbr>gpu/<wbr>c0-h1/<wbr>1" in table.group(1)
    listing = client.get("/ui/").text
    cells = re.findall(r"<td([^>]*)>", listing.split("<tbody>", 1)[1])
    wrap = [c for c in cells if "wrap" in c and "nowrap" not in c]
    assert all("top-cause" in c or c == ' class="wrap"' for c in wrap), wrap  # cause, clusters
    assert sum('class="nowrap"' in c for c in cells) == 6 * 2  # 6 a row, two incidents


def test_breakable_names_break_between_words_never_inside_a_number() -> None:
    """``<wbr>`` after a slash, between CamelCase words; a number keeps its unit (``85C``)."""
    brk = ui_router.breakable
    assert brk("GPUXidError") == "GPU<wbr>Xid<wbr>Error"
    assert brk("c0/gpu/c0-h1/1") == "c0/<wbr>gpu/<wbr>c0-h1/<wbr>1"
    assert "Above85C<wbr>For10<wbr>Minutes" in brk("TempAbove85CFor10Minutes")
    assert brk("<b>&") == "&lt;b&gt;&amp;"  # escaped


def test_the_header_wraps_instead_of_collapsing(client: TestClient) -> None:
    """At 390 px the header's links broke over lines under a fixed 52 px bar ("Incidents /
    Fleet / API" stacked, the scopes in four lines): the bar grows and wraps, links stay on one
    line, and below 600 px the scopes are left out (the Sign out button stays)."""
    html = client.get("/ui/").text
    css = css_rules(html)
    top = css["header.top"]
    assert "min-height:52px" in top and "flex-wrap:wrap" in top and ";height:" not in ";" + top
    nav = css["header.top nav a"]
    assert "white-space:nowrap" in nav and "display:inline-block" in nav
    assert "display:none" in css["600:header.top .who"]
    assert "margin-left:auto" in css["600:header.top .who + form"]
    assert "signed in · " in html  # wider screens still say it


# ---------------------------------------------------------------------------------------- fleet
def test_fleet_names_are_cut_in_the_middle_and_state_their_units(long_client: TestClient) -> None:
    """Node names were cut at their end, so every node of a pool read the same
    ("gke-us-central0-prod-a10…") and the model became "A10…"; the count had no unit. Names give
    way in the middle (their ends differ) and the model and count are never cut."""
    html = long_client.get("/ui/fleet").text
    nodes = re.findall(r'<div class="name"><span class="mono" title="([^"]+)">([^<]+)</span>'
                       r'<span class="muted">([^<]+)</span></div>', html)  # fmt: skip
    assert len(nodes) == 4
    shown = [short for _, short, _ in nodes]
    assert len(set(shown)) == 4
    for full, short, model in nodes:
        assert len(short) <= ui_router.NODE_NAME_CHARS and "…" in short
        assert short.endswith(full[-12:]) and short.startswith("gke-")
        assert model == "A100 · 0.0/2 GPUs allocated"
    rule = css_rules(html)[".node .name > span"]
    assert "ellipsis" not in rule and "nowrap" not in rule


def test_fleet_gpus_have_accessible_names_and_a_list_of_flagged_ones(client: TestClient) -> None:
    """A GPU square was an empty ``<span>`` with a ``title``: mouse only. Each is an image
    named by the same text (WAI-ARIA 1.2, role ``img``: ``aria-label``), and each node lists its
    flagged GPUs in a visually hidden list (the cluster's "GPUs flagged" count) for screen
    readers."""
    html = client.get("/ui/fleet").text
    squares = re.findall(r'<span class="gpu[^"]*"[^>]*>', html)
    assert squares
    for sq in squares:
        label = re.search(r'role="img" aria-label="([^"]+)" title="([^"]+)"', sq)
        assert label and label.group(1) == label.group(2) and label.group(1).startswith("GPU ")
    lists = re.findall(r'<ul class="visually-hidden flagged" aria-label="flagged GPUs of ([^"]+)">'
                       r"(.*?)</ul>", html)  # fmt: skip
    flagged = {node: re.findall(r"<li>([^<]+)</li>", items) for node, items in lists}
    assert len(flagged["c0-h1"]) == 8 and all("open incident: #" in t for t in flagged["c0-h1"])
    counts = [int(n) for n in re.findall(r'<div class="stat(?: bad-count)?"[^>]*>(\d+)</div>'
                                         r'<div class="muted">GPUs flagged', html)]  # fmt: skip
    assert sum(counts) == sum(len(v) for v in flagged.values())
    css = css_rules(html)[".visually-hidden"]
    assert "position:absolute" in css and "width:1px" in css and "clip:rect(0000)" in css


# ------------------------------------------------------------------------------------- drawings
def _font_sizes(svg: str) -> list[float]:
    return [float(s) for s in re.findall(r'font-size="([\d.]+)"', svg)]


def _min_scale(svg: str) -> float:
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
    return float(re.search(r'style="min-width:([\d.]+)px"', svg).group(1)) / width


def test_every_drawing_keeps_its_text_10px_or_more(long_client: TestClient) -> None:
    """The guide promises graph text of 10 px or more, but edge labels and kind tags were 10 px
    in graphs that shrink to 80 % (8 px), and the timeline had no ``min-width`` at all (0.45 at
    390 px). Every drawing shrinks only as far as its smallest text stays 10 px; then it scrolls."""
    html = long_client.get("/ui/incidents/1").text
    svgs = re.findall(r"<svg .*?</svg>", html, re.S)
    assert any('class="timeline"' in s for s in svgs) and any(
        'class="path-graph"' in s for s in svgs
    )
    path = ["a/host/h", "a/gpu/h/1", "a/pod/p"]
    svgs.append(path_svg(path, {"a/host/h": "host"}, {"a/pod/p"}, ["attached_to", "runs_on"]))
    for svg in svgs:
        scale = _min_scale(svg)  # every drawing has a min-width
        assert scale == pytest.approx(MIN_SCALE, abs=0.002)
        assert min(_font_sizes(svg)) * scale >= MIN_FONT_PX - 0.01


def test_boxes_fit_their_kind_tag() -> None:
    """A larger kind tag must not leave a short node's box (``REGISTRY · CAUSE`` is wider than
    ``global/registry``)."""
    from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode

    g = DependencyGraph("g", [GraphNode("global/registry", "registry", None),
                              GraphNode("c/pod/p", "pod", "c")],
                        [GraphEdge("c/pod/p", "global/registry", "depends_on")])  # fmt: skip
    depth, edges = propagation_tree(g, "global/registry", {"c/pod/p"})
    svg = tree_svg(depth, edges, {"global/registry": "registry", "c/pod/p": "pod"}, {"c/pod/p"})
    box = re.search(r'<g class="node root">.*?width="([\d.]+)".*?letter-spacing=".4">([^<]+)<', svg)
    tag = box.group(2)
    assert tag == "REGISTRY · CAUSE"
    assert 13 + text_width(tag, 11, bold=True) + 0.4 * len(tag) <= float(box.group(1)) - 10


def test_the_width_estimate_is_never_short_of_dejavu_sans() -> None:
    """The estimate must not be narrower than the widest common UI font, DejaVu Sans (Linux's
    ``system-ui``); advance widths in em from its ``hmtx`` table (DejaVu Sans 2.37, Book/Bold)."""
    dejavu = {"W": 0.989, "M": 0.863, "m": 0.974, "w": 0.818, "A": 0.684, "O": 0.787,
              "a": 0.613, "i": 0.278, "0": 0.636, " ": 0.318, "·": 0.318, "_": 0.5, "/": 0.337}  # fmt: skip
    for ch, em in dejavu.items():
        assert text_width(ch * 10, 11) >= 10 * em * 11, ch
    assert text_width("AAAA", 11, bold=True) >= 4 * 0.774 * 11  # Bold A


def _labels(svg: str) -> list[tuple[float, str, str | None]]:
    """``(x of the text's end, shown text, full text from its <title> or None)`` per bar."""
    out = []
    for m in re.finditer(r'(?:<g><title>([^<]*)</title>)?<text x="([\d.]+)" y="[\d.]+" '
                         r'font-size="[\d.]+" fill="#334155" text-anchor="end">([^<]*)</text>', svg):  # fmt: skip
        out.append((float(m.group(2)), m.group(3), m.group(1)))
    return out


def test_timeline_labels_fit_their_column_and_keep_their_numbers() -> None:
    """Labels of capitals ran off the drawing's left edge: the column was sized at 6.4 px a
    character and capped at 40 %. A label that does not fit is shortened (its node in the middle,
    then its alert name after a whole word, so ``85C`` survives) with its full text in a
    ``<title>`` (SVG 2, section 5.7: the tooltip)."""
    from html import unescape

    events = [
        (0.0, None, ("GPUXidError", "gke-us-central0-prod-a100-highmem-pool-8f3c2d1e-x7k1/1"), "firing"),
        (10.0, None, ("A" * 200, "c1-h3"), "firing"),
        (20.0, None, (LONG_ALERT, "gke-us-central0-prod-a100-highmem-pool-8f3c2d1e-x7k1/1"), "firing"),
        (30.0, 90.0, ("KubeNodeNotReady", "c0-h2"), "resolved"),
        (40.0, None, "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW", "firing"),
    ]  # fmt: skip
    svg = timeline_svg(events)
    labels = _labels(svg)
    assert len(labels) == 5
    for end, shown, full in labels:
        text = unescape(shown)
        assert end - text_width(text, 11) >= 4, text  # inside the drawing, 4 px to spare
        assert (full is None) == ("…" not in text)
    shown = {unescape(s): unescape(f) if f else None for _, s, f in labels}
    assert "KubeNodeNotReady · c0-h2" in shown and shown["KubeNodeNotReady · c0-h2"] is None
    xid = next(s for s in shown if s.startswith("GPUXidError · "))
    assert xid.endswith("8f3c2d1e-x7k1/1") and "…" in xid  # the node gave way in its middle
    temp = next(s for s in shown if s.startswith("GPUTemperature"))
    assert "Above85C…" in temp and temp.endswith("x7k1/1")  # cut after a word: the 85C stays
    assert shown[temp] == f"{LONG_ALERT} · gke-us-central0-prod-a100-highmem-pool-8f3c2d1e-x7k1/1"


def test_timeline_labels_name_host_gpu_and_cluster(long_client: TestClient) -> None:
    """The timeline named a node by its last segment only ("GPUXidError · 1"): GPU 1 of which
    host? It names the node without cluster and kind (``host/gpu``), and with its cluster when
    the incident's nodes span several."""
    w = ui_router.where
    assert w("c0/gpu/c0-h1/3") == "c0-h1/3" and w("c0/gpu/c0-h1/3", True) == "c0/c0-h1/3"
    assert w("c0/host/c0-h2") == "c0-h2" and w("c0/svc/ns/api") == "ns/api"
    assert w("global/dns") == "dns" and w("global/dns", True) == "global/dns" and w(None) == "-"
    html = long_client.get("/ui/incidents/1").text
    timeline = re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)
    shown = [s for _, s, _ in _labels(timeline)]
    assert any(s.startswith("GPUXidError · gke-") and s.endswith("-x7k1/1") for s in shown), shown
    # an incident whose alerts are on nodes of two clusters: each label says which
    with long_client.app.state.services.db.write() as conn:
        inc = _incident_row(conn, clusters=list(CLUSTERS), nodes=[])
        for ci in (0, 1):
            _alert_row(conn, inc, f"two-{ci}", alertname="KubeNodeNotReady",
                       node=f"{CLUSTERS[ci]}/host/{host(ci, 0)}", starts_ts=1.0 + ci)  # fmt: skip
    timeline = re.search(
        r'<svg class="timeline".*?</svg>', long_client.get(f"/ui/incidents/{inc}").text, re.S
    )
    labels = [f or s for _, s, f in _labels(timeline.group(0))]
    assert labels == [f"KubeNodeNotReady · {CLUSTERS[ci]}/{host(ci, 0)}" for ci in (0, 1)]


# ------------------------------------------------------------------------------------- feedback
def test_a_refused_feedback_form_can_be_reloaded_and_takes_the_focus(client: TestClient) -> None:
    """A refused form left the browser at its POST-only action: reloading it or coming back to it
    was a 404, and the reason was shown at the top of the page, away from the form. ``GET`` of
    the action leads to the form (303 See Other, RFC 9110 section 15.4.4), and the reason stands
    beside the form and takes the focus: the form's action ends in ``#flash`` (a focusable
    fragment target is focused, HTML "scroll to the fragment"; the fragment is kept across the
    redirect of a saved form, RFC 9110 section 10.2.2), and the page's script focuses it too."""
    r = client.get("/ui/incidents/1/feedback", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/incidents/1#feedback"
    r = client.get("/ui/incidents/abc/feedback", follow_redirects=False)
    assert r.status_code == 404 and 'id="error-message"' in r.text
    page = client.get("/ui/incidents/1").text
    assert 'action="/ui/incidents/1/feedback#flash" id="feedback-form"' in page
    # every feedback form, the causes' Confirm buttons too, lands on the message it leads to
    actions = re.findall(r'action="(/ui/incidents/1/feedback[^"]*)"', page)
    assert len(actions) > 1 and set(actions) == {"/ui/incidents/1/feedback#flash"}
    form = {"csrf": _page_csrf(page), "root_cause": "c0/host/nope", "by": "ann", "note": "n"}
    r = client.post("/ui/incidents/1/feedback", data=form)
    assert r.status_code == 422
    card = r.text.split('<div class="card" id="feedback">', 1)[1].split('<div class="card"', 1)[0]
    flash = re.search(
        r'<div class="flash err" id="flash" tabindex="-1"\s+role="alert">([^<]+)', card
    )
    assert flash and "not a node of the served graph" in flash.group(1)
    assert r.text.count('id="flash"') == 1
    script = r.text.split("<script", 1)[1]
    assert 'document.querySelector("#flash.err")' in script and "refused.focus()" in script
    # saved: the thanks stand beside the form as well; a merged incident's note stays on top
    form["root_cause"] = "c0/host/c0-h1"
    r = client.post("/ui/incidents/1/feedback", data=form, follow_redirects=False)
    saved = client.get(r.headers["location"]).text
    card = saved.split('<div class="card" id="feedback">', 1)[1]
    assert 'class="flash ok" id="flash"' in card and 'role="status"' in card
