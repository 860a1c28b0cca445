"""The issue-25 fleet rules on real Spark applications of the standalone cluster (a Master and two Workers on
127.0.0.1, executors in their own JVMs), through the listener, a real broker and one collector into chDB.

Three driver processes run at once (the cluster has 6 cores: 2 + 2 + 2):

- ``idle-static``: 2 executors held while the driver waits 30 s between two jobs of 2 tasks of 8 s (busy a third
  of the core-time it holds at most);
- ``idle-dynamic``: the same work with dynamic allocation (shuffle tracking, ``executorIdleTimeout`` 1 s), which
  releases the executors after each job;
- ``nightly-agg``: one recurring job (one application name), 4 runs one after the other with 2 GiB executors: 3 light
  runs whose executors peak far under 300 MiB of heap, then one whose task fills the heap (a string of 1.9e9 bytes
  in a 2 GiB heap with a 32 MiB young generation, so it fits in the old generation).

Expected, with the rules' default thresholds except two: idle executors fires on ``idle-static`` alone, its
evidence equal to the stored lifetimes and task run times; memory over-provisioned fires on the third run alone
(the first two have too short a history, the fourth filled its memory), with the recommended size computed by hand;
memory pressure fires on the fourth run alone. Scaled: the idle rule's floor of 60 core-minutes held, to 1 ms (these
applications hold about 3 core-minutes; the issue names a floor without a value), so the busy share (40 %, the
issue's figure) alone decides between the two idle applications; and memory pressure's GC guard (a peak >= 90 % counts
while GC took >= 5 % of the task run time), to 0.1 %: the issue's criterion is the 90 % peak alone, and the GC share
of a task that fills a heap with one large string is the executor's start-up collections and one full collection,
3 to 12 % of the run time on this machine depending on its load (the guard is checked exactly on samples in
test_fleet_rules).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection import Detector, Thresholds
from sparktap.detection.findings import Finding
from sparktap.detection.macros import expand
from sparktap.detection.sql import Scope, SqlContext
from sparktap.detection.utilisation import usage_query
from sparktap.local.ports import wait_until
from sparktap.store import Storage
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import new_topic
from tests.fixtures.spark_lines import AppRun, listener_settings, run_app, spark_line
from tests.support.collector import LIVE_COLLECTOR, in_process, settings_for
from tests.support.services.spark_standalone import SparkStandaloneCluster

pytestmark = pytest.mark.integration

MiB = 1_048_576
GiB = 1024 * MiB
TASK_MS = 8_000
WAIT_S = 30
FILL_BYTES = 1_900_000_000
ANY_GC = 0.001
MEMORY_RULES = ("memory_overprovisioned", "memory_pressure", "driver_memory_pressure", "run_regression")


def stored(storage: Storage, table: str, app_ids: list[str]) -> list[dict[str, Any]]:
    apps = ", ".join(f"'{a}'" for a in app_ids)
    return storage.query(
        f"SELECT * FROM {storage.qualified(table + '_dedup')} WHERE app_id IN ({apps}) ORDER BY seq"  # noqa: S608
    )


def lifetimes(storage: Storage, app_id: str) -> tuple[float, float]:
    """Held core-ms (cores × lifetime, closed at app_end when never removed) and busy core-ms (the tasks' run time)
    of one application, by hand from the stored rows."""
    added = {r["executor_id"]: r for r in stored(storage, "executor_added", [app_id])}
    removed = {r["executor_id"]: r["event_time_ms"] for r in stored(storage, "executor_removed", [app_id])}
    (end,) = stored(storage, "app_end", [app_id])
    held = sum(a["total_cores"] * (removed.get(e, end["event_time_ms"]) - a["event_time_ms"]) for e, a in added.items())
    busy = sum(r["run_time_ms"] for r in stored(storage, "task_end", [app_id]))
    return float(held), float(busy)


def test_idle_executors_overprovisioned_memory_and_pressure_on_live_applications(
    spark_standalone: SparkStandaloneCluster, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    line = spark_line("4")  # the cluster runs this interpreter's pyspark
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # executors start faster
    base = {
        "spark.master": spark_standalone.master_url,
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.executor.heartbeatInterval": "1s",
        "spark.executor.metrics.pollingInterval": "50ms",  # the task-end peaks see a string that lives < 1 s
        "spark.executor.extraJavaOptions": fast,
    }
    enable = listener_settings(bootstrap, topic, tmp_path / "spool")
    idle = {"kind": "idle", "task_ms": TASK_MS, "wait_s": WAIT_S}
    dynamic = {
        "spark.app.name": "idle-dynamic",
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.executorIdleTimeout": "1s",
        "spark.dynamicAllocation.maxExecutors": "2",
    }
    light = {"executors": 2, "work": {"kind": "light", "task_ms": 1_500}}
    recurring = {"spark.app.name": "nightly-agg", "spark.executor.memory": "2g",
                 "spark.executor.extraJavaOptions": f"{fast} -Xmn32m"}  # fmt: skip
    specs: dict[str, dict[str, Any]] = {
        "idle-static": {"apps": [{"executors": 2, "conf": {"spark.app.name": "idle-static"}, "work": idle}]},
        "idle-dynamic": {"apps": [{"conf": dynamic, "work": idle}]},
        "nightly-agg": {
            "apps": [light, light, light, {"executors": 2, "work": {"kind": "fill", "rows": 1, "bytes": FILL_BYTES}}],
            "conf": recurring,
        },
    }
    settings = settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", **LIVE_COLLECTOR)

    def drive(name: str) -> AppRun:
        spec = {"conf": {**base, **specs[name].get("conf", {})}, "enable": enable, "apps": specs[name]["apps"]}
        return run_app(line, tmp_path / name, spec, timeout=600, module="tests.apps.fleet_workloads")

    with in_process(settings) as collector, ThreadPoolExecutor(len(specs)) as pool:
        done = dict(zip(specs, pool.map(drive, specs), strict=True))
        for name, app in done.items():
            assert app.returncode == 0, f"{name}: {app.log[-3000:]}"
        out = {name: app.out["apps"] for name, app in done.items()}
        static, dyn = out["idle-static"][0]["app_id"], out["idle-dynamic"][0]["app_id"]
        runs = [r["app_id"] for r in out["nightly-agg"]]
        every = [static, dyn, *runs]
        wait_until(collector.started.is_set, 60, "the collector to start")
        storage = collector.storage
        wait_until(lambda: len(stored(storage, "app_end", every)) == len(every), 90, "every app_end stored")
        starts = {r["app_id"]: r["event_time_ms"] for r in stored(storage, "app_start", every)}
        window = (min(starts.values()) - 3_600_000, max(starts.values()) + 3_600_000)

        def findings(thresholds: Thresholds, rules: tuple[str, ...], apps: list[str]) -> list[Finding]:
            scope = Scope.of(apps=apps)
            return Detector(storage.query, thresholds, storage.database, storage.version(), scope, rules).findings(
                *window
            )

        any_size = Thresholds(idle_executors={"min_allocated_core_ms": 1})  # see the module's docstring
        idle_found = findings(any_size, ("idle_executors",), [static, dyn])
        memory_found = findings(Thresholds(memory_pressure={"near_gc_share": ANY_GC}), MEMORY_RULES, every)
        ctx = SqlContext(storage.database, storage.version(), Scope.of(apps=every))
        usage = {r["app_id"]: r for r in storage.query(expand(usage_query(ctx, "app"), *window))}
        held = {a: lifetimes(storage, a) for a in every}
        metrics = stored(storage, "executor_metrics", every)
        added = stored(storage, "executor_added", every)
        removed = stored(storage, "executor_removed", every)
        jobs = stored(storage, "job_start", [dyn])

    # idle executors: the static application alone, its evidence the stored lifetimes and task run times
    (finding,) = idle_found
    assert (finding.app_id, finding.where) == (static, 'application "idle-static"')
    allocated, busy = held[static]
    assert allocated >= 2 * WAIT_S * 1_000  # both executors held through the wait
    assert busy >= 4 * TASK_MS
    evidence = finding.evidence
    assert (evidence["allocated_core_ms"], evidence["busy_core_ms"]) == (allocated, busy)
    assert evidence["idle_core_ms"] == allocated - busy
    assert (evidence["executors"], evidence["cores"], evidence["dynamic_allocation"]) == (2, 2, 0)
    assert evidence["busy_share"] == pytest.approx(busy / allocated, abs=1e-12) and busy / allocated < 0.4
    assert "spark.dynamicAllocation.enabled=true" in finding.suggested_fix
    # dynamic allocation: every executor released before the second job started (none lived through the wait), so
    # its tasks kept at least 40 % of the core-time it held busy: no finding, whatever the floor
    second_job = max(r["event_time_ms"] for r in jobs)
    dyn_removed = {r["executor_id"]: r for r in removed if r["app_id"] == dyn}
    dyn_added = [r for r in added if r["app_id"] == dyn]
    assert len(dyn_added) >= 2 and all(r["executor_id"] in dyn_removed for r in dyn_added)
    first_wave = [r for r in dyn_added if r["event_time_ms"] < second_job]
    assert first_wave and all(dyn_removed[r["executor_id"]]["event_time_ms"] < second_job for r in first_wave)
    assert all(dyn_removed[r["executor_id"]]["removal_class"] != "app_end" for r in first_wave)
    dyn_allocated, dyn_busy = held[dyn]
    assert (usage[dyn]["allocated_core_ms"], usage[dyn]["busy_core_ms"]) == (dyn_allocated, dyn_busy)
    assert dyn_busy / dyn_allocated >= 0.4, (dyn_allocated, dyn_busy)

    # memory: per run, the largest executor peak of heap + off-heap (lifetime summaries)
    def peak(app_id: str, field: str = "") -> float:
        mine = [m for m in metrics if m["app_id"] == app_id and m["executor_id"] != "driver"]
        if field:
            return float(max(m[field] for m in mine))
        return float(max(m["jvm_heap_memory"] + m["jvm_off_heap_memory"] for m in mine))

    assert all(peak(r, "jvm_heap_memory") < 300 * MiB for r in runs[:3])
    assert all(r["memory_mb"] == 2048 for r in added if r["app_id"] in runs)
    fill = runs[3]
    assert peak(fill) >= 0.9 * 2 * GiB
    expected = {("memory_overprovisioned", runs[2]), ("memory_pressure", fill)}
    assert {(f.rule, f.app_id) for f in memory_found} == expected
    over = next(f for f in memory_found if f.rule == "memory_overprovisioned")
    largest = max(peak(r) for r in runs[:3])
    recommended = max(math.ceil(largest * 1.5 / (256 * MiB)) * 256 * MiB, 512 * MiB)
    assert {k: over.evidence[k] for k in ("runs", "max_used_bytes", "heap_bytes", "recommended_bytes")} == {
        "runs": 3,
        "max_used_bytes": largest,
        "heap_bytes": 2 * GiB,
        "recommended_bytes": recommended,
    }
    assert over.suggested_fix.startswith(f"Set spark.executor.memory={recommended // MiB}m")
    pressure = next(f for f in memory_found if f.rule == "memory_pressure")
    gc_ms = sum(m["total_gc_time"] for m in metrics if m["app_id"] == fill and m["executor_id"] != "driver"
                and m["stage_id"] is None)  # fmt: skip
    assert {k: pressure.evidence[k] for k in ("max_used_bytes", "heap_bytes", "oom_removals", "gc_ms")} == {
        "max_used_bytes": peak(fill),
        "heap_bytes": 2 * GiB,
        "oom_removals": 0,
        "gc_ms": gc_ms,
    }
    assert pressure.evidence["gc_share"] == pytest.approx(gc_ms / held[fill][1]) and gc_ms >= ANY_GC * held[fill][1]
    assert pressure.severity == "warning"
