"""Delta Lake and Apache Iceberg for the listener's table tests: which releases run on which Spark line, their jars
from Maven Central (cached by `tests.support.services.maven`), and the application the tests run.

    python -m tests.support.lakehouse SPEC_JSON OUT_JSON

runs `run_tables` under the pyspark of the interpreter (spec: {"conf", "enable", "scratch", "lake", "writes"}) and
writes what the tables' own history says to OUT_JSON.

Spark 3.5 (Scala 2.12) runs Delta 3.3 (`delta-spark` 3.3.2 on PyPI, `io.delta:delta-spark_2.12`) and Iceberg 1.10
(`iceberg-spark-runtime-3.5_2.12`); Spark 4.1 (Scala 2.13, `.venv-spark41`) runs Delta 4.3 (`delta-spark` 4.3.1,
built on Spark 4.1.0) and Iceberg 1.12 (`iceberg-spark-runtime-4.1_2.13`). The main venv's pyspark 4.3 has no
release yet: on it Delta 4.4.0 (built on Spark 4.2) fails every MERGE, UPDATE and DELETE (`NoSuchMethodError` on
`LogicalRDD.<init>`) and Iceberg's 4.1 runtime fails to load (`SparkView` implements `View`, an interface no more).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

WRITES = {"3.5": 20, "4.1": 5}
"""How many times the recurring job appends to each lakehouse table, by Spark line (20 on 3.5: the per-table rollup and
the growth finding; a few on 4.1, which checks that each write and command is named and counted on Spark 4)."""
PARTITIONS = 20
"""The recurring job's write partitions: far too many for 1,000 rows (20 files of 50 rows per write)."""
SIGNED_DIR = "signed?X-Amz-Signature=CANARY_SIG_1"
"""A directory whose name carries a presigned URL's query string: the location must arrive without it."""

