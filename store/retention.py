"""Tiered retention: task rows kept shortest, stage summaries longer, application summaries longest.

Tiers (``ClickHouseSettings``):

- ``tasks``: ``task_end``, ``task_retention_days`` (7; ``None``: ``retention_days``, like every other event table);
- ``events``: every other event table, ``retention_days`` (30);
- ``stages``: ``stage_rollup`` and ``run_rollup`` (the recurring jobs' runs), ``stage_retention_days`` (90);
- ``apps``: ``app_rollup`` and ``table_rollup`` (the per-table trend), ``app_retention_days`` (400);
- the pipeline-health rollup (``health_rollup`` and its other grains: ``schemas/health_rollups.py``) follows the
  events it summarises: its ``task_end`` rows at ``tasks``, the others at ``events`` (its TTL is ``retention_days``,
  like the event tables'; the task rows are deleted below);
- ``findings``: the stored findings (``findings``, written by the alerter), ``findings_retention_days`` (400).

On a server with TTL (>= 20.5, chDB) the event tables carry ``retention_days`` and each rollup (and the findings
table) its tier's TTL (``ALTER … MODIFY TTL`` when a setting changes), and merges drop expired rows; a task tier
shorter than ``retention_days`` is enforced by the deletes below. The collector's dead-letter age check stays at
``retention_days`` for every event table,
``task_end`` included: a task event 7 to 30 days old (an imported old event log) is stored, not dead-lettered, and the
next cleanup removes it like any row of its tier, so no event the tiers keep is rejected. clickhouse-server 18.16 has no
TTL, but has mutations (``ALTER TABLE … DELETE WHERE``, since 1.1.54388): ``sparktap retention apply``
(``apply_retention``) deletes, per table, the rows older than its tier's limit and waits for the mutations to finish
(``system.mutations``). Run it daily from cron or a Kubernetes CronJob against 18.16; on newer servers it makes the TTL
take effect at once. On a cluster the statements run ON CLUSTER on the ``<table>_local`` tables (one replica per shard
runs each mutation; replication applies it to the others).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sparktap.schemas.ddl import Schema, quote_literal
from sparktap.schemas.findings_table import FINDINGS_TABLE
from sparktap.schemas.health_rollups import HEALTH_TABLES
from sparktap.schemas.rollups import APP_ROLLUP, RUN_ROLLUP, STAGE_ROLLUP, TABLE_ROLLUP
from sparktap.store.errors import StorageError
from sparktap.store.protocol import Storage
from sparktap.store.settings import ClickHouseSettings

log = logging.getLogger(__name__)

TASK_TABLE = "task_end"
_TIERED = (STAGE_ROLLUP, RUN_ROLLUP, APP_ROLLUP, TABLE_ROLLUP, FINDINGS_TABLE)
"""the tables whose TTL follows their own tier (the schema step owns the event tables' TTL)"""


@dataclass(frozen=True)
class Tiers:
    """Days kept per tier."""

    events: int = 30
    tasks: int | None = 7
    stages: int = 90
    apps: int = 400
    findings: int = 400

    @classmethod
    def of(cls, ch: ClickHouseSettings) -> Tiers:
        """The tiers a store's settings give (``SPARKTAP_CLICKHOUSE__*_RETENTION_DAYS``)."""
        return cls(
            ch.retention_days,
            ch.task_retention_days,
            ch.stage_retention_days,
            ch.app_retention_days,
            ch.findings_retention_days,
        )

    def days(self, table: str) -> int:
        if table == TASK_TABLE:
            return self.tasks if self.tasks is not None else self.events
        tiers = {
            STAGE_ROLLUP: self.stages,
            RUN_ROLLUP: self.stages,
            APP_ROLLUP: self.apps,
            TABLE_ROLLUP: self.apps,
            FINDINGS_TABLE: self.findings,
        }
        return tiers.get(table, self.events)


def plan(schema: Schema, tiers: Tiers) -> dict[str, int]:
    """table -> days kept, for every event table, rollup and the stored findings."""
    return {name: tiers.days(name) for name in [*schema.tables, *_TIERED, *HEALTH_TABLES]}


def _target(schema: Schema, table: str) -> str:
    if schema.cluster:
        from sparktap.schemas.cluster import local_name

        return f"{schema.qualified(local_name(table))}{schema.on_cluster}"
    return schema.qualified(table)


def _wait_mutations(storage: Storage, schema: Schema, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    query = (
        "SELECT count() AS n FROM system.mutations "  # noqa: S608 - quoted literal
        f"WHERE database = {quote_literal(schema.database)} AND is_done = 0"
    )
    while int(storage.query(query)[0]["n"]) > 0:
        if time.monotonic() > deadline:
            raise StorageError(
                f'retention mutations still running database="{schema.database}" after {timeout_s:.0f} s; '
                "they go on in the background: check system.mutations, then run `sparktap retention apply` again"
            )
        time.sleep(0.2)


def apply_retention(
    storage: Storage, schema: Schema, tiers: Tiers, now_s: int | None = None, timeout_s: float = 600
) -> dict[str, int]:
    """Delete the rows older than each table's tier limit (``ALTER TABLE … DELETE``), wait for the deletes; on servers
    with TTL also set each rollup's (and the findings table's) TTL to its tier (the event tables' TTL is
    ``retention_days``, set by the schema step). Returns table -> rows deleted (counted before deleting)."""
    now_s = int(time.time()) if now_s is None else now_s
    deleted: dict[str, int] = {}
    engines = {
        str(r["name"]): str(r["engine_full"])
        for r in storage.query(
            f"SELECT name, engine_full FROM system.tables WHERE database = {quote_literal(schema.database)}"  # noqa: S608
        )
    }
    for table, days in plan(schema, tiers).items():
        cutoff = f"toDateTime({now_s - days * 86_400}, 'UTC')"
        condition = f"`event_time` < {cutoff}"
        task_days = tiers.days(TASK_TABLE)
        if table in HEALTH_TABLES and task_days < days:  # its task_end rows: the task tier
            tasks_cutoff = f"toDateTime({now_s - task_days * 86_400}, 'UTC')"
            condition = f"({condition} OR (`event_table` = 'task_end' AND `event_time` < {tasks_cutoff}))"
        old = int(storage.query(f"SELECT count() AS n FROM {schema.qualified(table)} WHERE {condition}")[0]["n"])  # noqa: S608
        local = _target(schema, table).split(" ON CLUSTER ")[0].rsplit(".", 1)[-1].strip("`")
        # the rollups' and findings' TTL follows their tier here (the health rollup's: retention_days, the events
        # tier); the schema step owns the event tables' TTL
        rollup = table in _TIERED or table in HEALTH_TABLES
        if rollup and schema.features.ttl and f"toIntervalDay({days})" not in engines.get(local, ""):
            storage.command(
                f"ALTER TABLE {_target(schema, table)} MODIFY TTL toDateTime(`event_time`) + INTERVAL {days} DAY"
            )
        if old:
            log.info("retention: deleting %d rows of %s older than %d days", old, table, days)
            storage.command(f"ALTER TABLE {_target(schema, table)} DELETE WHERE {condition}")
        deleted[table] = old
    _wait_mutations(storage, schema, timeout_s)
    return deleted
