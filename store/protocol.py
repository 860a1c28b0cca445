"""``Storage``: what the rest of sparktap may use of a store (the collector, detection, the report, the CLIs type
against this protocol, never against an engine). ``StorageBase`` (``base.py``) implements it for both engines,
``ServerStorage`` (clickhouse-driver) and ``ChdbStorage`` (embedded)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sparktap.schemas.ddl import Schema, TableSpec
from sparktap.store.target import StorageTarget

if TYPE_CHECKING:
    from sparktap.store.stream import InsertStream

Row = Mapping[str, Any]


@runtime_checkable
class Storage(Protocol):
    """A ClickHouse database to write events to and read them back from.

    Table names passed to ``insert``/``insert_columns`` are bare (``"task_end"``): the storage's database is
    implied. ``query``/``command`` take SQL as is. Errors are ``StorageUnavailableError`` (retry later) or
    ``StorageError`` (don't)."""

    target: StorageTarget
    """What it was opened from; ``target.capabilities`` says what the engine can do (decide by those, never by the
    engine's name)."""
    database: str

    @property
    def redacted_url(self) -> str:
        """The storage URL without its password (for logs and errors)."""
        ...

    def command(self, sql: str) -> None:
        """Run a statement that returns nothing (DDL, OPTIMIZE, …)."""
        ...

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows as dicts: ints, str, lists, dicts (Map), None (NULL), DateTime as aware UTC datetimes."""
        ...

    def insert_columns(self, table: str, columns: Mapping[str, Sequence[Any]]) -> int:
        """Insert column-oriented data (equal lengths) into ``table``; returns the row count."""
        ...

    def open_stream(self, table: str, columns: Mapping[str, Sequence[Any]]) -> InsertStream | None:
        """An INSERT kept open over several batches (a server: ``stream.py``), ``columns`` sent as its first block;
        None when this storage or these columns cannot stream (then nothing was sent)."""
        ...

    def insert(self, table: str, rows: Sequence[Row]) -> int:
        """Insert row dicts (every row has the same keys); returns the row count."""
        ...

    def qualified(self, table: str) -> str:
        """``table`` quoted and qualified with the storage's database."""
        ...

    def version(self) -> tuple[int, ...]:
        """The ClickHouse version, e.g. ``(26, 9, 2, 1)`` or ``(18, 16, 1)``."""
        ...

    def ping(self) -> bool:
        """Whether the server answers now (a retryable failure is False; a permanent one raises)."""
        ...

    def schema(self, retention_days: int = 30) -> Schema:
        """The schema rendered for this server's version (what ``ensure_schema`` creates)."""
        ...

    def table_spec(self, table: str) -> TableSpec | None: ...

    def ensure_schema(self, retention_days: int = 30) -> Schema:
        """Create or migrate the schema (idempotent); returns it."""
        ...

    def applied_versions(self) -> list[int]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Storage: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
