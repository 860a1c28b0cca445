"""The server insert path for Arrow columns: ClickHouse's Native block encoding built from the Arrow buffers the C
reader filled (``arrowpath.py``), sent over the native protocol without a Python object per value.

clickhouse-driver encodes a columnar insert value by value in Python, several times the rest of the collector's
cost per row (bench/collector_storage.py). Here each column becomes one ``bytes`` of its Native encoding: integers
are the Arrow data buffer as it is (little-endian, the width the server's column has), booleans one byte each,
strings a varint length then the bytes (``_flatjson.native_strings``, in C), ``Nullable(T)`` a null map then
``T``'s encoding.
``ArrowClient.send_data`` writes that block where the driver would have written its own, in the same INSERT
exchange (query, sample block, data block, empty block, end of stream), so errors, timeouts and the row count the
server confirms are handled by the same code as before.

A column of another type (a list from the Python path that is not Arrow, ``Enum``, ``DateTime``…) makes the whole
insert go through the driver's own encoding, as before. ``LowCardinality(T)`` is sent as ``T``: the server converts
a block of the plain type on insert (what it does for clients without LowCardinality support).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sparktap import native

_INTS = {
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Bool": "uint8",
}


_DIRECT_BYTES = 64 << 10
"""pieces from this size on are sent straight to the socket, not copied into the driver's buffer"""


def is_arrow(values: Any) -> bool:
    """Whether a column is Arrow (checked without importing pyarrow: readers of a server never load it)."""
    return type(values).__module__.startswith("pyarrow")


def as_list(values: Any) -> list[Any]:
    return values.to_pylist() if is_arrow(values) else list(values)


class NativeColumns(list[Any]):
    """Arrow columns to insert (``{name: pa.Array | pa.ChunkedArray}``, equal lengths), encoded once the server's
    sample block gives each column's type. An (empty) list only so that ``Client.execute`` treats it as insert
    data and hands it to ``send_data``."""

    def __init__(self, columns: Mapping[str, Any], rows: int) -> None:
        super().__init__()
        self.columns = dict(columns)
        self.rows = rows

    def encode(self, columns_with_types: Sequence[tuple[str, str]]) -> list[tuple[str, str, Pieces]] | None:
        """(name, declared type, its Native encoding in pieces) per column of the sample block, or None when a
        column cannot be encoded here (then the driver encodes the insert)."""
        out = []
        for name, ch_type in columns_with_types:
            values = self.columns.get(name)
            if values is None:
                return None
            encoded = encode_column(ch_type, values)
            if encoded is None:
                return None
            out.append((name, *encoded))
        return out

    def as_lists(self) -> list[list[Any]]:
        return [values.to_pylist() for values in self.columns.values()]


