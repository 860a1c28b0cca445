"""A valid example of every event type: used by tests, the DDL round trips and the docs.

The examples happen at ``EXAMPLE_TIME_MS``, 11:06:40 UTC yesterday, fixed when this module is imported: relative
to the current day because the collector refuses events older than its retention and the tables drop them after
their TTL (absolute times would break the suite a retention after they were written), truncated to the day so
every run on one day sees the same times. Tests that pin a collector's clock pin it relative to this time.
"""

from __future__ import annotations

import time
from typing import Any

from sparktap.schemas.events import EVENT_TYPES, Envelope

DAY_MS = 86_400_000
EXAMPLE_TIME_MS = (int(time.time()) * 1000 // DAY_MS - 1) * DAY_MS + 40_000_000
"""the examples' ``event_time_ms``: 11:06:40 UTC of the day before the one this module was imported on"""
_T = EXAMPLE_TIME_MS


def _quantiles(base: int) -> dict[str, int]:
    return {"min": base, "p50": base * 2, "p75": base * 3, "p95": base * 4, "max": base * 10, "sum": base * 40}


_ENVELOPE: dict[str, Any] = {
    "cluster": "prod-eu",
    "app_id": "app-20261122120000-0001",
    "app_attempt": "1",
    "app_name": "nightly-etl",
    "emitted_at_ms": _T + 500,
    "event_time_ms": _T,
}

_BODIES: dict[str, dict[str, Any]] = {
    "app_start": {
        "spark_version": "4.3.0",
        "master": "local[2]",
        "user": "etl",
        "properties": {"spark.sql.adaptive.enabled": "true"},
        "tags": {"team": "payments", "cost_centre": "cc-42"},
    },
    "app_end": {"duration_ms": 61_000, "properties": {"spark.executor.memory": "4g"}},
    "job_start": {
        "job_id": 3,
        "stage_ids": [4, 5],
        "sql_execution_id": 2,
        "job_group": "g",
        "description": "count",
        "job_tags": ["team-x"],
        "user_id": "alice",
        "session_id": "3f1c",
        "operation_id": "9a2e",
    },
    "job_end": {"job_id": 3, "result": "succeeded", "duration_ms": 1200},
    "sql_start": {"execution_id": 2, "root_execution_id": 2, "description": "select 1"},
    "sql_end": {"execution_id": 2, "duration_ms": 1300},
    "stage_submitted": {
        "stage_id": 5,
        "stage_attempt": 0,
        "name": "count at x.py:1",
        "num_tasks": 4,
        "parent_stage_ids": [4],
        "job_id": 3,
        "sql_execution_id": 2,
        "submission_time_ms": _T,
    },
    "stage_completed": {
        "stage_id": 5,
        "stage_attempt": 0,
        "name": "count at x.py:1",
        "job_id": 3,
        "sql_execution_id": 2,
        "status": "succeeded",
        "submission_time_ms": _T,
        "completion_time_ms": _T + 1_000,
        "duration_ms": 1000,
        "num_tasks": 4,
        "tasks_succeeded": 4,
        "task_duration_ms": _quantiles(10),
        "run_time_ms": _quantiles(9),
        "gc_time_ms": _quantiles(1),
        "input_bytes": _quantiles(100),
        "shuffle_read_bytes": _quantiles(300),
        "shuffle_read_local_bytes": _quantiles(100),
        "shuffle_read_remote_bytes": _quantiles(200),
        "shuffle_write_bytes": _quantiles(50),
        "memory_spill_bytes": _quantiles(0),
        "disk_spill_bytes": _quantiles(0),
        "locality": {"process_local": 3, "node_local": 1, "rack_local": 0, "no_pref": 0, "any": 0},
        "shuffle_local_blocks": 8,
        "shuffle_remote_blocks": 4,
        "shuffle_fetch_wait_ms": 12,
        "shuffle_remote_bytes_to_disk": 0,
        "shuffle_records_read": 1000,
        "shuffle_records_written": 10,
        "input_records": 1000,
        "output_bytes": 0,
        "output_records": 0,
        "output_files": 2,
        "sql_shuffle_write_bytes": 2000,
        "sql_shuffle_read_bytes": 12000,
        "sql_shuffle_read_remote_bytes": 8000,
        "sql_spill_bytes": 0,
        "cpu_time_ns": 123_000_000,
        "peak_execution_memory_max": 65536,
    },
    "task_end": {
        "stage_id": 5,
        "stage_attempt": 0,
        "task_id": 17,
        "index": 1,
        "attempt": 0,
        "executor_id": "driver",
        "host": "10.0.0.7",
        "locality": "PROCESS_LOCAL",
        "speculative": False,
        "status": "SUCCESS",
        "launch_time_ms": _T + 100,
        "finish_time_ms": _T + 150,
        "duration_ms": 50,
        "run_time_ms": 40,
        "cpu_time_ns": 30_000_000,
        "gc_time_ms": 2,
        "deserialize_time_ms": 3,
        "result_size_bytes": 1500,
        "input_bytes": 4096,
        "input_records": 100,
        "output_bytes": 0,
        "output_records": 0,
        "shuffle_local_blocks": 2,
        "shuffle_remote_blocks": 1,
        "shuffle_local_bytes": 700,
        "shuffle_remote_bytes": 300,
        "shuffle_remote_bytes_to_disk": 0,
        "shuffle_fetch_wait_ms": 1,
        "shuffle_records_read": 50,
        "shuffle_write_bytes": 80,
        "shuffle_write_records": 4,
        "shuffle_write_time_ns": 90_000,
        "memory_spill_bytes": 0,
        "disk_spill_bytes": 0,
        "peak_execution_memory": 1024,
    },
    "aqe_plan_update": {
        "execution_id": 2,
        "final_plan": True,
        "join_strategies": ["BroadcastHashJoin"],
        "previous_join_strategies": ["SortMergeJoin"],
        "shuffle_reads": [
            {
                "node_id": 4,
                "coalesced": False,
                "skewed": False,
                "local": True,
                "description": "AQEShuffleRead local",
                "metric_accumulators": {"number of partitions": 901, "partition data size": 902},
            }
        ],
    },
    "aqe_shuffle_read": {
        "execution_id": 2,
        "node_id": 4,
        "skewed": True,
        "num_partitions": 12,
        "partition_data_size_bytes": 1_048_576,
        "num_skewed_partitions": 1,
        "num_skewed_splits": 4,
    },
    "executor_added": {
        "executor_id": "1",
        "host": "10.0.0.8",
        "total_cores": 4,
        "memory_mb": 4096,
        "memory_overhead_mb": 410,
        "pyspark_memory_mb": 512,
        "resource_profile_id": 0,
    },
    "executor_removed": {"executor_id": "1", "reason": "Command exited with code 137", "removal_class": "oom"},
    "executor_metrics": {
        "executor_id": "1",
        "stage_id": 5,
        "stage_attempt": 0,
        "updates": 6,
        "jvm_heap_memory": 412_000_000,
        "jvm_off_heap_memory": 98_000_000,
        "on_heap_execution_memory": 64_000_000,
        "off_heap_execution_memory": 0,
        "on_heap_storage_memory": 2_000_000,
        "off_heap_storage_memory": 0,
        "on_heap_unified_memory": 66_000_000,
        "off_heap_unified_memory": 0,
        "direct_pool_memory": 1_200_000,
        "mapped_pool_memory": 0,
        "process_tree_jvm_rss_memory": 700_000_000,
        "process_tree_python_rss_memory": 80_000_000,
        "process_tree_other_rss_memory": 0,
        "minor_gc_count": 12,
        "minor_gc_time": 140,
        "major_gc_count": 1,
        "major_gc_time": 90,
        "total_gc_time": 230,
    },
    "sql_plan_stats": {
        "execution_id": 2,
        "whole_stage_codegen": True,
        "codegen_max_fields": 100,
        "codegen_huge_method_limit": 65535,
        "nodes": [
            {
                "node_id": 0,
                "operator": "WholeStageCodegen (1)",
                "codegen_stage": 1,
                "codegen_duration_ms": 12,
                "time_ms": 12,
            },
            {
                "node_id": 1,
                "parent_id": 0,
                "operator": "HashAggregate",
                "actual_rows": 1,
                "codegen_stage": 1,
                "time_ms": 9,
            },
            {
                "node_id": 2,
                "parent_id": 1,
                "operator": "Scan parquet default.orders",
                "est_rows": 10,
                "est_bytes": 4096,
                "est_source": "catalog",
                "actual_rows": 2_000_000,
                "codegen_stage": 1,
            },
        ],
    },
    "table_access": {
        "execution_id": 2,
        "node_id": 0,
        "role": "write",
        "operator": "Execute InsertIntoHadoopFsRelationCommand",
        "catalog": "spark_catalog",
        "table": "sales.orders",
        "format": "parquet",
        "location": "s3a://lake/sales/orders",
        "write_mode": "append",
        "files": 4000,
        "bytes": 368_640_000,
        "rows": 2_000_000,
        "partitions": 0,
        "metrics_source": "plan",
        "index": 0,
        "of": 2,
    },
    "streaming_query_start": {
        "query_id": "1b4e28ba-2fa1-4e5c-8a5b-4d3f2e7c9a10",
        "run_id": "6f1c2d3e-4b5a-4c7d-9e8f-0a1b2c3d4e5f",
        "name": "orders",
    },
    "streaming_query_progress": {
        "query_id": "1b4e28ba-2fa1-4e5c-8a5b-4d3f2e7c9a10",
        "run_id": "6f1c2d3e-4b5a-4c7d-9e8f-0a1b2c3d4e5f",
        "name": "orders",
        "batch_id": 7,
        "num_input_rows": 1200,
        "input_rows_per_second": 240.5,
        "processed_rows_per_second": 180.25,
        "duration_ms": {"triggerExecution": 6657, "addBatch": 6400},
        "watermark_ms": _T - 60_000,
        "sources": [
            {
                "description": "KafkaV2[Subscribe[orders]]",
                "start_offset": '{"orders":{"0":100}}',
                "end_offset": '{"orders":{"0":1300}}',
                "latest_offset": '{"orders":{"0":5300}}',
                "num_input_rows": 1200,
                "input_rows_per_second": 240.5,
                "processed_rows_per_second": 180.25,
                "backlog": 4000,
            }
        ],
        "state_operators": [
            {
                "operator_name": "stateStoreSave",
                "num_rows_total": 5000,
                "num_rows_updated": 120,
                "memory_used_bytes": 1_048_576,
                "num_rows_dropped_by_watermark": 3,
            }
        ],
        "sink": "ForeachBatchSink",
        "sink_num_output_rows": 1200,
    },
    "streaming_query_end": {
        "query_id": "1b4e28ba-2fa1-4e5c-8a5b-4d3f2e7c9a10",
        "run_id": "6f1c2d3e-4b5a-4c7d-9e8f-0a1b2c3d4e5f",
        "name": "orders",
    },
    "operation": {
        "operation_id": "9a2e",
        "session_id": "3f1c",
        "user_id": "alice",
        "user_name": "alice",
        "status": "finished",
        "session_tags": ["team-x"],
        "start_time_ms": _T - 2_000,
        "rows": 10,
    },
    "listener_health": {
        "interval_ms": 10_000,
        "queue_depth": 0,
        "queue_capacity": 100_000,
        "events_accepted": 120,
        "events_dropped": 0,
        "dropped_by_type": {},
        "relay_backlog": 0,
    },
}


def example_event(event_type: str, seq: int = 1, **overrides: Any) -> Envelope:
    """A valid event of ``event_type`` (envelope included); ``overrides`` replace any field."""
    model = EVENT_TYPES[event_type]
    data = {**_ENVELOPE, "event_type": event_type, "seq": seq, **_BODIES[event_type], **overrides}
    return model.model_validate(data)
