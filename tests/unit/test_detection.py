"""Detection without a database: thresholds, SQL composition, macro expansion (the plugin contract), findings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparktap.detection import RULE_IDS, Finding, Thresholds, rule_query
from sparktap.detection.macros import MacroError, expand, interpolate
from sparktap.detection.query import FINDING_COLUMNS, rule_parts
from sparktap.detection.sql import Scope, SqlContext, in_variable, lit
from sparktap.settings import load_settings

CONTRACT = Path(__file__).resolve().parents[2].parent / "shared" / "contracts" / "clickhouse-datasource"
MACROS = json.loads((CONTRACT / "macro-expansions.derived.json").read_text())


# ----------------------------------------------------------------------------------------------- macros


@pytest.mark.parametrize("case", MACROS["cases"], ids=[c["input"] for c in MACROS["cases"]])
def test_macro_expansion_matches_the_plugin_contract(case: dict[str, str]) -> None:
    ctx = MACROS["context"]
    assert expand(case["input"], ctx["from_ms"], ctx["to_ms"], ctx["interval_ms"]) == case["expected"]


def test_macro_interval_clamps_and_errors() -> None:
    assert expand("$__interval_s $__interval_ms", 0, 1000, interval_ms=200) == "1 200"
    with pytest.raises(MacroError, match="expects 1 argument"):
        expand("$__timeFilter(a, b)", 0, 1000)
    with pytest.raises(MacroError, match="needs 1 argument"):
        expand("WHERE $__timeFilter", 0, 1000)
    with pytest.raises(MacroError, match="unknown macro"):
        expand("$__nope", 0, 1000)


def test_macro_arguments_may_nest_parentheses() -> None:
    out = expand("$__timeFilter(toDateTime(x, 'UTC'))", 1_704_067_200_123, 1_704_088_800_456)
    assert out == ("toDateTime(x, 'UTC') >= toDateTime(1704067200) AND toDateTime(x, 'UTC') <= toDateTime(1704088800)")


def test_template_variables_as_the_plugin_formats_them() -> None:
    sql = "cluster IN (${cluster:singlequote}) AND app_id = '$app' AND x IN ($multi) AND $__timeFilter(t)"
    out = interpolate(sql, {"cluster": ["a", "b'c"], "app": "app-1", "multi": ["x", "y"]})
    assert out == "cluster IN ('a','b\\'c') AND app_id = 'app-1' AND x IN ('x','y') AND $__timeFilter(t)"
    with pytest.raises(KeyError, match=r"\$missing"):
        interpolate("$missing", {})


# ----------------------------------------------------------------------------------------------- thresholds


def test_thresholds_have_the_documented_defaults() -> None:
    t = Thresholds()
    assert (t.task_time_skew.ratio_warning, t.task_time_skew.ratio_critical) == (4.0, 10.0)
    assert (t.task_time_skew.min_max_task_ms, t.task_time_skew.min_share_of_stage) == (5_000, 0.75)
    assert (t.data_skew.ratio_info, t.data_skew.ratio_warning, t.data_skew.ratio_critical) == (1.78, 3.16, 10.0)
    assert t.data_skew.min_max_bytes == 100 * 2**20
    assert (t.skew_not_fixed.factor, t.skew_not_fixed.min_partition_bytes) == (5.0, 256 * 2**20)
    assert (t.small_partitions.min_tasks, t.small_partitions.max_median_task_ms) == (5_000, 500)
    assert (t.small_files.min_files, t.small_files.max_avg_file_bytes, t.small_files.target_file_bytes) == (
        100,
        3 * 2**20,
        128 * 2**20,
    )
    assert t.oversized_partition.max_task_bytes == 5 * 2**30
    b = t.shuffle_blowup
    assert (b.write_ratio_warning, b.min_write_bytes, b.spill_ratio_warning, b.history_ratio_warning) == (
        10.0,
        2**30,
        0.25,
        5.0,
    )
    assert (t.remote_heavy_shuffle.min_remote_share, t.remote_heavy_shuffle.min_fetch_wait_share) == (0.9, 0.2)
    assert (t.task_failures.ratio_info, t.task_failures.ratio_warning, t.task_failures.ratio_critical) == (
        0.05,
        0.1,
        0.2,
    )
    assert (t.gc_pressure.ratio_info, t.gc_pressure.ratio_warning, t.gc_pressure.ratio_critical) == (0.08, 0.1, 0.2)


def test_thresholds_reject_bad_values() -> None:
    with pytest.raises(ValidationError, match="must not decrease"):
        Thresholds(data_skew={"ratio_warning": 20.0})
    with pytest.raises(ValidationError):
        Thresholds(task_failures={"ratio_warning": 1.5})
    with pytest.raises(ValidationError):
        Thresholds(gc_pressure={"unknown": 1})
    with pytest.raises(ValueError, match="finite"):
        lit(math.inf)


def test_thresholds_are_overridden_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES", "1048576")
    monkeypatch.setenv("SPARKTAP_ALERTS__SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/secret")
    settings = load_settings()
    assert settings.alerts.thresholds.data_skew.min_max_bytes == 1_048_576
    assert "secret" not in repr(settings.alerts)
    assert "1048576" in rule_query(["data_skew"], settings.alerts.thresholds)


# ----------------------------------------------------------------------------------------------- SQL


def test_every_rule_of_the_detection_table_has_sql() -> None:
    """Every registered rule (the one list of them: tests/unit/test_detection_rules.py) has its SQL."""
    assert RULE_IDS  # the registry found the rules
    assert {p.rule for p in rule_parts()} == set(RULE_IDS)
    for rule in RULE_IDS:
        sql = rule_query([rule])
        assert f"'{rule}'" in sql and "$__timeFilter(event_time)" in sql
        assert "_dedup`" in sql and "FINAL" not in sql  # the dedup views, never the raw tables
    with pytest.raises(ValueError, match="unknown detection rule"):
        rule_query(["nope"])


def test_thresholds_are_rendered_into_the_sql() -> None:
    default = rule_query(["gc_pressure"])
    custom = rule_query(
        ["gc_pressure"], Thresholds(gc_pressure={"ratio_info": 0.3, "ratio_warning": 0.4, "ratio_critical": 0.5})
    )
    assert "gc_ratio >= 0.08" in default and "gc_ratio >= 0.3" in custom and "0.08" not in custom


def test_scope_and_dialect() -> None:
    ctx = SqlContext("db", (18, 16, 1), Scope.of(clusters=["prod'eu"]))
    sql = rule_query(["skew_not_fixed"], ctx=ctx)
    assert "`db`.`stage_completed_dedup`" in sql
    assert "cluster IN ('prod\\'eu')" in sql
    assert "visitParamExtractString(properties" in sql  # 18.16 stores properties as JSON text, not Map
    assert "properties['spark.sql.adaptive.skewJoin.enabled']" in rule_query(["skew_not_fixed"])
    grafana = rule_query(["data_skew"], ctx=SqlContext(scope=Scope.grafana()))
    assert in_variable("cluster", "cluster") in grafana and in_variable("app_id", "app") in grafana
    assert ":singlequote" not in grafana and ":sqlstring" not in grafana


def test_min_severity_filters_the_findings() -> None:
    assert "WHERE severity IN ('warning', 'critical')" in rule_query(min_severity="warning")
    assert "WHERE severity IN ('info', 'warning', 'critical')" in rule_query()


# ----------------------------------------------------------------------------------------------- findings


def _row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {c: 0 for c in FINDING_COLUMNS}
    row.update(
        cluster="prod-eu",
        app_id="app-1",
        app_attempt="1",
        app_name="etl",
        job_id=3,
        sql_execution_id=-1,
        stage_id=5,
        stage_attempt=0,
        stage_name="count at x.py:1",
        node_id=-1,
        running=1,
        rule="data_skew",
        severity="warning",
        value=4.2,
        threshold=3.16,
        evidence_names=["ratio", "max_task_bytes"],
        evidence_values=[4.2, 2.0e8],
        explanation="Largest task …",
        suggested_fix="salt",
        detected_at_ms=1_795_000_000_000,
    )
    row.update(overrides)
    return row


def test_finding_from_a_row() -> None:
    f = Finding.from_row(_row())
    assert (f.job_id, f.sql_execution_id, f.stage_id, f.stage_attempt, f.node_id) == (3, None, 5, 0, None)
    assert f.running and f.evidence == {"ratio": 4.2, "max_task_bytes": 2.0e8}
    assert f.key == "data_skew|prod-eu|app-1|1|stage=5.0"
    assert f.rule_title == "Data skew" and f.where == 'stage 5 (attempt 0) "count at x.py:1"'
    aqe = Finding.from_row(_row(stage_id=-1, stage_attempt=-1, node_id=4, sql_execution_id=2, rule="small_partitions"))
    assert aqe.key == "small_partitions|prod-eu|app-1|1|sql=2.node=4" and aqe.stage_attempt is None
    with pytest.raises(ValueError, match="severity"):
        Finding.from_row(_row(severity="fatal"))


def test_finding_key_is_stable_while_the_stage_runs_and_completes() -> None:
    running = Finding.from_row(_row(running=1, value=0.13, explanation="4 of 30"))
    done = Finding.from_row(_row(running=0, value=0.11, severity="critical", explanation="12 of 112"))
    assert running.key == done.key
