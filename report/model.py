"""What the report shows of one application: stages, SQL executions, AQE decisions, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sparktap.errors import SparktapError
from sparktap.report.plans import PlansAndStreams
from sparktap.report.tables import TableUse

if TYPE_CHECKING:
    from sparktap.detection import Finding, Thresholds


class UnknownApplicationError(SparktapError):
    """No event of the requested application is stored."""


@dataclass(frozen=True)
class Distribution:
    """Task durations (ms) of one stage attempt: exact quartiles from ``task_end`` rows, or the stage aggregates
    of ``stage_completed`` (which have no 25th percentile)."""

    source: Literal["task_end", "stage_completed"]
    count: int
    min: float
    p25: float | None
    p50: float
    p75: float
    p95: float | None
    max: float


@dataclass(frozen=True)
class Stage:
    """One stage attempt, finished (``stage_completed``) or not (``stage_submitted`` / ``task_end`` only)."""

    app_attempt: str
    stage_id: int
    stage_attempt: int
    name: str
    status: str
    job_id: int | None
    sql_execution_id: int | None
    start_ms: int | None
    end_ms: int | None
    num_tasks: int
    tasks_failed: int
    durations: Distribution | None
    read_kind: str  # what the data-skew ratio is over: "shuffle read" or "input"
    read_p50: float
    read_max: float
    input_bytes: int = 0
    shuffle_local_bytes: int = 0
    shuffle_remote_bytes: int = 0
    shuffle_write_bytes: int = 0
    memory_spill_bytes: int = 0
    disk_spill_bytes: int = 0
    description: str = ""
    """Its job's description (``sc.setJobDescription``), else its SQL execution's; '' when neither is set."""
    ran_by: str = ""
    """Who ran it: the Spark Connect user of its job's operation ('' outside Connect; issue 26)."""

    @property
    def title(self) -> str:
        """What the stage is called: its job or SQL description when there is one, else its call site."""
        return self.description or self.name

    def label(self, attempts: int = 1) -> str:
        text = f"stage {self.stage_id}" + (f".{self.stage_attempt}" if self.stage_attempt else "")
        return f"{text} (a{self.app_attempt})" if attempts > 1 else text

    @property
    def duration_skew(self) -> float | None:
        d = self.durations
        return d.max / d.p50 if d is not None and d.p50 > 0 else None

    @property
    def data_skew(self) -> float | None:
        return self.read_max / self.read_p50 if self.read_p50 > 0 else None


@dataclass(frozen=True)
class SqlExecution:
    execution_id: int
    description: str
    start_ms: int | None
    duration_ms: int | None
    error: str | None
    ended: bool
    job_description: str = ""
    """The description of its first job that has one (when the execution's own description is empty)."""

    @property
    def title(self) -> str:
        return self.description or self.job_description


@dataclass(frozen=True)
class ShuffleReadNode:
    node_id: int
    coalesced: bool
    skewed: bool
    local: bool
    description: str


@dataclass(frozen=True)
class AqeUpdate:
    execution_id: int
    at_ms: int
    final_plan: bool
    previous_join_strategies: list[str]
    join_strategies: list[str]
    shuffle_reads: list[ShuffleReadNode]


@dataclass(frozen=True)
class AqeRead:
    execution_id: int
    node_id: int
    at_ms: int
    coalesced: bool
    skewed: bool
    local: bool
    num_partitions: int | None
    partition_data_size_bytes: int | None
    num_skewed_partitions: int | None
    num_skewed_splits: int | None
    num_coalesced_partitions: int | None


@dataclass(frozen=True)
class Report:
    """Everything the HTML shows about one application."""

    app_id: str
    app_name: str
    cluster: str
    attempts: list[str]
    spark_version: str
    master: str
    user: str
    start_ms: int | None
    end_ms: int | None
    last_event_ms: int
    running: bool
    properties: dict[str, str]
    executors: int
    stages: list[Stage] = field(default_factory=list)
    sql: list[SqlExecution] = field(default_factory=list)
    aqe_updates: list[AqeUpdate] = field(default_factory=list)
    aqe_reads: list[AqeRead] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    plans: PlansAndStreams = field(default_factory=PlansAndStreams)
    """Plan nodes (estimates, codegen) and streaming micro-batches (``plans.py``)."""
    source: str = ""
    generated_at_ms: int = 0
    thresholds: Thresholds | None = None
    """The detection thresholds the findings used (None: the defaults)."""
    utilisation: Any = None
    """Core-time held vs used and executor memory peaks (``report/utilisation.py``); None without executor events."""
    tables: list[TableUse] = field(default_factory=list)
    """The tables it read and wrote, with each written table's trend (``report/tables.py``)."""
    blind: list[str] = field(default_factory=list)
    """What the rules could not see for this application (``detection/blind.py``): one line per missing input."""

    @property
    def duration_ms(self) -> int | None:
        if self.start_ms is None:
            return None
        return (self.end_ms if self.end_ms is not None else self.last_event_ms) - self.start_ms


# ----------------------------------------------------------------------------------------------- reading
