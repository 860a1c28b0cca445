"""Create the rollups of ``schemas/rollups.py`` on a storage, backfilling a table created on a store with events."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sparktap.schemas import health_rollups as health
from sparktap.schemas.ddl import Schema, quote_literal
from sparktap.schemas.rollups import backfill_statements, object_names, rollups, table_statements, view_statements

if TYPE_CHECKING:
    from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)

STAGES_DAYS = 90
"""default retention of the stage (and SQL) summaries"""
APPS_DAYS = 400
"""default retention of the application summaries (and findings)"""


def _existing(storage: Storage, schema: Schema) -> set[str]:
    rows = storage.query(
        f"SELECT name FROM system.tables WHERE database = {quote_literal(schema.database)}"  # noqa: S608
    )
    return {str(r["name"]) for r in rows}


def ensure_rollups(
    storage: Storage, schema: Schema, stages_days: int = STAGES_DAYS, apps_days: int = APPS_DAYS
) -> list[str]:
    """Create the rollup tables, their dedup views and the materialized views filling them (idempotent); backfill a
    rollup table that did not exist before from the rows already stored. Returns the rollup tables created."""
    have = _existing(storage, schema)
    created = _ensure_health(storage, schema, have)
    if set(object_names(schema)) <= have:
        return created
    for rollup in rollups(schema):
        days = stages_days if rollup.tier == "stages" else apps_days
        new = rollup.spec.name not in have
        for statement in table_statements(schema, rollup, days):
            storage.command(statement)
        for statement in view_statements(schema, rollup):
            storage.command(statement)
        if new:
            created.append(rollup.spec.name)
            for statement in backfill_statements(schema, rollup):
                storage.command(statement)
            log.info("created rollup %s (%d days), filled from the events already stored", rollup.spec.name, days)
    return created


def _ensure_health(storage: Storage, schema: Schema, have: set[str]) -> list[str]:
    """The pipeline-health rollup (``schemas/health_rollups.py``): its tables, their views, a backfill of a table
    that did not exist before (a redelivered or concurrent event summarised twice sets the same bit)."""
    if set(health.object_names(schema)) <= have:
        return []
    for statement in health.table_statements(schema) + health.view_statements(schema):
        storage.command(statement)
    created = []
    for table in health.health_tables():
        if table.name not in have:
            created.append(table.name)
            for statement in health.backfill_statements(schema, table):
                storage.command(statement)
            log.info("created rollup %s, filled from the events already stored", table.name)
    return created
