"""The chat webhook's body follows the platform its URL's host names, and a 5xx beyond 500-504
(a Cloudflare 52x) or a proxy's 407 is retried with back-off, not taken as a refusal.

Fake receivers answer as each platform documents:
- Google Chat (developers.google.com/workspace/chat/quickstart/webhooks; the Message resource,
  developers.google.com/workspace/chat/api/reference/rest/v1/spaces.messages): the API's JSON
  mapping refuses an unknown field with 400 ``Invalid JSON payload received. Unknown name``;
  a message is at most 32,000 bytes (developers.google.com/workspace/chat/limits), its text at
  most 4,096 characters (400 "Message is longer than 4096 characters": mr-karan/calert#11,
  cloudflare/GHC-Errbot#10); Slack emoji codes show literally (mr-karan/calert#76).
- Microsoft Teams Workflows (MicrosoftDocs/msteams-docs, webhooks-and-connectors/how-to/
  add-incoming-webhook.md, "Send Adaptive Cards using an Incoming Webhook"): the envelope
  ``{"type": "message", "attachments": [{"contentType":
  "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": {...}}]}``; the flow
  answers 202 with an empty body whatever it was sent. TextBlock text is Teams' Markdown subset
  (bold, italic, lists, links; no code spans: learn.microsoft.com/microsoftteams/platform/
  task-modules-and-cards/cards/cards-format); a TextRun's text is not Markdown
  (adaptivecards.io/explorer/TextRun.html).
- Cloudflare in front of a chat (developers.cloudflare.com/support/troubleshooting/
  cloudflare-errors/troubleshooting-cloudflare-5xx-errors/): 520-524 and 530 with an HTML page
  while the origin is unreachable; Alertmanager retries every 5xx (prometheus/alertmanager
  notify/util.go ``Retrier.Check``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleetmind.serving.db import Database, notifications
from fleetmind.serving.incidents.store import IncidentStore
from fleetmind.serving.notify import (
    GOOGLE_CHAT_MAX_BYTES,
    GOOGLE_CHAT_MAX_CHARS,
    TRUNCATED,
    Notifier,
    chat_body,
    chat_platform,
    delivery_outcome,
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
    if len(body["text"]) > 4096:
        msg = "Message is longer than 4096 characters"
        return httpx.Response(400, json={"error": {"code": 400, "message": msg}})
    return httpx.Response(200, json={"name": "spaces/AAAA/messages/1", "text": body["text"]})


def teams_workflow(request: httpx.Request) -> httpx.Response:
    """A Teams Workflows webhook: 202, empty body, whatever the JSON."""
    return httpx.Response(202)


def notifier(
    tmp_path: Path,
    url: str,
    handler,
    posts: list,
    node: str = "c0/host/h<0>",
    am_url: str | None = None,
) -> tuple[Notifier, list[float]]:
    db = Database(f"sqlite:///{tmp_path}/n.db")
    db.migrate()
    with db.write() as conn:
        inc = IncidentStore(db).insert_incident(conn, T0, T0)
    top = {"node": node, "kind": "host", "score": 0.9, "path": [node]}
    db.set_incident_rca(inc, [top], "gat", None)
    settings = Settings(
        database_url=str(db.engine.url),
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        notify_webhook_url=url,
        notify_alertmanager_url=am_url,
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
    assert body["text"].startswith("\U0001f6a8") and ":rotating_light:" not in body["text"]


def test_google_chat_text_cut_to_4096_characters(tmp_path: Path) -> None:
    posts: list = []
    n, _ = notifier(tmp_path, GOOGLE, google_chat, posts, node="c0/host/" + "h" * 5000)
    try:
        n.poll()
    finally:
        n.stop()
    assert len(posts) == 1
    text = posts[0][1]["text"]
    assert len(text) <= GOOGLE_CHAT_MAX_CHARS and text.endswith(TRUNCATED)
    with n.db.read() as conn:
        assert conn.execute(select(notifications.c.delivery)).scalar_one()["webhook"] == "sent"


def test_teams_workflow_gets_an_adaptive_card(tmp_path: Path) -> None:
    posts: list = []
    n, _ = notifier(tmp_path, TEAMS, teams_workflow, posts)
    try:
        n.poll()
    finally:
        n.stop()
    assert len(posts) == 1
    body = posts[0][1]
    assert body["type"] == "message" and set(body) == {"type", "attachments", "text", "fleetmind"}
    assert body["fleetmind"]["dedup_key"] and body["fleetmind"]["incident"] == 1
    assert "<http" in body["text"]  # the Slack text, as a generic Logic App got it before
    (att,) = body["attachments"]
    assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert att["contentUrl"] is None
    card = att["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    assert all(b["type"] == "RichTextBlock" for b in card["body"])
    runs = [r for b in card["body"] for r in b["inlines"]]
    assert all(r["type"] == "TextRun" for r in runs)
    texts = ["".join(r["text"] for r in b["inlines"]) for b in card["body"]]
    joined = "\n".join(texts)
    assert "incident 1" in joined and "<http" not in joined and "](" not in joined
    assert {"type": "TextRun", "text": "c0/host/h<0>", "fontType": "Monospace"} in runs
    assert "&lt;" not in joined and "`" not in joined
    assert "score 0.9" in joined and texts[-1].startswith("Path: ")
    assert "\U0001f6a8" in texts[0] and ":rotating_light:" not in joined
    (link,) = [r for r in runs if "selectAction" in r]
    assert link["text"] == "incident 1"
    url = link["selectAction"]["url"]
    assert link["selectAction"]["type"] == "Action.OpenUrl" and url.endswith("/ui/incidents/1")
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open the incident", "url": url}]


def test_teams_card_renders_label_values_as_plain_text(tmp_path: Path) -> None:
    """A label value with Markdown stays literal text: no TextBlock (whose text Teams renders as
    Markdown) and no run linking anywhere but the incident page."""
    evil = "[Open runbook](https://evil.example) **CALL 555**"
    posts: list = []
    n, _ = notifier(tmp_path, TEAMS, teams_workflow, posts, node=evil)
    try:
        n.poll()
    finally:
        n.stop()
    card = posts[0][1]["attachments"][0]["content"]
    assert '"TextBlock"' not in json.dumps(card)
    runs = [r for b in card["body"] for r in b["inlines"]]
    assert {"type": "TextRun", "text": evil, "fontType": "Monospace"} in runs
    urls = [r["selectAction"]["url"] for r in runs if "selectAction" in r]
    urls += [a["url"] for a in card["actions"]]
    assert urls and not any("evil" in u for u in urls)


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
    emoji = chat_body(GOOGLE, {"text": "\U0001f6a8" * 3000})["text"]  # 2 UTF-16 units each
    assert len(emoji.encode("utf-16-le")) // 2 <= GOOGLE_CHAT_MAX_CHARS
    assert emoji.endswith(TRUNCATED) and emoji.startswith("\U0001f6a8" * 2000)


@pytest.mark.parametrize("status", [501, 505, 520, 521, 522, 523, 524, 530, 407])
def test_any_5xx_and_407_are_transient(status: int) -> None:
    assert not is_final(str(status))
    assert not refuses_message(str(status))
    assert not refuses_alerts(str(status))


def test_old_drop_notes_keep_their_reading(tmp_path: Path) -> None:
    """A ``dropped: 522`` note from when 522 was final still reads as a refusal; a message now
    given up on after retrying 522 until FLEETMIND_NOTIFY_GIVE_UP_S reads as such."""
    old = {"state": "firing", "delivery": {"webhook": "dropped: 522"}}
    assert delivery_outcome(old)[2] == "the webhook refused it: 522"
    old_407 = {"state": "firing", "delivery": {"webhook": "dropped: 407"}}
    assert delivery_outcome(old_407)[2] == "the webhook refused it: 407"
    old_503 = {"state": "firing", "delivery": {"webhook": "dropped: 503"}}
    assert "failed until FLEETMIND_NOTIFY_GIVE_UP_S" in delivery_outcome(old_503)[2]
    posts: list = []
    n, clock = notifier(tmp_path, DISCORD, lambda r: httpx.Response(522), posts)
    try:
        n.poll()
        clock[0] += 7200  # past FLEETMIND_NOTIFY_GIVE_UP_S (3600 s)
        n.poll()
    finally:
        n.stop()
    with n.db.read() as conn:
        row = conn.execute(select(notifications)).mappings().one()
    assert row["delivery"]["webhook"].startswith("dropped: 522")
    dropped = delivery_outcome(dict(row))[2]
    assert dropped.startswith("the webhook failed until FLEETMIND_NOTIFY_GIVE_UP_S: 522")


def test_alertmanager_407_warns_of_its_proxy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """407 is retried, and the warning still says the URL, credentials or proxy are wrong."""
    posts: list = []
    n, _ = notifier(
        tmp_path, DISCORD, lambda r: httpx.Response(407), posts, am_url="http://am.example:9093"
    )
    with caplog.at_level(logging.WARNING, logger="fleetmind"):
        try:
            n.poll()
        finally:
            n.stop()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "answered 407, which says its URL, credentials or proxy are wrong" in said


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
