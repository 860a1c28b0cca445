"""The pipeline-health panels (``dashboards/health_panels.py``) against their reference: the raw queries they ran
before the health rollup (``schemas/health_rollups.py``), over the 15 event tables' ``_dedup`` views, kept here."""

# ruff: noqa: S608 - test SQL from constants

from __future__ import annotations

from sparktap.dashboards.health_panels import STORED_TABLES, events_stored, sequence_gaps
from sparktap.dashboards.panels import _scope, _where, time_bucket
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.sql import Scope, SqlContext
from sparktap.schemas.health_rollups import HEALTH_SOURCES, HEALTH_TABLES
from sparktap.store import Storage


def raw_sequence_gaps(ctx: SqlContext) -> str:
    """The "Events missing (sequence gaps)" query before the rollup (per table: max(seq), count() per application
    attempt, which numbers its events from 1)."""
    started = (
        f"app_id IN (SELECT app_id FROM {ctx.view('app_start')} WHERE {_scope(ctx, False)} "
        "AND $__timeFilter(event_time))"
    )
    parts = "\nUNION ALL\n".join(
        f"SELECT app_id, app_attempt, max(seq) AS top, count() AS n FROM {ctx.view(t)} WHERE {_scope(ctx, False)} "
        f"AND {started} GROUP BY app_id, app_attempt"
        for t in HEALTH_SOURCES
    )
    return f"""SELECT sum(lost) AS events_missing, countIf(lost > 0) AS applications_affected
FROM (SELECT app_id, sum(attempt_lost) AS lost FROM (SELECT app_id, app_attempt, max(top) - sum(n) AS attempt_lost
    FROM ({parts}) GROUP BY app_id, app_attempt) GROUP BY app_id)"""


def raw_events_stored(ctx: SqlContext) -> str:
    """The "Events stored by the collector" query before the rollup (count() per bucket over each _dedup view)."""
    parts = "\nUNION ALL\n".join(
        f"SELECT {time_bucket('event_time')} AS time, '{t}' AS event_table, count() AS events "
        f"FROM {ctx.view(t)} {_where(ctx, False)} GROUP BY time"
        for t in STORED_TABLES
    )
    return f"SELECT time, event_table, events FROM ({parts}) ORDER BY time"


def panel_sql(ctx: SqlContext) -> dict[str, str]:
    return {
        "sequence_gaps": sequence_gaps(ctx)["targets"][0]["rawSql"],
        "events_stored": events_stored(ctx)["targets"][0]["rawSql"],
    }


def event_tables_named(sql: str) -> list[str]:
    """The event tables (or their _dedup views) a query names."""
    return [t for t in HEALTH_SOURCES if f"`{t}`" in sql or f"`{t}_dedup`" in sql or f"`{t}_local`" in sql]


# (from, to, interval) in ms after the day's midnight: the whole day, ranges with edges inside minutes and seconds
# (an event at the upper bound's second, with and without milliseconds), an interval that is not whole minutes,
# hourly intervals
RANGES = (
    (0, 86_400_000, 600_000),
    (1_234_567, 3_000_321, 60_000),
    (1_234_567, 3_000_321, 20_000),
    (61_000, 100_777, 120_000),
    (1_200_000, 1_320_000, 60_000),
    (1_234_567, 7_300_321, 3_600_000),  # an hourly interval: one whole hour from the hour rollup, minutes around it
    (1_234_567, 3_000_321, 300_000),  # whole 5 minutes from the 5-minute rollup, minutes and seconds around them
    (0, 86_400_000, 3_600_000),
)
TABLES = ("task_end", "stage_completed", "listener_health", "raw_events", "job_start", "executor_added")
EVENTS = 300
"""sequence numbers per application attempt: 1 is app_start, the others spread over TABLES"""


