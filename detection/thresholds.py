"""Named detection thresholds with the documented defaults (ARCHITECTURE.md, Detection).

One config object, kubernetes-mixin ``_config`` style: every number a rule compares against has a name here, a
default taken from the Detection table, and a type. The SQL builders render these values as literals
(``detection/sql.py``), never user text. Override with ``Thresholds(data_skew={"min_max_bytes": ...})``
or, in a process, ``SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES=...``.

Severity ladders: a rule with three rungs reports ``info`` from the first, ``warning`` from the second (the "fires
when" value of the Detection table) and ``critical`` from the third. Only ``warning`` and above are notified by
default (``AlertSettings.min_severity``); ``info`` findings show on the dashboards.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

Ratio = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(gt=0, le=1)]
Size = Annotated[int, Field(ge=0)]
Millis = Annotated[int, Field(ge=0)]


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Ladder(_Group):
    """info <= warning <= critical rungs of one ratio."""

    @model_validator(mode="after")
    def _ordered(self) -> _Ladder:
        rungs = [getattr(self, n) for n in ("ratio_info", "ratio_warning", "ratio_critical") if hasattr(self, n)]
        if rungs != sorted(rungs):
            raise ValueError(f"severity rungs must not decrease: {rungs}")
        return self


class TaskTimeSkew(_Ladder):
    """Stage max task duration / median >= 4 (warning) / 10 (critical), max >= 5 s and >= 75 % of the stage."""

    ratio_warning: Ratio = 4.0
    ratio_critical: Ratio = 10.0
    min_max_task_ms: Millis = 5_000
    min_share_of_stage: Share = 0.75


class DataSkew(_Ladder):
    """Max / median bytes per task (shuffle read, or input) 1.78 / 3.16 / 10, max >= 100 MiB."""

    ratio_info: Ratio = 1.78
    ratio_warning: Ratio = 3.16
    ratio_critical: Ratio = 10.0
    min_max_bytes: Size = 100 * MiB


class SkewNotFixed(_Group):
    """After AQE a partition is still > 5 x the median and > 256 MiB (Spark's own skew-join defaults)."""

    factor: Ratio = 5.0
    min_partition_bytes: Size = 256 * MiB


class SmallPartitions(_Group):
    """> 5,000 tasks with median < 500 ms, or AQE-coalesced partitions far below the advisory size."""

    min_tasks: Annotated[int, Field(ge=1)] = 5_000
    max_median_task_ms: Millis = 500
    aqe_min_partitions: Annotated[int, Field(ge=1)] = 100
    aqe_max_fraction_of_advisory: Share = 0.1
    advisory_partition_bytes: Annotated[int, Field(gt=0)] = 64 * MiB
    """spark.sql.adaptive.advisoryPartitionSizeInBytes when the application does not report it."""


class SmallFiles(_Group):
    """A write of > 100 files averaging < 3 MiB; the fix suggests files of 128 MiB."""

    min_files: Annotated[int, Field(ge=1)] = 100
    max_avg_file_bytes: Size = 3 * MiB
    target_file_bytes: Annotated[int, Field(gt=0)] = 128 * MiB


class OversizedPartition(_Group):
    """A task reading > 5 GiB (input or shuffle)."""

    max_task_bytes: Size = 5 * GiB


class ShuffleBlowup(_Group):
    """Shuffle write >= 10 x stage input (>= 1 GiB); disk spill / bytes processed >= 0.25; >= 5 x own history."""

    write_ratio_warning: Ratio = 10.0
    write_ratio_critical: Ratio = 100.0
    min_write_bytes: Size = 1 * GiB
    spill_ratio_warning: Ratio = 0.25
    spill_ratio_critical: Ratio = 1.0
    min_spill_bytes: Size = 100 * MiB
    history_ratio_warning: Ratio = 5.0
    history_ratio_critical: Ratio = 20.0
    history_min_bytes: Size = 100 * MiB
    history_min_runs: Annotated[int, Field(ge=1)] = 3
    history_runs: Annotated[int, Field(ge=1)] = 10
    history_days: Annotated[int, Field(ge=1)] = 30

    @model_validator(mode="after")
    def _ordered(self) -> ShuffleBlowup:
        for low, high in (("write_ratio_warning", "write_ratio_critical"), ("spill_ratio_warning",
                          "spill_ratio_critical"), ("history_ratio_warning", "history_ratio_critical")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low} must not exceed {high}")
        if self.history_min_runs > self.history_runs:
            raise ValueError("history_min_runs must not exceed history_runs")
        return self


class RemoteHeavyShuffle(_Group):
    """Remote / total shuffle-read bytes >= 0.9 and fetch wait >= 20 % of task run time."""

    min_remote_share: Share = 0.9
    min_fetch_wait_share: Share = 0.2
    min_run_time_ms: Millis = 10_000


class TaskFailures(_Ladder):
    """Failed / attempted tasks 0.05 / 0.1 / 0.2."""

    ratio_info: Share = 0.05
    ratio_warning: Share = 0.1
    ratio_critical: Share = 0.2


class GcPressure(_Ladder):
    """GC time / task run time 0.08 / 0.1 / 0.2, over at least 60 s of task run time."""

    ratio_info: Share = 0.08
    ratio_warning: Share = 0.1
    ratio_critical: Share = 0.2
    min_run_time_ms: Millis = 60_000


class RunningStages(_Group):
    """Partial evaluation of stages still running, from their finished tasks (``task_end``)."""

    enabled: bool = True
    min_finished_tasks: Annotated[int, Field(ge=1)] = 20


class Thresholds(_Group):
    """Every detection threshold, by rule."""

    task_time_skew: TaskTimeSkew = TaskTimeSkew()
    data_skew: DataSkew = DataSkew()
    skew_not_fixed: SkewNotFixed = SkewNotFixed()
    small_partitions: SmallPartitions = SmallPartitions()
    small_files: SmallFiles = SmallFiles()
    oversized_partition: OversizedPartition = OversizedPartition()
    shuffle_blowup: ShuffleBlowup = ShuffleBlowup()
    remote_heavy_shuffle: RemoteHeavyShuffle = RemoteHeavyShuffle()
    task_failures: TaskFailures = TaskFailures()
    gc_pressure: GcPressure = GcPressure()
    running: RunningStages = RunningStages()


DEFAULT_THRESHOLDS = Thresholds()
