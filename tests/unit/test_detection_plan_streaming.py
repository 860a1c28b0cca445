"""The plan and streaming rules without a server: their documented defaults, the SQL they compose to (one pass per
relation, the dialect per server version), and how their findings are named and keyed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparktap.dashboards.alerts import LABEL_COLUMNS, file_rule
from sparktap.dashboards.config import GrafanaConfig
from sparktap.detection import Finding, Thresholds
from sparktap.detection.query import rule_query
from sparktap.detection.sql import SqlContext

PLAN_RULES = ("plan_misestimate", "codegen_off")
STREAMING_RULES = ("streaming_saturated", "streaming_state_growth")


def test_thresholds_have_the_documented_defaults() -> None:
    t = Thresholds()
    m = t.plan_misestimate
    assert (m.ratio_warning, m.ratio_critical, m.min_rows) == (10.0, 1000.0, 100_000)
    assert t.codegen_off.min_cpu_ms == 60_000
    assert (t.streaming.batches, t.streaming.min_batches) == (10, 5)
    assert (t.streaming_saturated.busy_share, t.streaming_saturated.processed_over_input) == (0.9, 0.9)
    g = t.streaming_state_growth
    assert (g.min_growth_rows, g.min_growth_bytes) == (10_000, 64 * 2**20)


def test_thresholds_reject_bad_values() -> None:
    with pytest.raises(ValidationError, match="must not decrease"):
        Thresholds(plan_misestimate={"ratio_warning": 2000.0})
    with pytest.raises(ValidationError, match="must not exceed"):
        Thresholds(streaming={"batches": 4, "min_batches": 5})
    with pytest.raises(ValidationError):
        Thresholds(streaming_saturated={"busy_share": 1.5})


def test_one_pass_per_relation_and_the_window_in_the_sql() -> None:
    sql = rule_query([*PLAN_RULES, *STREAMING_RULES], Thresholds(streaming={"batches": 20, "min_batches": 8}))
    assert sql.count("ARRAY JOIN [") == 2  # one over plan nodes, one over streaming query runs
    assert sql.count("`sql_plan_stats_dedup`") == 1 and sql.count("`streaming_query_progress_dedup`") == 1
    assert "toInt64(length(b_batch_ids)) - 20 + 1" in sql and "s_batches >= 8" in sql
    assert "duration_ms['triggerExecution']" in sql
    old = rule_query(list(STREAMING_RULES), ctx=SqlContext(version=(18, 16, 1)))
    assert "visitParamExtractInt(duration_ms, 'triggerExecution')" in old and "duration_ms['" not in old
    assert "WITH " not in sql and sql.count(" JOIN\n") <= 2 + 2  # + the job and application attribution joins
    assert sql.count("`job_start_dedup`") == 1 and sql.count("`app_start_dedup`") == 1 + 1  # + properties


def test_plan_and_streaming_findings_are_named_and_keyed() -> None:
    common = {
        "cluster": "c",
        "app_id": "a",
        "app_attempt": "1",
        "app_name": "n",
        "severity": "warning",
        "value": 1.0,
        "threshold": 1.0,
        "explanation": "e",
        "suggested_fix": "f",
        "detected_at_ms": 1,
    }
    node = Finding(rule="plan_misestimate", sql_execution_id=3, node_id=4, stage_name="Scan parquet t", **common)
    assert node.key == "plan_misestimate|c|a|1|sql=3.node=4"
    assert node.where == 'SQL execution 3, plan node 4 "Scan parquet t"'
    stream = Finding(rule="streaming_saturated", stage_name="orders (q-1)", **common)
    assert stream.key == "streaming_saturated|c|a|1|stream=orders (q-1)"
    assert stream.where == 'streaming query "orders (q-1)"'
    aqe = Finding(rule="small_partitions", sql_execution_id=7, node_id=3, **common)
    assert aqe.where == "SQL execution 7, AQE shuffle read node 3"


def test_alerts_tell_streaming_queries_apart() -> None:
    assert "stage_name" in LABEL_COLUMNS
    rule = file_rule("streaming_saturated", GrafanaConfig())
    assert "streaming query {{ $$labels.stage_name }}" in rule["annotations"]["summary"]
    assert rule["annotations"]["runbook_url"].endswith("#streaming-saturated-or-behind")
