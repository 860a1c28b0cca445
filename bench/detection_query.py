"""Benchmark: detection and overview query time over 10 million task rows on chDB (target: < 1 s per query of the
overview dashboard).

    python -m bench.detection_query [--tasks 10000000] [--dir /tmp/x] [--repeat 3]

Data: ``--tasks`` task_end rows over 100 applications of 100 stages each (1,000 tasks a stage), the matching
stage_submitted / stage_completed rows, with 5 applications still running their last stage (task_end only) and
every 10th stage skewed, all generated inside chDB with INSERT … SELECT FROM numbers(). No plan, streaming or AQE
rows: the Detector's pass leaves those relations out (``query.input_probe``), so its figure is the query over a store
without them; the whole query (also printed) is what it runs where they have rows. Prints one line per figure.
"""

# ruff: noqa: S608 - benchmark SQL built from constants.

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

APPS = 100
STAGES = 100
BASE_MS = (int(time.time()) // 86_400 - 1) * 86_400_000
"""UTC midnight a day ago: inside the tables' TTL (a fixed date would have its rows dropped a retention later)"""
SPAN_MS = 6 * 3600 * 1000
RUNNING_APPS = 5


def generate(storage: object, tasks: int, properties: str | None = None) -> None:
    """Fill task_end, stage_submitted, stage_completed and app_start with synthetic rows (see the module doc);
    ``properties``: the SQL of app_start.properties (JSON text on servers without Map, e.g. 18.16)."""
    command = storage.command  # type: ignore[attr-defined]
    per_stage = max(1, tasks // (APPS * STAGES))
    stages = APPS * STAGES
    # stage s of app a: a = intDiv(n, STAGES), stage = n % STAGES; time grows with n
    app = "concat('app-bench-', toString(a))"
    t_stage = f"toInt64({BASE_MS} + intDiv(s_global * {SPAN_MS}, {stages}))"
    running = f"(a < {RUNNING_APPS} AND st = {STAGES - 1})"
    command(
        "INSERT INTO app_start (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, spark_version, properties) "
        f"SELECT 1, 'app_start', 'bench', concat('app-bench-', toString(number)), '1', "
        f"concat('job-', toString(number % 20)), 1, {BASE_MS}, {BASE_MS}, '4.3.0', "
        + (properties or "map('spark.sql.adaptive.enabled', 'true')")
        + " FROM numbers("
        + str(APPS)
        + ")"
    )
    command(
        "INSERT INTO app_end (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, duration_ms) "
        f"SELECT 1, 'app_end', 'bench', concat('app-bench-', toString(number)), '1', "
        f"concat('job-', toString(number % 20)), 1000000000, {BASE_MS + SPAN_MS}, {BASE_MS + SPAN_MS}, {SPAN_MS} "
        f"FROM numbers({RUNNING_APPS}, {APPS - RUNNING_APPS})"
    )
    command(
        "INSERT INTO stage_submitted (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, stage_id, stage_attempt, name, num_tasks, job_id, sql_execution_id) "
        f"SELECT 1, 'stage_submitted', 'bench', {app}, '1', concat('job-', toString(a % 20)), 2 + st * 2, "
        f"{t_stage}, {t_stage}, st, 0, concat('stage ', toString(st), ' at job.py:', toString(st)), {per_stage}, "
        f"intDiv(st, 4), intDiv(st, 4) FROM (SELECT number AS s_global, intDiv(number, {STAGES}) AS a, "
        f"number % {STAGES} AS st FROM numbers({stages}))"
    )
    skew = "(st % 10 = 3)"
    command(
        "INSERT INTO stage_completed (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, stage_id, stage_attempt, name, job_id, sql_execution_id, status, "
        "submission_time_ms, completion_time_ms, duration_ms, num_tasks, tasks_succeeded, "
        "task_duration_ms_p50, task_duration_ms_max, task_duration_ms_sum, run_time_ms_sum, gc_time_ms_sum, "
        "shuffle_read_bytes_p50, shuffle_read_bytes_max, shuffle_read_bytes_sum, shuffle_read_remote_bytes_sum, "
        "shuffle_write_bytes_sum, output_bytes, output_files) "
        f"SELECT 1, 'stage_completed', 'bench', {app}, '1', concat('job-', toString(a % 20)), 3 + st * 2, "
        f"{t_stage} + 60000, {t_stage} + 60000, st, 0, concat('stage ', toString(st), ' at job.py:', toString(st)), "
        f"intDiv(st, 4), intDiv(st, 4), 'succeeded', {t_stage}, {t_stage} + 60000, 60000, {per_stage}, {per_stage}, "
        f"2000, if({skew}, 55000, 2500), 2000 * {per_stage}, 1800 * {per_stage}, 20 * {per_stage}, "
        f"8388608, if({skew}, 2147483648, 9000000), 8388608 * {per_stage}, 4194304 * {per_stage}, "
        f"4194304 * {per_stage}, 0, NULL "
        f"FROM (SELECT number AS s_global, intDiv(number, {STAGES}) AS a, number % {STAGES} AS st "
        f"FROM numbers({stages})) WHERE NOT {running}"
    )
    command(
        "INSERT INTO task_end (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, stage_id, stage_attempt, task_id, index, executor_id, host, locality, "
        "status, launch_time_ms, finish_time_ms, duration_ms, run_time_ms, gc_time_ms, shuffle_local_bytes, "
        "shuffle_remote_bytes, shuffle_write_bytes) "
        f"SELECT 1, 'task_end', 'bench', {app}, '1', concat('job-', toString(a % 20)), "
        f"1000 + number, {t_stage} + i * 50, {t_stage} + i * 50, st, 0, number, i, toString(i % 8), "
        "concat('10.0.0.', toString(i % 8)), 'PROCESS_LOCAL', if(i % 97 = 0 AND st = 42, 'FAILED', 'SUCCESS'), "
        f"{t_stage} + i * 50 - 2000, {t_stage} + i * 50, 2000 + (i % 7) * 10, 1800, 20, 4194304, 4194304, 4194304 "
        f"FROM (SELECT number, intDiv(number, {per_stage}) AS s_global, intDiv(s_global, {STAGES}) AS a, "
        f"s_global % {STAGES} AS st, number % {per_stage} AS i FROM numbers({per_stage * stages}))"
    )


def _timed(storage: object, sql: str, repeat: int) -> tuple[float, int]:
    return _timed_cpu(storage, sql, repeat)[::2]


def _timed_cpu(storage: object, sql: str, repeat: int) -> tuple[float, float, int]:
    """Median wall seconds, median CPU seconds of this process (chDB runs in it: every thread of the query, so on a
    host shared with other work the CPU figure is the one comparable between runs) and the row count."""
    times, cpu, rows = [], [], 0
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        rows = len(storage.query(sql))  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return statistics.median(times), statistics.median(cpu), rows


def _sources(rule: object) -> set[str]:
    from sparktap.detection import Thresholds

    return {part.source for part in rule.sql(Thresholds())}  # type: ignore[attr-defined]


GROUPS = {
    "stage": "the 10 stage rules",
    "aqe_read": "small_partitions (stage + AQE reads)",
    "plan": "the 2 plan rules",
    "streaming": "the 2 streaming rules",
    "app": "the 5 application rules",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="chDB directory (default: a temporary one)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from sparktap.dashboards.alerts import alert_query
    from sparktap.dashboards.config import GrafanaConfig
    from sparktap.dashboards.dashboards import overview, panel_queries
    from sparktap.detection import RULE_IDS, Thresholds, rule_query
    from sparktap.detection.macros import expand, interpolate
    from sparktap.detection.query import OPTIONAL_INPUTS, input_probe
    from sparktap.detection.registry import RULES
    from sparktap.detection.sql import SqlContext
    from sparktap.store import open_storage
    from sparktap.store.target import parse_storage_url

    with tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
        directory = args.dir or Path(tmp) / "chdb"
        storage = open_storage(parse_storage_url(f"chdb://{directory}"))
        storage.ensure_schema()
        start = time.perf_counter()
        generate(storage, args.tasks)
        storage.command("OPTIMIZE TABLE task_end FINAL")
        rows = int(storage.query("SELECT count() AS n FROM task_end")[0]["n"])
        print(f"detection bench: generated {rows:,} task rows in {time.perf_counter() - start:.1f} s")
        from_ms, to_ms = BASE_MS - 3_600_000, BASE_MS + SPAN_MS + 3_600_000
        variables = {"cluster": ["bench"], "app": ["app-bench-0"]}

        def timed(sql: str) -> tuple[float, int]:
            return _timed(storage, expand(interpolate(sql, variables), from_ms, to_ms, interval_ms=60_000), args.repeat)

        def render(sql: str) -> str:
            return expand(interpolate(sql, variables), from_ms, to_ms, interval_ms=60_000)

        def timed_cpu(sql: str) -> tuple[float, float, int]:
            return _timed_cpu(
                storage, expand(interpolate(sql, variables), from_ms, to_ms, interval_ms=60_000), args.repeat
            )

        with_running, cpu, n = timed_cpu(rule_query())
        without, _ = timed(rule_query(None, Thresholds(running={"enabled": False})))
        print(
            f"detection bench: all rules, finished + running stages: {with_running * 1000:.0f} ms, "
            f"CPU {cpu * 1000:.0f} ms ({n} findings; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
        # what the Detector (alerter, sparktap findings, the collector's /findings) runs on a one-node store: <t> FINAL
        # instead of the _dedup views (SqlContext.final_reads); the Grafana panels above keep the views
        direct_sql = rule_query(ctx=SqlContext(final_reads=True))
        direct, direct_cpu, direct_n = timed_cpu(direct_sql)
        same = [
            storage.query(expand(interpolate(q, variables), from_ms, to_ms, interval_ms=60_000))
            for q in (rule_query(), direct_sql)
        ]
        print(
            f"detection bench: all rules as the Detector reads chDB (<t> FINAL, no views): {direct * 1000:.0f} ms, "
            f"CPU {direct_cpu * 1000:.0f} ms ({direct_n} findings, {'the' if same[0] == same[1] else 'NOT the'} "
            f"same rows as through the views; load average {os.getloadavg()[0]:.1f})"
        )
        # the Detector's whole pass: input_probe, then the query without the optional inputs (plan, streaming, AQE)
        # that have no row in the range. This store has none of them, so all four are left out here; on a store where
        # they have rows the Detector runs the whole query above (its text, which is what costs, is the same)
        probe = input_probe(SqlContext(final_reads=True))
        present = {str(r["input"]) for r in storage.query(render(probe))}
        absent = frozenset(OPTIONAL_INPUTS) - present
        pruned_sql = rule_query(ctx=SqlContext(final_reads=True), absent=absent)
        probe_wall, probe_cpu, _ = timed_cpu(probe)
        pruned, pruned_cpu, pruned_n = timed_cpu(pruned_sql)
        print(
            f"detection bench: the Detector's pass (input probe {probe_wall * 1000:.0f} ms, CPU {probe_cpu * 1000:.0f} "
            f"ms; then all rules without the inputs with no row: {', '.join(sorted(absent)) or 'none'}): "
            f"{(probe_wall + pruned) * 1000:.0f} ms, CPU {(probe_cpu + pruned_cpu) * 1000:.0f} ms "
            f"({pruned_n} findings, "
            f"{'the' if storage.query(render(pruned_sql)) == same[1] else 'NOT the'} same rows as the whole query; "
            f"load average {os.getloadavg()[0]:.1f})"
        )
        # side by side: chDB's default analyzer pass the store's session turns off (store/embedded.py)
        chain, chain_cpu, chain_n = timed_cpu(
            rule_query(ctx=SqlContext(final_reads=True)) + "\nSETTINGS optimize_and_compare_chain = 1"
        )
        print(
            f"detection bench: all rules with optimize_and_compare_chain = 1 (chDB's default): {chain * 1000:.0f} ms, "
            f"CPU {chain_cpu * 1000:.0f} ms ({chain_n} findings); "
            f"ratio CPU session/default {direct_cpu / chain_cpu:.2f}"
        )
        for source, label in GROUPS.items():
            ids = [r.id for r in RULES if _sources(r) == ({"stage", source} if source == "aqe_read" else {source})]
            wall, group_cpu, found = timed_cpu(rule_query(ids))
            print(f"detection bench: {label}: {wall * 1000:.0f} ms, CPU {group_cpu * 1000:.0f} ms ({found} findings)")
        print(
            f"detection bench: all rules, finished stages only: {without * 1000:.0f} ms "
            f"(running-stage evaluation costs x{with_running / without:.2f})"
        )
        worst = max((timed(alert_query(rule, GrafanaConfig()))[0], rule) for rule in RULE_IDS)
        print(f"detection bench: slowest Grafana alert-rule query ({worst[1]}): {worst[0] * 1000:.0f} ms")
        slowest = 0.0
        for title, sql in panel_queries(overview()):
            seconds, n = timed(sql)
            slowest = max(slowest, seconds)
            print(f"detection bench: overview / {title}: {seconds * 1000:.0f} ms ({n} rows)")
        print(f"detection bench: slowest overview query {slowest * 1000:.0f} ms (target < 1000 ms)")
        storage.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
