"""``sparktap report APP_ID``: a self-contained HTML report of one application, from ClickHouse.

The data is a synthetic application built with ``tests/support/sample_app.py`` (a scan, a skewed join with
``task_end`` rows, a spilling remote-heavy stage, AQE switching a join to broadcast and splitting a skewed read, two
SQL executions, one failed) whose names and descriptions carry HTML. The report is written by the real command in a
subprocess, then opened in headless Chromium (Debian's ``chromium``) with every network route dead: the plots must
render from the file alone, and none of the HTML in the data may turn into elements.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from sparktap.detection.names import short
from sparktap.report.charts import CHARTS
from sparktap.report.collect import collect
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.services import unavailable
from tests.support import detection_samples as samples
from tests.support import plan_samples, sample_app
from tests.support.detection import load

pytestmark = pytest.mark.integration

T0 = sample_app.BASE_TIME_MS
GiB, MiB = 2**30, 2**20
APP_ID = "app-20261118094640-0042"
EVIL = "<b id=\"pwned\">x</b></script><script>document.title='pwned'</script> & 'q'"
EXPECTED_FINDINGS = {
    ("data_skew", "critical", 2),
    ("task_time_skew", "critical", 2),
    ("skew_not_fixed", "warning", 2),
    ("remote_heavy_shuffle", "warning", 3),
    ("shuffle_blowup", "warning", 3),
}
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # no route out: whatever the page tried to fetch from the network would fail
    "--proxy-server=http://127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def report_app() -> sample_app.App:
    """Three stages (scan; a skewed join with task_end rows; a spilling, remote-heavy reduce), two executors, AQE
    switching a sort-merge join to broadcast and then splitting a skewed read, two SQL executions (one failed)."""
    app = sample_app.App(APP_ID, app_name=f"nightly {EVIL}", start_ms=T0).start()
    for executor, host in (("1", "10.0.0.8"), ("2", "10.0.0.9")):
        app.emit("executor_added", T0 + 500, executor_id=executor, host=host, total_cores=4)
    app.emit("sql_start", T0 + 1_000, execution_id=1, root_execution_id=1, description=f"INSERT INTO t {EVIL}")
    # job 1 has a description (stages 1 and 2 are named by it); job 2 none (stage 3 is named by its SQL execution)
    app.emit("job_start", T0 + 1_100, job_id=1, stage_ids=[1, 2], sql_execution_id=1, description=f"load {EVIL}")
    app.emit("job_start", T0 + 1_200, job_id=2, stage_ids=[3], sql_execution_id=1, description=None)
    app.aqe(
        1,
        T0 + 2_000,
        node_id=3,
        joins=("BroadcastHashJoin",),
        local=True,
        num_partitions=4,
        partition_data_size_bytes=64 * MiB,
    )
    app.stage(1, T0 + 30_000, tasks=100, duration_ms=25_000, task_ms=2_000, shuffle_read=False, name=f"scan at {EVIL}")
    app.aqe(
        1,
        T0 + 40_000,
        node_id=7,
        skewed=True,
        coalesced=True,
        num_partitions=200,
        partition_data_size_bytes=6 * GiB,
        num_skewed_partitions=1,
        num_skewed_splits=8,
        num_coalesced_partitions=150,
    )
    app.tasks(2, T0 + 110_000, [3_000] * 199 + [60_000], bytes_each=20 * MiB)
    app.stage(
        2,
        T0 + 110_000,
        tasks=200,
        duration_ms=70_000,
        name="join at etl.py:20",
        task_duration_ms=sample_app.skewed(3_000, 60_000, 200),
        run_time_ms=sample_app.skewed(2_700, 58_000, 200),
        shuffle_read_bytes=sample_app.skewed(20 * MiB, 2 * GiB, 200),
        shuffle_read_local_bytes=sample_app.skewed(10 * MiB, 1 * GiB, 200),
        shuffle_read_remote_bytes=sample_app.skewed(10 * MiB, 1 * GiB, 200),
    )
    app.stage(
        3,
        T0 + 160_000,
        tasks=50,
        duration_ms=45_000,
        task_ms=40_000,
        bytes_per_task=64 * MiB,
        name="reduce at etl.py:31",
        job_id=2,
        shuffle_read_local_bytes=sample_app.uniform(2 * MiB, 50),
        shuffle_read_remote_bytes=sample_app.uniform(62 * MiB, 50),
        shuffle_fetch_wait_ms=600_000,
        memory_spill_bytes=sample_app.uniform(512 * MiB, 50),
        disk_spill_bytes=sample_app.uniform(16 * MiB, 50),
    )
    app.emit("sql_end", T0 + 165_000, execution_id=1, duration_ms=164_000)
    app.emit("sql_start", T0 + 166_000, execution_id=2, root_execution_id=2, description="SELECT nope FROM t")
    app.emit("sql_end", T0 + 167_000, execution_id=2, duration_ms=1_000, error=f"AnalysisException {EVIL}")
    app.end(T0 + 170_000)
    return app


# ----------------------------------------------------------------------------------------------- data


def test_collect_reads_every_part_of_the_application(storage: Storage) -> None:
    """On chDB and on the Debian clickhouse-server 18.16: the numbers behind every chart and table."""
    storage.ensure_schema()
    load(storage, [report_app(), samples.balanced()])
    report = collect(storage.query, APP_ID, database=storage.database, version=storage.version())

    assert (report.app_name, report.cluster, report.attempts, report.spark_version) == (
        f"nightly {EVIL}",
        "prod-eu",
        ["1"],
        "4.3.0",
    )
    assert (report.start_ms, report.end_ms, report.duration_ms, report.running, report.executors) == (
        T0,
        T0 + 170_000,
        170_000,
        False,
        2,
    )
    assert report.properties == {"spark.sql.adaptive.enabled": "true"}
    assert [(s.label(), s.status, s.start_ms, s.end_ms, s.num_tasks) for s in report.stages] == [
        ("stage 1", "succeeded", T0 + 5_000, T0 + 30_000, 100),
        ("stage 2", "succeeded", T0 + 40_000, T0 + 110_000, 200),
        ("stage 3", "succeeded", T0 + 115_000, T0 + 160_000, 50),
    ]
    scan, join, reduce = report.stages
    # stage 2 has task_end rows: exact quartiles; the others only their stage aggregates (no p25)
    assert join.durations is not None and scan.durations is not None
    assert (
        join.durations.source,
        join.durations.count,
        join.durations.min,
        join.durations.p25,
        join.durations.p50,
        join.durations.p75,
        join.durations.max,
    ) == ("task_end", 200, 3000, 3000, 3000, 3000, 60_000)
    assert (scan.durations.source, scan.durations.p25, scan.durations.p50, scan.durations.max) == (
        "stage_completed",
        None,
        2000,
        2000,
    )
    assert (join.duration_skew, join.data_skew, join.read_kind) == (20.0, 2 * GiB / (20 * MiB), "shuffle read")
    assert (scan.read_kind, scan.input_bytes, scan.duration_skew) == ("input", 100 * 8 * MiB, 1.0)
    assert (join.shuffle_local_bytes, join.shuffle_remote_bytes) == (199 * 10 * MiB + GiB, 199 * 10 * MiB + GiB)
    assert (reduce.shuffle_local_bytes, reduce.shuffle_remote_bytes) == (50 * 2 * MiB, 50 * 62 * MiB)
    assert (reduce.memory_spill_bytes, reduce.disk_spill_bytes) == (50 * 512 * MiB, 50 * 16 * MiB)

    assert [
        (
            u.execution_id,
            u.previous_join_strategies,
            u.join_strategies,
            [(n.node_id, n.coalesced, n.skewed, n.local) for n in u.shuffle_reads],
        )
        for u in report.aqe_updates
    ] == [
        (1, ["SortMergeJoin"], ["BroadcastHashJoin"], [(3, False, False, True)]),
        (1, ["SortMergeJoin"], ["SortMergeJoin"], [(7, True, True, False)]),
    ]
    assert [
        (
            r.node_id,
            r.local,
            r.skewed,
            r.num_partitions,
            r.num_skewed_partitions,
            r.num_skewed_splits,
            r.num_coalesced_partitions,
        )
        for r in report.aqe_reads
    ] == [(3, True, False, 4, None, None, None), (7, False, True, 200, 1, 8, 150)]
    assert [(q.execution_id, q.description, q.duration_ms, q.error) for q in report.sql] == [
        (1, f"INSERT INTO t {EVIL}", 164_000, None),
        (2, "SELECT nope FROM t", 1_000, f"AnalysisException {EVIL}"),
    ]
    assert {(f.rule, f.severity, f.stage_id) for f in report.findings} == EXPECTED_FINDINGS
    assert {f.app_id for f in report.findings} == {APP_ID}
    # named by the job's description, else the SQL execution's (cut to one short line in a finding)
    assert [s.title for s in report.stages] == [f"load {EVIL}", f"load {EVIL}", f"INSERT INTO t {EVIL}"]
    assert {(f.stage_id, f.description) for f in report.findings} == {
        (2, short(f"load {EVIL}")),
        (3, short(f"INSERT INTO t {EVIL}")),
    }
    (joined,) = {f.where for f in report.findings if f.stage_id == 2}
    assert joined == f'stage 2 (attempt 0) "{short(f"load {EVIL}")}"'


def test_plans_and_streaming_queries_in_the_report(storage: Storage) -> None:
    """On chDB and on clickhouse-server 18.16: the estimates, codegen coverage and micro-batches behind the plan
    and streaming plots, and the plots themselves in the page."""
    from sparktap.report import plans as report_plans
    from sparktap.report.render import render

    storage.ensure_schema()
    load(storage, [plan_samples.plans(), plan_samples.stream_behind()])
    plans = collect(storage.query, "app-plans", database=storage.database, version=storage.version())
    assert [
        (n.node_id, n.operator, n.est_rows, n.est_source, n.actual_rows) for n in plans.plans.nodes if n.estimated
    ] == [
        (4, "Scan parquet spark_catalog.default.orders", 10, "catalog", 2_000_000),
        (5, "Scan parquet spark_catalog.default.customers", 50_000, "catalog", 60_000),
    ]
    assert [(n.node_id, n.codegen_stage, n.codegen_fallback) for n in plans.plans.nodes if n.codegen_fallback] == [
        (0, -1, "too many fields: 301 > spark.sql.codegen.maxFields=100"),
        (2, -1, "too many fields: 301 > spark.sql.codegen.maxFields=100"),
    ]
    assert plans.plans.batches == [] and {f.rule for f in plans.findings} == {"plan_misestimate", "codegen_off"}
    page = render(plans)
    assert re.findall(r'<div id="chart-(\w+)"', page) == [*CHARTS, *report_plans.PLAN_CHARTS]
    assert '<section id="streaming">' not in page

    stream = collect(storage.query, "app-stream-behind", database=storage.database, version=storage.version())
    query = f"orders ({plan_samples.QUERY_IDS['app-stream-behind']})"
    assert list(stream.plans.queries()) == [query]
    assert [
        (
            b.batch_id,
            b.start_ms - stream.plans.batches[0].start_ms,
            b.duration_ms,
            b.input_rate,
            b.processed_rate,
            b.backlog,
            b.state_rows,
        )
        for b in stream.plans.batches
    ] == [(k, 2_000 * k, 2_000, 1_000.0, 500.0, 1_000 + 1_000 * k, 0) for k in range(12)]
    page = render(stream)
    assert re.findall(r'<div id="chart-(\w+)"', page) == list(report_plans.STREAMING_CHARTS)
    assert "Streaming queries (1)" in page and [f.rule for f in stream.findings] == ["streaming_saturated"]


def test_collect_a_running_application(chdb_storage: Storage) -> None:
    """No app_end, a stage without stage_completed: its numbers come from the task_end rows so far."""
    chdb_storage.ensure_schema()
    load(chdb_storage, [samples.running_failures(), samples.balanced()])
    report = collect(chdb_storage.query, "app-running", database=chdb_storage.database, version=chdb_storage.version())
    assert (report.running, report.end_ms, report.last_event_ms) == (True, None, T0)
    (stage,) = report.stages
    assert (stage.label(), stage.status, stage.start_ms, stage.end_ms, stage.num_tasks, stage.tasks_failed) == (
        "stage 3",
        "running",
        T0 - 60_000,
        T0,
        400,
        4,
    )
    assert stage.durations is not None
    assert (stage.durations.source, stage.durations.count, stage.durations.p50) == ("task_end", 30, 1_000)
    assert (stage.shuffle_local_bytes, stage.shuffle_remote_bytes) == (30 * 4 * MiB, 30 * 4 * MiB)
    assert [(f.rule, f.severity, f.running) for f in report.findings] == [("task_failures", "warning", True)]


# ----------------------------------------------------------------------------------------------- the command


def _report(args: Iterable[str], directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKTAP_CLICKHOUSE__URL": f"chdb://{directory}"}
    return subprocess.run(
        [sys.executable, "-m", "sparktap", "report", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed chDB store holding the report application and a balanced one (the command opens it itself)."""
    directory = tmp_path_factory.mktemp("report") / "chdb"
    storage = open_storage(StorageTarget(kind="chdb", path=directory, database="sparktap"))
    try:
        storage.ensure_schema()
        load(storage, [report_app(), samples.balanced()])
    finally:
        storage.close()
    return directory


