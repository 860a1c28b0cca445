"""The Helm chart helm/sparktap, rendered by Helm's own template engine and validated against Kubernetes schemas.

Rendering uses helm-python-sdk (Helm v4's Go SDK as a native library: the real engine, ``values.schema.json``
checks and ``fail`` included; no cluster, no helm binary). Every rendered manifest is validated with
kubernetes-validate in strict mode (unknown fields rejected) for the chart's lowest supported Kubernetes version and
the newest one kubernetes-validate ships schemas for.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparktap.detection.routing import load_routing
from sparktap.settings import load_settings
from tests.fixtures.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "sparktap"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
RELEASE = "sparktap"
NAMESPACE = "spark-telemetry"
# The chart's kubeVersion floor (Chart.yaml ">=1.29.0-0") and the newest schemas of kubernetes-validate 1.37.
KUBE_VERSIONS = ("1.29.0", "1.37.0")
# The pods' writable emptyDir (read-only root filesystem); also their $HOME.
TMP = "/tmp"  # noqa: S108 - a path inside the container, not a temporary file of this test
# Kinds kubernetes-validate has no schema for, and why they are checked field by field instead.
NOT_SCHEMA_VALIDATED = {
    "ServiceMonitor": "a prometheus-operator CRD (monitoring.coreos.com/v1): kubernetes-validate ships only the "
    "built-in Kubernetes APIs, and no registry package here provides the CRD's schema; "
    "test_service_monitors checks its fields instead",
}
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


@pytest.fixture(scope="module")
def helm() -> Any:
    try:
        import helm_python
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable("helm-python-sdk", f"{exc}; pip install helm-python-sdk")
    return helm_python


@pytest.fixture(scope="module")
def kv() -> Any:
    try:
        import kubernetes_validate
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable("kubernetes-validate", f"{exc}; pip install kubernetes-validate")
    return kubernetes_validate


@dataclass
class Render:
    docs: list[dict[str, Any]]
    notes: str
    raw: dict[str, str] = field(repr=False)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name]
        return found

    def objects(self) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in self.docs}


def render(helm: Any, values: dict[str, Any] | None = None, chart: Path = CHART) -> Render:
    with helm.Chart.load(str(chart)) as loaded:
        out: dict[str, str] = loaded.render(values, name=RELEASE, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Render(docs=docs, notes=notes, raw=out)


def full_values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(FULL_VALUES.read_text())
    return loaded


DASHBOARD = {"title": "Spark stages", "uid": "sparktap-stages", "panels": [{"type": "table", "title": "Skew <> & ü"}]}
ALERTING = """apiVersion: 1
groups:
  - orgId: 1
    name: sparktap
    folder: Spark
    interval: 1m
    rules:
      - uid: sparktap-task-skew
        title: Task-time skew
        annotations:
          summary: 'Stage {{ $labels.stage_id }} of {{ $labels.app_id }}: max/p50 = {{ $values.B }}'
"""
DATASOURCE = """apiVersion: 1
datasources:
  - name: ClickHouse
    type: grafana-clickhouse-datasource
    secureJsonData:
      password: $CLICKHOUSE_PASSWORD
"""


@pytest.fixture(scope="module")
def chart_with_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with what `sparktap grafana export` would put under files/ (a dashboard, rules, a datasource)."""
    chart = tmp_path_factory.mktemp("chart") / "sparktap"
    shutil.copytree(CHART, chart)
    (chart / "files" / "dashboards" / "Spark_Stages.json").write_text(json.dumps(DASHBOARD, ensure_ascii=False))
    (chart / "files" / "alerting" / "sparktap-rules.yaml").write_text(ALERTING)
    (chart / "files" / "datasources" / "clickhouse.yaml").write_text(DATASOURCE)
    return chart


@pytest.fixture(scope="module")
def default(helm: Any) -> Render:
    return render(helm)


@pytest.fixture(scope="module")
def full(helm: Any, chart_with_files: Path) -> Render:
    return render(helm, full_values(), chart_with_files)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = container(deployment)["env"]
    return env


def env_names(deployment: dict[str, Any]) -> list[str]:
    return [e["name"] for e in env_of(deployment)]