def generate(storage: Storage, day_ms: int, apps: range) -> None:
    """Applications ``apps`` of a day: ``app_start`` (seq 1) and events 2..EVENTS round-robin over TABLES, one every
    777 ms from the application's start (20 s apart), every 7th on a whole second; a gap (seq % 97 = 3) in two
    applications of three; application ``a % 10 = 4`` has a second attempt numbered from 1 again."""
    time = f"{day_ms} + a * 20000 + s * 777 - if(s % 7 = 0, (a * 20000 + s * 777) % 1000, 0)"
    for i, table in enumerate(("app_start", *TABLES)):
        which = "s = 1" if table == "app_start" else f"s > 1 AND s % {len(TABLES)} = {i - 1}"
        storage.command(
            f"INSERT INTO {table} (event_type, cluster, app_id, app_attempt, app_name, seq, emitted_at_ms, "
            f"event_time_ms) SELECT '{table}', concat('c', toString(a % 3)), concat('app-', toString(a)), "
            f"attempt, 'job', s, {time}, {time} FROM (SELECT intDiv(number, {EVENTS}) + {apps.start} AS a, "
            f"number % {EVENTS} + 1 AS s, arrayJoin(if(a % 10 = 4, ['1', '2'], ['1'])) AS attempt "
            f"FROM numbers({len(apps) * EVENTS})) WHERE {which} AND (s % 97 != 3 OR a % 3 = 0)"
        )


def attempts(a: int) -> tuple[str, ...]:
    return ("1", "2") if a % 10 == 4 else ("1",)


def seqs(a: int, table: str) -> list[int]:
    """The sequence numbers ``generate`` stores for application ``a``'s attempt in ``table``."""
    kept = [s for s in range(1, EVENTS + 1) if s % 97 != 3 or a % 3 == 0]
    if table == "app_start":
        return [s for s in kept if s == 1]
    return [s for s in kept if s > 1 and s % len(TABLES) == TABLES.index(table)]


def expected_gaps(apps: range) -> dict[str, int]:
    """The sequence-gap panel's answer over the whole day, from the model of ``generate``: per application the
    events missing of each attempt (its highest number minus its events stored), summed."""
    lost = []
    for a in apps:
        stored = sum(len(seqs(a, t)) for t in ("app_start", *TABLES))
        lost.append((EVENTS - stored) * len(attempts(a)))
    return {"events_missing": sum(lost), "applications_affected": sum(1 for x in lost if x > 0)}


def drop_health(storage: Storage) -> None:
    """Drop the health rollup's tables and views (one node), as on a store from before it."""
    names = [str(r["name"]) for r in storage.query("SELECT name FROM system.tables WHERE name LIKE 'health_rollup%'")]
    assert len(names) == len(HEALTH_TABLES) * (1 + len(HEALTH_SOURCES))
    for name in names:
        storage.command(f"DROP TABLE {name}")


def assert_panels_equal_raw(
    storage: Storage, day_ms: int, ranges: tuple[tuple[int, int, int], ...] = RANGES
) -> dict[tuple[str, str, int], list[dict[str, object]]]:
    """Both panels equal their raw reference for every range with every cluster, and for one range with one
    cluster; returns the answers by (panel, clusters, index of the range)."""
    ctx = SqlContext(storage.database, storage.version(), Scope.grafana(False))
    new, raw = panel_sql(ctx), {"sequence_gaps": raw_sequence_gaps(ctx), "events_stored": raw_events_stored(ctx)}
    answers = {}
    for clusters, some in ((["c0", "c1", "c2"], ranges), (["c1"], ranges[1:2])):
        for i, (start, end, interval) in enumerate(some):
            for name, sql in new.items():
                rollup, reference = (
                    expand(interpolate(s, {"cluster": clusters}), day_ms + start, day_ms + end, interval)
                    for s in (sql, raw[name])
                )
                got, want = storage.query(rollup), storage.query(reference)
                where = f"{name} clusters={clusters} range={start}..{end} interval={interval}"
                assert sorted(map(repr, got)) == sorted(map(repr, want)), where
                if name == "events_stored":  # ORDER BY time
                    assert [r["time"] for r in got] == sorted(r["time"] for r in got), where
                answers[name, ",".join(clusters), i] = got
    return answers
