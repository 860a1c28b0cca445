"""The Helm chart helm/sparktap and Secrets: every secret variable of every Deployment comes from a secretKeyRef
(the ClickHouse URL holds only a reference to the password), ``createSecret`` puts the values in the Secret and
nowhere else (raw or base64, NOTES included) and rolls the pods when it changes, and the environment the kubelet
would hand the collector loads into sparktap's settings. Rendered by Helm's own engine (helm-python-sdk), as in
``test_helm_chart.py``.
"""

from __future__ import annotations

import base64
import os
import re
from typing import Any

import pytest
import yaml

from sparktap.settings import load_settings
from tests.support.helm_chart import (
    Render,
    env_of,
    env_value,
    render,
    secret_ref,
)

# Environment variables that must only ever come from a Secret.
SECRET_ENV = {
    "SPARKTAP_CLICKHOUSE__URL",
    "CLICKHOUSE_PASSWORD",
    "SPARKTAP_KAFKA__SASL_PASSWORD",
    "SPARKTAP_ALERTS__SLACK_WEBHOOK_URL",
    "SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL",
    "SPARKTAP_ALERTS__WEBHOOK_URL",
}

pytestmark = pytest.mark.integration


def test_secret_env_always_comes_from_secret_key_refs(full: Render, default: Render) -> None:
    for rendered in (default, full):
        for deployment in rendered.all("Deployment"):
            for entry in env_of(deployment):
                if entry["name"] in SECRET_ENV and entry["name"] != "SPARKTAP_CLICKHOUSE__URL":
                    assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], entry
    # in the full render the ClickHouse URL holds only a reference to the password, never a password
    collector = full.get("Deployment", "spark-telemetry-collector")
    url = env_value(collector, "SPARKTAP_CLICKHOUSE__URL")
    assert re.fullmatch(r"clickhouse://sparktap:\$\(CLICKHOUSE_PASSWORD\)@[^:]+:9440/spark\?secure=true", url)


def test_create_secret_keeps_values_out_of_everything_but_the_secret(helm: Any) -> None:
    canaries = {
        "clickhouseUrl": "clickhouse://w:ch-canary-1f9@ch:9000/spark",
        "kafkaSaslPassword": "sasl-canary-77a",
        "slackWebhookUrl": "https://hooks.slack.com/services/T0/B0/slack-canary-3c1",
        "teamsWebhookUrl": "https://example.webhook.office.com/teams-canary-9d2",
        "webhookUrl": "https://hooks.example.com/generic-canary-4e8",
    }
    values = {
        "createSecret": True,
        "secretValues": canaries,
        "kafka": {"securityProtocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "PLAIN", "username": "svc"}},
        "alerter": {
            "enabled": True,
            "slack": {"enabled": True},
            "teams": {"enabled": True},
            "webhook": {"enabled": True},
        },
    }
    rendered = render(helm, values)
    (secret,) = rendered.all("Secret")
    assert secret["metadata"]["name"] == "sparktap"
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {
        "clickhouse-url": canaries["clickhouseUrl"],
        "kafka-sasl-password": canaries["kafkaSaslPassword"],
        "slack-webhook-url": canaries["slackWebhookUrl"],
        "teams-webhook-url": canaries["teamsWebhookUrl"],
        "webhook-url": canaries["webhookUrl"],
    }
    collector = rendered.get("Deployment", "sparktap-collector")
    alerter = rendered.get("Deployment", "sparktap-alerter")
    assert secret_ref(collector, "SPARKTAP_KAFKA__SASL_PASSWORD") == {"name": "sparktap", "key": "kafka-sasl-password"}
    assert secret_ref(alerter, "SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL") == {"name": "sparktap", "key": "teams-webhook-url"}
    # pods roll when the Secret changes
    for deployment in (collector, alerter):
        checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
        assert re.fullmatch(r"[0-9a-f]{64}", checksum)
    # no canary, raw or base64, anywhere but the Secret (NOTES included)
    outside = "\n".join(yaml.safe_dump(d) for d in rendered.docs if d["kind"] != "Secret") + rendered.notes
    for value in canaries.values():
        (token,) = re.findall(r"[a-z]+-canary-[0-9a-f]+", value)
        for form in (value, base64.b64encode(value.encode()).decode(), token):
            assert form not in outside
    assert "WARNING: createSecret=true" in rendered.notes


def test_rendered_env_is_understood_by_the_settings(full: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the kubelet would hand the collector (Secrets resolved, $(VAR) expanded) loads into sparktap's Settings."""
    secrets = {("clickhouse-sparktap", "password"): "ch-pw", ("kafka-sparktap-user", "password"): "sasl-pw"}
    env: dict[str, str] = {}
    for entry in env_of(full.get("Deployment", "spark-telemetry-collector")):
        if "fieldRef" in entry.get("valueFrom", {}):  # the pod's address, from the downward API
            assert entry["valueFrom"]["fieldRef"] == {"fieldPath": "status.podIP"}, entry
            env[entry["name"]] = "10.1.2.3"
        elif "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[(ref["name"], ref["key"])]
        else:
            env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], entry["value"])
    for key in list(os.environ):
        if key.startswith("SPARKTAP_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.log_level == "DEBUG"
    assert settings.kafka.librdkafka() == {
        "bootstrap.servers": "kafka-0.kafka:9093,kafka-1.kafka:9093,kafka-2.kafka:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "sparktap",
        "sasl.password": "sasl-pw",
        "ssl.ca.location": "/etc/sparktap/kafka-tls/ca.crt",
        "ssl.certificate.location": "/etc/sparktap/kafka-tls-client/user.crt",
        "ssl.key.location": "/etc/sparktap/kafka-tls-client/user.key",
        "fetch.max.bytes": "52428800",
        "client.rack": "eu-west-1a",
    }
    assert (settings.kafka.topic, settings.kafka.dead_letter_topic, settings.kafka.group_id) == (
        "spark.telemetry",
        "spark.telemetry.dead",
        "sparktap-prod",
    )
    target = settings.clickhouse.target()
    assert (target.kind, target.host, target.port, target.user, target.database, target.secure, target.cluster) == (
        "clickhouse",
        "clickhouse.analytics",
        9440,
        "sparktap",
        "spark_prod",
        True,
        "analytics",
    )
    assert target.password.get_secret_value() == "ch-pw"
    assert settings.clickhouse.retention_days == 90
    from sparktap.collector.settings import load_ingest_settings

    assert load_ingest_settings().collector.metrics_host == "10.1.2.3"  # the endpoints listen on the pod's address
