"""The table rules (issue 42) on chDB and clickhouse-server 18.16, over ``table_access`` events stored through the
collector's row path: ``small_files`` names the table its SQL execution wrote and the table's trend;
``table_file_growth`` names a table that keeps getting small files, its growth, its top writer and the fix, and says
nothing of a table compacted, written once, or written in big files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktap.detection import Detector, Finding
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.support import table_samples as tables
from tests.support.detection import WINDOW, load

pytestmark = pytest.mark.integration

RULES = ("small_files", "table_file_growth")


def _findings(storage: Storage, staged: bool = True) -> list[Finding]:
    detector = Detector(
        storage.query,  # type: ignore[arg-type]
        database=storage.database,
        version=storage.version(),
        rules=RULES,
        staged=staged,
    )
    return detector.findings(*WINDOW)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    target = StorageTarget(kind="chdb", path=Path(tmp_path_factory.mktemp("tables")) / "chdb", database="tab")
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(storage, tables.growth_scenario())
        yield storage
    finally:
        storage.close()


def _growth(findings: list[Finding]) -> dict[str, Finding]:
    return {f.stage_name: f for f in findings if f.rule == "table_file_growth"}


def _assert_growth(findings: list[Finding]) -> None:
    growth = _growth(findings)
    assert set(growth) == {"sales.orders", "lake.events"}  # not refunds (compacted), archive (once), daily (big files)
    orders = growth["sales.orders"]
    assert (orders.severity, orders.app_id, orders.team, orders.subject) == (
        "warning",
        "app-nightly-19",
        "sales",
        "table",
    )
    assert orders.where == 'table "sales.orders"'
    ev = orders.evidence
    assert (ev["files"], ev["bytes_written"], ev["writes"], ev["days"], ev["files_per_day"]) == (
        20_000,
        20_000 * tables.MiB,
        20,
        20,
        1_000,
    )
    assert (ev["compactions"], ev["reads"], ev["top_writer_files"], ev["writers"], ev["suggested_files"]) == (
        0,
        0,
        20_000,
        1,
        157,
    )
    assert ev["time_lost_ms"] == (20_000 - 157) * 20
    assert orders.explanation == (
        "sales.orders (delta, s3a://lake/sales/orders) got 20000 files averaging 1.00 MiB in 20 writes over 20 days "
        "(1000 a day), no compaction in the last 30 days; top writer job=nightly-orders (20000 files); read 0 times"
    )
    assert orders.suggested_fix.startswith("OPTIMIZE sales.orders (or delta.autoOptimize.optimizeWrite); ")
    events = growth["lake.events"]
    assert (events.severity, events.app_id, events.team) == ("critical", "app-events-19", "lake")
    assert (events.evidence["files"], events.evidence["reads"]) == (16_000, 40)
    assert events.evidence["time_lost_ms"] == (16_000 - 250) * 20 * 41
    assert events.suggested_fix.startswith(
        "CALL <catalog>.system.rewrite_data_files(table => 'lake.events') on a schedule; "
    )
    # ranked by time lost: the table read 40 times first
    ranked = [f.stage_name for f in findings if f.rule == "table_file_growth"]
    assert ranked == ["lake.events", "sales.orders"]


def _assert_small_files(findings: list[Finding]) -> None:
    small = {(f.app_id, f.stage_id): f for f in findings if f.rule == "small_files"}
    orders = small[("app-nightly-19", 1)]
    assert orders.explanation == (
        "Wrote 1000 files averaging 1.00 MiB (1000.00 MiB in all) to sales.orders (delta, s3a://lake/sales/orders); "
        "1000 files a day over 20 of the last 30 days (20000 files)"
    )
    assert orders.suggested_fix.endswith("; compact what sales.orders already holds: OPTIMIZE sales.orders")
    assert (orders.evidence["table_files_per_day_30d"], orders.evidence["table_days_written_30d"]) == (
        20_000 / 30,
        20,
    )
    events = small[("app-events-19", 1)]
    assert "to lake.events (iceberg, s3a://lake/warehouse/lake/events); 800 files a day over 20" in events.explanation
    assert events.suggested_fix.endswith("rewrite_data_files(table => 'lake.events')")


def test_growth_and_small_files_name_the_table(store: Storage) -> None:
    for staged in (True, False):
        findings = _findings(store, staged)
        _assert_growth(findings)
        _assert_small_files(findings)


def test_a_stage_without_a_table_write_keeps_its_words(store: Storage) -> None:
    from tests.support import detection_samples as samples

    load(store, [samples.tiny_files("app-tiny-files-tables")])
    (tiny,) = [f for f in _findings(store) if f.app_id == "app-tiny-files-tables"]
    assert tiny.explanation == "Wrote 400 files averaging 512.00 KiB (200.00 MiB in all)"
    assert tiny.evidence["table_days_written_30d"] == 0


def test_redelivered_table_events_count_once(store: Storage) -> None:
    before = _growth(_findings(store))
    load(store, tables.nightly(tables.ORDERS, 20, 1_000, tables.MiB))  # the same events again
    after = _growth(_findings(store))
    assert {k: v.evidence for k, v in after.items()} == {k: v.evidence for k, v in before.items()}


def test_same_findings_on_clickhouse_server_18(server_storage: Storage) -> None:
    server_storage.ensure_schema()
    load(server_storage, tables.growth_scenario())
    for staged in (True, False):
        findings = _findings(server_storage, staged)
        _assert_growth(findings)
        _assert_small_files(findings)
