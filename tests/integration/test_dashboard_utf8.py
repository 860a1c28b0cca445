"""Panels that cut text cut characters, not bytes (issue 41 item 12): a Spark Connect statement with a multi-byte
character across the 200th byte, and a stage name with one across the 40th, read through the Spark Connect
dashboard's "Operations" panel and the stage label, on chDB and on clickhouse-server 18.16. A byte cut made chDB's
read fail ("str is not valid UTF-8") and showed a broken character on the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktap.dashboards.connect_panels import operations_table
from sparktap.dashboards.panels import _stage_label
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.sql import SqlContext
from sparktap.schemas.ddl import quote_literal
from sparktap.schemas.examples import example_event
from sparktap.schemas.rows import RowBuilder
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database

pytestmark = pytest.mark.integration

T = example_event("operation").event_time_ms
STATEMENT = "a" * 199 + "é" + "ü" * 50  # 'é' is bytes 200 and 201: a byte cut at 200 splits it
STAGE_NAME = "s" * 39 + "€" + "tail"  # '€' is bytes 40 to 42
VARIABLES = {"cluster": ["prod-eu"], "user": ["alice"], "team": ["payments"]}


def _load(storage: Storage) -> None:
    storage.ensure_schema()
    builder = RowBuilder(storage.version())
    events = [
        example_event("app_start", seq=1),
        example_event("operation", seq=2, status="started", statement=STATEMENT, rows=None),
        example_event("operation", seq=3, status="finished", event_time_ms=T + 1_000),
    ]
    for table, rows in builder.group(e.model_dump(mode="json") for e in events).items():
        storage.insert(table, rows)


@pytest.fixture(params=["chdb", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "chdb":
        storage = open_storage(StorageTarget(kind="chdb", path=tmp_path / "chdb", database="utf8"))
        try:
            _load(storage)
            yield storage
        finally:
            storage.close()
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database("utf8")
    storage = open_storage(server.target(database))
    try:
        _load(storage)
        yield storage
    finally:
        storage.close()
        drop_database(server, database)


def test_the_operations_panel_cuts_the_statement_at_200_characters(store: Storage) -> None:
    panel = operations_table(SqlContext(store.database, store.version()))
    sql = expand(interpolate(panel["targets"][0]["rawSql"], VARIABLES), T - 3_600_000, T + 3_600_000)
    (row,) = store.query(sql)
    assert row["statement"] == STATEMENT[:200] == "a" * 199 + "é"
    assert (row["user"], row["state"]) == ("alice", "finished")


def test_the_stage_label_cuts_the_name_at_40_characters(store: Storage) -> None:
    sql = f"SELECT {_stage_label()} AS label FROM (SELECT 3 AS stage_id, 1 AS stage_attempt, {quote_literal(STAGE_NAME)} AS name)"  # noqa: S608, E501
    (row,) = store.query(sql)
    assert row["label"] == "3.1 " + "s" * 39 + "€"