def left_to_defaults(columns: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``columns`` without the Arrow columns whose every value is the column's constant ``DEFAULT`` (``defaults``:
    column -> literal default, e.g. ``event_type`` of an event table, ``schema_version``): an insert that names
    only the other columns makes the server fill them with the same values, without sending, parsing and checking
    them. Every column is kept when all of them would go (an insert names at least one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept: dict[str, Any] = {}
    for name, values in columns.items():
        default = defaults.get(name)
        constant = False
        if default is not None and is_arrow(values) and len(values) and not values.null_count:
            # min and max, not an equality with a scalar: pa.scalar of a Python value imports pandas (0.25 s of
            # CPU, docs/benchmarks.md)
            if (
                pa.types.is_integer(values.type)
                and type(default) is int
                or (pa.types.is_string(values.type) and type(default) is str)
            ):
                bounds = pc.min_max(values).as_py()
                constant = bounds["min"] == default == bounds["max"]
        if not constant:
            kept[name] = values
    return kept if kept else dict(columns)


def _strip(ch_type: str, wrapper: str) -> tuple[str, bool]:
    if ch_type.startswith(wrapper + "(") and ch_type.endswith(")"):
        return ch_type[len(wrapper) + 1 : -1], True
    return ch_type, False


Pieces = list[bytes | memoryview]
"""a column's Native encoding in the order it is sent: the null map, then each chunk's values (an Arrow data buffer
as it is, without a copy, or the strings ``native_strings`` framed)"""


def encode_column(ch_type: str, values: Any) -> tuple[str, Pieces] | None:
    """(type to declare, Native encoding in pieces) of an Arrow column for a server column of type ``ch_type``, or
    None when the type or the values are not what this encoder handles."""
    import pyarrow as pa

    declared, _ = _strip(ch_type, "LowCardinality")
    inner, nullable = _strip(declared, "Nullable")
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    if not all(isinstance(c, pa.Array) for c in chunks):
        return None
    if not nullable and any(c.null_count for c in chunks):
        return None  # the driver refuses a None in a non-Nullable column with its usual error
    parts: Pieces = []
    if nullable:
        for chunk in chunks:
            parts.append(_buffer_bytes(chunk.is_null().cast(pa.uint8()), 1))
    if inner == "String":
        encoded = _strings(chunks)
    elif inner in _INTS:
        encoded = _ints(chunks, _INTS[inner])
    else:
        return None
    if encoded is None:
        return None
    return declared, [*parts, *encoded]


def _buffer_bytes(array: Any, width: int) -> memoryview:
    """The fixed-width data of an Arrow array (its slice), without a copy."""
    buf = array.buffers()[1]
    start = array.offset * width
    return memoryview(buf)[start : start + len(array) * width] if buf is not None else memoryview(b"")


def _ints(chunks: Sequence[Any], dtype: str) -> list[bytes | memoryview] | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    from sparktap.schemas.fields import typed_scalar

    target = getattr(pa, dtype)()
    out: list[bytes | memoryview] = []
    for chunk in chunks:
        if pa.types.is_boolean(chunk.type):
            chunk = chunk.cast(pa.uint8())
        if not pa.types.is_integer(chunk.type):
            return None
        if chunk.null_count:
            chunk = pc.fill_null(chunk, typed_scalar(0, chunk.type))
        if chunk.type != target:
            try:
                chunk = chunk.cast(target)  # checked: a value out of the column's range falls back to the driver
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        out.append(_buffer_bytes(chunk, target.bit_width // 8))
    return out


def _strings(chunks: Sequence[Any]) -> list[bytes | memoryview] | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    from sparktap.native._flatjson import native_strings
    from sparktap.schemas.fields import typed_scalar

    out: list[bytes | memoryview] = []
    for chunk in chunks:
        if pa.types.is_large_string(chunk.type):
            chunk = chunk.cast(pa.string())
        if not pa.types.is_string(chunk.type):
            return None
        if chunk.null_count:
            chunk = pc.fill_null(chunk, typed_scalar("", chunk.type))
        if not len(chunk):
            continue
        _, offsets, data = chunk.buffers()
        out.append(native_strings(offsets, data if data is not None else b"", chunk.offset, len(chunk)))
    return out


TESTED_DRIVER = ((0, 2, 9), (0, 2, 11))
"""The clickhouse-driver releases (first and last, inclusive) whose internals ``ArrowClient`` uses (its block and
protocol writers): constraints.txt pins the suite to the last one. Another release gets the driver's own encoding."""


@functools.cache
def driver_tested() -> bool:
    import clickhouse_driver

    release = tuple(int(part) for part in str(clickhouse_driver.__version__).split(".")[:3] if part.isdigit())
    return TESTED_DRIVER[0] <= release <= TESTED_DRIVER[1]


def native_blocks() -> bool:
    """Whether a server insert of Arrow columns is encoded here: the native switch on (``sparktap.native``: the
    strings' encoder is C) and a tested clickhouse-driver; otherwise the driver encodes the values as lists."""
    return native.unavailable() is None and driver_tested()


@functools.cache
def arrow_client_class() -> type:
    """clickhouse-driver's ``Client`` whose ``send_data`` writes a ``NativeColumns`` block as encoded here (the
    driver is imported when a server storage is opened, not with this module); the driver's own ``Client`` when its
    release is not one this was tested with."""
    from clickhouse_driver import Client, defines

    if not driver_tested():
        return Client
    from clickhouse_driver.block import BlockInfo, ColumnOrientedBlock
    from clickhouse_driver.protocol import ClientPacketTypes
    from clickhouse_driver.varint import write_varint
    from clickhouse_driver.writer import write_binary_str, write_binary_uint8

    class ArrowClient(Client):
        def send_data(self, sample_block: Any, data: Any, types_check: bool = False, columnar: bool = False) -> int:
            if not isinstance(data, NativeColumns):
                return int(super().send_data(sample_block, data, types_check=types_check, columnar=columnar))
            conn = self.connection
            encoded = None if conn.compression else data.encode(sample_block.columns_with_types)
            if encoded is None:
                return int(super().send_data(sample_block, data.as_lists(), types_check=types_check, columnar=True))
            self.write_block(encoded, data.rows)
            self.end_data()
            return data.rows

        def write_block(self, encoded: list[tuple[str, str, Pieces]], rows: int) -> None:
            """Write one Data packet of ``encoded`` columns (``NativeColumns.encode``) inside an INSERT exchange. A
            large piece goes to the socket as it is (the driver's buffered writer would copy it, and reads a
            ``memoryview`` wrongly), after what is buffered before it."""
            conn = self.connection
            revision = conn.server_info.used_revision
            out = conn.fout
            write_varint(ClientPacketTypes.DATA, out)
            if revision >= defines.DBMS_MIN_REVISION_WITH_TEMPORARY_TABLES:
                write_binary_str("", out)
            if revision >= defines.DBMS_MIN_REVISION_WITH_BLOCK_INFO:
                BlockInfo().write(out)
            write_varint(len(encoded), out)
            write_varint(rows, out)
            custom = revision >= defines.DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION
            for name, declared, payload in encoded:
                write_binary_str(name, out)
                write_binary_str(declared, out)
                if custom:
                    write_binary_uint8(0, out)
                for piece in payload:
                    if len(piece) >= _DIRECT_BYTES:
                        out.flush()
                        conn.socket.sendall(piece)
                    else:
                        out.write(bytes(piece))
            out.flush()
            self.receive_profile_events()

        def end_data(self) -> None:
            """The empty block that ends an INSERT's data."""
            self.connection.send_data(ColumnOrientedBlock())
            self.receive_profile_events()

    return ArrowClient
