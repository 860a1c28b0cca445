"""What the generated Grafana artefacts depend on: one config object (kubernetes-mixin ``_config`` style)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparktap.dashboards.defaults import (
    ALERT_LOOKBACK_SECONDS,
    DATASOURCE_NAME,
    DATASOURCE_UID,
    FOLDER_TITLE,
    FOLDER_UID,
    RULE_GROUP,
    RULE_GROUP_INTERVAL_SECONDS,
    RUNBOOK_BASE,
)
from sparktap.detection.prices import DEFAULT_COST, CostSettings
from sparktap.detection.sql import DEFAULT_DATABASE
from sparktap.detection.teams import TeamRules
from sparktap.detection.thresholds import DEFAULT_THRESHOLDS, Severity, Thresholds
from sparktap.schemas.ddl import LATEST_VERSION

CHANNELS: tuple[str, ...] = ("slack", "teams", "webhook")


@dataclass(frozen=True)
class GrafanaConfig:
    """Database and server version the SQL is written for, datasource and folder identity, detection thresholds,
    which alerts notify (``min_severity``), where runbooks live, and which chat channels the contact points use."""

    database: str = DEFAULT_DATABASE
    clickhouse_version: tuple[int, ...] = LATEST_VERSION
    datasource_uid: str = DATASOURCE_UID
    datasource_name: str = DATASOURCE_NAME
    folder_uid: str = FOLDER_UID
    folder_title: str = FOLDER_TITLE
    rule_group: str = RULE_GROUP
    rule_group_interval_seconds: int = RULE_GROUP_INTERVAL_SECONDS
    alert_lookback_seconds: int = ALERT_LOOKBACK_SECONDS
    alert_for: str = "1m"
    min_severity: Severity = "warning"
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    runbook_base: str = RUNBOOK_BASE
    channels: tuple[str, ...] = field(default=CHANNELS)
    cost: CostSettings = DEFAULT_COST
    """Prices of the Fleet and cost dashboard (``SPARKTAP_COST__*``), rendered into its SQL."""
    teams: TeamRules | None = None
    """The routing file's team mapping (``detection/teams.py``): the alert rules' ``team`` label is the owner it
    gives, as the alerter routes, not the tag a Spark user chose; None: the application's team tag."""

    def __post_init__(self) -> None:
        unknown = set(self.channels) - set(CHANNELS)
        if unknown:
            raise ValueError(f"unknown channel(s) {sorted(unknown)}: use {', '.join(CHANNELS)}")


DEFAULT_CONFIG = GrafanaConfig()
