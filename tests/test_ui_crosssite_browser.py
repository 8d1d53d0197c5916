"""In headless Chromium: a link from another site keeps the forms of open tabs working, and an
alert named with U+202E RIGHT-TO-LEFT OVERRIDE (after a paragraph separator or not) reverses no
other text (the findings and fixes are described in ``test_ui_crosssite_and_bidi.py``).

A real ``uvicorn`` process with no token (every form on the double-submit ``fm_csrf`` cookie) and
a "chat" page on ``localhost`` (another site than ``127.0.0.1``) linking to it. Needs Debian's
``chromium`` and ``chromium-driver`` and Selenium, like ``test_ui_browser.py``; skipped with the
reason when they are missing.
"""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from serving_helpers import Server, wait_for, webhook
from test_ui_crosssite_and_bidi import PS_NAMES, _alerts

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from test_ui_browser import browser  # noqa: E402, F401 (the fixture)

# Left and top of each character of the first text node under ``arguments[0]`` (an element) that
# holds ``arguments[1]``, from a Range over that character: where the browser drew it.
CHAR_BOXES_JS = """
const walker = document.createTreeWalker(arguments[0], NodeFilter.SHOW_TEXT);
for (let t = walker.nextNode(); t; t = walker.nextNode()) {
  const at = t.data.indexOf(arguments[1]);
  if (at < 0) continue;
  const out = [];
  for (let i = at; i < at + arguments[1].length; i++) {
    const r = document.createRange(); r.setStart(t, i); r.setEnd(t, i + 1);
    const b = r.getBoundingClientRect(); out.push([b.left, b.top]);
  }
  return out;
}
return null;
"""


# Whether the elements matched by ``arguments[1]`` under ``arguments[0]`` (a list's pieces, each
# in a <bdi>) are drawn in the order of the document: each starts right of where the one before
# ends on the same line, or on a line below (a piece broken across lines has a box on each).
IN_ORDER_JS = """
const rects = [...arguments[0].querySelectorAll(arguments[1])].map(e => [...e.getClientRects()]);
return rects.length > 1 && rects.every((r, i) => {
  if (i === 0) return true;
  const prev = rects[i - 1][rects[i - 1].length - 1], cur = r[0];
  return Math.abs(cur.top - prev.top) < 2 ? cur.left > prev.left : cur.top > prev.top;
});
"""


def _reads_as_itself(driver: object, element: object, text: str) -> bool:
    """Whether ``text`` inside ``element`` is drawn left to right on one line, as it reads."""
    boxes = driver.execute_script(CHAR_BOXES_JS, element, text)
    assert boxes, f"{text!r} not found"
    return all(abs(b[1] - a[1]) < 2 and b[0] > a[0] for a, b in zip(boxes, boxes[1:], strict=False))


class _Chat(BaseHTTPRequestHandler):
    """Another site (``localhost`` is not ``127.0.0.1``'s site): a chat page linking to the
    service (``self.server.links``: id -> URL), each link opening a tab."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        links = "".join(
            f'<a id="{k}" href="{v}" target="_blank">{k}</a> ' for k, v in self.server.links.items()
        )
        body = f"<!doctype html><title>chat</title>{links}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.external
def test_links_from_chat_keep_open_forms_and_bidi_names_stay_put(
    tmp_path: Path,
    browser: object,  # noqa: F811
) -> None:
    driver = browser
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/ui.db",
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_INCIDENT_RANK_INTERVAL_S": "0",
    }
    server = Server(env, log=tmp_path / "server.log")
    for name in [k for k in server.env if k.startswith("FLEETMIND_") and k.endswith("_TOKEN")]:
        del server.env[name]  # no token: the pages are open
    server.start(timeout=120)  # slow on a busy host
    chat = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        stack.callback(chat.server_close)
        stack.callback(chat.shutdown)
        threading.Thread(target=chat.serve_forever, daemon=True).start()
        assert httpx.post(server.url + "/api/v1/alerts", json=webhook(_alerts())).status_code == 200

        def ranked() -> list[dict]:
            incs = httpx.get(server.url + "/api/v1/incidents").json()
            return [i for i in incs if i["alert_count"] > 2 and i["causes"]]

        [inc] = wait_for(ranked, timeout=60)
        page = f"{server.url}/ui/incidents/{inc['id']}"
        chat.links = {"incident": page, "list": server.url + "/ui/"}
        # on-call opens the incident from chat, then the incident list from chat, then signs the
        # feedback in the first tab
        driver.get(f"http://localhost:{chat.server_port}/")
        home = driver.current_window_handle
        driver.find_element(By.ID, "incident").click()
        wait_for(lambda: len(driver.window_handles) == 2, timeout=10)
        first = next(h for h in driver.window_handles if h != home)
        driver.switch_to.window(first)
        wait_for(lambda: driver.find_elements(By.ID, "fb-by"), timeout=10)
        driver.switch_to.window(home)
        driver.find_element(By.ID, "list").click()
        wait_for(lambda: len(driver.window_handles) == 3, timeout=10)
        second = next(h for h in driver.window_handles if h not in (home, first))
        driver.switch_to.window(second)
        wait_for(lambda: driver.find_elements(By.ID, "incidents"), timeout=10)
        driver.switch_to.window(first)
        driver.find_element(By.ID, "fb-by").send_keys("Carol")
        driver.find_element(By.ID, "fb-note").send_keys("long explanation typed by on-call")
        driver.find_element(By.ID, "fb-submit").click()
        wait_for(lambda: driver.find_elements(By.ID, "flash"), timeout=10)
        assert "training label" in driver.find_element(By.ID, "flash").text, driver.find_element(
            By.ID, "flash"
        ).text
        fb = httpx.get(f"{server.url}/api/v1/incidents/{inc['id']}/feedback").json()
        assert [(f["by"], f["note"]) for f in fb] == [
            ("Carol", "long explanation typed by on-call")
        ]

        # the alert named with U+202E: the other labels and node ids read as themselves
        driver.get(page)
        timeline = driver.find_element(By.CSS_SELECTOR, "svg.timeline")
        labels = timeline.find_elements(By.CSS_SELECTOR, 'text[text-anchor="end"]')
        bidi = next(t for t in labels if "Disk" in t.get_attribute("textContent"))
        assert _reads_as_itself(driver, bidi, "c0-h1")
        kube = next(t for t in labels if "KubeNode" in t.get_attribute("textContent"))
        assert _reads_as_itself(driver, kube, "KubeNodeNotReady · c0-h1")
        # after a paragraph separator (U+2029, U+0085) too: it would end the isolate
        for shown in PS_NAMES.values():
            label = next(t for t in labels if shown[:3] in t.get_attribute("textContent"))
            assert _reads_as_itself(driver, label, "c0-h1"), shown
        driver.get(server.url + "/ui/fleet")
        marks = driver.find_element(By.CSS_SELECTOR, '.node[data-node="c0-h1"] .inc')
        assert _reads_as_itself(driver, marks, "KubeNodeNotReady")
        assert _reads_as_itself(driver, marks, "GpuXidError")
        # the marks in their order: a paragraph separator split a <bdi>, and the override after
        # it reversed the marks that follow
        assert driver.execute_script(IN_ORDER_JS, marks, "bdi")
