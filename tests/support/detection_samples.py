"""Synthetic applications whose stages mimic the jobs the detection rules are about (a skewed join, a stage of
thousands of tiny tasks, an explode that multiplies shuffle bytes, a write of hundreds of tiny files …), one per
remaining stage rule, running applications, and balanced controls; ``scenario_apps`` is all of them with the plan
and streaming applications of ``plan_samples.py``, and ``PROBLEM_APPS`` / ``CONTROL_APPS`` name which should be
found. Built with ``sample_app.App``, so every event is valid against the contract.
"""

from __future__ import annotations

from sparktap.detection.thresholds import GiB, KiB, MiB
from tests.support.plan_samples import plan_stream_apps
from tests.support.sample_app import BASE_TIME_MS, App, skewed, uniform

CONNECT_TAG = "SparkConnect_OperationTag_User_bob_Session_s-bob_Operation_op-bob"


def skewed_join(app_id: str = "app-skewed-join", at_ms: int = BASE_TIME_MS) -> App:
    """A sort-merge join where one key holds most rows: one task reads 2 GiB (the median 20 MiB) and runs 60 s
    (the median 3 s) of the stage's 70 s; AQE split nothing (the skew is one key)."""
    app = App(app_id, "skewed-join", tags={"team": "payments"}).start()
    app.emit(  # its job ran as a Spark Connect operation of bob's (attribution, issue 26)
        "job_start",
        at_ms - 80_000,
        job_id=1,
        stage_ids=[1],
        sql_execution_id=1,
        job_group=None,
        description=None,
        job_tags=["team-x", CONNECT_TAG],
        user_id="bob",
        session_id="s-bob",
        operation_id="op-bob",
    )
    app.aqe(
        1, at_ms - 80_000, joins=("SortMergeJoin",), skewed=False, num_partitions=200, partition_data_size_bytes=6 * GiB
    )
    app.stage(
        1,
        at_ms,
        tasks=200,
        duration_ms=70_000,
        name="join at skew.py:20",
        task_duration_ms=skewed(3_000, 60_000, 200),
        run_time_ms=skewed(2_700, 58_000, 200),
        shuffle_read_bytes=skewed(20 * MiB, 2 * GiB, 200),
        shuffle_read_local_bytes=skewed(10 * MiB, 1 * GiB, 200),
        shuffle_read_remote_bytes=skewed(10 * MiB, 1 * GiB, 200),
    )
    return app


def tiny_tasks(app_id: str = "app-tiny-tasks", at_ms: int = BASE_TIME_MS) -> App:
    """6,000 tasks of 120 ms each reading 50 KiB: far too many partitions."""
    app = App(app_id, "tiny-tasks").start()
    app.stage(
        1, at_ms, tasks=6_000, duration_ms=40_000, task_ms=120, bytes_per_task=50 * KiB, name="groupBy at tiny.py:9"
    )
    return app