@pytest.fixture(scope="module")
def report_file(store_dir: Path) -> Path:
    output = store_dir.parent / "out" / "report.html"
    done = _report([APP_ID, "-o", str(output)], store_dir)
    assert done.returncode == 0, done.stderr
    size = output.stat().st_size / 1e6
    assert done.stdout == (
        f"wrote {output} ({size:.1f} MB): app_id={APP_ID}, 3 stage attempt(s), 5 finding(s) "
        "(2 critical, 3 warning, 0 info)\n"
    )
    return output


def test_unknown_app_is_one_line_listing_recent_apps(store_dir: Path) -> None:
    done = _report(["app-nope", "-o", str(store_dir.parent / "nope.html")], store_dir)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f'error: no events of app_id="app-nope" in database="sparktap" '
        f'url="chdb://{store_dir}"; the 10 most recent applications: '
    )
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(T0 / 1000))
    assert f"{APP_ID} (nightly {EVIL}, {started})" in done.stderr
    assert f"app-balanced (balanced-etl, {started})" in done.stderr
    assert "spark.app.id" in done.stderr
    assert not (store_dir.parent / "nope.html").exists()


def test_a_store_held_by_another_process_is_one_line(store_dir: Path) -> None:
    storage = open_storage(StorageTarget(kind="chdb", path=store_dir, database="sparktap"))
    try:
        held = _report([APP_ID, "-o", str(store_dir.parent / "held.html")], store_dir)
    finally:
        storage.close()
    assert held.returncode == 2
    assert held.stderr.count("\n") == 1, held.stderr  # chDB's own lock message is held back
    assert held.stderr.startswith(
        f'error: cannot open chDB store path="{store_dir}": another process holds it (held by pid={os.getpid()})'
    )
    assert "the collector process owns the store" in held.stderr


