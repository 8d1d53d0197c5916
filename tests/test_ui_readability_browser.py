"""The pages' readability measured in headless Chromium (Selenium) at 1280, 390 and 320 px.

Pages are rendered by TestClient (the fleet with long names of ``test_ui_readability.py``) and
opened from files, so no server process is needed; the list's refresh gets a stubbed ``fetch``
and a fast timer. Needs Debian's ``chromium`` and ``chromium-driver`` and Selenium, like
``test_ui_browser.py``; skipped with the reason when they are missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, wait_for, webhook
from test_ui import TOKEN, _flood, _page_csrf, login, make_settings
from test_ui_browser import CHROME_FLAGS, _binary
from test_ui_readability import CLUSTERS, LONG_ALERT, host, long_graph
from ui_helpers import storm_alerts

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.ui.svg import MIN_FONT_PX

webdriver = pytest.importorskip("selenium.webdriver")

pytestmark = pytest.mark.external


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    chrome = _binary("chromium", "chromium-browser", "google-chrome")
    driver_bin = _binary("chromedriver")
    if chrome is None or driver_bin is None:
        pytest.skip("headless Chromium not installed (Debian packages chromium, chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("chrome")
    opts = Options()
    opts.binary_location = chrome
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp / 'profile'}")
    drv = webdriver.Chrome(
        service=Service(driver_bin, log_output=str(tmp / "chromedriver.log")), options=opts
    )
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture
def long_fleet(tmp_path: Path) -> Iterator[TestClient]:
    """The long-named fleet; GPU 1 of a host alerts under three names, one of 60 capitals."""
    graph = long_graph(tmp_path / "graph.json")
    with TestClient(create_app(make_settings(tmp_path, graph=str(graph)))) as c:
        labels = {"cluster": CLUSTERS[0], "node": host(0, 1), "gpu": "1", "severity": "critical"}
        names = ("GPUXidError", LONG_ALERT, "W" * 60)
        alerts = [alert({**labels, "alertname": n}, fingerprint=n[:20]) for n in names]
        r = c.post("/api/v1/alerts", json=webhook(alerts),
                   headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        login(c)
        yield c


def open_page(driver: object, html: str, path: Path, width: int, fragment: str = "") -> None:
    """``html`` opened from ``path`` in a viewport ``width`` CSS px wide (a phone's below 600:
    Chrome DevTools' Emulation.setDeviceMetricsOverride, as test_ui_browser.py does)."""
    path.write_text(html)
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.get(path.as_uri() + fragment)


def test_the_list_refresh_leaves_no_incident_on_no_page(
    tmp_path: Path, driver: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New incidents arrive while the first page is open: after its refresh, that page and the
    one its "older incidents" link leads to hold every incident between them (the link used to
    keep the old last row, and the rows pushed off the page were on none)."""
    monkeypatch.setattr(ui_router, "LIST_INCIDENTS", 5)
    with TestClient(create_app(make_settings(tmp_path))) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts()),
               headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        c.app.state.services.incidents.process_pending()
        login(c)
        _flood(c, 6)
        shown = c.get("/ui/").text
        _flood(c, 3)  # while the page is open
        fresh = c.get("/ui/").text
        # the page's fetch answers with the fresh list; its 10 s timer runs every 20 ms
        stub = (
            f"window.fetch = async () => new Response({_js_string(fresh)}, {{status: 200}});"
            "const every = window.setInterval; window.setInterval = (f, ms) => every(f, 20);"
        )
        added = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": stub})
        try:
            open_page(driver, shown, tmp_path / "list.html", 1280)
            newest = max(int(i) for i in re.findall(r'data-incident="(\d+)"', fresh))
            first_row = 'return document.querySelector("#incidents tbody tr").dataset.incident'
            assert wait_for(lambda: int(driver.execute_script(first_row)) == newest, timeout=5)
            page1 = [int(i) for i in driver.execute_script(
                'return [...document.querySelectorAll("#incidents tbody tr")].map(r => r.dataset.incident)'
            )]  # fmt: skip
            href = driver.execute_script(
                'return document.querySelector("#pages a[href*=before]").getAttribute("href")'
            )
        finally:
            driver.execute_cdp_cmd(
                "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
            )
        page2 = [int(i) for i in re.findall(r'data-incident="(\d+)"', c.get(href).text)]
    assert page2, href
    between = set(range(min(page2), max(page1) + 1))
    assert between <= set(page1) | set(page2), sorted(between - set(page1) - set(page2))


def _js_string(text: str) -> str:
    import json

    return json.dumps(text).replace("</", "<\\/")


# The lines a text is set on: its text nodes' client rects, a new line where one starts below
# the bottom of the line before.
LINES_JS = """
const out = [];
for (const el of document.querySelectorAll(arguments[0])) {
  const rects = [];
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let t = walk.nextNode(); t; t = walk.nextNode()) {
    const r = document.createRange(); r.selectNodeContents(t);
    rects.push(...[...r.getClientRects()].filter(x => x.width > 0));
  }
  if (!rects.length) continue;
  rects.sort((a, b) => a.top - b.top);
  let lines = 1, bottom = rects[0].bottom;
  for (const x of rects) { if (x.top >= bottom - 1) { lines += 1; } bottom = Math.max(bottom, x.bottom); }
  out.push([el.textContent.trim().slice(0, 40), lines]);
}
return out;
"""
WHOLE = ".badge, td.nowrap, header.top nav a, header.top .brand, td.when span"


def _broken(driver: object, selector: str) -> list[str]:
    return [t for t, lines in driver.execute_script(LINES_JS, selector) if lines > 1]


@pytest.mark.parametrize("width", [1280, 390, 320])
def test_words_times_badges_and_the_header_stay_whole(
    tmp_path: Path, driver: object, long_fleet: TestClient, width: int
) -> None:
    """No badge, status, time, header link or logo is set over two lines; at 1280 px a time is
    one line, on a phone it may break between date and clock only; the header's parts do not
    overlap and it is one row at 390 px."""
    for name, url in (("incident", "/ui/incidents/1"), ("list", "/ui/")):
        open_page(driver, long_fleet.get(url).text, tmp_path / f"{name}.html", width)
        assert driver.execute_script(LINES_JS, WHOLE), name
        assert not _broken(driver, WHOLE), (name, _broken(driver, WHOLE))
        if width > 600:
            assert not _broken(driver, "td.when"), _broken(driver, "td.when")
        boxes = driver.execute_script(
            "return [...document.querySelectorAll('header.top > *, header.top nav a')]"
            ".filter(e => e.offsetParent && e.tagName !== 'NAV')"
            ".map(e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"
        )  # fmt: skip
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                overlap = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
                assert min(overlap) <= 0.5, (a, b)
        tall = driver.execute_script("return document.querySelector('header.top').offsetHeight")
        assert tall <= 56 or width < 390, tall
        wide = driver.execute_script("return document.documentElement.scrollWidth")
        assert wide <= width, f"{name} is {wide} px wide at {width} px"


# Each drawing's scale on screen and, per text, its font size and whether it starts left of the
# drawing (getBBox in user units: cut at the edge).
DRAWINGS_JS = """
return [...document.querySelectorAll("svg.timeline, svg.path-graph")]
  .filter(s => s.getBoundingClientRect().width > 0)
  .map(s => { const scale = s.getBoundingClientRect().width / s.viewBox.baseVal.width;
    return [s.getAttribute("class"), scale, [...s.querySelectorAll("text")].map(t =>
      [t.textContent.slice(0, 30), parseFloat(getComputedStyle(t).fontSize) * scale, t.getBBox().x])]; });
"""


@pytest.mark.parametrize("width", [1280, 390])
def test_drawings_keep_their_text_10px_and_inside(
    tmp_path: Path, driver: object, long_fleet: TestClient, width: int
) -> None:
    """The timeline at 390 px was drawn at 0.45 (5 px text), graph edge labels at 8 px, and
    timeline labels of capitals started left of the drawing: every text is 10 px or more on
    screen and none starts outside its drawing."""
    open_page(driver, long_fleet.get("/ui/incidents/1").text, tmp_path / "inc.html", width)
    drawings = driver.execute_script(DRAWINGS_JS)
    assert {kind for kind, _, _ in drawings} == {"timeline", "path-graph"}
    for kind, _scale, texts in drawings:
        for text, px, x in texts:
            assert px >= MIN_FONT_PX - 0.05, (kind, text, px)
            assert x >= 0, (kind, text, x)


@pytest.mark.parametrize("width", [1280, 390])
def test_fleet_node_names_differ_and_model_and_count_are_whole(
    tmp_path: Path, driver: object, long_fleet: TestClient, width: int
) -> None:
    """Every node of a pool read "gke-us-central0-prod-a10…" and its model "A10…": on screen
    the names differ and neither the name nor the model and count is cut."""
    open_page(driver, long_fleet.get("/ui/fleet").text, tmp_path / "fleet.html", width)
    spans = driver.execute_script(
        "return [...document.querySelectorAll('.node .name > span')]"
        ".map(s => [s.textContent, s.scrollWidth <= s.clientWidth + 0.5])"
    )
    assert len(spans) == 8
    names = [t for t, _ in spans[::2]]
    assert len(set(names)) == 4, names
    assert all(whole for _, whole in spans), spans
    assert {t for t, _ in spans[1::2]} == {"A100 · 0.0/2 GPUs allocated"}


@pytest.mark.parametrize("fragment", ["#flash", ""])
def test_a_refused_feedback_form_puts_the_focus_on_its_reason(
    tmp_path: Path, driver: object, long_fleet: TestClient, fragment: str
) -> None:
    """The reason a form was refused takes the focus, beside the form, on screen: after the
    feedback form (its action's ``#flash``) and after a Confirm button (no fragment)."""
    page = long_fleet.get("/ui/incidents/1").text
    form = {"csrf": _page_csrf(page), "root_cause": "nope", "by": "ann", "note": ""}
    r = long_fleet.post("/ui/incidents/1/feedback", data=form)
    assert r.status_code == 422
    open_page(driver, r.text, tmp_path / "refused.html", 390, fragment=fragment)
    focused = driver.execute_script(
        "const f = document.activeElement, r = f.getBoundingClientRect();"
        "return [f.id, f.closest('#feedback') !== null, r.top >= 0 && r.bottom <= innerHeight]"
    )
    assert focused == ["flash", True, True]
