"""Settings: environment variables, nested groups, secrets, one clear error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktap.errors import ConfigError
from sparktap.settings import load_settings
from sparktap.store.target import DEFAULT_CHDB_PATH, parse_storage_url


def test_defaults_are_the_embedded_store_and_local_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("SPARKTAP_"):
            monkeypatch.delenv(key)
    settings = load_settings()
    target = settings.clickhouse.target()
    assert target.kind == "chdb"
    assert target.path == DEFAULT_CHDB_PATH
    assert target.database == "sparktap"
    assert settings.kafka.topic == "sparktap.events"
    assert settings.kafka.dead_letter_topic == "sparktap.events.dlq"


def test_nested_env_vars_and_passthrough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_KAFKA__BOOTSTRAP_SERVERS", "k1:9093,k2:9093")
    monkeypatch.setenv("SPARKTAP_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SPARKTAP_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("SPARKTAP_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("SPARKTAP_KAFKA__SASL_PASSWORD", "s3cr3t-canary")
    monkeypatch.setenv("SPARKTAP_KAFKA__EXTRA", '{"ssl.endpoint.identification.algorithm": "https"}')
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", "clickhouse://writer:pw-canary@ch.internal:9440/spark?secure=true")
    settings = load_settings()
    conf = settings.kafka.librdkafka()
    assert conf == {
        "bootstrap.servers": "k1:9093,k2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "s3cr3t-canary",
        "ssl.endpoint.identification.algorithm": "https",
    }
    target = settings.clickhouse.target()
    assert (target.kind, target.host, target.port, target.user, target.database, target.secure) == (
        "clickhouse",
        "ch.internal",
        9440,
        "writer",
        "spark",
        True,
    )
    assert target.password.get_secret_value() == "pw-canary"
    # secrets never show in reprs or the loggable form
    for text in (repr(settings), str(settings), target.redacted, repr(target)):
        assert "s3cr3t-canary" not in text
        assert "pw-canary" not in text
    assert target.redacted == "clickhouses://writer:***@ch.internal:9440/spark"


def test_bad_setting_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_KAFKA__SECURITY_PROTOCOL", "TLS")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("invalid setting SPARKTAP_KAFKA__SECURITY_PROTOCOL:")


def test_bad_storage_url_does_not_echo_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", "mysql://u:pw-canary@h/db")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "pw-canary" not in str(info.value)
    assert "SPARKTAP_CLICKHOUSE__URL" in str(info.value)
    assert "unsupported storage URL scheme 'mysql'" in str(info.value)


def test_chdb_url_forms(tmp_path: Path) -> None:
    target = parse_storage_url(f"chdb://{tmp_path}/store?database=tele")
    assert (target.kind, target.path, target.database) == ("chdb", tmp_path / "store", "tele")
    assert parse_storage_url("clickhouse://h").port == 9000
    assert parse_storage_url("clickhouse://h?secure=1").port == 9440
