"""The pipeline-health rollup (schemas/health_rollups.py) on chDB and clickhouse-server 18.16: the overview's "Events
missing (sequence gaps)" and "Events stored by the collector" panels read only it, and answer exactly what their raw
queries over the 15 event tables' _dedup views answered (tests/support/health.py keeps them), on a generated day with
redelivered events, sequence gaps and a second application attempt, before and after merges, for a store that had
events before the rollup existed (backfill) and events inserted after (materialized views)."""

# ruff: noqa: S608 - test SQL from constants

from __future__ import annotations

import time

import pytest

from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import overview, panel_queries
from sparktap.detection.sql import Scope, SqlContext
from sparktap.schemas.health_rollups import HEALTH_ROLLUP, HEALTH_TABLES
from sparktap.store import Storage
from tests.support import health

pytestmark = pytest.mark.integration

DAY_MS = (int(time.time()) // 86_400 - 1) * 86_400_000
"""UTC midnight a day ago: inside every retention"""
TITLES = ("Events missing (sequence gaps)", "Events stored by the collector")


@pytest.mark.parametrize("version", [(18, 16, 1), (26, 9)])
def test_the_health_panels_read_only_the_health_rollup(version: tuple[int, ...]) -> None:
    panels = dict(panel_queries(overview(GrafanaConfig(database="db", clickhouse_version=version))))
    for title in TITLES:
        sql = panels[title]
        assert health.event_tables_named(sql) == [], title
        rollup_finals = sql
        for table in HEALTH_TABLES:
            rollup_finals = rollup_finals.replace(f"`{table}` FINAL", "")
        assert "FINAL" not in rollup_finals and "_dedup" not in sql, title  # FINAL: the rollup's own states only
        assert "`db`.`health_rollup" in sql, title
    # the gaps: the hour table (and the applications started, from the edge table); events stored: all three
    assert "`db`.`health_rollup_hours` FINAL" in panels[TITLES[0]] and "`db`.`health_rollup` " not in panels[TITLES[0]]
    assert all(f"`db`.`{t}`" in panels[TITLES[1]] for t in HEALTH_TABLES)
    ctx = SqlContext("db", version, Scope.grafana(False))
    assert health.event_tables_named(health.raw_sequence_gaps(ctx)) == list(health.HEALTH_SOURCES)  # the reference


def test_the_health_panels_equal_the_raw_dedup_queries(storage: Storage) -> None:
    storage.ensure_schema()
    storage.command("SYSTEM STOP MERGES task_end")  # its copies stay stored (the dedup views hide them)
    for table in HEALTH_TABLES:  # the rollup's too, until the OPTIMIZE below
        storage.command(f"SYSTEM STOP MERGES {table}")
    health.generate(storage, DAY_MS, range(0, 80))  # stored before the rollup existed: the backfill takes these
    health.drop_health(storage)
    storage.ensure_schema()  # creates the health rollup again and backfills it
    for table in HEALTH_TABLES:
        storage.command(f"SYSTEM STOP MERGES {table}")
    health.generate(storage, DAY_MS, range(60, 100))  # redelivered copies of 20 applications, through the views
    health.generate(storage, DAY_MS, range(100, 200))
    health.generate(storage, DAY_MS, range(150, 170))  # redelivered again
    copies = sum(len(health.seqs(a, "task_end")) * len(health.attempts(a)) for a in [*range(60, 80), *range(150, 170)])
    stored = int(storage.query("SELECT count() AS n FROM task_end")[0]["n"])
    distinct = int(storage.query("SELECT count() AS n FROM task_end_dedup")[0]["n"])
    assert stored - distinct == copies == 2170  # the copies are stored
    answers = health.assert_panels_equal_raw(storage, DAY_MS)
    # the whole day, every cluster: what the model of the generated day says (4 numbers missing per attempt of the
    # 133 applications with gaps, 14 of them with a second attempt numbered from 1 again: counted per attempt)
    (gaps,) = answers["sequence_gaps", "c0,c1,c2", 0]
    assert gaps == health.expected_gaps(range(200)) == {"events_missing": 588, "applications_affected": 133}
    per_table: dict[object, int] = {}
    for row in answers["events_stored", "c0,c1,c2", 0]:
        per_table[row["event_table"]] = per_table.get(row["event_table"], 0) + int(str(row["events"]))
    assert per_table == {
        t: sum(len(health.seqs(a, t)) * len(health.attempts(a)) for a in range(200))
        for t in health.TABLES
        if t in ("task_end", "stage_completed", "listener_health", "raw_events", "job_start")
    }
    # merged: the states of a key ORed into one row; the answers stay the same
    for table in HEALTH_TABLES:
        storage.command(f"SYSTEM START MERGES {table}")
        storage.command(f"OPTIMIZE TABLE {table} FINAL")
    health.assert_panels_equal_raw(storage, DAY_MS, health.RANGES[:2])
    rows = int(storage.query(f"SELECT count() AS n FROM {HEALTH_ROLLUP}")[0]["n"])
    events = sum(len(health.seqs(a, t)) * len(health.attempts(a)) for a in range(200) for t in health.TABLES)
    assert rows * 5 < events  # a row per application, table, minute and block of 64 (~13 events here)


def test_a_retention_change_moves_the_health_rollups_ttl(chdb_storage: Storage) -> None:
    """The health rollup keeps the events tier: its TTL follows ``retention_days`` like the event tables'."""
    chdb_storage.ensure_schema(retention_days=30)
    chdb_storage.ensure_schema(retention_days=9)
    engines = {
        str(r["name"]): str(r["engine_full"])
        for r in chdb_storage.query(
            f"SELECT name, engine_full FROM system.tables WHERE database = '{chdb_storage.database}' "
            "AND name IN ('task_end', 'health_rollup', 'health_rollup_edges')"
        )
    }
    assert len(engines) == 3
    assert all("toIntervalDay(9)" in engine for engine in engines.values()), engines
