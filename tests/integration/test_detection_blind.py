"""Say when blind (issue 39): an application whose stored events lack what a group of rules reads gets one line per
missing input, in the report and in ``sparktap findings --explain``, on events stored in real chDB
(``tests/support/blind_samples.py``); the controls get none."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktap.detection.blind import blind_spots
from sparktap.detection.sql import Scope, SqlContext
from sparktap.report.collect import collect
from sparktap.report.render import render
from sparktap.store import Storage, open_storage
from sparktap.store.target import parse_storage_url
from tests.support.blind_samples import blind_apps
from tests.support.detection import load

pytestmark = pytest.mark.integration

NOW_MS = int(time.time() * 1000)
SHUFFLE = (
    "blind to shuffle metrics: 800.00 KiB of shuffle read and written over 400 tasks against 7.81 GiB of input, in "
    "jobs of several stages (a native engine such as Photon keeps its shuffle out of Spark's task metrics); "
    "data_skew, skew_not_fixed, shuffle_blowup, remote_heavy_shuffle, shuffle_block_explosion, small_partitions, "
    "oversized_partition cannot fire here"
)
EXECUTORS = (
    "blind to executor metrics: 50 tasks ran but no executor reported its peak memory (an event log older than Spark "
    "3.0, or spark.eventLog.logStageExecutorMetrics off); memory_pressure, memory_overprovisioned, "
    "driver_memory_pressure cannot fire here"
)
PLANS = (
    "blind to SQL plans: 3 SQL executions ran but no plan statistics were stored (an imported event log carries "
    "none: a replay has no query plan to read estimates from); plan_misestimate, codegen_off cannot fire here"
)
SQL_ONLY = (
    "blind to per-task shuffle metrics: 7.81 GiB of its shuffle, in 2 stages, is in its operators' SQL metrics only, "
    "its tasks report none: shuffle_blowup and small_partitions read it there, the spread across tasks is not in "
    "them; data_skew, skew_not_fixed, remote_heavy_shuffle, shuffle_block_explosion, oversized_partition cannot fire "
    "here"
)
EXPLAINED = [
    f"nightly-etl (app-imported-sql, attempt 1) on prod-eu: {PLANS}",
    f"nightly-etl (app-old-log, attempt 1) on prod-eu: {EXECUTORS}",
    f"nightly-etl (app-photon, attempt 1) on prod-eu: {SHUFFLE}",
    f"nightly-etl (app-sql-only, attempt 1) on prod-eu: {SQL_ONLY}",
]


def stored(path: Path) -> Storage:
    storage = open_storage(parse_storage_url(f"chdb://{path}"))
    storage.ensure_schema()
    load(storage, blind_apps(NOW_MS))
    return storage


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    storage = stored(Path(tmp_path_factory.mktemp("blind")) / "chdb")
    try:
        yield storage
    finally:
        storage.close()


def test_each_missing_input_is_one_line_per_application_and_the_controls_none(store: Storage) -> None:
    storage = store
    ctx = SqlContext(storage.database, storage.version())
    spots = blind_spots(storage.query, ctx, NOW_MS - 3_600_000, NOW_MS + 60_000)
    assert [(b.app_id, b.missing, b.line()) for b in spots] == [
        ("app-imported-sql", "SQL plans", PLANS),
        ("app-old-log", "executor metrics", EXECUTORS),
        ("app-photon", "shuffle metrics", SHUFFLE),
        ("app-sql-only", "per-task shuffle metrics", SQL_ONLY),
    ]
    final = SqlContext(storage.database, storage.version(), Scope.of(apps=["app-photon"]), final_reads=True)
    assert [b.line() for b in blind_spots(storage.query, final, NOW_MS - 3_600_000, NOW_MS + 60_000)] == [SHUFFLE]


def test_the_report_says_it_once(store: Storage) -> None:
    storage = store
    photon = collect(storage.query, "app-photon", database=storage.database, version=storage.version())
    assert photon.blind == [SHUFFLE]
    assert render(photon).count("blind to shuffle metrics") == 1
    for control_id in ("app-shuffled", "app-sql-agrees"):
        control = collect(storage.query, control_id, database=storage.database, version=storage.version())
        assert control.blind == [] and "blind to" not in render(control), control_id
    sql_only = collect(storage.query, "app-sql-only", database=storage.database, version=storage.version())
    assert sql_only.blind == [SQL_ONLY]


def test_findings_explain_says_it(store: Storage) -> None:
    """Last in the module: the store is closed for the command (chDB: one process holds a directory at a time)."""
    store.close()
    run = subprocess.run(
        [sys.executable, "-m", "sparktap", "findings", "--since", "2h", "--min-severity", "critical", "--explain"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")},
            "SPARKTAP_CLICKHOUSE__URL": f"chdb://{store.target.path}",
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == EXPLAINED