def explode(app_id: str = "app-explode", at_ms: int = BASE_TIME_MS, write_bytes: int = 8 * GiB) -> App:
    """An explode that writes 16x its 512 MiB input to shuffle (8 GiB)."""
    app = App(app_id, "explode-etl").start()
    app.stage(
        1,
        at_ms,
        tasks=64,
        duration_ms=60_000,
        shuffle_read=False,
        bytes_per_task=8 * MiB,
        name="explode at explode.py:14",
        shuffle_write_bytes=uniform(write_bytes // 64, 64),
    )
    return app


def explode_history(runs: int = 3, at_ms: int = BASE_TIME_MS - 86_400_000) -> list[App]:
    """Earlier, normal runs of ``explode``'s job (1 GiB of shuffle each), one a day."""
    return [explode(f"app-explode-run{i}", at_ms - i * 86_400_000, write_bytes=1 * GiB) for i in range(runs)]


def tiny_files(app_id: str = "app-tiny-files", at_ms: int = BASE_TIME_MS) -> App:
    """A write of 400 files of 512 KiB (200 MiB in all)."""
    app = App(app_id, "tiny-files").start()
    app.stage(
        1,
        at_ms,
        tasks=400,
        duration_ms=15_000,
        task_ms=300,
        shuffle_read=False,
        name="save at files.py:30",
        output_files=400,
        output_bytes=400 * 512 * KiB,
        output_records=400_000,
    )
    return app


def balanced(app_id: str = "app-balanced", at_ms: int = BASE_TIME_MS, app_name: str = "balanced-etl") -> App:
    """A well-behaved application: even tasks, a few big output files, local shuffle, no failures."""
    app = App(app_id, app_name).start()
    app.aqe(1, at_ms - 50_000, coalesced=True, num_partitions=20, partition_data_size_bytes=1280 * MiB)
    app.stage(
        1,
        at_ms - 25_000,
        tasks=200,
        duration_ms=20_000,
        task_ms=2_000,
        shuffle_read=False,
        name="scan at balanced.py:5",
    )
    app.stage(
        2,
        at_ms,
        tasks=200,
        duration_ms=25_000,
        task_ms=2_400,
        bytes_per_task=64 * MiB,
        name="save at balanced.py:9",
        output_files=20,
        output_bytes=20 * 128 * MiB,
    )
    app.end(at_ms + 1_000)
    return app


def oversized(app_id: str = "app-oversized", at_ms: int = BASE_TIME_MS) -> App:
    """Ten tasks each reading a 6 GiB unsplittable input file."""
    app = App(app_id, "big-gzip-load").start()
    app.stage(
        1,
        at_ms,
        tasks=10,
        duration_ms=300_000,
        task_ms=280_000,
        shuffle_read=False,
        bytes_per_task=6 * GiB,
        name="load at gz.py:3",
    )
    return app


def remote_heavy(app_id: str = "app-remote", at_ms: int = BASE_TIME_MS) -> App:
    """200 tasks reading 100 MiB of shuffle each, 95 % of it remote, waiting 30 % of their run time on fetches."""
    app = App(app_id, "remote-shuffle").start()
    app.stage(
        1,
        at_ms,
        tasks=200,
        duration_ms=60_000,
        task_ms=10_000,
        bytes_per_task=100 * MiB,
        name="reduce at remote.py:8",
        shuffle_read_local_bytes=uniform(5 * MiB, 200),
        shuffle_read_remote_bytes=uniform(95 * MiB, 200),
        shuffle_fetch_wait_ms=540_000,
    )
    return app


def failing_tasks(app_id: str = "app-failures", at_ms: int = BASE_TIME_MS) -> App:
    """Three stages whose task attempts failed 6/106 (info), 12/112 (warning) and 25/125 (critical) of the time."""
    app = App(app_id, "flaky-udf").start()
    for stage_id, failed in ((1, 6), (2, 12), (3, 25)):
        app.stage(
            stage_id,
            at_ms - (3 - stage_id) * 30_000,
            tasks=100,
            tasks_succeeded=100,
            tasks_failed=failed,
            name=f"map at flaky.py:{stage_id}",
        )
    return app


def gc_heavy(app_id: str = "app-gc", at_ms: int = BASE_TIME_MS) -> App:
    """Tasks spending 25 % of 100 x 9 s of run time in GC."""
    app = App(app_id, "gc-heavy").start()
    app.stage(
        1,
        at_ms,
        tasks=100,
        duration_ms=30_000,
        task_ms=10_000,
        name="cache at gc.py:4",
        run_time_ms=uniform(9_000, 100),
        gc_time_ms=uniform(2_250, 100),
    )
    return app


def aqe_tiny_partitions(app_id: str = "app-aqe-tiny", at_ms: int = BASE_TIME_MS) -> App:
    """AQE coalesced a 500 MiB shuffle into 500 partitions of 1 MiB (parallelism first)."""
    app = App(app_id, "aqe-parallelism").start()
    app.aqe(
        7,
        at_ms,
        node_id=3,
        coalesced=True,
        num_partitions=500,
        partition_data_size_bytes=500 * MiB,
        num_coalesced_partitions=500,
    )
    return app


def skew_join_disabled(app_id: str = "app-skew-join-off", at_ms: int = BASE_TIME_MS) -> App:
    """A skewed join (1 GiB against a 100 MiB median) with spark.sql.adaptive.skewJoin.enabled=false: the task
    reading it runs 40 s (the median 4 s) of the stage's 60 s."""
    app = App(
        app_id,
        "skew-join-off",
        properties={"spark.sql.adaptive.enabled": "true", "spark.sql.adaptive.skewJoin.enabled": "false"},
    ).start()
    app.aqe(1, at_ms - 60_000, skewed=False, num_partitions=50, partition_data_size_bytes=6 * GiB)
    app.stage(
        1,
        at_ms,
        tasks=50,
        duration_ms=60_000,
        task_ms=4_000,
        task_duration_ms=skewed(4_000, 40_000, 50),
        name="join at off.py:12",
        shuffle_read_bytes=skewed(100 * MiB, 1 * GiB, 50),
    )
    return app


def running_failures(
    app_id: str = "app-running", at_ms: int = BASE_TIME_MS, finished: int = 30, failed: int = 4
) -> App:
    """A still-running application whose current stage has ``finished`` tasks done so far, ``failed`` of which
    failed (no stage_completed yet)."""
    app = App(app_id, "long-runner").start()
    app.emit(
        "stage_submitted",
        at_ms - 60_000,
        stage_id=3,
        name="map at long.py:7",
        num_tasks=400,
        job_id=2,
        sql_execution_id=None,
        submission_time_ms=at_ms - 60_000,
        parent_stage_ids=[],
    )
    app.tasks(3, at_ms, [1_000] * finished, failed=failed)
    return app


def row_skew(app_id: str = "app-row-skew", at_ms: int = BASE_TIME_MS) -> App:
    """A join whose hot key's task reads 19x the median task's rows (1.52 M vs 80,000) but, pruned to the key
    column and compressed, only 2.3x its bytes (23 MiB vs 10 MiB): skew in rows, below every byte floor. That task
    runs 36 s (the median 1 s) of the stage's 60 s."""
    app = App(app_id, "row-skew-join").start()
    app.stage(
        1,
        at_ms,
        tasks=200,
        duration_ms=60_000,
        task_ms=1_000,
        task_duration_ms=skewed(1_000, 36_000, 200),
        bytes_per_task=10 * MiB,
        name="join at rows.py:12",
        shuffle_read_bytes=skewed(10 * MiB, 23 * MiB, 200),
        shuffle_read_records=skewed(80_000, 1_520_000, 200),
        shuffle_records_read=80_000 * 199 + 1_520_000,
    )
    return app


def waves(app_id: str = "app-waves", at_ms: int = BASE_TIME_MS, straggler_ms: int = 8_000) -> App:
    """16 tasks on 2 slots (8 waves), the last launched running 8 s against the median 1 s: the stage took 15 s, so
    the straggler is 53 % of its wall time but 70 % of its balanced time (23 s of tasks / 2 slots)."""
    app = App(app_id, "wave-straggler").start()
    app.stage(
        1,
        at_ms,
        tasks=16,
        duration_ms=15_000,
        name="map at waves.py:5",
        slots=2,
        task_duration_ms=skewed(1_000, straggler_ms, 16),
        run_time_ms=skewed(900, straggler_ms - 100, 16),
    )
    return app


def running_waves(app_id: str = "app-running-waves", at_ms: int = BASE_TIME_MS, slots: int = 2) -> App:
    """A still-running multi-wave stage: 32 tasks submitted on 2 slots, 20 finished. One slot ran a 9 s straggler
    while the other ran nine 1 s tasks, then both ran five more waves: 14 s so far. The straggler is 64 % of that
    (under the 75 % gate) and of the balanced time (28 s of tasks / 2 slots), so it is found while the stage runs
    only when the stage_submitted event carries the slots (``slots=0``: a listener from before it did)."""
    app = App(app_id, "running-waves").start()
    start = at_ms - 14_000
    app.emit(
        "stage_submitted",
        start,
        stage_id=1,
        name="map at running_waves.py:5",
        num_tasks=32,
        job_id=1,
        sql_execution_id=None,
        submission_time_ms=start,
        parent_stage_ids=[],
        slots=slots,
    )
    runs = (
        [(start, 9_000)]
        + [(start + 1_000 * i, 1_000) for i in range(9)]
        + [(start + 9_000 + 1_000 * wave, 1_000) for wave in range(5) for _ in range(2)]
    )
    for index, (launch, duration) in enumerate(sorted(runs, key=lambda r: r[0] + r[1])):
        app.emit(
            "task_end",
            launch + duration,
            stage_id=1,
            stage_attempt=0,
            task_id=100_000 + index,
            index=index,
            launch_time_ms=launch,
            finish_time_ms=launch + duration,
            duration_ms=duration,
            run_time_ms=duration * 9 // 10,
            gc_time_ms=duration // 100,
            status="SUCCESS",
            input_bytes=0,
            shuffle_local_bytes=4 * MiB,
            shuffle_remote_bytes=4 * MiB,
            shuffle_write_bytes=4 * MiB,
            output_bytes=0,
        )
    return app


def short_tail(app_id: str = "app-short-tail", at_ms: int = BASE_TIME_MS) -> App:
    """200 tasks on 2 slots (100 waves) of 1 s, one of 5 s at the end: a tail of 5 % of the balanced time."""
    app = App(app_id, "long-many-waves").start()
    app.stage(
        1,
        at_ms,
        tasks=200,
        duration_ms=102_000,
        name="map at tail.py:5",
        slots=2,
        task_duration_ms=skewed(1_000, 5_000, 200),
        run_time_ms=skewed(900, 4_900, 200),
    )
    return app


def block_explosion(
    app_id: str = "app-blocks", at_ms: int = BASE_TIME_MS, maps: int = 1_000, reduces: int = 1_000
) -> App:
    """A repartition of ``maps`` map outputs into ``reduces`` partitions: every reduce task fetches one block from
    every map output, 8 KiB each (a local and a remote half)."""
    app = App(app_id, "repartition-many").start()
    blocks = maps * reduces
    app.stage(
        1,
        at_ms,
        tasks=reduces,
        duration_ms=60_000,
        task_ms=100,
        bytes_per_task=maps * 8 * KiB,
        name="repartition at blocks.py:3",
        shuffle_local_blocks=blocks // 2,
        shuffle_remote_blocks=blocks - blocks // 2,
    )
    return app


PROBLEM_APPS = (
    "app-skewed-join",
    "app-tiny-tasks",
    "app-explode",
    "app-tiny-files",
    "app-oversized",
    "app-remote",
    "app-failures",
    "app-gc",
    "app-aqe-tiny",
    "app-skew-join-off",
    "app-running",
    "app-row-skew",
    "app-waves",
    "app-blocks",
    "app-running-waves",
    "app-plans",
    "app-stream-behind",
    "app-stream-state",
)
CONTROL_APPS = (
    "app-balanced",
    "app-balanced-2",
    "app-explode-run0",
    "app-explode-run1",
    "app-explode-run2",
    "app-short-tail",
    "app-blocks-small",
    "app-running-no-slots",
    "app-plans-ok",
    "app-stream-ok",
)


def scenario_apps() -> list[App]:
    """The four problem jobs of the issue (skewed join, > 5,000 tiny tasks, explode, tiny files) and the explode
    job's history, one application per remaining rule, a running application, skew in rows, a straggler in a
    multi-wave stage (finished, and running), a block explosion, and the controls: two balanced applications, a
    many-wave stage with a short tail, a 20 x 20 shuffle, the running straggler without slots; then the plan and
    streaming scenarios with their controls (``plan_stream_apps``)."""
    return [
        skewed_join(),
        tiny_tasks(),
        explode(),
        *explode_history(),
        tiny_files(),
        oversized(),
        remote_heavy(),
        failing_tasks(),
        gc_heavy(),
        aqe_tiny_partitions(),
        skew_join_disabled(),
        running_failures(),
        row_skew(),
        waves(),
        block_explosion(),
        running_waves(),
        balanced(),
        balanced("app-balanced-2", app_name="balanced-report"),
        short_tail(),
        block_explosion("app-blocks-small", maps=20, reduces=20),
        running_waves("app-running-no-slots", slots=0),
        *plan_stream_apps(),
    ]
