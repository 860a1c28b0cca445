"""The Helm chart helm/sparktap, rendered by Helm's own template engine and validated against Kubernetes schemas:
every manifest of the default render and of ``ci/full-values.yaml``'s, the default render's objects, labels,
collector, PDB, Service and NOTES, and the values the chart refuses, each with one clear message.

Rendering uses helm-python-sdk (Helm v4's Go SDK as a native library: the real engine, ``values.schema.json``
checks and ``fail`` included; no cluster, no helm binary). Every rendered manifest is validated with
kubernetes-validate in strict mode (unknown fields rejected) for the chart's lowest supported Kubernetes version and
the newest one kubernetes-validate ships schemas for. Everything switched on is ``test_helm_chart_full.py``, the
Secrets ``test_helm_chart_secrets.py``; the three share ``tests/support/helm_chart.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.helm_chart import (
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    TMP,
    Render,
    container,
    env_names,
    env_value,
    full_values,
    pod_address,
    render,
    secret_ref,
)

# Kinds kubernetes-validate has no schema for, and why they are checked field by field instead.
NOT_SCHEMA_VALIDATED = {
    "ServiceMonitor": "a prometheus-operator CRD (monitoring.coreos.com/v1): kubernetes-validate ships only the "
    "built-in Kubernetes APIs, and no registry package here provides the CRD's schema; "
    "test_helm_chart_full.py's test_service_monitors checks its fields instead",
}

pytestmark = pytest.mark.integration


# --- every manifest is a valid Kubernetes object --------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("which", ["default", "full"])
def test_every_manifest_validates_strictly(
    request: pytest.FixtureRequest, kv: Any, which: str, kube_version: str
) -> None:
    rendered: Render = request.getfixturevalue(which)
    validated: list[str] = []
    for doc in rendered.docs:
        if doc["kind"] in NOT_SCHEMA_VALIDATED:
            # Proves the exemption is still needed: the day kubernetes-validate knows the kind, validate it.
            with pytest.raises(kv.SchemaNotFoundError):
                kv.validate(doc, kube_version, strict=True)
            continue
        try:
            kv.validate(doc, kube_version, strict=True)
        except kv.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes {kube_version}: {path}: {exc.message}"
            )
        validated.append(doc["kind"])
    expected = {
        "default": ["Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"],
        "full": ["ConfigMap"] * 4
        + ["Deployment"] * 3
        + ["PersistentVolumeClaim"] * 2
        + ["PodDisruptionBudget"]
        + ["Service"] * 3
        + ["ServiceAccount"],
    }[which]
    assert sorted(validated) == expected


def test_the_validator_is_strict(kv: Any, default: Render) -> None:
    """Negative control: a misspelt field in a rendered Deployment is rejected, so a pass above means something."""
    deployment = json.loads(json.dumps(default.get("Deployment", "sparktap-collector")))
    container(deployment)["livenessProbe"]["httpGet"]["paht"] = "/healthz"
    with pytest.raises(kv.ValidationError, match="paht"):
        kv.validate(deployment, KUBE_VERSIONS[0], strict=True)


def test_lint_is_clean(helm: Any, chart_with_files: Path) -> None:
    for values in (None, full_values()):
        report = helm.lint(str(chart_with_files), values, strict=True, kube_version="v" + KUBE_VERSIONS[0])
        problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 = warning, 3 = error
        assert problems == [] and report["errors"] == []


# --- defaults ------------------------------------------------------------------------------------------------


def test_default_objects(default: Render) -> None:
    assert default.objects() == {
        ("ServiceAccount", "sparktap"),
        ("Deployment", "sparktap-collector"),
        ("Service", "sparktap-collector"),
        ("PodDisruptionBudget", "sparktap-collector"),
    }  # no alerter, no Secret (never by default), no ConfigMap while files/ holds only the README placeholders
    for doc in default.docs:
        assert doc["metadata"]["namespace"] == NAMESPACE
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "sparktap"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/part-of"] == "sparktap"
        assert labels["helm.sh/chart"] == "sparktap-0.1.0"


def test_default_collector(default: Render) -> None:
    deployment = default.get("Deployment", "sparktap-collector")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "collector"
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    assert c["image"] == "ghcr.io/sparktap/sparktap:0.1.0"
    assert (c["command"], c["args"]) == (["sparktap"], ["collect"])
    assert c["ports"] == [{"name": "metrics", "containerPort": 9108, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}  # store up, partitions owned
    assert c["livenessProbe"]["failureThreshold"] == 6
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "320Mi"}, "limits": {"cpu": "1", "memory": "640Mi"}}
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # read-only root: /tmp is an emptyDir, and $HOME points there
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": TMP}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "sparktap"
    assert pod["terminationGracePeriodSeconds"] == 60
    assert env_names(deployment) == [
        "SPARKTAP_LOG_LEVEL",
        "HOME",
        "SPARKTAP_CLICKHOUSE__URL",
        "SPARKTAP_CLICKHOUSE__RETENTION_DAYS",
        "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS",
        "SPARKTAP_KAFKA__TOPIC",
        "SPARKTAP_KAFKA__GROUP_ID",
        "SPARKTAP_KAFKA__SECURITY_PROTOCOL",
        "SPARKTAP_COLLECTOR__METRICS_PORT",
        "SPARKTAP_COLLECTOR__METRICS_HOST",
    ]
    assert pod_address(deployment, "SPARKTAP_COLLECTOR__METRICS_HOST")
    assert [
        env_value(deployment, n)
        for n in (
            "SPARKTAP_LOG_LEVEL",
            "HOME",
            "SPARKTAP_CLICKHOUSE__RETENTION_DAYS",
            "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS",
            "SPARKTAP_KAFKA__TOPIC",
            "SPARKTAP_KAFKA__GROUP_ID",
            "SPARKTAP_KAFKA__SECURITY_PROTOCOL",
            "SPARKTAP_COLLECTOR__METRICS_PORT",
        )
    ] == ["INFO", TMP, "30", "kafka:9092", "sparktap.events", "sparktap-collector", "PLAINTEXT", "9108"]
    assert secret_ref(deployment, "SPARKTAP_CLICKHOUSE__URL") == {"name": "sparktap", "key": "clickhouse-url"}


def test_default_pdb_and_service_select_the_collector_pods(default: Render) -> None:
    deployment = default.get("Deployment", "sparktap-collector")
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector == {
        "app.kubernetes.io/name": "sparktap",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "collector",
    }
    assert selector.items() <= pod_labels.items()
    pdb = default.get("PodDisruptionBudget", "sparktap-collector")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    service = default.get("Service", "sparktap-collector")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9108, "targetPort": "metrics", "protocol": "TCP"}]


def test_default_notes_say_which_secret_to_create(default: Render) -> None:
    assert f"kubectl -n {NAMESPACE} create secret generic sparktap" in default.notes
    assert "--from-literal=clickhouse-url='...'" in default.notes
    assert "Alerter: disabled" in default.notes


# --- bad values fail the render with a clear message ---------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"collector": {"replica": 3}}, "at '/collector': additional properties 'replica' not allowed"),
        ({"collector": {"replicas": "two"}}, "at '/collector/replicas': got string, want integer"),
        ({"alerter": {"replicas": 2}}, "at '/alerter': additional properties 'replicas' not allowed"),
        ({"securityContext": {"runAsNonroot": True}}, "additional properties 'runAsNonroot' not allowed"),
        ({"kafka": {"securityProtocol": "TLS"}}, "at '/kafka/securityProtocol': value must be one of"),
        (
            {"clickhouse": {"url": "chdb:///var/lib/sparktap"}},
            "at '/clickhouse/url': 'chdb:///var/lib/sparktap' does not match pattern",
        ),
        ({"collector": {"metricsPort": 80}}, "at '/collector/metricsPort': minimum: got 80, want 1,024"),
        ({"kafka": {"extra": {"sasl.password": "x"}}}, "at '/kafka/extra/sasl.password': 'not' failed"),
        (
            {"kafka": {"extra": {"fetch.max.bytes": 1048576}}},
            "at '/kafka/extra/fetch.max.bytes': got number, want string",
        ),
    ],
)
def test_schema_rejects_bad_values(helm: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError) as info:
        render(helm, values)
    text = str(info.value)
    assert "values don't meet the specifications of the schema(s)" in text
    assert message in text


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kafka": {"securityProtocol": "SASL_SSL"}}, "kafka.securityProtocol=SASL_SSL needs kafka.sasl.mechanism"),
        (
            {"kafka": {"securityProtocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "SCRAM-SHA-256"}}},
            "kafka.sasl.mechanism=SCRAM-SHA-256 needs kafka.sasl.username",
        ),
        ({"alerter": {"enabled": True}}, "alerter.enabled=true needs at least one notification target"),
        (
            {"alerter": {"enabled": True, "routing": {"enabled": True}}},
            "alerter.routing.enabled=true needs the routing file: alerter.routing.config",
        ),
        ({"clickhouse": {"url": "clickhouse://u:hunter2@ch:9000/db"}}, "clickhouse.url must not contain a password"),
        (
            {"kafka": {"tls": {"existingSecret": "ca"}}},
            "kafka.tls.existingSecret is set but kafka.securityProtocol=PLAINTEXT",
        ),
        ({"createSecret": True}, "createSecret=true: set secretValues.clickhouseUrl"),
        (
            {"follower": {"enabled": True}},
            "follower.enabled needs the event log directory: set exactly one of follower.logDir.persistentVolumeClaim",
        ),
    ],
)
def test_inconsistent_values_fail_with_one_clear_message(helm: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError) as info:
        render(helm, values)
    assert message in str(info.value)
    assert "hunter2" not in str(info.value)
