"""The relay's configuration: the first line the listener writes on the relay's stdin (RelayProcess.java), validated
into a RelayConfig, and the librdkafka producer settings made from it. Error messages never echo a setting's value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from sparktap import DEFAULT_TOPIC
from sparktap.errors import ConfigError
from sparktap.listener.redaction import scrub_text
from sparktap.listener.spool import default_spool_dir

PROTOCOL = 1
RESEND_CHUNK = 2000
"""Spooled events resent per step; the producer's queue has room for two chunks beside the live buffer."""

FORCED = {"enable.idempotence": "true", "acks": "all", "partitioner": "murmur2_random"}
"""Never negotiable: idempotence with every replica's ack, and the Java client's partitioner (murmur2 of the key:
the JVM transport's, so an application's events share one partition, and its order, whichever path sent them)."""
_CONFIG_KEYS = frozenset(
    {"protocol", "app_id", "topic", "kafka", "spool_dir", "spool_max_bytes", "buffer_max_events", "status_interval_ms"}
)


@dataclass(frozen=True)
class RelayConfig:
    """The first stdin line, validated."""

    app_id: str
    topic: str
    kafka: dict[str, str]
    spool_dir: Path
    spool_max_bytes: int = 256 << 20
    buffer_max_events: int = 100_000
    status_interval_s: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def librdkafka(self) -> dict[str, Any]:
        """Producer settings: pass-through values, then sparktap's defaults, then what is never negotiable."""
        conf: dict[str, Any] = {
            "client.id": "sparktap-relay",
            "compression.type": "zstd",
            "linger.ms": "250",
            "message.timeout.ms": "120000",
            "queue.buffering.max.kbytes": "262144",
        }
        conf.update(translate_jaas(self.kafka))
        conf["queue.buffering.max.messages"] = str(max(self.buffer_max_events + RESEND_CHUNK * 2, 1000))
        conf.update(FORCED)
        return conf


def translate_jaas(kafka: dict[str, str]) -> dict[str, str]:
    """librdkafka has no JAAS: take username/password out of a Java-style ``sasl.jaas.config``."""
    conf = dict(kafka)
    jaas = conf.pop("sasl.jaas.config", None)
    if jaas:
        for name, target in (("username", "sasl.username"), ("password", "sasl.password")):
            match = re.search(name + r'\s*=\s*"([^"]*)"', jaas)
            if match and target not in conf:
                conf[target] = match.group(1)
    return conf


def parse_config(line: bytes) -> RelayConfig:
    """Validate the configuration line; a ConfigError message never echoes a value."""
    try:
        raw = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"relay configuration line is not JSON ({type(exc).__name__}): the listener starts the relay"
        ) from exc
    if not isinstance(raw, dict):
        raise ConfigError("relay configuration line must be a JSON object")
    if raw.get("protocol") != PROTOCOL:
        raise ConfigError(f"relay protocol {raw.get('protocol')!r} is not {PROTOCOL}: listener jar and sparktap differ")
    kafka = raw.get("kafka") or {}
    if not isinstance(kafka, dict) or not all(isinstance(k, str) for k in kafka):
        raise ConfigError("relay configuration: 'kafka' must be an object of strings")
    kafka = {k: str(v) for k, v in kafka.items()}
    if not kafka.get("bootstrap.servers", "").strip():
        raise ConfigError(
            "spark.sparktap.kafka.bootstrap.servers is not set: "
            "add --conf spark.sparktap.kafka.bootstrap.servers=host:9092"
        )
    app_id = str(raw.get("app_id") or "unknown-app")
    topic = str(raw.get("topic") or DEFAULT_TOPIC)
    spool_dir = raw.get("spool_dir")
    try:
        spool_max = int(raw.get("spool_max_bytes", 256 << 20))
        buffer_max = int(raw.get("buffer_max_events", 100_000))
        interval = float(raw.get("status_interval_ms", 1000)) / 1000.0
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            "relay configuration: spool_max_bytes, buffer_max_events and status_interval_ms must be numbers"
        ) from exc
    if spool_max < 0 or buffer_max < 1 or interval <= 0:
        raise ConfigError("relay configuration: spool_max_bytes >= 0, buffer_max_events >= 1, status_interval_ms > 0")
    return RelayConfig(
        app_id=app_id,
        topic=topic,
        kafka=kafka,
        spool_dir=Path(spool_dir) if spool_dir else default_spool_dir(),
        spool_max_bytes=spool_max,
        buffer_max_events=buffer_max,
        status_interval_s=interval,
        extra={k: v for k, v in raw.items() if k not in _CONFIG_KEYS},
    )


def kafka_error_text(exc: BaseException) -> str:
    """librdkafka's message without any configuration value it may quote."""
    text = str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
    text = re.sub(r'Invalid value "[^"]*"', "Invalid value", text)
    return scrub_text(text)
