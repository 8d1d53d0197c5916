"""In headless Chromium: a stray U+2069 in a ``<bdi>`` reverses no other name, and the incident
list's 10 s refresh keeps keyboard focus where it was and can be paused (WCAG 2.1 success
criteria 2.4.3 Focus Order and 2.2.2 Pause, Stop, Hide).

The refresh replaced the table's ``<tbody>`` under the focused incident link: focus fell back to
``<body>`` every 10 s, and the next Tab started from the top of the page. Then it waited while the
focused link was gone from the fresh list, which stalled it for good (the status still said
"Refreshes every 10 s") with focus on the "older incidents" link (its href names the last row, so
it changes with every new incident) or on an incident that new ones pushed to the next page: it
now refreshes, keeps focus on the paging link (matched by id) or moves it to the row at the same
position, and says so in the status line. Pages are rendered by
TestClient and opened from files with a stubbed ``fetch`` and a fast timer (as
``test_ui_readability_browser.py`` does); the bidi check renders
:func:`~fleetmind.serving.ui.router.bdi` output into a ``data:`` page. Needs Debian's
``chromium`` and ``chromium-driver`` and Selenium; skipped with the reason when they are missing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from serving_helpers import wait_for
from test_ui import _flood, login, make_settings
from test_ui_bidi_stray_pdi import STRAY

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import router as ui_router

webdriver = pytest.importorskip("selenium.webdriver")
from test_ui_browser import browser  # noqa: E402, F401 (the fixture)

pytestmark = pytest.mark.external
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# the left edge (CSS px) of the first occurrence of each word of arguments[0] in #p
WORD_LEFT_JS = """
const out = {}; const w = document.createTreeWalker(document.getElementById("p"), NodeFilter.SHOW_TEXT);
for (let n = w.nextNode(); n; n = w.nextNode()) for (const word of arguments[0]) {
  const i = n.data.indexOf(word);
  if (i >= 0 && !(word in out)) {
    const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + word.length);
    out[word] = r.getBoundingClientRect().left;
  }
}
return out;
"""


def test_a_stray_pdi_in_a_bdi_reverses_no_other_name(browser: object) -> None:  # noqa: F811
    """Cluster ``A`` U+2069 U+202E ``edge`` in an incident's list of clusters: its PDI closed the
    ``<bdi>``'s isolate and the override reversed ``c0, c1`` and the words after them."""
    pieces = ", ".join(ui_router.bdi(c) for c in (STRAY, "c0", "c1"))
    page = f'<!doctype html><meta charset="utf-8"><p id="p">clusters {pieces} · first alert</p>'
    browser.get("data:text/html;charset=utf-8," + quote(page))
    left = browser.execute_script(WORD_LEFT_JS, ["clusters", "c0", "c1", "first"])
    assert left["clusters"] < left["c0"] < left["c1"] < left["first"], left


def _js_string(text: str) -> str:
    return json.dumps(text).replace("</", "<\\/")


ACTIVE_JS = (
    "const a = document.activeElement;return [a.tagName, a.getAttribute('href'), a.isConnected];"
)


def test_the_list_refresh_keeps_focus_and_can_be_paused(
    tmp_path: Path,
    browser: object,  # noqa: F811
) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        login(c)
        ids = _flood(c, 8)
        shown = c.get("/ui/").text
        _flood(c, 2)  # while the page is open: new rows above the focused one
        fresh = c.get("/ui/").text
    # the page's fetch answers with the fresh list and counts its calls; its 10 s timer runs
    # every 50 ms
    stub = (
        "window.fetches = 0;"
        f"window.fetch = async () => {{ window.fetches++; return new Response({_js_string(fresh)}, "
        "{status: 200}); };"
        "const every = window.setInterval; window.setInterval = (f, ms) => every(f, 50);"
    )
    added = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": stub})
    try:
        (tmp_path / "list.html").write_text(shown)
        browser.get((tmp_path / "list.html").as_uri())
        target = f"/ui/incidents/{ids[3]}"
        # focus the link (one script: a refresh may replace the rows at any moment), then let
        # two refreshes run
        focused = browser.execute_script(
            "document.querySelector(`#incidents a[href='${arguments[0]}']`).focus();"
            "return window.fetches;",
            target,
        )
        fetches = lambda: browser.execute_script("return window.fetches")  # noqa: E731
        assert wait_for(lambda: fetches() >= focused + 2, timeout=5)
        newest = max(int(i) for i in re.findall(r'data-incident="(\d+)"', fresh))
        first_row = 'return document.querySelector("#incidents tbody tr").dataset.incident'
        assert int(browser.execute_script(first_row)) == newest  # the rows were replaced
        assert browser.execute_script(ACTIVE_JS) == ["A", target, True]  # focus stayed on it
        # the pause control: a button, shown, operable from the keyboard
        toggle = browser.find_element("id", "refresh-toggle")
        assert toggle.is_displayed() and toggle.tag_name == "button"
        browser.execute_script("arguments[0].focus()", toggle)
        toggle.send_keys(" ")  # Space presses a focused button
        assert toggle.text == "Resume auto-refresh"
        assert browser.find_element("id", "refresh-state").text == "Auto-refresh paused"
        before = fetches()
        browser.execute_script("return new Promise(r => setTimeout(r, 400))")
        assert fetches() == before  # paused: no refresh
        toggle.send_keys(" ")
        assert toggle.text == "Pause auto-refresh"
        assert wait_for(lambda: fetches() > before, timeout=5)
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
        )


