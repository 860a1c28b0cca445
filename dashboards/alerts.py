"""Grafana-managed alert rules: one per detection rule, evaluating the detection SQL itself.

Each rule has three steps: ``A`` the ClickHouse query (one row per finding at or above ``min_severity``: string
label columns and one number, ``value``, as Grafana's alerting wants table data), ``B`` reduce (last), ``C`` a
threshold (> 0). Every alert instance carries the finding's identity as labels (cluster, app, stage …) and its
``severity`` (the rule label ``severity`` is the template ``{{ $labels.severity }}``, so one Grafana rule follows
the rule's whole severity ladder and the notification policy routes by it), plus ``source=sparktap``.

Two shapes: ``rule_group_file`` for file provisioning (``apiVersion: 1``; ``$`` of alert templates written ``$$``
because Grafana expands environment variables in labels and annotations of provisioning files) and
``provisioned_rule`` for the HTTP provisioning API (``ProvisionedAlertRule``).
"""

from __future__ import annotations

from sparktap.dashboards.builders import Json
from sparktap.dashboards.config import DEFAULT_CONFIG, GrafanaConfig
from sparktap.dashboards.defaults import ALERT_SOURCE_LABEL, APPLICATION_UID, DATASOURCE_TYPE
from sparktap.detection.query import RULES, RULES_BY_ID, rule_query
from sparktap.detection.sql import Scope, SqlContext
from sparktap.detection.teams import owner_sql

LABEL_COLUMNS = (
    "cluster",
    "app_id",
    "app_attempt",
    "app_name",
    "job_id",
    "sql_execution_id",
    "stage_id",
    "stage_attempt",
    "node_id",
    "stage_name",
    "rule",
    "severity",
    "team",
    "user",
)
"""Columns of an alert query that become labels of the alert instance (all strings); ``value`` is the number.
``stage_name`` tells streaming findings apart: it names the query run (their ids are all -1). ``team`` and ``user``
(the finding's attribution) are what the notification policies exported from the routing file match on
(``routing_export.py``)."""


def rule_uid(rule: str) -> str:
    return "sparktap-" + rule.replace("_", "-")


def runbook_anchor(rule: str) -> str:
    return RULES_BY_ID[rule].anchor


def _team(cfg: GrafanaConfig) -> str:
    """The ``team`` label: the owner the platform's team mapping gives (what the exported policies match), else the
    application's team tag."""
    if cfg.teams is None:
        return "team"
    return f"{owner_sql(cfg.teams, 'cluster', '`user`', 'app_name', 'team')} AS team"


def alert_query(rule: str, cfg: GrafanaConfig) -> str:
    """The SQL of a rule's alert: its findings as label columns plus ``value``."""
    ctx = SqlContext(cfg.database, cfg.clickhouse_version, Scope())
    inner = rule_query([rule], cfg.thresholds, ctx, cfg.min_severity)
    labels = ", ".join(
        f"toString({c}) AS {c}"
        if c in ("job_id", "sql_execution_id", "stage_id", "stage_attempt", "node_id")
        else ("`user`" if c == "user" else _team(cfg) if c == "team" else c)
        for c in LABEL_COLUMNS
    )
    return f"SELECT {labels}, value\nFROM\n(\n{inner}\n)"


def _labels_and_annotations(rule: str, cfg: GrafanaConfig, panel_id: int | None) -> tuple[Json, Json]:
    info = RULES_BY_ID[rule]
    labels = {ALERT_SOURCE_LABEL[0]: ALERT_SOURCE_LABEL[1], "rule": rule, "severity": "{{ $labels.severity }}"}
    where = (
        '{{ if ne $labels.stage_id "-1" }}stage {{ $labels.stage_id }}.{{ $labels.stage_attempt }}'
        '{{ else if ne $labels.sql_execution_id "-1" }}SQL execution {{ $labels.sql_execution_id }} (node '
        "{{ $labels.node_id }}){{ else }}streaming query {{ $labels.stage_name }}{{ end }}"
    )
    annotations = {
        "summary": f"{info.title} ({{{{ $labels.severity }}}}) in {{{{ $labels.app_name }}}} "
        f"({{{{ $labels.app_id }}}}) on {{{{ $labels.cluster }}}}, {where}",
        "description": f"{info.summary.capitalize()}: {info.condition(cfg.thresholds)}. Value: "
        "{{ humanize $values.B.Value }}. The application dashboard's Findings table has the numbers "
        "and a concrete fix.",
        "runbook_url": f"{cfg.runbook_base}#{runbook_anchor(rule)}",
        "__dashboardUid__": APPLICATION_UID,
    }
    if panel_id is not None:
        annotations["__panelId__"] = str(panel_id)
    return labels, annotations


