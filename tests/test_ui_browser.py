"""The incident pages in a real browser: headless Chromium driven by Selenium (WebDriver).

An alert storm goes through the webhook of a real ``uvicorn`` process; the browser is sent to the
login page, signs in with the bearer token, finds the storm's true root first in the incident list
and on the incident page, and opens the fleet view. At 1400 and 900 px wide, the element bounding
boxes of the incident page's text (sidebar, timeline, propagation graphs) and of the fleet view's
node headers are checked: no two texts overlap, none is cut at its card's edge, and graph text is
drawn at 9 px or more. Screenshots go to the test's tmp folder; with
``FLEETMIND_SCREENSHOT_DIR=docs/img`` they are also copied there (how the ones in the docs are made).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/install_test_peers.sh``) and Selenium;
skipped with the reason when they are missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serving_helpers import Server, alert, wait_for, webhook
from ui_helpers import TRUE_ROOT, storm_alerts

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402

TOKEN = "browser-test-token"
LONG_NAME = "KubeStatefulSetReplicasMismatchAfterRolloutOfModelServer"
CHROME_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
    "--hide-scrollbars",
)


def _binary(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    chrome = _binary("chromium", "chromium-browser", "google-chrome")
    driver_bin = _binary("chromedriver")
    if chrome is None or driver_bin is None:
        pytest.skip("headless Chromium not installed (Debian packages chromium, chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = chrome
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chrome-profile'}")
    driver = webdriver.Chrome(
        service=Service(driver_bin, log_output=str(tmp_path / "chromedriver.log")), options=opts
    )
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


WIDTHS = (1400, 900)

# Each drawn text element matched by a selector: the box of its text in CSS px (a Range over it, or
# the element's own box for SVG text), clipped by the element and every HTML ancestor that hides its
# overflow; its drawn height; and whether it is cut: an SVG text reaching outside its drawing's
# viewBox (getBBox, in user units: the browser clips SVG boxes to the drawing), other text reaching
# outside its card. Texts inside a closed <details> are not drawn and are skipped.
TEXT_BOXES_JS = """
const out = [];
for (const el of document.querySelectorAll(arguments[0])) {
  const shut = el.closest("details:not([open])");  // not drawn, though it may still have a box
  if (shut && !shut.querySelector(":scope > summary").contains(el)) continue;
  const svg = el instanceof SVGElement;
  let r;
  if (svg) { r = el.getBoundingClientRect(); }
  else { const range = document.createRange(); range.selectNodeContents(el); r = range.getBoundingClientRect(); }
  if (!r || r.width === 0 || r.height === 0) continue;
  let box = {l: r.left, t: r.top, r: r.right, b: r.bottom};
  for (let a = svg ? el.parentElement : el; a; a = a.parentElement) {
    if (a instanceof SVGElement) continue;
    if (getComputedStyle(a).overflowX !== "visible") {
      const c = a.getBoundingClientRect();
      box = {l: Math.max(box.l, c.left), t: box.t, r: Math.min(box.r, c.right), b: box.b};
    }
  }
  let cut = false;
  if (svg) {
    const bb = el.getBBox(), vb = el.ownerSVGElement.viewBox.baseVal;
    cut = bb.x < vb.x - 0.5 || bb.x + bb.width > vb.x + vb.width + 0.5;
  } else {
    const card = el.closest(".card, div.node");
    if (card) { const c = card.getBoundingClientRect(); cut = r.left < c.left - 0.5 || box.r > c.right + 0.5; }
  }
  out.push({text: el.textContent.trim().slice(0, 40), ...box, h: r.height, cut: cut});
}
return out;
"""


def _overlaps(boxes: list[dict], slack: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than ``slack`` px in both directions."""
    bad = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            w = min(a["r"], b["r"]) - max(a["l"], b["l"])
            h = min(a["b"], b["b"]) - max(a["t"], b["t"])
            if w > slack and h > slack:
                bad.append((a["text"], b["text"]))
    return bad


