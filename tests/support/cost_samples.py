"""Applications whose executor lifetimes, task run times and tags give hand-computable utilisation and cost
(issue 25), and recurring-job histories for the run-over-run and memory rules. Built with ``sample_app.App``,
so every event is valid against the contract."""

from __future__ import annotations

from typing import Any

from tests.support.sample_app import BASE_TIME_MS, App, uniform

T0 = BASE_TIME_MS
S = 1_000
MIN = 60 * S


def _app(app_id: str, name: str, user: str, team: str, start_ms: int, cluster: str = "prod-eu", **props: str) -> App:
    properties = {"spark.sql.adaptive.enabled": "true", **props}
    app = App(app_id, app_name=name, cluster=cluster, start_ms=start_ms, properties=properties)
    tags = {"team": team, "cost_centre": f"cc-{team}"}
    app.emit("app_start", start_ms, properties=dict(app.properties), user=user, tags=tags)
    return app


def executor(
    app: App, executor_id: str, at_ms: int, cores: int, memory_mb: int, overhead_mb: int, **fields: Any
) -> None:
    """An executor of ``cores`` cores and ``memory_mb`` + ``overhead_mb`` MiB (no PySpark memory unless given)."""
    app.emit(
        "executor_added",
        at_ms,
        executor_id=executor_id,
        host=f"10.0.0.{executor_id}",
        total_cores=cores,
        memory_mb=memory_mb,
        memory_overhead_mb=overhead_mb,
        pyspark_memory_mb=fields.pop("pyspark_memory_mb", None),
        **fields,
    )


def removed(app: App, executor_id: str, at_ms: int, removal_class: str = "killed", reason: str = "idle") -> None:
    app.emit("executor_removed", at_ms, executor_id=executor_id, reason=reason, removal_class=removal_class)


def costed_apps() -> list[App]:
    """Three applications of two teams (``data``: alice's two, ``ml``: bob's one).

    - ``app-cost-a``: executors 1 and 2 (4 cores, 4,096 + 512 MiB each) added at +10 s; 1 removed at +70 s, 2
      still open at the app_end at +130 s → 4 × 60 + 4 × 120 = 720 core-s, 4.5 GiB × 180 s = 810 GiB-s; one
      stage (+20 s to +60 s) of 20 tasks × 1.8 s run = 36 core-s busy, in job 1 (+15 s to +65 s) of SQL
      execution 1 (+12 s to +68 s).
    - ``app-cost-b``: executor 1 (2 cores, 2,048 + 384 MiB) from +5 s, removed at +65 s → 120 core-s,
      142.5 GiB-s; 10 tasks × 0.9 s = 9 core-s.
    - ``app-cost-c`` (cluster ``prod-us``): executors 1 and 2 (8 cores, 8,192 + 1,024 MiB) from +1 s, both open
      at the app_end at +1 h 1 s → 57,600 core-s, 64,800 GiB-s; 400 tasks × 9 s = 3,600 core-s busy.
    """
    a = _app("app-cost-a", "daily-report", "alice", "data", T0)
    executor(a, "1", T0 + 10 * S, 4, 4096, 512)
    executor(a, "2", T0 + 10 * S, 4, 4096, 512)
    a.emit("sql_start", T0 + 12 * S, execution_id=1, root_execution_id=1, description="daily report")
    a.emit("job_start", T0 + 15 * S, job_id=1, stage_ids=[1], sql_execution_id=1, description="daily report")
    a.stage(1, T0 + 60 * S, tasks=20, task_ms=2_000, duration_ms=40 * S)
    a.emit("job_end", T0 + 65 * S, job_id=1, result="succeeded", duration_ms=50 * S)
    a.emit("sql_end", T0 + 68 * S, execution_id=1, duration_ms=56 * S)
    removed(a, "1", T0 + 70 * S)
    a.end(T0 + 130 * S)

    b = _app("app-cost-b", "hourly-load", "alice", "data", T0 + 5 * MIN)
    executor(b, "1", T0 + 5 * MIN + 5 * S, 2, 2048, 384)
    b.stage(1, T0 + 5 * MIN + 50 * S, tasks=10, task_ms=1_000, duration_ms=30 * S)
    removed(b, "1", T0 + 5 * MIN + 65 * S)
    b.end(T0 + 5 * MIN + 70 * S)

    c = _app("app-cost-c", "train-model", "bob", "ml", T0 + 10 * MIN, cluster="prod-us")
    executor(c, "1", T0 + 10 * MIN + 1 * S, 8, 8192, 1024)
    executor(c, "2", T0 + 10 * MIN + 1 * S, 8, 8192, 1024)
    c.stage(1, T0 + 40 * MIN, tasks=400, task_ms=10_000, duration_ms=20 * MIN)
    c.end(T0 + 70 * MIN + 1 * S)
    return [a, b, c]


