"""The collector's own consumer (collector/kafka/librdkafka.py: librdkafka's C API, the messages kept where
librdkafka put them, native/_kafkachunk.c) against a real broker: the same rows, dead letters and offsets as
confluent-kafka's consumer; a chunk's scan equal to ``scan_messages`` over the same messages as Python objects; a
message made on demand equal to confluent-kafka's; the chunk's lifetime; and confluent-kafka's semantics for
callbacks and errors."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from sparktap.collector.decode import Decoder
from sparktap.collector.kafka.client import group_consumer
from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_TIMESTAMP
from sparktap.collector.kafka.librdkafka import ChunkConsumer
from sparktap.local.ports import wait_until
from sparktap.native._flatjson import MessageChunk
from sparktap.native._flatjson import scan_messages as scan_list
from sparktap.schemas.examples import example_event
from sparktap.schemas.schema import schema_for
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.collector import in_process, settings_for, task_end, wait_committed

pytestmark = [pytest.mark.integration, pytest.mark.native]

MIXED = 1_200


def _items(now: int) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]]:
    """(partition, key, value, headers): task_end events (the C reader's), stage events (the Python path), bad
    messages for the dead-letter topic (not JSON, empty, a tombstone, out of range), some with headers."""
    out: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]] = []
    for i in range(MIXED):
        partition = i % 3
        key = f"app-{i % 7:04d}".encode()
        if i % 10 == 3:
            stage = example_event("stage_completed", seq=i + 1, app_id=f"app-{i % 7:04d}", stage_id=i)
            value: bytes | None = stage.model_dump_json().encode()
        elif i % 97 == 5:
            value = b"not json {" + str(i).encode()
        elif i % 131 == 7:
            value = b""
        elif i % 211 == 11:
            value = None
        elif i % 157 == 13:
            value = task_end(i % 7, i + 1, event_time_ms=2**62)
        else:
            value = task_end(i % 7, i + 1, event_time_ms=now)
        headers = [("trace", f"t-{i}".encode()), ("empty", b"")] if i % 5 == 0 else None
        out.append((partition, key, value, headers))
    return out


def _produce(bootstrap: str, topic: str, items: list[Any]) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    ends: dict[int, int] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        ends[msg.partition() or 0] = max(ends.get(msg.partition() or 0, 0), (msg.offset() or 0) + 1)

    for partition, key, value, headers in items:
        producer.produce(topic, key=key, value=value, headers=headers, partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0
    return ends


def _rows(storage: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, sorted (the insert order differs with the chunks' sizes)."""
    out = {}
    for table in storage.schema().tables:
        rows = storage.query(f"SELECT * FROM {storage.qualified(table)}")  # noqa: S608 - the schema's own names
        out[table] = sorted((tuple(sorted(r.items())) for r in rows), key=repr)
    return out


def test_both_kafka_clients_store_the_same_rows_dead_letters_and_offsets(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], clickhouse_server: ClickHouseServer
) -> None:
    """The same mixed input through the collector twice, each with its own group and database on clickhouse-server
    18.16: once on its own consumer (the default), once on confluent-kafka's. Small batches and a small byte budget
    cut chunks (their rest is rewound and read again). Both store exactly the same rows in every table, send the
    same dead letters, and commit the end of every partition."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=3)
    items = _items(int(time.time() * 1000))
    ends = _produce(bootstrap, topic, items)
    assert sum(ends.values()) == MIXED
    stored, letters = {}, {}
    for client in ("auto", "confluent-kafka"):
        database = random_database()
        settings = settings_for(
            bootstrap, topic, clickhouse_server.url(database), batch_rows=250, batch_bytes=60_000, kafka_client=client
        )
        try:
            seen = sum(map(len, letters.values()))  # the dead letters of the run before (the same topic)
            with in_process(settings) as collector:
                wait_until(lambda c=collector: c._consumer is not None, timeout=60, what="the consumer")
                used = type(collector._consumer)
                assert used is (ChunkConsumer if client == "auto" else Consumer)
                wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
            storage = open_storage(settings.clickhouse.target())
            try:
                stored[client] = _rows(storage)
            finally:
                storage.close()
            expected = sum(1 for _, _, v, _ in items if not v or v.startswith(b"not") or b'"event_time_ms":4' in v)
            records = consume_all(bootstrap, f"{topic}.dlq", seen + expected, timeout=60)[seen:]
            letters[client] = sorted(
                ((r.key, r.value, tuple((k, v) for k, v in r.headers if k != HEADER_TIMESTAMP)) for r in records),
                key=repr,
            )
            assert len(letters[client]) == expected
        finally:
            drop_database(clickhouse_server, database)
    ours, theirs = stored["auto"], stored["confluent-kafka"]
    assert len(ours["task_end"]) > 900 and len(ours["stage_completed"]) == MIXED // 10
    assert ours == theirs
    assert letters["auto"] == letters["confluent-kafka"]
    assert {dict(h)[HEADER_ERROR] for _, _, h in letters["auto"]} == {b"not_json", b"empty", b"event_time_out_of_range"}


def _consumer(bootstrap: str, **conf: Any) -> ChunkConsumer:
    return ChunkConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chunk-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "group.protocol": "classic",
            **conf,
        }
    )


def _drain(consumer: ChunkConsumer, count: int, each: Callable[[Any], None], chunk: int = 97) -> None:
    """Consume ``count`` messages in chunks of at most ``chunk``, handing each chunk to ``each``."""
    got, deadline = 0, time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        messages = consumer.consume_queued(chunk, 0.2)
        got += len(messages)
        each(messages)
    assert got == count


def test_a_chunks_scan_and_messages_equal_confluent_kafkas(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    """Every chunk's ``scan`` (taken, rest, errors, values, size, offsets and positions, at several byte budgets)
    equals ``scan_messages`` over the same messages made into ``Message`` objects, and those equal what
    confluent-kafka's consumer gives for the same offsets: key, value (tombstones and empty values too), headers,
    timestamp. The reader decodes a values view exactly as the list of its bytes."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=3)
    items = _items(int(time.time() * 1000))
    _produce(bootstrap, topic, items)
    reference: dict[tuple[int, int], tuple[Any, ...]] = {}
    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:8]}"})
    try:
        plain.assign([TopicPartition(topic, p, 0) for p in range(3)])
        deadline = time.monotonic() + 60
        while len(reference) < MIXED and time.monotonic() < deadline:
            for m in plain.consume(500, 0.2):
                assert m.error() is None
                reference[(m.partition(), m.offset())] = (m.topic(), m.key(), m.value(), m.headers(), m.timestamp())
    finally:
        plain.close()
    assert len(reference) == MIXED
    decoder = Decoder(schema_for((26, 9), "db"), arrow=True)
    consumer = _consumer(bootstrap)
    consumer.subscribe([topic])
    seen: list[tuple[int, int]] = []

    def check(chunk: Any) -> None:
        assert isinstance(chunk, MessageChunk)
        messages = list(chunk)
        for m in messages:
            seen.append((m.partition(), m.offset()))
            assert (m.topic(), m.key(), m.value(), m.headers(), m.timestamp()) == reference[seen[-1]]
        size = sum(len(m.value() or b"") for m in messages)
        for room in (-1, 0, size // 2, size):
            where_c: list[bytes] = []
            where_l: list[bytes] = []
            ours = chunk.scan(room, where_c)
            theirs = scan_list(messages, room, where_l)
            assert [len(ours[0]), len(ours[1]), len(ours[2])] == [len(theirs[0]), len(theirs[1]), len(theirs[2])]
            for mine, listed in zip(ours[:2], theirs[:2], strict=True):
                assert [(m.partition(), m.offset()) for m in mine] == [(m.partition(), m.offset()) for m in listed]
            assert list(ours[3]) == theirs[3]
            assert ours[4:] == theirs[4:] and where_c == where_l
            if room == -1:
                by_view, by_bytes = decoder.decode(ours[3]), decoder.decode(theirs[3])
                assert by_view.rejects == by_bytes.rejects
                assert by_view.tables.keys() == by_bytes.tables.keys()
                for name, table in by_view.tables.items():
                    other = by_bytes.tables[name]
                    assert table.indices == other.indices
                    assert {c: _list(v) for c, v in table.columns.items()} == {
                        c: _list(v) for c, v in other.columns.items()
                    }

    try:
        _drain(consumer, MIXED, check)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(reference)


def _list(values: Any) -> list[Any]:
    return values.to_pylist() if hasattr(values, "to_pylist") else list(values)


def test_a_chunk_lives_until_released_the_next_consume_or_close(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    """A released chunk (and every view of it) raises instead of reading freed memory; the next consume releases
    the chunk before it; and a consumer closed while a chunk is held leaves its group at once (librdkafka's close
    would otherwise wait for the chunk's messages)."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    _produce(bootstrap, topic, [(0, None, task_end(1, i + 1), None) for i in range(30)])
    consumer = _consumer(bootstrap)
    consumer.subscribe([topic])
    first = consumer.consume_queued(10, 10.0)
    assert len(first) >= 1
    taken, rest, errors, values, size, offsets = first.scan(-1)
    assert (len(taken), len(rest), errors, offsets) == (len(first), 0, [], {(topic, 0): (0, len(first) - 1)})
    assert values[0] == task_end(1, 1) and size == sum(len(task_end(1, i + 1)) for i in range(len(first)))
    first.release()
    assert first.released and values.released and len(values) == len(first)
    for view in (first, taken, values):
        with pytest.raises(RuntimeError, match="released"):
            view[0]
    with pytest.raises(RuntimeError, match="released"):
        Decoder(schema_for((26, 9), "db"), arrow=True)._arrow._reader.read(values)  # type: ignore[union-attr]
    second = consumer.consume_queued(5, 10.0)
    assert len(second) >= 1 and not second.released
    third = consumer.consume_queued(5, 10.0)
    assert second.released and not third.released  # the next call released it
    started = time.monotonic()
    consumer.close()
    assert third.released and time.monotonic() - started < 10
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.consume_queued(1, 0)


def test_callbacks_errors_and_settings_behave_as_confluent_kafkas(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    """An exception in ``on_assign`` is raised by the consume call that served it, and the assignment is applied
    still; ``on_revoke`` runs in ``close``; ``error_cb`` gets a KafkaError and ``logger`` librdkafka's lines for a
    broker that is not there; a setting librdkafka refuses raises KafkaException naming it; ``group_consumer``
    picks the client the setting names."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    consumer = _consumer(bootstrap)
    revoked: list[list[int]] = []

    def on_assign(_c: object, parts: list[TopicPartition]) -> None:
        raise ValueError(f"assigned {sorted(p.partition for p in parts)}")

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=lambda c, p: revoked.append([x.partition for x in p]))
    raised: list[str] = []

    def assigned() -> bool:
        try:
            consumer.consume_queued(1, 0.2)
        except ValueError as exc:
            raised.append(str(exc))
        return bool(raised)

    wait_until(assigned, timeout=60, what="the assignment")
    assert raised == ["assigned [0, 1]"]
    assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1]
    consumer.close()
    assert revoked == [[0, 1]]

    errors: list[KafkaError] = []
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(f"test.librdkafka.{uuid.uuid4().hex[:6]}")
    logger.propagate = False
    logger.addHandler(Keep())
    away = ChunkConsumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "away", "error_cb": errors.append, "logger": logger}
    )

    def reported() -> bool:
        away.consume_queued(1, 0.1)  # serves the error and log callbacks
        return bool(errors and records)

    try:
        away.subscribe([topic])
        wait_until(reported, timeout=30, what="an error and a log line")
    finally:
        away.close()
    assert isinstance(errors[0], KafkaError)
    assert errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert any("127.0.0.1:1" in r.getMessage() for r in records)
    with pytest.raises(KafkaException, match="no.such.setting"):
        ChunkConsumer({"no.such.setting": "1"})
    conf = {"bootstrap.servers": bootstrap, "group.id": "pick"}
    picked = [group_consumer(dict(conf), client) for client in ("auto", "librdkafka", "confluent-kafka")]
    try:
        assert [type(c) for c in picked] == [ChunkConsumer, ChunkConsumer, Consumer]
    finally:
        for c in picked:
            c.close()


