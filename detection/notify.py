r"""Chat channels of the built-in alerter: one message per finding, formatted for each channel.

- Slack incoming webhook: ``text`` (the fallback) plus Block Kit ``blocks``;
- Microsoft Teams workflow webhook ("Post to a channel when a webhook request is received"): a ``message`` with
  one Adaptive Card attachment;
- generic webhook: the finding as JSON (``status``, ``reason``, ``key``, ``dashboard_url``, ``finding``).

Webhook URLs are secrets: they stay ``SecretStr`` until the request is made and never appear in a log line or
an error message (errors name the channel, the HTTP status and the reason only).

Names and texts in a finding (application name, cluster, ids, stage names) are set by any Spark user: they are
escaped for each channel so that they render as literal text. Slack mrkdwn: ``& < >`` as entities (no
``<!channel>``, no ``<url|label>`` links), ``@`` followed by a zero-width space (no mentions); Teams Adaptive Card
markdown: ``\ * _ [ ] < > ` ~ #`` backslash-escaped (no ``[label](url)`` links); both: a zero-width space after
``://`` and in ``www.`` so that no bare URL is turned into a link. Generic webhook: JSON with ``< > &`` written as
``\u003c \u003e \u0026`` (still the same text once decoded). The only link in a message is the dashboard URL, built
from the configured Grafana URL.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlencode, urlsplit

from pydantic import SecretStr

from sparktap.detection.findings import Finding
from sparktap.errors import SparktapError

log = logging.getLogger(__name__)

Status = Literal["firing", "resolved"]
Reason = Literal["new", "reminder", "escalated", "cleared", "aged_out"]

_ICON = {"critical": "🔴", "warning": "🟠", "info": "🔵"}
_TEAMS_COLOR = {"critical": "Attention", "warning": "Warning", "info": "Accent"}
_REASON_TEXT = {
    "new": "",
    "reminder": "still open",
    "escalated": "severity went up",
    "cleared": "no longer detected",
    "aged_out": "older than the alerter's lookback window",
}
USER_AGENT = "sparktap-alerter"
APPLICATION_UID = "sparktap-application"
"""uid of the Grafana application dashboard the messages link to (``dashboards/`` provisions it)."""
APPLICATION_SLUG = "sparktap-application"
_ZWSP = "\u200b"
_TEAMS_SPECIAL = re.compile(r"([\\*_\[\]<>`~#])")


def _unlink(text: str) -> str:
    """No bare URL a chat client would turn into a link (the text looks the same)."""
    return text.replace("://", ":" + _ZWSP + "//").replace("www.", "www" + _ZWSP + ".")


def slack_text(text: str) -> str:
    """User text inside Slack mrkdwn, shown literally: no control sequences, mentions or links."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _unlink(escaped).replace("@", "@" + _ZWSP)


def slack_plain(text: str) -> str:
    """User text inside a Slack plain_text object (not parsed as mrkdwn): only bare URLs are defused."""
    return _unlink(text).replace("@", "@" + _ZWSP)


def teams_text(text: str) -> str:
    """User text inside Adaptive Card markdown (TextBlock, FactSet), shown literally: no links, no formatting."""
    return _unlink(_TEAMS_SPECIAL.sub(r"\\\1", text))


class _SafeJson(json.JSONEncoder):
    """JSON whose strings hold no raw ``< > &`` (decoded, the text is unchanged): safe to show in HTML too."""

    def encode(self, o: Any) -> str:
        return super().encode(o).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class NotifyError(SparktapError):
    """A channel did not accept a message."""


