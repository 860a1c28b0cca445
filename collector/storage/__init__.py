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

from sparktap.collector.storage.errors import StorageError, StorageUnavailableError
from sparktap.collector.storage.protocol import Storage
from sparktap.collector.storage.target import ClickHouseSettings, StorageTarget, parse_storage_url

if TYPE_CHECKING:
    from sparktap.collector.storage.base import StorageBase
    from sparktap.collector.storage.embedded import ChdbStorage
    from sparktap.collector.storage.server import ServerStorage

_BACKENDS = {
    "StorageBase": "sparktap.collector.storage.base",
    "ChdbStorage": "sparktap.collector.storage.embedded",
    "ServerStorage": "sparktap.collector.storage.server",
}


def __getattr__(name: str) -> Any:
    """The backends load when first used: reading the settings (``target.py``) imports neither driver."""
    if name in _BACKENDS:
        return getattr(importlib.import_module(_BACKENDS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_storage(target: StorageTarget, **options: Any) -> Storage:
    """Open the storage a target names. ``options`` go to ServerStorage (``connect_timeout``,
    ``send_receive_timeout``, ``settings``); chDB takes none. Nothing is created until ``ensure_schema``."""
    from sparktap.collector.storage.embedded import ChdbStorage
    from sparktap.collector.storage.server import ServerStorage

    if target.kind == "chdb":
        if options:
            raise TypeError(f"chDB storage takes no options, got {sorted(options)}")
        return ChdbStorage(target)
    return ServerStorage(target, **options)


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
