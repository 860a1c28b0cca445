"""Collector settings and the collect command's options."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sparktap.collector.cli import _overrides, collect
from sparktap.collector.settings import CollectorSettings
from sparktap.config import parse_kafka_options
from sparktap.errors import ConfigError
from sparktap.settings import Settings, load_settings


def test_collector_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = CollectorSettings()
    assert (defaults.batch_rows, defaults.batch_interval_seconds) == (30_000, 1.0)
    assert (defaults.stream_rows, defaults.stream_seconds) == (200_000, 5.0)
    monkeypatch.setenv("SPARKTAP_COLLECTOR__BATCH_ROWS", "5000")
    monkeypatch.setenv("SPARKTAP_COLLECTOR__INSTANCE_ID", "collector-0")
    settings = load_settings()
    assert settings.collector.batch_rows == 5000 and settings.collector.instance_id == "collector-0"
    monkeypatch.setenv("SPARKTAP_COLLECTOR__BATCH_ROWS", "0")
    with pytest.raises(ConfigError, match="SPARKTAP_COLLECTOR__BATCH_ROWS"):
        load_settings()


def test_command_line_options_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_KAFKA__GROUP_ID", "from-env")
    overrides = _overrides(
        kafka__topic="t", kafka__group_id=None, collector__batch_rows=10, collector__plain_copy=False
    )
    assert overrides == {"kafka": {"topic": "t"}, "collector": {"batch_rows": 10}}
    settings = Settings(**overrides)  # type: ignore[arg-type]
    assert (settings.kafka.topic, settings.kafka.group_id, settings.collector.batch_rows) == ("t", "from-env", 10)
    assert parse_kafka_options(("session.timeout.ms=6000", "a=b=c")) == {"session.timeout.ms": "6000", "a": "b=c"}
    with pytest.raises(ConfigError, match="-X expects key=value"):
        parse_kafka_options(("nonsense",))


def test_collect_rejects_unknown_engines_and_bad_urls() -> None:
    result = CliRunner().invoke(collect, ["--engine", "flink"])
    assert result.exit_code == 2 and "'flink' is not one of 'consumer', 'spark'" in result.output
    result = CliRunner().invoke(collect, ["--storage-url", "ftp://host/x"])
    assert isinstance(result.exception, ConfigError)
    assert "unsupported storage URL scheme 'ftp'" in str(result.exception)


def test_librdkafkas_prefetch_is_bounded_by_the_byte_budget() -> None:
    from sparktap.collector.kafka.client import consumer_config
    from sparktap.collector.settings import IngestSettings

    def fetch(**collector: int) -> dict[str, object]:
        conf = consumer_config(IngestSettings(collector=collector), lambda err: None)
        return {k: conf.get(k) for k in ("queued.max.messages.kbytes", "fetch.max.bytes", "max.partition.fetch.bytes")}

    one = (1 << 20) + 1024  # never below one message of max_message_bytes (and librdkafka's message.max.bytes)
    assert fetch() == {
        "queued.max.messages.kbytes": 16_384,
        "fetch.max.bytes": 16 << 20,
        "max.partition.fetch.bytes": 4 << 20,  # a quarter of the prefetch per partition
    }
    assert fetch(batch_bytes=1 << 10) == {
        "queued.max.messages.kbytes": 1025,
        "fetch.max.bytes": one,
        "max.partition.fetch.bytes": one,
    }
    assert fetch(batch_bytes=4 << 20, max_message_bytes=3 << 20)["max.partition.fetch.bytes"] == (3 << 20) + 1024
    assert fetch(batch_bytes=256 << 20)["queued.max.messages.kbytes"] == 32_768  # fetch_queue_kbytes is smaller
    assert fetch(batch_bytes=0) == {
        "queued.max.messages.kbytes": 32_768,
        "fetch.max.bytes": None,
        "max.partition.fetch.bytes": None,
    }
