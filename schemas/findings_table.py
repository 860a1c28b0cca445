"""The stored findings: one row per finding key, written by the alerter after each pass
(``detection/finding_store.py``), read by the overview and cluster findings panels (``dashboards/panels.py``)
instead of the detection query.

``findings``: the finding columns of the detection query (``detection/query.py`` ``FINDING_COLUMNS``, ``detected_at``
aside), plus ``finding_key`` (``Finding.key``: rule + cluster + application attempt + stage attempt, or SQL execution +
node, or the streaming query run; it does not change while a running stage's numbers move or when it completes),
``time_lost_ms`` (the evidence's estimate, the panels' sort), ``description`` (the job or SQL description),
``resolved`` (1: the last evaluation of its scope no longer returned it) and ``evaluated_at_ms``, the version:
``ReplacingMergeTree(evaluated_at_ms)`` ordered by ``(cluster, app_id, app_attempt, rule, finding_key)``, so a later
evaluation of a finding replaces the earlier one, read through ``findings_dedup`` (``FINAL``) like every table.
``event_time`` (MATERIALIZED, second precision on every version) is the detection time: the panels' time filter, the
monthly partition and the TTL of the ``findings`` retention tier (``store/retention.py``; 400 days by default).
``FINAL`` merges across partitions, so a running stage's finding whose detection time moves into the next month is
still read once.

Cluster: ``findings_local`` (Replicated, version column kept), ``findings`` (Distributed by ``cityHash64(app_id)``: an
application's findings on the shard of its events), ``findings_dedup_local`` + ``findings_dedup``, as for the event
tables (``schemas/cluster.py``).
"""

from __future__ import annotations

from pydantic import BaseModel

from sparktap.schemas.ddl import ColumnSpec, DerivedColumn, Schema, TableSpec, quote_ident
from sparktap.schemas.fields import Features

FINDINGS_TABLE = "findings"
FINDINGS_DAYS = 400
"""default retention of the stored findings (the ``findings`` tier)"""
VERSION_COLUMN = "evaluated_at_ms"

_COLUMNS: tuple[tuple[str, str], ...] = (
    ("cluster", "String"),
    ("app_id", "String"),
    ("app_attempt", "String"),
    ("rule", "String"),
    ("finding_key", "String"),
    ("app_name", "String"),
    ("severity", "String"),
    ("job_id", "Int64"),
    ("sql_execution_id", "Int64"),
    ("stage_id", "Int64"),
    ("stage_attempt", "Int64"),
    ("stage_name", "String"),
    ("node_id", "Int64"),
    ("running", "UInt8"),
    ("value", "Float64"),
    ("threshold", "Float64"),
    ("time_lost_ms", "Float64"),
    ("evidence_names", "Array(String)"),
    ("evidence_values", "Array(Float64)"),
    ("explanation", "String"),
    ("suggested_fix", "String"),
    ("description", "String"),
    ("detected_at_ms", "Int64"),
    ("user", "String"),
    ("team", "String"),
    ("job_tags", "Array(String)"),
    ("session_id", "String"),
    ("operation_id", "String"),
    ("resolved", "UInt8"),
    (VERSION_COLUMN, "Int64"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in _COLUMNS)


class _StoredFinding(BaseModel):
    """Placeholder model of the table (``TableSpec.model``): rows are built by ``detection/finding_store.py``."""


def findings_spec(schema: Schema) -> TableSpec:
    """The ``findings`` table for a schema's server version."""
    features: Features = schema.features
    codec = "CODEC(ZSTD(1))" if features.codecs else ""
    columns = tuple(ColumnSpec(name, ch_type, (name,), None, codec=codec) for name, ch_type in _COLUMNS)
    time = DerivedColumn(
        "event_time",
        "DateTime('UTC')",
        "MATERIALIZED",
        f"toDateTime(intDiv({quote_ident('detected_at_ms')}, 1000), 'UTC')",
    )
    order = ("cluster", "app_id", "app_attempt", "rule", "finding_key")
    return TableSpec(FINDINGS_TABLE, None, _StoredFinding, columns, (time,), order)


def _versioned(statement: str) -> str:
    """``ReplacingMergeTree`` -> ``ReplacingMergeTree(evaluated_at_ms)`` (the Replicated engine's third argument)."""
    lines = statement.split("\n")
    for i, line in enumerate(lines):
        if line == "ENGINE = ReplacingMergeTree":
            lines[i] = f"ENGINE = ReplacingMergeTree({quote_ident(VERSION_COLUMN)})"
        elif line.startswith("ENGINE = ReplicatedReplacingMergeTree(") and line.endswith(")"):
            lines[i] = f"{line[:-1]}, {quote_ident(VERSION_COLUMN)})"
    return "\n".join(lines)


def table_statements(schema: Schema, days: int = FINDINGS_DAYS) -> list[str]:
    """CREATE the findings table(s) and dedup view(s) (idempotent), with ``days`` of retention where the server has
    TTL."""
    from sparktap.schemas.rollups import tier_schema

    spec = findings_spec(schema)
    tiered = tier_schema(schema, days)
    if schema.cluster:
        from sparktap.schemas.cluster import ClusterSchema

        assert isinstance(tiered, ClusterSchema)  # noqa: S101 - a cluster schema replaced stays one
        return [_versioned(tiered.create_local_table(spec)), tiered.create_table(spec), *tiered.view_statements(spec)]
    return [_versioned(tiered.create_table(spec)), tiered.create_view(spec)]


def object_names(schema: Schema) -> list[str]:
    """Every table and view ``table_statements`` creates."""
    from sparktap.schemas.cluster import local_name

    spec = findings_spec(schema)
    names = [spec.name, spec.dedup_view]
    if schema.cluster:
        names += [local_name(spec.name), local_name(spec.dedup_view)]
    return names
