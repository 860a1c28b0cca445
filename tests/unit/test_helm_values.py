"""helm/sparktap values: the schema itself, the shipped values files, and the env var names the chart uses.

Pure Python (jsonschema, no Helm): the rendering and Kubernetes validation live in
tests/integration/test_helm_chart.py (everything switched on in test_helm_chart_full.py, Secrets in
test_helm_chart_secrets.py).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from sparktap.collector.memory import peak_rss_bound_mib
from sparktap.collector.settings import CollectorSettings
from sparktap.settings import Settings

CHART = Path(__file__).resolve().parents[2] / "helm" / "sparktap"
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
VALIDATOR = Draft7Validator(SCHEMA)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values over the chart's defaults (what the schema is checked against)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


FULL: dict[str, Any] = merge(DEFAULTS, yaml.safe_load((CHART / "ci" / "full-values.yaml").read_text()))


def errors(values: dict[str, Any]) -> list[str]:
    return [f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(values)]


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def object_paths(
    values: dict[str, Any], schema: dict[str, Any], path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], bool]]:
    """Every mapping in the values with whether its schema rejects unknown keys."""
    schema = resolve(schema)
    found = [(path, schema.get("additionalProperties") is False)]
    for key, value in values.items():
        if isinstance(value, dict) and key in schema.get("properties", {}):
            found += object_paths(value, schema["properties"][key], (*path, key))
    return found


def test_schema_is_valid_draft_07() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("values", [DEFAULTS, FULL], ids=["values.yaml", "ci/full-values.yaml"])
def test_shipped_values_are_valid(values: dict[str, Any]) -> None:
    assert errors(values) == []


def test_every_key_of_values_yaml_is_in_the_schema() -> None:
    def walk(values: dict[str, Any], schema: dict[str, Any], path: str) -> None:
        schema = resolve(schema)
        if schema.get("additionalProperties") is not False:
            return  # a free-form map (labels, annotations, resource names, librdkafka properties)
        for key, value in values.items():
            assert key in schema["properties"], f"{path}{key} has no schema"
            if isinstance(value, dict) and value:
                walk(value, schema["properties"][key], f"{path}{key}.")

    walk(DEFAULTS, SCHEMA, "")


def test_unknown_keys_are_rejected_everywhere_but_free_form_maps() -> None:
    free_form = []
    for path, strict in object_paths(DEFAULTS, SCHEMA):
        if not strict:
            free_form.append(".".join(path))
            continue
        values = copy.deepcopy(DEFAULTS)
        node = values
        for key in path:
            node = node[key]
        node["typoKey"] = "x"
        where = "/" + "/".join(path)
        assert errors(values) == [f"{where}: Additional properties are not allowed ('typoKey' was unexpected)"]
    # maps whose keys are the user's: labels, annotations, resource names, librdkafka properties
    assert sorted(free_form) == [
        "alerter.nodeSelector",
        "alerter.podAnnotations",
        "alerter.podLabels",
        "alerter.resources.limits",
        "alerter.resources.requests",
        "alerter.service.annotations",
        "collector.nodeSelector",
        "collector.podAnnotations",
        "collector.podLabels",
        "collector.resources.limits",
        "collector.resources.requests",
        "collector.service.annotations",
        "commonLabels",
        "follower.nodeSelector",
        "follower.podAnnotations",
        "follower.podLabels",
        "follower.resources.limits",
        "follower.resources.requests",
        "follower.service.annotations",
        "grafana.alerting.annotations",
        "grafana.dashboards.annotations",
        "grafana.datasources.annotations",
        "kafka.extra",
        "metrics.serviceMonitor.labels",
        "serviceAccount.annotations",
    ]


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"collector": {"replicas": -1}}, "/collector/replicas: -1 is less than the minimum of 0"),
        ({"logLevel": "TRACE"}, "/logLevel: 'TRACE' is not one of ['DEBUG', 'INFO', 'WARNING', 'ERROR']"),
        ({"image": {"digest": "sha256:abc"}}, "/image/digest: 'sha256:abc' does not match '^(sha256:[a-f0-9]{64})?$'"),
        (
            {"kafka": {"sasl": {"mechanism": "GSSAPI"}}},
            "/kafka/sasl/mechanism: 'GSSAPI' is not one of "
            "['', 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512', 'OAUTHBEARER']",
        ),
        (
            {"clickhouse": {"existingSecret": "Bad_Name"}},
            "/clickhouse/existingSecret: 'Bad_Name' does not match "
            "'^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$'",
        ),
    ],
)
def test_bad_values_are_named_by_path(patch: dict[str, Any], expected: str) -> None:
    assert errors(merge(DEFAULTS, patch)) == [expected]


def test_no_secret_values_by_default() -> None:
    assert DEFAULTS["createSecret"] is False
    assert set(DEFAULTS["secretValues"].values()) == {""}
    assert DEFAULTS["alerter"]["enabled"] is False
    assert "replicas" not in DEFAULTS["alerter"]  # one alerter, always: two would notify twice


ENV_BLOCK = re.search(
    r'\{\{- define "sparktap\.envNames" -\}\}\n(.*?)\{\{- end \}\}',
    (CHART / "templates" / "_helpers.tpl").read_text(),
    re.S,
)


def test_env_names_are_spelled_in_one_place_only() -> None:
    assert ENV_BLOCK is not None
    for template in sorted((CHART / "templates").iterdir()):
        text = template.read_text()
        if template.name == "_helpers.tpl":
            text = text.replace(ENV_BLOCK.group(0), "")
        assert re.findall(r"SPARKTAP_\w+", text) == [], template.name


def test_env_names_match_the_settings_groups_that_exist() -> None:
    """A name in a group sparktap.settings.Settings already has must be one of that group's fields."""
    assert ENV_BLOCK is not None
    names: dict[str, str] = yaml.safe_load(ENV_BLOCK.group(1))
    checked = 0
    for name in names.values():
        match = re.fullmatch(r"SPARKTAP_([A-Z0-9_]+?)(?:__([A-Z0-9_]+))?", name)
        if match is None:
            assert name in ("HOME", "CLICKHOUSE_PASSWORD")  # $HOME on /tmp; the kubelet's $(VAR) for the URL
            continue
        group, item = match.group(1).lower(), (match.group(2) or "").lower()
        if not item:
            assert group in Settings.model_fields, name
            checked += 1
        elif group in Settings.model_fields:
            model = Settings.model_fields[group].annotation
            assert item in getattr(model, "model_fields", {}), f"{name}: {model} has no field {item!r}"
            checked += 1
    assert checked >= 14  # log level + the kafka and clickhouse groups; collector/alerts join as they land


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * (1024 if unit == "Gi" else 1)


