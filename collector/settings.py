"""Settings of the collector: its own group (``SPARKTAP_COLLECTOR__*``, ``CollectorSettings``) and the settings of
a collector process (``IngestSettings``: the Kafka, ClickHouse and collector groups), which is all the collector
reads. ``sparktap.settings.Settings`` extends it with the other parts' groups for the CLIs; the collector never
imports it (it would load detection, and every rule package with it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings

from sparktap.collector.storage.target import ClickHouseSettings
from sparktap.config import SETTINGS_CONFIG, KafkaSettings, settings_error


class CollectorSettings(BaseModel):
    """The consumer-group collector (``sparktap collect``): batching, limits, endpoints, recovery.

    The defaults give ClickHouse one insert per table about once a second (>= 1,000 rows from 1,000 events/s on)
    and bound memory to about ``batch_rows`` decoded rows plus ``fetch_queue_kbytes`` of prefetched messages.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_rows: int = Field(default=20_000, ge=1, description="flush when the pending batch holds this many rows")
    batch_interval_seconds: float = Field(default=1.0, gt=0, description="flush a batch at most this old")
    commit_interval_seconds: float = Field(
        default=0.0, ge=0, description="commit offsets at most this often; 0: after every batch"
    )
    consume_chunk: int = Field(default=5_000, ge=1, description="messages taken from librdkafka per call")
    max_message_bytes: int = Field(default=1_048_576, ge=256, description="larger values go to the DLQ")
    fetch_queue_kbytes: int = Field(default=32_768, ge=1024, description="librdkafka prefetch queue bound")
    metrics_host: str = Field(default="0.0.0.0", description="address of /metrics and /healthz")  # noqa: S104
    metrics_port: int | None = Field(default=9108, ge=0, le=65535, description="0: any free port; unset: off")
    instance_id: str | None = Field(default=None, description="static group membership (group.instance.id)")
    session_timeout_ms: int = Field(default=10_000, ge=1_000, description="consumer group session timeout")
    retry_backoff_seconds: float = Field(default=0.5, gt=0, description="first wait after a failure")
    retry_backoff_max_seconds: float = Field(default=30.0, gt=0, description="longest wait between retries")
    shutdown_timeout_seconds: float = Field(default=30.0, ge=0, description="SIGTERM: time to flush and commit")
    stall_seconds: float = Field(default=120.0, gt=0, description="/healthz fails when the loop is stuck this long")
    insert_stall_seconds: float = Field(
        default=300.0,
        gt=0,
        description="/healthz fails, and a warning is logged, when no insert succeeded this long while messages wait",
    )
    max_future_skew_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="events further ahead of the collector's clock go to the DLQ (older than the retention: too)",
    )
    max_insert_attempts: int = Field(
        default=5,
        ge=1,
        description="after this many refusals of a batch, its rows are tried apart and those refused go to the DLQ",
    )
    log_format: Literal["json", "text"] = "json"
    plain_copy: bool = Field(
        default=False, description="also insert into <table>_plain (no dedup): the integrity check's negative control"
    )


class IngestSettings(BaseSettings):
    """Settings of a collector process: every field can be set as ``SPARKTAP_<GROUP>__<FIELD>``. The collector
    (``Collector``, ``collector/kafka.py``, the streaming engine) types against this; ``sparktap.settings.Settings``
    is a subclass, so a CLI's full settings can be passed where these are expected."""

    model_config = SETTINGS_CONFIG

    kafka: KafkaSettings = KafkaSettings()
    clickhouse: ClickHouseSettings = ClickHouseSettings()
    collector: CollectorSettings = CollectorSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


def load_ingest_settings(**overrides: Any) -> IngestSettings:
    """The collector's settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    try:
        return IngestSettings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from exc