def _assert_text_layout(driver: object, selector: str, min_height: float = 0.0) -> int:
    """No two texts of ``selector`` overlap, none is cut, none is drawn under ``min_height`` px."""
    boxes = driver.execute_script(TEXT_BOXES_JS, selector)
    assert boxes, f"no text found for {selector}"
    assert not _overlaps(boxes), f"{selector}: overlapping texts {_overlaps(boxes)[:5]}"
    cut = [b["text"] for b in boxes if b["cut"]]
    assert not cut, f"{selector}: texts cut at the edge of their card or drawing: {cut[:5]}"
    for b in boxes:
        assert b["h"] >= min_height, f"{selector}: {b['text']!r} drawn {b['h']:.1f} px high"
    return len(boxes)


def _check_incident_layout(driver: object, width: int, shots: Path) -> None:
    driver.set_window_size(width, 900)
    _assert_text_layout(driver, ".kv div, #alert-counts td")  # the sidebar
    _assert_text_layout(driver, "svg.timeline text")
    # the open propagation graphs: edge labels and box labels, at a readable size
    _assert_text_layout(driver, ".cause svg.path-graph text", min_height=9.0)
    _shoot(driver, f"ui-incident-{width}", shots, width)


def _shoot(driver: object, name: str, out: Path, width: int = WIDTHS[0]) -> Path:
    """A screenshot of the whole page (the window grows to the document's height first)."""
    driver.set_window_size(width, 900)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, max(700, min(int(height) + 20, 2400)))
    path = out / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot {name}"
    driver.set_window_size(width, 900)
    return path


PHONE = 390
"""A phone's width in CSS px: WCAG 2.1 SC 1.4.10 Reflow asks for no scrolling in two dimensions
down to 320 CSS px (a data table may scroll inside its own box)."""


