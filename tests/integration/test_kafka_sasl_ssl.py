"""Kafka over SASL_SSL (SCRAM-SHA-512, a private CA made at test time) with ACLs, on the real Apache Kafka broker
(`secure_kafka`): the relay delivers, the collector (consumer group) stores and the `sparktap-kafka` streaming
source reads exact counts; a wrong password is counted and spooled and never logged; each user can do only what
its ACLs allow (relay: write the topic; collector: read it and use its groups)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from sparktap.settings import Settings, load_settings
from sparktap.store import open_storage
from tests.fixtures.kafka import COLLECTOR_USER, READER_USER, RELAY_USER, SecureKafka, consume_all
from tests.support.collector import SESSION_TIMEOUT_MS, CollectorProcess, in_process, sample, task_end, wait_inserted
from tests.support.relay import config as relay_config

pytestmark = pytest.mark.integration

N = 200
APP = 7  # the application of the relayed events: app_id "app-0007", the relay's key


def run_relay(config: dict[str, Any], lines: list[bytes], flush_ms: int) -> tuple[dict[str, Any], str]:
    """The relay as the listener runs it: the config line, the events, `#flush <flush_ms>`, then EOF. Returns its
    exit status line and everything it wrote to stderr (its log)."""
    stdin = b"".join(line + b"\n" for line in [orjson.dumps(config), *lines, f"#flush {flush_ms}".encode()])
    done = subprocess.run(
        [sys.executable, "-m", "sparktap.listener.relay", "--app-id", config["app_id"]],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    statuses = [orjson.loads(line) for line in done.stdout.splitlines()]
    exits = [status for status in statuses if status["status"] == "exit"]
    assert len(exits) == 1, statuses
    return exits[0], done.stdout.decode() + done.stderr.decode(errors="replace")


def collector_settings(secure_kafka: SecureKafka, tmp_path: Path, **kafka: str) -> Settings:
    """The collector on the secured topic with a fresh group the collector's user may use, storing in chDB."""
    return load_settings(
        kafka={
            "bootstrap_servers": secure_kafka.bootstrap_servers,
            "topic": secure_kafka.topic,
            "group_id": f"{secure_kafka.group_prefix}{uuid.uuid4().hex[:8]}",
            **kafka,
        },
        clickhouse={"url": f"chdb://{tmp_path / 'chdb'}"},
        collector={"metrics_port": 0, "session_timeout_ms": SESSION_TIMEOUT_MS, "log_format": "text"},
    )


