"""Detection as SQL over the ClickHouse tables: one place for the Grafana panels and alert rules and the
built-in alerter. ``rules/`` holds one module per rule (``rule.py`` says what a rule is made of, ``registry.py``
discovers them), ``thresholds.py`` composes their named thresholds, ``query.py`` turns rules into one query and
``findings.py`` runs it (``Detector``). ``alerter.py`` and ``notify.py``: the built-in alerter and its chat messages."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktap.detection.findings import Detector, Finding
    from sparktap.detection.query import FINDING_COLUMNS, RULE_IDS, RULES, RULES_BY_ID, rule_query
    from sparktap.detection.sql import Scope, SqlContext
    from sparktap.detection.thresholds import DEFAULT_THRESHOLDS, SEVERITIES, Severity, Thresholds

_EXPORTS = {
    "Detector": "findings",
    "Finding": "findings",
    "FINDING_COLUMNS": "query",
    "RULE_IDS": "query",
    "RULES": "query",
    "RULES_BY_ID": "query",
    "rule_query": "query",
    "Scope": "sql",
    "SqlContext": "sql",
    "DEFAULT_THRESHOLDS": "thresholds",
    "SEVERITIES": "thresholds",
    "Severity": "thresholds",
    "Thresholds": "thresholds",
}


def __getattr__(name: str) -> Any:
    """The exports load when first used, so ``detection.settings`` (read with every process's settings) does not
    pull in the query, the findings or the alerter."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
