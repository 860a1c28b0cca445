"""``sparktap report``'s HTML from hand-made report data: the charts, escaping, self-containment and the command's
one-line errors (no process started, no ClickHouse opened)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs

from sparktap.cli import cli
from sparktap.detection import Finding
from sparktap.errors import ConfigError
from sparktap.report import charts, render, text
from sparktap.report.cli import default_output
from sparktap.report.collect import _properties
from sparktap.report.model import (
    AqeRead,
    AqeUpdate,
    Distribution,
    Report,
    ShuffleReadNode,
    SqlExecution,
    Stage,
)

T0 = 1_795_000_000_000
GiB, MiB = 2**30, 2**20
EVIL = '<b id="x">bold</b><img src=x onerror=alert(1)></script><script>alert(2)</script> & "q"'


def _stage(stage_id: int, start: int, end: int | None, status: str = "succeeded", **kw: Any) -> Stage:
    base: dict[str, Any] = {
        "app_attempt": "1",
        "stage_id": stage_id,
        "stage_attempt": 0,
        "name": f"stage {stage_id} at job.py:1",
        "status": status,
        "job_id": 1,
        "sql_execution_id": 1,
        "start_ms": start,
        "end_ms": end,
        "num_tasks": 10,
        "tasks_failed": 0,
        "durations": Distribution("stage_completed", 10, 1000, None, 2000, 3000, 4000, 5000),
        "read_kind": "shuffle read",
        "read_p50": 10 * MiB,
        "read_max": 40 * MiB,
    }
    return Stage(**{**base, **kw})


def _finding(severity: str, stage_id: int, rule: str = "task_time_skew") -> Finding:
    return Finding(
        cluster="c",
        app_id="app-1",
        app_attempt="1",
        app_name=EVIL,
        rule=rule,
        severity=severity,
        value=20.0,
        threshold=4.0,
        explanation=f"slowest task of {EVIL}",
        suggested_fix=f"fix {EVIL}",
        detected_at_ms=T0,
        stage_id=stage_id,
        stage_attempt=0,
        stage_name=EVIL,
        evidence={"dur_max_ms": 60_000.0},
    )


def _report(**kw: Any) -> Report:
    base: dict[str, Any] = {
        "app_id": "app-1",
        "app_name": EVIL,
        "cluster": "prod",
        "attempts": ["1"],
        "spark_version": "4.3.0",
        "master": "yarn",
        "user": "etl",
        "start_ms": T0,
        "end_ms": T0 + 100_000,
        "last_event_ms": T0 + 100_000,
        "running": False,
        "properties": {"spark.sql.adaptive.enabled": "true", "x": EVIL},
        "executors": 3,
        "stages": [
            _stage(1, T0 + 1_000, T0 + 20_000, name=EVIL, input_bytes=GiB, read_kind="input"),
            _stage(
                2,
                T0 + 20_000,
                T0 + 80_000,
                durations=Distribution("task_end", 200, 900, 2500, 3000, 3500, 9000, 60_000),
                shuffle_local_bytes=3 * GiB,
                shuffle_remote_bytes=GiB,
                memory_spill_bytes=512 * MiB,
            ),
            _stage(3, T0 + 80_000, None, status="failed", durations=None, read_p50=0, read_max=0, disk_spill_bytes=MiB),
        ],
        "sql": [
            SqlExecution(1, f"SELECT {EVIL}", T0 + 500, 90_000, None, True),
            SqlExecution(2, "x", T0 + 95_000, 10, EVIL, True),
            SqlExecution(3, "y", T0 + 99_000, None, None, False),
        ],
        "aqe_updates": [
            AqeUpdate(
                1,
                T0 + 600,
                True,
                ["SortMergeJoin"],
                ["BroadcastHashJoin"],
                [ShuffleReadNode(4, False, False, True, EVIL)],
            )
        ],
        "aqe_reads": [AqeRead(1, 4, T0 + 601, False, True, False, 200, 6 * GiB, 1, 8, None)],
        "findings": [_finding("warning", 1), _finding("critical", 2, "data_skew"), _finding("info", 3)],
        "source": "chdb:///var/lib/sparktap",
        "generated_at_ms": T0 + 200_000,
    }
    return Report(**{**base, **kw})


def _figures(html: str) -> dict[str, Any]:
    """The figure JSON of every ``Plotly.newPlot("chart-…", data, layout, config)`` call."""
    out = {}
    for match in re.finditer(
        r'Plotly\.newPlot\(\s*"chart-(\w+)",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"displaylogo"', html, re.S
    ):
        out[match.group(1)] = {"data": json.loads(match.group(2)), "layout": json.loads(match.group(3))}
    return out


def test_the_page_has_every_chart_and_plotly_js_once() -> None:
    html = render.render(_report())
    assert html.count(get_plotlyjs()) == 1
    page = html.replace(get_plotlyjs(), "")
    assert re.findall(r'<div id="chart-(\w+)"', page) == list(charts.CHARTS)
    figures = _figures(page)
    assert {k: f["layout"]["title"]["text"] for k, f in figures.items()} == charts.CHARTS
    assert [s.group(1) for s in re.finditer(r'<section id="(\w+)">', page)] == [
        "summary",
        "findings",
        "stages",
        "aqe",
        "sql",
    ]
    assert '"displaylogo": false' in page


def test_nothing_outside_the_file_is_referenced() -> None:
    page = render.render(_report()).replace(get_plotlyjs(), "")
    assert not re.findall(r"(?i)(?:https?:|ftp:)?//[a-z0-9.-]+\.[a-z]{2,}", page)
    assert not re.findall(r"(?i)<[a-z][^<>]*\s(?:src|href|action|srcset|poster)\s*=\s*(?![\"']?#)", page)
    assert "@import" not in page and "url(" not in page


def test_strings_from_the_data_are_escaped_everywhere() -> None:
    page = render.render(_report()).replace(get_plotlyjs(), "")
    for raw in ("<b id=", "<img", "<script>alert", "</b>"):
        assert raw not in page, raw
    escaped = "&lt;b id=&quot;x&quot;&gt;bold&lt;/b&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert page.count(escaped) >= 9  # title, header, summary, property, stage, SQL, error, AQE node, findings
    # plotly labels: the stage name in the timeline hover is escaped too (plotly decodes &lt; back for display)
    hover = _figures(page)["timeline"]["data"][1]["customdata"][0][0]  # succeeded: stage 1
    assert hover.startswith('&lt;b id="x"&gt;bold&lt;/b&gt;') and "<" not in hover


def test_chart_numbers() -> None:
    figures = _figures(render.render(_report()))
    timeline = {t["name"]: t for t in figures["timeline"]["data"]}
    assert list(timeline) == ["failed", "succeeded"]
    assert timeline["succeeded"]["y"] == ["stage 1", "stage 2"]
    assert timeline["succeeded"]["base"] == ["2026-11-18 11:06:41.000", "2026-11-18 11:07:00.000"]
    assert timeline["succeeded"]["x"] == [19_000, 60_000]
    assert timeline["failed"]["x"] == [20_000]  # no end yet: drawn to the last event
    assert figures["timeline"]["layout"]["yaxis"]["categoryarray"] == ["stage 1", "stage 2", "stage 3"]

    boxes = {t["name"].split(":")[0]: t for t in figures["durations"]["data"]}
    assert boxes["task_end rows"]["x"] == ["stage 2"]
    assert (boxes["task_end rows"]["q1"], boxes["task_end rows"]["median"], boxes["task_end rows"]["upperfence"]) == (
        [2.5],
        [3.0],
        [60.0],
    )
    assert (boxes["stage aggregates"]["q1"], boxes["stage aggregates"]["median"], boxes["stage aggregates"]["q3"]) == (
        [2.0],
        [2.0],
        [3.0],
    )  # no p25 in the stage aggregates: the box starts at the median
    assert figures["durations"]["layout"]["yaxis"]["type"] == "log"  # 0.9 s .. 60 s
    assert figures["durations"]["layout"]["xaxis"]["categoryarray"] == ["stage 1", "stage 2", "stage 3"]

    task, data = figures["skew"]["data"]
    assert task["y"] == [2.5, 20.0, None] and data["y"] == [4.0, 4.0, None]
    assert figures["skew"]["layout"]["yaxis"]["type"] == "linear"
    assert [s["y0"] for s in figures["skew"]["layout"]["shapes"]] == [4.0, 3.16]

    local, remote = figures["shuffle"]["data"]
    assert (local["y"], remote["y"]) == ([0, 3, 0], [0, 1, 0])  # GiB
    assert figures["shuffle"]["layout"]["yaxis"]["title"]["text"] == "shuffle read (GiB)"
    memory, disk = figures["spill"]["data"]
    assert (memory["y"], disk["y"]) == ([0, 512, 0], [0, 0, 1])  # MiB
    assert figures["spill"]["layout"]["yaxis"]["title"]["text"] == "spilled (MiB)"


def test_tables() -> None:
    page = render.render(_report())
    assert re.findall(r'<span class="sev (\w+)">', page) == ["critical", "warning", "info"]
    assert "SortMergeJoin → BroadcastHashJoin" in page and '<span class="tag switched">switched</span>' in page
    assert "<td>200</td><td>6.0 GiB</td><td>30.7 MiB</td><td>1</td><td>8</td><td>–</td>" in page
    assert re.findall(r'<span class="status (\w+)">', page.split('id="sql"')[1]) == ["succeeded", "failed", "running"]
    assert "<dt>Executors</dt><dd>3</dd>" in page and "1 min 40 s" in page


def test_a_report_without_stages_or_findings() -> None:
    page = render.render(
        _report(stages=[], findings=[], aqe_updates=[], aqe_reads=[], sql=[], running=True, end_ms=None)
    ).replace(get_plotlyjs(), "")
    assert "Plotly.newPlot" not in page
    assert "No stage events recorded for this application yet." in page
    assert "No finding: no detection rule fired for this application." in page
    assert "No AQE plan update recorded" in page and "No SQL execution recorded." in page
    assert "still running (no app_end yet)" in page and "1 min 40 s (running)" in page


def test_empty_charts_say_so() -> None:
    figures = _figures(render.render(_report(stages=[_stage(1, T0, T0 + 1_000, durations=None, read_p50=0)])))
    notes = {
        k: [a["text"] for a in f["layout"].get("annotations", []) if a.get("xref") == "paper" and a.get("x") == 0.5]
        for k, f in figures.items()
    }
    assert notes == {
        "timeline": [],
        "durations": ["no task durations recorded"],
        "skew": ["no stage has a median to compare with"],
        "shuffle": ["no stage read shuffle data"],
        "spill": ["no stage spilled to memory or disk"],
    }


def test_helpers() -> None:
    assert [text.fmt_bytes(n) for n in (0, 1023, 1536, 5 * MiB, 2.5 * GiB, None)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 MiB",
        "2.5 GiB",
        "–",
    ]
    assert [text.fmt_ms(n) for n in (12, 1_500, 61_000, 7_260_000, None)] == [
        "12 ms",
        "1.5 s",
        "1 min 1 s",
        "2 h 1 min",
        "–",
    ]
    assert text.fmt_time(T0) == "2026-11-18 11:06:40 UTC"
    assert _properties({"a": "1"}) == {"a": "1"} and _properties('{"a": "1"}') == {"a": "1"}
    assert _properties("") == {} and _properties("not json") == {}
    assert default_output("app-1/../x y") == Path("sparktap-report-app-1_.._x_y.html")
    stage = _stage(4, T0, T0, stage_attempt=1, app_attempt="2")
    assert (stage.label(), stage.label(attempts=2)) == ("stage 4.1", "stage 4.1 (a2)")


def test_command_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", f"chdb://{tmp_path / 'missing'}")
    result = CliRunner().invoke(cli, ["report", "app-1"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == (
        f'no chDB store at path="{tmp_path / "missing"}": point --clickhouse-url or '
        "SPARKTAP_CLICKHOUSE__URL at the collector's chdb:///dir"
    )
    assert not (tmp_path / "missing").exists()
    result = CliRunner().invoke(cli, ["report", "app-1", "--clickhouse-url", "http://x"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception).startswith("invalid --clickhouse-url: unsupported storage URL scheme 'http'")


def test_stages_and_sql_executions_are_named_by_their_description() -> None:
    """A stage is named by its job (or SQL) description with the call site under it; an SQL execution without a
    description of its own by its job's; the timeline's hover names the stage the same way."""
    report = _report(
        stages=[
            _stage(1, T0, T0 + 1_000, name="collect at tpch.py:97", description="TPC-H q05"),
            _stage(2, T0 + 1_000, T0 + 2_000, name="count at job.py:3"),
        ],
        sql=[
            SqlExecution(1, "", T0, 10, None, True, job_description="TPC-H q07"),
            SqlExecution(2, "SELECT 1", T0, 10, None, True, job_description="TPC-H q08"),
        ],
    )
    page = render.render(report).replace(get_plotlyjs(), "")
    stages = page.split('id="stages"')[1].split("</section>")[0]
    assert '<td>TPC-H q05<div class="muted">collect at tpch.py:97</div></td>' in stages
    assert "<td>count at job.py:3</td>" in stages
    sql = page.split('id="sql"')[1].split("</section>")[0]
    assert re.findall(r'<div class="desc">(.*?)</div>', sql) == ["TPC-H q07", "SELECT 1"]
    hover = _figures(page)["timeline"]["data"][0]["customdata"]
    assert [row[0] for row in hover] == ["TPC-H q05", "count at job.py:3"]
    assert (report.stages[0].title, report.stages[1].title) == ("TPC-H q05", "count at job.py:3")


def test_the_attempt_is_shown() -> None:
    """Spark gives no attempt id in client or local mode: the report says so instead of a dash."""
    assert "<dt>Attempt(s)</dt><dd>1 (no attempt id: client or local mode)</dd>" in render.render(
        _report(attempts=[""])
    )
    assert "<dt>Attempt(s)</dt><dd>1, 2</dd>" in render.render(_report(attempts=["1", "2"]))
    assert render.attempts_text(["", "2"]) == "(none), 2"


def test_evidence_reads_in_its_units() -> None:
    finding = dataclasses.replace(
        _finding("warning", 1),
        evidence={
            "median_task_ms": 120.0,
            "max_task_ms": 1_920.0,
            "max_task_bytes": 3 * MiB,
            "busy_share": 0.5,
            "input_rows_per_s": 12_345.0,
            "ratio": 16.0,
        },
    )
    page = render.render(_report(findings=[finding]))
    (evidence,) = re.findall(r'<div class="evidence">(median_task_ms.*?)</div>', page)
    assert evidence == (
        "median_task_ms 120 ms, max_task_ms 1.9 s, max_task_bytes 3.0 MiB, busy_share 50 %, "
        "input_rows_per_s 12,345/s, ratio 16"
    )


def test_findings_are_named_by_their_description() -> None:
    named = dataclasses.replace(_finding("warning", 1), stage_name="collect at tpch.py:97", description="TPC-H q05")
    page = render.render(_report(findings=[named]))
    assert "<td>stage 1 (attempt 0) &quot;TPC-H q05&quot;</td>" in page
