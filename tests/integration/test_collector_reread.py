"""Rows ClickHouse refuses reach the dead-letter topic with their original message, read back from Kafka by offset
(the pending batch keeps only the columns and each row's partition and offset, ``collector/kafka/reread.py``), also
while Kafka is away at that moment: nothing is committed before the dead letters are in, nothing is lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer

from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_REASON, HEADER_TOPIC
from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.collector import committed, in_process, sample, settings_for, task_end, wait_committed

pytestmark = pytest.mark.integration

REFUSED = {17, 42, 43}
JUNK = {5, 30}
"""positions of messages that are not JSON among the task_end events: the refused rows' chunks are not all task_end"""


Item = tuple[int, bytes, bytes, list[tuple[str, bytes]]]


def _produce(bootstrap: str, topic: str, items: list[Item]) -> dict[bytes, tuple[int, int]]:
    """(partition, key, value, headers) produced in order; returns value -> (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    where: dict[bytes, tuple[int, int]] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        where[msg.value() or b""] = (msg.partition() or 0, msg.offset() or 0)

    for partition, key, value, headers in items:
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=list[tuple[str, str | bytes | None]](headers),
            partition=partition,
            on_delivery=delivered,
        )
    assert producer.flush(60) == 0
    return where


def test_refused_rows_are_read_back_from_kafka_with_their_original_bytes_even_while_kafka_is_away(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A CHECK constraint (a refusal that is not a data error): retried ``max_insert_attempts`` times, then the rows
    are tried apart. Kafka is frozen after the first refusal, so the read-back of the three refused rows finds it
    away: the collector retries it (counted as a Kafka retry), sends and commits nothing meanwhile, and once Kafka
    is back the dead letters carry each message's original key, value and headers, its partition and offset, and
    the group commits the end of both partitions with the 97 other rows stored once."""
    broker = kafka_broker.require_pausable()
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    settings = settings_for(
        bootstrap,
        topic,
        f"chdb://{tmp_path / 'chdb'}",
        retry_backoff_seconds=1.0,
        retry_backoff_max_seconds=1.0,
        max_insert_attempts=3,
        batch_interval_seconds=3.0,  # one batch: both partitions' messages, fetched at once, in it
    )
    storage = open_storage(settings.clickhouse.target())
    storage.ensure_schema()
    storage.command("ALTER TABLE task_end ADD CONSTRAINT small_deserialize CHECK deserialize_time_ms < 100")
    storage.close()
    items: list[Item] = []
    for seq in range(1, 101):
        value = task_end(9, seq, deserialize_time_ms=1000 if seq in REFUSED else 5)
        items.append((seq % 2, f"key-{seq}".encode(), value, [("trace", f"t-{seq}".encode()), ("n", b"\x00\x01")]))
        if seq in JUNK:
            items.append((seq % 2, b"junk", f"junk-{seq}".encode(), []))
    where = _produce(bootstrap, topic, items)
    ends = {p: max(o for q, o in where.values() if q == p) + 1 for p in (0, 1)}
    with in_process(settings) as collector:
        wait_until(
            lambda: sample(collector, "sparktap_collector_retries_total", target="clickhouse") >= 1,
            120,
            "the first refused insert",
            interval=0.05,
        )
        with broker.paused():
            wait_until(
                lambda: sample(collector, "sparktap_collector_retries_total", target="kafka") >= 1,
                60,
                "the read-back of the refused rows waiting for Kafka",
                interval=0.1,
            )
            assert sample(collector, "sparktap_collector_retries_total", target="clickhouse") == 2  # attempts 1, 2
            assert sample(collector, "sparktap_collector_dead_letters_total", reason="rejected_by_clickhouse") == 0
            assert sample(collector, "sparktap_collector_inserted_rows_total") == 0  # counted once settled
            assert collector.storage is not None
            rows = collector.storage.query("SELECT count() AS n FROM task_end_dedup")
            assert rows == [{"n": 97}]  # the bisection stored the others; the three wait for their messages
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="rejected_by_clickhouse") == 3
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="not_json") == 2
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 97
        seqs = [r["seq"] for r in collector.storage.query("SELECT seq FROM task_end_dedup ORDER BY seq")]
        assert seqs == [s for s in range(1, 101) if s not in REFUSED]
    assert committed(bootstrap, settings.kafka.group_id, topic, [0, 1]) == ends
    letters = consume_all(bootstrap, f"{topic}.dlq", 5, timeout=30)
    refused = sorted(
        (r for r in letters if dict(r.headers)[HEADER_ERROR] == b"rejected_by_clickhouse"),
        key=lambda r: int((r.key or b"").split(b"-")[1]),
    )
    expected = [items[i] for i, item in enumerate(items) if item[1] in {f"key-{s}".encode() for s in REFUSED}]
    assert [(r.key, r.value, r.headers[:2]) for r in refused] == [(k, v, h) for _, k, v, h in expected]
    for record in refused:
        headers = dict(record.headers)
        partition, offset = where[record.value or b""]
        assert (headers[HEADER_TOPIC], headers[HEADER_PARTITION], headers[HEADER_OFFSET]) == (
            topic.encode(),
            str(partition).encode(),
            str(offset).encode(),
        )
        assert headers[HEADER_REASON].startswith(b"rejected by ClickHouse")
    junk = sorted(r.value or b"" for r in letters if dict(r.headers)[HEADER_ERROR] == b"not_json")
    assert junk == sorted(f"junk-{s}".encode() for s in JUNK)
    assert len(letters) == 5
