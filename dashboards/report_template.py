"""The HTML of ``sparktap report``: plotly figures and escaped tables in one file that works offline.

plotly.js is embedded once, inline, in ``<head>`` (what ``include_plotlyjs="inline"`` writes); every figure is a
``<div>`` plus a ``Plotly.newPlot`` call. The document links and loads nothing outside itself: no CDN, no fonts,
no plotly.com logo link (``displaylogo: false``). Every string that comes from the data (application, stage and
SQL descriptions, findings) is HTML-escaped, in the tables and in the figures alike (plotly renders a subset of
HTML in its labels, and decodes entities, so escaped text shows as written).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from sparktap import __version__
from sparktap.dashboards import report_plans
from sparktap.dashboards.report import Report, Stage
from sparktap.detection import DEFAULT_THRESHOLDS

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


def h(value: object) -> str:
    """Escape for HTML text and attribute values."""
    return escape(str(value), quote=True)


def t(value: object) -> str:
    """Escape for plotly labels (plotly reads ``<b>``, ``<a href>`` … in text, and decodes ``&lt;``)."""
    return escape(str(value), quote=False)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "–"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


# ----------------------------------------------------------------------------------------------- figures


def _layout(fig: go.Figure, title: str, height: int, **axes: Any) -> go.Figure:
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


def _note(fig: go.Figure, text: str) -> None:
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
                base=[_iso(s.start_ms or 0) for s in group],
                x=[max(e - (s.start_ms or 0), 0) for s, e in zip(group, ends, strict=True)],
                marker_color=STATUS_COLORS.get(status, "#72b7b2"),
                customdata=[
                    [t(s.name), fmt_ms(e - (s.start_ms or 0)), s.num_tasks, s.tasks_failed]
                    for s, e in zip(group, ends, strict=True)
                ],
                hovertemplate="<b>%{y}</b> %{customdata[0]}<br>%{customdata[1]}, %{customdata[2]} tasks, "
                "%{customdata[3]} failed<extra></extra>",
            )
        )
    order = [labels(s) for s in placed]
    return _layout(
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
        _note(fig, "no task durations recorded")
    return _layout(
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
        _note(fig, "no stage has a median to compare with")
    return _layout(
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
        _note(fig, "no stage read shuffle data")
    return _layout(
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
        _note(fig, "no stage spilled to memory or disk")
    return _layout(
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


def figure_html(key: str, fig: go.Figure) -> str:
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            config=PLOT_CONFIG,
            div_id=f"chart-{key}",
            default_width="100%",
            default_height=f"{fig.layout.height}px",
        )
    )


# ----------------------------------------------------------------------------------------------- tables


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{h(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _tags(**flags: bool) -> str:
    return " ".join(f'<span class="tag {name}">{name}</span>' for name, on in flags.items() if on) or "–"


def _evidence(name: str, value: float) -> str:
    if name.endswith("_bytes"):
        return fmt_bytes(value)
    if name.endswith("_ms"):
        return fmt_ms(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def findings_html(report: Report) -> str:
    if not report.findings:
        return '<p class="ok">No finding: no detection rule fired for this application.</p>'
    rows = []
    for f in sorted(report.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), f.stage_id or 0, f.rule)):
        evidence = ", ".join(f"{h(k)} {h(_evidence(k, v))}" for k, v in f.evidence.items())
        rows.append(
            [
                f'<span class="sev {h(f.severity)}">{h(f.severity)}</span>',
                h(f.rule_title),
                h(f.where) + (' <span class="tag running">running</span>' if f.running else ""),
                h(f.explanation) + (f'<div class="evidence">{evidence}</div>' if evidence else ""),
                h(f.suggested_fix),
            ]
        )
    return table(["Severity", "Rule", "Where", "Explanation", "Suggested fix"], rows, "findings")


def stages_html(report: Report, labels: Callable[[Stage], str]) -> str:
    rows = [
        [
            h(labels(s)),
            h(s.name),
            f'<span class="status {h(s.status)}">{h(s.status)}</span>',
            f"{s.num_tasks:,}" + (f' <span class="bad">({s.tasks_failed:,} failed)</span>' if s.tasks_failed else ""),
            h(fmt_ms(s.end_ms - s.start_ms if s.end_ms is not None and s.start_ms is not None else None)),
            h(f"{fmt_ms(s.durations.p50)} / {fmt_ms(s.durations.max)}" if s.durations else "–"),
            h(fmt_bytes(s.input_bytes)),
            h(f"{fmt_bytes(s.shuffle_local_bytes)} / {fmt_bytes(s.shuffle_remote_bytes)}"),
            h(fmt_bytes(s.shuffle_write_bytes)),
            h(f"{fmt_bytes(s.memory_spill_bytes)} / {fmt_bytes(s.disk_spill_bytes)}"),
        ]
        for s in report.stages
    ]
    return table(
        [
            "Stage",
            "Name",
            "Status",
            "Tasks",
            "Duration",
            "Task p50 / max",
            "Input",
            "Shuffle read local / remote",
            "Shuffle write",
            "Spill memory / disk",
        ],
        rows,
        "num",
    )


def aqe_html(report: Report) -> str:
    if not report.aqe_updates and not report.aqe_reads:
        return "<p>No AQE plan update recorded (adaptive execution off, or no SQL query ran).</p>"
    updates = []
    for u in report.aqe_updates:
        switched = u.previous_join_strategies != u.join_strategies
        joins = (
            (f"{h(', '.join(u.previous_join_strategies) or '–')} → " if switched else "")
            + h(", ".join(u.join_strategies) or "–")
            + (' <span class="tag switched">switched</span>' if switched else "")
        )
        reads = (
            "<br>".join(
                f"node {r.node_id}: {_tags(coalesced=r.coalesced, skewed=r.skewed, local=r.local)}"
                + (f' <span class="muted">{h(r.description)}</span>' if r.description else "")
                for r in u.shuffle_reads
            )
            or "–"
        )
        updates.append([h(fmt_time(u.at_ms)), str(u.execution_id), "yes" if u.final_plan else "no", joins, reads])
    reads_rows = [
        [
            str(r.execution_id),
            str(r.node_id),
            _tags(coalesced=r.coalesced, skewed=r.skewed, local=r.local),
            h("–" if r.num_partitions is None else f"{r.num_partitions:,}"),
            h(fmt_bytes(r.partition_data_size_bytes)),
            h(
                "–"
                if r.num_partitions is None or not r.partition_data_size_bytes
                else fmt_bytes(r.partition_data_size_bytes / max(r.num_partitions, 1))
            ),
            *(
                h("–" if v is None else f"{v:,}")
                for v in (r.num_skewed_partitions, r.num_skewed_splits, r.num_coalesced_partitions)
            ),
        ]
        for r in report.aqe_reads
    ]
    return (
        "<h3>Plan updates</h3>"
        + (
            table(["Time", "SQL execution", "Final plan", "Join strategies", "AQE shuffle reads"], updates)
            if updates
            else "<p>None.</p>"
        )
        + "<h3>AQE shuffle reads</h3>"
        + (
            table(
                [
                    "SQL execution",
                    "Node",
                    "Kind",
                    "Partitions",
                    "Data size",
                    "Average partition",
                    "Skewed partitions",
                    "Skewed splits",
                    "Coalesced partitions",
                ],
                reads_rows,
                "num",
            )
            if reads_rows
            else "<p>None.</p>"
        )
    )


def sql_html(report: Report) -> str:
    if not report.sql:
        return "<p>No SQL execution recorded.</p>"
    rows = []
    for q in report.sql:
        status = (
            '<span class="status failed">failed</span><div class="evidence">' + h(q.error) + "</div>"
            if q.error
            else '<span class="status succeeded">succeeded</span>'
            if q.ended
            else '<span class="status running">running</span>'
        )
        rows.append(
            [
                str(q.execution_id),
                f'<div class="desc">{h(q.description) or "–"}</div>',
                h(fmt_time(q.start_ms)),
                h(fmt_ms(q.duration_ms)),
                status,
            ]
        )
    return table(["Execution", "Description", "Started", "Duration", "Status"], rows)


def summary_html(report: Report) -> str:
    worst = {s: sum(f.severity == s for f in report.findings) for s in ("critical", "warning", "info")}
    cards = [
        ("Duration", fmt_ms(report.duration_ms) + (" (running)" if report.running else "")),
        ("Stage attempts", f"{len(report.stages):,}"),
        ("Tasks", f"{sum(s.num_tasks for s in report.stages):,}"),
        ("Findings", " · ".join(f"{n} {s}" for s, n in worst.items() if n) or "none"),
    ]
    facts = [
        ("Application", report.app_name),
        ("App id", report.app_id),
        ("Cluster", report.cluster),
        ("Attempt(s)", ", ".join(a or "–" for a in report.attempts)),
        ("Spark", report.spark_version or "–"),
        ("Master", report.master or "–"),
        ("User", report.user or "–"),
        ("Started", fmt_time(report.start_ms)),
        ("Ended", fmt_time(report.end_ms) if not report.running else "still running (no app_end yet)"),
        ("Executors", f"{report.executors:,}"),
        ("SQL executions", f"{len(report.sql):,}"),
    ]
    props = "".join(f"<tr><td>{h(k)}</td><td>{h(v)}</td></tr>" for k, v in sorted(report.properties.items()))
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="k">{h(k)}</div><div class="v">{h(v)}</div></div>' for k, v in cards)
        + "</div>"
        + '<dl class="facts">'
        + "".join(f"<dt>{h(k)}</dt><dd>{h(v)}</dd>" for k, v in facts)
        + "</dl>"
        + (
            f"<details><summary>Spark properties ({len(report.properties)}, allow-listed and redacted)</summary>"
            f"<table><tbody>{props}</tbody></table></details>"
            if props
            else ""
        )
    )


# ----------------------------------------------------------------------------------------------- page

CSS = """
:root { --fg:#1f2933; --muted:#6b7785; --line:#e3e8ee; --bg:#f6f8fa; }
* { box-sizing: border-box; }
body { margin:0; font-family:FONT_FAMILY; color:var(--fg); background:var(--bg); font-size:14px; line-height:1.45; }
header { background:#1f3a5f; color:#fff; padding:18px 32px; }
header h1 { margin:0; font-size:22px; font-weight:600; }
header .sub { opacity:.8; margin-top:4px; font-size:13px; }
nav { position:sticky; top:0; z-index:10; background:#fff; border-bottom:1px solid var(--line); padding:8px 32px; }
nav a { color:#1f3a5f; margin-right:16px; text-decoration:none; font-weight:500; }
main { padding:16px 32px 40px; max-width:1500px; margin:auto; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:16px 20px; margin:16px 0; }
section > h2 { margin:0 0 12px; font-size:18px; }
h3 { font-size:15px; margin:16px 0 8px; }
.cards { display:flex; gap:12px; flex-wrap:wrap; margin-bottom:12px; }
.card { flex:1 1 180px; border:1px solid var(--line); border-radius:8px; padding:10px 14px; background:var(--bg); }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .v { font-size:20px; font-weight:600; }
dl.facts { display:grid; grid-template-columns:max-content 1fr max-content 1fr; gap:4px 16px; margin:0; }
dl.facts dt { color:var(--muted); } dl.facts dd { margin:0; word-break:break-all; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { background:var(--bg); font-weight:600; position:sticky; top:40px; }
table.num td { white-space:nowrap; } table.num td:nth-child(2) { white-space:normal; }
.desc { max-height:7em; overflow:auto; white-space:pre-wrap; word-break:break-word; font-family:ui-monospace, monospace;
        font-size:12px; }
.sev, .status, .tag { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; }
.sev.critical { background:#fde2e1; color:#a61b1b; } .sev.warning { background:#fff1d6; color:#8a5a00; }
.sev.info { background:#e3efff; color:#1f4f99; }
.status.succeeded { background:#e2f3e5; color:#256b33; } .status.failed { background:#fde2e1; color:#a61b1b; }
.status.running { background:#fff1d6; color:#8a5a00; } .status.incomplete { background:#eee; color:#555; }
.tag { background:#eef1f5; color:#3d4b5c; font-weight:500; } .tag.skewed { background:#fde2e1; color:#a61b1b; }
.tag.switched { background:#fff1d6; color:#8a5a00; } .tag.local { background:#e2f3e5; color:#256b33; }
table.findings td:nth-child(-n+2) { white-space:nowrap; } table.findings td:nth-child(3) { min-width:190px; }
table.findings td:nth-child(4), table.findings td:nth-child(5) { width:38%; }
.evidence, .muted { color:var(--muted); font-size:12px; } .bad { color:#a61b1b; } .ok { color:#256b33; }
.chart { margin:8px 0 18px; border-bottom:1px solid var(--line); } .chart:last-child { border-bottom:0; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:10px; }
""".replace("FONT_FAMILY", FONT)


def render(report: Report) -> str:
    """The whole HTML document of a report."""
    attempts = len(report.attempts)

    def labels(stage: Stage) -> str:
        return stage.label(attempts)

    if report.stages:
        charts = "".join(f'<div class="chart">{figure_html(key, FIGURES[key](report, labels))}</div>' for key in CHARTS)
    else:
        charts = "<p>No stage events recorded for this application yet.</p>"
    sections = [
        ("summary", "Summary", summary_html(report)),
        ("findings", f"Findings ({len(report.findings)})", findings_html(report)),
        ("stages", "Stages", charts + (stages_html(report, labels) if report.stages else "")),
        ("aqe", "AQE decisions", aqe_html(report)),
        ("sql", f"SQL executions ({len(report.sql)})", sql_html(report)),
    ]
    plans = report.plans
    for key, title, shown, charts_of in (
        ("plans", "Plans: estimates and codegen", bool(plans.nodes), report_plans.PLAN_CHARTS),
        (
            "streaming",
            f"Streaming queries ({len(plans.queries())})",
            bool(plans.batches),
            report_plans.STREAMING_CHARTS,
        ),
    ):
        if shown:
            figures = (report_plans.FIGURES[k](plans, t, _note, _layout) for k in charts_of)
            sections.append(
                (
                    key,
                    title,
                    "".join(
                        f'<div class="chart">{figure_html(k, f)}</div>' for k, f in zip(charts_of, figures, strict=True)
                    ),
                )
            )
    nav = "".join(f'<a href="#{key}">{h(title.split(" (")[0])}</a>' for key, title, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{h(title)}</h2>{content}</section>' for key, title, content in sections)
    title = f"sparktap report: {report.app_name or report.app_id} ({report.app_id})"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="sparktap {h(__version__)}">
<title>{h(title)}</title>
<style>{CSS}</style>
<script type="text/javascript">window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<header><h1>{h(report.app_name or report.app_id)}</h1>
<div class="sub">{h(report.app_id)} · cluster {h(report.cluster or "–")} · {h(fmt_time(report.start_ms))}</div></header>
<nav>{nav}</nav>
<main>{body}</main>
<footer>sparktap {h(__version__)} · generated {h(fmt_time(report.generated_at_ms))} from {h(report.source)}
· the findings use the detection thresholds in effect</footer>
</body>
</html>
"""
