"""Say when blind, for native engines (issue 42): an application whose plans show a native engine's operators and whose
tasks report no shuffle gets one line naming the engine (its shuffle and spill are in its SQL metrics only, which the
shuffle rules do not read), at any input size, from live plan statistics (``sql_plan_stats``) or from the scan
operators of ``table_access`` (which imported event logs carry); the same jobs under a JVM plan, or a native plan
whose tasks do report their shuffle (Comet's shuffle writes Spark's task metrics), get none. Events stored in real
chDB and clickhouse-server 18.16."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktap.detection.blind import SHUFFLE_RULES, blind_spots
from sparktap.detection.sql import Scope, SqlContext
from sparktap.store import Storage, open_storage
from sparktap.store.target import parse_storage_url
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support.detection import load
from tests.support.plan_samples import plan_node
from tests.support.sample_app import App, uniform

pytestmark = pytest.mark.integration

NOW_MS = int(time.time() * 1000)
MiB = 2**20
GiB = 2**30
TASKS = 20
PHOTON_PLAN = ["ColumnarToRow", "PhotonResultStage", "PhotonAgg", "PhotonShuffleExchangeSink", "PhotonScan parquet "]
JVM_PLAN = ["HashAggregate", "Exchange", "HashAggregate", "Scan parquet spark_catalog.default.t"]
COMET_PLAN = ["CometColumnarToRow", "CometHashAggregate", "CometExchange", "CometHashAggregate", "CometScan parquet "]


def two_stages(app_id: str, plan: list[str] | None, shuffle_per_task: int, scan: str = "") -> App:
    """A job of two stages over 20 tasks × 4 MiB of input (80 MiB, under the generic line's 1 GiB floor), whose
    tasks report ``shuffle_per_task`` bytes of shuffle, with this plan (pre-order chain) or this scan operator."""
    app = App(app_id, "nightly-etl", start_ms=NOW_MS - 120_000).start()
    app.emit("executor_metrics", NOW_MS - 10_000, executor_id="1", stage_id=1)
    app.stage(1, NOW_MS - 60_000, tasks=TASKS, shuffle_read=False, bytes_per_task=4 * MiB,
              shuffle_write_bytes=uniform(shuffle_per_task, TASKS), sql_execution_id=1)  # fmt: skip
    app.stage(2, NOW_MS - 30_000, tasks=TASKS, bytes_per_task=shuffle_per_task,
              shuffle_write_bytes=uniform(0, TASKS), sql_execution_id=1)  # fmt: skip
    app.emit("sql_start", NOW_MS - 70_000, execution_id=1, root_execution_id=1)
    if plan is not None:
        # Photon's shuffle sink reports what its tasks do not: 3 GiB written, in its SQL metrics
        nodes = [plan_node(i, i - 1, op, **({"shuffle_write_bytes": 3 * GiB} if "Sink" in op else {}))
                 for i, op in enumerate(plan)]  # fmt: skip
        app.emit("sql_plan_stats", NOW_MS - 20_000, execution_id=1, whole_stage_codegen=True, codegen_max_fields=100,
                 codegen_huge_method_limit=65535, nodes=nodes)  # fmt: skip
    if scan:
        app.emit("table_access", NOW_MS - 20_000, execution_id=1, node_id=4, role="read", operator=scan,
                 format="parquet", location="s3a://lake/t", index=0, of=1)  # fmt: skip
    return app.end(NOW_MS)


def apps() -> list[App]:
    return [
        two_stages("app-photon-live", PHOTON_PLAN, 0),
        two_stages("app-photon-imported", None, 0, scan="PhotonScan parquet "),
        two_stages("app-jvm", JVM_PLAN, 0),
        two_stages("app-comet-shuffled", COMET_PLAN, 2 * MiB),
    ]


@pytest.fixture(params=["chdb", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "chdb":
        storage = open_storage(parse_storage_url(f"chdb://{tmp_path / 'chdb'}"))
        database = ""
    else:
        server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
        database = random_database()
        storage = open_storage(parse_storage_url(server.url(database)))
    try:
        storage.ensure_schema()
        load(storage, apps())
        yield storage
    finally:
        storage.close()
        if database:
            drop_database(request.getfixturevalue("clickhouse_server"), database)


def test_a_native_plan_without_shuffle_in_its_task_metrics_is_blind_and_names_the_engine(store: Storage) -> None:
    ctx = SqlContext(store.database, store.version(), Scope())
    spots = blind_spots(store.query, ctx, NOW_MS - 3_600_000, NOW_MS + 60_000)
    # the imported application has no plan statistics either: that is its own line
    assert sorted((b.app_id, b.missing) for b in spots) == [
        ("app-photon-imported", "SQL plans"),
        ("app-photon-imported", "shuffle metrics"),
        ("app-photon-live", "shuffle metrics"),
    ]
    found = {b.app_id: b for b in spots if b.missing == "shuffle metrics"}
    live, imported = found["app-photon-live"], found["app-photon-imported"]
    assert live.rules == imported.rules == SHUFFLE_RULES
    assert live.why == (
        "its plans run on photon (4 native operators), whose shuffle and spill are in its SQL metrics only: 0 B of "
        "shuffle read and written over 40 tasks against 80.00 MiB of input, in jobs of several stages; its plans' SQL "
        "metrics report 3.00 GiB of shuffle written"
    )
    assert imported.why == (
        "its plans run on photon (1 native operators), whose shuffle and spill are in its SQL metrics only: 0 B of "
        "shuffle read and written over 40 tasks against 80.00 MiB of input, in jobs of several stages"
    )
    assert live.line().endswith(", ".join(SHUFFLE_RULES) + " cannot fire here")