def test_report_is_self_contained_and_escapes_the_data(report_file: Path) -> None:
    html = report_file.read_text(encoding="utf-8")
    bundle = get_plotlyjs()
    assert html.count(bundle) == 1  # plotly.js inline, once
    page = html.replace(bundle, "")
    assert not re.findall(r"(?i)(?:https?:|ftp:)?//[a-z0-9.-]+\.[a-z]{2,}", page)  # no URL of any host
    # only in-page links: no attribute loads or links anything
    assert not re.findall(r"(?i)<[a-z][^<>]*\s(?:src|href|action|srcset|poster)\s*=\s*(?![\"']?#)", page)
    assert "@import" not in page and "url(" not in page
    assert "<b id=" not in html and "<script>document" not in html and "</b></script>" not in html
    assert "&lt;b id=&quot;pwned&quot;&gt;x&lt;/b&gt;&lt;/script&gt;" in page  # tables: escaped, shown as written
    # the stage charts, plus the utilisation section's core-time chart (the app has executors, no memory metrics)
    assert page.count('class="plotly-graph-div"') == len(CHARTS) + 1
    assert 'id="chart-core-time"' in page and 'id="chart-memory"' not in page


# ----------------------------------------------------------------------------------------------- Chromium


def _chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        unavailable("chromium", "not installed: apt-get install chromium (.ci/system-deps.sh installs it)")
    return path


