"""Who a finding belongs to: the attribution columns every finding row carries (issue 26).

- ``user``: the Spark Connect user of the job's operation (``job_start.user_id``) when there is one, else the
  Spark user of the application (``app_start.user``);
- ``team``: ``app_start.tags['team']``;
- ``job_tags``: the job's ``spark.job.tags`` (``spark.addTag``, ``SparkContext.addJobTag``, Connect's own);
- ``session_id``, ``operation_id``: the Spark Connect session and operation of the job.

'' (or an empty array) when unknown. A stage finding is attributed through its job, a plan or AQE finding through
any job of its SQL execution, a streaming finding through its application only. Attribution never parses
descriptions: the listener reads the job's properties (``spark.job.tags``).

Two ``ANY LEFT JOIN … USING`` levels over the rule query's rows (clickhouse-server 18.16 and chDB): the job-level
relation keyed by ``attr_key`` ('j<job id>' or 's<SQL execution id>'), then the application-level one.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers, never from user text.

from __future__ import annotations

from sparktap.detection.sql import SqlContext, join_using
from sparktap.schemas.ddl import quote_ident, quote_literal

ATTRIBUTION_COLUMNS: tuple[str, ...] = ("user", "team", "job_tags", "session_id", "operation_id")
"""The finding columns added by ``attributed`` (after ``query.FINDING_COLUMNS``' ids and before the rule's)."""

_FINDING_KEY = (
    "if(job_id >= 0, concat('j', toString(job_id)), "
    "if(sql_execution_id >= 0, concat('s', toString(sql_execution_id)), '')) AS attr_key"
)


def tag(ctx: SqlContext, key: str) -> str:
    """A value of ``app_start.tags`` ('' when absent): a Map where the server has one, else JSON text."""
    if ctx.features.map:
        return f"tags[{quote_literal(key)}]"
    return f"visitParamExtractString(tags, {quote_literal(key)})"


def job_attribution(ctx: SqlContext) -> str:
    """Per job ('j<id>') and per SQL execution ('s<id>'): the Connect user, session, operation and the job tags."""
    keys = (
        "if(isNull(sql_execution_id), [concat('j', toString(job_id))], "
        "[concat('j', toString(job_id)), concat('s', toString(ifNull(sql_execution_id, -1)))])"
    )
    return f"""SELECT cluster, app_id, app_attempt, attr_key, any(j_user) AS a_user, any(j_session) AS a_session,
    any(j_operation) AS a_operation, any(j_tags) AS a_job_tags
FROM
(
    SELECT cluster, app_id, app_attempt, toString(user_id) AS j_user, toString(session_id) AS j_session,
        toString(operation_id) AS j_operation, job_tags AS j_tags, arrayJoin({keys}) AS attr_key
    FROM {ctx.view("job_start")}
    {ctx.where(extend_days=1)}
)
GROUP BY cluster, app_id, app_attempt, attr_key"""


def app_attribution(ctx: SqlContext) -> str:
    """Per application attempt: its Spark user and its team tag."""
    return f"""SELECT cluster, app_id, app_attempt, any(toString({quote_ident("user")})) AS app_user,
    any(toString({tag(ctx, "team")})) AS app_team
FROM {ctx.view("app_start")}
WHERE {" AND ".join(["1", *ctx.scope.conditions()])}
GROUP BY cluster, app_id, app_attempt"""


def attributed(findings: str, columns: tuple[str, ...], ctx: SqlContext) -> str:
    """The ``findings`` query's rows (``columns``) with the attribution columns after them."""
    keyed = f"SELECT *, {_FINDING_KEY} FROM\n(\n{findings}\n)"
    by_job = join_using(keyed, job_attribution(ctx), "cluster, app_id, app_attempt, attr_key")
    by_app = join_using(by_job, app_attribution(ctx), "cluster, app_id, app_attempt")
    user = quote_ident("user")
    return (
        f"SELECT {', '.join(columns)}, if(a_user != '', a_user, app_user) AS {user}, app_team AS team, "
        f"a_job_tags AS job_tags, a_session AS session_id, a_operation AS operation_id FROM\n(\n{by_app}\n)"
    )
