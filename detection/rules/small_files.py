"""Small files: a write produced many tiny files.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. When the stage's SQL
execution wrote a table (``table_access``, issue 42; the ``tables`` enrichment of ``detection/tables.py``), the finding
names it, its format and location, and its files written per day over the last 30 days (``table_rollup``), and the fix
is the table's own compaction (Delta ``OPTIMIZE``, Iceberg ``rewrite_data_files``).
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
            needs=frozenset({"tables"}),
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
                ("table_files_per_day_30d", "tw_trend_files / 30."),
                ("table_days_written_30d", "tw_trend_days"),
            ),
            explanation=concat(
                "'Wrote ', if(files_estimated = 1, '~', ''), ",
                integer("out_files"),
                ", ' files averaging ', ",
                size("sf_avg"),
                ", ' (', ",
                size("out_bytes"),
                ", ' in all)', ",
                f"if(tw_table != '', {_table_words()}, '')",
            ),
            fix=concat(
                "'coalesce(', ",
                integer("sf_target"),
                ", ') or repartition(', ",
                integer("sf_target"),
                ", ') before the write for files of about ', ",
                size(lit(c.target_file_bytes)),
                ", ' (or the /*+ REBALANCE */ hint with AQE; for partitioned output repartition by the partition "
                "columns)', ",
                f"if(tw_table != '', {_compaction()}, '')",
            ),
        )
    ]


def _table_words() -> str:
    """' to sales.orders (delta, s3a://lake/sales/orders); 1200 files a day over 20 of the last 30 days'"""
    return concat(
        "' to ', tw_table, ' (', if(tw_format != '', tw_format, 'unknown format'), ",
        "if(tw_location != '' AND tw_location != tw_table, concat(', ', tw_location), ''), ')', ",
        "if(tw_trend_days > 0, concat('; ', ",
        integer("tw_trend_files / greatest(tw_trend_days, 1.)"),
        ", ' files a day over ', ",
        integer("tw_trend_days"),
        ", ' of the last 30 days (', ",
        integer("tw_trend_files"),
        ", ' files)'), '')",
    )


def _compaction() -> str:
    """The table's own compaction, by format (the name is a value of the row, never SQL text)."""
    quote = "''"  # one ' inside a SQL string literal
    return concat(
        "'; compact what ', tw_table, ' already holds: ', ",
        "multiIf(tw_format = 'delta', concat('OPTIMIZE ', tw_table), ",
        f"tw_format = 'iceberg', concat('CALL <catalog>.system.rewrite_data_files(table => {quote}', tw_table, "
        f"'{quote})'), 'rewrite it with repartition()/coalesce() to files of about 128 MiB')",
    )


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

**The table**: when the stage's SQL execution wrote a table (the listener's `table_access` events), the finding names
it (qualified name, else its path), its format and location, and its trend from the per-table rollup: files written
per day over the days it was written in the last 30 (evidence `table_files_per_day_30d`: files ÷ 30,
`table_days_written_30d`); the fix adds the table's compaction (`OPTIMIZE <table>` for Delta, `rewrite_data_files` for
Iceberg, a rewrite with `repartition`/`coalesce` otherwise). A table that keeps growing is *Table file growth*.
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
