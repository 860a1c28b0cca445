"""The Helm chart helm/sparktap as its tests render it: Helm's own template engine (helm-python-sdk, Helm v4's Go SDK
as a native library: ``values.schema.json`` checks and ``fail`` included; no cluster, no helm binary) and
kubernetes-validate, each the test's skip or failure when missing; the chart rendered into a ``Render`` (its documents
and NOTES.txt); the CI values; the exported Grafana files a chart copy carries; and readers of a Deployment's one
container and its environment.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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


def helm_sdk() -> Any:
    """helm-python-sdk's module (``helm_python``)."""
    try:
        import helm_python
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable("helm-python-sdk", f"{exc}; pip install helm-python-sdk")
    return helm_python


def kubernetes_validate() -> Any:
    """kubernetes-validate's module."""
    try:
        import kubernetes_validate
    except ImportError as exc:  # pragma: no cover - depends on the environment
        unavailable("kubernetes-validate", f"{exc}; pip install kubernetes-validate")
    return kubernetes_validate


@dataclass
class Render:
    """One render of the chart: its manifests, NOTES.txt, and the files as Helm returned them."""

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


def copy_chart_with_files(dest: Path) -> Path:
    """A copy of the chart under ``dest`` with what `sparktap grafana export` would put under files/ (a dashboard,
    rules, a datasource)."""
    chart = dest / "sparktap"
    shutil.copytree(CHART, chart)
    (chart / "files" / "dashboards" / "Spark_Stages.json").write_text(json.dumps(DASHBOARD, ensure_ascii=False))
    (chart / "files" / "alerting" / "sparktap-rules.yaml").write_text(ALERTING)
    (chart / "files" / "datasources" / "clickhouse.yaml").write_text(DATASOURCE)
    return chart


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
