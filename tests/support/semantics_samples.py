"""Applications shaped like the real event logs on which the rules raised false or misleading findings (issue 39,
"Rule semantics that hold on real clusters"), each beside the control that must stay quiet:

- a median task of nothing (AQE or a few keys left most partitions empty): one task read all the data, or a large
  share of it (findings, worded without a ratio), or ten equal non-empty partitions (no finding);
- stages of too few tasks for a median (a 2-task stage one Parquet row group filled, as on TPC-DS; 4 tasks against 5);
- failed attempts with partial input under the listener's median, where the successful ones are balanced;
- Spark's ``Resubmitted`` markers (tasks that had succeeded, re-queued after an executor loss) among the failures,
  finished and running;
- a ``local[*]`` application (the one "executor" is the driver) idle most of its time, beside a cluster one;
- plan estimates under CBO (TPC-DS): a scan over statistics older than the table's rows (the one finding), beside a
  semi join's upper bound, a cross-product estimate over AQE query stages, a filter's selectivity on fresh statistics
  and a pruned scan (none of them a finding).

Built with ``sample_app.App``, so every event is valid against the contract.
"""

from __future__ import annotations

import math
from typing import Any

from tests.support.cost_samples import executor
from tests.support.detection_samples import explode
from tests.support.plan_samples import plan_node
from tests.support.sample_app import BASE_TIME_MS, App, uniform

MiB = 2**20
GiB = 2**30
T0 = BASE_TIME_MS


def quantiles(values: list[int]) -> dict[str, int]:
    """A metric's quantiles over ``values`` as the listener computes them (nearest rank)."""
    ordered = sorted(values)

    def rank(p: float) -> int:
        return ordered[min(len(ordered), max(1, math.ceil(p * len(ordered)))) - 1]

    return {
        "min": ordered[0],
        "p50": rank(0.5),
        "p75": rank(0.75),
        "p95": rank(0.95),
        "max": ordered[-1],
        "sum": sum(ordered),
    }


def lopsided(largest: int, others: int, tasks: int, typical: int = 0) -> dict[str, int]:
    """The quantiles of ``tasks`` tasks: one at ``largest``, then ``others`` in all over as few tasks of at most
    ``largest`` as it takes, every remaining task at ``typical``."""
    values = [largest]
    rest = others
    while rest > 0:
        values.append(min(largest, rest))
        rest -= values[-1]
    values += [typical] * (tasks - len(values))
    return quantiles(values)


