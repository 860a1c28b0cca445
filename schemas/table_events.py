"""The table events: which table (or bare path) a SQL execution read or wrote, in what format, and what a write
committed (``sparktap.schemas.events`` re-exports them).

One ``table_access`` event per scan or write node of a finished SQL execution (live: at its end; imported: from the
plan the event log recorded). The name, location and operator are user-controlled text: they take the name path
(control characters, cap, redaction) like every other name, and the location arrives with its user info, query
string and fragment removed by the listener (and again by the collector's redaction).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sparktap.schemas.envelope import Envelope
from sparktap.schemas.types import TEXT, Bytes, Count, Id, Label

TABLE_FORMATS = ("delta", "iceberg", "hudi", "parquet", "orc", "csv", "json", "text", "avro", "hive", "jdbc", "other")
"""The formats the listener names; anything else is ``other`` (the operator keeps the detail)."""

METRICS_SOURCES = ("plan", "delta", "iceberg", "tasks")
"""Where a write's files, bytes and rows came from: the write node's SQL metrics (``plan``), the Delta commit's
operation metrics (``delta``), the Iceberg snapshot's summary (``iceberg``), the output metrics of the tasks of the
execution (``tasks``: bytes and rows, no files)."""


class TableAccess(Envelope):
    """A table or path one SQL execution read (a scan node) or wrote (a write node or command), at its end."""

    event_type: Literal["table_access"] = "table_access"
    execution_id: Id
    node_id: Annotated[int, Field(ge=-1)] = Field(
        default=-1, description="the scan or write node's plan id (SparkPlan.id); -1 for a command outside the plan"
    )
    role: Literal["read", "write"]
    operator: Label = Field(description="the node or command: Scan parquet, InsertIntoHadoopFsRelationCommand …")
    catalog: Label = Field(default="", description="spark_catalog, an Iceberg catalog's name …; empty for a path")
    table: Label = Field(
        default="", description="the table's qualified name (namespace.name, unquoted); empty for a bare path"
    )
    format: Label = Field(default="", description=f"one of {', '.join(TABLE_FORMATS)}; empty when unknown")
    location: Annotated[str, TEXT] = Field(
        default="", description="the table's root or the path, without user info, query string or fragment"
    )
    write_mode: Label = Field(
        default="", description="for a write: append, overwrite, create, replace, merge, update, delete …"
    )
    files: Count | None = Field(default=None, description="read: files read; write: files committed")
    bytes: Bytes | None = Field(default=None, description="read: size of the files read; write: bytes committed")
    rows: Count | None = Field(default=None, description="read: rows out of the scan; write: rows committed")
    partitions: Count | None = Field(default=None, description="write: dynamic partitions written")
    metrics_source: Label = Field(
        default="", description=f"for a write, where files/bytes/rows came from: {', '.join(METRICS_SOURCES)}"
    )
    version: Label = Field(
        default="", description="for a write: the Delta table version or Iceberg snapshot id it committed"
    )
    index: Count = Field(default=0, description="this access's position among the execution's, 0, 1, 2 …")
    of: Count = Field(
        default=1,
        description="how many tables the execution touched; more than were sent when past spark.sparktap.tables.max",
    )
