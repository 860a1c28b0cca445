"""Benchmark: fleet-scale storage — load rate, every overview and cluster (fleet) panel query, one event-driven
detection pass, and stored bytes per task row, on chDB and on clickhouse-server (18.16 here).

    python -m bench.fleet_scale [--tasks 100000000] [--engines chdb,server] [--repeat 3] [--no-optimize]
        [--keep DIR] [--panels TEXT] [--no-findings-panels] [--no-full-pass] [--no-single-pass] [--burst TASKS]
    python -m bench.fleet_scale --pass-scaling 200000,4000000   # the event-driven pass at two store sizes

Data, generated inside the server with ``INSERT … SELECT FROM numbers()`` (in blocks of ``--block`` rows): one
application per 1,000 tasks (100,000 applications at 100 million rows) of 10 stages x 100 tasks, spread over one
day, one recurring job (application name) per 20 applications, 3 clusters, 5 % of the applications still running
(no ``app_end``; their last stage has tasks, no ``stage_completed``). ``stage_completed`` and ``app_start`` /
``app_end`` go through the rollups' materialized views (``schemas/rollups.py``). Panel queries run with the
dashboard's default range (the whole day), every cluster selected, macros expanded as the plugin does; median of
``--repeat`` runs. The event-driven pass is what ``sparktap alert`` runs after an insert: the detection query scoped
to the applications just inserted (10 new ones): staged (the Detector's default since issue 27: the relations into
temporary tables of the session first, then the rules that fire over them, ``sql.Staging``) and, for the ratio, as
the one query it was before (``--no-single-pass`` skips it); next to the full pass over the whole range for scale
(staged too). The findings panels read the stored findings (``schemas/findings_table.py``), filled first by one
backfill pass over the day (what ``sparktap findings --store`` runs, staged; its time is printed;
``--no-findings-panels`` skips it). Prints one line per figure.
"""

# ruff: noqa: S608 - benchmark SQL built from constants.

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

