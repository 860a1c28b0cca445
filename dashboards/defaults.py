"""Shared defaults of everything sparktap provisions in Grafana: one place for uids, names and panel defaults."""

from __future__ import annotations

from typing import Any, Final

from sparktap.detection.notify import APPLICATION_SLUG, APPLICATION_UID

DATASOURCE_TYPE: Final = "grafana-clickhouse-datasource"
DATASOURCE_UID: Final = "sparktap-clickhouse"
DATASOURCE_NAME: Final = "sparktap ClickHouse"
FOLDER_UID: Final = "sparktap"
FOLDER_TITLE: Final = "sparktap"
RULE_GROUP: Final = "sparktap-detection"
RULE_GROUP_INTERVAL_SECONDS: Final = 60
ALERT_LOOKBACK_SECONDS: Final = 6 * 3600
"""Relative time range of the alert queries (and the alerter's default lookback)."""

OVERVIEW_UID: Final = "sparktap-overview"
CLUSTER_UID: Final = "sparktap-cluster"
STREAMING_UID: Final = "sparktap-streaming"
FLEET_UID: Final = "sparktap-fleet"
CONNECT_UID: Final = "sparktap-connect"
TABLES_UID: Final = "sparktap-tables"
DASHBOARD_SLUGS: Final = {
    OVERVIEW_UID: "sparktap-overview",
    APPLICATION_UID: APPLICATION_SLUG,
    CLUSTER_UID: "sparktap-cluster",
    STREAMING_UID: "sparktap-streaming",
    FLEET_UID: "sparktap-fleet-and-cost",
    CONNECT_UID: "sparktap-connect",
    TABLES_UID: "sparktap-tables",
}
SCHEMA_VERSION: Final = 41
"""Dashboard JSON schema version written (Grafana 11.6+ reads it without migration)."""
TAGS: Final = ["sparktap", "spark"]
REFRESH: Final = "30s"
TIME_FROM: Final = "now-6h"

RUNBOOK_BASE: Final = "https://github.com/sparktap/sparktap/blob/main/docs/runbook.md"
"""Where ``runbook_url`` annotations point (override with ``--runbook-base``)."""

SEVERITY_COLORS: Final = {"critical": "red", "warning": "orange", "info": "blue"}
CONTACT_POINT_CHAT: Final = "sparktap-chat"
CONTACT_POINT_WEBHOOK: Final = "sparktap-webhook"
ALERT_SOURCE_LABEL: Final = ("source", "sparktap")
"""Label on every sparktap alert rule; the notification policy routes on it, then on ``severity``."""

SECRET_ENV: Final = {
    "slack": "SLACK_WEBHOOK_URL",
    "teams": "TEAMS_WEBHOOK_URL",
    "webhook": "SPARKTAP_WEBHOOK_URL",
    "clickhouse_password": "CLICKHOUSE_PASSWORD",
}
"""Environment variables the provisioning files reference (Grafana interpolates ``$VAR`` in them)."""


def datasource_ref(uid: str = DATASOURCE_UID) -> dict[str, Any]:
    return {"type": DATASOURCE_TYPE, "uid": uid}
