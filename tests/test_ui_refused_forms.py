"""A refused form's page (wrong sign-in token, feedback the service refuses) answers a POST: its
history entry is replaced by the GET address of the same page, so Reload, Back and Forward ask
for a fresh page and never send the refused form again (Chrome's "Confirm Form Resubmission"
page, or a second POST). The sign-in error is announced (``role="alert"``), tied to the token
field (``aria-describedby``, ``aria-invalid``; WCAG 2.1 SC 3.3.1 and 1.3.1) and named in the
page's title (WCAG technique G88).

The browser test drives headless Chromium against a real ``uvicorn`` (as ``test_ui_browser.py``
does) and counts the POSTs the browser sent from its DevTools network log (chromedriver's
``goog:loggingPrefs`` performance log: ``Network.requestWillBeSent`` events).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from serving_helpers import Server, wait_for, webhook
from test_ui import login, make_settings, storm
from ui_helpers import storm_alerts

from fleetmind.serving.app import create_app

TOKEN = "refused-forms-token"


# --------------------------------------------------------------------------- rendered HTML (fast)
@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        storm(c)
        yield c


def test_a_refused_sign_in_is_announced_and_its_entry_becomes_a_get(client: TestClient) -> None:
    r = login(client, token="wrong-token", next_="/ui/incidents/1?x=a&b=c")
    assert r.status_code == 401
    assert re.search(r"<title>Error: Sign in · FleetMind</title>", r.text)
    assert '<div class="flash err" id="login-error" role="alert">' in r.text
    field = re.search(r'<input type="password" id="token"[^>]*>', r.text).group(0)
    assert 'aria-describedby="login-error"' in field and 'aria-invalid="true"' in field
    script = r.text.split("<script", 1)[1]
    nonce = re.search(r"script-src 'nonce-([^']+)'", r.headers["content-security-policy"])
    assert script.startswith(f' nonce="{nonce.group(1)}">')
    want = '"/ui/login?next=/ui/incidents/1%3Fx%3Da%26b%3Dc"'
    assert f'history.replaceState(null, "", {want});' in script
    # an expired form: announced and described, but the token itself is not marked invalid
    r = client.post("/ui/login", data={"token": "t", "csrf": "stale", "next": "/ui/"})
    assert r.status_code == 403 and "<title>Error: Sign in" in r.text
    field = re.search(r'<input type="password" id="token"[^>]*>', r.text).group(0)
    assert 'aria-describedby="login-error"' in field and "aria-invalid" not in field
    # the form itself: no error, no script, no "Error:"
    page = client.get("/ui/login").text
    assert "<title>Sign in · FleetMind</title>" in page
    assert "replaceState" not in page and "aria-describedby" not in page


def test_refused_feedback_says_error_in_its_title_and_its_entry_becomes_a_get(
    client: TestClient,
) -> None:
    assert login(client).status_code == 303
    page = client.get("/ui/incidents/1").text
    assert "<title>Incident #1 · FleetMind</title>" in page and "replaceState" not in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    form = {"csrf": csrf, "root_cause": "no/such/node", "by": "ann", "note": ""}
    r = client.post("/ui/incidents/1/feedback", data=form)
    assert r.status_code == 422
    assert "<title>Error: Incident #1 · FleetMind</title>" in r.text
    script = r.text.split("<script", 1)[1]
    assert 'history.replaceState(null, "", "/ui/incidents/1#feedback");' in script


# ------------------------------------------------------------------------- a real browser (slow)
@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    webdriver = pytest.importorskip("selenium.webdriver")
    chrome = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)  # fmt: skip
    driver_bin = shutil.which("chromedriver")
    if chrome is None or driver_bin is None:
        pytest.skip("headless Chromium not installed (Debian packages chromium, chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = chrome
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--window-size=1400,900",
                 f"--user-data-dir={tmp_path / 'chrome-profile'}"):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _posts(driver: object, seen: list[str]) -> list[str]:
    """The paths of every POST the browser has sent so far (DevTools ``Network`` events)."""
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            req = msg["params"]["request"]
            if req["method"] == "POST":
                seen.append(httpx.URL(req["url"]).path)
    return seen


@pytest.mark.external
def test_back_and_reload_after_a_refused_form_send_no_second_post(
    tmp_path: Path, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp_path}/ui.db",
        "FLEETMIND_API_TOKEN": TOKEN,
        "FLEETMIND_PLACEMENT_MODEL": "heuristic:builtin-bestfit",
        "FLEETMIND_INCIDENT_RANK_INTERVAL_S": "0",
    }
    server = Server(env, log=tmp_path / "server.log").start(timeout=120)
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        r = httpx.post(server.url + "/api/v1/alerts", json=webhook(storm_alerts()), headers=auth)
        assert r.status_code == 200
        incs = wait_for(lambda: httpx.get(server.url + "/api/v1/incidents", headers=auth).json())
        inc = incs[0]["id"]
        posts: list[str] = []

        # a wrong token, then the right one, then Back: a fresh sign-in form, fetched with GET
        driver.get(f"{server.url}/ui/incidents/{inc}")
        driver.find_element(By.ID, "token").send_keys("wrong-token")
        driver.find_element(By.ID, "login-submit").click()
        error = wait_for(lambda: driver.find_elements(By.ID, "login-error"), timeout=10)[0]
        assert error.get_attribute("role") == "alert" and driver.title.startswith("Error: ")
        field = driver.switch_to.active_element
        assert field.get_attribute("id") == "token"
        assert field.get_attribute("aria-invalid") == "true"
        assert field.get_attribute("aria-describedby") == "login-error"
        assert driver.current_url == f"{server.url}/ui/login?next=/ui/incidents/{inc}"
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login-submit").click()
        wait_for(lambda: driver.find_elements(By.ID, "feedback-form"), timeout=10)
        driver.back()
        assert wait_for(lambda: driver.find_elements(By.ID, "login-form"), timeout=10)
        assert not driver.find_elements(By.ID, "login-error")
        assert driver.title == "Sign in · FleetMind"
        assert _posts(driver, posts) == ["/ui/login", "/ui/login"]

        # refused feedback, then Reload: the incident page, fetched with GET
        driver.get(f"{server.url}/ui/incidents/{inc}")
        root = driver.find_element(By.ID, "fb-root")
        root.clear()
        root.send_keys("no/such/node")
        driver.find_element(By.ID, "fb-by").send_keys("oncall")
        driver.find_element(By.ID, "fb-submit").click()
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#flash.err"), timeout=10)
        assert driver.title.startswith("Error: Incident #")
        driver.refresh()
        assert wait_for(lambda: driver.find_elements(By.ID, "feedback-form"), timeout=10)
        assert not driver.find_elements(By.CSS_SELECTOR, "#flash.err")
        assert driver.current_url == f"{server.url}/ui/incidents/{inc}#feedback"
        assert _posts(driver, posts)[2:] == [f"/ui/incidents/{inc}/feedback"]
