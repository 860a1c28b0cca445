"""Who a finding belongs to (issue 26): the attribution columns of the detection query, ``sparktap findings
--user/--team`` and its round trip through the collector's ``/findings`` query string. The SQL runs on chDB in
``tests/integration/test_detection_sql.py`` and on clickhouse-server 18.16 in
``tests/integration/test_detection_sql_server18.py``; the listener side on a real Spark Connect server in
``tests/integration/test_spark_connect.py``."""

from __future__ import annotations

import dataclasses
import json
from urllib.parse import parse_qs

from sparktap.detection import Finding
from sparktap.detection.findings import FindingsRequest, from_dict
from sparktap.detection.query import FINDING_COLUMNS, rule_query
from sparktap.detection.sql import SqlContext

BOB = Finding(
    cluster="shared",
    app_id="app-connect",
    app_attempt="",
    app_name="Spark Connect server",
    rule="data_skew",
    severity="warning",
    value=12.0,
    threshold=5.0,
    explanation="Largest task …",
    suggested_fix="Salt the hot key",
    detected_at_ms=1_795_000_000_000,
    job_id=3,
    stage_id=4,
    stage_attempt=0,
    user="bob",
    team="payments",
    job_tags=("team-x", "SparkConnect_OperationTag_User_bob_Session_s1_Operation_o1"),
    session_id="s1",
    operation_id="o1",
)
ALICE = dataclasses.replace(BOB, user="alice", team="", job_tags=(), session_id="s2", operation_id="o2", job_id=5)


def test_the_finding_columns_end_with_who_ran_it() -> None:
    assert FINDING_COLUMNS[-5:] == ("user", "team", "job_tags", "session_id", "operation_id")
    sql = rule_query(["data_skew"])
    assert "if(a_user != '', a_user, app_user) AS `user`" in sql and "tags['team']" in sql
    old = rule_query(["data_skew"], ctx=SqlContext(version=(18, 16, 1)))
    assert "visitParamExtractString(tags, 'team')" in old and "tags['" not in old


def test_users_and_teams_select_findings_and_survive_the_query_string() -> None:
    request = FindingsRequest(since="2h", users=("bob",), teams=("team-x",))
    assert request.matches(BOB) and not request.matches(ALICE)
    assert FindingsRequest(teams=("payments",)).matches(BOB)  # the application's team tag
    assert not FindingsRequest(teams=("team-y",)).matches(BOB)
    assert FindingsRequest(users=("alice", "bob")).matches(ALICE) and FindingsRequest().matches(ALICE)
    back = FindingsRequest.from_query(parse_qs(request.query_string()))
    assert back == request


def test_a_finding_keeps_who_ran_it_through_json() -> None:
    again = from_dict(json.loads(json.dumps(BOB.to_dict())))
    assert again == BOB and again.job_tags == BOB.job_tags
