"""DDL rendered from the models: deterministic, version-aware, one column per model field."""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from sparktap.schemas.ddl import DDL_VERSION, RAW_TABLE, Features, quote_ident, quote_literal, table_for
from sparktap.schemas.events import EVENT_TYPES, UnknownEvent
from sparktap.schemas.schema import render_ddl, schema_for

MODERN = (26, 9, 2, 1)
OLD = (18, 16, 1)
ALL_TABLES = [*EVENT_TYPES, RAW_TABLE]


def _leaf_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Expected column names: model fields in order, nested models and lists of models flattened with '_'."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        item = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += _leaf_names(annotation, f"{prefix}{name}_")
        elif isinstance(item, type) and issubclass(item, BaseModel):
            names += _leaf_names(item, f"{prefix}{name}_")
        else:
            names.append(prefix + name)
    return names


def _statement(statements: list[str], table: str) -> str:
    (found,) = [s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS `db`.`{table}`\n")]
    return found


def test_render_is_deterministic() -> None:
    assert render_ddl(MODERN, "db") == render_ddl(MODERN, "db")
    assert render_ddl(OLD, "db") == render_ddl(OLD, "db")


def test_every_statement_is_idempotent_and_ordered() -> None:
    statements = render_ddl(MODERN, "db")
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS `db`"
    assert statements[1].startswith("CREATE TABLE IF NOT EXISTS `db`.`schema_migrations`\n")
    tables = [s for s in statements if s.startswith("CREATE TABLE")]
    views = [s for s in statements if s.startswith("CREATE VIEW")]
    assert len(tables) == len(ALL_TABLES) + 3  # + schema_migrations, alert_silences, alert_silenced
    assert statements[2].startswith("CREATE TABLE IF NOT EXISTS `db`.`alert_silences`\n")
    assert statements[3].startswith("CREATE TABLE IF NOT EXISTS `db`.`alert_silenced`\n")
    assert len(views) == len(ALL_TABLES)
    assert len(statements) == 1 + len(tables) + len(views)
    assert all(" IF NOT EXISTS " in s for s in statements)
    # views come after every table they read
    assert statements.index(views[0]) > statements.index(tables[-1])


@pytest.mark.parametrize("event_type", ALL_TABLES)
@pytest.mark.parametrize("version", [MODERN, OLD], ids=["26.9", "18.16"])
def test_every_model_field_has_a_column(event_type: str, version: tuple[int, ...]) -> None:
    model = EVENT_TYPES.get(event_type, UnknownEvent)
    spec = table_for(event_type, version)
    assert spec.name == event_type
    assert list(spec.column_names) == _leaf_names(model)
    statement = _statement(render_ddl(version, "db"), event_type)
    for name in spec.column_names:
        assert f"\n    `{name}` " in statement


def test_modern_output_uses_codecs_ttl_datetime64_and_low_cardinality() -> None:
    statements = render_ddl(MODERN, "db", retention_days=45)
    task_end = _statement(statements, "task_end")
    assert "`executor_id` LowCardinality(String) CODEC(ZSTD(1))" in task_end
    assert "`failure_class` LowCardinality(Nullable(String)) CODEC(ZSTD(1))" in task_end
    assert "`seq` Int64 CODEC(DoubleDelta, ZSTD(1))" in task_end
    assert "`duration_ms` UInt64 CODEC(T64, ZSTD(1))" in task_end
    assert "`speculative` UInt8 CODEC(ZSTD(1))" in task_end
    assert (
        "`event_time` DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(`event_time_ms`, 'UTC') CODEC(ZSTD(1))"
        in task_end
    )
    assert "`launch_time` DateTime64(3, 'UTC') ALIAS fromUnixTimestamp64Milli(`launch_time_ms`, 'UTC')" in task_end
    assert task_end.endswith(
        "ENGINE = ReplacingMergeTree\n"
        "PARTITION BY toYYYYMM(`event_time`)\n"
        "ORDER BY (`cluster`, toDate(event_time), `app_id`, `app_attempt`, `stage_id`, `stage_attempt`, `seq`)\n"
        "TTL toDateTime(`event_time`) + INTERVAL 45 DAY"
    )
    assert "`properties` Map(String, String) CODEC(ZSTD(1))" in _statement(statements, "app_start")
    assert "`dropped_by_type` Map(String, Int64) CODEC(ZSTD(1))" in _statement(statements, "listener_health")
    assert "`shuffle_reads_metric_accumulators` Array(Map(String, Int64))" in _statement(statements, "aqe_plan_update")
    for table in ALL_TABLES:
        statement = _statement(statements, table)
        assert "TTL toDateTime(`event_time`) + INTERVAL 45 DAY" in statement
        assert "DateTime64(3, 'UTC') MATERIALIZED" in statement


def test_old_server_output_has_no_newer_features() -> None:
    statements = render_ddl(OLD, "db")
    text = "\n".join(statements)
    for feature in ("TTL", "CODEC", "DateTime64", "Map(", "LowCardinality"):
        assert feature not in text
    task_end = _statement(statements, "task_end")
    assert "`failure_class` Nullable(String),\n" in task_end
    assert "`event_time` DateTime('UTC') MATERIALIZED toDateTime(intDiv(`event_time_ms`, 1000), 'UTC'),\n" in task_end
    assert "`properties` String DEFAULT '{}'" in _statement(statements, "app_start")
    assert "`shuffle_reads_metric_accumulators` Array(String),\n" in _statement(statements, "aqe_plan_update")


def test_feature_gates_by_version() -> None:
    assert Features.for_version((18, 16, 1)) == Features(False, False, False, False, False)
    assert Features.for_version((20, 4, 9)) == Features(False, False, False, False, False)
    assert Features.for_version((20, 5)) == Features(True, True, True, True, False)
    assert Features.for_version((21, 8, 3)) == Features(True, True, True, True, False)
    assert Features.for_version((22, 1)) == Features(True, True, True, True, True)
    assert Features.for_version((23, 8, 16, 40)) == Features(True, True, True, True, True)


def test_column_types_follow_the_annotations() -> None:
    types = {c.name: c.ch_type for c in table_for("stage_completed").columns}
    assert types["task_duration_ms_p50"] == "Int64"
    assert types["shuffle_read_remote_bytes_max"] == "Int64"
    assert types["locality_process_local"] == "UInt64"
    assert types["locality_any"] == "UInt64"
    assert types["job_id"] == "Nullable(Int64)"
    assert types["submission_time_ms"] == "Nullable(Int64)"
    assert types["output_files"] == "Nullable(UInt64)"
    assert types["status"] == "LowCardinality(String)"
    assert types["name"] == "String"
    assert types["event_type"] == "LowCardinality(String)"
    job_start = {c.name: c.ch_type for c in table_for("job_start").columns}
    assert job_start["stage_ids"] == "Array(Int64)"
    assert job_start["job_group"] == "Nullable(String)"
    plan = {c.name: c for c in table_for("aqe_plan_update").columns}
    assert plan["join_strategies"].ch_type == "Array(String)"
    assert plan["shuffle_reads_node_id"].ch_type == "Array(Int64)"
    assert plan["shuffle_reads_skewed"].ch_type == "Array(UInt8)"
    assert plan["shuffle_reads_skewed"].path == ("shuffle_reads", "skewed")
    assert plan["shuffle_reads_skewed"].encoding == "each"
    task_end = {c.name: c.ch_type for c in table_for("task_end", OLD).columns}
    assert task_end["locality"] == "String"
    assert task_end["speculative"] == "UInt8"
    raw = {c.name: c for c in table_for(RAW_TABLE).columns}
    assert raw["payload"].ch_type == "String"
    assert raw["payload"].encoding == "json"


def test_column_paths_and_defaults() -> None:
    stage = table_for("stage_completed")
    assert stage.column("task_duration_ms_p95").path == ("task_duration_ms", "p95")
    assert stage.column("locality_node_local").path == ("locality", "node_local")
    assert stage.column("stage_attempt").default == 0
    assert stage.column("failure_reason").default is None
    assert table_for("task_end").column("schema_version").default == 1
    assert table_for("task_end").column("event_type").default == "task_end"
    assert table_for("app_start", OLD).column("properties").default == "{}"
    assert table_for("app_start", MODERN).column("properties").default == {}


@pytest.mark.parametrize("table", ALL_TABLES)
def test_sorting_key_is_exactly_the_event_identity_plus_event_values(table: str) -> None:
    spec = table_for(table)
    key = spec.order_by
    assert key[:4] == ("cluster", "toDate(event_time)", "app_id", "app_attempt")
    assert key[-1] == "seq"
    columns = set(spec.column_names)
    # every key part is a value of the event itself: two copies of an event share the whole key
    for part in key:
        name = re.sub(r"^toDate\((\w+)\)$", r"\1", part)
        assert name in columns or name == "event_time"
    assert {"app_id", "app_attempt", "seq"} <= set(key)


def test_dedup_views_list_derived_columns() -> None:
    statements = render_ddl(MODERN, "db")
    assert (
        "CREATE VIEW IF NOT EXISTS `db`.`task_end_dedup` AS\n"
        "SELECT *, `event_time`, `emitted_at`, `launch_time`, `finish_time` FROM `db`.`task_end` FINAL"
    ) in statements
    assert (
        "CREATE VIEW IF NOT EXISTS `db`.`raw_events_dedup` AS\n"
        "SELECT *, `event_time`, `emitted_at` FROM `db`.`raw_events` FINAL"
    ) in statements


def test_schema_migrations_table() -> None:
    assert render_ddl(OLD, "db")[1] == (
        "CREATE TABLE IF NOT EXISTS `db`.`schema_migrations`\n"
        "(\n    `version` UInt32,\n    `applied_at` DateTime('UTC') DEFAULT now()\n)\n"
        "ENGINE = ReplacingMergeTree\nORDER BY (`version`)"
    )
    assert DDL_VERSION >= 1


def test_unknown_event_types_map_to_the_raw_table() -> None:
    assert table_for("some_future_event").name == RAW_TABLE
    assert schema_for(MODERN, "db").table_for("some_future_event").name == RAW_TABLE
    assert schema_for(MODERN, "db").table_for("task_end").name == "task_end"


def test_identifiers_and_literals_are_quoted() -> None:
    assert quote_ident("we`ird") == "`we\\`ird`"
    assert quote_literal("it's") == "'it\\'s'"
    assert quote_literal(True) == "1"
    statements = render_ddl(MODERN, "my-db")
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS `my-db`"
    assert "`index` Int64" in _statement([s.replace("`my-db`", "`db`") for s in statements], "task_end")


def test_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="retention_days=0 is out of range: use 1 to"):
        render_ddl(MODERN, "db", retention_days=0)


