"""The builder of the synthetic applications the detection samples are made of: ``App`` hands out ``seq`` numbers
and event times and emits ``schemas/examples.py`` events, so every event is valid against the contract, with
helpers for a stage, its tasks and an AQE plan update; ``uniform`` and ``skewed`` give a metric's quantiles.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sparktap.detection.thresholds import MiB
from sparktap.schemas.events import Envelope
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event

BASE_TIME_MS = EXAMPLE_TIME_MS
"""the time of ``schemas/examples.py``'s events: 11:06:40 UTC yesterday (inside the retention on any day)"""


def uniform(per_task: int, tasks: int) -> dict[str, int]:
    """Quantiles of a metric that is the same for every task."""
    return {
        "min": per_task,
        "p50": per_task,
        "p75": per_task,
        "p95": per_task,
        "max": per_task,
        "sum": per_task * tasks,
    }


def skewed(typical: int, largest: int, tasks: int) -> dict[str, int]:
    """Quantiles of a metric where one task has ``largest`` and the others about ``typical``."""
    return {
        "min": typical // 2,
        "p50": typical,
        "p75": typical,
        "p95": typical + typical // 5,
        "max": largest,
        "sum": typical * (tasks - 1) + largest,
    }


@dataclass
class App:
    """One application attempt: hands out ``seq`` numbers and event times."""

    app_id: str
    app_name: str = "nightly-etl"
    cluster: str = "prod-eu"
    start_ms: int = BASE_TIME_MS
    app_attempt: str = "1"
    properties: dict[str, str] = field(default_factory=lambda: {"spark.sql.adaptive.enabled": "true"})
    tags: dict[str, str] = field(default_factory=dict)
    events: list[Envelope] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def emit(self, event_type: str, at_ms: int, **fields: Any) -> Envelope:
        event = example_event(
            event_type,
            seq=next(self._seq),
            cluster=self.cluster,
            app_id=self.app_id,
            app_name=self.app_name,
            app_attempt=self.app_attempt,
            event_time_ms=at_ms,
            emitted_at_ms=at_ms + 5,
            **fields,
        )
        self.events.append(event)
        return event

    def start(self) -> App:
        self.emit("app_start", self.start_ms, properties=dict(self.properties), tags=dict(self.tags))
        return self

    def end(self, at_ms: int) -> App:
        self.emit("app_end", at_ms, duration_ms=at_ms - self.start_ms, properties={})
        return self

    def stage(
        self,
        stage_id: int,
        at_ms: int,
        *,
        tasks: int = 200,
        duration_ms: int = 20_000,
        task_ms: int = 2_000,
        bytes_per_task: int = 8 * MiB,
        shuffle_read: bool = True,
        sql_execution_id: int | None = 1,
        job_id: int | None = 1,
        name: str | None = None,
        **overrides: Any,
    ) -> Envelope:
        """A stage_submitted + stage_completed pair, balanced unless ``overrides`` say otherwise."""
        name = name or f"stage {stage_id} at job.py:{10 + stage_id}"
        submitted = at_ms - duration_ms
        self.emit(
            "stage_submitted",
            submitted,
            stage_id=stage_id,
            name=name,
            num_tasks=tasks,
            job_id=job_id,
            sql_execution_id=sql_execution_id,
            submission_time_ms=submitted,
            parent_stage_ids=[],
        )
        read = uniform(bytes_per_task if shuffle_read else 0, tasks)
        inp = uniform(0 if shuffle_read else bytes_per_task, tasks)
        body: dict[str, Any] = {
            "stage_id": stage_id,
            "name": name,
            "job_id": job_id,
            "sql_execution_id": sql_execution_id,
            "status": "succeeded",
            "submission_time_ms": submitted,
            "completion_time_ms": at_ms,
            "duration_ms": duration_ms,
            "num_tasks": tasks,
            "tasks_succeeded": tasks,
            "tasks_failed": 0,
            "task_duration_ms": uniform(task_ms, tasks),
            "run_time_ms": uniform(task_ms * 9 // 10, tasks),
            "gc_time_ms": uniform(task_ms // 100, tasks),
            "input_bytes": inp,
            "shuffle_read_bytes": read,
            "shuffle_read_local_bytes": uniform((bytes_per_task if shuffle_read else 0) // 2, tasks),
            "shuffle_read_remote_bytes": uniform((bytes_per_task if shuffle_read else 0) // 2, tasks),
            "shuffle_write_bytes": uniform(bytes_per_task // 2, tasks),
            "memory_spill_bytes": uniform(0, tasks),
            "disk_spill_bytes": uniform(0, tasks),
            "locality": {"process_local": tasks, "node_local": 0, "rack_local": 0, "no_pref": 0, "any": 0},
            "shuffle_fetch_wait_ms": tasks * 10,
            "output_bytes": 0,
            "output_records": 0,
            "output_files": None,
            # the operators' SQL figures, as a listener before schema minor 3 (none): a sample sets them to say more
            "sql_shuffle_write_bytes": None,
            "sql_shuffle_read_bytes": None,
            "sql_shuffle_read_remote_bytes": None,
            "sql_spill_bytes": None,
        }
        body.update(overrides)
        return self.emit("stage_completed", at_ms, **body)

    def tasks(
        self,
        stage_id: int,
        at_ms: int,
        durations_ms: list[int],
        *,
        bytes_each: int = 8 * MiB,
        failed: int = 0,
        stage_attempt: int = 0,
    ) -> None:
        """``task_end`` events of one stage attempt, the last finishing at ``at_ms``; the first ``failed`` fail."""
        for index, duration in enumerate(durations_ms):
            finish = at_ms - (len(durations_ms) - 1 - index) * 10
            self.emit(
                "task_end",
                finish,
                stage_id=stage_id,
                stage_attempt=stage_attempt,
                task_id=stage_id * 100_000 + index,
                index=index,
                launch_time_ms=finish - duration,
                finish_time_ms=finish,
                duration_ms=duration,
                run_time_ms=duration * 9 // 10,
                gc_time_ms=duration // 100,
                status="FAILED" if index < failed else "SUCCESS",
                input_bytes=0,
                shuffle_local_bytes=bytes_each // 2,
                shuffle_remote_bytes=bytes_each // 2,
                shuffle_write_bytes=bytes_each // 2,
                output_bytes=0,
            )

    def aqe(
        self,
        execution_id: int,
        at_ms: int,
        *,
        node_id: int = 4,
        joins: tuple[str, ...] = ("SortMergeJoin",),
        **read: Any,
    ) -> None:
        """An AQE plan update with one shuffle read node, and that node's metrics."""
        flags = {k: read.get(k, False) for k in ("coalesced", "skewed", "local")}
        self.emit(
            "aqe_plan_update",
            at_ms,
            execution_id=execution_id,
            final_plan=True,
            join_strategies=list(joins),
            previous_join_strategies=["SortMergeJoin"],
            shuffle_reads=[{"node_id": node_id, **flags, "description": "AQEShuffleRead", "metric_accumulators": {}}],
        )
        self.emit(
            "aqe_shuffle_read",
            at_ms + 1,
            execution_id=execution_id,
            node_id=node_id,
            **{
                "num_partitions": None,
                "partition_data_size_bytes": None,
                "num_skewed_partitions": None,
                "num_skewed_splits": None,
                "num_coalesced_partitions": None,
                **flags,
                **read,
            },
        )
