"""The 22 TPC-H queries as a Spark application would run them: the Parquet tables of ``tests/fixtures/tpch.py``
registered as catalog tables, each query collected under the job description ``TPC-H qNN`` (``label``), and what
Spark itself counted (its status store: jobs, stage attempts, tasks, SQL executions) to compare the stored events
with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fixtures.tpch import TABLES, Tpch


def label(query: int, setting: str = "") -> str:
    """The job description of one query run: 'TPC-H q05', or 'TPC-H q05 cbo' for a run with a setting."""
    return f"TPC-H q{query:02d}" + (f" {setting}" if setting else "")


def register(spark: Any, data: Tpch) -> None:
    """The eight tables as catalog tables over the Parquet directories (ANALYZE TABLE needs catalog tables)."""
    for table in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"CREATE TABLE {table} USING parquet LOCATION '{data.location(table)}'")


def analyze(spark: Any) -> None:
    """Table and column statistics (row counts, distinct counts, min/max, null counts) for the cost-based optimizer."""
    for table in TABLES:
        spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS FOR ALL COLUMNS")


def run_queries(spark: Any, data: Tpch, setting: str = "") -> dict[int, int]:
    """Run the 22 queries once, each under its own job description; query number -> rows returned."""
    sc = spark.sparkContext
    out: dict[int, int] = {}
    try:
        for number, sql in sorted(data.queries.items()):
            sc.setJobDescription(label(number, setting))
            out[number] = len(spark.sql(sql).collect())
    finally:
        sc.setJobDescription(None)
    return out


@dataclass(frozen=True)
class SparkCounts:
    """What Spark's own status store holds for the application (the UI's and REST API's source)."""

    jobs: int
    stage_attempts: int
    tasks: int
    sql_executions: int


def spark_counts(spark: Any) -> SparkCounts:
    """Jobs, stage attempts that ran (skipped ones never started), task attempts that ended, SQL executions.

    Read from the driver's ``AppStatusStore`` and ``SQLAppStatusStore`` over py4j; the retention limits
    (``spark.ui.retained*``, 1,000 by default) are far above what the TPC-H run makes."""
    sc = spark.sparkContext
    jvm = sc._jvm
    store = sc._jsc.sc().statusStore()
    jobs = len(sc.statusTracker().getJobIdsForGroup(None))
    stage_attempts = 0
    tasks = 0
    every = jvm.java.util.ArrayList()  # no status or task-status filter
    stages = store.stageList(every, False, False, sc._gateway.new_array(jvm.double, 0), every)
    for i in range(stages.length()):
        stage = stages.apply(i)
        if stage.status().toString() in ("COMPLETE", "FAILED"):
            stage_attempts += 1
            tasks += stage.numCompleteTasks() + stage.numFailedTasks() + stage.numKilledTasks()
    executions = spark._jsparkSession.sharedState().statusStore().executionsCount()
    return SparkCounts(jobs, stage_attempts, tasks, int(executions))


SCANS = ("lineitem full scan", "lineitem full scan vectored off", "lineitem repartition")
"""Job descriptions of ``scan_lineitem``'s three jobs."""


def scan_lineitem(spark: Any) -> None:
    """Three jobs over the whole of ``lineitem`` (every column read, written to the ``noop`` sink): a plain scan with
    Parquet vectored IO on (Spark 4's default: the tasks' input bytes then follow the file count, not the data size),
    the same scan with it off (true task input bytes), and a plain ``repartition(20, "l_orderkey")`` write."""
    sc = spark.sparkContext
    table = spark.table("lineitem")
    try:
        spark.conf.set("parquet.hadoop.vectored.io.enabled", "true")
        sc.setJobDescription(SCANS[0])
        table.write.format("noop").mode("overwrite").save()
        spark.conf.set("parquet.hadoop.vectored.io.enabled", "false")
        sc.setJobDescription(SCANS[1])
        table.write.format("noop").mode("overwrite").save()
        spark.conf.set("parquet.hadoop.vectored.io.enabled", "true")
        sc.setJobDescription(SCANS[2])
        table.repartition(20, "l_orderkey").write.format("noop").mode("overwrite").save()
    finally:
        spark.conf.unset("parquet.hadoop.vectored.io.enabled")
        sc.setJobDescription(None)
