"""Pages opened from another site, and text with bidi controls from alerts.

* The double-submit CSRF cookie ``fm_csrf`` was ``SameSite=Strict``: a link from chat, a pager or
  the notifier's ``incident_url`` (a cross-site top-level navigation) arrived without it, the page
  set a new one, and every form already open in another tab (the login form; every feedback form
  when no token is set) failed as expired, its typed note lost. The cookie is ``SameSite=Lax``
  (sent on such GETs, never on a cross-site POST: RFC 6265bis section 5.4.7; OWASP, "SameSite"),
  and a stale feedback form from one of our pages comes back with what was typed.
* U+202E RIGHT-TO-LEFT OVERRIDE is legal in a Prometheus label value; one alert named with it
  reversed the other alerts' names and node ids on the timeline and the fleet view, where pieces
  of text were joined into one string. Each piece is isolated: ``<bdi>`` in HTML (HTML standard,
  "The bdi element"), U+2068 FSI ... U+2069 PDI in drawings and attributes (Unicode TR9, section
  2.7, "Explicit Directional Isolates").
* A paragraph separator (bidi class B: U+2029, U+0085 NEL, U+001C..U+001E; all legal in a label
  value) ends every isolate open before it (TR9 rule X8, "at the end of each paragraph"), and
  Chromium splits a ``<bdi>`` there: ``Disk`` U+2029 U+202E reversed the node after it on the
  timeline and the text after its ``<bdi>``. Shown as a space (display only).
* A feedback form of an incident merged since its page was opened (stale token or not) was
  redirected to the incident it was merged into, its message and what was typed lost: that page
  now comes with both, nothing saved.

Both in headless Chromium (which applies SameSite and draws bidi text):
``test_ui_crosssite_browser.py``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from test_ui import _incident_row, make_settings
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import auth
from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.ui.svg import isolate, text_width, timeline_svg

RLO, FSI, PDI = "\u202e", "\u2068", "\u2069"
BIDI_NAME = "Disk" + RLO  # an alert name ending in a right-to-left override (amtool accepts it)
# the same after a paragraph separator (bidi class B): U+2029, U+0085 NEL; shown as a space
PS_NAMES = {"Fan\u2029" + RLO: "Fan " + RLO, "Psu\u0085" + RLO: "Psu " + RLO}


def _alerts() -> list[dict]:
    """The storm of :mod:`ui_helpers`, plus an alert named with U+202E on its host ``c0-h1``."""
    alerts = storm_alerts()
    labels = {"alertname": BIDI_NAME, "cluster": "c0", "node": "c0-h1", "severity": "warning"}
    alerts.append(alert(labels, starts=alerts[1]["startsAt"], fingerprint="storm-bidi"))
    for i, name in enumerate(PS_NAMES):
        labels = {**labels, "alertname": name}
        alerts.append(alert(labels, starts=alerts[1]["startsAt"], fingerprint=f"storm-ps-{i}"))
    return alerts


@pytest.fixture
def open_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A service with no token (its pages open, every form on the ``fm_csrf`` cookie)."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    with TestClient(create_app(make_settings(tmp_path, api_token=None))) as c:
        assert c.post("/api/v1/alerts", json=webhook(_alerts())).status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


def _storm_id(c: TestClient) -> int:
    return next(i["id"] for i in c.get("/api/v1/incidents").json() if i["alert_count"] > 2)


def _page_csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


# ------------------------------------------------------------------------------ cross-site links
def test_the_csrf_cookie_is_lax_so_a_link_from_another_site_keeps_it(
    open_client: TestClient,
) -> None:
    r = open_client.get(f"/ui/incidents/{_storm_id(open_client)}")
    cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith("fm_csrf="))
    assert "samesite=lax" in cookie.lower() and "HttpOnly" in cookie
    # the login page sets the same cookie
    with TestClient(create_app(open_client.app.state.services.settings)) as fresh:
        r = fresh.get("/ui/login")
        cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith("fm_csrf="))
        assert "samesite=lax" in cookie.lower()


def test_a_stale_feedback_form_comes_back_with_what_was_typed(open_client: TestClient) -> None:
    c = open_client
    inc = _storm_id(c)
    c.get(f"/ui/incidents/{inc}")
    stale = "token-of-an-older-cookie-" + "x" * 8  # the cookie was set anew since the page
    typed = {"root_cause": TRUE_ROOT, "by": 'Carol <b>"', "note": "long </textarea> & explanation"}
    origin = {"Origin": "http://testserver"}  # the browser names our page
    r = c.post(f"/ui/incidents/{inc}/feedback", data={**typed, "csrf": stale}, headers=origin)
    assert r.status_code == 403 and "nothing was saved" in r.text
    form = r.text.split('id="feedback-form"', 1)[1].split("</form>", 1)[0]
    assert 'value="Carol &lt;b&gt;&#34;"' in form  # kept, escaped
    assert "long &lt;/textarea&gt; &amp; explanation</textarea>" in form
    assert c.get(f"/api/v1/incidents/{inc}/feedback").json() == []
    fresh = _page_csrf(form)
    assert fresh == c.cookies.get(auth.CSRF_COOKIE)  # the form now carries the current token
    r = c.post(
        f"/ui/incidents/{inc}/feedback",
        data={**typed, "csrf": fresh},
        headers=origin,
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"].endswith("feedback=saved")
    [fb] = c.get(f"/api/v1/incidents/{inc}/feedback").json()
    assert (fb["by"], fb["note"]) == (typed["by"], typed["note"])
    # without an Origin, or from another site: the bare refusal, nothing echoed
    for headers in ({}, {"Origin": "https://evil.example"}):
        r = c.post(f"/ui/incidents/{inc}/feedback", data={**typed, "csrf": stale}, headers=headers)
        assert r.status_code == 403 and 'id="feedback-form"' not in r.text
        assert "Carol" not in r.text


def _merged_away(c: TestClient, target: int) -> int:
    """A closed incident stored as merged into ``target`` (as the grouper merges two)."""
    with c.app.state.services.db.write() as conn:
        return _incident_row(
            conn, status="merged", merged_into=target, alert_count=0, firing_count=0, nodes=[],
            clusters=[],
        )  # fmt: skip


@pytest.mark.parametrize("stale", [True, False], ids=["stale-token", "valid-token"])
def test_a_feedback_form_of_a_merged_incident_keeps_its_message_and_what_was_typed(
    open_client: TestClient, stale: bool
) -> None:
    """The form of an incident merged since its page was opened: the page of the incident it was
    merged into, saying nothing was saved, with what was typed and a form posting there; it was
    a 303 to that page, the message and the typed note lost."""
    c = open_client
    target = _storm_id(c)
    page = c.get(f"/ui/incidents/{target}").text
    gone = _merged_away(c, target)
    typed = {"root_cause": TRUE_ROOT, "by": "Carol", "note": "long explanation <typed>"}
    csrf = "token-of-an-older-cookie-" + "x" * 8 if stale else _page_csrf(page)
    r = c.post(
        f"/ui/incidents/{gone}/feedback",
        data={**typed, "csrf": csrf},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == (403 if stale else 422)
    flash = re.search(r'id="flash"[^>]*>([^<]*)</div>', r.text).group(1)
    assert "nothing was saved" in flash
    assert f"Incident #{gone} was merged into this one" in r.text
    form = r.text.split('id="feedback-form"', 1)[0].rsplit("<form", 1)[1]
    assert f'action="/ui/incidents/{target}/feedback#flash"' in form
    form = r.text.split('id="feedback-form"', 1)[1].split("</form>", 1)[0]
    assert 'value="Carol"' in form and "long explanation &lt;typed&gt;</textarea>" in form
    assert c.get(f"/api/v1/incidents/{target}/feedback").json() == []
    assert c.get(f"/api/v1/incidents/{gone}/feedback").json() == []
    # saved again from that page: stored on the incident it was merged into
    r = c.post(
        f"/ui/incidents/{target}/feedback",
        data={**typed, "csrf": _page_csrf(form)},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"].endswith("feedback=saved")
    [fb] = c.get(f"/api/v1/incidents/{target}/feedback").json()
    assert fb["note"] == typed["note"]
    # a link to it (no form) still goes to the incident it was merged into
    r = c.get(f"/ui/incidents/{gone}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith(f"/ui/incidents/{target}?")


# ----------------------------------------------------------------------------------------- bidi
def test_isolate_wraps_only_text_that_can_reorder_its_neighbours() -> None:
    assert isolate("GpuXidError") == "GpuXidError"  # left-to-right: as it is
    assert isolate("c0/gpu/c0-h1/3") == "c0/gpu/c0-h1/3"
    assert isolate(BIDI_NAME) == FSI + BIDI_NAME + PDI
    assert isolate("שרת") == FSI + "שרת" + PDI  # right-to-left letters
    # a PDI of its own would close the isolate early: left out; an isolate it leaves open: closed
    assert isolate("x" + PDI + RLO) == FSI + "x" + RLO + PDI
    assert isolate("\u2067ab") == FSI + "\u2067ab" + PDI + PDI
    assert text_width(BIDI_NAME, 11) == text_width("Disk", 11)  # controls take no room


@pytest.mark.parametrize("sep", ["\u2029", "\u0085", "\u001c", "\u001d", "\u001e", "\n", "\r"])
def test_a_paragraph_separator_is_shown_as_a_space_so_the_isolate_holds(sep: str) -> None:
    """A paragraph separator (bidi class B) ends every isolate open before it (Unicode TR9 rule
    X8), and Chromium splits a ``<bdi>`` there: the override after it reordered the text after
    the isolate."""
    assert isolate("Disk" + sep + RLO) == FSI + "Disk " + RLO + PDI
    assert isolate("Disk" + sep) == FSI + "Disk " + PDI
    assert ui_router.bdi("Disk" + sep + RLO) == f"<bdi>Disk {RLO}</bdi>"
    events = [(0.0, None, ("Disk" + sep + RLO, "c0-h1"), "firing")]
    [label] = re.findall(r'fill="#334155" text-anchor="end">([^<]*)</text>', timeline_svg(events))
    assert html.unescape(label) == f"{FSI}Disk {RLO}{PDI} · c0-h1"


def test_timeline_labels_isolate_the_alert_name_and_the_node() -> None:
    events = [
        (0.0, None, (BIDI_NAME, "c0-h1"), "firing"),
        (1.0, None, ("KubeNodeNotReady", "c0-h1"), "firing"),
        (
            2.0,
            None,
            ("Disk" + RLO + "A" * 60, "gke-us-central0-prod-a100-highmem-pool-x7k1/1"),
            "firing",
        ),
    ]
    texts = re.findall(r'fill="#334155" text-anchor="end">([^<]*)</text>', timeline_svg(events))
    texts = [html.unescape(t) for t in texts]
    assert texts[0] == f"{FSI}{BIDI_NAME}{PDI} · c0-h1"
    assert texts[1] == "KubeNodeNotReady · c0-h1"  # nothing to isolate: unchanged
    # a shortened label keeps its isolates whole: the cut name, then the node
    assert texts[2].startswith(FSI + BIDI_NAME + "AAA") and "…" + PDI + " · gke-" in texts[2]
    assert texts[2].endswith("x7k1/1")


def test_pages_isolate_each_piece_of_alert_text(open_client: TestClient) -> None:
    c = open_client
    inc = _storm_id(c)
    page = c.get(f"/ui/incidents/{inc}").text
    timeline = re.search(r'<svg class="timeline".*?</svg>', page, re.S).group(0)
    assert f"{FSI}{BIDI_NAME}{PDI} · c0-h1</text>" in timeline
    assert "KubeNodeNotReady · c0-h1</text>" in timeline
    assert "clusters <bdi>c0</bdi> ·" in page
    assert '<td class="wrap"><bdi>c0</bdi></td>' in c.get("/ui/").text  # the incident list
    # who signed the feedback, in the summary line
    r = c.post(
        f"/ui/incidents/{inc}/feedback",
        data={"csrf": _page_csrf(page), "root_cause": TRUE_ROOT, "by": "Ann" + RLO, "note": ""},
    )
    root = re.search(r'id="engineer-root">(.*?)</div>', r.text, re.S).group(1)
    assert f"by <bdi>Ann{RLO}</bdi>)" in root and f"<bdi>{TRUE_ROOT}</bdi>" in root
    assert f'title="root cause given by {FSI}Ann{RLO}{PDI}"' in r.text
    # the fleet view: the host's marks each in a <bdi>, each GPU's text with the name isolated
    fleet = c.get("/ui/fleet").text
    node = re.search(r'data-node="c0-h1">(.*?)<div class="inc">(.*?)</div>', fleet, re.S)
    marks = node.group(2).split("; ")
    assert (
        f"<bdi>#{inc} {BIDI_NAME}</bdi>" in marks and f"<bdi>#{inc} KubeNodeNotReady</bdi>" in marks
    )
    titles = re.findall(r'title="(GPU [^"]*)"', node.group(1))
    assert titles and all(f"{FSI}#{inc} {BIDI_NAME}{PDI}" in html.unescape(t) for t in titles)
    # the stored data keeps the character
    names = {a["labels"]["alertname"] for a in c.get("/api/v1/alerts").json()}
    assert BIDI_NAME in names and set(PS_NAMES) <= names


def test_pages_show_a_paragraph_separator_in_alert_text_as_a_space(
    open_client: TestClient,
) -> None:
    c = open_client
    inc = _storm_id(c)
    page = c.get(f"/ui/incidents/{inc}").text
    timeline = html.unescape(re.search(r'<svg class="timeline".*?</svg>', page, re.S).group(0))
    fleet = c.get("/ui/fleet").text
    node = re.search(r'data-node="c0-h1">(.*?)<div class="inc">(.*?)</div>', fleet, re.S)
    titles = [html.unescape(t) for t in re.findall(r'title="(GPU [^"]*)"', node.group(1))]
    for shown in PS_NAMES.values():
        assert f"{FSI}{shown}{PDI} · c0-h1</text>" in timeline
        assert f"<bdi>#{inc} {shown}</bdi>" in node.group(2).split("; ")
        assert titles and all(f"{FSI}#{inc} {shown}{PDI}" in t for t in titles)
    r = c.post(
        f"/ui/incidents/{inc}/feedback",
        data={"csrf": _page_csrf(page), "root_cause": TRUE_ROOT, "by": "Ann\u2029" + RLO},
    )
    assert f"by <bdi>Ann {RLO}</bdi>)" in r.text
    assert f'title="root cause given by {FSI}Ann {RLO}{PDI}"' in r.text
    [fb] = c.get(f"/api/v1/incidents/{inc}/feedback").json()
    assert fb["by"] == "Ann\u2029" + RLO  # stored as sent
    assert ui_router.bdi("<x>") == "<bdi>&lt;x&gt;</bdi>"