LINES = {
    "3.5": ("io.delta:delta-spark_2.12:3.3.2", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1"),
    "4.1": ("io.delta:delta-spark_2.13:4.3.1", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
}
"""Spark line -> the Maven coordinates of its Delta and Iceberg jars (the Delta release is its venv's `delta-spark`:
Makefile)."""

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def jars(line: str, *, install: bool = True) -> list[Path]:
    """The Delta and Iceberg jars of a Spark line (their own: Spark already brings Scala and ANTLR)."""
    from tests.support.services import maven

    artifacts = LINES[line]
    versions = "-".join(a.rsplit(":", 2)[-2].split("-")[0] + a.rsplit(":", 1)[-1] for a in artifacts)
    found = maven.jars(f"lakehouse-{line}-{versions}", artifacts, install=install)
    return [p for p in found if p.name.startswith(("delta-", "iceberg-"))]


def spark_conf(line: str, warehouse: Path, *, install: bool = True) -> dict[str, str]:
    """Spark settings for a session with Delta as the session catalog and an Iceberg Hadoop catalog `lake` in
    `warehouse` (the jars on the driver's class path)."""
    return {
        "spark.jars": ",".join(str(p) for p in jars(line, install=install)),
        "spark.sql.extensions": f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "hadoop",
        "spark.sql.catalog.lake.warehouse": str(warehouse),
        "spark.databricks.delta.snapshotPartitions": "2",  # a small table's log state: 2 tasks, not 50
    }


CHANGES = {
    "changes-merge": "MERGE INTO delta_changes t USING (SELECT id, 'm' AS v FROM range(500, 1500)) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
    "changes-update": "UPDATE delta_changes SET v = 'u' WHERE id < 100",
    "changes-delete": "DELETE FROM delta_changes WHERE id >= 1400",
    "changes-optimize": "OPTIMIZE delta_changes",
}
"""Delta's row-level commands, by job group, on ``delta_changes`` (1,000 rows first), then its compaction."""

REWRITE = "CALL lake.system.rewrite_data_files(table => 'db.compacted', options => map('min-input-files', '2'))"
"""Iceberg's compaction of ``db.compacted`` (15 files of 20 rows in three appends), by its own procedure."""


def run_tables(spark: Any, scratch: Path, lake: bool = True, writes: int = 0) -> dict[str, Any]:
    """The workload: (with `lake`) a Delta and an Iceberg table each appended `writes` times by the same job with
    `PARTITIONS` partitions; a parquet CTAS and append, a bare-path write, a write to a path with a query string, an ORC
    CTAS and a CSV bare-path write, then reads of each. Returns the application id, each job group's job ids, Delta's
    history and Iceberg's snapshots."""
    sc = spark.sparkContext
    groups: dict[str, list[int]] = {}

    def job(group: str, action: Any) -> None:
        sc.setJobGroup(group, group)
        action()
        groups[group] = sorted(sc.statusTracker().getJobIdsForGroup(group))

    if lake:
        spark.sql("CREATE TABLE delta_orders (id BIGINT, v STRING) USING delta")
        spark.sql("CREATE TABLE lake.db.orders (id BIGINT, v STRING) USING iceberg")
    for i in range(writes if lake else 0):
        frame = spark.range(i * 1000, (i + 1) * 1000).selectExpr("id", "cast(id % 7 AS STRING) AS v")
        frame = frame.repartition(PARTITIONS)
        job(f"delta-{i}", lambda f=frame: f.write.format("delta").mode("append").saveAsTable("delta_orders"))
        job(f"iceberg-{i}", lambda f=frame: f.writeTo("lake.db.orders").append())
    if lake:  # Delta's row-level commands on a table of their own: MERGE (update and insert), UPDATE, DELETE
        spark.sql("CREATE TABLE delta_changes (id BIGINT, v STRING) USING delta")
        seed = spark.range(0, 1000, 1, 4).selectExpr("id", "cast(id % 7 AS STRING) AS v")
        job("changes-seed", lambda: seed.write.format("delta").mode("append").saveAsTable("delta_changes"))
        for group, sql in CHANGES.items():
            job(group, lambda q=sql: spark.sql(q))
        # an Iceberg table compacted by Iceberg's own procedure after three small appends
        spark.sql("CREATE TABLE lake.db.compacted (id BIGINT, v STRING) USING iceberg")
        for i in range(3):
            part = spark.range(i * 100, (i + 1) * 100, 1, 5).selectExpr("id", "'c' AS v")
            job(f"compacted-{i}", lambda f=part: f.writeTo("lake.db.compacted").append())
        job("iceberg-rewrite", lambda: spark.sql(REWRITE).collect())
    small = spark.range(0, 500, 1, 3).selectExpr("id", "cast(id AS STRING) AS v")
    job("parquet-ctas", lambda: small.write.format("parquet").saveAsTable("parquet_orders"))
    bare = scratch / "bare" / "orders"
    job("bare", lambda: small.write.mode("overwrite").parquet(str(bare)))
    signed = scratch / "bare" / SIGNED_DIR
    job("signed", lambda: small.write.mode("overwrite").parquet(str(signed)))
    job("parquet-append", lambda: small.write.format("parquet").mode("append").saveAsTable("parquet_orders"))
    job("orc-ctas", lambda: small.write.format("orc").saveAsTable("orc_orders"))
    bare_csv = scratch / "bare" / "orders_csv"
    job("csv-bare", lambda: small.write.mode("overwrite").csv(str(bare_csv)))
    counts = {}
    reads = {
        "read-parquet": spark.table("parquet_orders"),
        "read-bare": spark.read.parquet(str(bare)),
        "read-orc": spark.table("orc_orders"),
        "read-csv": spark.read.schema("id BIGINT, v STRING").csv(str(bare_csv)),
    }
    if lake:
        reads |= {"read-delta": spark.table("delta_orders"), "read-iceberg": spark.table("lake.db.orders")}
    for name, frame in reads.items():  # sums, not counts: Delta and Iceberg answer count() from their metadata
        sc.setJobGroup(name, name)
        counts[name] = frame.agg({"id": "sum"}).collect()[0][0]
        groups[name] = sorted(sc.statusTracker().getJobIdsForGroup(name))
    history: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    snapshots: list[dict[str, Any]] = []
    compacted: list[dict[str, Any]] = []
    if lake:
        from delta.tables import DeltaTable  # type: ignore[import-not-found]  # delta-spark (PyPI), in the 3.5 venv

        history = [
            {"version": r["version"], "operation": r["operation"], "metrics": dict(r["operationMetrics"] or {})}
            for r in DeltaTable.forName(spark, "delta_orders").history().collect()
        ]
        changes = [
            {"version": r["version"], "operation": r["operation"], "metrics": dict(r["operationMetrics"] or {})}
            for r in DeltaTable.forName(spark, "delta_changes").history().collect()
        ]
        snapshots = [
            {"snapshot_id": r["snapshot_id"], "operation": r["operation"], "summary": dict(r["summary"] or {})}
            for r in spark.sql("SELECT snapshot_id, operation, summary FROM lake.db.orders.snapshots").collect()
        ]
        compacted = [
            {"snapshot_id": r["snapshot_id"], "operation": r["operation"], "summary": dict(r["summary"] or {})}
            for r in spark.sql("SELECT snapshot_id, operation, summary FROM lake.db.compacted.snapshots").collect()
        ]
    return {
        "app_id": sc.applicationId,
        "writes": writes if lake else 0,
        "spark_version": spark.version,
        "job_groups": groups,
        "counts": counts,
        "delta_history": history,
        "delta_changes_history": changes,
        "iceberg_snapshots": snapshots,
        "compacted_snapshots": compacted,
        "bare": str(bare),
        "bare_csv": str(bare_csv),
        "signed": str(signed),
        "warehouse": spark.conf.get("spark.sql.warehouse.dir"),
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    if spec.get("enable") is not None:
        import sparktap.listener

        builder = sparktap.listener.enable(builder, **spec["enable"])
    spark = builder.getOrCreate()
    try:
        out = run_tables(spark, Path(spec["scratch"]), lake=spec.get("lake", True), writes=spec.get("writes", 0))
    finally:
        spark.stop()
    Path(sys.argv[2]).write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main()
