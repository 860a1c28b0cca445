"""The report's utilisation and memory section (issue 25): executor core-time held against used, for the application
and per stage, and each executor's (and the driver's) memory peaks against what it requested. Read with the SQL of
``detection/utilisation.py`` (the same figures as ``sparktap cost`` and the Fleet and cost dashboard)."""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and quoted literals, never from user text.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparktap.detection.findings import QueryFn
from sparktap.detection.macros import expand
from sparktap.detection.sql import Scope, SqlContext
from sparktap.detection.utilisation import usage_query
from sparktap.report.text import fmt_bytes, fmt_ms, h, t
from sparktap.schemas.ddl import quote_ident, quote_literal

if TYPE_CHECKING:  # plotly is the report's extra: imported by the charts only, so collecting needs none
    import plotly.graph_objects as go

MiB = 1_048_576


@dataclass(frozen=True)
class StageUse:
    label: str
    allocated_core_ms: float
    busy_core_ms: float


@dataclass(frozen=True)
class ExecutorMemory:
    executor_id: str
    heap_bytes: float
    off_heap_bytes: float
    requested_bytes: float
    removal_class: str


@dataclass(frozen=True)
class Utilisation:
    """One application's core-time held and used, per stage, and its executors' memory peaks."""

    allocated_core_ms: float
    busy_core_ms: float
    allocated_gib_ms: float
    executors: int
    oom_removals: int
    stages: list[StageUse] = field(default_factory=list)
    memory: list[ExecutorMemory] = field(default_factory=list)

    @property
    def idle_share(self) -> float:
        return (
            max(self.allocated_core_ms - self.busy_core_ms, 0.0) / self.allocated_core_ms
            if self.allocated_core_ms
            else 0.0
        )


def read(
    query: QueryFn, database: str, version: tuple[int, ...], app_id: str, from_ms: int, to_ms: int
) -> Utilisation | None:
    """The application's utilisation over [from_ms, to_ms] (its start inside), or None without executor events."""
    ctx = SqlContext(database, version, Scope.of(apps=[app_id]))
    apps = query(expand(usage_query(ctx, "app"), from_ms, to_ms))
    if not apps or not float(apps[0]["executors"]):
        return None
    app = apps[0]
    stages = query(expand(usage_query(ctx, "stage"), from_ms, to_ms))
    stage_uses = [
        StageUse(
            f"{r['id']}.{r['attempt']} {str(r['name'])[:40]}", float(r["allocated_core_ms"]), float(r["busy_core_ms"])
        )
        for r in sorted(stages, key=lambda r: (int(r["start_ms"]), int(r["id"]), int(r["attempt"])))
    ]
    return Utilisation(
        allocated_core_ms=float(app["allocated_core_ms"]),
        busy_core_ms=float(app["busy_core_ms"]),
        allocated_gib_ms=float(app["allocated_gib_ms"]),
        executors=int(float(app["executors"])),
        oom_removals=int(float(app["oom_removals"])),
        stages=stage_uses,
        memory=_memory(query, database, app_id),
    )


def _memory(query: QueryFn, database: str, app_id: str) -> list[ExecutorMemory]:
    def view(table: str) -> str:
        return f"{quote_ident(database)}.{quote_ident(table + '_dedup')}"

    app = quote_literal(app_id)
    peaks = query(
        "SELECT toString(executor_id) AS executor_id, max(jvm_heap_memory) AS heap, "
        f"max(jvm_off_heap_memory) AS off_heap FROM {view('executor_metrics')} WHERE app_id = {app} "
        "GROUP BY executor_id"
    )
    requests = {
        str(r["executor_id"]): float(r["mb"]) * MiB
        for r in query(
            "SELECT toString(executor_id) AS executor_id, max(ifNull(memory_mb, 0)) AS mb "
            f"FROM {view('executor_added')} WHERE app_id = {app} GROUP BY executor_id"
        )
    }
    classes = {
        str(r["executor_id"]): str(r["c"])
        for r in query(
            f"SELECT toString(executor_id) AS executor_id, toString(any(removal_class)) AS c "
            f"FROM {view('executor_removed')} WHERE app_id = {app} GROUP BY executor_id"
        )
    }

    def order(r: dict[str, Any]) -> tuple[int, int, str]:
        name = str(r["executor_id"])
        return (name == "driver", int(name) if name.isdigit() else 0, name)

    return [
        ExecutorMemory(
            str(r["executor_id"]),
            float(r["heap"]),
            float(r["off_heap"]),
            requests.get(str(r["executor_id"]), 0.0),
            classes.get(str(r["executor_id"]), ""),
        )
        for r in sorted(peaks, key=order)
    ]


