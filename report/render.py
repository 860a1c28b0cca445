"""The HTML of ``sparktap report``: plotly figures and escaped tables in one file that works offline.

plotly.js is embedded once, inline, in ``<head>`` (what ``include_plotlyjs="inline"`` writes); every figure is a
``<div>`` plus a ``Plotly.newPlot`` call. The document links and loads nothing outside itself: no CDN, no fonts,
no plotly.com logo link (``displaylogo: false``). Every string that comes from the data (application, stage and
SQL descriptions, findings) is HTML-escaped, in the tables and in the figures alike (plotly renders a subset of
HTML in its labels, and decodes entities, so escaped text shows as written).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from sparktap import __version__
from sparktap.detection.findings import Finding
from sparktap.report import plans as plan_charts
from sparktap.report import utilisation
from sparktap.report.charts import CHARTS, FIGURES, FONT, PLOT_CONFIG, SEVERITY_ORDER, layout, note
from sparktap.report.model import Report, Stage
from sparktap.report.tables import section_html as tables_section
from sparktap.report.text import fmt_bytes, fmt_ms, fmt_time, h, t

TABLES_KEY = "tables"


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
    """An evidence number in its unit: bytes, milliseconds ('120 ms', '2.5 s'), shares (0-1) as a percentage,
    rates per second; else the plain number."""
    if name.endswith("_bytes"):
        return fmt_bytes(value)
    if name.endswith("_ms"):
        return fmt_ms(value)
    if name.endswith("_share") or name.startswith("share_"):
        return f"{100 * value:.0f} %"
    if name.endswith("_per_s"):
        return f"{value:,.0f}/s" if abs(value) >= 1000 else f"{value:.4g}/s"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _named(title: str, call_site: str) -> str:
    """A description with the call site under it (both escaped); the call site alone when there is none."""
    if title and title != call_site:
        return f'{h(title)}<div class="muted">{h(call_site)}</div>' if call_site else h(title)
    return h(call_site)


def attempts_text(attempts: Sequence[str]) -> str:
    """The application attempt(s): Spark gives an attempt id only to cluster-mode applications (YARN, Kubernetes),
    so a client- or local-mode run is its one attempt."""
    if all(not a for a in attempts):
        return "1 (no attempt id: client or local mode)"
    return ", ".join(a or "(none)" for a in attempts)


def findings_html(report: Report) -> str:
    # issue 39: a rule without its inputs is silent, not clean; say which ones could not look, once per application
    blind = "".join(f'<p class="blind">{h(line)}</p>' for line in report.blind)
    if not report.findings:
        return blind + '<p class="ok">No finding: no detection rule fired for this application.</p>'
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
    headers = ["Severity", "Rule", "Where", "Explanation", "Suggested fix"]
    if any(f.session_id or f.team for f in report.findings):  # who ran it (Spark Connect user, team; issue 26)
        ordered = sorted(report.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), f.stage_id or 0, f.rule))
        rows = [[*r[:3], h(_who(f)), *r[3:]] for r, f in zip(rows, ordered, strict=True)]
        headers = [*headers[:3], "Who", *headers[3:]]
    return blind + table(headers, rows, "findings")


def _who(f: Finding) -> str:
    """'bob (team payments)', 'bob' or 'team payments'."""
    team = f"team {f.team}" if f.team else ""
    return f"{f.user} ({team})" if f.user and team else f.user or team


def stages_html(report: Report, labels: Callable[[Stage], str]) -> str:
    rows = [
        [
            h(labels(s)),
            _named(s.description, s.name),
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
    ran_by = any(s.ran_by for s in report.stages)  # a Spark Connect server's stages: who ran each (issue 26)
    if ran_by:
        rows = [[*r[:2], h(s.ran_by), *r[2:]] for r, s in zip(rows, report.stages, strict=True)]
    return table(
        [
            "Stage",
            "Name",
            *(["Ran by"] if ran_by else []),
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
                f'<div class="desc">{h(q.title) or "–"}</div>',
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
        ("Attempt(s)", attempts_text(report.attempts)),
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
.blind { color:#8a5a00; }
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
    if report.tables:
        sections.append((TABLES_KEY, f"Tables ({len(report.tables)})", tables_section(report.tables, table)))
    if report.utilisation is not None:
        sections.append(
            ("utilisation", "Utilisation and memory", utilisation.section_html(report.utilisation, figure_html, layout))
        )
    plans = report.plans
    for key, title, shown, charts_of in (
        ("plans", "Plans: estimates and codegen", bool(plans.nodes), plan_charts.PLAN_CHARTS),
        (
            "streaming",
            f"Streaming queries ({len(plans.queries())})",
            bool(plans.batches),
            plan_charts.STREAMING_CHARTS,
        ),
    ):
        if shown:
            figures = (plan_charts.FIGURES[k](plans, t, note, layout) for k in charts_of)
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