def env_value(deployment: dict[str, Any], name: str) -> str:
    (entry,) = [e for e in env_of(deployment) if e["name"] == name]
    assert set(entry) == {"name", "value"}, entry
    value: str = entry["value"]
    return value


def secret_ref(deployment: dict[str, Any], name: str) -> dict[str, str]:
    (entry,) = [e for e in env_of(deployment) if e["name"] == name]
    assert set(entry) == {"name", "valueFrom"}, f"{name} must come from a Secret, got {entry}"
    ref: dict[str, str] = entry["valueFrom"]["secretKeyRef"]
    return ref


def pod_address(deployment: dict[str, Any], name: str) -> bool:
    """Whether ``name`` is the pod's own address (the endpoints listen on 127.0.0.1 unless told: issue 41)."""
    (entry,) = [e for e in env_of(deployment) if e["name"] == name]
    return bool(entry == {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})


def walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


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


# --- everything switched on ----------------------------------------------------------------------------------


def test_full_objects(full: Render) -> None:
    assert full.objects() == {
        ("ServiceAccount", "sparktap-runner"),
        ("Deployment", "spark-telemetry-collector"),
        ("Deployment", "spark-telemetry-alerter"),
        ("PersistentVolumeClaim", "spark-telemetry-alerter-state"),
        ("Service", "spark-telemetry-collector"),
        ("Service", "spark-telemetry-alerter"),
        ("ServiceMonitor", "spark-telemetry-collector"),
        ("ServiceMonitor", "spark-telemetry-alerter"),
        ("Deployment", "spark-telemetry-follower"),
        ("PersistentVolumeClaim", "spark-telemetry-follower-checkpoint"),
        ("Service", "spark-telemetry-follower"),
        ("ServiceMonitor", "spark-telemetry-follower"),
        ("PodDisruptionBudget", "spark-telemetry-collector"),
        ("ConfigMap", "spark-telemetry-dashboard-spark-stages"),
        ("ConfigMap", "spark-telemetry-alerting-sparktap-rules"),
        ("ConfigMap", "spark-telemetry-datasource-clickhouse"),
        ("ConfigMap", "spark-telemetry-alerter-routing"),
    }
    assert full.all("Secret") == []  # existing Secrets only
    for doc in full.docs:
        assert doc["metadata"]["labels"]["team"] == "data-platform"


