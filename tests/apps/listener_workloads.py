"""A Spark application for the listener tests, run as its own process under any pyspark (3.5 or 4.x).

    python -m tests.apps.listener_workloads CONF_JSON OUT_JSON

Starts a local[2] session with the Spark conf in CONF_JSON (the listener's settings and canaries), runs five
workloads, each under its own job group, writes what Spark itself saw (application id, job ids per group, the
status store's shuffle numbers, the results) to OUT_JSON, and stops. Plain Python 3.9+: imports pyspark,
sparktap.local.ports, and sparktap.listener when the spec asks for ``enable()``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SKEW_CONF = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": "1k",
    "spark.sql.adaptive.skewJoin.skewedPartitionFactor": "2",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "1k",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
}
BROADCAST_SWITCH_CONF = {
    "spark.sql.adaptive.skewJoin.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",  # the static planner must pick sort-merge…
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "10MB",  # …and AQE switches once it sees the small side
    "spark.sql.adaptive.localShuffleReader.enabled": "true",
}
HUGE_METHOD_LIMIT = 1_000
COALESCE_CONF = {
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64MB",
    "spark.sql.shuffle.partitions": "200",
}


def stage_numbers(spark: Any, stage_id: int) -> dict[str, Any]:
    jvm = spark.sparkContext._jvm
    store = spark.sparkContext._jsc.sc().statusStore()
    empty = spark.sparkContext._gateway.new_array(jvm.double, 0)
    data = store.stageAttempt(stage_id, 0, False, jvm.java.util.ArrayList(), False, empty)._1()
    return {
        "status": str(data.status().toString()),
        "num_tasks": data.numTasks(),
        "complete": data.numCompleteTasks(),
        "local_bytes": data.shuffleLocalBytesRead(),
        "remote_bytes": data.shuffleRemoteBytesRead(),
        "local_blocks": data.shuffleLocalBlocksFetched(),
        "remote_blocks": data.shuffleRemoteBlocksFetched(),
    }


def settled(spark: Any, stage_id: int, timeout: float = 10.0) -> dict[str, Any]:
    """The stage's numbers once the status store (updated asynchronously) has it complete or skipped."""
    from sparktap.local.ports import wait_until

    def done() -> dict[str, Any] | None:
        numbers = stage_numbers(spark, stage_id)
        return numbers if numbers["status"] in ("COMPLETE", "SKIPPED") else None

    return wait_until(done, timeout, f"status store of stage {stage_id}")


def tag(spark: Any, name: str) -> bool:
    """``spark.addTag`` where the session has it (Spark 4 classic), else ``SparkContext.addJobTag`` (3.5); False on
    3.3 / 3.4, which have neither."""
    if int(spark.version.split(".")[0]) >= 4:
        spark.addTag(name)
        return True
    if hasattr(spark.sparkContext, "addJobTag"):
        spark.sparkContext.addJobTag(name)
        return True
    return False


def untag(spark: Any, name: str) -> None:
    if int(spark.version.split(".")[0]) >= 4:
        spark.removeTag(name)
    elif hasattr(spark.sparkContext, "removeJobTag"):
        spark.sparkContext.removeJobTag(name)


