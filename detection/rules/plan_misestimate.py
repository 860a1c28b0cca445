"""Plan misestimate: at a scan or a join, the optimizer's row estimate is ≥ 10× off the rows it produced.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``plan``
relation (``detection/relations.py``): one finding per plan node (``sql_execution_id``, ``node_id``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import Ladder, Ratio, Rule, RuleSql, concat, crossed, integer, ladder, times
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class PlanMisestimate(Ladder):
    """Estimated vs actual rows ≥ 10× apart either way (critical ≥ 1,000×) at a scan or join, where the larger of
    the two is ≥ 100,000 rows."""

    ratio_warning: Ratio = 10.0
    ratio_critical: Ratio = 1000.0
    min_rows: Annotated[int, Field(ge=0)] = 100_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: PlanMisestimate = t.plan_misestimate
    at = "(like(p_operator, 'Scan %') OR like(p_operator, '%Join%') OR p_operator = 'CartesianProduct')"
    table = "replaceRegexpOne(p_operator, '^Scan [^ ]+ ?', '')"
    tables = f"if(like(p_operator, 'Scan %') AND {table} != '', {table}, p_scan_tables)"
    return [
        RuleSql(
            rule="plan_misestimate",
            source="plan",
            derived=(
                ("pm_known", f"p_est_rows >= 0 AND p_actual_rows >= 0 AND {at}"),
                ("pm_ratio", "greatest(p_est_rows, p_actual_rows) / greatest(least(p_est_rows, p_actual_rows), 1.)"),
                ("pm_tables", f"if({tables} != '', {tables}, 'the tables it reads')"),
            ),
            condition=(
                f"pm_known AND greatest(p_est_rows, p_actual_rows) >= {lit(c.min_rows)} "
                f"AND pm_ratio >= {lit(c.ratio_warning)}"
            ),
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
                "p_operator, ': the optimizer estimated ', ",
                integer("p_est_rows"),
                ", ' rows (', ",
                "if(p_est_source = 'catalog', 'the table statistics of the last ANALYZE', 'plan statistics'), ",
                "'), it produced ', ",
                integer("p_actual_rows"),
                ", ' (', ",
                times("pm_ratio", 0),
                ", ' ', ",
                "if(p_actual_rows > p_est_rows, 'more', 'fewer'), ')'",
            ),
            fix=concat(
                "'Refresh the statistics after every load: ANALYZE TABLE ', pm_tables, ",
                "' COMPUTE STATISTICS FOR ALL COLUMNS. ', ",
                "if(like(p_operator, '%Join%') OR p_operator = 'CartesianProduct', "
                "'The join size comes from column statistics only with spark.sql.cbo.enabled=true (and "
                "spark.sql.cbo.joinReorder.enabled=true for join order): enable them once the statistics are fresh; ', "
                "'With fresh column statistics, spark.sql.cbo.enabled=true "
                "also sizes filters and joins above this scan; "
                "'), 'if the statistics cannot be kept fresh, pin the join with a hint (/*+ BROADCAST(small) */ or "
                "/*+ SHUFFLE_MERGE(big) */) instead of trusting the estimate'",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.plan_misestimate
    return (
        f"at a scan or join the optimizer's row estimate is >= {c.ratio_warning:g}x off the actual rows either "
        f"way (critical >= {c.ratio_critical:g}x), over {c.min_rows:,} rows"
    )


RUNBOOK = """\
**Fires when**, in a finished SQL execution (`sql_plan_stats`), a scan or join produced ≥ 10× more or fewer rows than
the optimizer estimated (critical from 1,000×), and the larger of the two is ≥ 100,000 rows. The estimate comes from
the table's catalog statistics (the last `ANALYZE TABLE`) or, with `spark.sql.cbo.enabled`, the plan's statistics.
Stale or missing statistics make Spark broadcast a table that is really large, sort-merge-join a tiny one, or pick a
bad join order.

**Check**: *Plan: estimated vs actual rows* (application dashboard) lists the scans and joins with both numbers; the
finding names the operator, the SQL execution and the plan node.

**Fix**: `ANALYZE TABLE <table> COMPUTE STATISTICS FOR ALL COLUMNS` for the tables named in the fix, after every load
that changes them (a `REFRESH TABLE` does not update statistics). With fresh column statistics, enable
`spark.sql.cbo.enabled=true` (and `spark.sql.cbo.joinReorder.enabled=true`) so joins are sized from them. Where the
statistics cannot be kept fresh, pin the join with a hint (`/*+ BROADCAST(small) */`, `/*+ SHUFFLE_MERGE(big) */`).
"""

RULE = Rule(
    id="plan_misestimate",
    order=110,
    title="Plan misestimate",
    summary="the optimizer's row estimate is far off at a scan or join",
    config=PlanMisestimate,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
)