def test_only_the_tested_librdkafka_releases_are_driven() -> None:
    """The binding mirrors librdkafka's message struct: a release outside the tested range is refused (then auto takes
    confluent-kafka's consumer) before any function is used."""
    from sparktap.collector.kafka.rdkafka import TESTED, Library, library_path, tested, version_text

    assert (version_text(0x02100000), version_text(0x020403FF)) == ("2.16.0", "2.4.3")
    first, last = TESTED
    assert [tested(major << 24 | minor << 16) for major, minor in [first, last]] == [True, True]
    assert tested((first[0] << 24 | first[1] << 16) - 1) is False  # the release before the first
    assert tested(last[0] << 24 | (last[1] + 1) << 16) is False
    assert tested(3 << 24) is False
    path = library_path()
    assert path is not None
    import confluent_kafka

    assert Library(path).release == confluent_kafka.libversion()[0]  # the wheel's release is a tested one


@pytest.mark.parametrize("client", ["auto", "confluent-kafka"])
def test_metrics_and_healthz_say_which_consumer_runs(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Any, client: str
) -> None:
    import json
    import urllib.request

    import confluent_kafka

    topic = kafka_topic(partitions=1)
    settings = settings_for(kafka_broker.bootstrap_servers, topic, f"chdb://{tmp_path / 'chdb'}", kafka_client=client)
    expected = (
        ("librdkafka", confluent_kafka.libversion()[0])
        if client == "auto"
        else ("confluent-kafka", f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})")
    )
    with in_process(settings) as collector:
        wait_until(lambda: collector.http is not None and collector.health.kafka_client != "", 60, "consuming")
        assert collector.http is not None
        port = collector.http.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:  # noqa: S310
            body = json.loads(answer.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # noqa: S310
            metrics = answer.read().decode()
    assert body["kafka_client"] == f"{expected[0]} {expected[1]}"
    line = f'sparktap_collector_kafka_client_info{{client="{expected[0]}",version="{expected[1]}"}} 1.0'
    assert [m for m in metrics.splitlines() if m.startswith("sparktap_collector_kafka_client_info{")] == [line]