def run(spark: Any, description: str, sql_text: str) -> dict[str, Any]:
    from pyspark.sql import functions as F  # noqa: N812

    sc = spark.sparkContext
    results: dict[str, Any] = {}
    # w1: a job of known shape: 1 job, 1 stage, 4 tasks
    sc.setJobGroup("w1", "known job")
    results["w1"] = len(spark.range(0, 1000, 1, 4).collect())
    # w2: a shuffle (with a job description carrying URL credentials)
    sc.setJobGroup("w2", description)
    rows = spark.range(0, 100_000, 1, 4).selectExpr("id % 100 AS k", "id AS v").groupBy("k").sum("v").collect()
    results["w2"] = len(rows)
    sc.setJobGroup("sql", "sql text")
    results["sql"] = spark.sql(sql_text).collect()[0][0]
    # w3: skew join handled by AQE
    for key, value in SKEW_CONF.items():
        spark.conf.set(key, value)
    sc.setJobGroup("w3", "skew join")
    tagged = tag(spark, "team-x")  # issue 26: Spark 3.5+ names the tag in the jobs' spark.job.tags
    big = spark.range(0, 20_000, 1, 4).select(
        F.when(F.col("id") < 15_000, F.lit(0)).otherwise(F.col("id") % 100).alias("k"), F.col("id").alias("v")
    )
    small = spark.range(0, 2_000, 1, 2).select((F.col("id") % 100).alias("k"), F.col("id").alias("w"))
    results["w3"] = big.join(small, "k").count()
    results["w3_tagged"] = tagged
    untag(spark, "team-x")
    # w4: sort-merge join that AQE turns into a broadcast join with local shuffle reads
    for key, value in BROADCAST_SWITCH_CONF.items():
        spark.conf.set(key, value)
    sc.setJobGroup("w4", "smj to bhj")
    left = spark.range(0, 10_000, 1, 4).select((F.col("id") % 500).alias("k"), F.col("id").alias("v"))
    right = spark.range(0, 10_000, 1, 4).select((F.col("id") % 500).alias("k"), F.col("id").alias("w"))
    results["w4"] = left.join(right.where("w % 1000 = 0"), "k").count()
    # w5: 200 shuffle partitions of tiny data, coalesced by AQE
    for key, value in COALESCE_CONF.items():
        spark.conf.set(key, value)
    sc.setJobGroup("w5", "coalesce")
    results["w5"] = spark.range(0, 1000, 1, 2).groupBy((F.col("id") % 50).alias("k")).count().count()
    # w6: an aggregate whose generated methods are over a lowered spark.sql.codegen.hugeMethodLimit: run interpreted
    spark.conf.set("spark.sql.codegen.hugeMethodLimit", str(HUGE_METHOD_LIMIT))
    sc.setJobGroup("w6", "huge method")
    wide = spark.range(0, 1000, 1, 2).select(*[(F.col("id") + i).alias(f"c{i}") for i in range(40)])
    results["w6"] = len(wide.groupBy((F.col("c0") % 10).alias("g")).agg(*[F.sum(f"c{i}") for i in range(40)])
                        .collect())  # fmt: skip

    # w7: the same 20,000 rows as Parquet, ORC and CSV (2 files each), each read back by its own job group
    results["scan_files"] = scan_files(spark)

    tracker = sc.statusTracker()
    scans = (f"scan_{path}{fmt}" for path in SCAN_PATHS.values() for fmt in SCAN_FORMATS)
    groups = ("w1", "w2", "sql", "w3", "w4", "w5", "w6", *scans)
    job_ids = {name: sorted(tracker.getJobIdsForGroup(name)) for name in groups}
    status_store: dict[str, Any] = {}
    for job in job_ids["w2"]:
        for stage_id in tracker.getJobInfo(job).stageIds or []:
            numbers = settled(spark, stage_id)
            if numbers["status"] == "COMPLETE":  # a skipped stage (its shuffle output reused) ran no task
                status_store[str(stage_id)] = numbers
    listener = None
    for candidate in sc._jsc.sc().listenerBus().listeners():
        if candidate.getClass().getName() == "io.sparktap.listener.SparkTapListener":
            listener = candidate
    return {
        "app_id": sc.applicationId,
        "spark_version": spark.version,
        "java_version": sc._jvm.java.lang.System.getProperty("java.version"),
        "job_ids": job_ids,
        "status_store": status_store,
        "results": results,
        "listener": None
        if listener is None
        else {"active": listener.isActive(), "off_reason": listener.offReason(), "status": listener.statusJson()},
    }


SCAN_FORMATS = ("parquet", "orc", "csv")
SCAN_PATHS = {"v1": "", "v2": "v2_"}
"""How the files are read -> the job group's infix: the V1 file source (FileSourceScanExec, Spark's default) and DSv2
(BatchScanExec over a FileScan, with ``spark.sql.sources.useV1SourceList`` emptied)."""


