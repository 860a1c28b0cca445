"""Grafana variables reach SQL only in a form nothing can break out of: the ``percentencode`` format (mirrored
exactly as Grafana's ``encodeURIComponentStrict``) decoded by ClickHouse, and every dashboard and alert-rule query
uses that form and no other."""

from __future__ import annotations

import re

import pytest

from sparktap.dashboards.alerts import alert_query
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panel_queries
from sparktap.dashboards.table_panels import table_value
from sparktap.detection import RULE_IDS
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.sql import in_variable, variable_values
from tests.support.identifier_canaries import CANARIES, INJECTION

# Grafana (scenes formatRegistry): encodeURIComponent, then ! ' ( ) * as %XX; arrays as the glob "{a,b}"
GRAFANA_PERCENTENCODE = {
    "app-20261124101500-0001": "app-20261124101500-0001",
    "a b/c": "a%20b%2Fc",
    "\\') UNION --": "%5C%27%29%20UNION%20--",
    "$__timeFilter(x)!*~": "%24__timeFilter%28x%29%21%2A~",
    "é\n": "%C3%A9%0A",
}


@pytest.mark.parametrize(("value", "encoded"), GRAFANA_PERCENTENCODE.items())
def test_percentencode_is_grafanas(value: str, encoded: str) -> None:
    assert interpolate("${v:percentencode}", {"v": value}) == encoded
    assert interpolate("${v:percentencode}", {"v": [value, "b"]}) == "%7B" + encoded + "%2Cb%7D"


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_no_value_can_leave_the_literal(name: str) -> None:
    value = CANARIES[name]
    for raw in (value, [value, INJECTION, "prod-eu"]):
        sql = interpolate(variable_values("v"), {"v": raw})
        literal = re.fullmatch(r"splitByChar\(',', replaceRegexpAll\(decodeURLComponent\('([^']*)'\), .*\)\)", sql)
        assert literal is not None, sql
        assert re.fullmatch(r"[A-Za-z0-9_.~%-]*", literal.group(1)), literal.group(1)
        assert expand(sql, 0, 1000) == sql  # no macro survives the encoding


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_no_table_name_can_leave_the_literal(name: str) -> None:
    """The Tables dashboard's one ``$table`` (a table name holds any text, commas and braces too): one literal."""
    for value in (CANARIES[name], f"sales.{CANARIES[name]},{{x}}"):
        sql = interpolate(table_value(), {"table": value})
        literal = re.fullmatch(r"decodeURLComponent\('([^']*)'\)", sql)
        assert literal is not None, sql
        assert re.fullmatch(r"[A-Za-z0-9_.~%-]*", literal.group(1)), literal.group(1)
        assert expand(sql, 0, 1000) == sql


def _all_sql() -> list[tuple[str, str]]:
    cfg = GrafanaConfig()
    out = [(f"{b['uid']}:{t}", sql) for b in all_dashboards(cfg) for t, sql in panel_queries(b)]
    return out + [(f"alert:{rule}", alert_query(rule, cfg)) for rule in RULE_IDS]


def test_every_query_takes_variables_only_through_percentencode() -> None:
    allowed = {"${cluster:percentencode}", "${app:percentencode}", "${user:percentencode}", "${team:percentencode}"}
    allowed.add("${table:percentencode}")  # the Tables dashboard's one table, through table_value() only
    for title, sql in _all_sql():
        references = re.findall(r"\$\{[^}]*\}|\$(?!__)\w+|\[\[\w+(?::\w+)?\]\]", sql)
        assert set(references) <= allowed, (title, references)
        without = sql.replace(in_variable("cluster", "cluster"), "").replace(in_variable("app_id", "app"), "")
        without = without.replace(variable_values("user"), "").replace(variable_values("team"), "")  # Connect view
        without = without.replace(table_value(), "")  # the Tables view
        assert "percentencode" not in without, title  # only inside in_variable's form
        if title.startswith("alert:"):
            assert references == [], title  # alert rules interpolate nothing: they run unscoped, macros only