def test_full_collector_kafka_sasl_tls_and_clickhouse(full: Render) -> None:
    deployment = full.get("Deployment", "spark-telemetry-collector")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    assert c["image"] == "registry.example.com/platform/sparktap:0.1.0-rc1"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    assert env_names(deployment) == [
        "SPARKTAP_LOG_LEVEL",
        "HOME",
        "CLICKHOUSE_PASSWORD",
        "SPARKTAP_CLICKHOUSE__URL",
        "SPARKTAP_CLICKHOUSE__DATABASE",
        "SPARKTAP_CLICKHOUSE__CLUSTER",
        "SPARKTAP_CLICKHOUSE__RETENTION_DAYS",
        "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS",
        "SPARKTAP_KAFKA__TOPIC",
        "SPARKTAP_KAFKA__DLQ_TOPIC",
        "SPARKTAP_KAFKA__GROUP_ID",
        "SPARKTAP_KAFKA__SECURITY_PROTOCOL",
        "SPARKTAP_KAFKA__SASL_MECHANISM",
        "SPARKTAP_KAFKA__SASL_USERNAME",
        "SPARKTAP_KAFKA__SASL_PASSWORD",
        "SPARKTAP_KAFKA__SSL_CA_LOCATION",
        "SPARKTAP_KAFKA__EXTRA",
        "SPARKTAP_COLLECTOR__METRICS_PORT",
        "SPARKTAP_COLLECTOR__METRICS_HOST",
        "TZ",
    ]
    assert env_value(deployment, "SPARKTAP_KAFKA__SECURITY_PROTOCOL") == "SASL_SSL"
    assert env_value(deployment, "SPARKTAP_KAFKA__SASL_MECHANISM") == "SCRAM-SHA-512"
    assert env_value(deployment, "SPARKTAP_KAFKA__SASL_USERNAME") == "sparktap"
    assert secret_ref(deployment, "SPARKTAP_KAFKA__SASL_PASSWORD") == {"name": "kafka-sparktap-user", "key": "password"}
    assert env_value(deployment, "SPARKTAP_KAFKA__SSL_CA_LOCATION") == "/etc/sparktap/kafka-tls/ca.crt"
    assert json.loads(env_value(deployment, "SPARKTAP_KAFKA__EXTRA")) == {
        "fetch.max.bytes": "52428800",
        "client.rack": "eu-west-1a",
        "ssl.certificate.location": "/etc/sparktap/kafka-tls-client/user.crt",
        "ssl.key.location": "/etc/sparktap/kafka-tls-client/user.key",
    }
    # the ClickHouse password is spliced into the URL by the kubelet ($(VAR) refers to an earlier env entry)
    assert secret_ref(deployment, "CLICKHOUSE_PASSWORD") == {"name": "clickhouse-sparktap", "key": "password"}
    assert env_value(deployment, "SPARKTAP_CLICKHOUSE__URL") == (
        "clickhouse://sparktap:$(CLICKHOUSE_PASSWORD)@clickhouse.analytics:9440/spark?secure=true"
    )
    assert env_value(deployment, "SPARKTAP_CLICKHOUSE__DATABASE") == "spark_prod"
    assert env_value(deployment, "SPARKTAP_CLICKHOUSE__CLUSTER") == "analytics"
    assert env_value(deployment, "SPARKTAP_CLICKHOUSE__RETENTION_DAYS") == "90"
    assert c["volumeMounts"] == [
        {"name": "tmp", "mountPath": TMP},
        {"name": "kafka-tls", "mountPath": "/etc/sparktap/kafka-tls", "readOnly": True},
        {"name": "kafka-tls-client", "mountPath": "/etc/sparktap/kafka-tls-client", "readOnly": True},
        {"name": "spool", "mountPath": "/var/spool/sparktap"},
    ]
    assert pod["volumes"][1:3] == [
        {"name": "kafka-tls", "secret": {"secretName": "kafka-cluster-ca", "defaultMode": 0o440}},
        {"name": "kafka-tls-client", "secret": {"secretName": "sparktap-kafka-user", "defaultMode": 0o440}},
    ]
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["priorityClassName"] == "telemetry"
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert deployment["spec"]["template"]["metadata"]["labels"]["tier"] == "telemetry"
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9200"
    pdb = full.get("PodDisruptionBudget", "spark-telemetry-collector")
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]


def test_clickhouse_ca_bundle_is_mounted_and_named_in_both_processes(
    helm: Any, chart_with_files: Path, full: Render
) -> None:
    values = full_values()
    values["clickhouse"]["tls"] = {"existingSecret": "clickhouse-ca", "caKey": "ca.pem"}
    rendered = render(helm, values, chart_with_files)
    for name in ("spark-telemetry-collector", "spark-telemetry-alerter"):
        deployment = rendered.get("Deployment", name)
        assert env_value(deployment, "SPARKTAP_CLICKHOUSE__CA_CERTS") == "/etc/sparktap/clickhouse-tls/ca.pem"
        mounts = [m for m in container(deployment)["volumeMounts"] if m["name"] == "clickhouse-tls"]
        assert mounts == [{"name": "clickhouse-tls", "mountPath": "/etc/sparktap/clickhouse-tls", "readOnly": True}]
        volumes = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "clickhouse-tls"]
        assert volumes == [{"name": "clickhouse-tls", "secret": {"secretName": "clickhouse-ca", "defaultMode": 0o440}}]
    for deployment in full.all("Deployment"):  # without the value: no variable, no volume
        assert "SPARKTAP_CLICKHOUSE__CA_CERTS" not in env_names(deployment)
        assert "clickhouse-tls" not in json.dumps(deployment)


