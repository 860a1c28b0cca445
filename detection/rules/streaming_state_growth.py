"""Streaming state growth: a stateful streaming query's state keeps growing and nothing is ever evicted.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the
``streaming`` relation (``detection/relations.py``): one finding per query run over its last
``thresholds.streaming.batches`` micro-batches; ``stage_name`` names the query (``<name> (<query id>)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import (
    Impact,
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


class StreamingStateGrowth(Impact):
    """State rows (or state memory) never decrease over the window and grew by ≥ 10,000 rows (or ≥ 64 MiB), with
    no row removed or dropped by a watermark."""

    min_growth_rows: Annotated[int, Field(ge=1)] = 10_000
    min_growth_bytes: Size = 64 * 2**20
    min_time_lost_ms: Millis = 0
    critical_min_time_lost_ms: Millis = 0


def sql(t: Thresholds) -> list[RuleSql]:
    c: StreamingStateGrowth = t.streaming_state_growth
    rows = f"s_state_rows_rising > 0 AND s_state_rows_last - s_state_rows_first >= {lit(c.min_growth_rows)}"
    mem = f"s_state_mem_rising > 0 AND s_state_mem_last - s_state_mem_first >= {lit(c.min_growth_bytes)}"
    return [
        RuleSql(
            rule="streaming_state_growth",
            source="streaming",
            time_lost="0.",
            floors=floors(c),
            derived=(("sg_grows", f"s_state_operators > 0 AND s_evicted_rows = 0 AND (({rows}) OR ({mem}))"),),
            condition=f"s_batches >= {lit(t.streaming.min_batches)} AND sg_grows",
            severity="'warning'",
            value="s_state_rows_last - s_state_rows_first",
            threshold=lit(c.min_growth_rows),
            evidence=(
                ("state_rows_first", "s_state_rows_first"),
                ("state_rows_last", "s_state_rows_last"),
                ("state_bytes_first", "s_state_mem_first"),
                ("state_bytes_last", "s_state_mem_last"),
                ("rows_evicted", "s_evicted_rows"),
                ("watermark_ms", "s_watermark_ms"),
                ("batches", "s_batch_span"),
                ("first_batch_id", "arrayElement(s_batch_ids, 1)"),
                ("last_batch_id", "arrayElement(s_batch_ids, -1)"),
            ),
            explanation=concat(
                "'Over batches ', toString(arrayElement(s_batch_ids, 1)), "
                "'–', toString(arrayElement(s_batch_ids, -1)), ",
                "' the state grew from ', ",
                integer("s_state_rows_first"),
                ", ' to ', ",
                integer("s_state_rows_last"),
                ", ' rows (', ",
                size("s_state_mem_first"),
                ", ' to ', ",
                size("s_state_mem_last"),
                ", ') and ', ",
                "if(s_watermark_ms > 0, 'the watermark evicted nothing', 'there is no watermark to evict any'), ",
                "': it grows until the executors run out of memory'",
            ),
            fix=(
                "'Bound the state: add withWatermark(eventTimeColumn, delay) on the event-time column of the "
                "aggregation, join or dropDuplicates so old keys are evicted (dropDuplicatesWithinWatermark for "
                "deduplication); with [flat]MapGroupsWithState / transformWithState set a timeout or TTL; aggregate "
                "by a time window instead of an unbounded key; for large state use the RocksDB state store "
                "(spark.sql.streaming.stateStore.providerClass)'"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.streaming_state_growth
    return (
        f"over its last {t.streaming.batches} micro-batches a streaming query's state rows (or memory) never "
        f"decreased and grew by >= {c.min_growth_rows:,} rows (or >= {c.min_growth_bytes / 2**20:g} MiB), with "
        "no row evicted by a watermark"
    )


RUNBOOK = """\
**Fires when**, over a stateful streaming query's last 10 micro-batches (at least 5), the total state rows never
decreased and grew by ≥ 10,000 (or the state memory never decreased and grew by ≥ 64 MiB), and no state row was
removed or dropped by a watermark: an aggregation, join or deduplication without a watermark keeps every key forever.

**Check**: the **sparktap / Streaming** dashboard: *State rows*, *State memory*, *Watermark*.

**Fix**: `withWatermark(eventTimeColumn, delay)` on the event-time column of the aggregation, stream-stream join or
`dropDuplicates` (or `dropDuplicatesWithinWatermark`) so old keys are evicted; a timeout or TTL in
`[flat]MapGroupsWithState` / `transformWithState`; aggregate by a time window rather than an unbounded key; for large
state the RocksDB state store (`spark.sql.streaming.stateStore.providerClass`).
"""

RULE = Rule(
    id="streaming_state_growth",
    order=140,
    title="Streaming state growth",
    summary="a streaming query's state grows without eviction",
    config=StreamingStateGrowth,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("0: growing state is a memory risk, not time already lost"),
)
