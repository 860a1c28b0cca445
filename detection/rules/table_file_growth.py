"""Table file growth: a table keeps getting small files and nothing compacts it (issue 42).

One self-describing rule over the ``table`` relation (``detection/tables.py``): per table (cluster, catalog, name or
path, format), the files written over the last ``window_days`` since its last compaction in the window. A compaction is
a write whose ``write_mode`` is a compaction (``schemas/rollups.py``, ``COMPACTION_MODES``: Delta ``OPTIMIZE``,
Iceberg ``rewrite_data_files`` …); the ``table_access`` contract has no files-removed figure, so a compaction done
outside Spark (or not reported as such a write) is not seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import Impact, MiB, Millis, Rule, RuleSql, Size, concat, floors, integer, size
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class TableFileGrowth(Impact):
    """> 10,000 files written to a table over 30 days (since its last compaction) averaging < 32 MiB, over at least
    2 writes; the fix suggests files of 128 MiB."""

    window_days: Annotated[int, Field(ge=1, le=400)] = 30
    min_files: Annotated[int, Field(ge=1)] = 10_000
    max_avg_file_bytes: Size = 32 * MiB
    min_writes: Annotated[int, Field(ge=1)] = 2
    """A table written once is a big write (``small_files`` names it), not growth."""
    target_file_bytes: Annotated[int, Field(gt=0)] = 128 * MiB
    per_file_ms: Millis = 20
    """Estimated fixed cost of one file (commit it, and open it again on every read), as ``small_files``."""
    min_time_lost_ms: Millis = 60_000
    critical_min_time_lost_ms: Millis = 3_600_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: TableFileGrowth = t.table_file_growth
    quote = "''"  # one ' inside a SQL string literal
    return [
        RuleSql(
            rule="table_file_growth",
            source="table",
            floors=floors(c),
            derived=(
                ("tg_avg", "g_bytes / greatest(g_files, 1.)"),
                ("tg_target", f"greatest(1., ceil(g_bytes / {lit(c.target_file_bytes)}))"),
                ("tg_per_day", "g_files / greatest(g_days, 1.)"),
                ("tg_excess", "greatest(g_files - tg_target, 0.)"),
            ),
            # every excess file is committed once and opened again by each read of the table in the window
            time_lost=f"tg_excess * {lit(c.per_file_ms)} * (1. + g_reads)",
            condition=(
                f"g_in_range = 1 AND g_files > {lit(c.min_files)} AND tg_avg < {lit(c.max_avg_file_bytes)} "
                f"AND g_writes >= {lit(c.min_writes)}"
            ),
            severity="'critical'",  # a warning under the critical time floor (RuleSql.graded)
            value="g_files",
            threshold=lit(c.min_files),
            evidence=(
                ("files", "g_files"),
                ("bytes_written", "g_bytes"),
                ("avg_file_bytes", "tg_avg"),
                ("writes", "g_writes"),
                ("days", "g_days"),
                ("files_per_day", "tg_per_day"),
                ("suggested_files", "tg_target"),
                ("reads", "g_reads"),
                ("bytes_read", "g_bytes_read"),
                ("compactions", "g_compactions"),
                ("top_writer_files", "g_top_writer_files"),
                ("writers", "g_writers"),
            ),
            explanation=concat(
                "stage_name, ' (', if(g_format != '', g_format, 'unknown format'), ",
                "if(g_location != '' AND g_location != stage_name, concat(', ', g_location), ''), ') got ', ",
                integer("g_files"),
                ", ' files averaging ', ",
                size("tg_avg"),
                ", ' in ', ",
                integer("g_writes"),
                ", ' writes over ', ",
                integer("g_days"),
                ", ' days (', ",
                integer("tg_per_day"),
                ", ' a day), ', ",
                "if(g_compactions > 0, 'since its last compaction', ",
                f"'no compaction in the last {c.window_days} days'), ",
                "'; top writer ', g_top_writer, ' (', ",
                integer("g_top_writer_files"),
                ", ' files); read ', ",
                integer("g_reads"),
                ", ' times'",
            ),
            fix=concat(
                "multiIf(g_format = 'delta', ",
                "concat('OPTIMIZE ', stage_name, ' (or delta.autoOptimize.optimizeWrite)'), ",
                "g_format = 'iceberg', ",
                f"concat('CALL <catalog>.system.rewrite_data_files(table => {quote}', stage_name, ",
                f"'{quote}) on a schedule'), ",
                "concat('rewrite ', stage_name, ' to files of about ', ",
                size(lit(c.target_file_bytes)),
                ", ' (', ",
                integer("tg_target"),
                ", ' files)')), ",
                "'; and at the source: the top writer repartitions (or coalesces) before the write, by the partition "
                "columns for partitioned tables, or uses /*+ REBALANCE */ with AQE'",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.table_file_growth
    return (
        f"a table got > {c.min_files} files averaging < {c.max_avg_file_bytes / MiB:g} MiB over {c.window_days} "
        f"days in at least {c.min_writes} writes, with no compaction since"
    )


RUNBOOK = """\
**Fires when** a table (catalog and name, or a bare path, and its format) got > 10,000 files averaging < 32 MiB over
the last 30 days in at least 2 writes, counting only the writes after its last compaction in the window, and was
written in the detection range (the finding comes once per write, not at every pass). A compaction is a write whose
mode is `optimize`, `rewrite`, `compact`, `rewrite_data_files`, `rewrite_manifests`, `zorder` or `vacuum`; the
`table_access` contract carries no files-removed figure, so a compaction run outside a monitored Spark application is
not seen. The finding is attributed to the top writer's latest run that wrote the table (its team and channel).
Critical when the time lost passes an hour (`critical_min_time_lost_ms`), else a warning.

**Check**: the **sparktap / Tables** dashboard (the table's files and average file size per day, its writers).

**Fix**: compact the table on a schedule — Delta `OPTIMIZE <table>` (or optimized writes / auto compaction), Iceberg
`CALL <catalog>.system.rewrite_data_files(table => '<table>')`, other formats a rewrite to files of about 128 MiB —
and fix the writer (the finding names the top writer by recurring job key, else application name): `repartition`
by the partition columns or `coalesce` before the write, or `/*+ REBALANCE */` with AQE.
"""

RULE = Rule(
    id="table_file_growth",
    order=55,
    title="Table file growth",
    summary="a table keeps getting many small files and nothing compacts it",
    config=TableFileGrowth,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the files beyond the suggested count × the fixed cost of a file (`per_file_ms`, 20 ms) × (1 + the reads "
        "of the table in the window): each excess file is committed once and opened again by every read"
    ),
)
