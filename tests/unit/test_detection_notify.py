"""Per-channel message formats of the built-in alerter (no network)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr

from sparktap.detection import Finding
from sparktap.detection.notify import (
    Notification,
    NotifyError,
    WebhookChannel,
    channels_from_settings,
    dashboard_url,
    slack_payload,
    teams_payload,
    webhook_payload,
)

FINDING = Finding(
    cluster="prod-eu",
    app_id="app-1",
    app_attempt="1",
    app_name="nightly-etl",
    rule="data_skew",
    severity="critical",
    value=102.4,
    threshold=10.0,
    explanation="Largest task reads 2.00 GiB of shuffle data, 102.4× the median task (20.00 MiB)",
    suggested_fix="Salt the hot key",
    detected_at_ms=1_795_000_000_000,
    job_id=1,
    sql_execution_id=1,
    stage_id=1,
    stage_attempt=0,
    stage_name="join at skew.py:20",
    evidence={"ratio": 102.4, "max_task_bytes": 2147483648.0},
)
URL = "https://grafana.example.com/d/sparktap-application/sparktap-application"


def test_dashboard_link() -> None:
    link = dashboard_url("https://grafana.example.com/", FINDING)
    assert link is not None and link.startswith(URL + "?")
    query = parse_qs(urlsplit(link).query)
    assert query["var-cluster"] == ["prod-eu"] and query["var-app"] == ["app-1"]
    assert int(query["from"][0]) < FINDING.detected_at_ms < int(query["to"][0])
    assert dashboard_url(None, FINDING) is None


def test_slack_message() -> None:
    payload = slack_payload(Notification("firing", "new", FINDING, URL))
    assert payload["text"].startswith("🔴 CRITICAL · Data skew · nightly-etl")
    blocks = payload["blocks"]
    assert [b["type"] for b in blocks] == ["header", "section", "section", "context", "actions"]
    assert FINDING.explanation in blocks[1]["text"]["text"]
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in blocks[2]["fields"]}
    assert fields["*Job*"] == "1" and fields["*Evidence*"] == "ratio=102, max_task_bytes=2147483648"
    assert "Salt the hot key" in blocks[3]["elements"][0]["text"]
    assert blocks[4]["elements"][0]["url"] == URL
    resolved = slack_payload(Notification("resolved", "cleared", FINDING, None))
    assert resolved["text"].startswith("✅ RESOLVED") and [b["type"] for b in resolved["blocks"]] == [
        "header",
        "section",
        "section",
    ]


def test_teams_message_is_an_adaptive_card() -> None:
    payload = teams_payload(Notification("firing", "reminder", FINDING, URL))
    assert payload["type"] == "message" and len(payload["attachments"]) == 1
    attachment = payload["attachments"][0]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["body"][0]["color"] == "Attention"
    facts = {f["title"]: f["value"] for f in card["body"][3]["facts"]}
    assert facts["Application"] == "nightly-etl (app-1)" and facts["Why this message"] == "still open"
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in Grafana", "url": URL}]


def test_generic_webhook_carries_the_whole_finding() -> None:
    payload = webhook_payload(Notification("resolved", "aged_out", FINDING, None))
    assert payload["status"] == "resolved" and payload["reason"] == "aged_out"
    assert payload["key"] == FINDING.key == payload["finding"]["key"]
    assert payload["finding"]["evidence"] == {"ratio": 102.4, "max_task_bytes": 2147483648.0}
    assert payload["finding"]["suggested_fix"] == "Salt the hot key"


def test_channels_keep_urls_secret() -> None:
    secret = SecretStr("https://hooks.slack.com/services/T000/B000/very-secret")
    channels = channels_from_settings(secret, None, SecretStr(""))
    assert [c.name for c in channels] == ["slack"]
    assert "very-secret" not in repr(channels[0])
    with pytest.raises(NotifyError, match="must be http") as info:
        WebhookChannel("teams", SecretStr("ftp://x/very-secret"), teams_payload)
    assert "very-secret" not in str(info.value)


# ----------------------------------------------------------------------------------------------- hostile names

HOSTILE = "<!channel> <https://evil|x> & co"
EVIL_FINDING = dataclasses.replace(FINDING, app_name=HOSTILE, cluster="<@U123> [click](https://evil.example) *")
EVIL_URLS = re.compile(r"(?<![\w.])(?:https?://|www\.)\S+")


def _receive(channel: WebhookChannel, notification: Notification) -> bytes:
    """The body a local receiver gets from ``channel`` for ``notification``."""
    bodies: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        WebhookChannel(channel.name, SecretStr(f"http://127.0.0.1:{server.server_port}/hook"), channel._format).send(
            notification
        )
        thread.join(10)
    finally:
        server.server_close()
    (body,) = bodies
    return body


def _texts(node: object) -> list[str]:
    if isinstance(node, dict):
        return [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return [node] if isinstance(node, str) else []


def _links(payload: object) -> set[str]:
    """Every URL a chat client could make a link of (the zero-width space breaks a URL, as in a client)."""
    return {m.group(0) for text in _texts(payload) for m in EVIL_URLS.finditer(text)}


def test_slack_renders_user_names_as_literal_text() -> None:
    channel = WebhookChannel("slack", SecretStr("https://hooks.example/x"), slack_payload)
    payload = json.loads(_receive(channel, Notification("firing", "new", EVIL_FINDING, URL)))
    mrkdwn = [payload["text"], *(t["text"] for t in _texts_of_type(payload["blocks"], "mrkdwn"))]
    for text in mrkdwn:  # no control sequence can start: every < and > is an entity
        assert "<" not in text and ">" not in text and "<!" not in text, text

    def shown(text: str) -> str:  # what Slack displays for mrkdwn text
        return text.replace("\u200b", "").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    assert HOSTILE in shown(payload["blocks"][1]["text"]["text"])
    assert f"*Application*\n{HOSTILE} (app-1)" in [shown(t) for t in mrkdwn]
    assert "@\u200bU123" in payload["blocks"][1]["text"]["text"]  # no mention
    assert payload["blocks"][0]["text"]["type"] == "plain_text"
    assert HOSTILE in payload["blocks"][0]["text"]["text"].replace("\u200b", "")
    assert _links(payload) == {URL}  # the only link: the configured Grafana dashboard


def _texts_of_type(blocks: list[dict[str, object]], kind: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == kind and isinstance(node.get("text"), str):
                out.append(node)  # type: ignore[arg-type]
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(blocks)
    return out


def test_teams_renders_user_names_as_literal_text() -> None:
    channel = WebhookChannel("teams", SecretStr("https://hooks.example/x"), teams_payload)
    card = json.loads(_receive(channel, Notification("firing", "new", EVIL_FINDING, URL)))["attachments"][0]["content"]
    texts = [b["text"] for b in card["body"] if b["type"] == "TextBlock"]
    texts += [f["value"] for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]]
    for text in texts:  # markdown: no link or autolink can form
        assert not re.search(r"(?<!\\)\[", text) and not re.search(r"(?<!\\)<", text), text

    def shown(text: str) -> str:  # CommonMark: a backslash before punctuation shows the punctuation
        return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text).replace("\u200b", "")

    assert HOSTILE in shown(texts[0]) and "[click](https://evil.example) *" in shown(texts[1])
    assert _links({k: v for k, v in card.items() if k != "$schema"}) == {URL}
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in Grafana", "url": URL}]


def test_webhook_json_carries_user_names_literally_and_html_safe() -> None:
    channel = WebhookChannel("webhook", SecretStr("https://hooks.example/x"), webhook_payload)
    body = _receive(channel, Notification("firing", "new", EVIL_FINDING, URL))
    assert b"<" not in body and b">" not in body  # \u003c …: safe even if a receiver pastes it into HTML
    payload = json.loads(body)
    assert payload["finding"]["app_name"] == HOSTILE and payload["finding"]["cluster"] == EVIL_FINDING.cluster
    assert payload["dashboard_url"] == URL


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    from sparktap.detection.notify import retry_after_seconds

    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds(" 120 ") == 120.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412500.0) == 0.0  # already past
    assert retry_after_seconds(None) == retry_after_seconds("") == retry_after_seconds("soon") == 1.0
