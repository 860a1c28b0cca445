"""The schema of one ClickHouse server version, on one server or on a cluster (``cluster.py``), and its DDL."""

from __future__ import annotations

from sparktap.schemas.cluster import ClusterSchema
from sparktap.schemas.ddl import Features, Schema, tables_for

MAX_RETENTION_DAYS = 25_000
"""The longest retention a table's TTL can hold: ``toDateTime(event_time) + INTERVAL n DAY`` is a 32-bit DateTime,
whose last second is in February 2106; past it the sum wraps to 1970, so a TTL of 36,500 days on a 2021 event had
the row deleted at its first merge."""


def schema_for(version: tuple[int, ...], database: str, retention_days: int = 30, cluster: str | None = None) -> Schema:
    """The schema for a server version (``(26, 9)``, ``(18, 16, 1)`` …); on ``cluster`` when one is named."""
    if not 1 <= retention_days <= MAX_RETENTION_DAYS:
        raise ValueError(
            f"retention_days={retention_days} is out of range: use 1 to {MAX_RETENTION_DAYS} (the TTL is a DateTime, "
            "which ends in 2106: a longer one wraps around and ClickHouse deletes the rows at once)"
        )
    version = tuple(version)
    if cluster:
        features = Features.for_version(version)
        return ClusterSchema(version, database, retention_days, features, tables_for(version), cluster)
    return Schema(version, database, retention_days, Features.for_version(version), tables_for(version))


def render_ddl(
    version: tuple[int, ...], database: str, retention_days: int = 30, cluster: str | None = None
) -> list[str]:
    """Idempotent CREATE … IF NOT EXISTS statements, in the order they must run."""
    return schema_for(version, database, retention_days, cluster).statements()