TASKS_PER_STAGE = 100
STAGES = 10
TASKS_PER_APP = TASKS_PER_STAGE * STAGES
DAY_MS = (int(time.time()) // 86_400 - 1) * 86_400_000
"""UTC midnight a day ago: inside every retention"""
SPAN_MS = 86_400_000 - 3_600_000
NEW_APPS = 10
APPS_PER_JOB = 20
"""a fleet's applications are mostly scheduled runs of recurring jobs: 100,000 applications a day are ~5,000 jobs
(hourly and daily schedules mixed), so a job's runs in the window do not grow with the fleet"""


def _app(expr: str) -> str:
    return f"concat('app-', toString({expr}))"


def jobs_of(apps: int) -> int:
    """Recurring jobs (application names) of a fleet of ``apps`` applications a day: one per ``APPS_PER_JOB``."""
    return max(1, apps // APPS_PER_JOB)


def generate(
    command: Callable[[str], None], apps: int, first: int, block: int, modern: bool, jobs: int | None = None
) -> float:
    """Insert ``apps`` applications starting at number ``first``, application ``a`` a run of job ``a % jobs``
    (default ``jobs_of(first + apps)``); returns the seconds the task rows took."""
    last = first + apps
    job = f"concat('job-', toString(a % {jobs or jobs_of(last)}))"
    start_ms = f"toInt64({DAY_MS} + intDiv(a * {SPAN_MS}, {max(last, 1)}))"
    props = "map('spark.sql.adaptive.enabled', 'true')" if modern else '\'{"spark.sql.adaptive.enabled":"true"}\''
    running = "(a % 20 = 7)"
    command(
        "INSERT INTO app_start (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, spark_version, user, properties) "
        f"SELECT 1, 'app_start', concat('c', toString(a % 3)), {_app('a')}, '1', {job}, 1, "
        f"{start_ms}, {start_ms}, '4.0.0', 'etl', {props} FROM (SELECT number AS a FROM numbers({first}, {apps}))"
    )
    command(
        "INSERT INTO app_end (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, duration_ms) "
        f"SELECT 1, 'app_end', concat('c', toString(a % 3)), {_app('a')}, '1', {job}, "
        f"100000, {start_ms} + 3000000, {start_ms} + 3000000, 3000000 "
        f"FROM (SELECT number AS a FROM numbers({first}, {apps})) WHERE NOT {running}"
    )
    stage_ms = f"({start_ms} + st * 300000)"
    skew = "(st = 3 AND a % 10 = 1)"
    command(
        "INSERT INTO stage_completed (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, stage_id, stage_attempt, name, job_id, sql_execution_id, status, "
        "submission_time_ms, completion_time_ms, duration_ms, num_tasks, tasks_succeeded, tasks_failed, "
        "task_duration_ms_p50, task_duration_ms_max, task_duration_ms_sum, run_time_ms_sum, gc_time_ms_sum, "
        "shuffle_read_bytes_p50, shuffle_read_bytes_max, shuffle_read_bytes_sum, shuffle_read_remote_bytes_sum, "
        "shuffle_write_bytes_sum, disk_spill_bytes_sum, cpu_time_ns) "
        f"SELECT 1, 'stage_completed', concat('c', toString(a % 3)), {_app('a')}, '1', "
        f"{job}, 10 + st * 2, {stage_ms} + 240000, {stage_ms} + 240000, st, 0, "
        "concat('stage ', toString(st), ' at job.py:', toString(st)), intDiv(st, 4), intDiv(st, 4), 'succeeded', "
        f"{stage_ms}, {stage_ms} + 240000, 240000, {TASKS_PER_STAGE}, {TASKS_PER_STAGE}, 0, 2000, "
        f"if({skew}, 60000, 2500), 2000 * {TASKS_PER_STAGE}, 1800 * {TASKS_PER_STAGE}, 20 * {TASKS_PER_STAGE}, "
        f"8388608, if({skew}, 2147483648, 9000000), 8388608 * {TASKS_PER_STAGE}, 4194304 * {TASKS_PER_STAGE}, "
        f"4194304 * {TASKS_PER_STAGE}, 0, 1800000000 * {TASKS_PER_STAGE} "
        f"FROM (SELECT intDiv(number, {STAGES}) + {first} AS a, number % {STAGES} AS st "
        f"FROM numbers({apps * STAGES})) WHERE NOT ({running} AND st = {STAGES - 1})"
    )
    tasks = apps * TASKS_PER_APP
    started = time.perf_counter()
    for offset in range(0, tasks, block):
        n = min(block, tasks - offset)
        command(
            "INSERT INTO task_end (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
            "emitted_at_ms, event_time_ms, stage_id, stage_attempt, task_id, index, executor_id, host, locality, "
            "status, launch_time_ms, finish_time_ms, duration_ms, run_time_ms, gc_time_ms, cpu_time_ns, "
            "shuffle_local_bytes, shuffle_remote_bytes, shuffle_write_bytes) "
            f"SELECT 1, 'task_end', concat('c', toString(a % 3)), {_app('a')}, '1', {job}, "
            f"100 + t, {stage_ms} + i * 2000, {stage_ms} + i * 2000, st, 0, t, i, toString(i % 16), "
            "concat('10.0.', toString(a % 50), '.', toString(i % 16)), 'PROCESS_LOCAL', 'SUCCESS', "
            f"{stage_ms} + i * 2000 - 2000 - (i % 7) * 10, {stage_ms} + i * 2000, 2000 + (i % 7) * 10, "
            "1800 + (i % 5), 20 + (i % 3), 1800000000 + i * 1000, 41943 * (i % 11), 41943 * (i % 13), 41943 * (i % 9) "
            f"FROM (SELECT number AS g, intDiv(g, {TASKS_PER_APP}) + {first} AS a, "
            f"intDiv(g % {TASKS_PER_APP}, {TASKS_PER_STAGE}) AS st, g % {TASKS_PER_STAGE} AS i, "
            f"g % {TASKS_PER_APP} AS t FROM numbers({offset}, {n}))"
        )
    return time.perf_counter() - started


def _runs(fn: Callable[[], Any], repeat: int) -> tuple[list[tuple[float, float]], Any]:
    """(wall, this process's CPU) seconds of each of ``repeat`` runs, and the last result."""
    runs, result = [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    return runs, result


def _ms(runs: list[tuple[float, float]]) -> str:
    """'<median wall> ms (CPU <median> ms; runs: wall/CPU, …)'"""
    wall, cpu = (statistics.median(r[i] for r in runs) * 1000 for i in (0, 1))
    each = ", ".join(f"{w * 1000:.0f}/{c * 1000:.0f}" for w, c in runs)
    return f"{wall:.0f} ms (CPU {cpu:.0f} ms; each run wall/CPU ms: {each})"


def _median(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _load() -> str:
    return "{:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


def run_engine(  # noqa: PLR0913 - the benchmark's options
    name: str,
    storage: Any,
    tasks: int,
    block: int,
    repeat: int,
    optimize: bool,
    full_pass: bool = True,
    findings_panels: bool = True,
    only: str = "",
    single_pass: bool = True,
    burst: int = 0,
) -> float:
    """Load, then time the panels and the event-driven pass; returns the slowest rollup panel query in seconds."""
    from sparktap.dashboards.config import GrafanaConfig
    from sparktap.dashboards.dashboards import cluster, overview, panel_queries
    from sparktap.dashboards.health_panels import MAX_POINTS, grafana_interval
    from sparktap.detection import Detector
    from sparktap.detection.macros import expand, interpolate
    from sparktap.detection.sql import Scope
    from sparktap.schemas.health_rollups import HEALTH_TABLES
    from sparktap.schemas.rollups import ROLLUP_TABLES

    global DAY_MS  # noqa: PLW0603 - a kept store's day (below)
    db = storage.database.replace("'", "")
    try:  # the tables of a kept store (a fresh one has no database yet)
        had = {str(r["name"]) for r in storage.query(f"SELECT name FROM system.tables WHERE database = '{db}'")}
    except Exception:  # noqa: BLE001 - no database: nothing kept
        had = set()
    start = time.perf_counter()
    storage.ensure_schema()
    schema_s = time.perf_counter() - start
    version = storage.version()
    modern = version >= (22, 1)
    apps = max(1, tasks // TASKS_PER_APP)
    rows = int(storage.query("SELECT count() AS n FROM task_end")[0]["n"])
    reused = rows > 0
    if reused:  # a store kept by an earlier run (--keep): measure it again, over the day it was generated for
        print(f"fleet bench [{name}]: reusing the kept store of {rows:,} task rows (load average {_load()})")
        first = storage.query("SELECT min(event_time_ms) AS t FROM app_start")[0]["t"]
        DAY_MS = int(str(first)) // 86_400_000 * 86_400_000
        created = [t for t in HEALTH_TABLES if t not in had]
        if created:  # a table this version adds, filled by ensure_schema; merged as a fresh store's are below
            print(f"fleet bench [{name}]: created and filled {', '.join(created)} in {schema_s:.1f} s")
            start = time.perf_counter()
            for table in created:
                storage.command(f"OPTIMIZE TABLE {table} FINAL")
            print(f"fleet bench [{name}]: merged them (OPTIMIZE FINAL) in {time.perf_counter() - start:.1f} s")
    else:
        start = time.perf_counter()
        task_s = generate(storage.command, apps, 0, block, modern)
        load_s = time.perf_counter() - start
        rows = int(storage.query("SELECT count() AS n FROM task_end")[0]["n"])
        print(
            f"fleet bench [{name} {'.'.join(map(str, version[:2]))}]: loaded {rows:,} task rows ({apps:,} "
            f"applications, {jobs_of(apps):,} jobs) in {load_s:.1f} s: {rows / task_s:,.0f} task rows/s "
            f"(load average {_load()})"
        )
    if optimize and not reused:
        start = time.perf_counter()
        for table in ("app_start", "app_end", "stage_completed", "task_end", *ROLLUP_TABLES, *HEALTH_TABLES):
            storage.command(f"OPTIMIZE TABLE {table} FINAL")
        print(f"fleet bench [{name}]: merged (OPTIMIZE FINAL) in {time.perf_counter() - start:.1f} s")
    if burst:  # panels right after a burst of inserts: the health rollup's parts as the burst left them
        _burst(name, storage, burst, block, modern, jobs_of(apps))
    health_bytes = 0
    for table in ("task_end", "stage_completed", *ROLLUP_TABLES, *HEALTH_TABLES):
        (part,) = storage.query(
            "SELECT sum(rows) AS r, sum(data_compressed_bytes) AS b FROM system.parts "
            f"WHERE database = '{db}' AND table = '{table}' AND active"
        )
        r, b = int(part["r"]), int(part["b"])
        health_bytes += b if table in HEALTH_TABLES else 0
        print(f"fleet bench [{name}]: {table}: {r:,} rows, {b / 1e6:,.1f} MB on disk, {b / max(r, 1):.1f} bytes/row")
    print(f"fleet bench [{name}]: health rollup (every table): {health_bytes / max(rows, 1):.2f} bytes per task row")
    cfg = GrafanaConfig(database=storage.database, clickhouse_version=version)
    variables = {"cluster": ["c0", "c1", "c2"]}
    from_ms, to_ms = DAY_MS, DAY_MS + 86_400_000

    def sql_of(text: str, interval_ms: int = 300_000) -> str:
        return expand(interpolate(text, variables), from_ms, to_ms, interval_ms=interval_ms)

    panels = [
        (board["uid"], title, text)
        for board in (overview(cfg), cluster(cfg))
        for title, text in panel_queries(board)
        if not title.startswith("variable ") and (not only or only in title)
    ]

    def kind(title: str, text: str) -> str:
        if "`findings_dedup`" in text:
            return "stored findings"  # the findings table the alerter (or the backfill) writes
        if "findings" in title.lower():
            return "detection SQL"  # the detection query over the range
        return (
            "rollups"
            if "rollup_dedup" in text or "`health_rollup" in text
            else ("task_end" if "`task_end" in text else "other")
        )

    def measure(uid: str, title: str, text: str) -> float:
        seconds, result = _median(functools.partial(storage.query, sql_of(text)), repeat)
        print(
            f"fleet bench [{name}]: {uid} / {title} ({kind(title, text)}): {seconds * 1000:.0f} ms "
            f"({len(result)} rows; load average {_load()})"
        )
        return seconds

    if findings_panels:  # the findings panels read the stored findings: one backfill pass fills them
        backfill(name, storage, version, from_ms, to_ms)
    # the panels that are not the detection query first, then one event-driven pass, then the findings panels
    kinds = {(u, t): kind(t, x) for u, t, x in panels}
    times = {(u, t): measure(u, t, x) for u, t, x in panels if kinds[u, t] != "detection SQL"}
    for uid, title, text in panels:  # hourly buckets; then the ranges and buckets Grafana asks the panel for
        if title == "Events stored by the collector":
            hourly, result = _median(functools.partial(storage.query, sql_of(text, 3_600_000)), repeat)
            print(
                f"fleet bench [{name}]: {uid} / {title}, 1-hour buckets: {hourly * 1000:.0f} ms ({len(result)} rows; "
                f"load average {_load()})"
            )
            # the panel's cap, then 900 points (a half-width panel's pixels): what Grafana would ask without it
            for hours, points in (
                (1, MAX_POINTS),
                (3, MAX_POINTS),
                (6, MAX_POINTS),
                (7, MAX_POINTS),
                (12, MAX_POINTS),
                (24, MAX_POINTS),
                (24, 900),
            ):
                start = to_ms - hours * 3_600_000 + 7_123  # a "last N hours" range: not on whole minutes
                step = grafana_interval(to_ms - start, points, 60_000)
                sql = expand(interpolate(text, variables), start, to_ms, interval_ms=step)
                took, result = _median(functools.partial(storage.query, sql), repeat)
                print(
                    f"fleet bench [{name}]: {uid} / {title}, last {hours} h as Grafana asks it ({points} points at "
                    f"most: {step // 1000} s buckets): {took * 1000:.0f} ms ({len(result)} rows; load average "
                    f"{_load()})"
                )
    slowest_rollup = max((v for key, v in times.items() if kinds[key] == "rollups"), default=0.0)
    print(
        f"fleet bench [{name}]: slowest rollup panel {slowest_rollup * 1000:.0f} ms, slowest panel besides the "
        f"findings {max(times.values(), default=0.0) * 1000:.0f} ms (target < 1000 ms)"
    )
    # one event-driven pass: NEW_APPS applications inserted now, the detection query scoped to them
    new = [f"app-{apps + i}" for i in range(NEW_APPS)]
    if not storage.query(f"SELECT app_id FROM app_start WHERE app_id = '{new[0]}'"):
        generate(storage.command, NEW_APPS, apps, block, modern, jobs_of(apps))
    # final_reads: `<table> FINAL` itself, as `sparktap alert` and the embedded alerter read a one-node store (18.16
    # does not push a WHERE into a view: through the `_dedup` views the scoped pass would read all of task_end)
    scoped = Detector(
        storage.query, database=storage.database, version=version, scope=Scope.of([], new), final_reads=True
    )
    window = (from_ms - 3_600_000, to_ms + 3_600_000)
    runs, found = _runs(lambda: scoped.findings(*window), repeat)
    seconds = statistics.median(r[0] for r in runs)
    print(
        f"fleet bench [{name}]: event-driven pass over {NEW_APPS} new applications (staged): {_ms(runs)}; "
        f"{len(found)} findings; target < 1000 ms; load average {_load()}"
    )
    if single_pass:  # the same pass as one query (what it was before the staged pass, issue 27), for the ratio
        single = replace(scoped, staged=False)
        runs_one, found_one = _runs(lambda: single.findings(*window), repeat)
        seconds_one = statistics.median(r[0] for r in runs_one)
        print(
            f"fleet bench [{name}]: the same pass as one query: {_ms(runs_one)}; findings identical: "
            f"{found_one == found}; staged/one query: wall x{seconds / seconds_one:.2f} (load average {_load()})"
        )
    if name == "chdb":  # chDB tells the rows a query read
        print(f"fleet bench [chdb]: the pass's history reads alone: {_history_reads(storage, new)}")
    if burst:
        for table in HEALTH_TABLES:
            storage.command(f"SYSTEM START MERGES {table}")
    if not findings_panels:
        return slowest_rollup
    for uid, title, text in panels:
        if kind(title, text) == "detection SQL":
            measure(uid, title, text)
    if not full_pass:
        return slowest_rollup
    full = Detector(storage.query, database=storage.database, version=version, final_reads=True)
    seconds_full, found_full = _median(lambda: full.findings(*window), 1)
    print(
        f"fleet bench [{name}]: full pass over every application: {seconds_full * 1000:.0f} ms "
        f"({len(found_full)} findings): the event-driven pass is x{seconds_full / max(seconds, 1e-9):.1f} faster"
    )
    return slowest_rollup


def _burst(name: str, storage: Any, tasks: int, block: int, modern: bool, jobs: int) -> None:
    """Insert ``tasks`` task rows of new applications in 10 inserts (``block`` rows at most each) with the health
    rollup's merges stopped (started again after the panels): its tables' parts as a burst of inserts leaves them
    before the background merges catch up."""
    from sparktap.schemas.health_rollups import HEALTH_TABLES

    for table in HEALTH_TABLES:
        storage.command(f"SYSTEM STOP MERGES {table}")
    first = int(storage.query("SELECT max(toUInt64(substring(app_id, 5))) AS n FROM app_start")[0]["n"]) + 1
    apps = max(1, tasks // TASKS_PER_APP)
    start = time.perf_counter()
    generate(storage.command, apps, first, min(block, max(1, tasks // 10)), modern, jobs)
    db = storage.database.replace("'", "")
    parts = storage.query(
        "SELECT table, count() AS p FROM system.parts WHERE active AND database = '"
        + db
        + "' AND table IN ("
        + ", ".join(f"'{t}'" for t in HEALTH_TABLES)
        + ") GROUP BY table ORDER BY table"
    )
    print(
        f"fleet bench [{name}]: burst of {apps * TASKS_PER_APP:,} task rows ({apps:,} applications, 10 inserts) in "
        f"{time.perf_counter() - start:.1f} s, health rollup merges stopped; parts: "
        + ", ".join(f"{r['table']} {r['p']}" for r in parts)
        + f" (load average {_load()})"
    )


def backfill(name: str, storage: Any, version: tuple[int, ...], from_ms: int, to_ms: int) -> None:
    """What `sparktap findings --store` does (detection/finding_store.py): evaluate the range a day at a time and store
    every finding in the findings table the findings panels read."""
    from sparktap.detection import Detector
    from sparktap.detection.finding_store import FindingsStore

    storage.command("TRUNCATE TABLE findings")  # a kept store: measure the backfill again
    detector = Detector(storage.query, database=storage.database, version=version, final_reads=True)
    start = time.perf_counter()
    stored = FindingsStore(storage).backfill(detector, from_ms, to_ms, int(time.time() * 1000))
    print(
        f"fleet bench [{name}]: backfill of the findings table (sparktap findings --store) over the day: "
        f"{time.perf_counter() - start:.1f} s, {stored:,} findings stored (load average {_load()})"
    )


def pass_scaling(sizes: list[int], repeat: int, optimize: bool = True) -> None:
    """The event-driven pass (10 new applications) on chDB stores of each size in task rows, one after the other
    (``optimize``: the loaded rows merged first, as a store's parts are after a while: a pass reads at least a granule
    per part at each scoped application's key, so unmerged parts make it read more)."""
    from sparktap.detection import Detector
    from sparktap.detection.sql import Scope
    from sparktap.schemas.rollups import ROLLUP_TABLES
    from sparktap.store import open_storage
    from sparktap.store.target import parse_storage_url

    window = (DAY_MS - 3_600_000, DAY_MS + 90_000_000)
    for tasks in sizes:
        apps = max(1, tasks // TASKS_PER_APP)
        with (
            tempfile.TemporaryDirectory(prefix="sparktap-fleet-") as tmp,
            open_storage(parse_storage_url(f"chdb://{Path(tmp) / 'chdb'}")) as storage,
        ):
            storage.ensure_schema()
            generate(storage.command, apps, 0, 10_000_000, True)
            if optimize:  # a store in its steady state: merged parts; the new applications in parts of their own
                for table in ("app_start", "app_end", "stage_completed", "task_end", *ROLLUP_TABLES):
                    storage.command(f"OPTIMIZE TABLE {table} FINAL")
            generate(storage.command, NEW_APPS, apps, 10_000_000, True, jobs_of(apps))
            new = [f"app-{apps + i}" for i in range(NEW_APPS)]
            read: list[int] = []

            def query(sql: str, storage: Any = storage, read: list[int] = read) -> list[dict[str, Any]]:
                rows = storage.query(sql)
                read.append(storage.last_rows_read)
                return rows

            staged = Detector(
                query, database=storage.database, version=storage.version(), scope=Scope.of([], new), final_reads=True
            )
            for scoped in (staged, replace(staged, staged=False)):
                read.clear()
                cpu_start = time.process_time()
                seconds, found = _median(functools.partial(scoped.findings, *window), repeat)
                cpu = (time.process_time() - cpu_start) / repeat
                per_statement = ", ".join(f"{n:,}" for n in read[: len(read) // repeat])
                print(
                    f"fleet bench [chdb]: store of {apps * TASKS_PER_APP:,} task rows ({apps:,} applications): "
                    f"event-driven pass over {NEW_APPS} new applications "
                    f"({'staged' if scoped.staged else 'one query'}) {seconds * 1000:.0f} ms, CPU {cpu * 1000:.0f} "
                    f"ms, {sum(read) // repeat:,} rows read ({len(found)} findings; load average "
                    f"{os.getloadavg()[0]:.1f}); per statement: {per_statement}"
                )
            print(f"fleet bench [chdb]:   of which the recurring jobs' history reads: {_history_reads(storage, new)}")


def _history_reads(storage: Any, new: list[str]) -> str:
    """Rows read by the history reads of a pass scoped to ``new`` alone (``detection/history.py``): the runs kept
    for the app relation and the earlier runs' stages of the shuffle history and of the run regression."""
    from sparktap.detection.fleet import app_facts, grown_stages
    from sparktap.detection.history import history_app_ids, stage_history
    from sparktap.detection.macros import expand
    from sparktap.detection.sql import Scope, SqlContext
    from sparktap.detection.thresholds import DEFAULT_THRESHOLDS as T

    ctx = SqlContext(storage.database, storage.version(), Scope.of([], new))
    days, runs = T.run_regression.history_days, max(T.run_regression.runs, T.memory_overprovisioned.runs)
    parts = {
        "runs kept": history_app_ids(ctx, days, runs),
        "shuffle history": stage_history(replace(ctx, history_runs=T.shuffle_blowup.history_runs), days),
        "grown stages": grown_stages(replace(ctx, history_runs=runs), days, T.run_regression.runs, 2.0, 0),
        "runs' facts": app_facts(replace(ctx, history_runs=runs), days),
    }
    out = []
    for name, sql in parts.items():
        storage.query(expand(sql, DAY_MS - 3_600_000, DAY_MS + 90_000_000))
        out.append(f"{name} {storage.last_rows_read:,} rows")
    return ", ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000_000)
    parser.add_argument("--engines", default="chdb,server")
    parser.add_argument("--block", type=int, default=10_000_000, help="task rows per INSERT … SELECT")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-optimize", action="store_true", help="skip OPTIMIZE … FINAL before measuring")
    parser.add_argument("--no-full-pass", action="store_true", help="skip the full detection pass")
    parser.add_argument(
        "--no-single-pass", action="store_true", help="skip the event-driven pass as one query (beside the staged one)"
    )
    parser.add_argument("--panels", default="", help="only the panels whose title contains this")
    parser.add_argument(
        "--burst",
        type=int,
        default=0,
        help="first insert this many task rows (new applications, 10 inserts) with the health rollup's merges stopped "
        "until the panels are timed: the panels right after a burst of inserts",
    )
    parser.add_argument(
        "--no-findings-panels",
        action="store_true",
        help="skip the backfill of the findings table (the findings panels then read it empty)",
    )
    parser.add_argument(
        "--keep", default="", help="keep the stores in this directory (chdb/, server/); a kept store is measured again"
    )
    parser.add_argument(
        "--pass-scaling", default="", help="comma-separated store sizes (task rows): only the event-driven pass, chDB"
    )
    args = parser.parse_args(argv)
    if args.pass_scaling:
        pass_scaling([int(x) for x in args.pass_scaling.split(",")], args.repeat, not args.no_optimize)
        return 0
    from sparktap.store import open_storage
    from sparktap.store.target import parse_storage_url

    run = functools.partial(
        run_engine,
        tasks=args.tasks,
        block=args.block,
        repeat=args.repeat,
        optimize=not args.no_optimize,
        full_pass=not args.no_full_pass,
        findings_panels=not args.no_findings_panels,
        only=args.panels,
        single_pass=not args.no_single_pass,
        burst=args.burst,
    )
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(prefix="sparktap-fleet-") as tmp:
            root = Path(args.keep) if args.keep else Path(tmp)
            if engine == "chdb":
                with open_storage(parse_storage_url(f"chdb://{root / 'chdb'}")) as storage:
                    run("chdb", storage)
                continue
            from tests.support.services.clickhouse import ClickHouseServerProcess

            workdir = root / "server" if args.keep else None
            if workdir:
                workdir.mkdir(parents=True, exist_ok=True)
            server = ClickHouseServerProcess(workdir, startup_timeout=120)
            server.start()
            try:
                with open_storage(server.target("fleet"), send_receive_timeout=3600) as storage:
                    run("server", storage)
            finally:
                server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
