"""Remote-heavy shuffle: shuffle reads are remote and tasks wait for them.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    Impact,
    Millis,
    Rule,
    RuleSql,
    Share,
    concat,
    floors,
    pct,
    size,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class RemoteHeavyShuffle(Impact):
    """Remote / total shuffle-read bytes >= 0.9 and fetch wait >= 20 % of task run time."""

    min_remote_share: Share = 0.9
    min_fetch_wait_share: Share = 0.2
    min_run_time_ms: Millis = 10_000
    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: RemoteHeavyShuffle = t.remote_heavy_shuffle
    return [
        RuleSql(
            rule="remote_heavy_shuffle",
            source="stage",
            time_lost="fetch_wait_ms / greatest(least(slots, tasks), 1.)",
            floors=floors(c),
            derived=(
                ("rh_remote", "sr_remote_sum / greatest(sr_sum, 1.)"),
                ("rh_wait", "fetch_wait_ms / greatest(run_sum, 1.)"),
            ),
            condition=(
                f"sr_sum > 0 AND rh_remote >= {lit(c.min_remote_share)} AND rh_wait >= "
                f"{lit(c.min_fetch_wait_share)} AND run_sum >= {lit(c.min_run_time_ms)}"
            ),
            severity="'warning'",
            value="rh_remote",
            threshold=lit(c.min_remote_share),
            evidence=(
                ("remote_share", "rh_remote"),
                ("shuffle_read_bytes", "sr_sum"),
                ("fetch_wait_ms", "fetch_wait_ms"),
                ("fetch_wait_share", "rh_wait"),
            ),
            explanation=concat(
                pct("rh_remote"),
                ", ' of ', ",
                size("sr_sum"),
                ", ' shuffle read was remote and tasks waited ', ",
                pct("rh_wait"),
                ", ' of their run time for fetches'",
            ),
            fix=(
                "'Use fewer, larger executors (more cores each) so more "
                "blocks are local; broadcast the small join side "
                "(/*+ BROADCAST(t) */) to skip the shuffle; raise spark.reducer.maxSizeInFlight; enable push-based "
                "shuffle (spark.shuffle.push.enabled) where supported'"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    g = t.remote_heavy_shuffle
    return (
        f">= {g.min_remote_share:.0%} of the shuffle read was remote and fetch wait was >= "
        f"{g.min_fetch_wait_share:.0%} of task run time"
    )


RUNBOOK = """\
**Fires when** ≥ 90 % of a stage's shuffle read came from other hosts and tasks waited ≥ 20 % of their run time for
fetches (over at least 10 s of task time).

**Fix**: fewer, larger executors (more cores each) so more blocks are local; broadcast the small join side to avoid
the shuffle; raise `spark.reducer.maxSizeInFlight`; push-based shuffle (`spark.shuffle.push.enabled`) where the
cluster manager supports it; check the network between executors.
"""

RULE = Rule(
    id="remote_heavy_shuffle",
    order=80,
    title="Remote-heavy shuffle",
    summary="shuffle reads are remote and tasks wait for them",
    config=RemoteHeavyShuffle,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("the stage's shuffle fetch wait over its slots (one slot when unknown)"),
)
