"""Plan misestimate: at a scan or a join, the optimizer's row estimate is ≥ 10× off the rows it produced.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``plan``
relation (``detection/relations.py``): one finding per plan node (``sql_execution_id``, ``node_id``).
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
    """Estimated vs actual rows ≥ 10× apart either way (critical ≥ 1,000×) at a scan or join, where the larger of
    the two is ≥ 100,000 rows."""

    ratio_warning: Ratio = 10.0
    ratio_critical: Ratio = 1000.0
    min_rows: Annotated[int, Field(ge=0)] = 100_000
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 10_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: PlanMisestimate = t.plan_misestimate
    at = checked("p_operator")
    bad = (
        f"e >= 0 AND a >= 0 AND {checked('op')} AND greatest(e, a) >= {lit(c.min_rows)} "
        f"AND greatest(e, a) / greatest(least(e, a), 1.) >= {lit(c.ratio_warning)}"
    )
    table = "replaceRegexpOne(p_operator, '^Scan [^ ]+ ?', '')"
    tables = f"if(like(p_operator, 'Scan %') AND {table} != '', {table}, p_scan_tables)"
    return [
        RuleSql(
            rule="plan_misestimate",
            source="plan",
            time_lost="ifNull(exec_run_ms, 0.)",
            floors=floors(c),
            derived=(
                ("pm_known", f"p_est_rows >= 0 AND p_actual_rows >= 0 AND {at}"),
                ("pm_ratio", "greatest(p_est_rows, p_actual_rows) / greatest(least(p_est_rows, p_actual_rows), 1.)"),
                ("pm_tables", f"if({tables} != '', {tables}, 'the tables it reads')"),
                ("pm_below", f"arrayExists((e, a, op) -> {bad}, p_sub_est, p_sub_actual, p_sub_operator)"),
                ("pm_cbo", "lower(ifNull(prop_cbo, '')) = 'true'"),
                ("pm_histogram", "lower(ifNull(prop_histogram, '')) = 'true'"),
            ),
            condition=(
                f"pm_known AND greatest(p_est_rows, p_actual_rows) >= {lit(c.min_rows)} "
                f"AND pm_ratio >= {lit(c.ratio_warning)} AND NOT pm_below"
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
            fix=f"if(pm_cbo AND p_est_source != 'catalog', {cbo_on_fix()}, {stats_fix()})",
        )
    ]


def checked(op: str) -> str:
    """The operators whose own estimate is compared with their own output: scans (the relation's rows, before any
    filter), filters, joins."""
    return f"(like({op}, 'Scan %') OR {op} = 'Filter' OR like({op}, '%Join%') OR {op} = 'CartesianProduct')"


def cbo_on_fix() -> str:
    """CBO is on and estimated from fresh statistics: histograms for skewed predicates, else a join hint."""
    return concat(
        "'Cost-based optimization is on (spark.sql.cbo.enabled=true) and still misjudged this ', ",
        "if(p_operator = 'Filter', 'filter', if(like(p_operator, 'Scan %'), 'scan', 'join')), ': ', ",
        "if(NOT pm_histogram, concat('enable spark.sql.statistics.histogram.enabled=true and run ANALYZE TABLE ', "
        "pm_tables, ' COMPUTE STATISTICS FOR ALL COLUMNS, so skewed or range predicates are sized from equi-height "
        "histograms; '), ''), ",
        "'pin the join with a hint (/*+ BROADCAST(small) */ or /*+ SHUFFLE_MERGE(big) */) rather than trusting the "
        "estimate'",
    )


def stats_fix() -> str:
    return concat(
        "'Refresh the statistics after every load: ANALYZE TABLE ', pm_tables, ",
        "' COMPUTE STATISTICS FOR ALL COLUMNS. ', ",
        "if(like(p_operator, '%Join%') OR p_operator = 'CartesianProduct', "
        "'The join size comes from column statistics only with spark.sql.cbo.enabled=true (and "
        "spark.sql.cbo.joinReorder.enabled=true for join order): enable them once the statistics are fresh; ', "
        "'With fresh column statistics, spark.sql.cbo.enabled=true "
        "also sizes filters and joins above this scan; "
        "'), 'if the statistics cannot be kept fresh, pin the join with a hint (/*+ BROADCAST(small) */ or "
        "/*+ SHUFFLE_MERGE(big) */) instead of trusting the estimate'",
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.plan_misestimate
    return (
        f"at a scan or join the optimizer's row estimate is >= {c.ratio_warning:g}x off the actual rows either "
        f"way (critical >= {c.ratio_critical:g}x), over {c.min_rows:,} rows"
    )


RUNBOOK = """\
**Fires when**, in a finished SQL execution (`sql_plan_stats`), a scan, filter or join produced ≥ 10× more or fewer
rows than the optimizer estimated *for that node* (critical from 1,000×), and the larger of the two is ≥ 100,000
rows. Like for like: a scan is compared with the relation's own row count (before any filter: the listener reads the
relation's estimate, not the Filter's the planner linked the scan to), a filter with its own estimate, a join with
its own. One finding per root cause: a node is reported only when no node below it (in its subtree) is misestimated
too — a wrong filter estimate under three joins is one finding, at the filter. The estimate comes from the table's
catalog statistics (the last `ANALYZE TABLE`) or, with `spark.sql.cbo.enabled`, the plan's statistics. Stale or
missing statistics make Spark broadcast a table that is really large, sort-merge-join a tiny one, or pick a bad join
order.

**Check**: *Plan: estimated vs actual rows* (application dashboard) lists the scans and joins with both numbers; the
finding names the operator, the SQL execution and the plan node.

**Fix**: reads the application's CBO settings (`spark.sql.cbo.enabled`, `spark.sql.cbo.joinReorder.enabled`,
`spark.sql.statistics.histogram.enabled`, kept in `app_start`). Without CBO, or from stale catalog statistics:
`ANALYZE TABLE <table> COMPUTE STATISTICS FOR ALL COLUMNS` for the tables named in the fix, after every load that
changes them (a `REFRESH TABLE` does not update statistics), then `spark.sql.cbo.enabled=true` (and
`spark.sql.cbo.joinReorder.enabled=true`). With CBO already on: histograms
(`spark.sql.statistics.histogram.enabled=true` and a new `ANALYZE … FOR ALL COLUMNS`) when they are off, and pin the
join with a hint (`/*+ BROADCAST(small) */`, `/*+ SHUFFLE_MERGE(big) */`).
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
    time_lost=("the SQL execution's task time — an upper bound: the work planned on the wrong estimate"),
)
