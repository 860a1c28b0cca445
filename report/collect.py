"""``sparktap report APP_ID [-o report.html]``: a self-contained HTML report of one application, read from ClickHouse.

``collect`` reads the ``<table>_dedup`` views of one application (summary, stages, task-duration quartiles, shuffle
locality, spills, AQE decisions, SQL executions; plan estimates, codegen and streaming batches through
``plans.py``) and runs the detection rules (``detection``) scoped to it;
``render.render`` turns that ``Report`` into one HTML file with plotly charts and plotly.js inline, so the
file opens offline. The SQL uses only what clickhouse-server 18.16 also has (no CTEs, no Map functions).
"""

# ruff: noqa: S608 - SQL is built from quoted identifiers (quote_ident) and the app id as a quoted literal.

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sparktap.detection.sql import stage_input
from sparktap.errors import ConfigError
from sparktap.report.model import (
    AqeRead,
    AqeUpdate,
    Distribution,
    Report,
    ShuffleReadNode,
    SqlExecution,
    Stage,
    UnknownApplicationError,
)
from sparktap.report.plans import read as read_plans_and_streams
from sparktap.report.tables import read_tables
from sparktap.report.utilisation import read as read_utilisation

if TYPE_CHECKING:
    from sparktap.detection import Thresholds
    from sparktap.detection.findings import QueryFn

HOUR_MS = 3_600_000
RECENT_APPS = 10
# tables whose rows say an application exists, and bound its event times
_PRESENCE_TABLES = (
    "app_start",
    "app_end",
    "job_start",
    "sql_start",
    "stage_submitted",
    "stage_completed",
    "task_end",
    "aqe_plan_update",
    "executor_added",
    "sql_plan_stats",
    "streaming_query_progress",
)


