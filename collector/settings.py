"""Settings of the collector: its own group (``SPARKTAP_COLLECTOR__*``, ``CollectorSettings``) and the settings of
a collector process (``IngestSettings``: the Kafka, ClickHouse and collector groups), which is all the collector
reads. ``sparktap.detection.settings.DetectionSettings`` extends it with detection's groups; the collector never
imports those (they would load detection, and every rule package with it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings

from sparktap.config import SETTINGS_CONFIG, KafkaSettings, load
from sparktap.store.settings import ClickHouseSettings


class CollectorSettings(BaseModel):
    """The consumer-group collector (``sparktap collect``): batching, limits, endpoints, recovery.

    The defaults give ClickHouse one insert per table about once a second (>= 1,000 rows from 1,000 events/s on).
    Memory is bounded by bytes, whatever the messages' sizes: the pending batch holds at most ``batch_bytes`` (plus
    one message) of decoded columns (Arrow buffers; the message bytes of rows decoded into Python values) and 16
    bytes a row of origin, never the messages themselves; consume calls are sized to it, and librdkafka prefetches
    at most ``batch_bytes`` (or ``fetch_queue_kbytes``, the smaller); docs/collector.md gives the peak RSS this
    allows.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_rows: int = Field(default=30_000, ge=1, description="flush when the pending batch holds this many rows")
    batch_bytes: int = Field(
        default=16 << 20,
        ge=0,
        description="flush when the pending batch holds this many bytes of decoded rows (the byte budget that "
        "bounds memory, also sizing consume calls and librdkafka's prefetch); 0: rows and age only",
    )
    batch_interval_seconds: float = Field(default=1.0, gt=0, description="flush a batch at most this old")
    commit_interval_seconds: float = Field(
        default=0.0, ge=0, description="commit offsets at most this often; 0: after every batch"
    )
    stream_rows: int = Field(
        default=200_000,
        ge=0,
        description="on a ClickHouse server, while batches end on rows or bytes (a backlog), they go as blocks into "
        "one open INSERT, which the server writes as one part, until it holds this many rows or is stream_seconds "
        "old; its offsets are committed once ClickHouse confirmed it; 0: one INSERT per batch",
    )
    stream_seconds: float = Field(default=5.0, gt=0, description="longest time an INSERT stays open (stream_rows)")
    consume_chunk: int = Field(
        default=20_000,
        ge=1,
        description="messages taken from librdkafka per call (and decoded together), at most the rows the pending "
        "batch has room for",
    )
    max_message_bytes: int = Field(default=1_048_576, ge=256, description="larger values go to the DLQ")
    fetch_queue_kbytes: int = Field(default=32_768, ge=1024, description="librdkafka prefetch queue bound")
    metrics_host: str = Field(
        default="127.0.0.1",
        description="address of /metrics, /healthz, /readyz: this host only by default (the Helm chart sets the pod's "
        "address)",
    )
    metrics_port: int | None = Field(default=9108, ge=0, le=65535, description="0: any free port; unset: off")
    metrics_max_clusters: int = Field(
        default=1_000,
        ge=1,
        description='distinct cluster labels in /metrics; later clusters are summed under cluster="_other" '
        "and counted in sparktap_collector_metrics_clusters_overflow",
    )
    http_timeout_seconds: float = Field(
        default=30.0, gt=0, description="whole-request deadline of every HTTP connection (a slow client is dropped)"
    )
    findings_host: str = Field(default="127.0.0.1", description="address of /findings (chDB store only)")
    findings_port: int | None = Field(default=9110, ge=0, le=65535, description="port of /findings; unset: off")
    findings_token: SecretStr | None = Field(
        default=None, description="bearer token /findings requires; unset: /findings is off"
    )
    findings_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="/findings: ClickHouse max_execution_time of its query, and the longest wait for the one "
        "query that runs at a time (then 503)",
    )
    instance_id: str | None = Field(default=None, description="static group membership (group.instance.id)")
    group_protocol: Literal["auto", "consumer", "classic"] = Field(
        default="auto",
        description="consumer group protocol: auto takes KIP-848's (consumer) when the broker offers it and no "
        "instance_id is set, classic otherwise; group.protocol in SPARKTAP_KAFKA__EXTRA wins",
    )
    kafka_client: Literal["auto", "librdkafka", "confluent-kafka"] = Field(
        default="auto",
        description="the group consumer: librdkafka's C API driven directly, its messages read where they lie "
        "(collector/kafka/librdkafka.py), or confluent-kafka's Consumer (a Python object per message); auto takes the "
        "first when the confluent-kafka wheel's librdkafka and the C extension are there, and logs why not",
    )
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
    (``Collector``, ``collector/kafka/client.py``, the streaming engine) types against this; ``DetectionSettings``
    is a subclass, so a CLI's full settings can be passed where these are expected."""

    model_config = SETTINGS_CONFIG

    kafka: KafkaSettings = KafkaSettings()
    clickhouse: ClickHouseSettings = ClickHouseSettings()
    collector: CollectorSettings = CollectorSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


def load_ingest_settings(**overrides: Any) -> IngestSettings:
    """The collector's settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    return load(IngestSettings, **overrides)
