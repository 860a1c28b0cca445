"""Transport-security settings without any process: secret -X options warn (never quoting the value), and the
ClickHouse CA bundle and client certificate come from the URL or the settings."""

from __future__ import annotations

from pathlib import Path

from sparktap.config import parse_kafka_options, secret_option_warnings
from sparktap.store.settings import ClickHouseSettings
from sparktap.store.target import parse_storage_url


def test_secret_x_options_warn_with_the_env_var_to_use_and_never_the_value() -> None:
    conf = parse_kafka_options(
        (
            "sasl.password=Canary-1",
            "ssl.key.password=Canary-2",
            "ssl.keystore.password=Canary-3",
            "sasl.oauthbearer.client.secret=Canary-4",
            "sasl.oauthbearer.token.endpoint.url=https://idp/x",
            "linger.ms=5",
            "sasl.username=relay",
        )
    )
    warnings = secret_option_warnings(conf)
    assert warnings[0] == (
        "-X sasl.password=… puts a secret on the command line (visible in ps and the shell history); set it in the "
        "environment instead: SPARKTAP_KAFKA__SASL_PASSWORD"
    )
    assert warnings[1].endswith("""instead: SPARKTAP_KAFKA__EXTRA='{"ssl.key.password": "…"}'""")
    assert [w.split("=", 1)[0] for w in warnings] == [
        "-X sasl.password",
        "-X ssl.key.password",
        "-X ssl.keystore.password",
        "-X sasl.oauthbearer.client.secret",
    ]  # not the token endpoint's URL
    assert not any("Canary" in w for w in warnings)
    assert secret_option_warnings(parse_kafka_options(("linger.ms=5", "security.protocol=SASL_SSL"))) == []


def test_clickhouse_ca_bundle_and_client_certificate_from_the_url_or_the_settings(tmp_path: Path) -> None:
    target = parse_storage_url(
        "clickhouses://u:pw@ch:9440/db?ca_certs=/etc/sparktap/ca.pem&certfile=/etc/c.pem&keyfile=/etc/k.pem"
    )
    assert (target.secure, target.verify, target.port) == (True, True, 9440)
    assert (target.ca_certs, target.certfile, target.keyfile) == (
        Path("/etc/sparktap/ca.pem"),
        Path("/etc/c.pem"),
        Path("/etc/k.pem"),
    )
    assert "ca.pem" not in target.redacted and "pw" not in target.redacted
    settings = ClickHouseSettings.model_validate(
        {"url": "clickhouses://u:pw@ch/db?ca_certs=/url/ca.pem", "ca_certs": str(tmp_path / "ca.pem")}
    )
    assert settings.target().ca_certs == tmp_path / "ca.pem"  # the setting overrides the URL
    assert parse_storage_url("clickhouse://u:pw@ch/db").ca_certs is None
