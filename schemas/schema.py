"""The schema of one ClickHouse server version, on one server or on a cluster (``cluster.py``), and its DDL."""

from __future__ import annotations

from sparktap.schemas.cluster import ClusterSchema
from sparktap.schemas.ddl import Features, Schema, tables_for


def schema_for(version: tuple[int, ...], database: str, retention_days: int = 30, cluster: str | None = None) -> Schema:
    """The schema for a server version (``(26, 9)``, ``(18, 16, 1)`` …); on ``cluster`` when one is named."""
    if retention_days < 1:
        raise ValueError(f"retention_days must be >= 1, got {retention_days}")
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