def shuffle_stage(
    app: App,
    stage_id: int,
    at_ms: int,
    read: dict[str, int],
    durations: dict[str, int],
    *,
    tasks: int,
    duration_ms: int,
    sql_execution_id: int | None = 1,
    **overrides: Any,
) -> None:
    """A finished stage reading ``read`` (per-task shuffle bytes) in ``durations`` (per-task milliseconds), writing
    no shuffle; its local and remote halves and rows follow the bytes."""
    half = {k: v // 2 for k, v in read.items()}
    app.stage(
        stage_id,
        at_ms,
        tasks=tasks,
        duration_ms=duration_ms,
        sql_execution_id=sql_execution_id,
        task_duration_ms=durations,
        run_time_ms={k: v * 9 // 10 for k, v in durations.items()},
        shuffle_read_bytes=read,
        shuffle_read_local_bytes=half,
        shuffle_read_remote_bytes=half,
        shuffle_write_bytes=uniform(0, tasks),
        **overrides,
    )


# ------------------------------------------------------------------------------------ a median task of nothing


def zero_median_all(app_id: str = "app-zero-median-all") -> App:
    """A join where AQE left 199 of 200 partitions empty: one task reads all 1.20 GiB (41 s; the others 1 s)."""
    app = App(app_id, "zero-median-all").start()
    shuffle_stage(
        app,
        1,
        T0,
        lopsided(1229 * MiB, 0, 200),
        quantiles([41_000] + [1_000] * 199),
        tasks=200,
        duration_ms=45_000,
        name="join at zero.py:10",
    )
    return app


def zero_median_rows(app_id: str = "app-zero-median-rows") -> App:
    """A scan where one task reads all 11,390,100 input rows (80 MiB: under the byte floor) in 20.5 s and 199 tasks
    read nothing in 500 ms: 20 s lost, under the 30 s a critical finding needs."""
    app = App(app_id, "zero-median-rows").start()
    app.stage(
        1,
        T0,
        tasks=200,
        duration_ms=25_000,
        shuffle_read=False,
        sql_execution_id=None,
        name="scan at rows.py:4",
        task_duration_ms=quantiles([20_500] + [500] * 199),
        run_time_ms=quantiles([20_000] + [450] * 199),
        input_bytes=lopsided(80 * MiB, 0, 200),
        input_records_per_task=lopsided(11_390_100, 0, 200),
        input_records=11_390_100,
        shuffle_write_bytes=uniform(0, 200),
    )
    return app


def zero_median_share(app_id: str = "app-zero-median-share") -> App:
    """Most partitions empty; the largest task reads 150 MiB of the stage's 250 MiB (60 %) in 10.2 s."""
    app = App(app_id, "zero-median-share").start()
    shuffle_stage(
        app,
        1,
        T0,
        lopsided(150 * MiB, 100 * MiB, 200),
        quantiles([10_200, 7_000] + [200] * 198),
        tasks=200,
        duration_ms=12_000,
        sql_execution_id=None,
        name="groupBy at share.py:8",
    )
    return app


def zero_median_even(app_id: str = "app-zero-median-even") -> App:
    """The control: ten keys in 200 shuffle partitions, ten equal non-empty partitions of 300 MiB (10 % each) run side
    by side in 4 s; no hot partition, whatever the 190 empty ones."""
    app = App(app_id, "zero-median-even").start()
    shuffle_stage(
        app,
        1,
        T0,
        lopsided(300 * MiB, 2700 * MiB, 200),
        quantiles([4_000] * 10 + [50] * 190),
        tasks=200,
        duration_ms=5_000,
        name="groupBy at even.py:8",
    )
    return app


def zero_median_time(app_id: str = "app-zero-median-time") -> App:
    """200 tasks of empty partitions finishing within the millisecond (0 ms) and one running 8 s of the stage's 9 s."""
    app = App(app_id, "zero-median-time").start()
    shuffle_stage(
        app,
        1,
        T0,
        uniform(MiB, 200),
        quantiles([8_000] + [0] * 199),
        tasks=200,
        duration_ms=9_000,
        sql_execution_id=None,
        name="map at instant.py:3",
    )
    return app


def new_shuffle() -> list[App]:
    """A job's stage whose last 3 runs (a day apart) shuffled nothing, now writing 2 GiB of shuffle (4× its 512 MiB
    input: no write blow-up) over 60 s."""
    earlier = [explode(f"app-no-shuffle-run{i}", T0 - (i + 1) * 86_400_000, write_bytes=0) for i in range(3)]
    return [*earlier, explode("app-new-shuffle", T0, write_bytes=2 * GiB)]


# ------------------------------------------------------------------------------------ too few tasks for a median


def two_tasks(app_id: str = "app-two-tasks") -> App:
    """TPC-DS's case: one Parquet row group put every row in one scan task, and AQE's local shuffle read kept them in
    one of 2 reduce tasks (300 MiB, 20.2 s; the other 0 B, 200 ms). No hot key: already a broadcast."""
    app = App(app_id, "two-tasks").start()
    shuffle_stage(
        app,
        1,
        T0,
        quantiles([300 * MiB, 0]),
        quantiles([20_200, 200]),
        tasks=2,
        duration_ms=21_000,
        name="broadcast at tpcds.py:30",
    )
    return app


def few_tasks(app_id: str, tasks: int) -> App:
    """A stage of ``tasks`` tasks, one reading 600 MiB in 12 s, the others 50 MiB in 1 s (12× the median): a median
    to compare with from 5 tasks on."""
    app = App(app_id, f"few-tasks-{tasks}").start()
    shuffle_stage(
        app,
        1,
        T0,
        quantiles([600 * MiB] + [50 * MiB] * (tasks - 1)),
        quantiles([12_000] + [1_000] * (tasks - 1)),
        tasks=tasks,
        duration_ms=13_000,
        name="join at few.py:6",
    )
    return app


# ------------------------------------------------------------------------------------ failed and resubmitted tasks


def task_end(app: App, stage_id: int, index: int, at_ms: int, status: str = "SUCCESS", **fields: Any) -> None:
    """One ``task_end`` of stage ``stage_id`` finishing at ``at_ms`` (every metric 0 unless given)."""
    duration = fields.pop("duration_ms", 1_000)
    metrics = dict.fromkeys(
        (
            "input_bytes",
            "input_records",
            "output_bytes",
            "shuffle_local_bytes",
            "shuffle_remote_bytes",
            "shuffle_records_read",
            "shuffle_write_bytes",
            "shuffle_write_records",
        ),
        0,
    )
    app.emit(
        "task_end",
        at_ms,
        stage_id=stage_id,
        stage_attempt=0,
        task_id=stage_id * 100_000 + index,
        index=index,
        launch_time_ms=at_ms - duration,
        finish_time_ms=at_ms,
        duration_ms=duration,
        run_time_ms=duration * 9 // 10,
        gc_time_ms=duration // 100,
        status=status,
        **{**metrics, **fields},
    )


def failed_partial(app_id: str = "app-failed-partial") -> App:
    """10 tasks, each of whose successful attempts read 100 MiB in 10 s (one 106 MiB in 10.6 s), after 12 attempts
    failed part-way (30 MiB in 3 s). The listener's median over all 22 attempts is a failed one's 30 MiB: the largest
    task looks 3.5× the median task; over the successful attempts it is 1.06×."""
    app = App(app_id, "failed-partial").start()
    at = T0 - 5_000
    reads = [106 * MiB] + [100 * MiB] * 9
    for index in range(12):
        task_end(
            app,
            1,
            index % 10,
            at + index,
            status="FAILED",
            failure_class="ExceptionFailure",
            duration_ms=3_000,
            shuffle_local_bytes=15 * MiB,
            shuffle_remote_bytes=15 * MiB,
        )
    for index, read in enumerate(reads):
        task_end(
            app,
            1,
            index,
            at + 100 + index,
            duration_ms=10_000 + (600 if read > 100 * MiB else 0),
            shuffle_local_bytes=read // 2,
            shuffle_remote_bytes=read // 2,
        )
    every_read = [30 * MiB] * 12 + reads
    shuffle_stage(
        app,
        1,
        T0,
        quantiles(every_read),
        quantiles([3_000] * 12 + [10_600] + [10_000] * 9),
        tasks=10,
        duration_ms=40_000,
        tasks_succeeded=10,
        tasks_failed=12,
        name="join at partial.py:12",
    )
    return app


def resubmitted(app_id: str, succeeded: int, failed: int, markers: int, killed: int = 0, rows: bool = True) -> App:
    """A map stage of ``succeeded`` tasks on an executor that was lost: ``markers`` of its successful tasks re-queued
    (Spark's ``Resubmitted`` task ends, which the listener counts as failed) and run again, ``failed`` attempts that
    really failed (``FetchFailed``), ``killed`` speculative copies killed. Spark's UI: ``failed`` failures. With
    ``rows``, its task rows as an older listener sent them (its stage_completed does not say which failures are
    markers); without, its stage_completed as the listener sends it with task rows off (``tasks_resubmitted``)."""
    app = App(app_id, "executor-lost").start()
    at = T0 - 10_000
    index = 0
    for _ in range(succeeded if rows else 0):
        task_end(app, 1, index, at + index, duration_ms=2_000)
        index += 1
    for n in range(markers if rows else 0):
        task_end(app, 1, n, at + index, status="FAILED", failure_class="Resubmitted", duration_ms=2_000)
        index += 1
    for n in range(failed if rows else 0):
        task_end(app, 1, n, at + index, status="FAILED", failure_class="FetchFailed", duration_ms=500)
        index += 1
    for n in range(killed if rows else 0):
        task_end(app, 1, n, at + index, status="KILLED", failure_class="TaskKilled", duration_ms=1_000)
        index += 1
    app.stage(
        1,
        T0,
        tasks=succeeded,
        tasks_succeeded=succeeded,
        tasks_failed=failed + markers,
        tasks_killed=killed,
        tasks_resubmitted=0 if rows else markers,
        duration_ms=60_000,
        task_ms=2_000,
        shuffle_read=False,
        sql_execution_id=None,
        name="map at lost.py:3",
    )
    return app


def late_failures(app_id: str = "app-late-failures") -> App:
    """A stage of 20 tasks that completed with all 20 succeeded, then 6 of its attempts failed and 2 were killed after
    its completion (``late`` task ends: its ``stage_completed`` does not count them, Spark's History Server does)."""
    app = App(app_id, "late-ends").start()
    for index in range(20):
        task_end(app, 1, index, T0 - 10_000 + index, duration_ms=2_000)
    app.stage(
        1,
        T0,
        tasks=20,
        tasks_succeeded=20,
        tasks_failed=0,
        duration_ms=60_000,
        task_ms=2_000,
        shuffle_read=False,
        sql_execution_id=None,
        name="map at late.py:3",
    )
    for n in range(6):
        task_end(app, 1, n, T0 + 1_000 + n, status="FAILED", failure_class="ExceptionFailure", late=True)
    for n in range(2):
        task_end(app, 1, 6 + n, T0 + 2_000 + n, status="KILLED", failure_class="TaskKilled", late=True)
    return app


def running_resubmitted(app_id: str = "app-running-resubmitted") -> App:
    """A running stage (no ``stage_completed`` yet): 20 tasks succeeded, 8 were re-queued after their executor was
    lost (``Resubmitted``), 2 attempts failed."""
    app = App(app_id, "executor-lost-running").start()
    app.emit(
        "stage_submitted",
        T0 - 60_000,
        stage_id=3,
        name="map at lost.py:9",
        num_tasks=400,
        job_id=2,
        sql_execution_id=None,
        submission_time_ms=T0 - 60_000,
        parent_stage_ids=[],
    )
    at = T0 - 30_000
    for index in range(20):
        task_end(app, 3, index, at + index)
    for n in range(8):
        task_end(app, 3, n, at + 100 + n, status="FAILED", failure_class="Resubmitted")
    for n in range(2):
        task_end(app, 3, 20 + n, at + 200 + n, status="FAILED", failure_class="ExceptionFailure")
    return app


# ------------------------------------------------------------------------------------ local mode


def idle_application(app_id: str, master: str, executor_id: str, cores: int = 8) -> App:
    """An application holding one executor of ``cores`` cores for 900 s, its tasks busy 5 % of that core-time, under
    ``spark.master=master`` (in local mode Spark's one executor is the driver)."""
    start = T0 - 2 * 3_600_000
    app = App(app_id, f"notebook-{app_id}", start_ms=start, properties={"spark.master": master}).start()
    executor(app, executor_id, start, cores, 1024, 384)
    busy = 900_000 * cores // 20
    app.stage(
        1, start + 300_000, tasks=10, task_ms=busy // 10, duration_ms=290_000, run_time_ms=uniform(busy // 10, 10)
    )
    return app.end(start + 900_000)


CBO = {
    "spark.sql.cbo.enabled": "true",
    "spark.sql.cbo.joinReorder.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
}


def cbo_plan(app_id: str, nodes: list[dict[str, Any]], execution: int = 7) -> App:
    """One SQL execution with CBO and AQE on: its plan ``nodes``, over one 8-task stage of 1.8 s tasks (14.4 s of
    task time: over the rule's time floors)."""
    app = App(app_id, "tpcds", properties=CBO).start()
    app.stage(1, T0 - 20_000, tasks=8, sql_execution_id=execution)
    app.emit(
        "sql_plan_stats",
        T0,
        execution_id=execution,
        whole_stage_codegen=True,
        codegen_max_fields=100,
        codegen_huge_method_limit=65535,
        nodes=nodes,
    )
    return app.end(T0 + 1_000)


def plan_apps() -> list[App]:
    """Stale statistics under CBO (the scan's estimate is the table's 150,000 rows; it read 1,650,000 after ten loads
    since the ANALYZE; the join above it is off as well, from the same cause), and what is no finding: a left semi
    join estimated at its left input's 6,000,000 rows (an upper bound) that kept 50,000; a join over two query stages
    estimated as their cross product; a filter on fresh statistics estimated at 100 rows that passed 2,000,000; a scan
    that read 100,000 of the table's 6,000,000 rows (partition pruning)."""
    plan = {"est_source": "plan", "est_bytes": MiB}
    orders = "Scan parquet spark_catalog.tpcds.orders"
    lineitem = "Scan parquet spark_catalog.tpcds.lineitem"
    return [
        cbo_plan(
            "app-plan-stale",
            [
                plan_node(0, -1, "SortMergeJoin", est_rows=150_000, actual_rows=1_650_000, **plan),
                plan_node(1, 0, "Exchange", actual_rows=1_650_000),
                plan_node(2, 1, orders, est_rows=150_000, actual_rows=1_650_000, **plan),
                plan_node(3, 0, "Exchange", actual_rows=15_000),
                plan_node(
                    4, 3, "Scan parquet spark_catalog.tpcds.customer", est_rows=15_000, actual_rows=15_000, **plan
                ),
            ],
        ),
        cbo_plan(
            "app-plan-semi",
            [
                plan_node(0, -1, "BroadcastHashJoin", est_rows=6_000_000, actual_rows=50_000, **plan),
                plan_node(1, 0, lineitem, est_rows=6_000_000, actual_rows=6_000_000, **plan),
                plan_node(2, 0, "BroadcastExchange", actual_rows=1_000),
            ],
        ),
        cbo_plan(
            "app-plan-cross",
            [
                plan_node(0, -1, "SortMergeJoin", est_rows=9_000_000_000_000, actual_rows=6_000_000, **plan),
                plan_node(1, 0, "Exchange", est_rows=6_000_000, actual_rows=6_000_000, **plan),
                plan_node(2, 0, "Exchange", est_rows=1_500_000, actual_rows=1_500_000, **plan),
            ],
        ),
        cbo_plan(
            "app-plan-selectivity",
            [
                plan_node(0, -1, "Filter", est_rows=100, actual_rows=2_000_000, **plan),
                plan_node(1, 0, lineitem, est_rows=6_000_000, actual_rows=6_000_000, **plan),
            ],
        ),
        cbo_plan("app-plan-pruned", [plan_node(0, -1, lineitem, est_rows=6_000_000, actual_rows=100_000, **plan)]),
    ]


def semantics_apps() -> list[App]:
    """Every application of this module."""
    return [
        zero_median_all(),
        zero_median_rows(),
        zero_median_share(),
        zero_median_even(),
        zero_median_time(),
        *new_shuffle(),
        two_tasks(),
        few_tasks("app-four-tasks", 4),
        few_tasks("app-five-tasks", 5),
        failed_partial(),
        resubmitted("app-resubmitted", succeeded=220, failed=2, markers=50),
        resubmitted("app-resubmitted-failing", succeeded=100, failed=20, markers=30, killed=5),
        resubmitted("app-resubmitted-no-rows", succeeded=220, failed=2, markers=50, rows=False),
        running_resubmitted(),
        late_failures(),
        idle_application("app-local-idle", "local[*]", "driver"),
        idle_application("app-local-n-idle", "local[8]", "driver"),
        idle_application("app-cluster-idle", "spark://10.0.0.1:7077", "1"),
        *plan_apps(),
    ]
