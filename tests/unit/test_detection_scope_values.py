"""A cluster or application id holding a Grafana macro name is data: the detection query is rendered with the
macros expanded before the scope's literal values go in (it used to raise MacroError and end the alerter)."""

from __future__ import annotations

from sparktap.detection.findings import Detector
from sparktap.detection.sql import Scope


def _no_query(sql: str) -> list[dict[str, object]]:
    return []


def test_macro_names_in_scope_values_are_kept_verbatim() -> None:
    detector = Detector(_no_query, scope=Scope.of(["$__timeFilter(x)"], ["$__x", "app-1"]))
    sql = detector.rendered(1_000, 2_000)
    assert "cluster IN ('$__timeFilter(x)')" in sql
    assert "app_id IN ('$__x', 'app-1')" in sql
    assert "sparktap_scope_" not in sql
    assert detector.findings(1_000, 2_000) == []


def test_without_a_scope_the_rendering_is_the_expanded_query() -> None:
    plain = Detector(_no_query)
    assert "sparktap_scope_" not in plain.rendered(1_000, 2_000)
    assert "$__" not in plain.rendered(1_000, 2_000)
