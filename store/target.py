"""Where events are stored: the storage URL (``clickhouse://user:pw@host:9000/db?secure=true`` or
``chdb:///dir``; ``?cluster=<name>`` switches to cluster mode: ``docs/cluster.md``), parsed once into a
``StorageTarget`` every backend opens, and its settings group
(``SPARKTAP_CLICKHOUSE__*``).

TLS: ``clickhouses://…`` (or ``?secure=true``) on the server's ``tcp_port_secure`` (9440), verified against the
system CAs, or against a private CA bundle with ``?ca_certs=/etc/sparktap/ca.pem``; a client certificate with
``&certfile=…&keyfile=…``. The settings ``ca_certs``, ``certfile`` and ``keyfile`` (``SPARKTAP_CLICKHOUSE__CA_CERTS``
…) override the URL's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

DEFAULT_CHDB_PATH = Path.home() / ".local" / "share" / "sparktap" / "chdb"


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do. The parts outside the store decide by these, never by the engine's name."""

    embedded: bool
    """The engine runs inside the process that opens it, from a local directory (chDB): one process at a time holds
    it (the collector; its alerter runs inside it, other commands read through it or must stop it), its version is
    the one this package ships, and it takes Arrow columns as they are."""
    remote: bool
    """Other processes and hosts reach it over the network (a server): Grafana's datasource, Spark executors that
    write directly, read-only users, connection timeouts, and ``sparktap alert`` following the collectors' inserts."""


CAPABILITIES: dict[str, Capabilities] = {
    "chdb": Capabilities(embedded=True, remote=False),
    "clickhouse": Capabilities(embedded=False, remote=True),
}


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
    def capabilities(self) -> Capabilities:
        return CAPABILITIES[self.kind]

    def url(self) -> str:
        """The storage URL of this target, password included (a secret: for a process this one starts, such as the
        Spark sink's ``url`` option, which Spark redacts); ``parse_storage_url`` reads it back as this target."""
        if self.kind == "chdb":
            return f"chdb://{self.path}?database={quote(self.database)}"
        scheme = "clickhouses" if self.secure else "clickhouse"
        password = quote(self.password.get_secret_value(), safe="")
        params = [
            *([] if self.verify else [("verify", "false")]),
            *([("cluster", self.cluster)] if self.cluster else []),
            *((name, str(value)) for name, value in self.tls_files().items()),
        ]
        query = f"?{urlencode(params, safe='/')}" if params else ""
        return f"{scheme}://{quote(self.user, safe='')}:{password}@{self.host}:{self.port}/{self.database}{query}"

    def tls_files(self) -> dict[str, Path]:
        """The CA bundle and client certificate files named, by their URL parameter."""
        named = (("ca_certs", self.ca_certs), ("certfile", self.certfile), ("keyfile", self.keyfile))
        return {name: path for name, path in named if path is not None}

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
