"""The chat webhook's body follows the platform its URL's host names, and a 5xx beyond 500-504
(a Cloudflare 52x) or a proxy's 407 is retried with back-off, not taken as a refusal.

Fake receivers answer as each platform documents:
- Google Chat (developers.google.com/workspace/chat/quickstart/webhooks; the Message resource,
  developers.google.com/workspace/chat/api/reference/rest/v1/spaces.messages): the API's JSON
  mapping refuses an unknown field with 400 ``Invalid JSON payload received. Unknown name``;
  a message is at most 32,000 bytes (developers.google.com/workspace/chat/limits).
- Microsoft Teams Workflows (MicrosoftDocs/msteams-docs, webhooks-and-connectors/how-to/
  add-incoming-webhook.md, "Send Adaptive Cards using an Incoming Webhook"): the envelope
  ``{"type": "message", "attachments": [{"contentType":
  "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": {...}}]}``; the flow
  answers 202 with an empty body whatever it was sent.
- Cloudflare in front of a chat (developers.cloudflare.com/support/troubleshooting/
  cloudflare-errors/troubleshooting-cloudflare-5xx-errors/): 520-524 and 530 with an HTML page
  while the origin is unreachable; Alertmanager retries every 5xx (prometheus/alertmanager
  notify/util.go ``Retrier.Check``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleetmind.serving.db import Database, notifications
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import (
    GOOGLE_CHAT_MAX_BYTES,
    TRUNCATED,
    Notifier,
    chat_body,
    chat_platform,
    is_final,
    refuses_alerts,
    refuses_message,
)
from fleetmind.serving.settings import Settings

T0 = 1_000_000.0
GOOGLE = "https://chat.googleapis.com/v1/spaces/AAAA/messages?key=k&token=t"
TEAMS = "https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke"
TEAMS_PP = "https://default0123.ab.environment.api.powerplatform.com/powerautomate/automations/x"
DISCORD = "https://discord.com/api/webhooks/123456789012345678/AbCdEfTOKEN/slack"
GOOGLE_FIELDS = {"text", "thread", "cardsV2", "cards", "accessoryWidgets", "fallbackText"}


def google_chat(request: httpx.Request) -> httpx.Response:
    """Google Chat: unknown top-level fields and messages over 32,000 bytes refused with 400."""
    body = json.loads(request.content)
    unknown = [k for k in body if k not in GOOGLE_FIELDS]
    if unknown:
        msg = f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at 'message'"
        return httpx.Response(400, json={"error": {"code": 400, "message": msg}})
    if len(body["text"].encode()) > GOOGLE_CHAT_MAX_BYTES:
        return httpx.Response(400, json={"error": {"code": 400, "message": "too large"}})
    return httpx.Response(200, json={"name": "spaces/AAAA/messages/1", "text": body["text"]})


def teams_workflow(request: httpx.Request) -> httpx.Response:
    """A Teams Workflows webhook: 202, empty body, whatever the JSON."""
    return httpx.Response(202)


def notifier(tmp_path: Path, url: str, handler, posts: list) -> tuple[Notifier, list[float]]:
    db = Database(f"sqlite:///{tmp_path}/n.db")
    db.migrate()
    with db.write() as conn:
        inc = IncidentStore(db).insert_incident(conn, T0, T0)
    top = {"node": "c0/host/h<0>", "kind": "host", "score": 0.9, "path": ["c0/host/h<0>"]}
    db.set_incident_rca(inc, [top], "gat", None)
    settings = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_webhook_url=url,
        notify_settle_s=0.0,
    )

    def record(request: httpx.Request) -> httpx.Response:
        posts.append((request.url.host, json.loads(request.content)))
        return handler(request)

    clock = [T0]
    n = Notifier(db, settings, clock=lambda: clock[0], transport=httpx.MockTransport(record))
    return n, clock


def test_google_chat_gets_text_only_and_takes_it(tmp_path: Path) -> None:
    posts: list = []
    n, _ = notifier(tmp_path, GOOGLE, google_chat, posts)
    try:
        n.poll()
    finally:
        n.stop()
    assert len(posts) == 1
    host, body = posts[0]
    assert host == "chat.googleapis.com"
    assert list(body) == ["text"]
    assert "<http" in body["text"] and "|incident 1>" in body["text"]
    assert "`c0/host/h&lt;0&gt;`" in body["text"]


def test_teams_workflow_gets_an_adaptive_card(tmp_path: Path) -> None:
    posts: list = []
    n, _ = notifier(tmp_path, TEAMS, teams_workflow, posts)
    try:
        n.poll()
    finally:
        n.stop()
    assert len(posts) == 1
    body = posts[0][1]
    assert body["type"] == "message" and set(body) == {"type", "attachments"}
    (att,) = body["attachments"]
    assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert att["contentUrl"] is None
    card = att["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    texts = [b["text"] for b in card["body"]]
    assert all(b["type"] == "TextBlock" and b["wrap"] for b in card["body"])
    joined = "\n".join(texts)
    assert "[incident 1](http" in joined and "<http" not in joined
    assert "`c0/host/h<0>`" in joined and "&lt;" not in joined
    assert "score 0.9" in joined and texts[-1].startswith("Path: ")
    assert "\U0001f6a8" in texts[0] and ":rotating_light:" not in joined


def test_platform_by_host() -> None:
    assert chat_platform(GOOGLE) == "google_chat"
    assert chat_platform(TEAMS) == "teams"
    assert chat_platform(TEAMS_PP) == "teams"
    assert chat_platform(DISCORD) == "slack"
    assert chat_platform("https://hooks.slack.com/services/T/B/x") == "slack"
    assert chat_platform("https://chat.googleapis.com.evil.example/x") == "slack"
    assert chat_platform("https://logic.azure.com.evil.example/x") == "slack"
    body = {"text": "hi", "fleetmind": {"incident": 1}}
    assert chat_body(DISCORD, body) is body


def test_google_chat_text_cut_to_its_limit() -> None:
    text = "é" * GOOGLE_CHAT_MAX_BYTES
    out = chat_body(GOOGLE, {"text": text, "fleetmind": {}})
    assert list(out) == ["text"]
    assert len(out["text"].encode()) <= GOOGLE_CHAT_MAX_BYTES
    assert out["text"].endswith(TRUNCATED)
    assert chat_body(GOOGLE, {"text": "short"})["text"] == "short"


@pytest.mark.parametrize("status", [501, 505, 520, 521, 522, 523, 524, 530, 407])
def test_any_5xx_and_407_are_transient(status: int) -> None:
    assert not is_final(str(status))
    assert not refuses_message(str(status))
    assert not refuses_alerts(str(status))


def test_final_statuses_unchanged() -> None:
    assert refuses_message("404 no_service") and refuses_message("400")
    assert refuses_alerts("400") and not refuses_alerts("404")


def test_cloudflare_522_is_retried_then_delivered(tmp_path: Path) -> None:
    answers = [522]
    page = b"<!DOCTYPE html><title>discord.com | 522: Connection timed out</title>"

    def discord(request: httpx.Request) -> httpx.Response:
        if answers[0] == 204:
            return httpx.Response(204)
        return httpx.Response(answers[0], content=page, headers={"Content-Type": "text/html"})

    posts: list = []
    n, clock = notifier(tmp_path, DISCORD, discord, posts)
    try:
        n.poll()
        assert len(posts) == 1
        answers[0] = 204  # the origin is back a minute later
        for _ in range(3):
            clock[0] += 60
            n.poll()
    finally:
        n.stop()
    assert len(posts) == 2  # retried once, delivered, not posted again
    assert "fleetmind" in posts[1][1]  # Slack-compatible body kept for other hosts
    with n.db.read() as conn:
        assert conn.execute(select(notifications.c.delivery)).scalar_one()["webhook"] == "sent"
