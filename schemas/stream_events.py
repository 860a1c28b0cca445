"""The Structured Streaming and Spark Connect events (``sparktap.schemas.events`` re-exports them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sparktap.schemas.envelope import Envelope, _Model
from sparktap.schemas.types import Bytes, Count, EpochMillis, Id, Ident, Label

# --------------------------------------------------------------------------------------------- Structured Streaming


class StreamingQueryStart(Envelope):
    """A streaming query started (StreamingQueryListener.QueryStartedEvent)."""

    event_type: Literal["streaming_query_start"] = "streaming_query_start"
    query_id: Ident = Field(description="the query's id, stable across restarts from the same checkpoint")
    run_id: Ident = Field(description="this run of the query")
    name: Label | None = None


class StreamingSource(_Model):
    """One source of a micro-batch (SourceProgress)."""

    description: str = ""
    start_offset: str = Field(default="", description="as Spark writes it (JSON text), truncated to 2,000 chars")
    end_offset: str = ""
    latest_offset: str = ""
    num_input_rows: Count = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    backlog: Annotated[int, Field(ge=-1)] = Field(
        default=-1,
        description="positions between the end and the latest offset (sum over partitions); -1 when the offsets "
        "do not tell",
    )


class StreamingStateOperator(_Model):
    """One stateful operator of a micro-batch (StateOperatorProgress)."""

    operator_name: str = ""
    num_rows_total: Count = 0
    num_rows_updated: Count = 0
    memory_used_bytes: Bytes = 0
    num_rows_dropped_by_watermark: Count = 0
    num_rows_removed: Count = 0


class StreamingQueryProgress(Envelope):
    """A micro-batch finished (StreamingQueryListener.QueryProgressEvent), at most one per query per
    ``spark.sparktap.streaming.progressIntervalMs``."""

    event_type: Literal["streaming_query_progress"] = "streaming_query_progress"
    query_id: Ident
    run_id: Ident
    name: Label | None = None
    batch_id: Id
    num_input_rows: Count = 0
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    duration_ms: dict[str, int] = Field(
        default_factory=dict, description="Spark's durationMs: triggerExecution, addBatch, getBatch, latestOffset, …"
    )
    watermark_ms: EpochMillis | None = None
    sources: list[StreamingSource] = Field(default_factory=list)
    state_operators: list[StreamingStateOperator] = Field(default_factory=list)
    sink: str | None = None
    sink_num_output_rows: Count | None = None
    progress_skipped: Count = Field(default=0, description="progress events of this query skipped since the last one")


class StreamingQueryEnd(Envelope):
    """A streaming query stopped or failed (StreamingQueryListener.QueryTerminatedEvent)."""

    event_type: Literal["streaming_query_end"] = "streaming_query_end"
    query_id: Ident
    run_id: Ident
    name: Label | None = None
    exception: str | None = Field(default=None, description="why it failed, redacted; absent when stopped")
    error_class: Label | None = None
    progress_skipped: Count = 0


# --------------------------------------------------------------------------------------------- Spark Connect

OperationStatus = Literal[
    "started", "analyzed", "ready", "finished", "failed", "canceled", "closed", "session_started", "session_closed"
]


class Operation(Envelope):
    """A Spark Connect operation (or session) event, decoded from SparkListenerConnectOperation* /
    SparkListenerConnectSession* by class name; ``event_time_ms`` is when this status was reached."""

    event_type: Literal["operation"] = "operation"
    operation_id: Label = Field(default="", description="'' for session_started / session_closed")
    session_id: Label
    user_id: Label = ""
    user_name: Label = ""
    status: OperationStatus
    statement: str = Field(default="", description="the request text (started), redacted like SQL text")
    session_tags: list[str] = Field(default_factory=list, description="the session's tags (spark.addTag)")
    job_tag: str = Field(default="", description="the operation's job tag (SparkConnect_OperationTag_…)")
    start_time_ms: EpochMillis | None = Field(default=None, description="when the operation started")
    rows: Count | None = Field(default=None, description="rows produced (finished, where Spark reports it)")
    error: str | None = Field(default=None, description="why it failed, redacted")
