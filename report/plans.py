"""The plan and streaming part of ``sparktap report``: the optimizer's estimates vs the rows produced at scans and
joins, whole-stage codegen coverage per SQL execution, and each streaming query's micro-batches (duration vs the
interval between batches, input vs processed rows/s, backlog, state) — what the issue-16 rules look at, as plots.

``read`` takes the rows from the ``sql_plan_stats`` and ``streaming_query_progress`` dedup views (18.16 SQL: ARRAY
JOIN of the node arrays, ``duration_ms`` as a Map or JSON text); the figures follow ``charts.py``'s (escaped
labels, one unit per axis, a note when there is nothing to plot).
"""

# ruff: noqa: S608 - SQL is built from quoted identifiers and the app id as a quoted literal.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from sparktap.detection.findings import QueryFn

PLAN_CHARTS: dict[str, str] = {
    "estimates": "Optimizer estimate vs actual rows (scans and joins)",
    "codegen": "Whole-stage codegen coverage per SQL execution",
}
STREAMING_CHARTS: dict[str, str] = {
    "batches": "Micro-batch duration vs interval between batches",
    "rates": "Input vs processed rows per second",
    "state": "State rows and source backlog",
}
"""Chart div id suffix (``chart-<key>``) -> title, in page order; shown when the application has such data."""


@dataclass(frozen=True)
class PlanNode:
    execution_id: int
    node_id: int
    operator: str
    est_rows: int
    est_source: str
    actual_rows: int
    codegen_stage: int
    codegen_fallback: str

    @property
    def label(self) -> str:
        return f"sql {self.execution_id} · node {self.node_id} · {self.operator[:60]}"

    @property
    def estimated(self) -> bool:
        """A scan or join with both an estimate and a row count."""
        op = self.operator
        return (
            self.est_rows >= 0
            and self.actual_rows >= 0
            and (op.startswith("Scan ") or "Join" in op or op == "CartesianProduct")
        )


@dataclass(frozen=True)
class Batch:
    """One micro-batch of a streaming query run (its progress event)."""

    query: str
    run_id: str
    batch_id: int
    start_ms: int
    duration_ms: int
    input_rows: int
    input_rate: float
    processed_rate: float
    backlog: int | None
    state_rows: int
    state_bytes: int


@dataclass(frozen=True)
class PlansAndStreams:
    nodes: list[PlanNode] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)

    def queries(self) -> dict[str, list[Batch]]:
        """Query run label -> its batches in batch order; a query with several runs gets one label per run."""
        runs: dict[str, set[str]] = {}
        for b in self.batches:
            runs.setdefault(b.query, set()).add(b.run_id)
        out: dict[str, list[Batch]] = {}
        for b in sorted(self.batches, key=lambda b: (b.query, b.run_id, b.batch_id)):
            label = b.query if len(runs[b.query]) == 1 else f"{b.query} run {b.run_id[:8]}"
            out.setdefault(label, []).append(b)
        return out


