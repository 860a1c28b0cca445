"""Create the stored findings table of ``schemas/findings_table.py`` on a storage (the alerter fills it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sparktap.schemas.ddl import Schema, quote_literal
from sparktap.schemas.findings_table import FINDINGS_DAYS, object_names, table_statements

if TYPE_CHECKING:
    from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)


def ensure_findings_table(storage: Storage, schema: Schema, days: int = FINDINGS_DAYS) -> bool:
    """Create the findings table and its dedup view(s) when missing (idempotent); True when created now."""
    rows = storage.query(
        f"SELECT name FROM system.tables WHERE database = {quote_literal(schema.database)}"  # noqa: S608
    )
    if set(object_names(schema)) <= {str(r["name"]) for r in rows}:
        return False
    for statement in table_statements(schema, days):
        storage.command(statement)
    log.info("created the findings table (%d days): `sparktap findings --store` fills it with past findings", days)
    return True