def test_full_alerter_runs_once_with_webhooks_from_secrets(full: Render) -> None:
    deployment = full.get("Deployment", "spark-telemetry-alerter")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two alerters, even during a rollout
    c = container(deployment)
    assert (c["command"], c["args"]) == (["sparktap"], ["alert"])
    assert c["ports"] == [{"name": "metrics", "containerPort": 9201, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert env_names(deployment) == [
        "SPARKTAP_LOG_LEVEL",
        "HOME",
        "CLICKHOUSE_PASSWORD",
        "SPARKTAP_CLICKHOUSE__URL",
        "SPARKTAP_CLICKHOUSE__DATABASE",
        "SPARKTAP_CLICKHOUSE__CLUSTER",
        "SPARKTAP_CLICKHOUSE__RETENTION_DAYS",
        "SPARKTAP_ALERTS__INTERVAL_SECONDS",
        "SPARKTAP_ALERTS__EVENT_DRIVEN",
        "SPARKTAP_ALERTS__FOLLOW_INTERVAL_SECONDS",
        "SPARKTAP_ALERTS__GRAFANA_URL",
        "SPARKTAP_ALERTS__SLACK_WEBHOOK_URL",
        "SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL",
        "SPARKTAP_ALERTS__WEBHOOK_URL",
        "SPARKTAP_ALERTS__ROUTING_PATH",
        "ONCALL_SLACK_URL",
        "DATA_ENG_TEAMS_URL",
        "SPARKTAP_ALERTS__METRICS_PORT",
        "SPARKTAP_ALERTS__METRICS_HOST",
        "SPARKTAP_ALERTS__STATE_PATH",
    ]
    assert pod_address(deployment, "SPARKTAP_ALERTS__METRICS_HOST")
    # the state, saved after every delivery, on a PVC: a restart neither repeats nor forgets a notification
    assert env_value(deployment, "SPARKTAP_ALERTS__STATE_PATH") == "/var/lib/sparktap/alerter-state.json"
    assert {"name": "state", "mountPath": "/var/lib/sparktap"} in c["volumeMounts"]
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "state", "persistentVolumeClaim": {"claimName": "spark-telemetry-alerter-state"}} in pod["volumes"]
    claim = full.get("PersistentVolumeClaim", "spark-telemetry-alerter-state")
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    assert env_value(deployment, "SPARKTAP_ALERTS__INTERVAL_SECONDS") == "30"
    assert env_value(deployment, "SPARKTAP_ALERTS__EVENT_DRIVEN") == "true"
    assert env_value(deployment, "SPARKTAP_ALERTS__FOLLOW_INTERVAL_SECONDS") == "1"
    assert env_value(deployment, "SPARKTAP_ALERTS__GRAFANA_URL") == "https://grafana.example.com"
    assert env_value(deployment, "SPARKTAP_ALERTS__METRICS_PORT") == "9201"
    assert secret_ref(deployment, "SPARKTAP_ALERTS__SLACK_WEBHOOK_URL") == {"name": "sparktap-webhooks", "key": "slack"}
    assert secret_ref(deployment, "SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL") == {"name": "sparktap-webhooks", "key": "teams"}
    assert secret_ref(deployment, "SPARKTAP_ALERTS__WEBHOOK_URL") == {"name": "sparktap-webhooks", "key": "generic"}
    service = full.get("Service", "spark-telemetry-alerter")
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "alerter"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9201, "targetPort": "metrics", "protocol": "TCP"}]


