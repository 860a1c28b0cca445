"""The Kafka fixtures against a real broker: a full round trip, a produce held back while the broker is paused, the
Apache Kafka broker's restart, cleanup and start-up failures, and the demo's tansu broker."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

from sparktap.errors import ServiceError
from sparktap.local.broker import TansuBroker
from sparktap.local.ports import port_open, wait_until
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.services.kafka import ApacheKafkaBroker

pytestmark = pytest.mark.integration


def reliable_producer(bootstrap_servers: str, **extra: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": 5,
            **extra,
        }
    )


def test_round_trip_of_1000_keyed_messages_over_3_partitions(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(partitions=3)
    producer = reliable_producer(kafka_broker.bootstrap_servers)
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    sent = {f"key-{i % 37}-{i}".encode(): f"value-{i}".encode() for i in range(1000)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, headers=[("n", value[6:])], on_delivery=on_delivery)
    assert producer.flush(timeout=30) == 0
    assert errors == []

    records = consume_all(kafka_broker.bootstrap_servers, topic, expected=1000, timeout=30)

    assert len(records) == 1000
    assert {r.key: r.value for r in records} == sent
    assert all(r.headers == [("n", r.value[6:])] for r in records if r.value is not None)
    assert {r.partition for r in records} == {0, 1, 2}
    for partition in range(3):  # offsets within each partition are dense and in order
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_produce_is_held_while_the_broker_is_paused_and_delivered_after_resume(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    kafka_broker.require_pausable()
    topic = kafka_topic(partitions=1)
    # Long enough timeouts that the stalled message waits instead of failing while the broker is frozen.
    producer = reliable_producer(kafka_broker.bootstrap_servers, **{"message.timeout.ms": 60_000})
    producer.produce(topic, key=b"warm-up", value=b"0")  # connections and producer id set up before the pause
    assert producer.flush(timeout=30) == 0

    with kafka_broker.paused():
        producer.produce(topic, key=b"stalled", value=b"1")
        assert producer.flush(timeout=2) == 1  # still outstanding: nobody answers

    assert producer.flush(timeout=30) == 0
    records = consume_all(kafka_broker.bootstrap_servers, topic, expected=2, timeout=30)
    assert [(r.key, r.value) for r in records] == [(b"warm-up", b"0"), (b"stalled", b"1")]


def test_the_suite_runs_on_apache_kafka_and_a_restart_keeps_every_record(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str]
) -> None:
    broker = kafka_broker.require_pausable()
    assert isinstance(broker, ApacheKafkaBroker)
    topic = kafka_topic(partitions=2)
    producer = reliable_producer(kafka_broker.bootstrap_servers)
    for i in range(500):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(timeout=30) == 0
    port, pid = broker.port, broker.pid

    kafka_broker.restart()

    assert (broker.port, broker.bootstrap_servers) == (port, kafka_broker.bootstrap_servers)
    assert broker.pid != pid
    records = consume_all(kafka_broker.bootstrap_servers, topic, expected=500, timeout=30)
    assert sorted(r.value for r in records if r.value) == sorted(f"v{i}".encode() for i in range(500))


def test_apache_kafka_stop_kills_its_process_group_and_removes_its_data(tmp_path: Path) -> None:
    broker = ApacheKafkaBroker(directory=tmp_path / "kafka")
    with broker:
        port, pid = broker.port, broker.pid
        broker.create_topic("kept")
        wait_until(lambda: (broker.data_dir / "kept-0").is_dir(), 10, "the partition's directory")
        broker.pause()
    assert not broker.running
    assert not port_open("127.0.0.1", port)
    assert not Path(f"/proc/{pid}").exists()
    assert not broker.data_dir.exists()
    assert "Kafka Server started" in broker.log_path.read_text()  # the log stays in a directory the caller gave


def test_apache_kafka_with_a_bad_setting_says_which(tmp_path: Path) -> None:
    broker = ApacheKafkaBroker(directory=tmp_path, config={"log.retention.ms": "soon"})
    with pytest.raises(ServiceError, match="cannot format the Apache Kafka storage") as info:
        broker.start()
    assert "Invalid value soon for configuration log.retention.ms" in str(info.value)
    assert not broker.running


def test_apache_kafka_that_exits_while_starting_names_its_log_and_last_lines(tmp_path: Path) -> None:
    broker = ApacheKafkaBroker(directory=tmp_path)
    broker.start()
    broker.stop_keeping_data()
    meta = broker.data_dir / "meta.properties"  # another node's storage: Kafka refuses to start on it
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    try:
        with pytest.raises(ServiceError, match="Apache Kafka exited with code 1 while starting") as info:
            broker.start()
        message = str(info.value)
        reason, tail = message.split("ends with:", 1)
        assert "first error: " in reason and "Stored node id 7 doesn't match" in reason  # Kafka's reason, from its log
        assert f'log path="{tmp_path / "broker.log"}"' in reason
        assert tail.strip().splitlines()[-1] == broker.log_tail(1)  # and the log's last lines
        assert not broker.running
    finally:
        broker.stop()


def test_apache_kafka_not_ready_within_its_deadline_says_so(tmp_path: Path) -> None:
    broker = ApacheKafkaBroker(directory=tmp_path, start_timeout=0.2)
    with pytest.raises(ServiceError, match=r"Apache Kafka broker bootstrap=\S+ not ready after 0.2s") as info:
        broker.start()
    assert "broker.log" in str(info.value)
    assert not broker.running


def test_a_paused_broker_stops_and_frees_its_port(tmp_path: Path) -> None:
    broker = TansuBroker(log_dir=tmp_path)
    with broker:
        port = broker.port
        broker.pause()
        assert broker.is_paused
    assert not broker.running
    assert not port_open("127.0.0.1", port)
    assert "listening on: tcp://127.0.0.1:" in broker.log_path.read_text()


def test_a_broker_on_a_taken_port_fails_with_the_reason_and_its_log(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        broker = TansuBroker(port=port, log_dir=tmp_path, start_timeout=15)
        with pytest.raises(ServiceError, match="the port is already in use") as info:
            broker.start()
    assert "AddrInUse" in str(info.value)  # the tail of tansu's log is part of the message
    assert not broker.running
