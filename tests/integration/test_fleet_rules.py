"""The issue-25 rules (idle executors, memory over-provisioned, memory pressure, driver memory pressure, run-over-run
regression) on real ClickHouse (chDB and clickhouse-server 18.16): each fires on the application built to fire it,
with exact evidence and a fix carrying numbers, and not on the one just under its thresholds
(``cost_samples.rule_apps``)."""

from __future__ import annotations

import dataclasses

import pytest

from sparktap.detection import Detector, Finding, Scope, Thresholds
from sparktap.detection.history import history_app_ids
from sparktap.detection.macros import expand
from sparktap.detection.sql import SqlContext
from sparktap.store import Storage
from tests.support import cost_samples as samples
from tests.support.detection import load

pytestmark = pytest.mark.integration

WINDOW = (samples.T0 - 6 * samples.DAY, samples.T0)
RULES = ("idle_executors", "memory_overprovisioned", "memory_pressure", "driver_memory_pressure", "run_regression")
GiB, MiB = 2**30, 2**20


def test_each_rule_fires_on_its_application_and_not_just_under(storage: Storage) -> None:
    storage.ensure_schema()
    load(storage, samples.rule_apps())
    detector = Detector(storage.query, database=storage.database, version=storage.version(), rules=RULES)
    found = detector.findings(*WINDOW)
    assert sorted((f.app_id, f.rule, f.severity) for f in found) == [
        ("app-driver", "driver_memory_pressure", "warning"),
        ("app-idle", "idle_executors", "warning"),
        ("app-oom", "memory_pressure", "critical"),
        ("app-overprov-2", "memory_overprovisioned", "warning"),
        ("app-pressure", "memory_pressure", "warning"),
        ("app-sync-slow", "run_regression", "warning"),
    ]
    by = {(f.app_id, f.rule): f for f in found}
    assert all(f.subject == "app" and f.where == f'application "{f.app_name}"' for f in found)

    idle = by[("app-idle", "idle_executors")]
    assert idle.evidence == {
        "allocated_core_ms": 4_800_000,  # 2 executors x 4 cores x 600 s
        "busy_core_ms": 1_440_000,
        "idle_core_ms": 3_360_000,
        "busy_share": 0.3,
        "executors": 2,
        "cores": 8,
        "avg_busy_cores": 2.4,
        "recommended_executors": 1,
        "dynamic_allocation": 0,
        "app_duration_ms": 600_000,
        "time_lost_ms": 420_000,  # 3,360 idle core-s over 8 cores
    }
    assert idle.explanation == (
        "Executors held 4800 core-s but tasks ran 1440 core-s (30 % busy): 3360 core-s idle over 600 s on 2 executors"
    )
    assert idle.suggested_fix.startswith("Tasks kept 2.4 cores busy on average out of 8 held (2 executors × 4 cores).")
    assert "spark.dynamicAllocation.executorIdleTimeout=60s" in idle.suggested_fix
    assert idle.suggested_fix.endswith("spark.executor.instances=1.")

    over = by[("app-overprov-2", "memory_overprovisioned")]
    assert {k: over.evidence[k] for k in ("runs", "max_used_bytes", "heap_bytes", "recommended_bytes")} == {
        "runs": 3,
        "max_used_bytes": 280 * MiB,
        "heap_bytes": 2 * GiB,
        "recommended_bytes": 512 * MiB,  # 280 MiB x 1.5 = 420 MiB, rounded up to 256 MiB
    }
    assert over.suggested_fix.startswith("Set spark.executor.memory=512m: the largest peak (280.00 MiB) plus 50%")

    oom = by[("app-oom", "memory_pressure")]
    assert (oom.evidence["oom_removals"], oom.evidence["recommended_bytes"]) == (1, 3 * GiB)
    assert oom.explanation == "1 executor(s) removed for memory"
    pressure = by[("app-pressure", "memory_pressure")]
    assert pressure.explanation == ("executors peaked at 1.90 GiB of heap + off-heap, 95 % of the 2.00 GiB requested")
    assert pressure.suggested_fix.startswith("Raise spark.executor.memory to 2560m (the peak plus 30% headroom)")

    driver = by[("app-driver", "driver_memory_pressure")]
    assert (round(driver.value, 6), driver.evidence["driver_memory_bytes"], driver.evidence["time_lost_ms"]) == (
        0.95,
        2 * GiB,
        12_000,
    )
    assert driver.suggested_fix.startswith("Raise spark.driver.memory to 3072m (the peak plus 50%)")

    slow = by[("app-sync-slow", "run_regression")]
    assert slow.evidence == {
        "duration_ms": 250_000,
        "median_duration_ms": 100_000,
        "duration_ratio": 2.5,
        "core_ms": 500_000,
        "median_core_ms": 200_000,
        "core_ratio": 2.5,
        "runs": 4,
        "grown_stages": 1,
        "top_stage_growth_ms": 140_000,
        "time_lost_ms": 150_000,
    }
    assert slow.explanation == (
        "This run took 250 s, 2.5× the median of its last 4 runs (100 s), and held 2.5× their median core-time; "
        'stages that grew: "merge at sync.py:20" 190 s vs 50 s'
    )


