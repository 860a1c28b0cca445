"""What a finding is about, by name: the job or SQL description its application gave, else the call site.

Spark names a stage by its call site ("collect at tpch.py:97"), which says little on a real job; an application
that sets a job description (``sc.setJobDescription("TPC-H q05")``, Spark SQL's thrift server, notebooks) has it
in every ``job_start`` (``description``), and a SQL execution started under it carries it as its own description
(``sql_start``). ``describe`` fills ``Finding.description`` from them: a stage's job description, else its SQL
execution's description; a plan or AQE finding's SQL execution description, else its first job's description.
Findings and their keys stay as they are: only the name is added (``Finding.where`` reads it).
"""

# ruff: noqa: S608 - SQL built from quoted identifiers and literals (quote_ident, quote_literal), ids are ints.

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

MAX_CHARS = 80
"""A description longer than this (SQL text, say) is cut, with an ellipsis: it names, the report shows it whole."""

QueryFn = Callable[[str], list[dict[str, Any]]]


def short(text: str, limit: int = MAX_CHARS) -> str:
    """One line, whitespace collapsed, at most ``limit`` characters (an ellipsis marks a cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _in(values: Iterable[Any], literal: Callable[[str], str] | None = None) -> str:
    items = sorted({str(v) for v in values})
    return ", ".join(literal(v) if literal else str(int(v)) for v in items)


def descriptions(
    query: QueryFn, database: str, app_ids: Iterable[str], job_ids: Iterable[int], execution_ids: Iterable[int]
) -> tuple[dict[tuple[str, str, int], str], dict[tuple[str, str, int], str], dict[tuple[str, str, int], str]]:
    """Non-empty descriptions, keyed by (app_id, app_attempt, id): of jobs, of SQL executions, and of each SQL
    execution's first described job."""
    from sparktap.schemas.ddl import quote_ident, quote_literal

    apps = _in(app_ids, quote_literal)
    jobs: dict[tuple[str, str, int], str] = {}
    sqls: dict[tuple[str, str, int], str] = {}
    by_execution: dict[tuple[str, str, int], str] = {}
    if not apps:
        return jobs, sqls, by_execution

    def view(table: str) -> str:
        return f"{quote_ident(database)}.{quote_ident(table + '_dedup')}"

    job_list, execution_list = _in(job_ids), _in(execution_ids)
    wanted = " OR ".join(
        part
        for part in (
            f"job_id IN ({job_list})" if job_list else "",
            f"sql_execution_id IN ({execution_list})" if execution_list else "",
        )
        if part
    )
    if wanted:
        for r in query(
            f"SELECT app_id, app_attempt, job_id, ifNull(sql_execution_id, -1) AS execution_id, "
            f"ifNull(description, '') AS description FROM {view('job_start')} "
            f"WHERE app_id IN ({apps}) AND ({wanted}) AND ifNull(description, '') != '' ORDER BY job_id"
        ):
            app = (str(r["app_id"]), str(r["app_attempt"]))
            jobs[(*app, int(r["job_id"]))] = str(r["description"])
            if int(r["execution_id"]) >= 0:
                by_execution.setdefault((*app, int(r["execution_id"])), str(r["description"]))
    if execution_list:
        for r in query(
            f"SELECT app_id, app_attempt, execution_id, description FROM {view('sql_start')} "
            f"WHERE app_id IN ({apps}) AND execution_id IN ({execution_list}) AND description != ''"
        ):
            sqls[(str(r["app_id"]), str(r["app_attempt"]), int(r["execution_id"]))] = str(r["description"])
    return jobs, sqls, by_execution


def describe(query: QueryFn, database: str, findings: Sequence[Any]) -> list[Any]:
    """The findings with ``description`` set where their job or SQL execution has one (two small queries; none
    when there is no finding)."""
    subjects = [f for f in findings if f.subject != "stream"]
    if not subjects:
        return list(findings)
    jobs, sqls, by_execution = descriptions(
        query,
        database,
        (f.app_id for f in subjects),
        (f.job_id for f in subjects if f.job_id is not None),
        (f.sql_execution_id for f in subjects if f.sql_execution_id is not None),
    )
    out = []
    for f in findings:
        app = (f.app_id, f.app_attempt)
        job = jobs.get((*app, f.job_id)) if f.job_id is not None else None
        sql = None
        if f.sql_execution_id is not None:
            sql = sqls.get((*app, f.sql_execution_id)) or by_execution.get((*app, f.sql_execution_id))
        if f.subject == "stream":
            name = ""
        elif f.subject == "stage":
            name = job or sql or ""
        else:
            name = sql or job or ""
        out.append(dataclasses.replace(f, description=short(name)) if name else f)
    return out