MIDNIGHT = T0 - T0 % 86_400_000
"""00:00 UTC of the day of ``T0`` (the costed applications' day)."""


def midnight_app() -> App:
    """``app-cost-night`` (team ``night``, user dave, cluster ``prod-eu``) from 23:50 to 00:09 UTC: executor 1 (4
    cores, 4,096 + 512 MiB) from 23:54 to 00:03, executor 2 (2 cores, 2,048 MiB) from 23:57 to the app_end at 00:09.
    Held the day before: 4 × 6 + 2 × 3 = 30 core-min, 4.5 × 6 + 2 × 3 = 33 GiB-min; on the day: 4 × 3 + 2 × 9 = 30
    core-min, 4.5 × 3 + 2 × 9 = 31.5 GiB-min. Busy: one stage of 10 tasks × 36 s = 6 core-min."""
    m = MIDNIGHT
    app = _app("app-cost-night", "night-batch", "dave", "night", m - 10 * MIN)
    executor(app, "1", m - 6 * MIN, 4, 4096, 512)
    executor(app, "2", m - 3 * MIN, 2, 2048, 0)
    app.stage(1, m + 2 * MIN, tasks=10, task_ms=40 * S, duration_ms=4 * MIN)  # run time 9/10 of 40 s
    removed(app, "1", m + 3 * MIN)
    return app.end(m + 9 * MIN)


# ------------------------------------------------------------------------------------- the issue-25 rules' samples

GiB_ = 1_073_741_824
MiB_ = 1_048_576
MEMORY_FIELDS = (
    "jvm_heap_memory",
    "jvm_off_heap_memory",
    "on_heap_execution_memory",
    "off_heap_execution_memory",
    "on_heap_storage_memory",
    "off_heap_storage_memory",
    "on_heap_unified_memory",
    "off_heap_unified_memory",
    "direct_pool_memory",
    "mapped_pool_memory",
    "process_tree_jvm_rss_memory",
    "process_tree_python_rss_memory",
    "process_tree_other_rss_memory",
    "minor_gc_count",
    "minor_gc_time",
    "major_gc_count",
    "major_gc_time",
    "total_gc_time",
)


def metrics(app: App, executor_id: str, at_ms: int, heap: int, off_heap: int = 0, gc_ms: int = 0) -> None:
    """An executor's lifetime summary (stage fields null) with these peaks and GC time, every other metric 0."""
    values = dict.fromkeys(MEMORY_FIELDS, 0)
    values.update(jvm_heap_memory=heap, jvm_off_heap_memory=off_heap, total_gc_time=gc_ms)
    app.emit("executor_metrics", at_ms, executor_id=executor_id, stage_id=None, stage_attempt=None, updates=3, **values)


def _run(
    app_id: str,
    name: str,
    start_ms: int,
    *,
    seconds: int = 100,
    executors: int = 1,
    cores: int = 2,
    memory_mb: int = 1024,
    busy_share: float = 0.5,
    heap: int | None = None,
    gc_ms: int = 0,
    stages: tuple[tuple[str, int], ...] = (),
    cluster: str = "prod-eu",
    **props: str,
) -> App:
    """A finished application holding ``executors`` executors of ``cores`` cores for its whole ``seconds``, its tasks
    busy ``busy_share`` of that core-time (in one stage, or in ``stages`` of (name, wall seconds) with the busy time
    spread evenly), with executor peaks ``heap`` (+ 10 MiB off-heap) and ``gc_ms`` of GC each when given."""
    app = _app(app_id, name, "carol", "ops", start_ms, cluster=cluster, **props)
    end = start_ms + seconds * S
    for e in range(1, executors + 1):
        executor(app, str(e), start_ms, cores, memory_mb, 384)
    busy_ms = int(seconds * S * executors * cores * busy_share)
    plan = stages or (("stage 1 at job.py:11", seconds - 2),)
    at = start_ms + S
    for index, (stage_name, wall_s) in enumerate(plan, start=1):
        tasks = 10
        at += wall_s * S
        per_task = busy_ms // len(plan) // tasks
        run = uniform(per_task, tasks)
        app.stage(index, at, tasks=tasks, task_ms=per_task, duration_ms=wall_s * S, name=stage_name, run_time_ms=run)
    if heap is not None:
        for e in range(1, executors + 1):
            metrics(app, str(e), end - 1, heap, 10 * MiB_, gc_ms=gc_ms)
    return app.end(end)