@pytest.fixture(scope="module")
def relayed(secure_kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """N task_end events of app-0007 sent through the relay as user `relay` over SASL_SSL (its exit status)."""
    spool = tmp_path_factory.mktemp("relay-spool")
    config = relay_config("", secure_kafka.topic, spool, app_id=f"app-{APP:04d}")
    config["kafka"] = secure_kafka.config(RELAY_USER)
    status, log = run_relay(config, [task_end(APP, seq) for seq in range(1, N + 1)], flush_ms=60_000)
    assert secure_kafka.password(RELAY_USER) not in log
    return status


def test_the_relay_delivers_every_event_over_sasl_ssl_with_the_private_ca(
    relayed: dict[str, Any], secure_kafka: SecureKafka
) -> None:
    assert {k: relayed[k] for k in ("received", "delivered", "spooled", "lost", "errors")} == {
        "received": N,
        "delivered": N,
        "spooled": 0,
        "lost": 0,
        "errors": 0,
    }
    reader = {**secure_kafka.config(COLLECTOR_USER), "group.id": f"{secure_kafka.group_prefix}reader"}
    records = consume_all(secure_kafka.bootstrap_servers, secure_kafka.topic, expected=N, **reader)
    assert len(records) == N
    assert {r.key for r in records} == {f"app-{APP:04d}".encode()}
    assert sorted(orjson.loads(r.value or b"{}")["seq"] for r in records) == list(range(1, N + 1))


def test_a_wrong_password_is_counted_and_spooled_and_never_logged(secure_kafka: SecureKafka, tmp_path: Path) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    config = relay_config("", secure_kafka.topic, tmp_path / "spool", app_id="app-wrong")
    config["kafka"] = secure_kafka.config(RELAY_USER, password=wrong)
    status, log = run_relay(config, [task_end(1, seq) for seq in range(1, N + 1)], flush_ms=3000)

    assert (status["received"], status["delivered"], status["spooled"], status["lost"]) == (N, 0, N, 0)
    assert status["errors"] == N  # each undelivered event counted once
    assert "Authentication failed" in log or "SASL authentication error" in log, log[-2000:]
    assert wrong not in log and secure_kafka.password(RELAY_USER) not in log
    segments = list((tmp_path / "spool").rglob("*"))
    assert sum(path.read_bytes().count(b'"event_type"') for path in segments if path.is_file()) == N


def test_the_collector_stores_exact_counts_over_sasl_ssl_as_its_own_user(
    relayed: dict[str, Any], secure_kafka: SecureKafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert relayed["delivered"] == N
    kafka = secure_kafka.config(COLLECTOR_USER)
    settings = collector_settings(
        secure_kafka,
        tmp_path,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=COLLECTOR_USER,
        sasl_password=kafka["sasl.password"],
        ssl_ca_location=kafka["ssl.ca.location"],
    )
    caplog.set_level(logging.DEBUG)
    with in_process(settings) as collector:
        wait_inserted(collector, N, timeout=60)
        assert sample(collector, "sparktap_collector_inserted_rows_total") == N
    storage = open_storage(settings.clickhouse.target())
    try:
        assert storage.query(f"SELECT count(), uniqExact(seq) FROM task_end WHERE app_id = 'app-{APP:04d}'") == [
            {"count()": N, "uniqExact(seq)": N}
        ]
    finally:
        storage.close()
    assert secure_kafka.password(COLLECTOR_USER) not in caplog.text


def test_the_streaming_source_reads_exact_counts_over_sasl_ssl(
    relayed: dict[str, Any], secure_kafka: SecureKafka, spark: Any, tmp_path: Path
) -> None:
    from sparktap.collector.streaming import register

    assert relayed["delivered"] == N
    register(spark)
    reader = spark.readStream.format("sparktap-kafka").option("subscribe", secure_kafka.topic)
    reader = reader.option("startingOffsets", "earliest").option("parse", "raw")
    for key, value in secure_kafka.config(COLLECTOR_USER).items():
        reader = reader.option(f"kafka.{key}", value)
    name = f"sasl_{uuid.uuid4().hex[:8]}"
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert query.exception() is None
    rows = spark.sql(f"SELECT count(*) AS n, count(DISTINCT offset) AS offsets FROM {name}").collect()
    assert (rows[0]["n"], rows[0]["offsets"]) == (N, N)


def test_acls_the_relay_user_cannot_read_and_the_collector_user_cannot_write(secure_kafka: SecureKafka) -> None:
    reader = Consumer(
        {**secure_kafka.config(RELAY_USER), "group.id": "never-joined", "enable.auto.commit": False, "log_level": 0}
    )
    errors: list[int] = []
    records = 0
    try:
        reader.assign([TopicPartition(secure_kafka.topic, 0, 0)])
        deadline = time.monotonic() + 30
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in errors and time.monotonic() < deadline:
            message = reader.poll(1.0)
            if message is not None:
                error = message.error()
                if error is None:
                    records += 1
                else:
                    errors.append(error.code())
    finally:
        reader.close()
    assert records == 0
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, errors

    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    writer = Producer({**secure_kafka.config(COLLECTOR_USER), "message.timeout.ms": 15_000, "log_level": 0})
    writer.produce(secure_kafka.topic, b"not allowed", on_delivery=on_delivery)
    assert writer.flush(30) == 0
    assert [err.code() for err in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    with pytest.raises(KafkaException):  # nor may it create topics
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({**secure_kafka.config(COLLECTOR_USER), "log_level": 0})
        admin.create_topics([NewTopic("sparktap.not-allowed", 1, 1)])["sparktap.not-allowed"].result(30)


def test_sparktap_collect_with_the_password_in_x_warns_and_never_logs_it(
    relayed: dict[str, Any], secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    assert relayed["delivered"] == N
    kafka = secure_kafka.config(COLLECTOR_USER)
    settings = collector_settings(secure_kafka, tmp_path)  # the SASL settings come from the environment and -X
    process = CollectorProcess(
        settings,
        tmp_path / "collector.log",
        env={
            "SPARKTAP_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
            "SPARKTAP_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
            "SPARKTAP_KAFKA__SASL_USERNAME": COLLECTOR_USER,
            "SPARKTAP_KAFKA__SSL_CA_LOCATION": kafka["ssl.ca.location"],
        },
    )
    process.argv += ["-X", f"sasl.password={kafka['sasl.password']}"]
    try:
        process.start()
        process.wait_metric("sparktap_collector_inserted_rows_total", lambda rows: rows >= N, timeout=90)
        assert process.metric("sparktap_collector_inserted_rows_total") == N
        assert process.terminate() == 0
    finally:
        process.close()
    log = process.log_path.read_text()
    assert kafka["sasl.password"] not in log
    warnings = [entry for entry in process.log_entries() if entry.get("level") == "warning"]
    assert [entry["msg"] for entry in warnings if "-X" in entry.get("msg", "")] == [
        "-X sasl.password=… puts a secret on the command line (visible in ps and the shell history); set it in the "
        "environment instead: SPARKTAP_KAFKA__SASL_PASSWORD"
    ]


def test_a_dead_letter_topic_the_user_may_not_write_is_one_error_line_not_a_crash(
    relayed: dict[str, Any], secure_kafka: SecureKafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert relayed["delivered"] == N
    kafka = secure_kafka.config(READER_USER)  # READ on the topic and the groups, no WRITE anywhere
    settings = collector_settings(
        secure_kafka,
        tmp_path,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=READER_USER,
        sasl_password=kafka["sasl.password"],
        ssl_ca_location=kafka["ssl.ca.location"],
    )
    with in_process(settings) as collector:  # stops cleanly: a raise here would fail the test
        wait_inserted(collector, N, timeout=60)
    dlq = [
        r.getMessage() for r in caplog.records if r.name == "sparktap.collector.kafka.dlq" and r.levelname == "ERROR"
    ]
    assert dlq == [
        f'dead-letter producer topic="{secure_kafka.topic}.dlq" failed: Failed to acquire idempotence PID from broker '
        f"sasl_ssl://{secure_kafka.bootstrap_servers}/1: Broker: Cluster authorization failed; the collector's Kafka "
        "user needs WRITE on the dead-letter topic (docs/collector.md)"
    ]
    assert kafka["sasl.password"] not in caplog.text
