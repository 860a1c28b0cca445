"""Applications whose events lack what a group of rules reads (issue 39, "say when blind"), beside their controls:

- ``app-photon``: a job of two stages over 7.81 GiB of input whose tasks report 400 KiB of shuffle (Databricks Photon
  keeps its shuffle out of Spark's task metrics); ``app-shuffled`` (the same job with its shuffle) and
  ``app-map-only`` (one-stage jobs: nothing to shuffle) are not blind;
- ``app-sql-only``: the same job whose tasks report no shuffle and whose exchanges' SQL metrics report 20 MiB a task:
  blind to the spread across tasks only; ``app-sql-agrees``: app-photon's shuffle in both (a small shuffle, as the
  corpus Photon log's): not blind;
- ``app-old-log``: tasks ran, no executor reported peak memory (an event log from before Spark 3.0);
- ``app-imported-sql``: SQL executions without plan statistics (an imported event log).

Built with ``sample_app.App`` (every event valid against the contract), timed ``at_ms`` (now, for the
``sparktap findings --since`` window).
"""

from __future__ import annotations

from tests.support.sample_app import App, uniform

MiB = 2**20


def _app(app_id: str, at_ms: int, *, metrics: bool = True) -> App:
    app = App(app_id, "nightly-etl", start_ms=at_ms - 120_000).start()
    if metrics:
        app.emit("executor_metrics", at_ms - 10_000, executor_id="1", stage_id=1)
    return app


def _scan_then_shuffle(app: App, at_ms: int, shuffle_per_task: int, job_of_second: int = 1) -> App:
    tasks = 200
    app.stage(
        1,
        at_ms - 60_000,
        tasks=tasks,
        shuffle_read=False,
        bytes_per_task=40 * MiB,
        shuffle_write_bytes=uniform(shuffle_per_task, tasks),
    )
    app.stage(
        2,
        at_ms - 30_000,
        tasks=tasks,
        bytes_per_task=shuffle_per_task,
        job_id=job_of_second,
        shuffle_write_bytes=uniform(0, tasks),
    )
    return app


def _sql_shuffle(app: App, at_ms: int, task_per_task: int, sql_per_task: int) -> App:
    """A job of two stages whose exchanges' SQL metrics report ``sql_per_task`` bytes a task written and read, and
    whose tasks report ``task_per_task``."""
    tasks = 200
    app.stage(
        1,
        at_ms - 60_000,
        tasks=tasks,
        shuffle_read=False,
        bytes_per_task=40 * MiB,
        shuffle_write_bytes=uniform(task_per_task, tasks),
        sql_shuffle_write_bytes=sql_per_task * tasks,
    )
    app.stage(
        2,
        at_ms - 30_000,
        tasks=tasks,
        bytes_per_task=task_per_task,
        shuffle_read_local_bytes=uniform(task_per_task, tasks),
        shuffle_read_remote_bytes=uniform(0, tasks),
        shuffle_write_bytes=uniform(0, tasks),
        sql_shuffle_read_bytes=sql_per_task * tasks,
        sql_shuffle_read_remote_bytes=0,
    )
    return app


def blind_apps(at_ms: int) -> list[App]:
    photon = _scan_then_shuffle(_app("app-photon", at_ms), at_ms, 2048)
    shuffled = _scan_then_shuffle(_app("app-shuffled", at_ms), at_ms, 20 * MiB)
    map_only = _scan_then_shuffle(_app("app-map-only", at_ms), at_ms, 0, job_of_second=2)
    old = _app("app-old-log", at_ms, metrics=False)
    old.stage(1, at_ms - 30_000, tasks=50)
    imported = _app("app-imported-sql", at_ms)
    imported.stage(1, at_ms - 30_000, tasks=8, sql_execution_id=4)
    for execution in (4, 5, 6):
        imported.emit("sql_start", at_ms - 40_000, execution_id=execution, root_execution_id=execution)
    # the operators' SQL metrics report the shuffle the tasks do not (per-task rules blind), or agree with them
    sql_only = _sql_shuffle(_app("app-sql-only", at_ms), at_ms, 0, 20 * MiB)
    sql_agrees = _sql_shuffle(_app("app-sql-agrees", at_ms), at_ms, 2048, 2048)
    return [a.end(at_ms) for a in (photon, shuffled, map_only, old, imported, sql_only, sql_agrees)]
