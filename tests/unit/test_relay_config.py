"""The relay's configuration line and the librdkafka settings derived from it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException

from sparktap.errors import ConfigError
from sparktap.listener.relay import _is_health, kafka_error_text, parse_config, translate_jaas


def line(**fields: object) -> bytes:
    base: dict[str, object] = {"protocol": 1, "app_id": "app-1", "kafka": {"bootstrap.servers": "k:9092"}}
    base.update(fields)
    return orjson.dumps(base)


def test_valid_line_with_defaults() -> None:
    config = parse_config(line())
    assert config.app_id == "app-1"
    assert config.topic == "sparktap.events"
    assert config.spool_dir.name.startswith("sparktap-spool-")
    assert (config.spool_max_bytes, config.buffer_max_events, config.status_interval_s) == (256 << 20, 100_000, 1.0)


def test_producer_settings_force_idempotence_and_acks_and_pass_the_rest_through(tmp_path: Path) -> None:
    config = parse_config(
        line(
            topic="events",
            spool_dir=str(tmp_path),
            buffer_max_events=5000,
            kafka={
                "bootstrap.servers": "k:9093",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "enable.idempotence": "false",
                "acks": "1",
                "compression.type": "lz4",
                "linger.ms": 7,
            },
        )
    )
    conf = config.librdkafka()
    assert conf["enable.idempotence"] == "true" and conf["acks"] == "all"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["compression.type"] == "lz4" and conf["linger.ms"] == "7"
    assert conf["bootstrap.servers"] == "k:9093"
    assert int(conf["queue.buffering.max.messages"]) > 5000
    assert config.spool_dir == tmp_path and config.topic == "events"


def test_default_compression_is_zstd() -> None:
    assert parse_config(line()).librdkafka()["compression.type"] == "zstd"


def test_java_jaas_config_becomes_librdkafka_username_and_password() -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr=t";'
    assert translate_jaas({"sasl.jaas.config": jaas, "a": "b"}) == {
        "a": "b",
        "sasl.username": "alice",
        "sasl.password": "s3cr=t",
    }
    assert translate_jaas({"sasl.jaas.config": jaas, "sasl.username": "bob"})["sasl.username"] == "bob"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "must be a JSON object"),
        (line(protocol=2), "protocol 2 is not 1"),
        (line(kafka={}), "--conf spark.sparktap.kafka.bootstrap.servers=host:9092"),
        (line(kafka="x"), "'kafka' must be an object"),
        (line(spool_max_bytes="lots"), "must be numbers"),
        (line(buffer_max_events=0), "buffer_max_events >= 1"),
    ],
)
def test_invalid_lines_are_one_clear_config_error(raw: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert message in str(info.value)


def test_kafka_error_text_never_echoes_a_value() -> None:
    err = KafkaException(KafkaError(KafkaError._INVALID_ARG, 'Invalid value "hunter2" for configuration property "x"'))
    assert kafka_error_text(err) == 'Invalid value for configuration property "x"'


def test_health_events_are_recognised_by_their_prefix() -> None:
    assert _is_health(b'{"schema_version":1,"event_type":"listener_health","cluster":"c"}')
    assert not _is_health(b'{"schema_version":1,"event_type":"task_end","note":"listener_health"}')
