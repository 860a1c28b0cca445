"""Streaming saturated / falling behind: a streaming query is busy nearly all its wall time, or processes rows
slower than they arrive while its source backlog grows.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the
``streaming`` relation (``detection/relations.py``): one finding per query run over its last
``thresholds.streaming.batches`` micro-batches; ``stage_name`` names the query (``<name> (<query id>)``).

Busy share = mean batch duration (``durationMs.triggerExecution``) × batches in the window (by batch id, so progress
events the listener rate-limited away still count) / wall time from the first batch's start to the last one's end.
Near 1, batch k+1 starts as soon as batch k ends: the trigger interval is no longer met.

Throughput = rows of every batch but the last / time from the first batch's start to the last one's start: each batch
owns the interval up to the next one's start. (Rows of all batches over the first start to the last end counted the
last batch's rows in a span shorter than its interval when batches end before their trigger: a query capped at 100
rows per 1 s trigger measured 107 rows/s over 10 batches.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import Impact, Millis, Ratio, Rule, RuleSql, Share, concat, floors, pct, secs
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class StreamingSaturated(Impact):
    """Busy ≥ 90 % of the wall time over the window (warning), or the source backlog grows batch after batch by at
    least ``min_backlog_growth`` rows (critical), whatever the busy share and the input rate (under
    ``maxOffsetsPerTrigger`` Spark's input rate is the capped intake, not the arrival rate)."""

    busy_share: Share = 0.9
    processed_over_input: Ratio = 0.9
    """Kept for configurations that set it; the backlog alone now decides "behind" (issue 22)."""
    min_backlog_growth: Annotated[int, Field(ge=1)] = 1_000
    min_time_lost_ms: Millis = 0
    critical_min_time_lost_ms: Millis = 60_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: StreamingSaturated = t.streaming_saturated
    enough = f"s_batches >= {lit(t.streaming.min_batches)}"
    behind = (
        "s_backlog_known_all > 0 AND s_backlog_rising > 0 "
        f"AND s_backlog_last - s_backlog_first >= {lit(c.min_backlog_growth)}"
    )
    return [
        RuleSql(
            rule="streaming_saturated",
            source="streaming",
            derived=(
                ("ss_busy", "if(s_wall_ms > 0, s_avg_dur_ms * s_batch_span / s_wall_ms, 0.)"),
                ("ss_saturated", f"{enough} AND ss_busy >= {lit(c.busy_share)}"),
                ("ss_behind", f"{enough} AND {behind}"),
                ("ss_span_s", "(arrayElement(s_start, -1) - arrayElement(s_start, 1)) / 1000"),
                ("ss_growth", "if(ss_span_s > 0, (s_backlog_last - s_backlog_first) / ss_span_s, 0.)"),
                ("ss_throughput", "if(ss_span_s > 0, arraySum(arrayPopBack(s_rows)) / ss_span_s, 0.)"),
                ("ss_catch_up_ms", "if(ss_throughput > 0, s_backlog_last / ss_throughput * 1000, 0.)"),
            ),
            time_lost="if(ss_behind, ss_catch_up_ms, 0.)",
            floors=floors(c),
            condition="ss_saturated OR ss_behind",
            severity="if(ss_behind, 'critical', 'warning')",
            value="ss_busy",
            threshold=lit(c.busy_share),
            evidence=(
                ("busy_share", "ss_busy"),
                ("batches", "s_batch_span"),
                ("avg_batch_ms", "s_avg_dur_ms"),
                ("wall_ms", "s_wall_ms"),
                ("input_rows_per_s", "s_input_rate"),
                ("processed_rows_per_s", "s_processed_rate"),
                ("backlog_first", "s_backlog_first"),
                ("backlog_last", "s_backlog_last"),
                ("first_batch_id", "arrayElement(s_batch_ids, 1)"),
                ("last_batch_id", "arrayElement(s_batch_ids, -1)"),
                ("backlog_growth_rows_per_s", "ss_growth"),
                ("throughput_rows_per_s", "ss_throughput"),
                ("arrival_rows_per_s", "ss_throughput + ss_growth"),
                ("catch_up_ms", "ss_catch_up_ms"),
            ),
            explanation=concat(
                "'Over batches ', toString(arrayElement(s_batch_ids, 1)), "
                "'–', toString(arrayElement(s_batch_ids, -1)), ",
                "' the query was busy ', ",
                pct("ss_busy"),
                ", ' of the wall time (batches take ', ",
                secs("s_avg_dur_ms"),
                ", ' on average)', ",
                "if(ss_behind, concat('; it processes ', toString(round(ss_throughput)), ' rows/s while the "
                "backlog grew from ', toString(toUInt64(s_backlog_first)), ' to ', toString(toUInt64(s_backlog_last)), "
                "' rows (', toString(round(ss_growth)), ' rows/s): it is falling behind; the backlog alone takes ', ",
                secs("ss_catch_up_ms"),
                ", ' to process at that rate'), '')",
            ),
            fix=(
                "'Make batches cheaper or the cluster bigger: more partitions (spark.sql.shuffle.partitions, the "
                "source partitions) or more executors; cap each batch with maxOffsetsPerTrigger (Kafka) / "
                "maxFilesPerTrigger (files) so batches stay shorter than the trigger, or use a longer trigger "
                "(processingTime) so each batch amortises its fixed cost; for stateful queries prune state with a "
                "watermark (withWatermark) or a state TTL'"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.streaming_saturated
    return (
        f"over its last {t.streaming.batches} micro-batches a streaming query was busy >= {c.busy_share:.0%} of "
        f"the wall time, or (critical) a source backlog grew batch after batch by >= {c.min_backlog_growth} rows"
    )


RUNBOOK = """\
**Fires when**, over a streaming query's last 10 micro-batches (at least 5;
`SPARKTAP_ALERTS__THRESHOLDS__STREAMING__BATCHES` / `__MIN_BATCHES`), the query was busy ≥ 90 % of the wall time —
each batch starts as soon as the previous one ends, so the trigger interval is not met (warning) — or the backlog
of its sources (latest offset minus the batch's end offset: Kafka, sparktap-kafka, rate) grew at every batch of the
window, by ≥ 1,000 rows in all (critical: it is falling behind and the lag only grows), whatever the busy share and
the input rate — under `maxOffsetsPerTrigger` Spark's *input rows/s* is the capped intake, not the arrival rate, so
it cannot tell. Evaluated while the query runs. The evidence gives the backlog's growth (`backlog_growth_rows_per_s`),
the throughput over the wall time, the arrival rate (their sum) and `catch_up_ms`, the time the current backlog
alone takes at that throughput — which is also its `time_lost_ms` (0 when only saturated). Critical needs ≥ 60 s.

**Check**: the **sparktap / Streaming** dashboard: *Batch duration vs interval*, *Input vs processed rows/s*,
*Source backlog*.

**Fix**: more partitions or executors; cap each batch (`maxOffsetsPerTrigger` for Kafka, `maxFilesPerTrigger` for
files) so a batch fits in the trigger; a longer `processingTime` trigger so each batch amortises its fixed cost; for
stateful queries, prune state (`withWatermark`, state TTL) so batches stop growing.
"""

RULE = Rule(
    id="streaming_saturated",
    order=130,
    title="Streaming saturated or behind",
    summary="a streaming query cannot keep up with its trigger or its input",
    config=StreamingSaturated,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "when behind, `catch_up_ms`: the time the current backlog alone takes at the query's throughput over "
        "the wall time; 0 when only saturated (no backlog growth)"
    ),
)