def test_full_follower_follows_the_log_pvc_into_kafka_with_a_checkpoint_pvc_and_probes(full: Render) -> None:
    deployment = full.get("Deployment", "spark-telemetry-follower")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # one writer of the checkpoint
    c = container(deployment)
    assert (c["command"], c["args"]) == (
        ["sparktap"],
        ["import", "/var/log/spark-events", "--follow", "--kafka-from-settings", "--live-check-from-settings",
         "--interval=20",
         "--checkpoint=/var/lib/sparktap/import-checkpoint.json", "--metrics-port=9202",
         "--metrics-host=$(POD_IP)"],
    )  # fmt: skip
    assert pod_address(deployment, "POD_IP")  # the follower's own default is 127.0.0.1 (issue 41)
    assert c["ports"] == [{"name": "metrics", "containerPort": 9202, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["resources"] == {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["eventlogs"] == {
        "name": "eventlogs", "mountPath": "/var/log/spark-events", "readOnly": True, "subPath": "spark-events",
    }  # fmt: skip
    assert mounts["checkpoint"] == {"name": "checkpoint", "mountPath": "/var/lib/sparktap"}
    assert {"kafka-tls", "kafka-tls-client"} <= set(mounts)  # the same Kafka as the collector, SASL_SSL + mTLS
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["eventlogs"]["persistentVolumeClaim"] == {"claimName": "spark-history-logs", "readOnly": True}
    assert volumes["checkpoint"]["persistentVolumeClaim"] == {"claimName": "spark-telemetry-follower-checkpoint"}
    claim = full.get("PersistentVolumeClaim", "spark-telemetry-follower-checkpoint")
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "fast-ssd",
        "resources": {"requests": {"storage": "128Mi"}},
    }
    names = env_names(deployment)
    assert {"SPARKTAP_KAFKA__BOOTSTRAP_SERVERS", "SPARKTAP_KAFKA__TOPIC", "SPARKTAP_KAFKA__SASL_PASSWORD"} <= set(names)
    # the collector's ClickHouse too: attempts the live listener already stored are skipped, not double-counted
    assert {"SPARKTAP_CLICKHOUSE__URL", "SPARKTAP_CLICKHOUSE__DATABASE", "CLICKHOUSE_PASSWORD"} <= set(names)
    assert secret_ref(deployment, "SPARKTAP_KAFKA__SASL_PASSWORD") == {"name": "kafka-sparktap-user", "key": "password"}
    service = full.get("Service", "spark-telemetry-follower")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9202, "targetPort": "metrics", "protocol": "TCP"}]
    assert (
        'Follower: one replica of `sparktap import --follow` on PVC spark-history-logs, every 20s -> "spark.telemetry"'
        in full.notes
    )


def test_follower_on_a_host_path_without_a_checkpoint_pvc(helm: Any, chart_with_files: Path) -> None:
    values = full_values()
    values["follower"]["logDir"] = {"persistentVolumeClaim": "", "hostPath": "/mnt/spark-events"}
    values["follower"]["checkpoint"] = {"enabled": False}
    rendered = render(helm, values, chart_with_files)
    assert ("PersistentVolumeClaim", "spark-telemetry-follower-checkpoint") not in rendered.objects()
    deployment = rendered.get("Deployment", "spark-telemetry-follower")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["eventlogs"] == {"name": "eventlogs", "hostPath": {"path": "/mnt/spark-events", "type": "Directory"}}
    assert "checkpoint" not in volumes
    assert "--checkpoint=/tmp/import-checkpoint.json" in container(deployment)["args"]  # the emptyDir


def test_alerter_routing_file_from_a_configmap_with_channel_urls_from_secrets(
    full: Render, helm: Any, chart_with_files: Path, tmp_path: Path
) -> None:
    deployment = full.get("Deployment", "spark-telemetry-alerter")
    path = env_value(deployment, "SPARKTAP_ALERTS__ROUTING_PATH")
    assert path == "/etc/sparktap/routing/routing.yaml"
    assert {"name": "routing", "mountPath": "/etc/sparktap/routing", "readOnly": True} in container(deployment)[
        "volumeMounts"
    ]
    pod = deployment["spec"]["template"]["spec"]
    assert {
        "name": "routing",
        "configMap": {
            "name": "spark-telemetry-alerter-routing",
            "items": [{"key": "routing.yaml", "path": "routing.yaml"}],
        },
    } in pod["volumes"]
    assert secret_ref(deployment, "ONCALL_SLACK_URL") == {"name": "sparktap-webhooks", "key": "oncall-slack"}
    assert secret_ref(deployment, "DATA_ENG_TEAMS_URL") == {"name": "spark-telemetry", "key": "data-eng-teams"}
    assert "checksum/routing" in deployment["spec"]["template"]["metadata"]["annotations"]
    # the ConfigMap holds the file as given, and it is a valid routing file
    data = full.get("ConfigMap", "spark-telemetry-alerter-routing")["data"]
    (tmp_path / "routing.yaml").write_text(data["routing.yaml"])
    routing = load_routing(tmp_path / "routing.yaml")
    assert [r.name for r in routing.routes] == ["prod-critical", "nightly"] and routing.default is None
    assert data["routing.yaml"] == full_values()["alerter"]["routing"]["config"]
    # an existing ConfigMap: none rendered, that one mounted
    values = full_values()
    values["alerter"]["routing"] = {**values["alerter"]["routing"], "config": "", "existingConfigMap": "my-routes"}
    rendered = render(helm, values, chart_with_files)
    assert [c["metadata"]["name"] for c in rendered.all("ConfigMap") if "routing" in c["metadata"]["name"]] == []
    volumes = rendered.get("Deployment", "spark-telemetry-alerter")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "my-routes", "items": [{"key": "routing.yaml", "path": "routing.yaml"}]} in [
        v.get("configMap") for v in volumes
    ]


