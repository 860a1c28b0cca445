"""The Helm chart helm/sparktap with everything switched on (``ci/full-values.yaml``, plus sample exported Grafana
files): the objects and labels, the collector on Kafka with SASL and TLS and on ClickHouse with a password from a
Secret (and a CA bundle), the alerter (one replica, webhooks from Secrets, its state on a PVC or not, a routing file
from a ConfigMap), the follower (the event log PVC into Kafka, a checkpoint PVC or a host path), the ServiceMonitors
field by field (kubernetes-validate has no schema for that CRD), and the Grafana ConfigMaps carrying the files
verbatim under configurable labels. Rendered by Helm's own engine (helm-python-sdk), as in ``test_helm_chart.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection.routing import load_routing
from tests.support.helm_chart import (
    ALERTING,
    DASHBOARD,
    DATASOURCE,
    NAMESPACE,
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

pytestmark = pytest.mark.integration


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
