"""Per-channel message formats of the built-in alerter (no network)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr

from sparktap.collector.detection import Finding
from sparktap.collector.notify import (
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
    cluster="prod-eu", app_id="app-1", app_attempt="1", app_name="nightly-etl", rule="data_skew",
    severity="critical", value=102.4, threshold=10.0,
    explanation="Largest task reads 2.00 GiB of shuffle data, 102.4× the median task (20.00 MiB)",
    suggested_fix="Salt the hot key", detected_at_ms=1_795_000_000_000, job_id=1, sql_execution_id=1, stage_id=1,
    stage_attempt=0, stage_name="join at skew.py:20", evidence={"ratio": 102.4, "max_task_bytes": 2147483648.0},
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
        "header", "section", "section"]


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
