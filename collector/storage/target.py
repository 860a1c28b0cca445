"""Where events are stored: the storage URL (``clickhouse://user:pw@host:9000/db?secure=true`` or
``chdb:///dir``; ``?cluster=<name>`` switches to cluster mode: ``docs/cluster.md``), parsed once into a
``StorageTarget`` every backend opens, and its settings group
(``SPARKTAP_CLICKHOUSE__*``).

TLS: ``clickhouses://…`` (or ``?secure=true``) on the server's ``tcp_port_secure`` (9440), verified against the
system CAs, or against a private CA bundle with ``?ca_certs=/etc/sparktap/ca.pem``; a client certificate with
``&certfile=…&keyfile=…``. The settings ``ca_certs``, ``certfile`` and ``keyfile`` (``SPARKTAP_CLICKHOUSE__CA_CERTS``
…) override the URL's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

DEFAULT_CHDB_PATH = Path.home() / ".local" / "share" / "sparktap" / "chdb"


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
    ca_certs: Path | None = None
    """A PEM bundle of the CAs that may sign the server's certificate (instead of the system's)."""
    certfile: Path | None = None
    """A client certificate (PEM) for servers that ask for one; ``keyfile`` is its key (or in the same file)."""
    keyfile: Path | None = None
    path: Path | None = None
    cluster: str | None = None
    """A ClickHouse cluster name (``remote_servers``): the schema is created ON CLUSTER, sharded and replicated."""

    @property
    def redacted(self) -> str:
        if self.kind == "chdb":
            return f"chdb://{self.path}"
        scheme = "clickhouses" if self.secure else "clickhouse"
        suffix = f"?cluster={self.cluster}" if self.cluster else ""
        return f"{scheme}://{self.user}:***@{self.host}:{self.port}/{self.database}{suffix}"


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
        cluster = query.get("cluster", [""])[0] or None
        tls_files = {
            name: Path(query[name][0]).expanduser() for name in ("ca_certs", "certfile", "keyfile") if query.get(name)
        }
        if cluster is not None and not cluster.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"ClickHouse URL has an invalid cluster name {cluster!r}: letters, digits, _ and - only")
        return StorageTarget(
            kind="clickhouse",
            host=parts.hostname or "127.0.0.1",
            port=port,
            user=unquote(parts.username) if parts.username else "default",
            password=SecretStr(unquote(parts.password) if parts.password else ""),
            secure=secure,
            verify=verify,
            database=database,
            cluster=cluster,
            **tls_files,
        )
    raise ValueError(
        f"unsupported storage URL scheme {parts.scheme!r}: use clickhouse://user:password@host:9000/db or chdb:///dir"
    )


if TYPE_CHECKING:
    from sparktap.collector.storage.access import Reader


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
    retention_days: int = Field(default=30, ge=1)
    task_retention_days: int | None = Field(
        default=7,
        ge=1,
        description="days task_end rows are kept (the shortest tier; None: retention_days); collector/retention.py",
    )
    stage_retention_days: int = Field(
        default=90, ge=1, description="days the per-stage rollups (stage_rollup, run_rollup) are kept"
    )
    app_retention_days: int = Field(default=400, ge=1, description="days the per-application rollup is kept")
    findings_retention_days: int = Field(
        default=400, ge=1, description="days the stored findings (the findings table the alerter writes) are kept"
    )
    readonly_user: str | None = Field(
        default=None,
        description="a read-only user (SELECT on the database only) for Grafana, `sparktap findings` and `sparktap "
        "report`, created by the schema step on ClickHouse >= 20.4 (collector/storage/access.py)",
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
        from sparktap.collector.storage.access import Reader

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
        from sparktap.errors import ConfigError

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
