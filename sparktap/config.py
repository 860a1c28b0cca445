"""Process settings: environment variables ``SPARKTAP_<GROUP>__<FIELD>`` (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sparktap.detection.thresholds import Thresholds
from sparktap.errors import ConfigError

DEFAULT_TOPIC = "sparktap.events"
DEFAULT_CHDB_PATH = Path.home() / ".local" / "share" / "sparktap" / "chdb"


class KafkaSettings(BaseModel):
    """Kafka connection. ``extra`` passes straight through to librdkafka (``security.protocol``, ``sasl.*``, …)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = DEFAULT_TOPIC
    dlq_topic: str | None = Field(default=None, description="dead-letter topic; default '<topic>.dlq'")
    group_id: str = "sparktap-collector"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)

    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.topic}.dlq"

    def librdkafka(self) -> dict[str, Any]:
        """The librdkafka configuration dict for this group (secrets revealed only here)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        conf.update(self.extra)
        return conf


class ClickHouseSettings(BaseModel):
    """Where events are stored: ``clickhouse://user:pw@host:9000/db?secure=true`` or ``chdb:///dir`` (default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: SecretStr = SecretStr(f"chdb://{DEFAULT_CHDB_PATH}")
    database: str | None = Field(default=None, description="overrides the database named in the URL")
    retention_days: int = Field(default=30, ge=1)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: SecretStr) -> SecretStr:
        parse_storage_url(value.get_secret_value())
        return value

    def target(self) -> StorageTarget:
        target = parse_storage_url(self.url.get_secret_value())
        if self.database:
            target = target.model_copy(update={"database": self.database})
        return target


class StorageTarget(BaseModel):
    """A parsed storage URL. ``redacted`` is the only form that may be logged."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["clickhouse", "chdb"]
    database: str = "sparktap"
    host: str = "127.0.0.1"
    port: int = 9000
    user: str = "default"
    password: SecretStr = SecretStr("")
    secure: bool = False
    verify: bool = True
    path: Path | None = None

    @property
    def redacted(self) -> str:
        if self.kind == "chdb":
            return f"chdb://{self.path}"
        scheme = "clickhouses" if self.secure else "clickhouse"
        return f"{scheme}://{self.user}:***@{self.host}:{self.port}/{self.database}"


def parse_kafka_options(values: tuple[str, ...]) -> dict[str, str]:
    """Command-line ``-X key=value`` librdkafka settings as a dict (the value may contain ``=``)."""
    conf: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-X expects key=value (a librdkafka setting), got {key.strip() or item!r}")
        conf[key.strip()] = value
    return conf


def parse_storage_url(url: str) -> StorageTarget:
    """Parse a storage URL; the error never echoes the password."""
    parts = urlsplit(url)
    if parts.scheme == "chdb":
        raw = unquote(parts.netloc + parts.path)
        if not raw:
            raise ValueError("chdb URL needs a directory, e.g. chdb:///var/lib/sparktap/chdb")
        query = parse_qs(parts.query)
        database = query.get("database", ["sparktap"])[0]
        return StorageTarget(kind="chdb", path=Path(raw).expanduser(), database=database)
    if parts.scheme in ("clickhouse", "clickhouses"):
        query = parse_qs(parts.query)
        secure = parts.scheme == "clickhouses" or query.get("secure", ["false"])[0].lower() in ("1", "true", "yes")
        verify = query.get("verify", ["true"])[0].lower() not in ("0", "false", "no")
        try:
            port = parts.port or (9440 if secure else 9000)
        except ValueError as exc:
            raise ValueError("ClickHouse URL has an invalid port") from exc
        database = parts.path.lstrip("/") or "sparktap"
        return StorageTarget(
            kind="clickhouse",
            host=parts.hostname or "127.0.0.1",
            port=port,
            user=unquote(parts.username) if parts.username else "default",
            password=SecretStr(unquote(parts.password) if parts.password else ""),
            secure=secure,
            verify=verify,
            database=database,
        )
    raise ValueError(
        f"unsupported storage URL scheme {parts.scheme!r}: use clickhouse://user:password@host:9000/db or chdb:///dir"
    )


DEFAULT_ALERTER_STATE = Path.home() / ".local" / "state" / "sparktap" / "alerter-state.json"


class AlertSettings(BaseModel):
    """The built-in alerter (``sparktap alert``): when to evaluate, where to send, when to repeat.

    Webhook URLs are secrets (they carry the credential): they are only revealed when a message is sent.
    ``thresholds`` overrides detection thresholds by rule, e.g.
    ``SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES=52428800``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_seconds: float = Field(default=60.0, gt=0, description="how often the detection SQL is evaluated")
    renotify_seconds: float = Field(default=4 * 3600.0, gt=0, description="repeat an open finding after this")
    lookback_seconds: float = Field(default=6 * 3600.0, gt=0, description="events this recent are evaluated")
    min_severity: Literal["info", "warning", "critical"] = "warning"
    clusters: list[str] = Field(default_factory=list, description="only these clusters (default: all)")
    slack_webhook_url: SecretStr | None = None
    teams_webhook_url: SecretStr | None = Field(default=None, description="Teams Workflows (Power Automate) URL")
    webhook_url: SecretStr | None = Field(default=None, description="generic webhook: JSON of each finding")
    grafana_url: str | None = Field(default=None, description="base URL of Grafana, for dashboard links")
    state_path: Path = Field(default=DEFAULT_ALERTER_STATE, description="open findings and when they were sent")
    send_timeout_seconds: float = Field(default=10.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535, description="/metrics and /healthz of `sparktap "
                                     "alert` (none when unset)")
    thresholds: Thresholds = Thresholds()

    @field_validator("grafana_url")
    @classmethod
    def _check_grafana_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("grafana_url must be an http(s) URL, e.g. https://grafana.example.com")
        return value.rstrip("/") if value else value


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
        default=300.0, gt=0,
        description="/healthz fails, and a warning is logged, when no insert succeeded this long while messages wait",
    )
    max_future_skew_seconds: float = Field(
        default=86_400.0, ge=0,
        description="events further ahead of the collector's clock go to the DLQ (older than the retention: too)",
    )
    max_insert_attempts: int = Field(
        default=5, ge=1,
        description="after this many refusals of a batch, its rows are tried apart and those refused go to the DLQ",
    )
    log_format: Literal["json", "text"] = "json"
    plain_copy: bool = Field(
        default=False, description="also insert into <table>_plain (no dedup): the integrity check's negative control"
    )


class Settings(BaseSettings):
    """Settings of one sparktap process; every field can be set as SPARKTAP_<GROUP>__<FIELD>."""

    model_config = SettingsConfigDict(
        env_prefix="SPARKTAP_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    kafka: KafkaSettings = KafkaSettings()
    clickhouse: ClickHouseSettings = ClickHouseSettings()
    alerts: AlertSettings = AlertSettings()
    collector: CollectorSettings = CollectorSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = "__".join(str(p) for p in err["loc"]).upper()
            problems.append(f"SPARKTAP_{where}: {err['msg']}")
        raise ConfigError("invalid setting " + "; ".join(problems)) from exc
