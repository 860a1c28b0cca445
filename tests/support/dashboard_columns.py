"""What each dashboard panel reads: (dashboard uid, panel title) -> the result columns the panel uses.

The panel contract test (``tests/integration/test_detection_panels.py``) runs every query on chDB and checks that it
returns these columns. ``COLUMNS`` looks a query text up, whatever database the dashboards were built for.
"""

from __future__ import annotations

import re

from sparktap.dashboards.config import DEFAULT_CONFIG
from sparktap.dashboards.dashboards import all_dashboards, panel_queries

FINDINGS_TABLE = ("time", "severity", "rule", "cluster", "app_name", "app_id", "stage", "explanation", "suggested_fix")
"""The findings tables (overview, application, cluster)."""

PANEL_COLUMNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("sparktap-overview", "Critical findings"): ("findings",),
    ("sparktap-overview", "Warning findings"): ("findings",),
    ("sparktap-overview", "Info findings"): ("findings",),
    ("sparktap-overview", "Applications alive"): ("applications", "running"),
    ("sparktap-overview", "Findings over time"): ("time", "severity", "findings"),
    ("sparktap-overview", "Open findings"): FINDINGS_TABLE,
    ("sparktap-overview", "Applications"): (
        "cluster",
        "app_name",
        "app_id",
        "started",
        "state",
        "duration_min",
        "stages",
        "tasks",
        "task_hours",
    ),
    ("sparktap-overview", "Listener and relay losses"): (
        "dropped_by_listener",
        "lost_in_kafka",
        "kafka_delivery_errors",
        "relay_backlog",
    ),
    ("sparktap-overview", "Events missing (sequence gaps)"): ("events_missing", "applications_affected"),
    ("sparktap-overview", "Listener queue fill"): ("time", "cluster", "queue_fill"),
    ("sparktap-overview", "Events stored by the collector"): ("time", "event_table", "events"),
    ("sparktap-overview", "Last event per cluster"): ("cluster", "last_event"),
    ("sparktap-application", "Application duration"): ("duration",),
    ("sparktap-application", "Stages and tasks"): ("stages", "tasks", "failed_tasks", "failed_stages"),
    ("sparktap-application", "Data volume"): ("input", "shuffle_read", "shuffle_written", "spilled_to_disk", "output"),
    ("sparktap-application", "Findings"): FINDINGS_TABLE,
    ("sparktap-application", "Stage timeline"): (
        "stage_id",
        "stage_attempt",
        "name",
        "submitted",
        "completed",
        "duration_s",
        "state",
    ),
    ("sparktap-application", "Task duration distribution per stage"): ("stage", "p50", "p75", "p95", "max"),
    ("sparktap-application", "Task duration histogram"): ("task_seconds",),
    ("sparktap-application", "Skew per stage"): ("stage", "duration_max_over_median", "bytes_max_over_median"),
    ("sparktap-application", "GC time and task failures per stage"): ("stage", "gc_share", "failed_share"),
    ("sparktap-application", "Shuffle read: local vs remote"): ("stage", "local", "remote"),
    ("sparktap-application", "Spills per stage"): ("stage", "memory_spill", "disk_spill"),
    ("sparktap-application", "AQE plan changes"): (
        "time",
        "execution_id",
        "joins_before",
        "joins_after",
        "coalesced_reads",
        "skewed_reads",
        "local_reads",
    ),
    ("sparktap-application", "AQE shuffle reads"): (
        "execution_id",
        "node_id",
        "coalesced",
        "skewed",
        "local",
        "partitions",
        "data_size",
        "skewed_partitions",
        "skew_splits",
    ),
    ("sparktap-application", "SQL executions"): ("time", "execution_id", "description", "duration_s", "state"),
    ("sparktap-application", "Plan: estimated vs actual rows"): (
        "execution_id",
        "node_id",
        "operator",
        "estimated_rows",
        "actual_rows",
        "off_by",
        "estimate_from",
    ),
    ("sparktap-application", "Codegen coverage"): ("execution", "operators_in_codegen", "operators_outside_codegen"),
    ("sparktap-application", "Native engine per query"): (
        "execution_id",
        "engine",
        "native_operators",
        "jvm_operators",
        "transitions",
        "native_s",
        "jvm_s",
    ),
    ("sparktap-cluster", "Applications started"): ("time", "applications"),
    ("sparktap-cluster", "Task time by application"): ("time", "app_name", "task_seconds"),
    ("sparktap-cluster", "Shuffle written by application"): ("time", "app_name", "shuffle_written"),
    ("sparktap-cluster", "Executors added and removed"): ("time", "executors_added", "executors_removed"),
    ("sparktap-cluster", "Failed and killed tasks"): ("time", "failed_tasks", "killed_tasks"),
    ("sparktap-cluster", "Top applications by task time"): (
        "app_name",
        "app_id",
        "stages",
        "tasks",
        "task_hours",
        "gc_pct",
        "shuffle_written",
    ),
    ("sparktap-cluster", "Findings by rule"): ("rule", "critical", "warning", "info"),
    ("sparktap-cluster", "Findings over time"): ("time", "severity", "findings"),
    ("sparktap-cluster", "Findings"): FINDINGS_TABLE,
    ("sparktap-cluster", "Listener health by application"): (
        "app_name",
        "app_id",
        "max_queue_pct",
        "dropped",
        "kafka_errors",
    ),
    ("sparktap-streaming", "Streaming findings"): (
        "time",
        "severity",
        "rule",
        "cluster",
        "app_name",
        "app_id",
        "query",
        "explanation",
        "suggested_fix",
    ),
    ("sparktap-streaming", "Streaming queries"): (
        "query",
        "run_id",
        "app_id",
        "started",
        "batches",
        "last_batch_id",
        "input_rows",
        "state",
    ),
    ("sparktap-streaming", "Input vs processed rows/s"): ("time", "query", "input_rows_per_s", "processed_rows_per_s"),
    ("sparktap-streaming", "Batch duration vs interval"): ("time", "query", "batch_duration_s", "batch_interval_s"),
    ("sparktap-streaming", "Source backlog"): ("time", "query", "backlog"),
    ("sparktap-streaming", "State rows"): ("time", "query", "state_rows", "rows_evicted"),
    ("sparktap-streaming", "State memory"): ("time", "query", "state_memory"),
    ("sparktap-fleet", "Cost by team"): ("time", "series", "cost"),
    ("sparktap-fleet", "Cost by user"): ("time", "series", "cost"),
    ("sparktap-fleet", "Cost by application"): (
        "app_name",
        "team",
        "cost_centre",
        "user",
        "runs",
        "core_hours",
        "gib_hours",
        "cost",
    ),
    ("sparktap-fleet", "Idle core-hours by team"): ("time", "series", "idle_core_hours"),
    ("sparktap-fleet", "Idle core-hours by application"): ("time", "series", "idle_core_hours"),
    ("sparktap-fleet", "Top wasters"): (
        "app_name",
        "team",
        "user",
        "runs",
        "idle_core_hours",
        "idle_share",
        "total_cost",
        "idle_cost",
        "cluster",
        "app_id",
    ),
    ("sparktap-fleet", "Memory headroom per recurring job"): (
        "cluster",
        "app_name",
        "runs",
        "heap_requested",
        "peak_used",
        "peak_share",
        "headroom",
        "oom_removals",
        "driver_peak",
        "driver_memory",
    ),
}


def _normal(sql: str) -> str:
    """The query with its database name taken out (`` `db`.`table` ``)."""
    return re.sub(r"`[^`]*`\.`", "`db`.`", sql.strip())


class QueryColumns:
    """Query text -> the columns its panel reads (from ``PANEL_COLUMNS``)."""

    def __init__(self) -> None:
        self._by_query = {
            _normal(sql): PANEL_COLUMNS[(board["uid"], title)]
            for board in all_dashboards(DEFAULT_CONFIG)
            for title, sql in panel_queries(board)
            if (board["uid"], title) in PANEL_COLUMNS
        }

    def get(self, sql: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        return self._by_query.get(_normal(sql), default)


COLUMNS = QueryColumns()