@dataclass(frozen=True)
class Notification:
    """What one message says: a finding firing (new, reminder, escalated) or resolved (cleared, aged out)."""

    status: Status
    reason: Reason
    finding: Finding
    dashboard_url: str | None = None
    mention: str = ""
    """chat handles to mention (from the routing file's ``handles``: trusted, sent as is)"""

    @property
    def headline(self) -> str:
        return self.headline_with(str)

    def headline_with(self, esc: Any) -> str:
        """The headline, user text passed through ``esc`` (a channel's escaping)."""
        f = self.finding
        if self.status == "resolved":
            return f"✅ RESOLVED · {esc(f.rule_title)} · {esc(f.app_name)}"
        return f"{_ICON.get(f.severity, '')} {f.severity.upper()} · {esc(f.rule_title)} · {esc(f.app_name)}"

    @property
    def subject(self) -> str:
        return self.subject_with(str)

    def subject_with(self, esc: Any) -> str:
        f = self.finding
        state = " (running)" if f.running else ""
        attempt = f", attempt {esc(f.app_attempt)}" if f.app_attempt else ""  # Spark gives none in client mode
        return f"{esc(f.app_name)} ({esc(f.app_id)}{attempt}) on {esc(f.cluster)}: {esc(f.where)}{state}"

    def facts(self, esc: Any = str) -> list[tuple[str, str]]:
        """(title, value) pairs, user text passed through ``esc``."""
        f = self.finding
        out = [
            ("Application", f"{esc(f.app_name)} ({esc(f.app_id)})"),
            ("Cluster", esc(f.cluster)),
            ("Where", esc(f.where)),
        ]
        if f.job_id is not None:
            out.append(("Job", str(f.job_id)))
        if f.sql_execution_id is not None:
            out.append(("SQL execution", str(f.sql_execution_id)))
        out.append(("Severity", f.severity))
        evidence = esc(", ".join(f"{k}={_number(v)}" for k, v in f.evidence.items()))
        if evidence:
            out.append(("Evidence", evidence))
        if self.reason in ("reminder", "escalated", "cleared", "aged_out"):
            out.append(("Why this message", _REASON_TEXT[self.reason]))
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def dashboard_url(grafana_url: str | None, finding: Finding, around_ms: int = 3_600_000) -> str | None:
    """Link to the application dashboard of a finding, its time range around the detection time."""
    if not grafana_url:
        return None
    query = urlencode(
        {
            "var-cluster": finding.cluster,
            "var-app": finding.app_id,
            "from": finding.detected_at_ms - around_ms,
            "to": finding.detected_at_ms + around_ms,
        }
    )
    return f"{grafana_url.rstrip('/')}/d/{APPLICATION_UID}/{APPLICATION_SLUG}?{query}"


# ----------------------------------------------------------------------------------------------- payloads


def slack_payload(n: Notification) -> dict[str, Any]:
    """Slack incoming-webhook message: ``text`` fallback and Block Kit blocks."""
    f = n.finding
    esc = slack_text
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": n.headline_with(slack_plain)[:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{n.subject_with(esc)}*\n{esc(f.explanation)}"}},
        {
            "type": "section",
            "fields": [{"type": "mrkdwn", "text": f"*{title}*\n{value}"} for title, value in n.facts(esc)[:10]],
        },
    ]
    if n.status == "firing":
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"*Fix:* {esc(f.suggested_fix)}"}]})
    if n.dashboard_url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open in Grafana"},
                        "url": n.dashboard_url,
                    }
                ],
            }
        )
    text = f"{n.headline_with(esc)}: {n.subject_with(esc)}: {esc(f.explanation)}"
    if n.mention:
        blocks.insert(1, {"type": "section", "text": {"type": "mrkdwn", "text": f"cc {n.mention}"}})
        text = f"{text} cc {n.mention}"
    return {"text": text, "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


def teams_payload(n: Notification) -> dict[str, Any]:
    """Teams workflow-webhook message: one Adaptive Card (schema 1.4) attachment."""
    f = n.finding
    esc = teams_text
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": n.headline_with(esc),
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
            "color": "Good" if n.status == "resolved" else _TEAMS_COLOR.get(f.severity, "Default"),
        },
        {"type": "TextBlock", "text": n.subject_with(esc), "wrap": True, "isSubtle": True},
        {"type": "TextBlock", "text": esc(f.explanation), "wrap": True},
        {"type": "FactSet", "facts": [{"title": t, "value": v} for t, v in n.facts(esc)]},
    ]
    if n.status == "firing":
        body.append({"type": "TextBlock", "text": f"**Fix:** {esc(f.suggested_fix)}", "wrap": True})
    if n.mention:
        body.append({"type": "TextBlock", "text": f"cc {n.mention}", "wrap": True})
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    if n.dashboard_url:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in Grafana", "url": n.dashboard_url}]
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