@pytest.mark.parametrize(
    ("persistence", "claim"),
    [({"enabled": False}, None), ({"existingClaim": "alerts-state"}, "alerts-state")],
)
def test_alerter_state_without_a_pvc_or_on_an_existing_one(
    helm: Any, chart_with_files: Path, persistence: dict[str, Any], claim: str | None
) -> None:
    values = full_values()
    values["alerter"]["persistence"] = persistence
    rendered = render(helm, values, chart_with_files)
    assert [c for c in rendered.all("PersistentVolumeClaim") if "alerter" in c["metadata"]["name"]] == []
    deployment = rendered.get("Deployment", "spark-telemetry-alerter")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    if claim is None:  # on the /tmp emptyDir ($HOME), lost with the pod
        assert "state" not in volumes and "SPARKTAP_ALERTS__STATE_PATH" not in env_names(deployment)
    else:
        assert volumes["state"] == {"name": "state", "persistentVolumeClaim": {"claimName": claim}}


def test_service_monitors(full: Render) -> None:
    for component in ("collector", "alerter", "follower"):
        monitor = full.get("ServiceMonitor", f"spark-telemetry-{component}")
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        service = full.get("Service", f"spark-telemetry-{component}")
        assert monitor["spec"] == {
            "selector": {"matchLabels": service["spec"]["selector"]},
            "namespaceSelector": {"matchNames": [NAMESPACE]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}],
        }
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def test_grafana_configmaps_carry_the_files_verbatim(full: Render, chart_with_files: Path) -> None:
    dashboard = full.get("ConfigMap", "spark-telemetry-dashboard-spark-stages")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Spark"}
    exported = (chart_with_files / "files" / "dashboards" / "Spark_Stages.json").read_text()
    assert dashboard["data"] == {"Spark_Stages.json": exported}
    assert json.loads(dashboard["data"]["Spark_Stages.json"]) == DASHBOARD
    alerting = full.get("ConfigMap", "spark-telemetry-alerting-sparktap-rules")
    assert alerting["metadata"]["labels"]["grafana_alert"] == "1"
    assert "grafana_dashboard" not in alerting["metadata"]["labels"]
    # Grafana's own template syntax survives: the file is not run through Helm's engine
    assert alerting["data"] == {"sparktap-rules.yaml": ALERTING}
    datasource = full.get("ConfigMap", "spark-telemetry-datasource-clickhouse")
    assert datasource["metadata"]["labels"]["grafana_datasource"] == "1"
    assert datasource["data"] == {"clickhouse.yaml": DATASOURCE}


def test_grafana_labels_are_configurable_and_datasources_off_by_default(helm: Any, chart_with_files: Path) -> None:
    rendered = render(
        helm, {"grafana": {"dashboards": {"label": "dashboards", "labelValue": "sparktap"}}}, chart_with_files
    )
    (dashboard,) = [d for d in rendered.all("ConfigMap") if "dashboard" in d["metadata"]["name"]]
    assert dashboard["metadata"]["labels"]["dashboards"] == "sparktap"
    assert "grafana_dashboard" not in dashboard["metadata"]["labels"]
    assert sorted(d["metadata"]["name"] for d in rendered.all("ConfigMap")) == [
        "sparktap-alerting-sparktap-rules",
        "sparktap-dashboard-spark-stages",
    ]


# --- secrets -------------------------------------------------------------------------------------------------


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