def test_collector_memory_is_derived_from_the_documented_bound() -> None:
    """The chart runs against a ClickHouse server with the collector's default byte budget: its memory request
    covers the documented peak RSS (collector/memory.py, docs/collector.md) and its limit is twice the request."""
    defaults = CollectorSettings()
    bound = peak_rss_bound_mib("clickhouse", defaults.batch_bytes, defaults.max_message_bytes)
    resources = DEFAULTS["collector"]["resources"]
    request, limit = _mebibytes(resources["requests"]["memory"]), _mebibytes(resources["limits"]["memory"])
    assert (bound, request, limit) == (304.5, 320.0, 640.0)
    assert bound <= request and limit == 2 * request


@pytest.mark.parametrize(
    ("template", "name"), [("collector", "collectorMetricsHost"), ("alerter", "alertsMetricsHost")]
)
def test_the_endpoints_listen_on_the_pods_address(template: str, name: str) -> None:
    """``/metrics`` and the probes listen on 127.0.0.1 unless told (issue 41): the chart tells them the pod's own
    address, which the kubelet and Prometheus reach, and no other."""
    text = (CHART / "templates" / f"{template}-deployment.yaml").read_text()
    block = f"- name: {{{{ $n.{name} }}}}\n              valueFrom:\n                fieldRef:\n"
    assert block + "                  fieldPath: status.podIP\n" in text
    assert ENV_BLOCK is not None
    names: dict[str, str] = yaml.safe_load(ENV_BLOCK.group(1))
    group = "COLLECTOR" if template == "collector" else "ALERTS"
    assert names[name] == f"SPARKTAP_{group}__METRICS_HOST"
    assert CollectorSettings().metrics_host == "127.0.0.1"
