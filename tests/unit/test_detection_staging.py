"""The staged detection pass's statements (``sql.Staging``, issue 27): which relations go to temporary tables, in
which order, and that the single query (panels, alert rules, ``Detector.sql``) is unchanged by it."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from sparktap.detection import Detector, Scope
from sparktap.detection.findings import _Slots
from sparktap.detection.query import rule_query
from sparktap.detection.sql import SqlContext, Staging

SCOPED = SqlContext(scope=Scope.of(apps=["app-1", "app-2"]), final_reads=True)


def _no_query(sql: str) -> list[dict[str, object]]:
    raise AssertionError(f"no query expected: {sql[:80]}")


def test_without_staging_the_query_is_one_text() -> None:
    sql = rule_query(ctx=SCOPED)
    assert "TEMPORARY" not in sql and "sparktap_pass" not in sql
    assert SCOPED.staged("x", "SELECT 1") == "SELECT 1"


def test_a_staged_pass_computes_each_relation_once_in_order() -> None:
    staging = Staging("sparktap_pass_t")
    final = rule_query(ctx=replace(SCOPED, staging=staging))
    names = [table for table, _ in staging.statements]
    assert names == [
        "sparktap_pass_t_0_running_stages",
        "sparktap_pass_t_1_written_tables",  # the table each SQL execution wrote (small files)
        "sparktap_pass_t_2_app_properties",  # one table for the stage, AQE-read and plan relations
        "sparktap_pass_t_3_history_30_10",  # one table for the stage and the app history (the same runs)
        "sparktap_pass_t_4_stage_history",
        "sparktap_pass_t_5_stages",
        "sparktap_pass_t_6_stage_findings",
        "sparktap_pass_t_7_applications",
        "sparktap_pass_t_8_app_executors",
        "sparktap_pass_t_9_app_busy",
        "sparktap_pass_t_10_app_relation",
        "sparktap_pass_t_11_usage",
        "sparktap_pass_t_12_memory_peaks",
        "sparktap_pass_t_13_app_facts",
        "sparktap_pass_t_14_stage_durations",
        "sparktap_pass_t_15_job_stage_runs",
        "sparktap_pass_t_16_grown_stages",
        "sparktap_pass_t_17_aqe_read",
        "sparktap_pass_t_18_aqe_read_findings",
        "sparktap_pass_t_19_plan",
        "sparktap_pass_t_20_plan_findings",
        "sparktap_pass_t_21_streaming",
        "sparktap_pass_t_22_streaming_findings",
        "sparktap_pass_t_23_app",
        "sparktap_pass_t_24_app_findings",
        "sparktap_pass_t_25_table",
        "sparktap_pass_t_26_table_findings",
        "sparktap_pass_t_27_found",
    ]
    # each statement reads only the tables made before it; the final query reads the findings' table
    for i, (_, select) in enumerate(staging.statements):
        assert all(f"`{later}`" not in select for later in names[i:])
    assert "FROM `sparktap_pass_t_27_found`" in final
    assert sum(select.count("`run_rollup` FINAL") for _, select in staging.statements) == 3  # not once per use
    # on a cluster (the views, Distributed reads) an IN subquery is never a session's table: the history stays inline
    cluster = Staging("sparktap_pass_c")
    rule_query(ctx=replace(SCOPED, final_reads=False, staging=cluster))
    assert [t for t, _ in cluster.statements if "history_" in t] == []
    assert len(cluster.statements) == len(names) - 1


def test_names_are_identifiers() -> None:
    with pytest.raises(ValueError, match="staging prefix"):
        Staging("x`; DROP TABLE y")
    with pytest.raises(ValueError, match="staged relation name"):
        Staging("ok").table("a b", "SELECT 1")


def test_the_detector_renders_each_statement_with_the_scope_and_the_range() -> None:
    detector = Detector(_no_query, scope=Scope.of(apps=["app-$__fromTime"]), final_reads=True)
    statements, final = detector.staged_statements(0, 86_400_000, prefix="sparktap_pass_r")
    assert statements and final
    for _, select in [*statements, ("", final)]:
        assert "$__" not in select.replace("'app-$__fromTime'", "")  # macros expanded, the value left as data
        assert "sparktap_scope" not in select
    assert "app_id IN ('app-$__fromTime')" in statements[0][1]


def test_passes_reuse_the_lowest_free_slot_and_concurrent_ones_never_share_it() -> None:
    slots = _Slots()
    assert [slots.take(), slots.take()] == [0, 1]  # two passes at once: two slots (two sets of table names)
    slots.give_back(0)
    assert slots.take() == 0  # the next pass reuses the names a session has already seen
    slots.retire(1)  # its tables may not have been dropped
    slots.give_back(1)
    slots.give_back(0)
    assert [slots.take(), slots.take()] == [0, 2]
    taken: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        slot = slots.take()
        with lock:
            taken.append(slot)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(3, 11))
