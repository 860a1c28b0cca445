"""``sparktap cost`` by owner (issue 41, item 8): the cost of a Spark Connect server split between its users, and teams
from the platform's team mapping instead of the tags a Spark user chose.

- **Connect users.** A Connect server is one application run by the server's OS user for every client. Its cost is
  split between the Connect users by their share of its task run time (``stage_completed.run_time_ms_sum`` by
  ``user_id``); run time with no Connect user (the server's own work) stays with the application's Spark user, and
  an application with no Connect stage is its Spark user's whole. Held core-time, memory and cost are split alike.
- **Teams.** With a team mapping (``teams.py``: ``SPARKTAP_COST__TEAMS`` or the routing file's ``teams:``), a row's
  team is ``owner_sql`` over its cluster, (Connect) user, application name and ``team`` tag; ``(unmapped)`` where no
  rule takes it. Without one, the ``team`` tag as before (``utilisation.cost_query``).

Same dialect as ``utilisation.py`` (18.16 and chDB): one ``ANY LEFT JOIN … USING`` per SELECT, no lambda capturing a
column (``replicate``).
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and literals (quote_literal), never from user text.

from __future__ import annotations

from sparktap.detection.prices import CostSettings
from sparktap.detection.sql import SqlContext, join_using
from sparktap.detection.teams import TeamRules, owner_sql
from sparktap.detection.utilisation import (
    APP_KEY,
    COST_SUMS,
    DAY_TEXT,
    GROUPS,
    cost_query,
    usage_by_day,
    usage_query,
)

_FIGURES = ("allocated_core_ms", "busy_core_ms", "idle_core_ms", "allocated_gib_ms", "core_cost", "memory_cost", "cost")


def connect_shares(ctx: SqlContext) -> str:
    """Per application attempt with Connect work: its users (``''`` for work with none) and their task run time."""
    return f"""SELECT {APP_KEY}, groupArray(s_user) AS s_users, groupArray(s_run) AS s_ms
FROM
(
    SELECT {APP_KEY}, toString(user_id) AS s_user, toFloat64(sum(run_time_ms_sum)) AS s_run
    FROM {ctx.view("stage_completed")}
    {ctx.where()}
    GROUP BY {APP_KEY}, s_user
)
GROUP BY {APP_KEY}
HAVING countIf(s_user != '') > 0"""


def owned_usage(ctx: SqlContext, cost: CostSettings, teams: TeamRules | None, daily: bool) -> str:
    """``usage_query`` (or ``usage_by_day``) rows, one per application (and day) and Connect user, with ``user``
    the Connect user where there is one, the figures in proportion, and ``team`` the mapping's owner."""
    source = usage_by_day(ctx, cost) if daily else usage_query(ctx, "app", cost)
    day = "d_day, " if daily else ""
    kept = ", ".join(f"{f} AS o_{f}" for f in _FIGURES)
    shares = "arrayMap((m, t, n) -> if(t > 0, m / t, 1. / n), s_ms, replicate(s_total, s_ms), replicate(s_n, s_ms))"
    team = owner_sql(teams, "cluster", "user", "app_name", "o_team")
    figures = ", ".join(f"o_{f} * c_share AS {f}" for f in _FIGURES)
    return f"""SELECT {APP_KEY}, app_name, cost_centre, {day}if(c_user != '', c_user, o_user) AS user, {team} AS team,
    {figures}
FROM
(
    SELECT *, if(empty(s_users), [''], s_users) AS c_users, if(empty(s_users), [1.], {shares}) AS c_shares
    FROM
    (
        SELECT {APP_KEY}, app_name, cost_centre, {day}user AS o_user, team AS o_team, {kept}, s_users, s_ms,
            arraySum(s_ms) AS s_total, toFloat64(length(s_ms)) AS s_n
        FROM
        (
{join_using(source, connect_shares(ctx), APP_KEY)}
        )
    )
)
ARRAY JOIN c_users AS c_user, c_shares AS c_share"""


def cost_sql(
    ctx: SqlContext, by: str, cost: CostSettings, per_day: bool = False, teams: TeamRules | None = None
) -> str:
    """``utilisation.cost_query``, by owner: by ``user`` a Connect server's cost goes to its Connect users, by
    ``team`` (with a mapping) to the mapping's teams; every other grouping as ``cost_query``."""
    if by not in ("user", "team") or (by == "team" and teams is None):
        return cost_query(ctx, by, cost, per_day)
    daily = per_day
    day = f"{DAY_TEXT} AS day, " if per_day else ""
    keys = "day, key" if per_day else "key"
    order = "day, " if per_day else ""
    return f"""SELECT {day}{GROUPS[by]} AS key, toFloat64(uniqExact(cluster, app_id, app_attempt)) AS applications,
    {COST_SUMS}
FROM
(
{owned_usage(ctx, cost, teams, daily)}
)
GROUP BY {keys}
ORDER BY {order}cost DESC, core_hours DESC, key"""