def _literal(value: str) -> str:
    from sparktap.schemas.ddl import quote_literal

    return quote_literal(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _properties(value: Any) -> dict[str, str]:
    """A Map column (a dict), or the JSON text servers without Map store."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
    return {}


class _Reader:
    """The application's rows from the dedup views of one database."""

    def __init__(self, query: QueryFn, database: str, app_id: str) -> None:
        self.query = query
        self.database = database
        self.app = _literal(app_id)

    def view(self, table: str) -> str:
        from sparktap.schemas.ddl import quote_ident

        return f"{quote_ident(self.database)}.{quote_ident(table + '_dedup')}"

    def rows(self, table: str, columns: str, order: str = "event_time_ms") -> list[dict[str, Any]]:
        return self.query(f"SELECT {columns} FROM {self.view(table)} WHERE app_id = {self.app} ORDER BY {order}")

    def check_tables(self) -> None:
        wanted = ", ".join(_literal(t + "_dedup") for t in _PRESENCE_TABLES)
        names = {
            str(r["name"])
            for r in self.query(
                f"SELECT name FROM system.tables WHERE database = {_literal(self.database)} AND name IN ({wanted})"
            )
        }
        missing = [t for t in _PRESENCE_TABLES if f"{t}_dedup" not in names]
        if missing:
            raise ConfigError(
                f'no sparktap tables in database="{self.database}" (missing {missing[0]}_dedup): '
                "check SPARKTAP_CLICKHOUSE__URL / --clickhouse-url / --database, or start the "
                "collector once so it creates them"
            )

    def presence(self) -> tuple[int, int, int]:
        """(events, first event time, last event time) of the application over the main tables."""
        parts = [
            f"SELECT count() AS n, min(event_time_ms) AS lo, max(event_time_ms) AS hi FROM {self.view(t)} "
            f"WHERE app_id = {self.app}"
            for t in _PRESENCE_TABLES
        ]
        rows = [r for r in self.query(" UNION ALL ".join(parts)) if int(r["n"]) > 0]
        if not rows:
            return 0, 0, 0
        return sum(int(r["n"]) for r in rows), min(int(r["lo"]) for r in rows), max(int(r["hi"]) for r in rows)

    def recent_apps(self) -> list[dict[str, Any]]:
        return self.query(
            f"SELECT app_id, any(app_name) AS app_name, any(cluster) AS cluster, "
            f"min(event_time_ms) AS started FROM {self.view('app_start')} GROUP BY app_id "
            f"ORDER BY started DESC LIMIT {RECENT_APPS}"
        )


def _unknown_app(reader: _Reader, app_id: str, source: str) -> UnknownApplicationError:
    def when(ms: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(int(ms) / 1000))

    def one_line(text: Any) -> str:
        return " ".join(str(text).split())

    listing = ", ".join(
        f"{one_line(r['app_id'])} ({one_line(r['app_name'])}, {when(r['started'])})" for r in reader.recent_apps()
    )
    listing = listing or "none (no app_start events stored)"
    return UnknownApplicationError(
        f'no events of app_id="{app_id}" in database="{reader.database}" url="{source}"; the {RECENT_APPS} most '
        f"recent applications: {listing}; app ids are Spark's spark.app.id (SparkContext.applicationId, the Spark "
        "UI's Environment tab, the app variable of the sparktap Grafana dashboards)"
    )


_StageKey = tuple[str, int, int]
Row = Mapping[str, Any]


def _stage(key: _StageKey, done: Row | None, submitted: Row | None, tasks: Row | None, running_app: bool) -> Stage:
    """One stage attempt from its ``stage_completed`` row (authoritative), ``stage_submitted`` row and ``task_end``
    aggregates, whichever exist. Task durations come from ``task_end`` rows when there are any (exact quartiles)."""
    dist = None
    if tasks is not None:
        q = [float(v) for v in tasks["d_q"]]
        dist = Distribution(
            "task_end", int(tasks["tasks"]), float(tasks["d_min"]), q[0], q[1], q[2], q[3], float(tasks["d_max"])
        )
    elif done is not None and int(done["reported"]) > 0:
        dist = Distribution(
            "stage_completed",
            int(done["reported"]),
            float(done["d_min"]),
            None,
            float(done["d_p50"]),
            float(done["d_p75"]),
            float(done["d_p95"]),
            float(done["d_max"]),
        )
    start: int | None
    end: int | None
    if done is not None:
        end = _opt_int(done["completion_time_ms"]) or int(done["event_time_ms"])
        start = _opt_int(done["submission_time_ms"])
        start = end - int(done["duration_ms"]) if start is None else start
        status = str(done["status"])
    else:
        start = (
            int(submitted["start_ms"])
            if submitted is not None
            else int(tasks["first_launch"])
            if tasks is not None
            else None
        )
        end = int(tasks["last_finish"]) if tasks is not None else None
        status = "running" if running_app else "incomplete"
    numbers: Row = done if done is not None else tasks if tasks is not None else {}
    meta: Row = done if done is not None else submitted if submitted is not None else {}
    read = "sr" if int(numbers.get("sr_sum", 0)) > 0 else "in"
    return Stage(
        app_attempt=key[0],
        stage_id=key[1],
        stage_attempt=key[2],
        name=str(meta.get("name", "")),
        status=status,
        job_id=_opt_int(meta.get("job_id")),
        sql_execution_id=_opt_int(meta.get("sql_execution_id")),
        start_ms=start,
        end_ms=end,
        num_tasks=int(meta["num_tasks"]) if meta else int(tasks["tasks"]) if tasks is not None else 0,
        tasks_failed=int(done["tasks_failed"]) if done is not None else int(numbers.get("failed", 0)),
        durations=dist,
        read_kind="shuffle read" if read == "sr" else "input",
        read_p50=float(numbers.get(f"{read}_p50", 0)),
        read_max=float(numbers.get(f"{read}_max", 0)),
        input_bytes=int(numbers.get("in_sum", 0)),
        shuffle_local_bytes=int(numbers.get("local_sum", 0)),
        shuffle_remote_bytes=int(numbers.get("remote_sum", 0)),
        shuffle_write_bytes=int(numbers.get("write_sum", 0)),
        memory_spill_bytes=int(numbers.get("mem_spill", 0)),
        disk_spill_bytes=int(numbers.get("disk_spill", 0)),
    )


def _stages(reader: _Reader, running_app: bool) -> list[Stage]:
    key = "app_attempt, stage_id, stage_attempt"
    completed = reader.rows(
        "stage_completed",
        f"""{key}, name, toString(status) AS status, job_id,
        sql_execution_id, submission_time_ms, completion_time_ms, event_time_ms, duration_ms, num_tasks, tasks_failed,
        task_duration_ms_min AS d_min, task_duration_ms_p50 AS d_p50, task_duration_ms_p75 AS d_p75,
        task_duration_ms_p95 AS d_p95, task_duration_ms_max AS d_max, tasks_succeeded + tasks_failed AS reported,
        shuffle_read_bytes_p50 AS sr_p50, shuffle_read_bytes_max AS sr_max, shuffle_read_bytes_sum AS sr_sum,
        {stage_input("p50")} AS in_p50, {stage_input("max")} AS in_max, {stage_input("sum")} AS in_sum,
        shuffle_read_local_bytes_sum AS local_sum, shuffle_read_remote_bytes_sum AS remote_sum,
        shuffle_write_bytes_sum AS write_sum, memory_spill_bytes_sum AS mem_spill,
        disk_spill_bytes_sum AS disk_spill""",
        key,
    )
    submitted = reader.rows(
        "stage_submitted",
        f"{key}, name, job_id, sql_execution_id, num_tasks, ifNull(submission_time_ms, event_time_ms) AS start_ms",
        key,
    )
    tasks = reader.query(f"""SELECT {key}, count() AS tasks, countIf(status = 'FAILED') AS failed,
    min(launch_time_ms) AS first_launch, max(finish_time_ms) AS last_finish, min(duration_ms) AS d_min,
    max(duration_ms) AS d_max, quantilesExact(0.25, 0.5, 0.75, 0.95)(duration_ms) AS d_q,
    quantileExact(0.5)(shuffle_local_bytes + shuffle_remote_bytes) AS sr_p50,
    max(shuffle_local_bytes + shuffle_remote_bytes) AS sr_max,
    sum(shuffle_local_bytes + shuffle_remote_bytes) AS sr_sum,
    quantileExact(0.5)(input_bytes) AS in_p50, max(input_bytes) AS in_max, sum(input_bytes) AS in_sum,
    sum(shuffle_local_bytes) AS local_sum, sum(shuffle_remote_bytes) AS remote_sum,
    sum(shuffle_write_bytes) AS write_sum, sum(memory_spill_bytes) AS mem_spill, sum(disk_spill_bytes) AS disk_spill
FROM {reader.view("task_end")} WHERE app_id = {reader.app} GROUP BY {key}""")

    def ident(r: Row) -> _StageKey:
        return str(r["app_attempt"]), int(r["stage_id"]), int(r["stage_attempt"])

    done = {ident(r): r for r in completed}
    started = {ident(r): r for r in submitted}
    by_tasks = {ident(r): r for r in tasks}
    out = [
        _stage(k, done.get(k), started.get(k), by_tasks.get(k), running_app)
        for k in set(done) | set(started) | set(by_tasks)
    ]
    return sorted(
        out,
        key=lambda st: (
            st.start_ms if st.start_ms is not None else 2**62,
            st.app_attempt,
            st.stage_id,
            st.stage_attempt,
        ),
    )


_Descriptions = dict[tuple[str, int], str]


def _job_descriptions(reader: _Reader) -> tuple[_Descriptions, dict[int, str]]:
    """Non-empty job descriptions by (app attempt, job id), and each SQL execution's first one by execution id."""
    jobs: _Descriptions = {}
    by_execution: dict[int, str] = {}
    for r in reader.rows(
        "job_start",
        "app_attempt, job_id, ifNull(sql_execution_id, -1) AS execution_id, ifNull(description, '') AS description",
        "job_id",
    ):
        if r["description"]:
            jobs[(str(r["app_attempt"]), int(r["job_id"]))] = str(r["description"])
            if int(r["execution_id"]) >= 0:
                by_execution.setdefault(int(r["execution_id"]), str(r["description"]))
    return jobs, by_execution


def _job_users(reader: _Reader) -> _Descriptions:
    """The Spark Connect user of each job of an operation, by (app attempt, job id) (issue 26)."""
    rows = reader.rows("job_start", "app_attempt, job_id, toString(user_id) AS user_id", "job_id")
    return {(str(r["app_attempt"]), int(r["job_id"])): str(r["user_id"]) for r in rows if r["user_id"]}


def _ran_by(stages: list[Stage], users: _Descriptions) -> list[Stage]:
    """Stages with the Connect user of their job."""
    out = []
    for st in stages:
        user = users.get((st.app_attempt, st.job_id), "") if st.job_id is not None else ""
        out.append(dataclasses.replace(st, ran_by=user) if user else st)
    return out


def _named(stages: list[Stage], jobs: _Descriptions, sql: list[SqlExecution]) -> list[Stage]:
    """Stages with their job's description, else their SQL execution's."""
    executions = {q.execution_id: q.title for q in sql}
    out = []
    for st in stages:
        text = (jobs.get((st.app_attempt, st.job_id), "") if st.job_id is not None else "") or (
            executions.get(st.sql_execution_id, "") if st.sql_execution_id is not None else ""
        )
        out.append(dataclasses.replace(st, description=text) if text else st)
    return out


def _sql(reader: _Reader, job_descriptions: dict[int, str] | None = None) -> list[SqlExecution]:
    starts = reader.rows("sql_start", "execution_id, description, event_time_ms", "execution_id")
    ends = {
        int(r["execution_id"]): r
        for r in reader.rows("sql_end", "execution_id, duration_ms, error, event_time_ms", "execution_id")
    }
    out = []
    for r in starts:
        end = ends.pop(int(r["execution_id"]), None)
        duration = _opt_int(end["duration_ms"]) if end else None
        if end is not None and duration is None:
            duration = int(end["event_time_ms"]) - int(r["event_time_ms"])
        out.append(
            SqlExecution(
                int(r["execution_id"]),
                str(r["description"]),
                int(r["event_time_ms"]),
                duration,
                str(end["error"]) if end and end["error"] else None,
                end is not None,
                (job_descriptions or {}).get(int(r["execution_id"]), ""),
            )
        )
    out += [SqlExecution(i, "", None, _opt_int(e["duration_ms"]), e["error"] or None, True) for i, e in ends.items()]
    return sorted(out, key=lambda x: x.execution_id)


def _aqe(reader: _Reader) -> tuple[list[AqeUpdate], list[AqeRead]]:
    updates = [
        AqeUpdate(
            int(r["execution_id"]),
            int(r["event_time_ms"]),
            bool(int(r["final_plan"])),
            [str(j) for j in r["previous_join_strategies"]],
            [str(j) for j in r["join_strategies"]],
            [
                ShuffleReadNode(int(n), bool(int(c)), bool(int(s)), bool(int(loc)), str(d))
                for n, c, s, loc, d in zip(
                    r["shuffle_reads_node_id"],
                    r["shuffle_reads_coalesced"],
                    r["shuffle_reads_skewed"],
                    r["shuffle_reads_local"],
                    r["shuffle_reads_description"],
                    strict=True,
                )
            ],
        )
        for r in reader.rows(
            "aqe_plan_update",
            "execution_id, event_time_ms, final_plan, previous_join_strategies, "
            "join_strategies, shuffle_reads_node_id, shuffle_reads_coalesced, shuffle_reads_skewed, "
            "shuffle_reads_local, shuffle_reads_description",
            "event_time_ms, execution_id",
        )
    ]
    reads = [
        AqeRead(
            int(r["execution_id"]),
            int(r["node_id"]),
            int(r["event_time_ms"]),
            bool(int(r["coalesced"])),
            bool(int(r["skewed"])),
            bool(int(r["local"])),
            _opt_int(r["num_partitions"]),
            _opt_int(r["partition_data_size_bytes"]),
            _opt_int(r["num_skewed_partitions"]),
            _opt_int(r["num_skewed_splits"]),
            _opt_int(r["num_coalesced_partitions"]),
        )
        for r in reader.rows(
            "aqe_shuffle_read",
            "execution_id, node_id, event_time_ms, coalesced, skewed, local, "
            "num_partitions, partition_data_size_bytes, num_skewed_partitions, num_skewed_splits, "
            "num_coalesced_partitions",
            "execution_id, node_id, event_time_ms",
        )
    ]
    return updates, reads


def collect(
    query: QueryFn,
    app_id: str,
    *,
    database: str,
    version: tuple[int, ...],
    source: str = "",
    thresholds: Thresholds | None = None,
) -> Report:
    """Read one application's report data; ``UnknownApplicationError`` (listing recent apps) when none is stored."""
    from sparktap.detection import DEFAULT_THRESHOLDS, Detector, Scope
    from sparktap.detection.blind import blind_spots
    from sparktap.detection.sql import SqlContext
    from sparktap.schemas.ddl import Features

    thresholds = thresholds or DEFAULT_THRESHOLDS
    reader = _Reader(query, database, app_id)
    reader.check_tables()
    events, first_ms, last_ms = reader.presence()
    if events == 0:
        raise _unknown_app(reader, app_id, source)
    starts = reader.rows(
        "app_start", "app_attempt, app_name, cluster, spark_version, master, user, properties, event_time_ms"
    )
    ends = reader.rows("app_end", "app_attempt, app_name, cluster, duration_ms, event_time_ms")
    anyrow = (
        starts
        or ends
        or reader.rows("stage_submitted", "app_attempt, app_name, cluster")
        or reader.rows("task_end", "app_attempt, app_name, cluster")
        or [{}]
    )[0]
    attempts = sorted({str(r["app_attempt"]) for r in starts} | {str(r["app_attempt"]) for r in ends}) or [
        str(anyrow.get("app_attempt", ""))
    ]
    running = not ends or len({str(r["app_attempt"]) for r in ends}) < len(attempts)
    executors = reader.query(
        f"SELECT uniqExact(executor_id) AS n FROM {reader.view('executor_added')} WHERE app_id = {reader.app}"
    )
    first = starts[0] if starts else {}
    updates, reads = _aqe(reader)
    jobs, by_execution = _job_descriptions(reader)
    sql = _sql(reader, by_execution)
    detector = Detector(query, thresholds, database, version, Scope.of(apps=[app_id]))
    blind = blind_spots(
        query, SqlContext(database, version, Scope.of(apps=[app_id])), first_ms - HOUR_MS, last_ms + HOUR_MS
    )
    return Report(
        app_id=app_id,
        app_name=str(anyrow.get("app_name", "")),
        cluster=str(anyrow.get("cluster", "")),
        attempts=attempts,
        spark_version=str(first.get("spark_version", "")),
        master=str(first.get("master", "")),
        user=str(first.get("user", "")),
        start_ms=int(first["event_time_ms"]) if starts else None,
        end_ms=None if running else max(int(r["event_time_ms"]) for r in ends),
        last_event_ms=last_ms,
        running=running,
        properties=_properties(first.get("properties")),
        executors=int(executors[0]["n"]) if executors else 0,
        stages=_ran_by(_named(_stages(reader, running), jobs, sql), _job_users(reader)),
        sql=sql,
        aqe_updates=updates,
        aqe_reads=reads,
        findings=detector.findings(first_ms - HOUR_MS, last_ms + HOUR_MS),
        plans=read_plans_and_streams(query, reader.view, reader.app, Features.for_version(version).map),
        source=source,
        generated_at_ms=int(time.time() * 1000),
        thresholds=thresholds,
        utilisation=read_utilisation(query, database, version, app_id, first_ms - HOUR_MS, last_ms + HOUR_MS),
        blind=[b.line() for b in blind],
        tables=read_tables(query, reader.view, reader.app, last_ms),
    )
