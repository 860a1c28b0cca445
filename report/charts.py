"""The stage figures of the report (plotly): timeline, task durations, skew, shuffle locality, spill."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go

from sparktap.detection import DEFAULT_THRESHOLDS
from sparktap.report.model import Report, Stage
from sparktap.report.text import fmt_bytes, fmt_ms, iso, t

CHARTS: dict[str, str] = {
    "timeline": "Stage timeline",
    "durations": "Task duration per stage",
    "skew": "Skew per stage (max / median)",
    "shuffle": "Shuffle read per stage: local vs remote",
    "spill": "Spill per stage",
}
"""Chart div id suffix (``chart-<key>``) -> title, in page order."""
PLOT_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True, "displayModeBar": "hover"}
STATUS_COLORS = {"succeeded": "#4c78a8", "failed": "#e45756", "running": "#f58518", "incomplete": "#9d9d9d"}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def layout(fig: go.Figure, title: str, height: int, **axes: Any) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 17}},
        height=height,
        template="plotly_white",
        font={"family": FONT, "size": 12},
        margin={"l": 70, "r": 20, "t": 60, "b": 60},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        hoverlabel={"font": {"family": FONT}},
        **axes,
    )
    return fig


def _stage_axis(report: Report, labels: Callable[[Stage], str]) -> dict[str, Any]:
    """An x axis of stages in timeline order, whatever trace each stage is drawn in."""
    return {
        "type": "category",
        "title": {"text": "stage"},
        "categoryorder": "array",
        "categoryarray": [labels(s) for s in report.stages],
    }


def _byte_unit(values: Sequence[float]) -> tuple[str, float]:
    """The binary unit the largest value reads best in (the tables use the same units)."""
    top = max(values, default=0)
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if top >= 1024**power:
            return unit, float(1024**power)
    return "B", 1.0


def _log_ticks(top: float) -> dict[str, Any]:
    """1-2-5 ticks from 1 to above ``top`` (plotly's own log ticks crowd the first decade)."""
    ticks = [m * 10**e for e in range(0, int(math.log10(max(top, 1))) + 2) for m in (1, 2, 5)]
    ticks = [x for x in ticks if x <= top * 2] or [1]
    return {"tickvals": ticks, "ticktext": [f"{x:g}" for x in ticks], "range": [-0.1, math.log10(top * 1.4)]}


def note(fig: go.Figure, text: str) -> None:
    fig.add_annotation(
        text=t(text), xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 14, "color": "#777"}
    )


def timeline(report: Report, labels: Callable[[Stage], str]) -> go.Figure:
    fig = go.Figure()
    placed = [s for s in report.stages if s.start_ms is not None]
    for status in sorted({s.status for s in placed}, key=lambda x: (x not in STATUS_COLORS, x)):
        group = [s for s in placed if s.status == status]
        ends = [s.end_ms if s.end_ms is not None else report.last_event_ms for s in group]
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=t(status),
                y=[labels(s) for s in group],
                base=[iso(s.start_ms or 0) for s in group],
                x=[max(e - (s.start_ms or 0), 0) for s, e in zip(group, ends, strict=True)],
                marker_color=STATUS_COLORS.get(status, "#72b7b2"),
                customdata=[
                    [t(s.title), fmt_ms(e - (s.start_ms or 0)), s.num_tasks, s.tasks_failed]
                    for s, e in zip(group, ends, strict=True)
                ],
                hovertemplate="<b>%{y}</b> %{customdata[0]}<br>%{customdata[1]}, %{customdata[2]} tasks, "
                "%{customdata[3]} failed<extra></extra>",
            )
        )
    order = [labels(s) for s in placed]
    return layout(
        fig,
        CHARTS["timeline"],
        min(140 + 28 * len(order), 1400),
        xaxis={"type": "date", "title": {"text": "time (UTC)"}},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": order, "autorange": "reversed"},
        barmode="overlay",
        bargap=0.25,
    )


def durations(report: Report, labels: Callable[[Stage], str]) -> go.Figure:
    fig = go.Figure()
    stages = [s for s in report.stages if s.durations is not None]
    values = [v for s in stages if s.durations for v in (s.durations.min, s.durations.max)]
    log = bool(values) and max(values) / max(min(values), 1.0) >= 50

    def sec(ms: float) -> float:
        return max(ms, 1.0) / 1000 if log else ms / 1000

    for source, name in (
        ("task_end", "task_end rows: box p25–p75, whiskers min–max"),
        ("stage_completed", "stage aggregates: box p50–p75 (no p25), whiskers min–max"),
    ):
        group = [s for s in stages if s.durations is not None and s.durations.source == source]
        if not group:
            continue
        d = [s.durations for s in group if s.durations is not None]
        fig.add_trace(
            go.Box(
                name=name,
                x=[labels(s) for s in group],
                lowerfence=[sec(x.min) for x in d],
                q1=[sec(x.p25 if x.p25 is not None else x.p50) for x in d],
                median=[sec(x.p50) for x in d],
                q3=[sec(x.p75) for x in d],
                upperfence=[sec(x.max) for x in d],
                marker_color="#4c78a8" if source == "task_end" else "#72b7b2",
                boxpoints=False,
                hoverinfo="x+y",
            )
        )
    with_p95 = [s for s in stages if s.durations is not None and s.durations.p95 is not None]
    if with_p95:
        fig.add_trace(
            go.Scatter(
                name="p95",
                mode="markers",
                x=[labels(s) for s in with_p95],
                y=[sec(s.durations.p95 or 0) for s in with_p95 if s.durations is not None],
                marker={"symbol": "diamond", "size": 8, "color": "#e45756"},
                customdata=[[s.durations.count if s.durations else 0] for s in with_p95],
                hovertemplate="%{x}: p95 %{y:.3~f} s over %{customdata[0]} tasks<extra></extra>",
            )
        )
    if not stages:
        note(fig, "no task durations recorded")
    return layout(
        fig,
        CHARTS["durations"],
        420,
        boxmode="overlay",
        xaxis=_stage_axis(report, labels),
        yaxis={"type": "log" if log else "linear", "title": {"text": "task duration (s)"}},
    )


