"""Plan misestimate: a table scan read ≥ 10× the rows its table statistics count (stale statistics).

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``plan``
relation (``detection/relations.py``): one finding per plan node (``sql_execution_id``, ``node_id``).

Only what can be fixed (issue 39): a scan's estimate is its table's row count from the last ANALYZE, so more rows
read than that is the table grown since. The estimates of filters and joins are derived, and on real workloads they
are off where nothing can be done: a semi or anti join's estimate is its left input's row count (an upper bound, with
or without CBO); with CBO, a join whose keys carry no column statistics is estimated as a cross product, which is
always the case once AQE re-plans over query stages (their statistics have row counts, no column statistics); and on
fresh statistics the selectivity model misjudges composite keys, correlated columns, OR and range predicates. None of
those is a finding. Nor is a scan that read fewer rows than the table holds: partition pruning and Parquet row-group
skipping do that by design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import (
    Ladder,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    concat,
    crossed,
    floors,
    integer,
    ladder,
    times,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class PlanMisestimate(Ladder):
    """A scan read ≥ 10× the rows of its table statistics (critical ≥ 1,000×), ≥ 100,000 rows."""

    ratio_warning: Ratio = 10.0
    ratio_critical: Ratio = 1000.0
    min_rows: Annotated[int, Field(ge=0)] = 100_000
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 10_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: PlanMisestimate = t.plan_misestimate
    table = "replaceRegexpOne(p_operator, '^Scan [^ ]+ ?', '')"
    return [
        RuleSql(
            rule="plan_misestimate",
            source="plan",
            time_lost="ifNull(exec_run_ms, 0.)",
            floors=floors(c),
            derived=(
                # a scan's estimate is its relation's row count: the table statistics of the last ANALYZE
                # (est_source 'catalog'; 'plan' when CBO or spark.sql.cbo.planStats.enabled carried them)
                (
                    "pm_stats",
                    f"like(p_operator, 'Scan %') AND {table} != '' AND p_est_rows >= 0 AND p_actual_rows >= 0",
                ),
                ("pm_ratio", "p_actual_rows / greatest(p_est_rows, 1.)"),
                ("pm_table", table),
                ("pm_cbo", "lower(ifNull(prop_cbo, '')) = 'true'"),
            ),
            condition=(f"pm_stats AND p_actual_rows >= {lit(c.min_rows)} AND pm_ratio >= {lit(c.ratio_warning)}"),
            severity=ladder("pm_ratio", [("warning", c.ratio_warning), ("critical", c.ratio_critical)]),
            value="pm_ratio",
            threshold=crossed("pm_ratio", c.ratio_warning, c.ratio_warning, c.ratio_critical),
            evidence=(
                ("estimated_rows", "p_est_rows"),
                ("actual_rows", "p_actual_rows"),
                ("ratio", "pm_ratio"),
                ("from_catalog", "p_est_source = 'catalog'"),
            ),
            explanation=concat(
                "p_operator, ': the statistics of ', pm_table, ' count ', ",
                integer("p_est_rows"),
                ", ' rows, the scan read ', ",
                integer("p_actual_rows"),
                ", ' (', ",
                times("pm_ratio", 0),
                ", ' more): rows were added after its last ANALYZE, the plan was sized on stale statistics'",
            ),
            fix=stats_fix(),
        )
    ]


def stats_fix() -> str:
    return concat(
        "'Refresh the statistics after every load that changes the table: ANALYZE TABLE ', pm_table, ",
        "' COMPUTE STATISTICS FOR ALL COLUMNS (a REFRESH TABLE does not update them). Stale row counts make Spark ', ",
        "'broadcast a table that is really large or pick a bad join order', ",
        "if(pm_cbo, '', '; with fresh column statistics, spark.sql.cbo.enabled=true also sizes the filters and joins "
        "above this scan'), ",
        "'. If the statistics cannot be kept fresh, pin the join with a hint (/*+ BROADCAST(small) */ or "
        "/*+ SHUFFLE_MERGE(big) */) instead of trusting the estimate'",
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.plan_misestimate
    return (
        f"a table scan read >= {c.ratio_warning:g}x the rows its table statistics count (critical >= "
        f"{c.ratio_critical:g}x), over {c.min_rows:,} rows: the statistics are stale"
    )


RUNBOOK = """\
**Fires when**, in a finished SQL execution (`sql_plan_stats`), a scan of a catalog table read ≥ 10× the rows its
table statistics count (critical from 1,000×), at least 100,000 rows, and the execution's task time is at least 1 s
(10 s for critical). The scan's estimate is the relation's own row count (before any filter): the table statistics
of the last `ANALYZE TABLE`, so reading more is the table grown since, and every filter and join above it was sized
on stale statistics. Stale statistics make Spark broadcast a table that is really large, sort-merge-join a tiny one,
or pick a bad join order.

**Not findings**, because nothing can be fixed there: a scan that read fewer rows than its table holds (partition
pruning, row-group skipping); the estimates of semi and anti joins (`IN`/`EXISTS` subqueries: Spark's estimate is
the left input's row count, an upper bound); with CBO, the cross-product estimate of joins whose keys carry no
column statistics (always so once AQE re-plans over query stages); and the selectivity model's errors on fresh
statistics (composite keys, correlated columns, OR and range predicates). The application dashboard's *Plan:
estimated vs actual rows* still lists every node with both numbers.

**Check**: *Plan: estimated vs actual rows* (application dashboard); the finding names the scan, its table, the SQL
execution and the plan node.

**Fix**: `ANALYZE TABLE <table> COMPUTE STATISTICS FOR ALL COLUMNS` after every load that changes it (a `REFRESH
TABLE` does not update statistics); with fresh column statistics `spark.sql.cbo.enabled=true` (read from the
application's `app_start` properties) also sizes the filters and joins above the scan. If the statistics cannot be
kept fresh, pin the join with a hint (`/*+ BROADCAST(small) */`, `/*+ SHUFFLE_MERGE(big) */`).
"""

RULE = Rule(
    id="plan_misestimate",
    order=110,
    title="Plan misestimate",
    summary="a table scan read far more rows than its statistics count (stale statistics)",
    config=PlanMisestimate,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("the SQL execution's task time — an upper bound: the work planned on the wrong estimate"),
)
