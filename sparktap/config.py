"""Process settings: environment variables ``SPARKTAP_<GROUP>__<FIELD>`` (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": self.security_protocol}
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