def read(query: QueryFn, view: Callable[[str], str], app: str, map_column: bool) -> PlansAndStreams:
    """The application's plan nodes and streaming batches (``app`` is the quoted app id literal)."""
    nodes = [
        PlanNode(
            int(r["execution_id"]),
            int(r["node_id"]),
            str(r["operator"]),
            int(r["est_rows"]),
            str(r["est_source"]),
            int(r["actual_rows"]),
            int(r["codegen_stage"]),
            str(r["fallback"]),
        )
        for r in query(f"""SELECT execution_id, n_id AS node_id, n_op AS operator, n_est AS est_rows,
    toString(n_src) AS est_source, n_act AS actual_rows, n_cg AS codegen_stage, n_fb AS fallback
FROM {view("sql_plan_stats")}
ARRAY JOIN nodes_node_id AS n_id, nodes_operator AS n_op, nodes_est_rows AS n_est, nodes_est_source AS n_src,
    nodes_actual_rows AS n_act, nodes_codegen_stage AS n_cg, nodes_codegen_fallback AS n_fb
WHERE app_id = {app}
ORDER BY execution_id, node_id""")
    ]
    trigger = (
        "toInt64(duration_ms['triggerExecution'])"
        if map_column
        else "toInt64(visitParamExtractInt(duration_ms, 'triggerExecution'))"
    )
    batches = [
        Batch(
            str(r["query"]),
            str(r["run_id"]),
            int(r["batch_id"]),
            int(r["event_time_ms"]),
            int(r["trigger_ms"]),
            int(r["num_input_rows"]),
            float(r["in_rate"]),
            float(r["out_rate"]),
            int(r["backlog"]) if int(r["backlog_known"]) else None,
            int(r["state_rows"]),
            int(r["state_bytes"]),
        )
        for r in query(f"""SELECT if(ifNull(name, '') != '', concat(ifNull(name, ''), ' (', query_id, ')'),
        toString(query_id)) AS query, toString(run_id) AS run_id, batch_id, event_time_ms, {trigger} AS trigger_ms,
    num_input_rows, ifNull(input_rows_per_second, 0) AS in_rate, ifNull(processed_rows_per_second, 0) AS out_rate,
    arraySum(arrayFilter(b -> b >= 0, sources_backlog)) AS backlog,
    length(sources_backlog) > 0 AND arrayAll(b -> b >= 0, sources_backlog) AS backlog_known,
    arraySum(state_operators_num_rows_total) AS state_rows, arraySum(state_operators_memory_used_bytes) AS state_bytes
FROM {view("streaming_query_progress")}
WHERE app_id = {app}
ORDER BY query_id, run_id, batch_id""")
    ]
    return PlansAndStreams(nodes, batches)


# ----------------------------------------------------------------------------------------------- figures


def _fig() -> go.Figure:
    import plotly.graph_objects as go

    return go.Figure()


def estimates(
    data: PlansAndStreams,
    t: Callable[[object], str],
    note: Callable[[go.Figure, str], None],
    layout: Callable[..., go.Figure],
) -> go.Figure:
    import plotly.graph_objects as go

    fig = _fig()
    nodes = [n for n in data.nodes if n.estimated]
    labels = [t(n.label) for n in nodes]
    for name, color, value in (
        ("estimated rows", "#9d9d9d", lambda n: n.est_rows),
        ("actual rows", "#4c78a8", lambda n: n.actual_rows),
    ):
        fig.add_trace(
            go.Bar(
                name=name,
                y=labels,
                x=[max(value(n), 0.5) for n in nodes],
                orientation="h",
                marker_color=color,
                customdata=[[f"{value(n):,}", t(n.est_source or "plan")] for n in nodes],
                hovertemplate=f"%{{y}}: {name} %{{customdata[0]}} (estimate from %{{customdata[1]}})<extra></extra>",
            )
        )
    if not nodes:
        note(fig, "no scan or join with both an estimate and a row count")
    return layout(
        fig,
        PLAN_CHARTS["estimates"],
        120 + 40 * max(len(nodes), 2),
        barmode="group",
        xaxis={"type": "log", "title": {"text": "rows (log scale)"}},
        yaxis={"automargin": True, "autorange": "reversed"},
    )


def codegen(
    data: PlansAndStreams,
    t: Callable[[object], str],
    note: Callable[[go.Figure, str], None],
    layout: Callable[..., go.Figure],
) -> go.Figure:
    import plotly.graph_objects as go

    fig = _fig()
    executions = sorted({n.execution_id for n in data.nodes})
    inside = [sum(1 for n in data.nodes if n.execution_id == e and n.codegen_stage > 0) for e in executions]
    outside = [[n for n in data.nodes if n.execution_id == e and n.codegen_fallback] for e in executions]
    x = [f"sql {e}" for e in executions]
    fig.add_trace(
        go.Bar(
            name="operators in whole-stage codegen",
            x=x,
            y=inside,
            marker_color="#54a24b",
            hovertemplate="%{x}: %{y} operators fused<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            name="operators outside codegen",
            x=x,
            y=[len(o) for o in outside],
            marker_color="#e45756",
            customdata=[
                [t("; ".join(sorted({f"{n.operator}: {n.codegen_fallback}" for n in o}))[:300] or "–")] for o in outside
            ],
            hovertemplate="%{x}: %{y} interpreted (%{customdata[0]})<extra></extra>",
        )
    )
    if not executions:
        note(fig, "no sql_plan_stats recorded")
    return layout(
        fig,
        PLAN_CHARTS["codegen"],
        340,
        barmode="stack",
        xaxis={"type": "category"},
        yaxis={"title": {"text": "plan operators"}, "rangemode": "tozero"},
    )


