"""Settings of the built-in alerter (``SPARKTAP_ALERTS__*``), detection thresholds included, and of a detection
process (``DetectionSettings``: the collector's groups, which an embedded alerter runs inside, plus ``alerts`` and
``cost``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from sparktap.collector.settings import IngestSettings
from sparktap.config import load
from sparktap.detection.prices import CostSettings
from sparktap.detection.thresholds import Thresholds

DEFAULT_ALERTER_STATE = Path.home() / ".local" / "state" / "sparktap" / "alerter-state.json"


class AlertSettings(BaseModel):
    """The built-in alerter (``sparktap alert``): when to evaluate, where to send, when to repeat.

    Webhook URLs are secrets (they carry the credential): they are only revealed when a message is sent.
    ``thresholds`` overrides detection thresholds by rule, e.g.
    ``SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES=52428800``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="how often the detection SQL is evaluated over everything (re-notifies, aged-out resolves)",
    )
    event_driven: bool = Field(
        default=True,
        description="also evaluate the applications that just got rows, at once "
        "(after each insert in embedded mode; following new parts on a server)",
    )
    follow_interval_seconds: float = Field(
        default=1.0, gt=0, description="`sparktap alert` on a server: how often new parts are looked for"
    )
    renotify_seconds: float = Field(default=4 * 3600.0, gt=0, description="repeat an open finding after this")
    lookback_seconds: float = Field(default=6 * 3600.0, gt=0, description="events this recent are evaluated")
    store_findings: bool = Field(
        default=True,
        description="write every finding of each pass (all severities) to the findings table the overview and "
        "cluster findings panels read (detection/finding_store.py)",
    )
    min_severity: Literal["info", "warning", "critical"] = "warning"
    clusters: list[str] = Field(default_factory=list, description="only these clusters (default: all)")
    slack_webhook_url: SecretStr | None = None
    teams_webhook_url: SecretStr | None = Field(default=None, description="Teams Workflows (Power Automate) URL")
    webhook_url: SecretStr | None = Field(default=None, description="generic webhook: JSON of each finding")
    routing_path: Path | None = Field(
        default=None,
        description="routing file (YAML): routes by cluster, application glob, team, user, rule, severity to "
        "named channels (detection/routing.py); the channels above become its default route",
    )
    grafana_url: str | None = Field(default=None, description="base URL of Grafana, for dashboard links")
    state_path: Path = Field(default=DEFAULT_ALERTER_STATE, description="open findings and when they were sent")
    send_timeout_seconds: float = Field(default=10.0, gt=0)
    send_budget: int = Field(
        default=200, ge=1, description="messages sent per evaluation at most; the rest go in the next one"
    )
    cycle_deadline_seconds: float = Field(
        default=60.0, gt=0, description="sends not started this long after an evaluation began wait for the next"
    )
    max_retry_after_seconds: float = Field(
        default=60.0,
        ge=0,
        description="a 429's Retry-After up to this is waited for, then sent once; longer: next cycle",
    )
    stall_seconds: float = Field(
        default=300.0, gt=0, description="/healthz fails when the alerter's loop has not come round this long"
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="/metrics and /healthz of `sparktap alert` (none when unset)"
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="address of /metrics and /healthz: this host only by default (the Helm chart sets the pod's "
        "address)",
    )
    thresholds: Thresholds = Thresholds()

    @field_validator("grafana_url")
    @classmethod
    def _check_grafana_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("grafana_url must be an http(s) URL, e.g. https://grafana.example.com")
        return value.rstrip("/") if value else value


class DetectionSettings(IngestSettings):
    """Settings of a detection process (``sparktap alert``, ``findings``, ``cost``, ``silence``, the report and the
    dashboards' export): every field can be set as SPARKTAP_<GROUP>__<FIELD>. The collector's groups plus
    ``alerts`` and ``cost`` (prices); a collector on chDB runs its alerter with these."""

    alerts: AlertSettings = AlertSettings()
    cost: CostSettings = CostSettings()


def load_detection_settings(**overrides: Any) -> DetectionSettings:
    """Build the settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    return load(DetectionSettings, **overrides)
