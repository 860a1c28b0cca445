"""The stored findings' DDL (schemas/findings_table.py) for one node, 18.16 and a cluster, its retention tier, and the
row a finding is stored as (detection/finding_store.py)."""

from __future__ import annotations

from sparktap.detection.finding_store import finding_row
from sparktap.detection.findings import Finding
from sparktap.schemas.findings_table import COLUMN_NAMES, object_names, table_statements
from sparktap.schemas.schema import schema_for
from sparktap.store.retention import Tiers, plan


def test_versioned_engine_on_one_node_18_16_and_a_cluster() -> None:
    modern, old = table_statements(schema_for((26, 9), "db")), table_statements(schema_for((18, 16, 1), "db"))
    for create in (modern[0], old[0]):
        assert "ENGINE = ReplacingMergeTree(`evaluated_at_ms`)\n" in create
        assert "ORDER BY (`cluster`, `app_id`, `app_attempt`, `rule`, `finding_key`)" in create
        assert "`event_time` DateTime('UTC') MATERIALIZED toDateTime(intDiv(`detected_at_ms`, 1000), 'UTC')" in create
    assert "TTL toDateTime(`event_time`) + INTERVAL 400 DAY" in modern[0] and "TTL" not in old[0]
    assert modern[1].endswith("FROM `db`.`findings` FINAL")
    cluster = schema_for((18, 16, 1), "db", cluster="c")
    local, distributed, view_local, view = table_statements(cluster)
    assert (
        "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/findings_local', '{replica}', "
        "`evaluated_at_ms`)" in local
    )
    assert "ENGINE = Distributed(`c`, `db`, `findings_local`, cityHash64(`app_id`))" in distributed
    assert "FROM `db`.`findings_local` FINAL" in view_local and "`findings_dedup_local`" in view
    assert object_names(cluster) == ["findings", "findings_dedup", "findings_local", "findings_dedup_local"]


def test_retention_tier() -> None:
    tiers = Tiers(findings=200)
    assert tiers.days("findings") == 200 and Tiers().days("findings") == 400
    assert plan(schema_for((26, 9), "db"), tiers)["findings"] == 200


def test_a_finding_row_has_every_column_and_unknown_ids_minus_one() -> None:
    finding = Finding(
        cluster="prod",
        app_id="app-1",
        app_attempt="1",
        app_name="etl",
        rule="data_skew",
        severity="warning",
        value=12.0,
        threshold=5.0,
        explanation="x",
        suggested_fix="y",
        detected_at_ms=1_700_000_000_123,
        stage_id=3,
        stage_attempt=0,
        evidence={"time_lost_ms": 4000.0, "ratio": 12.0},
        job_tags=("a",),
    )
    row = finding_row(finding, 7)
    assert tuple(row) == COLUMN_NAMES
    assert row["finding_key"] == "data_skew|prod|app-1|1|stage=3.0"
    assert (row["job_id"], row["sql_execution_id"], row["node_id"], row["stage_id"]) == (-1, -1, -1, 3)
    assert (row["time_lost_ms"], row["evidence_names"], row["evidence_values"]) == (
        4000.0,
        ["time_lost_ms", "ratio"],
        [4000.0, 12.0],
    )
    assert (row["resolved"], row["evaluated_at_ms"], row["job_tags"]) == (0, 7, ["a"])
