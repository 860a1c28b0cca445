"""The relay's idempotent producer across a real Apache Kafka restart (the broker keeps its log, so this is a stop and
start, not a pause): every event arrives exactly once and in order, with batches in flight when the broker stops,
events queued while it is down and events sent after it is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import new_topic, read_all
from tests.support.relay import RelayUnderTest, config, event

pytestmark = pytest.mark.integration


@pytest.fixture
def relay_list() -> Iterator[list[RelayUnderTest]]:
    started: list[RelayUnderTest] = []
    yield started
    for relay in started:
        relay.stop()


def test_idempotent_relay_delivers_each_event_once_in_order_across_a_broker_restart(
    kafka_broker: KafkaService, tmp_path: Path, relay_list: list[RelayUnderTest]
) -> None:
    broker = kafka_broker.require_pausable()
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    relay = RelayUnderTest(config(bootstrap, topic, tmp_path, buffer_max_events=20_000))
    relay_list.append(relay)
    relay.wait_for(lambda s: s["status"] == "ready")

    relay.send(*(event(i) for i in range(1, 2001)))
    relay.wait_for(lambda s: s["delivered"] >= 1000)
    relay.send(*(event(i) for i in range(2001, 4001)))  # batches in flight while the broker shuts down
    broker.stop_keeping_data()
    try:
        relay.send(*(event(i) for i in range(4001, 6001)))  # queued while the broker is down
        down = relay.wait_for(lambda s: s["received"] == 6000)
        assert down["delivered"] < 6000 and down["spooled"] == 0
    finally:
        broker.start()  # same port, same log
    relay.send(*(event(i) for i in range(6001, 8001)))
    relay.send(b"#flush 60000")
    flushed = relay.wait_for(lambda s: s["status"] == "flushed", timeout=90)
    assert (flushed["received"], flushed["delivered"], flushed["undelivered"], flushed["spooled"]) == (8000, 8000, 0, 0)
    code, last = relay.finish()
    assert code == 0 and (last["delivered"], last["lost"], last["spooled"]) == (8000, 0, 0)

    records = read_all(bootstrap, topic, 60.0, until=lambda r: len(r) >= 8000, settle=1.0)
    seqs = [orjson.loads(r.value or b"")["seq"] for r in records]
    assert seqs == list(range(1, 8001))  # no duplicate from a retried batch, no gap, no reordering
    assert [r.offset for r in records] == list(range(8000))