# the page's fetch answers with the fresh list and counts its calls; its 10 s timer runs every
# 50 ms, but only while window.budget (ticks left) is above 0
GATED_STUB = (
    "window.fetches = 0; window.budget = 0;"
    "window.fetch = async () => {{ window.fetches++; return new Response({fresh}, {{status: 200}}); }};"
    "const every = window.setInterval;"
    "window.setInterval = (f, ms) => every(() => {{ if (window.budget > 0) {{ window.budget--; f(); }} }}, 50);"
)
FOCUS_JS = (
    "const a = document.activeElement;"
    "return [a.tagName, a.id, a.getAttribute('href'), a.isConnected,"
    " !!a.closest('#incidents, #pages')];"
)


@pytest.mark.parametrize("where", ["paging link", "incident pushed off the page"])
def test_the_refresh_goes_on_when_the_focused_link_leaves_the_list(
    tmp_path: Path,
    browser: object,  # noqa: F811
    where: str,
) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        login(c)
        _flood(c, ui_router.LIST_INCIDENTS + 3)  # a full page and an "older incidents" link
        shown = c.get("/ui/").text
        _flood(c, 2)  # while the page is open: the two last rows go to page 2
        fresh = c.get("/ui/").text
    newest = max(int(i) for i in re.findall(r'data-incident="(\d+)"', fresh))
    fresh_rows = re.findall(r'data-incident="(\d+)"', fresh)
    older = re.search(r"before=(\d+)", fresh).group(1)  # the "older incidents" link's
    added = browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": GATED_STUB.format(fresh=_js_string(fresh))},
    )
    try:
        (tmp_path / "list.html").write_text(shown)
        browser.get((tmp_path / "list.html").as_uri())
        if where == "paging link":
            selector = "#pages a[href*='before=']"
        else:  # page 1's last row: the two new incidents push it to page 2
            last = re.findall(r'data-incident="(\d+)"', shown)[-1]
            assert last not in fresh_rows
            selector = f"#incidents a[href='/ui/incidents/{last}']"
        browser.execute_script(
            "document.querySelector(arguments[0]).focus(); window.budget = 1;", selector
        )
        first_row = 'return document.querySelector("#incidents tbody tr").dataset.incident'
        # one tick refreshes the list (it used to wait for good while the link was gone)
        assert wait_for(lambda: int(browser.execute_script(first_row)) == newest, timeout=5)
        state = lambda: browser.find_element("id", "refresh-state").text  # noqa: E731
        if where == "paging link":
            # the same paging link, now below the new last row
            assert browser.execute_script(FOCUS_JS) == [
                "A", "page-older", f"/ui/?show=open&before={older}", True, True,
            ]  # fmt: skip
            assert state() == "Refreshes every 10 s"
        else:
            # the link in the row at the same position (the last row), and the user is told
            moved_to = f"/ui/incidents/{fresh_rows[-1]}"
            assert browser.execute_script(FOCUS_JS) == ["A", "", moved_to, True, True]
            assert state() == f"#{last} left this page; focus moved to #{fresh_rows[-1]}"
        # later ticks keep refreshing, focus stays where it went, the status line is back
        focus = browser.execute_script(FOCUS_JS)
        ticks = browser.execute_script("const n = window.fetches; window.budget = 3; return n;")
        assert wait_for(lambda: browser.execute_script("return window.fetches") >= ticks + 3)
        assert browser.execute_script(FOCUS_JS) == focus
        assert wait_for(lambda: state() == "Refreshes every 10 s", timeout=5)
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
        )


# a fetch whose body is read only when the test calls window.release()
HELD_BODY_STUB = (
    "window.fetches = 0; window.budget = 0;"
    "window.fetch = async () => {{ window.fetches++; return {{ok: true, redirected: false,"
    " text: () => new Promise(done => {{ window.release = () => done({fresh}); }})}}; }};"
    "const every = window.setInterval;"
    "window.setInterval = (f, ms) => every(() => {{ if (window.budget > 0) {{ window.budget--; f(); }} }}, 50);"
)


def test_pausing_while_a_refresh_reads_its_answer_leaves_the_list_as_it_is(
    tmp_path: Path,
    browser: object,  # noqa: F811
) -> None:
    # Pause pressed while a tick was reading the fresh page: the tick still replaced the rows, and
    # when the focused incident had left them it wrote "left this page" over "Auto-refresh paused"
    with TestClient(create_app(make_settings(tmp_path))) as c:
        login(c)
        _flood(c, 5)
        shown = c.get("/ui/").text
        _flood(c, 2)
        fresh = c.get("/ui/").text
    added = browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": HELD_BODY_STUB.format(fresh=_js_string(fresh))},
    )
    try:
        (tmp_path / "list.html").write_text(shown)
        browser.get((tmp_path / "list.html").as_uri())
        first_row = 'return document.querySelector("#incidents tbody tr").dataset.incident'
        before = browser.execute_script(first_row)
        browser.execute_script("window.budget = 1;")
        assert wait_for(lambda: browser.execute_script("return window.fetches") == 1, timeout=5)
        assert wait_for(lambda: browser.execute_script("return !!window.release"), timeout=5)
        browser.find_element("id", "refresh-toggle").click()
        browser.execute_script("window.release();")
        browser.execute_script("return new Promise(done => setTimeout(done, 300));")
        assert browser.execute_script(first_row) == before
        assert browser.find_element("id", "refresh-state").text == "Auto-refresh paused"
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
        )
