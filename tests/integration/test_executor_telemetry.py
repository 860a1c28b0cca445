"""Executor telemetry on a real Spark standalone cluster (a Master and two Workers on 127.0.0.1, executors in their
own JVMs), through a real broker and the collector into ClickHouse (chDB): per executor, the stored peaks, cores, add
and remove times equal Spark's REST API (``allexecutors``); an executor killed by an OutOfMemoryError is classed
``oom`` and the memory pressure rule fires on it (critical); one still running at app end is closed with a synthetic
``app_end`` removal."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection import Detector, Thresholds
from sparktap.detection.macros import expand
from sparktap.detection.sql import Scope, SqlContext
from sparktap.detection.utilisation import usage_query
from sparktap.local.ports import wait_until
from sparktap.store import Storage
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import assert_valid, new_topic, read_app_events
from tests.fixtures.spark_lines import listener_settings, run_app, spark_line
from tests.support.collector import LIVE_COLLECTOR, in_process, settings_for
from tests.support.services.spark_standalone import SparkStandaloneCluster

pytestmark = pytest.mark.integration

PEAKS = {  # Spark's ExecutorMetricType name -> the contract's field
    "JVMHeapMemory": "jvm_heap_memory", "JVMOffHeapMemory": "jvm_off_heap_memory",
    "OnHeapExecutionMemory": "on_heap_execution_memory", "OffHeapExecutionMemory": "off_heap_execution_memory",
    "OnHeapStorageMemory": "on_heap_storage_memory", "OffHeapStorageMemory": "off_heap_storage_memory",
    "OnHeapUnifiedMemory": "on_heap_unified_memory", "OffHeapUnifiedMemory": "off_heap_unified_memory",
    "DirectPoolMemory": "direct_pool_memory", "MappedPoolMemory": "mapped_pool_memory",
    "ProcessTreeJVMRSSMemory": "process_tree_jvm_rss_memory",
    "ProcessTreePythonRSSMemory": "process_tree_python_rss_memory",
    "ProcessTreeOtherRSSMemory": "process_tree_other_rss_memory", "MinorGCCount": "minor_gc_count",
    "MinorGCTime": "minor_gc_time", "MajorGCCount": "major_gc_count", "MajorGCTime": "major_gc_time",
    "TotalGCTime": "total_gc_time",
}  # fmt: skip


def epoch_ms(rest_time: str) -> int:
    """The REST API's ``2026-11-26T05:40:00.123GMT`` as epoch milliseconds."""
    parsed = dt.datetime.strptime(rest_time.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(parsed.timestamp() * 1000)


def rows(storage: Storage, table: str, app_id: str) -> list[dict[str, Any]]:
    return storage.query(
        f"SELECT * FROM {storage.qualified(table + '_dedup')} WHERE app_id = '{app_id}' ORDER BY seq"  # noqa: S608
    )


def test_executor_peaks_cores_and_lifetimes_equal_the_rest_api(
    spark_standalone: SparkStandaloneCluster, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    line = spark_line("4")  # the cluster runs this interpreter's pyspark
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    conf = {
        "spark.master": spark_standalone.master_url,
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.executor.pyspark.memory": "256m",
        "spark.executor.heartbeatInterval": "1s",
        "spark.executor.processTreeMetrics.enabled": "true",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",  # starts faster
        "spark.task.maxFailures": "1",
        "spark.sparktap.tag.team": "payments",
        "spark.yarn.queue": "etl",  # team comes from the tag key first
    }
    enable = listener_settings(bootstrap, topic, tmp_path / "spool")
    app = run_app(line, tmp_path / "app", {"conf": conf, "enable": enable, "standalone": True}, timeout=240)
    assert app.returncode == 0, app.log[-3000:]
    out = app.out
    assert out["busy"] == 2
    assert "OutOfMemoryError" in out["oom_error"] or "exited" in out["oom_error"], out["oom_error"][:500]
    app_id = out["app_id"]
    events = read_app_events(bootstrap, topic)
    assert_valid(events.events)

    settings = settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", **LIVE_COLLECTOR)
    with in_process(settings) as collector:
        wait_until(collector.started.is_set, 120, "the collector to start")
        storage = collector.storage
        wait_until(lambda: rows(storage, "app_end", app_id), 60, "app_end stored")
        added = {r["executor_id"]: r for r in rows(storage, "executor_added", app_id)}
        removed = {r["executor_id"]: r for r in rows(storage, "executor_removed", app_id)}
        metrics = rows(storage, "executor_metrics", app_id)
        (app_end,) = rows(storage, "app_end", app_id)
        (app_start,) = rows(storage, "app_start", app_id)
        tasks = rows(storage, "task_end", app_id)
        ctx = SqlContext(storage.database, storage.version(), Scope.of(apps=[app_id]))
        window = (app_start["event_time_ms"] - 3_600_000, app_end["event_time_ms"] + 3_600_000)
        (usage,) = storage.query(expand(usage_query(ctx, "app"), *window))
        scaled = Thresholds(idle_executors={"busy_share": 1.0, "min_allocated_core_ms": 1})  # any idle time at all
        rules = ("idle_executors", "memory_pressure")
        found = Detector(
            storage.query, scaled, storage.database, storage.version(), Scope.of(apps=[app_id]), rules
        ).findings(*window)
        idle = [f for f in found if f.rule == "idle_executors"]
        pressure = [f for f in found if f.rule == "memory_pressure"]

    assert app_start["tags"] == {"team": "payments"}
    rest = {e["id"]: e for e in out["rest"]}
    executors = sorted(i for i in rest if i != "driver")
    assert len(executors) == 2 and sorted(added) == executors
    lifetime = {r["executor_id"]: r for r in metrics if r["stage_id"] is None}
    for executor in executors:
        spark_view, ours = rest[executor], added[executor]
        assert ours["total_cores"] == spark_view["totalCores"] == 1
        assert ours["event_time_ms"] == epoch_ms(spark_view["addTime"])
        assert (ours["memory_mb"], ours["memory_overhead_mb"], ours["pyspark_memory_mb"]) == (512, None, 256)
        assert ours["resource_profile_id"] == 0
        if "removeTime" in spark_view:
            assert removed[executor]["event_time_ms"] == epoch_ms(spark_view["removeTime"]), executor
        else:  # still running when the application ended: closed then
            assert removed[executor]["removal_class"] == "app_end"
            assert removed[executor]["event_time_ms"] == app_end["event_time_ms"]
        peaks = spark_view.get("peakMemoryMetrics")
        if peaks is None:
            assert executor not in lifetime  # no heartbeat with metrics: no lifetime summary either
        else:
            assert {field: lifetime[executor][field] for field in PEAKS.values()} == {
                PEAKS[name]: value for name, value in peaks.items() if name in PEAKS
            }, executor
    # utilisation (issue 25): held core-time = cores x the stored lifetimes, used = the tasks' run time, exactly
    held = sum(added[e]["total_cores"] * (removed[e]["event_time_ms"] - added[e]["event_time_ms"]) for e in executors)
    assert (usage["allocated_core_ms"], usage["executors"], usage["running"]) == (held, 2, 0)
    assert usage["busy_core_ms"] == sum(r["run_time_ms"] for r in tasks) > 0
    assert (usage["oom_removals"], usage["team"]) == (1, "payments")
    (finding,) = idle  # the idle executors rule on the same live rows: its evidence is those figures
    assert (finding.rule, finding.where) == ("idle_executors", f'application "{app_start["app_name"]}"')
    assert finding.evidence["allocated_core_ms"] == held and finding.evidence["busy_core_ms"] == usage["busy_core_ms"]
    assert finding.evidence["idle_core_ms"] == held - usage["busy_core_ms"] > 0
    assert removed[out["oom_executor"]]["removal_class"] == "oom", removed[out["oom_executor"]]["reason"]
    # the memory pressure rule on the OOM removal (issue 25): critical, 1.5x the 512 MiB request = 768 MiB (the
    # peak plus 30 % is under it: a 512 MiB heap plus its off-heap peaks under 590 MiB)
    (oom,) = pressure
    assert (oom.severity, oom.evidence["oom_removals"], oom.evidence["heap_bytes"]) == ("critical", 1, 512 * 2**20)
    assert oom.evidence["recommended_bytes"] == 768 * 2**20 and oom.evidence["max_used_bytes"] < 590 * 2**20
    assert oom.suggested_fix.startswith("Raise spark.executor.memory to 768m (1.5× the request after an OOM)")
    (survivor,) = set(executors) - {out["oom_executor"]}
    assert removed[survivor]["removal_class"] == "app_end"  # standalone: no removal event before the app ends
    # the busy job's stage: one summary per executor that ran its tasks, within that executor's lifetime peaks
    busy_stage = [r for r in metrics if r["stage_id"] is not None and r["executor_id"] in lifetime]
    assert busy_stage, metrics
    for summary in busy_stage:
        whole = lifetime[summary["executor_id"]]
        assert all(summary[f] <= whole[f] for f in PEAKS.values()), summary
    first = min(r["stage_id"] for r in busy_stage)  # the busy job's only stage; the OOM job's comes after it
    busy = [r for r in busy_stage if r["stage_id"] == first]
    assert sorted(r["executor_id"] for r in busy) == executors
    # heartbeats while the 2.5 s tasks ran (the OOM stage's summary has the failed task's end only, without metrics)
    assert all(r["updates"] >= 2 and r["process_tree_jvm_rss_memory"] > 0 for r in busy), busy
    # the driver: its own peaks, at least what the REST API showed before the end
    driver = lifetime["driver"]
    assert driver["jvm_heap_memory"] > 0
    for name, value in rest["driver"].get("peakMemoryMetrics", {}).items():
        if name in PEAKS:
            assert driver[PEAKS[name]] >= value, name