def _data(rule: str, cfg: GrafanaConfig, file_format: bool) -> list[Json]:
    ds_key = "datasourceUid"
    query = {
        "refId": "A",
        "relativeTimeRange": {"from": cfg.alert_lookback_seconds, "to": 0},
        ds_key: cfg.datasource_uid,
        "model": {
            "refId": "A",
            "datasource": {"type": DATASOURCE_TYPE, "uid": cfg.datasource_uid},
            "editorType": "sql",
            "format": 1,
            "queryType": "table",
            "rawSql": alert_query(rule, cfg),
            "intervalMs": 1000,
            "maxDataPoints": 43200,
        },
    }
    reduce = {
        "refId": "B",
        "relativeTimeRange": {"from": 0, "to": 0},
        ds_key: "__expr__",
        "model": {
            "refId": "B",
            "datasource": {"type": "__expr__", "uid": "__expr__"},
            "type": "reduce",
            "expression": "A",
            "reducer": "last",
            "settings": {"mode": "dropNN"},
        },
    }
    threshold = {
        "refId": "C",
        "relativeTimeRange": {"from": 0, "to": 0},
        ds_key: "__expr__",
        "model": {
            "refId": "C",
            "datasource": {"type": "__expr__", "uid": "__expr__"},
            "type": "threshold",
            "expression": "B",
            "conditions": [{"evaluator": {"type": "gt", "params": [0]}}],
        },
    }
    if not file_format:
        for item in (query, reduce, threshold):
            item["queryType"] = ""
    return [query, reduce, threshold]


def _escape_for_file(values: Json) -> Json:
    """Grafana expands ``$VAR`` in provisioning files' labels and annotations; ``$$`` is a literal ``$``."""
    return {k: v.replace("$", "$$") for k, v in values.items()}


def file_rule(rule: str, cfg: GrafanaConfig, panel_id: int | None = None) -> Json:
    """One rule in the file-provisioning format."""
    labels, annotations = _labels_and_annotations(rule, cfg, panel_id)
    return {
        "uid": rule_uid(rule),
        "title": f"sparktap: {RULES_BY_ID[rule].title}",
        "condition": "C",
        "for": cfg.alert_for,
        "noDataState": "OK",
        "execErrState": "Error",
        "isPaused": False,
        "labels": _escape_for_file(labels),
        "annotations": _escape_for_file(annotations),
        "data": _data(rule, cfg, file_format=True),
    }


def rule_group_file(cfg: GrafanaConfig = DEFAULT_CONFIG, panel_id: int | None = None) -> Json:
    """The alert-rule part of an alerting provisioning file: one group, one rule per detection rule."""
    return {
        "orgId": 1,
        "name": cfg.rule_group,
        "folder": cfg.folder_title,
        "interval": f"{cfg.rule_group_interval_seconds}s",
        "rules": [file_rule(r.id, cfg, panel_id) for r in RULES],
    }


def provisioned_rule(rule: str, cfg: GrafanaConfig = DEFAULT_CONFIG, panel_id: int | None = None) -> Json:
    """One rule as the HTTP provisioning API's ``ProvisionedAlertRule``."""
    labels, annotations = _labels_and_annotations(rule, cfg, panel_id)
    return {
        "uid": rule_uid(rule),
        "orgID": 1,
        "folderUID": cfg.folder_uid,
        "ruleGroup": cfg.rule_group,
        "title": f"sparktap: {RULES_BY_ID[rule].title}",
        "condition": "C",
        "data": _data(rule, cfg, file_format=False),
        "noDataState": "OK",
        "execErrState": "Error",
        "for": cfg.alert_for,
        "isPaused": False,
        "labels": labels,
        "annotations": annotations,
    }


def provisioned_group(cfg: GrafanaConfig = DEFAULT_CONFIG, panel_id: int | None = None) -> Json:
    """The rule group as the HTTP API's ``AlertRuleGroup`` (interval in seconds)."""
    return {
        "title": cfg.rule_group,
        "folderUid": cfg.folder_uid,
        "interval": cfg.rule_group_interval_seconds,
        "rules": [provisioned_rule(r.id, cfg, panel_id) for r in RULES],
    }