def _run_chromium(page: Path, profile: Path, *args: str, size: str = "1400,5200") -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable("chromium", f"headless chromium did not run: {exc}")


@dataclass(frozen=True)
class Chart:
    key: str
    rendered: bool
    svgs: int
    title: str
    marks: int  # bars of non-zero size, and boxes, drawn


def _charts(dom: str) -> dict[str, Chart]:
    """Each chart's part of the DOM: from its div to the next chart's div (the charts are siblings)."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="chart-(\w+)"', dom)]
    out = {}
    for i, (start, key) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else dom.find("<table", start)
        part = dom[start:end]
        title = re.search(r'class="gtitle"[^>]*>([^<]*)<', part)
        bars = re.findall(r'<g class="point"><path d="M([\d.]+),([\d.]+)V([\d.]+)H([\d.]+)V', part)
        visible = sum(abs(float(y1) - float(y0)) * abs(float(x1) - float(x0)) > 0 for x0, y0, y1, x1 in bars)
        out[key] = Chart(
            key,
            "js-plotly-plot" in part[: part.find(">")],
            part.count('class="main-svg"'),
            title.group(1) if title else "",
            visible + part.count('<path class="box"'),
        )
    return out


@pytest.fixture(scope="module")
def dom(report_file: Path) -> str:
    """The DOM after plotly ran; the virtual-time budget grows until every chart rendered or a deadline passes."""
    deadline, budget = time.monotonic() + 240, 5_000
    while True:
        done = _run_chromium(
            report_file, report_file.parent / f"profile-{budget}", f"--virtual-time-budget={budget}", "--dump-dom"
        )
        charts = _charts(done.stdout)
        if len(charts) == len(CHARTS) and all(c.rendered and c.svgs for c in charts.values()):
            return done.stdout
        if time.monotonic() > deadline or budget >= 80_000:
            pytest.fail(f"plots did not render in chromium (rc={done.returncode}): {charts}; {done.stderr[-2000:]}")
        budget *= 2


def test_every_plot_renders_in_chromium(dom: str) -> None:
    charts = _charts(dom)
    assert list(charts) == list(CHARTS)
    assert {k: c.title for k, c in charts.items()} == CHARTS
    assert all(c.rendered and c.svgs >= 2 for c in charts.values()), charts
    marks = {k: c.marks for k, c in charts.items()}
    # 3 stage bars; 3 boxes; 2 ratios x 3 stages; local + remote of 2 shuffle-reading stages; memory + disk spill
    assert marks == {"timeline": 3, "durations": 3, "skew": 6, "shuffle": 4, "spill": 2}, marks


def test_data_never_becomes_markup_in_the_browser(dom: str) -> None:
    assert "<title>sparktap report: nightly &lt;b id=" in dom  # the script in the data never ran
    assert 'id="pwned"' not in dom.replace('&lt;b id="pwned"&gt;', "")
    assert "<script>document.title" not in dom
    findings = re.findall(r'<span class="sev (\w+)">', dom)
    assert findings == ["critical", "critical", "warning", "warning", "warning"]


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, unfiltered."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        ftype, cur = line[0], bytearray(line[1:])
        for i in range(stride):
            a = cur[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if ftype == 1:
                cur[i] = (cur[i] + a) & 255
            elif ftype == 2:
                cur[i] = (cur[i] + b) & 255
            elif ftype == 3:
                cur[i] = (cur[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(cur))
        prev = cur
    return width, height, rows


def test_screenshot_is_not_blank(report_file: Path, dom: str) -> None:
    shot = report_file.parent / "report.png"
    # the top of the page: summary, findings, the timeline and the task durations (decoding is pure Python)
    done = _run_chromium(
        report_file,
        report_file.parent / "profile-shot",
        "--virtual-time-budget=20000",
        f"--screenshot={shot}",
        size="1400,2200",
    )
    assert shot.exists(), done.stderr[-2000:]
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1400, 2200)
    channels = len(rows[0]) // width
    sample = [row[x : x + 3] for row in rows[::8] for x in range(0, len(row), channels * 8)]
    colors = set(sample)
    not_background = sum(px not in (b"\xff\xff\xff", b"\xf6\xf8\xfa") for px in sample) / len(sample)
    assert len(colors) > 50 and not_background > 0.05, (len(colors), not_background)


def test_times_in_explanations_read_in_their_unit(storage: Storage) -> None:
    """On chDB and on clickhouse-server 18.16: the findings' durations under a second in milliseconds, so that a
    sub-second median never reads '0 s' ("16× the median task (120 ms)")."""
    from sparktap.detection.rule import secs

    storage.ensure_schema()
    values = (0, 120, 999.6, 1_000, 2_540, 60_000)
    row = storage.query("SELECT " + ", ".join(f"{secs(str(v))} AS t{i}" for i, v in enumerate(values)))[0]
    assert [row[f"t{i}"] for i in range(len(values))] == ["0 ms", "120 ms", "1000 ms", "1 s", "2.5 s", "60 s"]
