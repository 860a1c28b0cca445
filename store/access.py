"""Least privilege in ClickHouse: read-only users for Grafana, ``sparktap findings`` and ``sparktap report``.

A *reader* is a user that may only SELECT from the sparktap database; a *team reader* additionally sees only the
rows of its clusters. What each server version allows (checked on the Debian clickhouse-server 18.16 by
tests/integration/test_clickhouse_readers.py; docs/dashboards.md, "Security"):

- **ClickHouse >= 20.4 (SQL access control):** the schema step runs ``reader_statements``: a role
  ``sparktap_reader`` with ``SELECT`` on ``<db>.*`` only, a settings profile ``readonly = 2`` (reads, and the
  per-query settings the Grafana plugin sends; no write, no DDL, no ``SET readonly``), each user created
  ``IDENTIFIED WITH sha256_hash`` (the password never appears in a query or the query log) with that role and
  profile, and for a team reader a ``ROW POLICY`` per table ``USING cluster IN (…)``, plus one ``USING 1`` policy
  for everybody else (a table with a row policy shows no rows to users no policy names).
- **clickhouse-server 18.16 (no SQL user management):** readers are ``users.xml`` users: ``users_xml`` renders the
  ``users.d/`` file (``allow_databases`` = the sparktap database, SHA-256 password, profile ``readonly = 1`` with
  ``max_execution_time``). Not ``readonly = 2`` there: 18.16 then runs table functions (``url()``, ``remote()``,
  ``file()``: tested), which reach other hosts and files; ``readonly = 1`` refuses them, and any ``SET`` or
  per-query setting (the Grafana plugin sends none unless the datasource has custom settings or a row limit).
  18.16 has **no row-level filter**: it ignores a user's ``<databases><db><table><filter>`` (tested), and a view
  in another database does not help (reading it needs access to the database it reads). Team isolation there
  is one database per team, ``<db>_<team>``, filled by materialized views (``teams.py``), which the team's reader
  is the only one allowed to read (one server only, not a cluster).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from pydantic import SecretStr

from sparktap.errors import ConfigError
from sparktap.schemas.ddl import Schema, quote_ident, quote_literal
from sparktap.schemas.types import is_identifier

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

ROLE = "sparktap_reader"
PROFILE = "sparktap_readonly"
EVERYONE_POLICY = "sparktap_everyone"
USER_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
"""A reader's user name (also an XML element name in users.xml)."""
SQL_ACCESS_CONTROL = (20, 4)
"""The first server version with CREATE USER / ROLE / ROW POLICY."""


@dataclass(frozen=True)
class Reader:
    """A read-only ClickHouse user; ``clusters`` non-empty: a team reader that sees only those clusters' rows."""

    name: str
    password: SecretStr
    clusters: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not re.fullmatch(USER_NAME, self.name):
            raise ConfigError(
                f'invalid reader user="{self.name}": a user name is a letter or _ then up to 63 letters, digits or _'
            )
        if not self.password.get_secret_value():
            raise ConfigError(f'reader user="{self.name}" has no password; set one (a secret setting)')
        bad = [c for c in self.clusters if not is_identifier(c)]
        if bad:
            raise ConfigError(
                f'reader user="{self.name}" lists {len(bad)} cluster name(s) that are not identifiers '
                "(docs/architecture.md, Identifiers); fix the team's cluster list"
            )

    @property
    def sha256_hex(self) -> str:
        return hashlib.sha256(self.password.get_secret_value().encode()).hexdigest()


def has_sql_access_control(version: Sequence[int]) -> bool:
    return tuple(version[:2]) >= SQL_ACCESS_CONTROL


def cluster_filter(clusters: Iterable[str]) -> str:
    return f"cluster IN ({', '.join(quote_literal(c) for c in clusters)})"


