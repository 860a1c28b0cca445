"""Findings named by their job or SQL description (``detection/names.py``, ``Finding.where``): in the findings
table of ``sparktap findings`` and in chat messages. The descriptions are read from ClickHouse by
``names.describe``, checked on real applications in ``tests/integration/test_tpch.py``."""

from __future__ import annotations

import dataclasses

from sparktap.detection import Finding
from sparktap.detection.findings import finding_row
from sparktap.detection.names import MAX_CHARS, short
from sparktap.detection.notify import Notification

STAGE = Finding(
    cluster="prod-eu",
    app_id="app-1",
    app_attempt="",
    app_name="tpch",
    rule="data_skew",
    severity="warning",
    value=5.0,
    threshold=3.16,
    explanation="Largest task …",
    suggested_fix="Salt the hot key",
    detected_at_ms=1_795_000_000_000,
    job_id=7,
    sql_execution_id=3,
    stage_id=12,
    stage_attempt=0,
    stage_name="collect at tpch.py:97",
)
PLAN = dataclasses.replace(
    STAGE,
    rule="plan_misestimate",
    stage_id=None,
    stage_attempt=None,
    node_id=4,
    stage_name="SortMergeJoin",
    job_id=None,
)
AQE = dataclasses.replace(PLAN, rule="small_partitions", stage_name="")
STREAM = dataclasses.replace(
    PLAN, rule="streaming_behind", sql_execution_id=None, node_id=None, stage_name="orders (q-1)"
)


def test_where_names_the_description_then_the_call_site() -> None:
    named = dataclasses.replace(STAGE, description="TPC-H q05")
    assert STAGE.where == 'stage 12 (attempt 0) "collect at tpch.py:97"'
    assert named.where == 'stage 12 (attempt 0) "TPC-H q05"' and named.name == "TPC-H q05"
    assert PLAN.where == 'SQL execution 3, plan node 4 "SortMergeJoin"'
    assert dataclasses.replace(PLAN, description="TPC-H q18").where == (
        'SQL execution 3 "TPC-H q18", plan node 4 "SortMergeJoin"'
    )
    assert dataclasses.replace(AQE, description="TPC-H q18").where == (
        'SQL execution 3 "TPC-H q18", AQE shuffle read node 4'
    )
    assert STREAM.where == 'streaming query "orders (q-1)"'
    assert named.key == STAGE.key  # the name is not part of the finding's identity


def test_the_findings_table_and_chat_use_the_same_names() -> None:
    named = dataclasses.replace(STAGE, description="TPC-H q05")
    assert finding_row(named)[2] == 'stage 12 "TPC-H q05"'
    assert finding_row(STAGE)[2] == 'stage 12 "collect at tpch.py:97"'
    assert finding_row(dataclasses.replace(PLAN, description="TPC-H q18"))[2] == 'sql 3 "TPC-H q18"'
    assert finding_row(AQE)[2] == "sql 3" and finding_row(STREAM)[2] == "stream orders (q-1)"
    message = Notification("firing", "new", named, None)
    assert message.subject == 'tpch (app-1) on prod-eu: stage 12 (attempt 0) "TPC-H q05"'  # no attempt id: none shown
    assert ("Where", 'stage 12 (attempt 0) "TPC-H q05"') in message.facts()
    with_attempt = Notification("firing", "new", dataclasses.replace(named, app_attempt="2"), None)
    assert with_attempt.subject.startswith("tpch (app-1, attempt 2) on prod-eu: ")


def test_descriptions_are_one_short_line() -> None:
    assert short("  TPC-H\n  q05 ") == "TPC-H q05"
    sql = "SELECT " + ", ".join(f"c{i}" for i in range(100)) + " FROM t"
    assert len(short(sql)) == MAX_CHARS and short(sql).endswith("…") and short(sql).startswith("SELECT c0, c1,")