def _per_query(
    data: PlansAndStreams,
    t: Callable[[object], str],
    series: tuple[tuple[str, str, Callable[[Batch], float | None]], ...],
) -> go.Figure:
    import plotly.graph_objects as go

    fig = _fig()
    for query, batches in data.queries().items():
        for name, dash, value in series:
            points = [(b.batch_id, value(b)) for b in batches if value(b) is not None]
            fig.add_trace(
                go.Scatter(
                    name=t(f"{query}: {name}"),
                    x=[p[0] for p in points],
                    y=[p[1] for p in points],
                    mode="lines+markers",
                    line={"dash": dash},
                    hovertemplate=f"batch %{{x}}: {t(name)} %{{y:,.2f}}<extra></extra>",
                )
            )
    return fig


def batches(
    data: PlansAndStreams,
    t: Callable[[object], str],
    note: Callable[[go.Figure, str], None],
    layout: Callable[..., go.Figure],
) -> go.Figure:
    interval: dict[tuple[str, int], float] = {}
    for runs in data.queries().values():
        for prev, cur in zip(runs, runs[1:], strict=False):
            interval[(cur.run_id, cur.batch_id)] = (
                (cur.start_ms - prev.start_ms) / 1000 / max(cur.batch_id - prev.batch_id, 1)
            )
    fig = _per_query(
        data,
        t,
        (
            ("batch duration (s)", "solid", lambda b: b.duration_ms / 1000),
            ("interval since the previous batch (s)", "dot", lambda b: interval.get((b.run_id, b.batch_id))),
        ),
    )
    return layout(
        fig,
        STREAMING_CHARTS["batches"],
        380,
        xaxis={"title": {"text": "batch id"}},
        yaxis={"title": {"text": "seconds"}, "rangemode": "tozero"},
    )


def rates(
    data: PlansAndStreams,
    t: Callable[[object], str],
    note: Callable[[go.Figure, str], None],
    layout: Callable[..., go.Figure],
) -> go.Figure:
    fig = _per_query(
        data,
        t,
        (("input rows/s", "solid", lambda b: b.input_rate), ("processed rows/s", "dot", lambda b: b.processed_rate)),
    )
    return layout(
        fig,
        STREAMING_CHARTS["rates"],
        360,
        xaxis={"title": {"text": "batch id"}},
        yaxis={"title": {"text": "rows per second"}, "rangemode": "tozero"},
    )


def state(
    data: PlansAndStreams,
    t: Callable[[object], str],
    note: Callable[[go.Figure, str], None],
    layout: Callable[..., go.Figure],
) -> go.Figure:
    fig = _per_query(
        data, t, (("state rows", "solid", lambda b: b.state_rows), ("source backlog", "dot", lambda b: b.backlog))
    )
    if not any(b.state_rows or b.backlog for b in data.batches):
        note(fig, "no state and no measurable backlog")
    return layout(
        fig,
        STREAMING_CHARTS["state"],
        360,
        xaxis={"title": {"text": "batch id"}},
        yaxis={"title": {"text": "rows / offsets"}, "rangemode": "tozero"},
    )


Figure = Callable[[PlansAndStreams, Callable[[object], str], Callable[..., None], Callable[..., Any]], Any]
FIGURES: dict[str, Figure] = {
    "estimates": estimates,
    "codegen": codegen,
    "batches": batches,
    "rates": rates,
    "state": state,
}