def webhook_payload(n: Notification) -> dict[str, Any]:
    """Generic webhook: the whole finding as JSON."""
    return {
        "version": 1,
        "source": "sparktap",
        "status": n.status,
        "reason": n.reason,
        "key": n.finding.key,
        "summary": f"{n.headline}: {n.subject}",
        "dashboard_url": n.dashboard_url,
        "finding": n.finding.to_dict(),
        **({"mention": n.mention} if n.mention else {}),
    }


# ----------------------------------------------------------------------------------------------- channels


class Channel(Protocol):
    """Somewhere messages go. ``name`` identifies it in state and logs (never the URL)."""

    name: str

    def send(self, notification: Notification) -> None: ...


class WebhookChannel:
    """POSTs a JSON payload built by ``formatter`` to a secret URL."""

    def __init__(self, name: str, url: SecretStr, formatter: Any, timeout: float = 10.0) -> None:
        scheme = urlsplit(url.get_secret_value()).scheme
        if scheme not in ("http", "https"):
            raise NotifyError(
                f"{name} webhook URL must be http(s), got a {scheme or 'scheme-less'} URL; check "
                f"SPARKTAP_ALERTS__{name.upper()}{'' if name == 'webhook' else '_WEBHOOK'}_URL"
            )
        self.name = name
        self._url = url
        self._format = formatter
        self.timeout = timeout

    def payload(self, notification: Notification) -> dict[str, Any]:
        result: dict[str, Any] = self._format(notification)
        return result

    def send(self, notification: Notification) -> None:
        post_json(self.name, self._url, self.payload(notification), self.timeout)

    def __repr__(self) -> str:
        return f"WebhookChannel(name={self.name!r}, url=SecretStr('**********'))"


def post_json(channel: str, url: SecretStr, payload: dict[str, Any], timeout: float) -> None:
    """POST ``payload``; raise NotifyError naming the channel (never the URL) unless the answer is 2xx."""
    body = json.dumps(payload, ensure_ascii=False, cls=_SafeJson).encode()
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked to be http(s) in WebhookChannel
        url.get_secret_value(),
        data=body,
        method="POST",
        headers={"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - see above
            response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            raise RateLimitedError(channel, retry_after_seconds(exc.headers.get("Retry-After"))) from exc
        raise NotifyError(
            f"{channel} webhook answered HTTP {exc.code} {exc.reason}; check the channel's webhook "
            "URL setting and that the workflow/app still exists"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NotifyError(
            f"cannot reach the {channel} webhook: {type(reason).__name__}: "
            f"{_scrub(str(reason), url)}; retrying next cycle"
        ) from exc


class RateLimitedError(NotifyError):
    """The channel answered 429 Too Many Requests; ``retry_after`` seconds to wait (its Retry-After, or 1 s)."""

    def __init__(self, channel: str, retry_after: float) -> None:
        self.channel = channel
        self.retry_after = retry_after
        super().__init__(f"{channel} webhook answered HTTP 429 Too Many Requests; Retry-After {retry_after:g} s")


def retry_after_seconds(value: str | None, now: float | None = None) -> float:
    """A Retry-After header (delay-seconds or an HTTP date) as seconds from now; 1 s when absent or unreadable."""
    if value is None or not value.strip():
        return 1.0
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return 1.0
    if when.tzinfo is None:
        return 1.0
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _scrub(text: str, url: SecretStr) -> str:
    secret = url.get_secret_value()
    host = urlsplit(secret).hostname or ""
    text = text.replace(secret, "***")
    return text.replace(host, "<webhook host>") if host else text


def channels_from_settings(
    slack: SecretStr | None, teams: SecretStr | None, webhook: SecretStr | None, timeout: float = 10.0
) -> list[WebhookChannel]:
    """The channels configured (a missing URL means no such channel)."""
    out = []
    if slack is not None and slack.get_secret_value():
        out.append(WebhookChannel("slack", slack, slack_payload, timeout))
    if teams is not None and teams.get_secret_value():
        out.append(WebhookChannel("teams", teams, teams_payload, timeout))
    if webhook is not None and webhook.get_secret_value():
        out.append(WebhookChannel("webhook", webhook, webhook_payload, timeout))
    return out