def test_thresholds_move_the_line(chdb_storage: Storage) -> None:
    """Just-under applications fire once their threshold moves past them (the thresholds system reaches the SQL)."""
    storage = chdb_storage
    storage.ensure_schema()
    load(storage, samples.rule_apps())
    moved = Thresholds(
        idle_executors={"busy_share": 0.41, "min_allocated_core_ms": 3_540_000},
        memory_overprovisioned={"used_share": 0.41},
        memory_pressure={"used_share": 0.89},
        driver_memory_pressure={"used_share": 0.88},
        run_regression={"ratio": 1.99},
    )
    found: list[Finding] = Detector(
        storage.query, thresholds=moved, database=storage.database, version=storage.version(), rules=RULES
    ).findings(*WINDOW)
    fired = {(f.app_id, f.rule) for f in found}
    assert {
        ("app-idle-under", "idle_executors"),
        ("app-idle-small", "idle_executors"),
        ("app-overprov-under-2", "memory_overprovisioned"),
        ("app-pressure-under", "memory_pressure"),
        ("app-driver-under", "driver_memory_pressure"),
        ("app-sync-under-slow", "run_regression"),
    } <= fired


def test_an_event_driven_pass_reads_the_last_runs_and_finds_what_the_full_pass_finds(storage: Storage) -> None:
    """A pass scoped to an application reads its recurring job's history from the job-ordered index of runs
    (``run_rollup``, ``detection/history.py``), only the last ``runs`` runs before it, and finds exactly what the full
    pass (every run of the window) finds for that application."""
    storage.ensure_schema()
    load(storage, samples.rule_apps())
    two = Thresholds(run_regression={"runs": 2, "min_runs": 2}, memory_overprovisioned={"runs": 2})
    full = Detector(storage.query, thresholds=two, database=storage.database, version=storage.version(), rules=RULES)
    every = full.findings(*WINDOW)
    assert {(f.app_id, f.rule) for f in every} >= {
        ("app-sync-slow", "run_regression"),
        ("app-overprov-2", "memory_overprovisioned"),
    }
    slow = next(f for f in every if f.app_id == "app-sync-slow")
    assert (slow.evidence["runs"], slow.evidence["median_duration_ms"]) == (2, 100_000)
    for app in ("app-sync-slow", "app-overprov-2", "app-sync-under-slow"):
        scoped = Detector(
            storage.query,
            thresholds=two,
            database=storage.database,
            version=storage.version(),
            rules=RULES,
            scope=Scope.of(apps=[app]),
        )
        assert scoped.findings(*WINDOW) == [f for f in every if f.app_id == app], app
    # the runs the history reads take: the scoped run and the 2 finished runs of its job started just before it
    ctx = SqlContext(storage.database, storage.version(), Scope.of(apps=["app-sync-slow"]), history_runs=2)
    rows = storage.query(expand(history_app_ids(ctx, 30, 2), *WINDOW))
    assert sorted(r["app_id"] for r in rows) == ["app-sync-2", "app-sync-3", "app-sync-slow"]
    ctx = dataclasses.replace(ctx, history_runs=10)
    rows = storage.query(expand(history_app_ids(ctx, 30, 10), *WINDOW))
    assert sorted(r["app_id"] for r in rows) == [*(f"app-sync-{run}" for run in range(4)), "app-sync-slow"]
