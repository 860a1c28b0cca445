"""Applications that read and write tables (issue 42): contract events (``table_access`` with the stages of the
same SQL execution), built from the pydantic models like ``detection_samples``, loaded through the collector's row
path (``tests/support/detection.load``)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.sample_app import BASE_TIME_MS, App

DAY_MS = 86_400_000
MiB = 1024 * 1024


@dataclass(frozen=True)
class Table:
    """A table as the listener names it."""

    table: str
    format: str
    location: str
    catalog: str = "spark_catalog"


ORDERS = Table("sales.orders", "delta", "s3a://lake/sales/orders")
EVENTS = Table("lake.events", "iceberg", "s3a://lake/warehouse/lake/events", "lake")
COMPACTED = Table("sales.refunds", "delta", "s3a://lake/sales/refunds")
ONCE = Table("sales.archive", "parquet", "s3a://lake/sales/archive")
BIG_FILES = Table("sales.daily", "parquet", "s3a://lake/sales/daily")
PATH = Table("", "parquet", "hdfs://nn/tmp/exports/orders")


def write(
    app: App, at_ms: int, table: Table, files: int, bytes_: int, execution_id: int = 1, mode: str = "append"
) -> None:
    """One ``table_access`` write of ``files`` files and ``bytes_`` bytes (rows: one per KiB)."""
    app.emit(
        "table_access",
        at_ms,
        execution_id=execution_id,
        node_id=0,
        role="write",
        operator="Execute InsertIntoHadoopFsRelationCommand",
        catalog=table.catalog,
        table=table.table,
        format=table.format,
        location=table.location,
        write_mode=mode,
        files=files,
        bytes=bytes_,
        rows=bytes_ // 1024,
        partitions=0,
        metrics_source="plan",
        version="",
        index=0,
        of=1,
    )


def read(app: App, at_ms: int, table: Table, files: int, bytes_: int, execution_id: int = 2) -> None:
    """One ``table_access`` scan of ``table``."""
    app.emit(
        "table_access",
        at_ms,
        execution_id=execution_id,
        node_id=3,
        role="read",
        operator=f"Scan {table.format} {table.table}",
        catalog=table.catalog,
        table=table.table,
        format=table.format,
        location=table.location,
        write_mode="",
        files=files,
        bytes=bytes_,
        rows=bytes_ // 1024,
        partitions=None,
        metrics_source="",
        version="",
        index=0,
        of=1,
    )


def nightly(
    table: Table,
    runs: int,
    files: int,
    file_bytes: int,
    *,
    name: str = "nightly-orders",
    cluster: str = "prod-eu",
    team: str = "sales",
    prefix: str = "app-nightly",
    end_ms: int = BASE_TIME_MS,
    reads: int = 0,
) -> list[App]:
    """``runs`` daily runs of a recurring job (``spark.sparktap.job``) each writing ``files`` files of ``file_bytes``
    to ``table`` in SQL execution 1 (a stage of ``files`` tasks with those output files), the last at ``end_ms``;
    each run also scans the table ``reads`` times."""
    apps = []
    for i in range(runs):
        at = end_ms - (runs - 1 - i) * DAY_MS
        app = App(
            f"{prefix}-{i:02d}",
            name,
            cluster=cluster,
            start_ms=at - 120_000,
            tags={"team": team, "job": name},
            properties={"spark.sql.adaptive.enabled": "true", "spark.sparktap.job": name},
        ).start()
        app.stage(
            1,
            at,
            tasks=files,
            duration_ms=60_000,
            task_ms=400,
            shuffle_read=False,
            name="save at nightly.py:40",
            output_files=files,
            output_bytes=files * file_bytes,
            output_records=files * file_bytes // 1024,
        )
        write(app, at + 10, table, files, files * file_bytes)
        for r in range(reads):
            read(app, at + 20 + r, table, files * (i + 1), files * file_bytes * (i + 1), execution_id=2 + r)
        app.end(at + 30_000)
        apps.append(app)
    return apps


def compacted(end_ms: int = BASE_TIME_MS) -> list[App]:
    """A table written once with 12,000 files of 1 MiB, again with 10 files, then compacted (``optimize``)."""
    app = App("app-refunds-load", "refunds-load", start_ms=end_ms - 3 * DAY_MS - 60_000).start()
    write(app, end_ms - 3 * DAY_MS, COMPACTED, 12_000, 12_000 * MiB)
    write(app, end_ms - 2 * DAY_MS, COMPACTED, 10, 10 * MiB, execution_id=2)
    write(app, end_ms - DAY_MS, COMPACTED, 94, 12_010 * MiB, execution_id=3, mode="optimize")
    app.end(end_ms - DAY_MS + 60_000)
    return [app]


def written_once(end_ms: int = BASE_TIME_MS) -> list[App]:
    """A table written once with 15,000 files of 1 MiB (a big write, no growth)."""
    app = App("app-archive-load", "archive-load", start_ms=end_ms - 60_000).start()
    write(app, end_ms, ONCE, 15_000, 15_000 * MiB)
    app.end(end_ms + 60_000)
    return [app]


def growth_scenario() -> list[App]:
    """The Delta and Iceberg tables each written 20 times by a recurring job with too many files (1,000 files of
    1 MiB, and 800 of 2 MiB read twice a run), and the tables that are no growth: compacted, written once, big files."""
    return [
        *nightly(ORDERS, 20, 1_000, MiB),
        *nightly(EVENTS, 20, 800, 2 * MiB, name="events-ingest", team="lake", prefix="app-events", reads=2),
        *nightly(BIG_FILES, 20, 1_000, 256 * MiB, name="daily-agg", team="sales", prefix="app-daily"),
        *compacted(),
        *written_once(),
    ]
