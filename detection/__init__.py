"""Detection as SQL over the ClickHouse tables: one place for the Grafana panels and alert rules and the
built-in alerter. ``rules/`` holds one module per rule (``rule.py`` says what a rule is made of, ``registry.py``
discovers them), ``thresholds.py`` composes their named thresholds, ``query.py`` turns rules into one query and
``findings.py`` runs it (``Detector``). ``alerter.py`` and ``notify.py``: the built-in alerter and its chat messages."""

from sparktap.detection.findings import Detector, Finding
from sparktap.detection.query import FINDING_COLUMNS, RULE_IDS, RULES, RULES_BY_ID, rule_query
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