DAY = 86_400_000


def rule_apps(at_ms: int = T0 - DAY) -> list[App]:
    """Applications that fire each issue-25 rule, and ones just under its thresholds (``-under``), the judged runs
    starting at ``at_ms`` and the recurring jobs' earlier runs a day apart before it."""
    apps: list[App] = []
    t = at_ms
    # idle executors: 2 x 4 cores for 600 s = 80 core-min held; 30 % busy fires, 40 % does not, nor 5 % of 59 core-min
    apps.append(_run("app-idle", "idle-report", t, seconds=600, executors=2, cores=4, busy_share=0.3))
    apps.append(_run("app-idle-under", "idle-report-under", t, seconds=600, executors=2, cores=4, busy_share=0.4))
    apps.append(_run("app-idle-small", "idle-small", t, seconds=354, executors=2, cores=5, busy_share=0.05))
    # memory over-provisioned: 3 runs of 2 GiB executors peaking at 280 MiB; the control's 3 runs peak at 40 %
    for run in range(3):
        at = t - (2 - run) * DAY
        apps.append(_run(f"app-overprov-{run}", "nightly-agg", at, memory_mb=2048, heap=270 * MiB_))
        under = int(0.4 * 2 * GiB_) - 10 * MiB_ + 1
        apps.append(_run(f"app-overprov-under-{run}", "nightly-agg-under", at, memory_mb=2048, heap=under))
    # memory pressure: a peak at 95 % of 2 GiB with GC 10 % of the 100 s of task time; an executor removed for
    # memory; the controls peak at 89.9 % with the same GC, and at 95 % with GC 4 % of the task time
    near, gc = int(0.95 * 2 * GiB_) - 10 * MiB_, 10_000
    apps.append(_run("app-pressure", "pressure-job", t, memory_mb=2048, heap=near, gc_ms=gc))
    under = int(0.899 * 2 * GiB_) - 10 * MiB_
    apps.append(_run("app-pressure-under", "pressure-job-under", t, memory_mb=2048, heap=under, gc_ms=gc))
    apps.append(_run("app-pressure-cheap-gc", "pressure-job-cheap-gc", t, memory_mb=2048, heap=near, gc_ms=4_000))
    oom = _run("app-oom", "oom-job", t, memory_mb=2048, heap=int(0.5 * 2 * GiB_))
    oom.events.pop()  # reopen: the OOM removal happens before the app_end
    removed(oom, "1", t + 90 * S, removal_class="oom", reason="Command exited with code 137")
    oom.end(t + 100 * S)
    apps.append(oom)
    # driver memory pressure: the driver's heap at 95 % of spark.driver.memory=2g with 12 s of GC in 100 s; the
    # controls: 89 % of 1 GiB with the same GC, and 95 % with 9 s of GC (under 10 % of the time: no pressure)
    driver = _run("app-driver", "driver-job", t, heap=None, **{"spark.driver.memory": "2g"})
    driver.events.pop()
    metrics(driver, "driver", t + 99 * S, int(0.95 * 2 * GiB_), gc_ms=12_000)
    driver.end(t + 100 * S)
    apps.append(driver)
    driver_under = _run("app-driver-under", "driver-job-under", t, heap=None)
    driver_under.events.pop()
    metrics(driver_under, "driver", t + 99 * S, int(0.89 * GiB_), gc_ms=12_000)
    driver_under.end(t + 100 * S)
    apps.append(driver_under)
    driver_cheap = _run("app-driver-cheap-gc", "driver-job-cheap-gc", t, heap=None)
    driver_cheap.events.pop()
    metrics(driver_cheap, "driver", t + 99 * S, int(0.95 * GiB_), gc_ms=9_000)
    driver_cheap.end(t + 100 * S)
    apps.append(driver_cheap)
    # run regression: 4 runs of 100 s (stages 40 s + 50 s), then one of 250 s whose stage 2 took 190 s; the
    # control's fifth run takes 199 s (1.99x)
    usual = (("load at sync.py:10", 40), ("merge at sync.py:20", 50))
    for run in range(4):
        at = t - (4 - run) * DAY
        apps.append(_run(f"app-sync-{run}", "hourly-sync", at, stages=usual))
        apps.append(_run(f"app-sync-under-{run}", "hourly-sync-under", at, stages=usual))
    slow = (("load at sync.py:10", 42), ("merge at sync.py:20", 190))
    apps.append(_run("app-sync-slow", "hourly-sync", t, seconds=250, stages=slow))
    apps.append(_run("app-sync-under-slow", "hourly-sync-under", t, seconds=199, stages=(("load at sync.py:10", 40),)))
    return apps


