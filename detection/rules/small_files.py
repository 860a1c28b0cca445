"""Small files: a write produced many tiny files.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import (
    Impact,
    MiB,
    Millis,
    Rule,
    RuleSql,
    Size,
    concat,
    floors,
    integer,
    size,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class SmallFiles(Impact):
    """A write of > 100 files averaging < 3 MiB; the fix suggests files of 128 MiB."""

    min_files: Annotated[int, Field(ge=1)] = 100
    max_avg_file_bytes: Size = 3 * MiB
    target_file_bytes: Annotated[int, Field(gt=0)] = 128 * MiB
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000
    per_file_ms: Millis = 20
    """Estimated fixed cost of one output file (create, commit, and open again on every read)."""


def sql(t: Thresholds) -> list[RuleSql]:
    c: SmallFiles = t.small_files
    return [
        RuleSql(
            rule="small_files",
            source="stage",
            time_lost=f"greatest(out_files - sf_target, 0.) * {lit(c.per_file_ms)} / greatest(least(slots, tasks), 1.)",
            floors=floors(c),
            derived=(
                ("sf_avg", "out_bytes / greatest(out_files, 1.)"),
                ("sf_target", f"greatest(1., ceil(out_bytes / {lit(c.target_file_bytes)}))"),
            ),
            condition=f"out_files > {lit(c.min_files)} AND sf_avg < {lit(c.max_avg_file_bytes)}",
            severity="'warning'",
            value="out_files",
            threshold=lit(c.min_files),
            evidence=(
                ("files", "out_files"),
                ("bytes_written", "out_bytes"),
                ("avg_file_bytes", "sf_avg"),
                ("suggested_files", "sf_target"),
                ("files_estimated", "files_estimated"),
            ),
            explanation=concat(
                "'Wrote ', if(files_estimated = 1, '~', ''), ",
                integer("out_files"),
                ", ' files averaging ', ",
                size("sf_avg"),
                ", ' (', ",
                size("out_bytes"),
                ", ' in all)'",
            ),
            fix=concat(
                "'coalesce(', ",
                integer("sf_target"),
                ", ') or repartition(', ",
                integer("sf_target"),
                ", ') before the write for files of about ', ",
                size(lit(c.target_file_bytes)),
                ", ' (or the /*+ REBALANCE */ hint with AQE; for partitioned output repartition by the partition "
                "columns)'",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    e = t.small_files
    return f"a write of > {e.min_files} files averaging < {e.max_avg_file_bytes / MiB:g} MiB"


RUNBOOK = """\
**Fires when** a write produced > 100 files averaging < 3 MiB (file count from Spark where it reports it; otherwise
estimated from the tasks that wrote output, shown with `~`).

**Fix**: `coalesce(N)` or `repartition(N)` before the write with N = bytes ÷ 128 MiB (the message gives N), or the
`/*+ REBALANCE */` hint with AQE; for partitioned output repartition by the partition columns. Compact existing small
files (Delta `OPTIMIZE`, Iceberg `rewrite_data_files`).
"""

RULE = Rule(
    id="small_files",
    order=50,
    title="Small files",
    summary="a write produced many tiny files",
    config=SmallFiles,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the files beyond the suggested count × the fixed cost of a file (`per_file_ms`, 20 ms: create, "
        "commit, and open again on every read) over the stage's slots"
    ),
)
