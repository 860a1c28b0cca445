"""Where the collector stores events: a ClickHouse server (clickhouse-driver) or embedded chDB, named by a storage
URL parsed once into a ``StorageTarget`` (``target.py``).

    storage = open_storage(settings.clickhouse.target())
    schema = storage.ensure_schema(retention_days=30)     # idempotent; records schema_migrations
    storage.insert_columns("task_end", columns)           # or storage.insert("task_end", rows)
    storage.query("SELECT count() AS n FROM task_end_dedup")

Callers type against the ``Storage`` protocol (``protocol.py``); both engines implement it (``StorageBase``).
Failures are ``StorageUnavailableError`` (retry: connection, timeout, overload) or ``StorageError`` (don't).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sparktap.store.backends import open_storage
from sparktap.store.errors import StorageError, StorageUnavailableError
from sparktap.store.protocol import Storage
from sparktap.store.settings import ClickHouseSettings
from sparktap.store.target import StorageTarget, parse_storage_url

if TYPE_CHECKING:
    from sparktap.store.base import StorageBase
    from sparktap.store.embedded import ChdbStorage
    from sparktap.store.server import ServerStorage

_BACKENDS = {
    "StorageBase": "sparktap.store.base",
    "ChdbStorage": "sparktap.store.embedded",
    "ServerStorage": "sparktap.store.server",
}


def __getattr__(name: str) -> Any:
    """The backends load when first used: reading the settings (``target.py``) imports neither driver."""
    if name in _BACKENDS:
        return getattr(importlib.import_module(_BACKENDS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ChdbStorage",
    "ClickHouseSettings",
    "ServerStorage",
    "Storage",
    "StorageBase",
    "StorageError",
    "StorageTarget",
    "StorageUnavailableError",
    "open_storage",
    "parse_storage_url",
]