SHELL_NAMES = ("Spark shell", "PySparkShell", "pyspark-shell", "Databricks Shell", "livy-session-17")


def fleet_of_shells(at_ms: int = T0 - DAY, count: int = 200, seed: int = 39) -> list[App]:
    """``count`` unrelated applications under shells' and notebooks' default names (``SHELL_NAMES``) on two clusters,
        a day's worth before ``at_ms`` with random durations and executors sized far above what they use; each name's
        last run on ``prod-eu`` (at ``at_ms``) takes 6 x the longest of the others, so comparing strangers by name would
        raise ``run_regression`` (and ``memory_overprovisioned``) for every one of them. Beside them, a named recurring
        job (``nightly-etl``: 4 runs of 100 s, then ``app-nightly-slow`` of 250 s) whose regression is real, and one
    (``weekly-report``) whose earlier runs have no executor events and whose last run has: no core-time to compare."""
    import random

    rng = random.Random(seed)  # noqa: S311 - test data, reproducible by its seed
    apps: list[App] = []
    for i in range(count):
        name = SHELL_NAMES[i % len(SHELL_NAMES)]
        cluster = ("prod-eu", "prod-us")[i // len(SHELL_NAMES) % 2]
        start = at_ms - DAY + rng.randrange(0, DAY - 3_600 * S)
        apps.append(
            _run(
                f"app-shell-{i}",
                name,
                start,
                seconds=rng.randrange(20, 150),
                memory_mb=4096,
                heap=200 * MiB_,
                cluster=cluster,
            )  # fmt: skip
        )
    for j, name in enumerate(SHELL_NAMES):
        apps.append(_run(f"app-shell-last-{j}", name, at_ms, seconds=900, memory_mb=4096, heap=200 * MiB_))
    usual = (("load at etl.py:10", 40), ("merge at etl.py:20", 50))
    for run in range(4):
        apps.append(_run(f"app-nightly-{run}", "nightly-etl", at_ms - (4 - run) * DAY, stages=usual))
    slow = (("load at etl.py:10", 42), ("merge at etl.py:20", 190))
    apps.append(_run("app-nightly-slow", "nightly-etl", at_ms, seconds=250, stages=slow))
    # earlier runs without executor events (imported from logs that lack them): no core-time to compare with, so the
    # next run, as long as they were but with executors, is no regression
    for run in range(4):
        apps.append(_run(f"app-weekly-{run}", "weekly-report", at_ms - (4 - run) * DAY, executors=0))
    apps.append(_run("app-weekly-now", "weekly-report", at_ms, executors=2))
    return apps


def keyed_jobs(at_ms: int = T0 - DAY) -> list[App]:
    """Recurring jobs by key, not by name (issue 39), each with 4 earlier daily runs (3 for ``etl.big``): under a
    shell's default name with ``spark.sparktap.job=nightly-orders`` (its last run 2.5x: a regression) and the same key
    on ``prod-us`` with runs of 500 s (never compared across clusters); a Databricks job (``spark.databricks.job.id``)
    under the notebook's shared name, 2.5x as well; and two Airflow tasks (``spark.openlineage.parentJobName``) under
    one name ``etl``, of 100 s and 300 s runs, whose last 300 s run is as usual for its own task (by name alone: 3x
    the name's median of 100 s)."""
    apps: list[App] = []
    orders = {"spark.sparktap.job": "nightly-orders"}
    databricks = {"spark.databricks.job.id": "1042"}
    small, big = {"spark.openlineage.parentJobName": "etl.small"}, {"spark.openlineage.parentJobName": "etl.big"}
    for run in range(4):
        day = at_ms - (4 - run) * DAY
        apps.append(_run(f"app-orders-{run}", "Spark shell", day, **orders))
        apps.append(_run(f"app-orders-us-{run}", "Spark shell", day, seconds=500, cluster="prod-us", **orders))
        apps.append(_run(f"app-dbx-{run}", "Databricks Shell", day, **databricks))
        apps.append(_run(f"app-etl-small-{run}", "etl", day, **small))
        if run:  # 3 earlier runs: by name alone, 4 of 100 s and 3 of 300 s, a median of 100 s
            apps.append(_run(f"app-etl-big-{run}", "etl", day + 3_600_000, seconds=300, **big))
    apps.append(_run("app-orders-slow", "Spark shell", at_ms, seconds=250, **orders))
    apps.append(_run("app-dbx-slow", "Databricks Shell", at_ms, seconds=250, **databricks))
    apps.append(_run("app-etl-big-now", "etl", at_ms, seconds=300, **big))
    return apps
