"""The per-table rollup (``table_rollup``, schemas/rollups.py; issue 42) on chDB and clickhouse-server 18.16: filled
from ``table_access`` events stored through the collector's row path, backfilled when created on a store with events,
equal per table and day to the deduplicated events under redelivery, and kept with the application tier."""

# ruff: noqa: S608 - test SQL from constants

from __future__ import annotations

import time

import pytest

from sparktap.schemas.rollups import TABLE_ROLLUP, table_daily
from sparktap.store import Storage
from sparktap.store.retention import Tiers, apply_retention
from tests.support import table_samples as tables
from tests.support.detection import load

pytestmark = pytest.mark.integration

MiB = tables.MiB


def _daily(storage: Storage, source: str) -> list[dict[str, object]]:
    sql = table_daily(source)
    return storage.query(f"SELECT * FROM ({sql}) ORDER BY cluster, catalog, table_key, format, day")


def test_the_rollup_equals_the_events_per_table_and_day(storage: Storage) -> None:
    storage.ensure_schema()
    apps = tables.growth_scenario()
    load(storage, apps[:25])  # stored before the rollup existed: the backfill must take these
    for name in ("table_rollup_mv", TABLE_ROLLUP):
        storage.command(f"DROP TABLE {name}")
    storage.ensure_schema()  # creates the rollup again and backfills it
    load(storage, apps[25:])  # filled by the materialized view at insert time
    load(storage, apps[15:35])  # redelivered copies, before and after the backfill
    raw = _daily(storage, "table_access_dedup")
    assert _daily(storage, "table_rollup_dedup") == raw
    by_table: dict[str, list[dict[str, object]]] = {}
    for row in raw:
        by_table.setdefault(str(row["table_key"]), []).append(row)
    assert sorted(by_table) == ["lake.events", "sales.archive", "sales.daily", "sales.orders", "sales.refunds"]
    orders = by_table["sales.orders"]
    assert len(orders) == 20 and {(r["catalog"], r["format"]) for r in orders} == {("spark_catalog", "delta")}
    assert {(r["writes"], r["files_written"], r["bytes_written"], r["rows_written"], r["reads"]) for r in orders} == {
        (1, 1_000, 1_000 * MiB, 1_000 * 1024, 0)
    }
    assert {r["avg_file_bytes"] for r in orders} == {float(MiB)}
    events = by_table["lake.events"]
    # run i reads the table twice, each scan (i + 1) × 800 files of 2 MiB
    assert [(r["writes"], r["files_written"], r["reads"], r["bytes_read"]) for r in events] == [
        (1, 800, 2, 2 * (i + 1) * 800 * 2 * MiB) for i in range(20)
    ]
    refunds = by_table["sales.refunds"]
    assert [(r["writes"], r["files_written"], r["compactions"]) for r in refunds] == [
        (1, 12_000, 0),
        (1, 10, 0),
        (1, 94, 1),
    ]
    # the copies are in the table until merged: the dedup view hides them, a merge removes them
    stored = int(storage.query(f"SELECT count() AS n FROM {TABLE_ROLLUP}")[0]["n"])
    events_stored = int(storage.query("SELECT count() AS n FROM table_access_dedup")[0]["n"])
    assert events_stored == 20 + 20 * 3 + 20 + 3 + 1
    assert stored > events_stored
    storage.command(f"OPTIMIZE TABLE {TABLE_ROLLUP} FINAL")
    assert int(storage.query(f"SELECT count() AS n FROM {TABLE_ROLLUP}")[0]["n"]) == events_stored
    assert _daily(storage, TABLE_ROLLUP) == raw


AGES = (1, 29, 31, 399, 401)
"""days old: on either side of the events' and the application tier's limits"""


def test_the_rollup_is_kept_with_the_application_tier(storage: Storage) -> None:
    storage.ensure_schema()
    now_s = int(time.time())
    ages = ", ".join(str(a) for a in AGES)
    at = f"toInt64(({now_s} - age * 86400 + 3600) * 1000)"  # an hour younger than `age` days
    storage.command(
        "INSERT INTO table_access (event_type, cluster, app_id, app_attempt, app_name, seq, emitted_at_ms, "
        "event_time_ms, execution_id, role, operator, `table`, format, files, bytes) "
        f"SELECT 'table_access', 'c', concat('app-', toString(age)), '1', 'job', age, {at}, {at}, 1, 'write', "
        f"'Execute InsertIntoHadoopFsRelationCommand', 'sales.orders', 'delta', 10, 100 "
        f"FROM (SELECT arrayJoin([{ages}]) AS age)"
    )
    tiers = Tiers()
    assert tiers.days(TABLE_ROLLUP) == tiers.apps == 400
    apply_retention(storage, storage.schema(), tiers, now_s=now_s, timeout_s=120)
    kept = [int(r["seq"]) for r in storage.query(f"SELECT seq FROM {TABLE_ROLLUP} ORDER BY seq")]
    assert kept == [1, 29, 31, 399]
    assert [int(r["seq"]) for r in storage.query("SELECT seq FROM table_access ORDER BY seq")] == [1, 29]
    if storage.version() >= (20, 5):  # TTL: the rollup's follows the application tier
        apply_retention(storage, storage.schema(), Tiers(apps=300), now_s=now_s, timeout_s=120)
        (engine,) = storage.query(
            f"SELECT engine_full FROM system.tables WHERE database = '{storage.database}' AND name = '{TABLE_ROLLUP}'"
        )
        assert "toIntervalDay(300)" in str(engine["engine_full"])
