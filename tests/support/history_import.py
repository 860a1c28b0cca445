"""What the ``sparktap import`` modules test_history_import.py and test_history_import_one_log.py share: the module's
database on the session's ClickHouse server, the event tables they count, and the logs a checkpoint file holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database

TABLES = ("job_start", "job_end", "stage_submitted", "stage_completed", "task_end", "sql_start", "sql_end")


@dataclass
class Store:
    storage: ServerStorage
    url: str
    database: str

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return self.storage.query(sql)

    def count(self, table: str, app_id: str, where: str = "1") -> int:
        return int(self.rows(f"SELECT count() AS n FROM {table}_dedup WHERE app_id = '{app_id}' AND {where}")[0]["n"])


@contextmanager
def open_store(clickhouse_server: ClickHouseServer) -> Iterator[Store]:
    """A fresh database for a module's imports, dropped at the end."""
    database = random_database("sparktap_import")
    storage = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    try:
        yield Store(storage, clickhouse_server.url(database), database)
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


def checkpointed(path: Path) -> list[str]:
    """The logs a checkpoint file holds (replaced atomically: a reader sees a whole one); [] before it exists."""
    try:
        return sorted(json.loads(path.read_text())["logs"])
    except (OSError, ValueError):
        return []
