"""The store's settings group (``SPARKTAP_CLICKHOUSE__*``): where events are stored, how long each tier is kept, and
the read-only users the schema step creates. ``StoreSettings`` is a process that reads this group only (the Helm
log follower's check, ``python -m sparktap.store``); the collector composes it into its own settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings

from sparktap.config import SETTINGS_CONFIG, load
from sparktap.errors import ConfigError
from sparktap.schemas.schema import MAX_RETENTION_DAYS
from sparktap.store.access import Reader
from sparktap.store.target import DEFAULT_CHDB_PATH, StorageTarget, parse_storage_url


class StorageUrl(SecretStr):
    """A storage URL with its parsed ``target`` (the URL is parsed once, when the settings are read)."""

    def __init__(self, secret_value: str) -> None:
        super().__init__(secret_value)
        self.target = parse_storage_url(secret_value)


class ClickHouseSettings(BaseModel):
    """Where events are stored: ``clickhouse://user:pw@host:9000/db?secure=true`` or ``chdb:///dir`` (default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: SecretStr = SecretStr(f"chdb://{DEFAULT_CHDB_PATH}")
    database: str | None = Field(default=None, description="overrides the database named in the URL")
    cluster: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="a ClickHouse cluster (remote_servers) to create the schema on: overrides cluster= in the URL",
    )
    retention_days: int = Field(default=30, ge=1, le=MAX_RETENTION_DAYS)
    task_retention_days: int | None = Field(
        default=7,
        ge=1,
        le=MAX_RETENTION_DAYS,
        description="days task_end rows are kept (the shortest tier; None: retention_days); store/retention.py",
    )
    stage_retention_days: int = Field(
        default=90,
        ge=1,
        le=MAX_RETENTION_DAYS,
        description="days the per-stage rollups (stage_rollup, run_rollup) are kept",
    )
    app_retention_days: int = Field(
        default=400,
        ge=1,
        le=MAX_RETENTION_DAYS,
        description="days the per-application and per-table rollups (app_rollup, table_rollup) are kept",
    )
    findings_retention_days: int = Field(
        default=400,
        ge=1,
        le=MAX_RETENTION_DAYS,
        description="days the stored findings (the findings table the alerter writes) are kept",
    )
    readonly_user: str | None = Field(
        default=None,
        description="a read-only user (SELECT on the database only) for Grafana, `sparktap findings` and `sparktap "
        "report`, created by the schema step on ClickHouse >= 20.4 (store/access.py)",
    )
    readonly_password: SecretStr | None = Field(default=None, description="that user's password (a secret)")
    teams: dict[str, list[str]] = Field(
        default_factory=dict,
        description="team reader user -> the clusters whose rows it sees (row policies, ClickHouse >= 20.4)",
    )
    team_passwords: dict[str, SecretStr] = Field(default_factory=dict, description="team reader user -> password")

    ca_certs: Path | None = Field(
        default=None, description="PEM bundle of the CAs that sign the server's TLS certificate (overrides the URL's)"
    )
    certfile: Path | None = Field(default=None, description="client certificate (PEM) for TLS (overrides the URL's)")
    keyfile: Path | None = Field(default=None, description="the client certificate's key (PEM; overrides the URL's)")

    def readers(self) -> list[Reader]:
        """The read-only users the schema step creates (none unless configured)."""
        out: list[Reader] = []
        if self.readonly_user:
            out.append(Reader(self.readonly_user, self.readonly_password or SecretStr("")))
        for team, clusters in self.teams.items():
            out.append(Reader(team, self.team_passwords.get(team, SecretStr("")), tuple(clusters)))
        return out

    @field_validator("url")
    @classmethod
    def _parse_url(cls, value: SecretStr) -> SecretStr:
        """The URL is parsed once, here; ``target()`` hands out the result."""
        return StorageUrl(value.get_secret_value())

    @model_validator(mode="after")
    def _readers_are_valid(self) -> ClickHouseSettings:
        try:
            self.readers()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _cluster_needs_a_server(self) -> ClickHouseSettings:
        if self.cluster and self.target().kind != "clickhouse":
            raise ValueError(f"cluster={self.cluster!r} needs a clickhouse:// URL: embedded chDB is one process")
        return self

    def target(self) -> StorageTarget:
        url = self.url if isinstance(self.url, StorageUrl) else StorageUrl(self.url.get_secret_value())
        given = (
            ("database", self.database),
            ("cluster", self.cluster),
            ("ca_certs", self.ca_certs),
            ("certfile", self.certfile),
            ("keyfile", self.keyfile),
        )
        update = {k: v for k, v in given if v}
        return url.target.model_copy(update=update) if update else url.target


class StoreSettings(BaseSettings):
    """A process that needs the store only: ``SPARKTAP_CLICKHOUSE__*``."""

    model_config = SETTINGS_CONFIG

    clickhouse: ClickHouseSettings = ClickHouseSettings()


def load_store_settings(**overrides: Any) -> StoreSettings:
    """The store's settings from the environment plus overrides; a bad value is one clear ConfigError line."""
    return load(StoreSettings, **overrides)
