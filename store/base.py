"""What both engines share (``StorageBase``, implementing the ``Storage`` protocol of ``protocol.py``): the engine
primitives they implement, and schema creation/migration on top of them."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sparktap.schemas.ddl import (
    DDL_VERSION,
    MIGRATIONS_TABLE,
    ColumnSpec,
    DerivedColumn,
    Schema,
    TableSpec,
    quote_ident,
    quote_literal,
)
from sparktap.schemas.health_rollups import HEALTH_TABLES
from sparktap.schemas.schema import schema_for
from sparktap.store.errors import StorageError, StorageUnavailableError
from sparktap.store.findings import ensure_findings_table
from sparktap.store.rollups import ensure_rollups
from sparktap.store.target import StorageTarget

if TYPE_CHECKING:
    from sparktap.store.stream import InsertStream

log = logging.getLogger(__name__)

Row = Mapping[str, Any]


class StorageBase(ABC):
    """A ClickHouse database to write events to and read them back from (the ``Storage`` protocol's implementation).

    Table names passed to ``insert``/``insert_columns`` are bare (``"task_end"``): the storage's database is
    implied. ``query``/``command`` take SQL as is; once the database exists it is the current one, so SQL may
    name tables unqualified. Errors are ``StorageUnavailableError`` (retry later) or ``StorageError`` (don't).
    """

    kind: str = ""

    def __init__(self, target: StorageTarget) -> None:
        self.target = target
        self.database = target.database
        self._version: tuple[int, ...] | None = None
        self._schema: Schema | None = None
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------- engine primitives

    @abstractmethod
    def _server_version(self) -> tuple[int, ...]: ...

    @abstractmethod
    def command(self, sql: str) -> None:
        """Run a statement that returns nothing (DDL, OPTIMIZE, …)."""

    @abstractmethod
    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows as dicts: ints, str, lists, dicts (Map), None (NULL), DateTime as aware UTC datetimes."""

    @abstractmethod
    def insert_columns(self, table: str, columns: Mapping[str, Sequence[Any]]) -> int:
        """Insert column-oriented data (``{"seq": [1, 2], …}``, equal lengths) into ``table``; returns the row
        count. The fastest path: the collector's columnar flattening feeds it directly."""

    @abstractmethod
    def close(self) -> None: ...

    # ----------------------------------------------------------------------------------------- shared API

    @property
    def redacted_url(self) -> str:
        return self.target.redacted

    def qualified(self, table: str) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(table)}"

    def version(self) -> tuple[int, ...]:
        """The ClickHouse version, e.g. ``(26, 9, 2, 1)`` or ``(18, 16, 1)``."""
        if self._version is None:
            self._version = self._server_version()
        return self._version

    def open_stream(self, table: str, columns: Mapping[str, Sequence[Any]]) -> InsertStream | None:
        """An INSERT kept open over several batches, ``columns`` sent as its first block (``stream.py``); None
        when the storage cannot stream (chDB: every insert is a call of its own), and then nothing was sent."""
        return None

    def insert(self, table: str, rows: Sequence[Row]) -> int:
        """Insert row dicts (every row has the same keys, e.g. from ``schemas.rows``); returns the row count."""
        if not rows:
            return 0
        names = list(rows[0])
        try:
            columns = {name: [row[name] for row in rows] for name in names}
        except KeyError as exc:
            raise StorageError(
                f'cannot insert into table="{table}" url="{self.redacted_url}": a row lacks column {exc.args[0]!r}; '
                "every row of one insert must have the same keys"
            ) from exc
        return self.insert_columns(table, columns)

    def ping(self) -> bool:
        """Whether the server answers now (a retryable failure is False; a permanent one raises)."""
        try:
            self.query("SELECT 1 AS ok")
        except StorageUnavailableError:
            return False
        return True

    def schema(self, retention_days: int = 30) -> Schema:
        """The schema rendered for this server's version (what ``ensure_schema`` creates)."""
        if self._schema is not None and self._schema.retention_days == retention_days:
            return self._schema
        return schema_for(self.version(), self.database, retention_days, self.target.cluster)

    def table_spec(self, table: str) -> TableSpec | None:
        return self.schema().tables.get(table)

    def ensure_schema(self, retention_days: int = 30) -> Schema:
        """Create the database, tables and views (idempotent), add columns the tables lack, apply the retention,
        create the rollups (``schemas/rollups.py``) and the findings table (``schemas/findings_table.py``) and record
        ``DDL_VERSION`` in ``schema_migrations``. Returns the schema now in place."""
        schema = schema_for(self.version(), self.database, retention_days, self.target.cluster)
        with self._lock:
            if not self._in_place(schema):
                statements = schema.statements()
                self._create_database(statements[0])
                for statement in statements[1:]:
                    self.command(statement)
            self._migrate(schema)
            ensure_rollups(self, schema)
            ensure_findings_table(self, schema)
            self._record_version()
            self._schema = schema
            self._schema_changed()
        return schema

    # ----------------------------------------------------------------------------------------- internals

    def _create_database(self, statement: str) -> None:
        self.command(statement)

    def _in_place(self, schema: Schema) -> bool:
        """Whether the CREATE statements can be skipped: when this server has every table and view. They are all
        ``IF NOT EXISTS``, so on a store in place they do nothing but cost a round trip each (~45: the collector's
        start on an existing store); on a cluster, an ON CLUSTER statement also waits for every server, and a restart
        must not stall on a stopped replica. Columns are checked by ``_migrate`` either way."""
        if schema.cluster:
            from sparktap.store.cluster import schema_in_place

            return schema_in_place(self, schema)
        try:
            rows = self.query(
                f"SELECT name FROM system.tables WHERE database = {quote_literal(self.database)}"  # noqa: S608
            )
        except StorageError:
            return False
        return set(schema.object_names()) <= {str(r["name"]) for r in rows}

    def _schema_changed(self) -> None:
        """Hook: forget cached table metadata (engines that cache it override this)."""
        log.debug("schema version %d in place on %s", DDL_VERSION, self.redacted_url)

    def _migrate(self, schema: Schema) -> None:
        if schema.cluster:
            from sparktap.store.cluster import migrate_cluster

            migrate_cluster(self, schema)
            return
        db = self.database.replace("\\", "\\\\").replace("'", "\\'")
        existing: dict[str, set[str]] = {}
        for row in self.query(f"SELECT table, name FROM system.columns WHERE database = '{db}'"):  # noqa: S608
            existing.setdefault(str(row["table"]), set()).add(str(row["name"]))
        for spec in schema.tables.values():
            have = existing.get(spec.name, set())
            every: tuple[ColumnSpec | DerivedColumn, ...] = (*spec.columns, *spec.derived)
            missing = [c for c in every if c.name not in have]
            if not missing:
                continue
            for col in missing:
                log.info("adding column %s.%s", spec.name, col.name)
                self.command(f"ALTER TABLE {schema.qualified(spec.name)} ADD COLUMN {schema.column_ddl(col)}")
            # a view's column list is fixed when it is created: recreate it to show the new columns
            self.command(f"DROP TABLE IF EXISTS {schema.qualified(spec.dedup_view)}")
            self.command(schema.create_view(spec))
        if schema.features.ttl:
            self._apply_retention(schema)

    def _apply_retention(self, schema: Schema) -> None:
        db = self.database.replace("\\", "\\\\").replace("'", "\\'")
        want = f"toIntervalDay({schema.retention_days})"
        rows = self.query(f"SELECT name, engine_full FROM system.tables WHERE database = '{db}'")  # noqa: S608
        for row in rows:
            name = str(row["name"])  # an event table, or the health rollup (the events tier: health_rollups.py)
            if (name not in schema.tables and name not in HEALTH_TABLES) or want in str(row["engine_full"]):
                continue
            log.info("changing retention of %s to %d days", name, schema.retention_days)
            self.command(
                f"ALTER TABLE {schema.qualified(name)} MODIFY TTL "
                f"toDateTime(`event_time`) + INTERVAL {schema.retention_days} DAY"
            )

    def _record_version(self) -> None:
        table = self.qualified(MIGRATIONS_TABLE)
        rows = self.query(f"SELECT count() AS n FROM {table} WHERE version = {DDL_VERSION}")  # noqa: S608
        if rows and int(rows[0]["n"]) > 0:
            return
        self.insert_columns(MIGRATIONS_TABLE, {"version": [DDL_VERSION]})

    def applied_versions(self) -> list[int]:
        """DDL versions recorded in ``schema_migrations``, ascending."""
        table = self.qualified(MIGRATIONS_TABLE)
        rows = self.query(f"SELECT DISTINCT version FROM {table} ORDER BY version")  # noqa: S608
        return [int(r["version"]) for r in rows]

    def __enter__(self) -> StorageBase:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}(url="{self.redacted_url}", database="{self.database}")'
