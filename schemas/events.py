"""The event contract: one pydantic model per event family, plus the envelope every event carries, and the
registry of the known ones (``KNOWN_EVENTS``, ``EVENT_TYPES``). This module is the import path of every event model:
the envelope (``envelope.py``), the SQL plan and AQE events (``plan_events.py``), the Structured Streaming and
Spark Connect events (``stream_events.py``) and the table events (``table_events.py``) are defined apart and
re-exported here; the application, job, stage, task, executor and health events are defined here.

The rules of the contract are in ``envelope.py`` (docs/architecture.md, Event contract).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from sparktap.schemas.envelope import SCHEMA_MINOR, SCHEMA_VERSION, Envelope, _Model
from sparktap.schemas.plan_events import AqePlanUpdate, AqeShuffleRead, AqeShuffleReadNode, PlanNode, SqlPlanStats
from sparktap.schemas.stream_events import (
    Operation,
    OperationStatus,
    StreamingQueryEnd,
    StreamingQueryProgress,
    StreamingQueryStart,
    StreamingSource,
    StreamingStateOperator,
)
from sparktap.schemas.table_events import TableAccess
from sparktap.schemas.types import Bytes, Count, EpochMillis, Id, Ident, Label, Millis, Nanos

__all__ = [
    "EVENT_TYPES",
    "KNOWN_EVENTS",
    "SCHEMA_MINOR",
    "SCHEMA_VERSION",
    "AppEnd",
    "AppStart",
    "AqePlanUpdate",
    "AqeShuffleRead",
    "AqeShuffleReadNode",
    "Envelope",
    "ExecutorAdded",
    "ExecutorMetrics",
    "ExecutorRemoved",
    "JobEnd",
    "JobStart",
    "ListenerHealth",
    "Locality",
    "LocalityHistogram",
    "Operation",
    "OperationStatus",
    "PlanNode",
    "Quantiles",
    "RemovalClass",
    "SqlEnd",
    "SqlPlanStats",
    "SqlStart",
    "StageCompleted",
    "StageSubmitted",
    "StreamingQueryEnd",
    "StreamingQueryProgress",
    "StreamingQueryStart",
    "StreamingSource",
    "StreamingStateOperator",
    "TableAccess",
    "TaskEnd",
    "UnknownEvent",
]

Locality = Literal["PROCESS_LOCAL", "NODE_LOCAL", "RACK_LOCAL", "NO_PREF", "ANY"]


class Quantiles(_Model):
    """Distribution of one task metric over the tasks of a stage."""

    min: Annotated[int, Field(ge=0)]
    p50: Annotated[int, Field(ge=0)]
    p75: Annotated[int, Field(ge=0)]
    p95: Annotated[int, Field(ge=0)]
    max: Annotated[int, Field(ge=0)]
    sum: Annotated[int, Field(ge=0)]


class LocalityHistogram(_Model):
    """Number of tasks launched at each locality level."""

    process_local: Count = 0
    node_local: Count = 0
    rack_local: Count = 0
    no_pref: Count = 0
    any: Count = 0


# --------------------------------------------------------------------------------------------- application


class AppStart(Envelope):
    event_type: Literal["app_start"] = "app_start"
    spark_version: Label
    master: Label = ""
    user: Label = ""
    properties: dict[str, str] = Field(
        default_factory=dict, description="allow-listed, redacted Spark properties only; never raw conf values"
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="attribution tags (team, cost_centre …) read from the conf keys named by "
        "spark.sparktap.tags; team falls back to spark.yarn.queue / spark.kubernetes.namespace; redacted labels "
        "(schema minor 1)",
    )


class AppEnd(Envelope):
    event_type: Literal["app_end"] = "app_end"
    duration_ms: Millis | None = None
    properties: dict[str, str] = Field(default_factory=dict, description="allow-listed, redacted Spark properties")


# --------------------------------------------------------------------------------------------- jobs and SQL


class JobStart(Envelope):
    event_type: Literal["job_start"] = "job_start"
    job_id: Id
    stage_ids: list[int] = Field(default_factory=list)
    sql_execution_id: Id | None = None
    job_group: str | None = None
    description: str | None = Field(default=None, description="redacted like SQL text (Connect puts requests here)")
    job_tags: list[str] = Field(
        default_factory=list, description="spark.job.tags (SparkContext.addJobTag, spark.addTag), Connect's own too"
    )
    user_id: Label = Field(default="", description="Spark Connect user id of the operation; '' outside Connect")
    session_id: Label = Field(default="", description="Spark Connect session id; '' outside Connect")
    operation_id: Label = Field(default="", description="Spark Connect operation id; '' outside Connect")


class JobEnd(Envelope):
    event_type: Literal["job_end"] = "job_end"
    job_id: Id
    result: Literal["succeeded", "failed"]
    failure_reason: str | None = None
    duration_ms: Millis | None = None


class SqlStart(Envelope):
    event_type: Literal["sql_start"] = "sql_start"
    execution_id: Id
    root_execution_id: Id | None = None
    description: str = ""
    user_id: Label = ""
    session_id: Label = ""
    operation_id: Label = ""


class SqlEnd(Envelope):
    event_type: Literal["sql_end"] = "sql_end"
    execution_id: Id
    duration_ms: Millis | None = None
    error: str | None = None


# --------------------------------------------------------------------------------------------- stages


class StageSubmitted(Envelope):
    event_type: Literal["stage_submitted"] = "stage_submitted"
    stage_id: Id
    stage_attempt: Id = 0
    name: str = ""
    num_tasks: Count
    parent_stage_ids: list[int] = Field(default_factory=list)
    job_id: Id | None = None
    sql_execution_id: Id | None = None
    submission_time_ms: EpochMillis | None = None
    slots: Count = Field(
        default=0,
        description="task slots (executor cores / spark.task.cpus) registered when the stage was "
        "submitted: a running stage's waves are num_tasks / slots (stage_completed has the most it had)",
    )
    user_id: Label = ""
    session_id: Label = ""
    operation_id: Label = ""


class StageCompleted(Envelope):
    """A finished stage attempt with aggregates over its tasks (computed in the driver)."""

    event_type: Literal["stage_completed"] = "stage_completed"
    stage_id: Id
    stage_attempt: Id = 0
    name: str = ""
    job_id: Id | None = None
    sql_execution_id: Id | None = None
    status: Label = Field(description="succeeded or failed")
    failure_reason: str | None = None
    submission_time_ms: EpochMillis | None = None
    completion_time_ms: EpochMillis | None = None
    duration_ms: Millis = Field(description="stage wall time, submission to completion")
    num_tasks: Count
    tasks_succeeded: Count = 0
    tasks_failed: Count = 0
    tasks_killed: Count = 0
    tasks_resubmitted: Count = Field(
        default=0,
        description="of tasks_failed, Spark's Resubmitted markers: a task that had succeeded, re-queued after its "
        "executor was lost; no failure and no attempt (detection/stage_rows.py)",
    )
    tasks_commit_denied: Count = Field(
        default=0, description="of tasks_failed, denied commits (a speculative copy whose twin committed first)"
    )
    slots: Count = Field(
        default=0,
        description="most task slots (executor cores / spark.task.cpus) registered while the stage ran; "
        "num_tasks / slots = waves",
    )
    # per-task distributions (successful and failed task attempts that reported metrics)
    task_duration_ms: Quantiles
    run_time_ms: Quantiles
    gc_time_ms: Quantiles
    input_bytes: Quantiles
    shuffle_read_bytes: Quantiles = Field(description="local + remote, per task")
    shuffle_read_local_bytes: Quantiles
    shuffle_read_remote_bytes: Quantiles
    shuffle_write_bytes: Quantiles
    memory_spill_bytes: Quantiles
    disk_spill_bytes: Quantiles
    shuffle_read_records: Quantiles = Field(
        default_factory=lambda: Quantiles(min=0, p50=0, p75=0, p95=0, max=0, sum=0),
        description="records read from the shuffle, per task: row skew that pruning and compression hide in bytes",
    )
    input_records_per_task: Quantiles = Field(
        default_factory=lambda: Quantiles(min=0, p50=0, p75=0, p95=0, max=0, sum=0),
        description="records read from the input, per task (input_records is the stage's total)",
    )
    locality: LocalityHistogram
    shuffle_local_blocks: Count = 0
    shuffle_remote_blocks: Count = 0
    shuffle_fetch_wait_ms: Millis = 0
    shuffle_remote_bytes_to_disk: Bytes = 0
    shuffle_records_read: Count = 0
    shuffle_records_written: Count = 0
    input_records: Count = 0
    output_bytes: Bytes = 0
    output_records: Count = 0
    output_files: Count | None = Field(default=None, description="files written, where Spark reports them")
    scan_bytes_read: Bytes | None = Field(
        default=None,
        description="size of the files read by the file scans the stage ran (their 'size of files read' SQL metric; "
        "for a DSv2 BatchScan, which has none, the file splits of its input partitions); the input bytes to trust "
        "where the tasks' own are under a byte per row (Spark 4 Parquet vectored IO)",
    )
    scan_files_read: Count | None = Field(
        default=None,
        description="files read by those scans (their 'number of files read' SQL metric; for a DSv2 BatchScan the "
        "distinct files of its input partitions)",
    )
    sql_shuffle_write_bytes: Bytes | None = Field(
        default=None,
        description="shuffle bytes written, summed over the stage's SQL metrics (Spark's and Comet's 'shuffle bytes "
        "written', Photon's shuffle sink 'num bytes written'); where the tasks report no shuffle write, the stage "
        "rules read it here (an engine that keeps its shuffle out of Spark's task metrics)",
    )
    sql_shuffle_read_bytes: Bytes | None = Field(
        default=None, description="shuffle bytes read (remote + local), summed over the stage's SQL metrics"
    )
    sql_shuffle_read_remote_bytes: Bytes | None = Field(
        default=None, description="of those, read from other executors ('remote bytes read')"
    )
    sql_spill_bytes: Bytes | None = Field(
        default=None,
        description="bytes spilled, summed over the stage's SQL metrics (Spark's 'spill size', Photon's 'num bytes "
        "spilled to disk due to memory pressure'); read where the tasks report no spill",
    )
    cpu_time_ns: Nanos = 0
    peak_execution_memory_max: Bytes = 0
    user_id: Label = ""
    session_id: Label = ""
    operation_id: Label = ""


# --------------------------------------------------------------------------------------------- tasks


class TaskEnd(Envelope):
    event_type: Literal["task_end"] = "task_end"
    stage_id: Id
    stage_attempt: Id = 0
    task_id: Id
    index: Id = Field(description="partition index within the stage")
    attempt: Id = 0
    executor_id: Ident
    host: Label
    locality: Locality
    speculative: bool = False
    late: bool = Field(
        default=False,
        description="ended after its stage attempt's stage_completed (a speculative copy killed once the stage "
        "finished, a cancelled stage's tasks): not in that event's totals, which the views correct from these rows; "
        "sent whatever the task sampling",
    )
    status: Label = Field(description="SUCCESS, FAILED, KILLED, …")
    failure_class: Label | None = Field(default=None, description="e.g. ExceptionFailure, FetchFailed, TaskKilled")
    failure_message: str | None = None
    launch_time_ms: EpochMillis
    finish_time_ms: EpochMillis
    duration_ms: Millis
    run_time_ms: Millis = 0
    cpu_time_ns: Nanos = 0
    gc_time_ms: Millis = 0
    deserialize_time_ms: Millis = 0
    result_size_bytes: Bytes = 0
    input_bytes: Bytes = 0
    input_records: Count = 0
    output_bytes: Bytes = 0
    output_records: Count = 0
    shuffle_local_blocks: Count = 0
    shuffle_remote_blocks: Count = 0
    shuffle_local_bytes: Bytes = 0
    shuffle_remote_bytes: Bytes = 0
    shuffle_remote_bytes_to_disk: Bytes = 0
    shuffle_fetch_wait_ms: Millis = 0
    shuffle_records_read: Count = 0
    shuffle_write_bytes: Bytes = 0
    shuffle_write_records: Count = 0
    shuffle_write_time_ns: Nanos = 0
    memory_spill_bytes: Bytes = 0
    disk_spill_bytes: Bytes = 0
    peak_execution_memory: Bytes = 0
    user_id: Label = ""
    session_id: Label = ""
    operation_id: Label = ""


# --------------------------------------------------------------------------------------------- executors


RemovalClass = Literal["oom", "killed", "lost", "app_end", "other"]


class ExecutorAdded(Envelope):
    event_type: Literal["executor_added"] = "executor_added"
    executor_id: Ident
    host: Label
    total_cores: Count = 0
    memory_mb: Count | None = Field(
        default=None, description="requested heap (spark.executor.memory or the resource profile), MiB; minor 1"
    )
    memory_overhead_mb: Count | None = Field(
        default=None,
        description="requested overhead (spark.executor.memoryOverhead, or Spark's default max(384, factor x "
        "memory) where the cluster manager adds one), MiB; null when unknown; minor 1",
    )
    pyspark_memory_mb: Count | None = Field(
        default=None, description="spark.executor.pyspark.memory, MiB; null when not set; minor 1"
    )
    resource_profile_id: Id | None = Field(default=None, description="the executor's resource profile; minor 1")


class ExecutorRemoved(Envelope):
    event_type: Literal["executor_removed"] = "executor_removed"
    executor_id: Ident
    reason: str = ""
    removal_class: RemovalClass = Field(
        default="other",
        description="oom: killed for memory (exit code 137, 'exceeding memory limits', OOMKilled, "
        "OutOfMemoryError); killed: by the driver or the cluster manager; lost: the worker or heartbeat was lost; "
        "app_end: still running when the application ended (synthetic, event_time = app end); minor 1",
    )


class ExecutorMetrics(Envelope):
    """Peak executor metrics (Spark's ExecutorMetricType names in snake_case), from task ends
    (``taskExecutorMetrics``) and heartbeats (``executorUpdates``): one per executor per stage attempt, emitted when
    the stage completes, plus one per executor for its whole lifetime (stage fields null), emitted at its removal
    or at app end. Executor ``driver`` is the driver. Minor 1."""

    event_type: Literal["executor_metrics"] = "executor_metrics"
    executor_id: Ident
    stage_id: Id | None = Field(default=None, description="null: the executor's whole lifetime")
    stage_attempt: Id | None = None
    updates: Count = Field(default=0, description="task ends and heartbeats that reported metrics")
    jvm_heap_memory: Bytes = 0
    jvm_off_heap_memory: Bytes = 0
    on_heap_execution_memory: Bytes = 0
    off_heap_execution_memory: Bytes = 0
    on_heap_storage_memory: Bytes = 0
    off_heap_storage_memory: Bytes = 0
    on_heap_unified_memory: Bytes = 0
    off_heap_unified_memory: Bytes = 0
    direct_pool_memory: Bytes = 0
    mapped_pool_memory: Bytes = 0
    process_tree_jvm_rss_memory: Bytes = Field(
        default=0, description="0 unless spark.executor.processTreeMetrics.enabled (the process_tree_* fields)"
    )
    process_tree_python_rss_memory: Bytes = 0
    process_tree_other_rss_memory: Bytes = 0
    minor_gc_count: Count = 0
    minor_gc_time: Millis = 0
    major_gc_count: Count = 0
    major_gc_time: Millis = 0
    total_gc_time: Millis = 0


# --------------------------------------------------------------------------------------------- health


class ListenerHealth(Envelope):
    """Every N seconds from the listener (and what the relay reported back to it)."""

    event_type: Literal["listener_health"] = "listener_health"
    interval_ms: Millis
    queue_depth: Count
    queue_capacity: Count
    events_accepted: Count
    events_dropped: Count
    dropped_by_type: dict[str, int] = Field(default_factory=dict)
    relay_backlog: Count = 0
    relay_restarts: Count = 0
    relay_spooled: Count = 0
    kafka_delivery_errors: Count = 0
    kafka_events_lost: Count = 0
    callback_errors: Count = 0
    """Listener callbacks that failed so far (each logged once per kind in the driver log)."""
    first_error: str | None = None
    """The first of them, ``"<callback>: <exception>"``, redacted; a failure to link turns the listener off."""


class UnknownEvent(Envelope):
    """An event type this reader does not know (a newer producer): kept whole in the raw table."""

    event_type: str
    payload: dict[str, Any] = Field(default_factory=dict)


KNOWN_EVENTS: tuple[type[Envelope], ...] = (
    AppStart,
    AppEnd,
    JobStart,
    JobEnd,
    SqlStart,
    SqlEnd,
    SqlPlanStats,
    TableAccess,
    StageSubmitted,
    StageCompleted,
    TaskEnd,
    AqePlanUpdate,
    AqeShuffleRead,
    ExecutorAdded,
    ExecutorRemoved,
    ExecutorMetrics,
    StreamingQueryStart,
    StreamingQueryProgress,
    StreamingQueryEnd,
    Operation,
    ListenerHealth,
)
EVENT_TYPES: dict[str, type[Envelope]] = {m.model_fields["event_type"].default: m for m in KNOWN_EVENTS}
