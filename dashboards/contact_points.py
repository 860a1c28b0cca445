"""Contact points (Slack, Microsoft Teams, generic webhook) and the notification policy routing by severity.

Secrets never appear in generated files: provisioning files reference environment variables (``$SLACK_WEBHOOK_URL``
…), which Grafana expands when it reads them; ``deploy`` sends the URLs from the alerter settings
(``SPARKTAP_ALERTS__*_URL``) over the API, and an integration whose URL is not set is left out.

Routing: alerts labelled ``source=sparktap`` go to the sparktap policy; ``critical`` is notified at once and repeated
hourly, ``warning`` after 30 s and every 4 h, both to ``sparktap-chat`` (every configured channel); ``info`` (only
alerted when ``min_severity`` is ``info``) goes to the generic webhook once a day.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktap.dashboards.builders import Json
from sparktap.dashboards.config import DEFAULT_CONFIG, GrafanaConfig
from sparktap.dashboards.defaults import ALERT_SOURCE_LABEL, CONTACT_POINT_CHAT, CONTACT_POINT_WEBHOOK, SECRET_ENV

GROUP_BY = ["grafana_folder", "alertname", "cluster", "app_id"]
_SLACK_TITLE = '{{ template "slack.default.title" . }}'
_SLACK_TEXT = '{{ template "slack.default.text" . }}'
_TEAMS_TITLE = '{{ template "teams.default.title" . }}'
_TEAMS_MESSAGE = '{{ template "teams.default.message" . }}'


def _settings(channel: str, url: str) -> Json:
    if channel == "slack":
        return {"url": url, "title": _SLACK_TITLE, "text": _SLACK_TEXT}
    if channel == "teams":
        return {"url": url, "title": _TEAMS_TITLE, "message": _TEAMS_MESSAGE}
    return {"url": url, "httpMethod": "POST"}


def integrations(cfg: GrafanaConfig, urls: Mapping[str, str]) -> list[Json]:
    """(contact point name, uid, type, settings) of every integration whose URL is known, as dicts."""
    out: list[Json] = []
    for channel in cfg.channels:
        if channel in urls:
            out.append(
                {
                    "name": CONTACT_POINT_CHAT,
                    "uid": f"sparktap-{channel}",
                    "type": channel,
                    "settings": _settings(channel, urls[channel]),
                }
            )
    if "webhook" in urls:
        out.append(
            {
                "name": CONTACT_POINT_WEBHOOK,
                "uid": "sparktap-webhook-info",
                "type": "webhook",
                "settings": _settings("webhook", urls["webhook"]),
            }
        )
    return out


def env_urls(cfg: GrafanaConfig) -> dict[str, str]:
    """Channel -> ``$ENV_VAR`` reference, for provisioning files."""
    return {channel: f"${SECRET_ENV[channel]}" for channel in cfg.channels}


def contact_points_file(cfg: GrafanaConfig = DEFAULT_CONFIG) -> list[Json]:
    """The ``contactPoints`` of an alerting provisioning file."""
    by_name: dict[str, list[Json]] = {}
    for item in integrations(cfg, env_urls(cfg)):
        by_name.setdefault(item["name"], []).append(
            {"uid": item["uid"], "type": item["type"], "settings": item["settings"], "disableResolveMessage": False}
        )
    return [{"orgId": 1, "name": name, "receivers": receivers} for name, receivers in by_name.items()]


def embedded_contact_points(cfg: GrafanaConfig, urls: Mapping[str, str]) -> list[Json]:
    """The HTTP API's ``EmbeddedContactPoint`` bodies for the integrations whose URL is given."""
    return [
        {
            "uid": i["uid"],
            "name": i["name"],
            "type": i["type"],
            "settings": i["settings"],
            "disableResolveMessage": False,
        }
        for i in integrations(cfg, urls)
    ]


def sparktap_route(cfg: GrafanaConfig = DEFAULT_CONFIG, has_webhook: bool = True) -> Json:
    """The policy subtree for sparktap alerts (matches ``source=sparktap``, then routes by ``severity``)."""
    routes: list[dict[str, Any]] = [
        {
            "receiver": CONTACT_POINT_CHAT,
            "object_matchers": [["severity", "=", "critical"]],
            "group_wait": "0s",
            "group_interval": "1m",
            "repeat_interval": "1h",
        },
        {
            "receiver": CONTACT_POINT_CHAT,
            "object_matchers": [["severity", "=", "warning"]],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
    ]
    if has_webhook:
        routes.append(
            {
                "receiver": CONTACT_POINT_WEBHOOK,
                "object_matchers": [["severity", "=", "info"]],
                "group_wait": "5m",
                "group_interval": "1h",
                "repeat_interval": "24h",
            }
        )
    return {
        "receiver": CONTACT_POINT_CHAT,
        "object_matchers": [[ALERT_SOURCE_LABEL[0], "=", ALERT_SOURCE_LABEL[1]]],
        "group_by": GROUP_BY,
        "continue": False,
        "routes": routes,
    }


def policy_tree_file(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    """A whole notification-policy tree for file provisioning (it replaces the organisation's tree): the root sends
    to ``sparktap-chat``, the sparktap subtree routes by severity. ``deploy`` instead merges the subtree into the
    existing tree."""
    return {
        "orgId": 1,
        "receiver": CONTACT_POINT_CHAT,
        "group_by": ["grafana_folder", "alertname"],
        "routes": [sparktap_route(cfg, "webhook" in cfg.channels)],
    }


def is_sparktap_route(route: Mapping[str, Any]) -> bool:
    return [ALERT_SOURCE_LABEL[0], "=", ALERT_SOURCE_LABEL[1]] in (route.get("object_matchers") or [])


def merge_route(tree: Json, route: Json) -> Json:
    """``tree`` with the sparktap subtree first among the root's routes (replacing an earlier one); other routes
    and the root's receiver are kept."""
    merged = dict(tree)
    others = [r for r in tree.get("routes") or [] if not is_sparktap_route(r)]
    merged["routes"] = [route, *others]
    return merged