def core_time_chart(use: Utilisation, layout: Callable[..., go.Figure]) -> go.Figure:
    import plotly.graph_objects as go

    labels = [t(s.label) for s in use.stages]
    fig = go.Figure(
        [
            go.Bar(
                name="held (cores × time)",
                x=labels,
                y=[s.allocated_core_ms / 1000 for s in use.stages],
                marker_color="#b0b0b0",
            ),
            go.Bar(
                name="used (task run time)",
                x=labels,
                y=[s.busy_core_ms / 1000 for s in use.stages],
                marker_color="#4c78a8",
            ),
        ]
    )
    return layout(
        fig, "Executor core-seconds held vs used, per stage", 380, barmode="overlay", yaxis={"title": "core-s"}
    )


def memory_chart(use: Utilisation, layout: Callable[..., go.Figure]) -> go.Figure:
    import plotly.graph_objects as go

    ids = [t(m.executor_id) for m in use.memory]
    fig = go.Figure(
        [
            go.Bar(name="peak JVM heap", x=ids, y=[m.heap_bytes / MiB for m in use.memory], marker_color="#4c78a8"),
            go.Bar(name="peak off-heap", x=ids, y=[m.off_heap_bytes / MiB for m in use.memory], marker_color="#72b7b2"),
            go.Scatter(
                name="heap requested",
                x=ids,
                y=[m.requested_bytes / MiB or None for m in use.memory],
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 30, "color": "#e45756", "line": {"width": 3}},
            ),
        ]
    )
    return layout(fig, "Executor memory: peaks vs requested", 360, barmode="stack", yaxis={"title": "MiB"})


def section_html(
    use: Utilisation, figure_html: Callable[[str, go.Figure], str], layout: Callable[..., go.Figure]
) -> str:
    idle = max(use.allocated_core_ms - use.busy_core_ms, 0.0)
    rows = [
        ("executors", str(use.executors)),
        ("core-time held", f"{use.allocated_core_ms / 1000:,.0f} core-s"),
        ("core-time used by tasks", f"{use.busy_core_ms / 1000:,.0f} core-s"),
        ("idle", f"{idle / 1000:,.0f} core-s ({use.idle_share:.0%})"),
        ("memory held", f"{use.allocated_gib_ms / 3_600_000:,.2f} GiB-h"),
        ("executors removed for memory", str(use.oom_removals)),
    ]
    summary = (
        "<table><tbody>" + "".join(f"<tr><th>{h(k)}</th><td>{h(v)}</td></tr>" for k, v in rows) + "</tbody></table>"
    )
    memory_rows = "".join(
        f"<tr><td>{h(m.executor_id)}</td><td>{h(fmt_bytes(m.heap_bytes))}</td><td>{h(fmt_bytes(m.off_heap_bytes))}</td>"
        f"<td>{h(fmt_bytes(m.requested_bytes) if m.requested_bytes else '–')}</td>"
        f"<td>{h(f'{(m.heap_bytes + m.off_heap_bytes) / m.requested_bytes:.0%}' if m.requested_bytes else '–')}</td>"
        f"<td>{h(m.removal_class or '–')}</td></tr>"
        for m in use.memory
    )
    memory = (
        "<table><thead><tr><th>executor</th><th>peak heap</th><th>peak off-heap</th><th>heap requested</th>"
        f"<th>used</th><th>removed as</th></tr></thead><tbody>{memory_rows}</tbody></table>"
        if use.memory
        else "<p>No executor memory metrics recorded.</p>"
    )
    charts = f'<div class="chart">{figure_html("core-time", core_time_chart(use, layout))}</div>'
    if use.memory:
        charts += f'<div class="chart">{figure_html("memory", memory_chart(use, layout))}</div>'
    return (
        summary + charts + memory + f"<p>Wall time per core held idle: {h(fmt_ms(idle / max(use.executors, 1)))}.</p>"
    )