@pytest.mark.parametrize("version", [MODERN, OLD])
def test_run_fact_tables_have_small_granules(version: tuple[int, ...]) -> None:
    """The few-rows-per-application tables an event-driven pass reads earlier runs from by ``app_id`` have granules
    of 256 rows (one earlier run costs 256 rows, not 8,192); the other tables keep the server's default."""
    statements = render_ddl(version, "db")
    for table in ("app_start", "app_end", "executor_added", "executor_removed", "executor_metrics"):
        assert _statement(statements, table).endswith("\nSETTINGS index_granularity = 256")
    for table in ("task_end", "stage_completed", "sql_start", RAW_TABLE):
        assert "index_granularity" not in _statement(statements, table)


def test_a_retention_past_datetimes_end_is_refused_before_it_deletes_every_row() -> None:
    """The TTL ``toDateTime(event_time) + INTERVAL n DAY`` is a DateTime (last second 2106-02-07 06:28:15 UTC): with
    36,500 days a 2021 event's TTL wrapped to 1970-something and an import stored nothing. The bound keeps an event
    of today inside the range."""
    import datetime as dt

    from sparktap.schemas.schema import MAX_RETENTION_DAYS
    from sparktap.store.settings import ClickHouseSettings

    datetime_end = dt.datetime(2106, 2, 7, 6, 28, 15, tzinfo=dt.UTC)
    assert dt.datetime(2026, 11, 29, tzinfo=dt.UTC) + dt.timedelta(days=MAX_RETENTION_DAYS) < datetime_end
    ttl = [s for s in render_ddl((26, 9), "db", MAX_RETENTION_DAYS) if "CREATE TABLE" in s and "TTL" in s]
    assert ttl and all(f"INTERVAL {MAX_RETENTION_DAYS} DAY" in s for s in ttl)
    with pytest.raises(
        ValueError, match=r"retention_days=36500 is out of range: use 1 to 25000 \(the TTL is a DateTime"
    ):
        schema_for((26, 9), "db", 36_500)
    with pytest.raises(ValueError, match="retention_days=0 is out of range"):
        schema_for((18, 16, 1), "db", 0)
    fields = (
        "retention_days",
        "task_retention_days",
        "stage_retention_days",
        "app_retention_days",
        "findings_retention_days",
    )
    for field in fields:
        with pytest.raises(ValueError, match="less than or equal to 25000"):
            ClickHouseSettings(**{field: MAX_RETENTION_DAYS + 1})