def skew(report: Report, labels: Callable[[Stage], str]) -> go.Figure:
    fig = go.Figure()
    stages = report.stages
    task = [s.duration_skew for s in stages]
    data = [s.data_skew for s in stages]
    fig.add_trace(
        go.Bar(
            name="task duration max / p50",
            x=[labels(s) for s in stages],
            y=task,
            marker_color="#4c78a8",
            customdata=[
                [fmt_ms(s.durations.max), fmt_ms(s.durations.p50)] if s.durations else ["–", "–"] for s in stages
            ],
            hovertemplate="%{x}: %{y:.1f}× (max %{customdata[0]}, p50 %{customdata[1]})<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            name="bytes read max / p50 (shuffle read, else input)",
            x=[labels(s) for s in stages],
            y=data,
            marker_color="#f58518",
            customdata=[[t(s.read_kind), fmt_bytes(s.read_max), fmt_bytes(s.read_p50)] for s in stages],
            hovertemplate=(
                "%{x}: %{y:.1f}× %{customdata[0]} (max %{customdata[1]}, p50 %{customdata[2]})<extra></extra>"
            ),
        )
    )
    ratios = [r for r in (*task, *data) if r is not None]
    log = bool(ratios) and max(ratios) >= 30
    thr = report.thresholds or DEFAULT_THRESHOLDS
    for y, text, color, anchor in (
        (thr.task_time_skew.ratio_warning, "task-time skew", "#4c78a8", "bottom"),
        (thr.data_skew.ratio_warning, "data skew", "#f58518", "top"),
    ):
        fig.add_hline(y=y, line={"dash": "dash", "color": color, "width": 1})
        # annotations on a log axis take log10 of the value (shapes take the value itself)
        fig.add_annotation(
            text=f"{text} warning {y:g}×",
            x=1,
            xref="paper",
            xanchor="right",
            yanchor=anchor,
            y=math.log10(y) if log else y,
            yref="y",
            showarrow=False,
            font={"size": 10, "color": color},
        )
    if not ratios:
        note(fig, "no stage has a median to compare with")
    return layout(
        fig,
        CHARTS["skew"],
        400,
        barmode="group",
        xaxis=_stage_axis(report, labels),
        yaxis={
            "type": "log" if log else "linear",
            "title": {"text": "max / median (×)"},
            **(_log_ticks(max(ratios)) if log else {}),
        },
    )


def _byte_bars(
    fig: go.Figure,
    report: Report,
    labels: Callable[[Stage], str],
    series: Sequence[tuple[str, str, Callable[[Stage], int]]],
    stacked: bool,
) -> str:
    """Bars of byte counts per stage in one binary unit; returns the unit ('' when every value is 0)."""
    stages = report.stages
    values = [float(value(s)) for s in stages for _, _, value in series]
    if stacked:
        values = [float(sum(value(s) for _, _, value in series)) for s in stages]
    unit, scale = _byte_unit(values)
    for name, color, value in series:
        fig.add_trace(
            go.Bar(
                name=name,
                x=[labels(s) for s in stages],
                y=[value(s) / scale for s in stages],
                marker_color=color,
                customdata=[[fmt_bytes(value(s))] for s in stages],
                hovertemplate=f"%{{x}}: {name} %{{customdata[0]}}<extra></extra>",
            )
        )
    return unit if any(values) else ""


def shuffle(report: Report, labels: Callable[[Stage], str]) -> go.Figure:
    fig = go.Figure()
    unit = _byte_bars(
        fig,
        report,
        labels,
        (
            ("local", "#54a24b", lambda s: s.shuffle_local_bytes),
            ("remote", "#e45756", lambda s: s.shuffle_remote_bytes),
        ),
        stacked=True,
    )
    if not unit:
        note(fig, "no stage read shuffle data")
    return layout(
        fig,
        CHARTS["shuffle"],
        380,
        barmode="stack",
        xaxis=_stage_axis(report, labels),
        yaxis={"title": {"text": f"shuffle read ({unit or 'bytes'})"}, "rangemode": "tozero"},
        legend_traceorder="normal",
    )


def spill(report: Report, labels: Callable[[Stage], str]) -> go.Figure:
    fig = go.Figure()
    unit = _byte_bars(
        fig,
        report,
        labels,
        (
            ("memory spill", "#b279a2", lambda s: s.memory_spill_bytes),
            ("disk spill", "#9d755d", lambda s: s.disk_spill_bytes),
        ),
        stacked=False,
    )
    if not unit:
        note(fig, "no stage spilled to memory or disk")
    return layout(
        fig,
        CHARTS["spill"],
        360,
        barmode="group",
        xaxis=_stage_axis(report, labels),
        yaxis={"title": {"text": f"spilled ({unit or 'bytes'})"}, "rangemode": "tozero"},
    )


FIGURES: dict[str, Callable[[Report, Callable[[Stage], str]], go.Figure]] = {
    "timeline": timeline,
    "durations": durations,
    "skew": skew,
    "shuffle": shuffle,
    "spill": spill,
}
