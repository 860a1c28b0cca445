"""Applications whose executor lifetimes, task run times and tags give hand-computable utilisation and cost
(issue 25), and recurring-job histories for the run-over-run and memory rules. Built with ``detection_samples.App``,
so every event is valid against the contract."""

from __future__ import annotations

from typing import Any

from tests.support.detection_samples import BASE_TIME_MS, App

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