def _assert_reflows(driver: object, url: str) -> None:
    """``url`` at :data:`PHONE` px wide (Chrome DevTools' Emulation.setDeviceMetricsOverride, as a
    phone's viewport): the page is no wider than the screen, so nothing scrolls sideways."""
    metrics = {"width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        driver.get(url)
        wide = driver.execute_script("return document.documentElement.scrollWidth")
        assert wide <= PHONE, f"{url} is {wide} px wide at {PHONE} px"
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.external
def test_browser_signs_in_and_sees_the_true_root_first(tmp_path: Path, browser: object) -> None:
    driver = browser
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/ui.db",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_INCIDENT_RANK_INTERVAL_S": "0",
    }
    shots = tmp_path / "shots"
    shots.mkdir()
    server = Server(env, log=tmp_path / "server.log").start(timeout=120)  # slow on a busy host
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # plus one alert with a long name on a pod of the storm: the sidebar and the timeline must
        # fit it beside its count and inside the card
        alerts = storm_alerts()
        alerts.append(
            alert(
                {"alertname": LONG_NAME, "cluster": "c0", "pod": "s0-1", "severity": "warning"},
                starts=alerts[3]["startsAt"],
                fingerprint="storm-long",
            )
        )
        r = httpx.post(server.url + "/api/v1/alerts", json=webhook(alerts), headers=auth)
        assert r.status_code == 200

        def ranked() -> list[dict]:
            incs = httpx.get(server.url + "/api/v1/incidents", headers=auth).json()
            return incs if len(incs) == 2 and all(i["causes"] for i in incs) else []

        incs = wait_for(ranked, timeout=60)
        assert incs, "the storm was not grouped and ranked"
        storm_id = next(i["id"] for i in incs if i["alert_count"] == 8)

        driver.get(server.url + "/ui/")
        assert "/ui/login" in driver.current_url
        _shoot(driver, "ui-login", shots)
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login-submit").click()
        wait_for(lambda: driver.find_elements(By.ID, "incidents"), timeout=10)
        assert driver.current_url.rstrip("/").endswith("/ui")
        assert not any(
            c["name"] == "fm_session" and not c["httpOnly"] for c in driver.get_cookies()
        )
        assert driver.execute_script("return document.cookie") == ""  # HttpOnly: no JS access
        row = driver.find_element(By.CSS_SELECTOR, f'tr[data-incident="{storm_id}"]')
        assert row.find_element(By.CLASS_NAME, "top-cause").text == TRUE_ROOT
        _shoot(driver, "ui-incidents", shots)

        row.find_element(By.TAG_NAME, "a").click()
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ".cause"), timeout=10)
        causes = driver.find_elements(By.CSS_SELECTOR, ".cause")
        assert causes[0].get_attribute("data-rank") == "1"
        assert causes[0].find_element(By.CLASS_NAME, "cause-node").text == TRUE_ROOT
        graph = causes[0].find_element(By.CSS_SELECTOR, "svg.path-graph")
        assert graph.size["width"] > 50 and graph.size["height"] > 20  # drawn, not empty
        assert driver.find_element(By.CSS_SELECTOR, "svg.timeline").size["height"] > 50
        assert driver.find_element(By.ID, "fault-type").text
        for width in WIDTHS:
            _check_incident_layout(driver, width, shots)
        # confirm the top cause with the button next to it (the name comes from the form)
        driver.find_element(By.ID, "fb-by").send_keys("alice")
        driver.find_element(By.ID, "fb-note").send_keys("KubeNodeNotReady first; GPUs followed")
        causes[0].find_element(By.CSS_SELECTOR, "form.confirm button").click()
        wait_for(lambda: driver.find_elements(By.ID, "flash"), timeout=10)
        assert "training label" in driver.find_element(By.ID, "flash").text
        history = driver.find_element(By.ID, "feedback-history").text
        assert "alice" in history and "confirmed" in history and "GPUs followed" in history
        fb = httpx.get(f"{server.url}/api/v1/incidents/{storm_id}/feedback", headers=auth).json()
        assert [(f["root_cause"], f["by"], f["confirmed"]) for f in fb] == [
            (TRUE_ROOT, "alice", True)
        ]
        top = driver.find_elements(By.CSS_SELECTOR, ".cause")[0]
        assert "confirmed · alice" in top.find_element(By.CSS_SELECTOR, ".confirmed").text
        assert not top.find_elements(By.CSS_SELECTOR, "form.confirm")  # no second Confirm
        _shoot(driver, "ui-incident", shots)
        # a phone: the incident page (its cause heads), the list and a long path's 404 page
        page = driver.current_url
        for url in (page, server.url + "/ui/", server.url + "/ui/" + "no-such-page-" * 40):
            _assert_reflows(driver, url)

        for i, (n, milli) in enumerate(
            [(8, 1000), (4, 1000), (1, 500), (1, 1000), (8, 1000), (1, 700), (2, 1000)]
        ):
            job = {"job_id": f"j{i}", "num_gpu": n, "gpu_milli": milli, "reserve": True}
            r = httpx.post(server.url + "/api/v1/placements", json=job, headers=auth)
            assert r.status_code == 200, r.text
        driver.get(server.url + "/ui/fleet")
        clusters = driver.find_elements(By.CSS_SELECTOR, ".cluster")
        assert len(clusters) >= 2
        allocated = driver.find_elements(By.CSS_SELECTOR, '.gpu[title*="100% allocated"]')
        assert len(allocated) >= 8 + 4 + 1 + 8  # the whole GPUs booked above
        # the storm's host c0-h1 is down: its GPUs are marked with the open incident
        marked = driver.find_elements(By.CSS_SELECTOR, '.node[data-node="c0-h1"] .gpu.incident')
        assert len(marked) == 8
        for width in WIDTHS:
            driver.set_window_size(width, 900)
            _assert_text_layout(driver, ".node .name > span")  # name and GPU model apart
            _shoot(driver, f"ui-fleet-{width}", shots, width)
        _shoot(driver, "ui-fleet", shots)

        # an incident none of whose alerts maps onto the graph: its page names them, unbroken
        labels = {"alertname": "Unmapped" + "X" * 200, "cluster": "elsewhere-" + "z" * 120}
        lost = alert(labels, starts=alerts[0]["startsAt"], fingerprint="lost")
        r = httpx.post(server.url + "/api/v1/alerts", json=webhook([lost]), headers=auth)
        assert r.status_code == 200

        def unmapped() -> list[dict]:
            incs = httpx.get(server.url + "/api/v1/incidents", headers=auth).json()
            return [i for i in incs if i["method"] and not i["causes"]]

        [inc] = wait_for(unmapped, timeout=60)
        _assert_reflows(driver, f"{server.url}/ui/incidents/{inc['id']}")
        assert "Unmapped" in driver.find_element(By.ID, "no-causes").text

    for png in shots.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    dest = os.environ.get("FLEETMIND_SCREENSHOT_DIR")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        for png in shots.glob("*.png"):
            if not png.stem.endswith(tuple(f"-{w}" for w in WIDTHS)):  # the docs' four pages
                shutil.copy(png, Path(dest) / png.name)