def reader_statements(
    database: str, readers: Sequence[Reader], tables: Sequence[str], on_cluster: str = ""
) -> list[str]:
    """The SQL (ClickHouse >= 20.4) that creates or updates ``readers``; ``tables``: the tables holding a ``cluster``
    column that team policies filter (the event tables; their views read them). Idempotent."""
    db = quote_ident(database)
    out = [
        f"CREATE ROLE IF NOT EXISTS {quote_ident(ROLE)}{on_cluster}",
        f"GRANT{on_cluster} SELECT ON {db}.* TO {quote_ident(ROLE)}",
        f"CREATE SETTINGS PROFILE IF NOT EXISTS {quote_ident(PROFILE)}{on_cluster} SETTINGS readonly = 2",
    ]
    for r in readers:
        user = quote_ident(r.name)
        auth = f"IDENTIFIED WITH sha256_hash BY {quote_literal(r.sha256_hex)}"
        out += [
            f"CREATE USER IF NOT EXISTS {user}{on_cluster} {auth}",
            f"ALTER USER {user}{on_cluster} {auth} SETTINGS PROFILE {quote_ident(PROFILE)}",
            f"GRANT{on_cluster} {quote_ident(ROLE)} TO {user}",
            f"ALTER USER {user}{on_cluster} DEFAULT ROLE {quote_ident(ROLE)}",
        ]
    teams = [r for r in readers if r.clusters]
    if teams:
        others = ", ".join(quote_ident(r.name) for r in teams)
        for table in tables:
            target = f"{db}.{quote_ident(table)}"
            out.append(
                f"CREATE ROW POLICY OR REPLACE {quote_ident(EVERYONE_POLICY)} ON {target}{on_cluster} "
                f"FOR SELECT USING 1 TO ALL EXCEPT {others}"
            )
            for r in teams:
                out.append(
                    f"CREATE ROW POLICY OR REPLACE {quote_ident('sparktap_' + r.name)} ON {target}{on_cluster} "
                    f"FOR SELECT USING {cluster_filter(r.clusters)} TO {quote_ident(r.name)}"
                )
    return out


def _readable(database: str, reader: Reader) -> str:
    """The one database a reader may read: its team database (``teams.team_database``) or the sparktap one."""
    return f"{database}_{reader.name}" if reader.clusters else database


def users_xml(
    database: str, readers: Sequence[Reader], networks: Sequence[str] = ("::/0",), max_execution_time: int = 60
) -> str:
    """The ``users.d/sparktap-readers.xml`` file of a server without SQL access control (18.16): one read-only
    user per reader, its password as SHA-256 only; a team reader may read only its team database
    (``teams.team_database``, kept by the schema step), every other reader the sparktap database."""
    ips = "".join(f"<ip>{escape(n)}</ip>" for n in networks)
    users = "".join(
        f"""
        <{r.name}>
            <password_sha256_hex>{r.sha256_hex}</password_sha256_hex>
            <networks>{ips}</networks>
            <profile>{PROFILE}</profile>
            <quota>default</quota>
            <allow_databases><database>{escape(_readable(database, r))}</database></allow_databases>
        </{r.name}>"""
        for r in readers
    )
    return f"""<?xml version="1.0"?>
<!-- sparktap read-only users (store/access.py): SELECT on one database only -->
<yandex>
    <profiles>
        <{PROFILE}>
            <readonly>1</readonly>
            <max_execution_time>{int(max_execution_time)}</max_execution_time>
        </{PROFILE}>
    </profiles>
    <users>{users}
    </users>
</yandex>
"""


def policy_tables(schema: Schema) -> list[str]:
    """The tables a team's row policy filters: every event table and rollup (``schemas/rollups.py``; and, in cluster
    mode, its local table too: the Distributed table is filtered on the server asked, the local ones when a shard is
    read directly)."""
    from sparktap.schemas.health_rollups import HEALTH_TABLES
    from sparktap.schemas.rollups import ROLLUP_TABLES

    names = [spec.name for spec in schema.tables.values()] + list(ROLLUP_TABLES) + list(HEALTH_TABLES)
    if schema.cluster:
        names += [name + "_local" for name in names]
    return names
