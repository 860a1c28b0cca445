"""Rollups (schemas/rollups.py) on chDB and clickhouse-server 18.16: filled at insert time by materialized views, equal
to the raw tables' deduplicated aggregates on a generated day of 500 applications with redelivered copies; the
overview and cluster dashboards read them."""

# ruff: noqa: S608 - test SQL from constants

from __future__ import annotations

import time

import pytest
from pydantic import SecretStr

from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import cluster, overview, panel_queries
from sparktap.detection.macros import expand, interpolate
from sparktap.schemas.health_rollups import HEALTH_TABLES
from sparktap.schemas.schema import schema_for
from sparktap.store import Storage, open_storage
from sparktap.store.access import Reader
from sparktap.store.retention import Tiers, apply_retention
from sparktap.store.settings import ClickHouseSettings
from sparktap.store.target import parse_storage_url
from sparktap.store.teams import ensure_team_databases
from tests.support import health
from tests.support.cluster import on_node
from tests.support.services.cluster import ClickHouseCluster

pytestmark = pytest.mark.integration

APPS = 500
STAGES = 12
DAY_MS = (int(time.time()) // 86_400 - 1) * 86_400_000
"""UTC midnight a day ago: inside every retention"""


def _generate(storage: Storage, apps: range, stages: int) -> None:
    """app_start for every application, app_end for 9 in 10, ``stages`` stage_completed rows each (varied sums)."""
    first, count = apps.start, len(apps)
    app = "concat('app-', toString(a))"
    storage.command(
        "INSERT INTO app_start (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, spark_version, user) "
        f"SELECT 1, 'app_start', concat('c', toString(number % 3)), concat('app-', toString(number)), '1', "
        f"concat('job-', toString(number % 17)), 1, {DAY_MS} + number * 1000, {DAY_MS} + number * 1000, '4.0.0', "
        f"concat('u', toString(number % 5)) FROM numbers({first}, {count})"
    )
    storage.command(
        "INSERT INTO app_end (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, duration_ms) "
        f"SELECT 1, 'app_end', concat('c', toString(number % 3)), concat('app-', toString(number)), '1', "
        f"concat('job-', toString(number % 17)), 100000, {DAY_MS} + 3600000 + number * 1000, "
        f"{DAY_MS} + 3600000 + number * 1000, 3600000 FROM numbers({first}, {count}) WHERE number % 10 != 0"
    )
    storage.command(
        "INSERT INTO stage_completed (schema_version, event_type, cluster, app_id, app_attempt, app_name, seq, "
        "emitted_at_ms, event_time_ms, stage_id, stage_attempt, name, status, num_tasks, tasks_succeeded, "
        "tasks_failed, tasks_killed, task_duration_ms_sum, task_duration_ms_max, run_time_ms_sum, gc_time_ms_sum, "
        "shuffle_write_bytes_sum, disk_spill_bytes_sum, cpu_time_ns) "
        f"SELECT 1, 'stage_completed', concat('c', toString(a % 3)), {app}, '1', concat('job-', toString(a % 17)), "
        f"10 + st * 2, {DAY_MS} + a * 1000 + st * 60000, {DAY_MS} + a * 1000 + st * 60000, st, 0, "
        "concat('stage ', toString(st)), 'succeeded', 100 + (a * 7 + st) % 900, 100 + (a * 7 + st) % 900, "
        "(a + st) % 4, (a * st) % 3, (a * 131 + st * 17) % 100000, (a + st * 13) % 5000, (a * 97 + st) % 90000, "
        "(a * 3 + st) % 7000, (a * 1009 + st * 7919) % 10000000, (a * st * 31) % 1000000, (a + st) * 1000 "
        f"FROM (SELECT intDiv(number, {stages}) + {first} AS a, number % {stages} AS st "
        f"FROM numbers({count * stages}))"
    )


# every aggregate the fleet panels show, computed from the rollups and from the raw tables' dedup views
_PER_APP_ROLLUP = """
SELECT a.cluster AS cluster, a.app_id AS app_id, app_name, started_ms, ended_ms, stages, tasks, failed, killed,
    task_ms, run_ms, gc_ms, shuffle, spilled, cpu, max_task_ms
FROM (
    SELECT cluster, app_id, any(app_name) AS app_name, minIf(event_time_ms, event_type = 'app_start') AS started_ms,
        maxIf(event_time_ms, event_type = 'app_end') AS ended_ms
    FROM app_rollup_dedup GROUP BY cluster, app_id
) AS a
ANY LEFT JOIN (
    SELECT cluster, app_id, count() AS stages, sum(num_tasks) AS tasks, sum(tasks_failed) AS failed,
        sum(tasks_killed) AS killed, sum(task_duration_ms_sum) AS task_ms, sum(run_time_ms_sum) AS run_ms,
        sum(gc_time_ms_sum) AS gc_ms, sum(shuffle_write_bytes_sum) AS shuffle, sum(disk_spill_bytes_sum) AS spilled,
        sum(cpu_time_ns) AS cpu, max(task_duration_ms_max) AS max_task_ms
    FROM stage_rollup_dedup GROUP BY cluster, app_id
) AS s USING (cluster, app_id)
ORDER BY cluster, app_id
"""
_PER_APP_RAW = _PER_APP_ROLLUP.replace(
    "minIf(event_time_ms, event_type = 'app_start') AS started_ms,\n"
    "        maxIf(event_time_ms, event_type = 'app_end') AS ended_ms\n"
    "    FROM app_rollup_dedup GROUP BY cluster, app_id",
    "min(event_time_ms) AS started_ms, 0 AS ended_ms FROM app_start_dedup GROUP BY cluster, app_id",
).replace("FROM stage_rollup_dedup", "FROM stage_completed_dedup")
_ENDED_RAW = "SELECT cluster, app_id, max(event_time_ms) AS ended_ms FROM app_end_dedup GROUP BY cluster, app_id"
# the job-ordered index of runs (run_rollup): per run and event type, what the history reads take (detection/history.py)
_PER_RUN = """SELECT cluster, toString(app_name) AS app_name, app_id, app_attempt, toString(event_type) AS event_type,
    count() AS n, min(event_time_ms) AS first_ms, max(event_time_ms) AS last_ms, sum(toUInt64(seq)) AS seqs,
    sum({dur}) AS dur, sum({read}) AS sr, sum({write}) AS sw, sum(cityHash64(toString({name}), toString({status}),
    toString(stage_id), toString(stage_attempt))) AS stage_keys
FROM {table} GROUP BY cluster, app_name, app_id, app_attempt, event_type"""
_PER_RUN_INDEX = (
    "SELECT * FROM ("
    + _PER_RUN.format(
        dur="duration_ms",
        read="shuffle_read_bytes_sum",
        write="shuffle_write_bytes_sum",
        name="name",
        status="status",
        table="run_rollup_dedup",
    )
    + ") ORDER BY cluster, app_name, app_id, app_attempt, event_type"
)
_PER_RUN_RAW = (
    "SELECT * FROM ("
    + "\nUNION ALL\n".join(
        [
            _PER_RUN.format(
                dur="duration_ms",
                read="shuffle_read_bytes_sum",
                write="shuffle_write_bytes_sum",
                name="name",
                status="status",
                table="stage_completed_dedup",
            ),
            *(
                _PER_RUN.format(
                    dur="toUInt64(0)", read="toInt64(0)", write="toInt64(0)", name="''", status="''", table=f"{t}_dedup"
                ).replace("toString(stage_id), toString(stage_attempt)", "'0', '0'")
                for t in ("app_start", "app_end")
            ),
        ]
    )
    + ") ORDER BY cluster, app_name, app_id, app_attempt, event_type"
)


def _per_app_raw(storage: Storage) -> list[dict[str, object]]:
    ended = {(r["cluster"], r["app_id"]): r["ended_ms"] for r in storage.query(_ENDED_RAW)}
    rows = storage.query(_PER_APP_RAW)
    for row in rows:
        row["ended_ms"] = ended.get((row["cluster"], row["app_id"]), 0)
    return rows


def test_rollups_equal_the_deduplicated_raw_aggregates(storage: Storage) -> None:
    storage.ensure_schema()
    _generate(storage, range(0, 400), STAGES)  # stored before the rollups existed: the backfill must take these
    dropped = ("stage_rollup_mv", "app_rollup_start_mv", "app_rollup_end_mv", "stage_rollup", "app_rollup")
    dropped += ("run_rollup_stage_mv", "run_rollup_start_mv", "run_rollup_end_mv", "run_rollup")
    for name in dropped:
        storage.command(f"DROP TABLE {name}")
    storage.ensure_schema()  # creates the rollups again and backfills them
    _generate(storage, range(400, APPS), STAGES)  # filled by the materialized views at insert time
    _generate(storage, range(380, 420), STAGES)  # redelivered copies, half before the backfill, half after
    raw = _per_app_raw(storage)
    assert len(raw) == APPS
    assert sum(int(r["stages"]) for r in raw) == APPS * STAGES
    assert sum(1 for r in raw if r["ended_ms"]) == APPS - APPS // 10
    assert storage.query(_PER_APP_ROLLUP) == raw
    runs = storage.query(_PER_RUN_RAW)
    assert len(runs) == APPS * 2 + (APPS - APPS // 10)  # app_start and stage rows of each run, app_end of 9 in 10
    assert storage.query(_PER_RUN_INDEX) == runs
    # the copies are in the rollup tables until merged: the dedup views hide them, and a merge removes them
    stored = int(storage.query("SELECT count() AS n FROM stage_rollup")[0]["n"])
    assert stored == (APPS + 40) * STAGES
    storage.command("OPTIMIZE TABLE stage_rollup FINAL")
    storage.command("OPTIMIZE TABLE app_rollup FINAL")
    storage.command("OPTIMIZE TABLE run_rollup FINAL")
    assert int(storage.query("SELECT count() AS n FROM stage_rollup")[0]["n"]) == APPS * STAGES
    assert storage.query(_PER_APP_ROLLUP) == raw
    assert storage.query(_PER_RUN_INDEX) == runs
    assert int(storage.query("SELECT count() AS n FROM run_rollup")[0]["n"]) == sum(int(r["n"]) for r in runs)
    _generate(storage, range(0, 50), STAGES)  # unmerged copies again, for the panels
    _assert_panels_read_rollups_and_equal_raw(storage)


def _fleet_panels(database: str) -> list[tuple[str, str]]:
    """(board:title, SQL) of every overview and cluster panel."""
    cfg = GrafanaConfig(database=database, clickhouse_version=(18, 16, 1))
    return [
        (f"{b['uid']}:{title}", sql)
        for b in (overview(cfg), cluster(cfg))
        for title, sql in panel_queries(b)
        if not title.startswith("variable ")
    ]


# the findings panels read the stored findings (schemas/findings_table.py), which the alerter writes
_FINDINGS_PANELS = {
    "sparktap-overview:Critical findings",
    "sparktap-overview:Warning findings",
    "sparktap-overview:Info findings",
    "sparktap-overview:Open findings",
    "sparktap-overview:Findings over time",
    "sparktap-cluster:Findings",
    "sparktap-cluster:Findings by rule",
    "sparktap-cluster:Findings over time",
}
_TASK_END_PANELS: set[str] = set()
"""none: the pipeline-health panels read the health rollup (tests/integration/test_health_rollup.py)"""
_ROLLUP_PANELS = {
    "sparktap-overview:Applications alive",
    "sparktap-overview:Applications",
    "sparktap-cluster:Applications started",
    "sparktap-cluster:Task time by application",
    "sparktap-cluster:Shuffle written by application",
    "sparktap-cluster:Failed and killed tasks",
    "sparktap-cluster:Top applications by task time",
}


_EVENT_TABLES = tuple(schema_for((18, 16, 1), "db").tables)


def test_fleet_panels_never_read_task_end() -> None:
    panels = dict(_fleet_panels("db"))
    assert _ROLLUP_PANELS | _TASK_END_PANELS | _FINDINGS_PANELS <= set(panels)
    for name, sql in panels.items():
        if name not in _TASK_END_PANELS:
            assert "`task_end" not in sql, name  # neither task_end nor task_end_dedup
        if name in _ROLLUP_PANELS:
            assert "rollup_dedup`" in sql, name
            assert not any(f"`{t}_dedup`" in sql for t in ("stage_completed", "app_start", "app_end")), name
    for name in _FINDINGS_PANELS:  # the stored findings only: no detection query, no event table
        assert "`findings_dedup`" in panels[name], name
        assert not any(f"`{t}" in panels[name] for t in (*_EVENT_TABLES, "stage_rollup", "app_rollup")), name


def _raw(sql: str, database: str) -> str:
    """The same panel over the raw tables' dedup views."""
    apps = f"`{database}`.`app_rollup_dedup`"
    for kind in ("app_start", "app_end"):
        sql = sql.replace(f"(SELECT * FROM {apps} WHERE event_type = '{kind}')", f"`{database}`.`{kind}_dedup`")
    return sql.replace("`stage_rollup_dedup`", "`stage_completed_dedup`")


def _assert_panels_read_rollups_and_equal_raw(storage: Storage) -> None:
    variables = {"cluster": ["c0", "c1", "c2"]}
    checked = 0
    for name, sql in _fleet_panels(storage.database):
        if name not in _ROLLUP_PANELS:
            continue
        rollup = expand(interpolate(sql, variables), DAY_MS, DAY_MS + 86_400_000, interval_ms=600_000)
        rollup = rollup.replace("now()", f"toDateTime({DAY_MS // 1000 + 86_400})")  # running apps' duration
        raw = _raw(rollup, storage.database)
        assert "rollup" not in raw, name
        got = sorted(map(repr, storage.query(rollup)))
        assert got, name
        assert got == sorted(map(repr, storage.query(raw))), name
        checked += 1
    assert checked == len(_ROLLUP_PANELS)


def test_rollups_on_the_cluster_equal_the_deduplicated_raw_aggregates(
    clickhouse_cluster: ClickHouseCluster, cluster_database: str
) -> None:
    """Sharded and replicated: the views on every shard's local tables fill its rollup; read through Distributed."""
    with open_storage(parse_storage_url(clickhouse_cluster.url(cluster_database)), send_receive_timeout=120) as storage:
        storage.ensure_schema()
        _generate(storage, range(0, 100), 4)
        _generate(storage, range(90, 110), 4)  # redelivered copies of 10 applications, and 10 new ones
        # an insert lands on one replica of a shard; a read may go to the other: let replication catch up first
        tables = ("app_start", "app_end", "stage_completed", "stage_rollup", "app_rollup", "run_rollup")
        tables += HEALTH_TABLES
        for node in clickhouse_cluster.all_nodes():
            for table in tables:
                on_node(node, cluster_database, f"SYSTEM SYNC REPLICA {table}_local")
        raw = _per_app_raw(storage)
        assert len(raw) == 110
        assert sum(int(r["stages"]) for r in raw) == 110 * 4
        assert storage.query(_PER_APP_ROLLUP) == raw
        assert storage.query(_PER_RUN_INDEX) == storage.query(_PER_RUN_RAW)
        # the pipeline-health panels over the Distributed health rollup: the raw _dedup answers (redelivered copies)
        answers = health.assert_panels_equal_raw(storage, DAY_MS, health.RANGES[:2])
        (gaps,) = answers["sequence_gaps", "c0,c1,c2", 0]
        # app_start (1), 4 stages (10 … 16) and app_end (100000, 9 applications in 10): 99 end at 100000, 11 at 16
        assert gaps == {"events_missing": 99 * (100000 - 6) + 11 * (16 - 5), "applications_affected": 110}


AGES = (1, 6, 8, 29, 31, 89, 91, 399, 401)
"""days old: on either side of every tier's limit"""


def test_tiered_retention_keeps_each_tier_its_days(storage: Storage) -> None:
    storage.ensure_schema()
    now_s = int(time.time())
    ages = ", ".join(str(a) for a in AGES)
    at = f"toInt64(({now_s} - age * 86400 + 3600) * 1000)"  # an hour younger than `age` days
    for table in ("task_end", "stage_completed", "job_start", "app_start"):  # each through the health rollup too
        storage.command(
            f"INSERT INTO {table} (event_type, cluster, app_id, app_attempt, app_name, seq, emitted_at_ms, "
            f"event_time_ms) SELECT '{table}', 'c', concat('app-', toString(age)), '1', 'job', age, {at}, {at} "
            f"FROM (SELECT arrayJoin([{ages}]) AS age)"
        )
    storage.command(  # stored findings (the alerter's), detected `age` days ago
        "INSERT INTO findings (cluster, app_id, app_attempt, rule, finding_key, detected_at_ms, evaluated_at_ms) "
        f"SELECT 'c', concat('app-', toString(age)), '1', 'data_skew', toString(age), {at}, 1 "
        f"FROM (SELECT arrayJoin([{ages}]) AS age)"
    )
    ch = ClickHouseSettings()  # the defaults `sparktap retention apply` runs with (collector/cli.py)
    tiers = Tiers.of(ch)
    assert tiers == Tiers() == Tiers(events=30, tasks=7, stages=90, apps=400, findings=400)
    deleted = apply_retention(storage, storage.schema(), tiers, now_s=now_s, timeout_s=120)
    expected = {"task_end": 7, "stage_completed": 30, "job_start": 30, "app_start": 30, "stage_rollup": 90}
    expected["app_rollup"], expected["run_rollup"] = 400, 90
    for table, days in expected.items():
        copies = 2 if table == "run_rollup" else 1  # run_rollup: the stage_completed and the app_start rows
        kept = [int(r["seq"]) for r in storage.query(f"SELECT seq FROM {table} ORDER BY seq")]
        assert kept == [a for a in AGES if a < days for _ in range(copies)], table
        if storage.version() < (20, 5):  # no TTL: everything older was there and is deleted by the mutation
            assert deleted[table] == copies * len([a for a in AGES if a >= days]), table
    for table in HEALTH_TABLES:  # the tier of the events summarised: task_end's rows at 7 days, the others at 30
        kept = storage.query(f"SELECT event_table, count() AS n FROM {table} GROUP BY event_table ORDER BY event_table")
        assert kept == [
            {"event_table": t, "n": len([a for a in AGES if a < (7 if t == "task_end" else 30)])}
            for t in ("app_start", "job_start", "stage_completed", "task_end")
        ], table
    kept = [int(r["k"]) for r in storage.query("SELECT toUInt32(finding_key) AS k FROM findings ORDER BY k")]
    assert kept == [a for a in AGES if a < 400]
    if storage.version() < (20, 5):
        assert deleted["findings"] == len([a for a in AGES if a >= 400])
    assert apply_retention(storage, storage.schema(), tiers, now_s=now_s)["task_end"] == 0  # nothing left to do
    if storage.version() >= (20, 5):  # TTL: a changed tier moves every rollup's TTL, run_rollup's too
        apply_retention(storage, storage.schema(), Tiers(stages=60, apps=300, findings=200), now_s=now_s, timeout_s=120)
        engines = {
            str(r["name"]): str(r["engine_full"])
            for r in storage.query(f"SELECT name, engine_full FROM system.tables WHERE database = '{storage.database}'")
        }
        for table, days in (("stage_rollup", 60), ("run_rollup", 60), ("app_rollup", 300), ("findings", 200)):
            assert f"toIntervalDay({days})" in engines[table], table


def test_a_team_database_gets_its_rollups_on_18_16(server_storage: Storage) -> None:
    """18.16 (no row policies): a team's database is filled by materialized views, and its rollups get the rows
    copied when the team is set up and the rows inserted after (straight from the event tables: no cascade there)."""
    if server_storage.version()[:2] >= (20, 4):
        pytest.skip("this server has row policies: the team databases are for servers without them")
    schema = server_storage.ensure_schema()
    _generate(server_storage, range(0, 30), 3)  # before the team's views: copied once
    team = Reader("team_a", SecretStr("unused"), ("c1",))
    ensure_team_databases(server_storage, schema, [team])
    _generate(server_storage, range(30, 60), 3)  # after: through the views
    server_storage.command(  # a stored finding of each cluster (the alerter's): the team's only
        "INSERT INTO findings (cluster, app_id, app_attempt, rule, finding_key, detected_at_ms, evaluated_at_ms) "
        f"SELECT concat('c', toString(number)), 'app-1', '1', 'data_skew', 'k', {DAY_MS}, 1 FROM numbers(3)"
    )
    database = f"{server_storage.database}_team_a"
    try:
        findings = server_storage.query(f"SELECT cluster, event_time FROM `{database}`.findings_dedup")
        assert [(r["cluster"], int(r["event_time"].timestamp())) for r in findings] == [("c1", DAY_MS // 1000)]
        stages = server_storage.query(
            f"SELECT app_id, count() AS n FROM `{database}`.stage_rollup_dedup GROUP BY app_id ORDER BY app_id"
        )
        assert stages == [{"app_id": f"app-{a}", "n": 3} for a in sorted(range(1, 60, 3), key=lambda a: f"app-{a}")]
        apps = server_storage.query(
            f"SELECT event_type, count() AS n FROM `{database}`.app_rollup_dedup GROUP BY "
            "event_type ORDER BY event_type"
        )
        assert apps == [{"event_type": "app_end", "n": 18}, {"event_type": "app_start", "n": 20}]
        stored = server_storage.query(  # the team's health rollup: its own clusters' events, copied and inserted
            f"SELECT event_table, count() AS n FROM `{database}`.health_rollup_edges GROUP BY event_table "
            "ORDER BY event_table"
        )
        assert stored == [
            {"event_table": "app_end", "n": 18},
            {"event_table": "app_start", "n": 20},
            {"event_table": "stage_completed", "n": 60},
        ]
    finally:
        server_storage.command(f"DROP DATABASE IF EXISTS `{database}`")
