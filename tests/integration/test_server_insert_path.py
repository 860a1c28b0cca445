"""The server insert path from the C reader's Arrow columns (storage/native.py) stores exactly what chDB stores.

One hostile mix (the decoder tests' hostile messages, every field mutant of a listener-style task_end, valid events
with multi-byte strings, escapes and extreme integers) is decoded in chunks as the collector decodes a poll, then
inserted into chDB, into clickhouse-server 18.16 through the Native block, and into 18.16 through the Python path
(the fallback when the C reader is absent): the three stores hold the same rows, value for value, and the decoder
gives the same rejects on both paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparktap.collector.arrowpath import is_arrow
from sparktap.collector.decode import Decoded, Decoder
from sparktap.schemas.examples import example_event
from sparktap.store import ChdbStorage, ServerStorage, Storage
from sparktap.store.native import NativeColumns
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support.decode import NOW_MS, encode, hostile, mutants

pytestmark = [
    pytest.mark.integration,
    pytest.mark.native,
]

CHUNK = 400


def _messages() -> list[bytes]:
    full = {k: v for k, v in example_event("task_end", seq=1).model_dump().items() if v is not None}
    valid = [
        encode({**full, "seq": 1000 + i, "host": f"h\u00e9te-{i}-\u6f22", "executor_id": str(i % 7)})
        for i in range(1500)
    ]
    valid.append(encode({**full, "seq": 5000, "host": 'a "quoted"\\ host\n'}))  # escapes: the Python path
    valid.append(encode({**full, "seq": 5001, "executor_run_time_ms": 2**62}))
    out: list[bytes] = []
    # a distinct seq for each mutant (unless seq is the field mutated; 2.0 would be a second 2): rows sharing a
    # sort key would collapse in the ReplacingMergeTree when its parts merge, at a different moment on each store
    bad = [
        encode({**m, "seq": 100_000 + j} if m.get("seq") == full["seq"] else m)
        for j, m in enumerate(mutants(full))
        if not isinstance(m.get("seq"), float)
    ]
    bad += [m for m, _, _ in hostile(full)]
    steps = len(valid) // 100
    share = -(-len(bad) // steps)
    for i in range(steps):  # chunks of valid messages with hostile ones in each
        out += valid[i * 100 : (i + 1) * 100 if i < steps - 1 else None] + bad[i * share : (i + 1) * share]
    assert len(out) == len(valid) + len(bad)
    return out


def _decode(storage: Storage, arrow: bool, messages: list[bytes]) -> list[Decoded]:
    schema = storage.ensure_schema()
    decoder = Decoder(schema, arrow=arrow, clock=lambda: NOW_MS / 1000)
    return [decoder.decode(messages[i : i + CHUNK]) for i in range(0, len(messages), CHUNK)]


def _store(storage: Storage, decoded: list[Decoded]) -> None:
    for part in decoded:
        for table, chunk in part.tables.items():
            assert storage.insert_columns(table, chunk.columns) == chunk.rows


def _rows(storage: Storage, tables: set[str]) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table in sorted(tables):
        spec = storage.schema().tables[table]
        names = [c.name for c in spec.columns]  # the derived ones differ by version (DateTime64 on chDB)
        columns = ", ".join(f"`{n}`" for n in names)
        out[table] = storage.query(f"SELECT {columns} FROM {storage.qualified(table)} ORDER BY {columns}")  # noqa: S608
    return out


@pytest.fixture
def server_pair(clickhouse_server: ClickHouseServer) -> Iterator[tuple[ServerStorage, ServerStorage]]:
    names = [random_database(), random_database()]
    stores = [ServerStorage(clickhouse_server.target(name)) for name in names]
    try:
        yield stores[0], stores[1]
    finally:
        for store, name in zip(stores, names, strict=True):
            store.close()
            drop_database(clickhouse_server, name)


def test_the_server_path_stores_the_rows_chdb_stores_for_the_hostile_mix(
    chdb_storage: ChdbStorage, server_pair: tuple[ServerStorage, ServerStorage]
) -> None:
    arrow_server, python_server = server_pair
    messages = _messages()
    on_chdb = _decode(chdb_storage, True, messages)
    by_arrow = _decode(arrow_server, True, messages)
    by_python = _decode(python_server, False, messages)

    rejects = [[(r.index, r.kind, r.reason) for r in part.rejects] for part in by_python]
    assert [[(r.index, r.kind, r.reason) for r in part.rejects] for part in by_arrow] == rejects
    assert [[(r.index, r.kind, r.reason) for r in part.rejects] for part in on_chdb] == rejects
    assert sum(len(r) for r in rejects) > 500  # the mix is hostile
    chunks = [part.tables["task_end"] for part in by_arrow if "task_end" in part.tables]
    assert all(all(is_arrow(v) for v in c.columns.values()) for c in chunks)  # every chunk goes through Native
    types = {r["name"]: r["type"] for r in arrow_server.query(f"DESCRIBE TABLE {arrow_server.qualified('task_end')}")}
    for chunk in chunks:  # no column falls back to the driver's encoding
        assert NativeColumns(chunk.columns, chunk.rows).encode([(n, types[n]) for n in chunk.columns]) is not None

    for storage, decoded in ((chdb_storage, on_chdb), (arrow_server, by_arrow), (python_server, by_python)):
        _store(storage, decoded)
    tables = {t for part in by_arrow for t in part.tables}
    assert "task_end" in tables
    stored = _rows(chdb_storage, tables)
    assert sum(len(rows) for rows in stored.values()) == sum(part.rows for part in by_arrow) > 1500
    assert _rows(arrow_server, tables) == stored
    assert _rows(python_server, tables) == stored


def test_an_insert_stream_stores_the_rows_chdb_stores_as_one_part(
    chdb_storage: ChdbStorage, server_pair: tuple[ServerStorage, ServerStorage]
) -> None:
    """The same hostile mix with every task_end chunk sent as one more block of one INSERT kept open
    (storage/stream.py, what the collector does on a backlog): the server confirms every row at its end, writes one
    part (its merges stopped), and holds the rows chDB holds, value for value."""
    streamed, _ = server_pair
    messages = _messages()
    on_chdb = _decode(chdb_storage, True, messages)
    by_stream = _decode(streamed, True, messages)
    _store(chdb_storage, on_chdb)
    streamed.command(f"SYSTEM STOP MERGES {streamed.qualified('task_end')}")
    stream = None
    sent = 0
    for part in by_stream:
        for table, chunk in part.tables.items():
            if table != "task_end":
                assert streamed.insert_columns(table, chunk.columns) == chunk.rows
            elif stream is None:
                stream = streamed.open_stream(table, chunk.columns)
                assert stream is not None
            else:
                assert stream.send(chunk.columns)
            sent += chunk.rows if table == "task_end" else 0
    assert stream is not None and stream.blocks == len([p for p in by_stream if "task_end" in p.tables]) > 3
    assert stream.finish() == sent > 1500
    where = f"database = '{streamed.database}' AND table = 'task_end' AND active"
    assert streamed.query(f"SELECT count() AS n FROM system.parts WHERE {where}") == [{"n": 1}]  # noqa: S608
    tables = {t for part in by_stream for t in part.tables}
    assert _rows(streamed, tables) == _rows(chdb_storage, tables)


def test_an_insert_stream_works_on_a_descriptor_past_select_s_limit(
    server_pair: tuple[ServerStorage, ServerStorage],
) -> None:
    """The stream checks that the server said nothing before each block with ``poll``: ``select`` refuses a
    descriptor of 1,024 or more, which a busy process reaches (a suite worker did)."""
    import os
    import resource

    import pyarrow as pa

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1_200:
        pytest.skip(f"needs 1,200 open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1_200) if hard == resource.RLIM_INFINITY else hard, hard))
    storage, _ = server_pair
    storage.ensure_schema()  # the database
    storage.command(f"CREATE TABLE {storage.qualified('wide')} (a UInt64, s String) ENGINE = MergeTree ORDER BY a")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1_100)]
    try:
        columns = {"a": pa.array(range(100), pa.uint64()), "s": pa.array(["x"] * 100)}
        stream = storage.open_stream("wide", columns)
        assert stream is not None and stream.send(columns) and stream.finish() == 200
        assert storage._stream_client.connection.socket.fileno() >= 1_024
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert storage.query(f"SELECT count() AS n FROM {storage.qualified('wide')}") == [{"n": 200}]  # noqa: S608
