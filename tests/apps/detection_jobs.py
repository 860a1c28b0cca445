"""Spark jobs whose stages the detection rules are about, run in a test's own SparkSession (with the listener):
skew in rows that bytes hide, a straggler in a multi-wave stage, a shuffle of a million tiny blocks, a stage whose
first tasks fail and then recovers, and their controls. Each job runs under its own job group; ``stages(sc, group)``
gives the stage ids it ran. Sleeping inside a task is the workload here (a task of a known length), never a wait.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

HOT_ROWS = 1_500_000
"""Rows of the hot key on the big side of the row-skewed join."""


def stages(sc: Any, group: str) -> set[int]:
    """The stage ids of the jobs run under ``group``."""
    tracker = sc.statusTracker()
    out: set[int] = set()
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            out.update(info.stageIds)
    return out


def join_on_one_column(spark: Any, group: str, skewed: bool) -> int:
    """A sort-merge join whose big side is the key column only (its bytes pruned and compressed). ``skewed``: one
    key holds ``HOT_ROWS`` of its 1.6 M rows; else the keys are uniform. AQE's skew-join handling, partition
    coalescing and broadcast are off, so the skew reaches the reduce tasks."""
    for key, value in (
        ("spark.sql.adaptive.enabled", "true"),
        ("spark.sql.adaptive.skewJoin.enabled", "false"),
        ("spark.sql.adaptive.coalescePartitions.enabled", "false"),
        ("spark.sql.autoBroadcastJoinThreshold", "-1"),
        ("spark.sql.shuffle.partitions", "8"),
    ):
        spark.conf.set(key, value)
    spark.sparkContext.setJobGroup(group, group)
    key = f"IF(id < {HOT_ROWS}, 0L, id) AS k" if skewed else "id AS k"
    big = spark.range(0, 1_600_000, 1, 4).selectExpr(key)
    small = (
        spark.range(0, 100_000, 1, 2).selectExpr("id AS k")
        if skewed
        else spark.range(0, 1_600_000, 16, 2).selectExpr("id AS k")
    )
    return int(big.join(small, "k").count())


def waves(sc: Any, group: str, straggler_s: float, typical_s: float = 1.0, tasks: int = 16) -> None:
    """``tasks`` tasks on local[2] (tasks / 2 waves) of ``typical_s`` each; the last launched runs ``straggler_s``."""
    last = tasks - 1

    def work(index: int, rows: Any) -> Any:
        time.sleep(straggler_s if index == last else typical_s)  # the task's work: a known duration
        return [sum(1 for _ in rows)]

    sc.setJobGroup(group, group)
    sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(work).collect()


def rows_on_two_tasks(spark: Any, group: str, big: int = 2_000_000, small: int = 100) -> list[int]:
    """A 2-task reduce stage whose tasks read ``big`` and ``small`` rows of shuffle (a 20,000× row ratio by
    default) and take a fraction of a second each: two key values that hash to the two partitions, AQE off (so
    nothing is coalesced). Returns the rows per reduce task."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.sparkContext.setJobGroup(group, group)
    try:
        parts = {int(r[0]): int(r[1]) for r in spark.sql("SELECT id, pmod(hash(id), 2) FROM range(16)").collect()}
        hot = next(k for k, p in parts.items() if p == 0)
        cold = next(k for k, p in parts.items() if p == 1)
        keyed = spark.range(0, big + small, 1, 2).selectExpr(f"IF(id < {big}, {hot}L, {cold}L) AS id")
        return [int(r[0]) for r in keyed.repartition(2, "id").groupBy("id").count().select("count").collect()]
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "true")


def repartition(spark: Any, group: str, maps: int, reduces: int) -> int:
    """``maps`` map tasks of 1,000 rows each, round-robin into ``reduces`` partitions without AQE: every reduce
    task fetches one block from every map output (``maps × reduces`` blocks when ``reduces`` <= 1,000)."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.sparkContext.setJobGroup(group, group)
    try:
        return int(spark.range(0, maps * 1_000, 1, maps).repartition(reduces).count())
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "true")


def flaky_then_recovering(
    sc: Any,
    group: str,
    fired: Path,
    release: Path,
    tasks: int = 120,
    failing: int = 5,
    task_s: float = 0.4,
    gated_from: int = 30,
    held_from: int = 100,
    hold_s: float = 300.0,
) -> None:
    """A stage whose first ``failing`` tasks fail their first attempt (then succeed), the others ``task_s`` each, in
    two phases the test opens: tasks from index ``gated_from`` wait for the file ``fired`` and tasks from
    ``held_from`` for the file ``release`` (each at most ``hold_s``). Until ``fired`` exists, 5 failures in 35
    attempts is 14 % (a warning, however late the alerter looks); then by 105 attempts it is under 5 % (cleared), and
    the stage still runs until ``release``. The two tasks a gate holds run as long as the test waits: a test that
    must not see them as stragglers raises task-time skew's share of the balanced time (test_detection_live)."""

    def work(index: int, rows: Any) -> Any:
        from pyspark import TaskContext

        if index < failing and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"flaky task {index}: the first attempt fails")
        gate = release if index >= held_from else fired if index >= gated_from else None
        if gate is not None:
            deadline = time.monotonic() + hold_s
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # held by the test until it has seen the alerts
        time.sleep(task_s)  # the task's work: a known duration
        return [sum(1 for _ in rows)]

    sc.setJobGroup(group, group)
    sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(work).collect()
