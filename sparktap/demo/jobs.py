"""The demo's Spark jobs: one healthy control and one job per problem sparktap detects.

Each job is a separate Spark application so that its findings (or their absence) are its own. Sizes are chosen to
run in seconds on two cores; ``DEMO_THRESHOLDS`` scales the detection floors (bytes, seconds) down to match while
keeping every ratio and severity ladder at its documented default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparktap.detection import Thresholds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MiB = 1024 * 1024

DEMO_TIME_SCALE = 0.01
"""The demo's jobs run for seconds where production stages run for minutes: the time-lost floors scale by this."""


def _demo_thresholds() -> Thresholds:
    byte_floors = {
        "data_skew": {"min_max_bytes": 1 * MiB},
        "skew_not_fixed": {"min_partition_bytes": 1 * MiB},
        "shuffle_blowup": {"min_write_bytes": 8 * MiB, "min_spill_bytes": 8 * MiB, "history_min_bytes": 8 * MiB},
    }
    overrides: dict[str, dict[str, int]] = {}
    for group, values in Thresholds().model_dump().items():
        floors = {
            name: int(values[name] * DEMO_TIME_SCALE)
            for name in ("min_time_lost_ms", "critical_min_time_lost_ms")
            if isinstance(values, dict) and name in values
        }
        if floors or group in byte_floors:
            overrides[group] = {**byte_floors.get(group, {}), **floors}
    return Thresholds.model_validate(overrides)


DEMO_THRESHOLDS = _demo_thresholds()
"""The documented defaults with the floors scaled to laptop-sized data: byte floors to MiB, and every rule's
time-lost floors (``min_time_lost_ms``, ``critical_min_time_lost_ms``) by ``DEMO_TIME_SCALE``. Ratios, severity
ladders and the other floors are unchanged (so task-time skew, which needs a 5 s task, stays quiet on data this
small)."""


@dataclass(frozen=True)
class DemoJob:
    name: str
    description: str
    expected_rules: frozenset[str]
    conf: dict[str, str]
    run: Callable[[SparkSession, Path], None]


def healthy(spark: SparkSession, workdir: Path) -> None:
    """Balanced aggregation and a single-file write: nothing to report."""
    from pyspark.sql import functions as F  # noqa: N812

    df = spark.range(0, 2_000_000, 1, 4).select((F.col("id") % 1000).alias("k"), (F.col("id") * 3).alias("v"))
    df.groupBy("k").agg(F.sum("v").alias("total")).coalesce(1).write.mode("overwrite").parquet(
        str(workdir / "healthy-out")
    )


def skewed_join(spark: SparkSession, workdir: Path) -> None:
    """A sort-merge join where 90 % of the fact rows carry one key, with AQE's skew-join handling (and partition
    coalescing, which would hide the small partitions) off."""
    from pyspark.sql import functions as F  # noqa: N812

    facts = spark.range(0, 2_000_000, 1, 8).select(
        F.when(F.col("id") % 10 < 9, F.lit(0)).otherwise(F.col("id") % 1000).alias("k"),
        (F.col("id") * 7).alias("v"),
        F.repeat(F.lit("x"), 24).alias("pad"),
    )
    dim = spark.range(0, 1000).select(F.col("id").alias("k"), (F.col("id") * 3).alias("w"))
    facts.join(dim.hint("merge"), "k").groupBy((F.col("v") % 7).alias("b")).agg(F.sum("w")).collect()


def tiny_partitions(spark: SparkSession, workdir: Path) -> None:
    """A stage of 5,200 tasks that each do almost nothing."""
    from pyspark.sql import functions as F  # noqa: N812

    spark.range(0, 5_200, 1, 5_200).select((F.col("id") * 2).alias("x")).agg(F.sum("x")).collect()


def shuffle_blowup(spark: SparkSession, workdir: Path) -> None:
    """An explode that multiplies each input line 40 times, then shuffles every exploded row."""
    from pyspark.sql import functions as F  # noqa: N812

    source = workdir / "blowup-input.txt"
    if not source.exists():
        with source.open("w") as out:
            for i in range(100_000):
                out.write(f"line-{i}-{i * 31 % 9973}\n")
    lines = spark.read.text(str(source))
    exploded = lines.select(F.explode(F.sequence(F.lit(1), F.lit(40))).alias("i"), "value")
    exploded.repartition(4, "i", "value").select(F.sum(F.length("value") + F.col("i"))).collect()


def small_files(spark: SparkSession, workdir: Path) -> None:
    """A write of 150 files of about a kilobyte each."""
    spark.range(0, 15_000, 1, 150).write.mode("overwrite").parquet(str(workdir / "small-files-out"))


JOBS: tuple[DemoJob, ...] = (
    DemoJob("healthy", "balanced aggregation, one output file", frozenset(), {}, healthy),
    DemoJob(
        "skewed-join",
        "sort-merge join, 90% of rows on one key",
        frozenset({"data_skew", "skew_not_fixed"}),
        {
            "spark.sql.adaptive.skewJoin.enabled": "false",
            "spark.sql.adaptive.coalescePartitions.enabled": "false",
            "spark.sql.autoBroadcastJoinThreshold": "-1",
            "spark.sql.shuffle.partitions": "8",
        },
        skewed_join,
    ),
    DemoJob(
        "tiny-partitions", "5,200 tasks of a few milliseconds", frozenset({"small_partitions"}), {}, tiny_partitions
    ),
    DemoJob(
        "shuffle-blowup",
        "explode x40 before a shuffle",
        frozenset({"shuffle_blowup"}),
        {"spark.sql.shuffle.partitions": "4"},
        shuffle_blowup,
    ),
    DemoJob("small-files", "150 files of ~1 KiB", frozenset({"small_files"}), {}, small_files),
)
