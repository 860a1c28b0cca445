"""librdkafka's own log lines in the collector across a real broker restart (issue 41, item 12): while the broker is
away its clients log a connection error per broker connection and retry (the audit counted 272 lines in one second);
the collector logs each kind (level and facility) at most once per 30 s, the next line of a kind saying how many
were held back, and consumes again once the broker is back."""

from __future__ import annotations

import logging
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from sparktap.collector.kafka.client import (
    KAFKA_LOG,
    KAFKA_LOG_EVERY,
    ClientLogLimit,
    consume_queued,
    consumer_config,
    group_consumer,
    producer_config,
)
from sparktap.collector.settings import IngestSettings
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import new_topic

pytestmark = pytest.mark.integration


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_broker_restart_logs_each_kind_of_client_line_once_per_30_s(kafka_broker: KafkaService) -> None:
    broker = kafka_broker.require_pausable()
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    settings = IngestSettings(kafka={"bootstrap_servers": bootstrap, "group_id": f"g-{topic}"})
    consumer = group_consumer(consumer_config(settings, lambda err: None), "auto")  # the collector's own client
    dlq = Producer(producer_config(settings, lambda err: None))  # and its dead-letter producer, as in the collector
    lines = _Lines()
    KAFKA_LOG.addHandler(lines)
    try:
        consumer.subscribe([topic])
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
        producer.produce(topic, b"before")
        producer.flush(30)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got += [m.value() or b"" for m in consume_queued(consumer, 10, 0.2) if m.error() is None]
        assert got == [b"before"]
        lines.records.clear()
        (limit,) = [f for f in KAFKA_LOG.filters if isinstance(f, ClientLogLimit)]
        held_before = limit.suppressed

        broker.stop_keeping_data()
        try:
            down_until = time.monotonic() + 8
            while time.monotonic() < down_until:  # the clients keep polling, as the collector's loop does
                consume_queued(consumer, 10, 0.1)
                dlq.poll(0)
        finally:
            broker.start()
        during = list(lines.records)
        kinds = Counter((r.levelno, str(r.args[0]) if isinstance(r.args, tuple) and r.args else "") for r in during)
        assert during, "the broker's stop logged nothing at all"
        assert max(kinds.values()) == 1, kinds  # each kind once in these 8 s (< KAFKA_LOG_EVERY)
        held = limit.suppressed - held_before
        assert held > 0, "librdkafka repeated nothing: the test did not see the flood it guards against"
        print(f"client log lines while the broker was down: {len(during)} logged, {held} held back")  # noqa: T201
        assert KAFKA_LOG_EVERY == 30.0

        producer.produce(topic, b"after")
        producer.flush(60)
        deadline = time.monotonic() + 90
        while b"after" not in got and time.monotonic() < deadline:
            got += [m.value() or b"" for m in consume_queued(consumer, 10, 0.2) if m.error() is None]
        # nothing was committed, so the group may read "before" again after it rejoined: consumption goes on
        assert got[0] == b"before" and got[-1] == b"after" and set(got) == {b"before", b"after"}
    finally:
        KAFKA_LOG.removeHandler(lines)
        consumer.close()