def scan_files(spark: Any) -> dict[str, list[int]]:
    """Write 20,000 rows in two files per format, then read each back (``sum(id)``) under the job group
    ``scan_<format>`` through the V1 file source, and again under ``scan_v2_<format>`` through DSv2; format ->
    [bytes of its data files on disk, number of them]."""
    import tempfile
    from pathlib import Path

    sc = spark.sparkContext
    root = Path(tempfile.mkdtemp(prefix="sparktap-scan-"))
    out: dict[str, list[int]] = {}
    sc.setJobGroup("scan_files", "write the scanned files")
    data = spark.range(0, 20_000, 1, 2).selectExpr("id", "concat('row ', id) AS label")
    for fmt in SCAN_FORMATS:
        data.write.format(fmt).save(str(root / fmt))
        files = [p for p in (root / fmt).iterdir() if p.name.startswith("part-")]
        out[fmt] = [sum(p.stat().st_size for p in files), len(files)]
    for path, infix in SCAN_PATHS.items():
        if path == "v2":
            spark.conf.set("spark.sql.sources.useV1SourceList", "")
        for fmt in SCAN_FORMATS:
            sc.setJobGroup(f"scan_{infix}{fmt}", f"read {fmt} ({path})")
            read = spark.read.format(fmt).schema("id LONG, label STRING").load(str(root / fmt))
            read.selectExpr("sum(id)").collect()
    spark.conf.unset("spark.sql.sources.useV1SourceList")
    return out


def run_light(spark: Any) -> dict[str, Any]:
    """Only w1 (spec ``"light": true``): for tests about the listener's start, not its events."""
    sc = spark.sparkContext
    sc.setJobGroup("w1", "known job")
    results = {"w1": len(spark.range(0, 1000, 1, 4).collect())}
    listener = None
    for candidate in sc._jsc.sc().listenerBus().listeners():
        if candidate.getClass().getName() == "io.sparktap.listener.SparkTapListener":
            listener = candidate
    return {
        "app_id": sc.applicationId,
        "spark_version": spark.version,
        "java_version": sc._jvm.java.lang.System.getProperty("java.version"),
        "results": results,
        "listener": None
        if listener is None
        else {"active": listener.isActive(), "off_reason": listener.offReason(), "status": listener.statusJson()},
    }


def run_standalone(spark: Any) -> dict[str, Any]:
    """Spec ``"standalone": true`` (a standalone master, 2 executors of 1 core): a job of 2 tasks sleeping 2.5 s
    (one per executor, heartbeats while they run), then the executor target lowered to 1 and a task allocating past
    its executor's heap (the executor dies of an OutOfMemoryError, no replacement); the other executor stays until
    the application ends. Returns Spark's REST API ``allexecutors`` once the removal shows there."""
    import urllib.request

    from sparktap.local.ports import wait_until

    sc = spark.sparkContext
    app_id = sc.applicationId

    def rest() -> list[dict[str, Any]]:
        url = f"{sc.uiWebUrl}/api/v1/applications/{app_id}/allexecutors"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the driver's UI on 127.0.0.1
            return list(json.loads(response.read()))

    def executors(active: bool | None = None) -> list[dict[str, Any]]:
        return [e for e in rest() if e["id"] != "driver" and (active is None or e["isActive"] == active)]

    wait_until(lambda: len(executors(True)) == 2, 90, "2 executors registered")
    sc.setJobGroup("busy", "2 tasks of 2.5 s")
    sleep = "reflect('java.lang.Thread', 'sleep', CAST(2500 AS BIGINT)) AS s"
    busy = len(spark.range(0, 2, 1, 2).selectExpr(sleep).collect())
    jvm = sc._jvm
    sc._jsc.sc().requestTotalExecutors(
        1, 0, jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
    )
    sc.setJobGroup("oom", "allocate past the heap")
    try:
        spark.range(0, 1, 1, 1).selectExpr("size(array_repeat(id, 250000000)) AS n").collect()
        oom_error = ""
    except Exception as exc:  # noqa: BLE001 - the job is meant to fail
        oom_error = str(exc)[:2000]
    dead = wait_until(lambda: [e["id"] for e in executors(False)] or None, 60, "the OOM executor removed")
    return {
        "app_id": app_id,
        "spark_version": spark.version,
        "busy": busy,
        "oom_error": oom_error,
        "oom_executor": dead[0],
        "rest": rest(),
    }


def main() -> None:
    conf_path, out_path = sys.argv[1], sys.argv[2]
    spec = json.loads(open(conf_path, encoding="utf-8").read())
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    if spec.get("enable") is not None:  # the PySpark helper picks the jar for this pyspark
        import sparktap.listener

        builder = sparktap.listener.enable(builder, **spec["enable"])
    spark = builder.getOrCreate()
    try:
        if spec.get("standalone"):
            out = run_standalone(spark)
        else:
            out = run_light(spark) if spec.get("light") else run(spark, spec["description"], spec["sql"])
    finally:
        spark.stop()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
