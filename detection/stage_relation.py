"""The relation the stage rules read: finished and running stages, with the enrichments the chosen rules need
(application properties, AQE per execution, the recurring job's earlier runs: ``history.py``, the table the stage's SQL
execution wrote and its trend: ``tables.py``)."""

from __future__ import annotations

from sparktap.detection.history import stage_history
from sparktap.detection.sql import STAGE_COLUMNS, SqlContext, app_properties, aqe_per_execution, join_using
from sparktap.detection.stage_rows import completed_stages, running_stages
from sparktap.detection.tables import written_columns


def stage_relation(ctx: SqlContext, needs: frozenset[str], running_min_tasks: int | None, history_days: int) -> str:
    """Stage statistics (finished stages, plus running ones unless ``running_min_tasks`` is None) with the
    enrichments the chosen rules need joined on, one JOIN per nesting level."""
    parts = [completed_stages(ctx)]
    if running_min_tasks is not None:
        parts.append(ctx.staged("running_stages", running_stages(ctx, running_min_tasks)))
    columns = STAGE_COLUMNS + (f", {written_columns(ctx)}" if "tables" in needs else "")
    rel = f"SELECT {columns} FROM\n(\n" + "\nUNION ALL\n".join(parts) + "\n)"
    if "properties" in needs:
        rel = join_using(rel, ctx.staged("app_properties", app_properties(ctx)), "cluster, app_id, app_attempt")
    if "aqe" in needs:
        rel = join_using(rel, aqe_per_execution(ctx), "cluster, app_id, app_attempt, sql_exec")
    if "history" in needs:
        rel = join_using(
            rel, ctx.staged("stage_history", stage_history(ctx, history_days)), "cluster, app_name, stage_name"
        )
    return rel
