"""Detection as SQL over the ClickHouse tables: one place for the Grafana panels and alert rules and the
built-in alerter. See ``rules.py`` (the rules), ``thresholds.py`` (their named thresholds) and ``findings.py``."""

from sparktap.detection.findings import Detector, Finding
from sparktap.detection.rules import FINDING_COLUMNS, RULE_IDS, RULES, RULES_BY_ID, rule_query
from sparktap.detection.sql import Scope, SqlContext
from sparktap.detection.thresholds import DEFAULT_THRESHOLDS, SEVERITIES, Severity, Thresholds

__all__ = [
    "DEFAULT_THRESHOLDS",
    "FINDING_COLUMNS",
    "RULES",
    "RULES_BY_ID",
    "RULE_IDS",
    "SEVERITIES",
    "Detector",
    "Finding",
    "Scope",
    "Severity",
    "SqlContext",
    "Thresholds",
    "rule_query",
]
