"""End to end: `sparktap demo` runs real PySpark jobs with the listener → tansu → collector → chDB; each detection
rule fires on its job with the expected severity and evidence, nothing fires on the healthy control, every Grafana
panel and alert query runs over that real data, and the demo leaves its reports and Grafana bundle."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sparktap.dashboards.alerts import LABEL_COLUMNS, alert_query
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panel_queries
from sparktap.demo.jobs import DEMO_THRESHOLDS, JOBS
from sparktap.detection import RULE_IDS, Detector, Finding
from sparktap.detection.macros import expand, interpolate
from sparktap.store import Storage, open_storage
from sparktap.store.target import parse_storage_url
from tests.support.dashboard_columns import COLUMNS

pytestmark = pytest.mark.e2e

WINDOW = (0, 4_102_444_800_000)  # the whole store: 1970 .. 2100
EXPECTED = {
    "healthy": set(),
    "skewed-join": {("data_skew", "critical"), ("skew_not_fixed", "warning")},
    "tiny-partitions": {("small_partitions", "warning")},
    "shuffle-blowup": {("shuffle_blowup", "warning")},
    "small-files": {("small_files", "warning")},
}


@dataclass
class Demo:
    output: Path
    stdout: str
    stderr: str
    apps: dict[str, str]
    storage: Storage
    passes: dict[tuple[tuple[str, object], ...], list[Finding]] = field(default_factory=dict)

    def all_findings(self, **kwargs: object) -> list[Finding]:
        """Every finding of the demo's store with the demo's thresholds: one detection pass per set of arguments
        (the store no longer changes once the demo has run; a pass over it is seconds on shared cores)."""
        key = tuple(sorted(kwargs.items()))
        if key not in self.passes:
            detector = Detector(
                self.storage.query,
                database=self.storage.database,
                version=self.storage.version(),
                thresholds=DEMO_THRESHOLDS,
                **kwargs,
            )  # type: ignore[arg-type]
            self.passes[key] = detector.findings(*WINDOW)
        return self.passes[key]

    def findings(self, job: str, **kwargs: object) -> list[Finding]:
        return [f for f in self.all_findings(**kwargs) if f.app_id == self.apps[job]]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, kafka_broker: object) -> Iterator[Demo]:
    # kafka_broker: only so that a machine without the broker binary reports it like every other service test
    output = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "sparktap", "demo", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    apps = dict(re.findall(r"report:\s+\S+\s+\((\S+), (\S+)\)", proc.stdout))
    demo = Demo(output, proc.stdout, proc.stderr, apps, open_storage(parse_storage_url(f"chdb://{output / 'chdb'}")))
    try:
        yield demo
    finally:
        demo.storage.close()  # the one open now: a test may have reopened it


def test_demo_ran_every_job_and_says_where_things_are(demo: Demo) -> None:
    assert sorted(demo.apps) == sorted(j.name for j in JOBS)
    assert len(set(demo.apps.values())) == len(JOBS)
    for job in demo.apps:
        report = (demo.output / f"report-{job}.html").read_text()
        # timeline, durations, skew, shuffle locality, spill; plan estimates vs actual rows, codegen coverage;
        # executor core-time held vs used, executor memory peaks vs requested
        assert report.count("Plotly.newPlot(") == 9, job
        assert "Utilisation and memory" in report and "core-time held" in report, job
    assert (demo.output / "grafana").is_dir()
    exported = sorted(
        p.relative_to(demo.output / "grafana").as_posix() for p in (demo.output / "grafana").rglob("*") if p.is_file()
    )
    assert any(p.endswith(".json") and "dashboards" in p for p in exported), exported
    assert any("alerting" in p for p in exported), exported
    assert any("datasources" in p for p in exported), exported
    assert re.search(r"^healthy\s+-\s+-\s+-\s+nothing to report", demo.stdout, re.M)


def test_a_clean_run_prints_no_error_line(demo: Demo) -> None:
    """Nothing the demo prints, on stdout or stderr, reads as an error: no librdkafka client outlives the broker
    (its "Connection refused" every second until exit), no error from Spark, the collector or the relay."""
    printed = demo.stdout.splitlines() + demo.stderr.splitlines()
    assert [line for line in printed if re.search(r"error|connection refused", line, re.IGNORECASE)] == []
    assert [line for line in demo.stderr.splitlines() if "rdkafka" in line] == []


@pytest.mark.parametrize("job", sorted(EXPECTED))
def test_each_rule_fires_on_its_job_and_nothing_on_the_control(demo: Demo, job: str) -> None:
    found = {(f.rule, f.severity) for f in demo.findings(job, min_severity="warning")}
    assert found == EXPECTED[job]
    for rule, severity in EXPECTED[job]:
        assert re.search(rf"^{re.escape(job)}\s+{rule}\s+{severity}\s", demo.stdout, re.M), (job, rule)


def test_evidence_matches_the_stage_numbers(demo: Demo) -> None:
    db = demo.storage.database
    (skew,) = [f for f in demo.findings("skewed-join") if f.rule == "data_skew"]
    (stage,) = demo.storage.query(
        f"SELECT shuffle_read_bytes_max AS mx, shuffle_read_bytes_p50 AS p50, shuffle_read_records_max AS rmx, "
        f"shuffle_read_records_p50 AS rp50 FROM {db}.stage_completed_dedup "
        f"WHERE app_id = '{demo.apps['skewed-join']}' AND stage_id = {skew.stage_id}"
    )
    # the measure that crossed higher: rows (over their floor) or bytes
    by_bytes, by_rows = stage["mx"] / stage["p50"], stage["rmx"] / max(stage["rp50"], 1)
    rows_win = stage["rmx"] >= DEMO_THRESHOLDS.data_skew.min_max_rows and by_rows > by_bytes
    assert skew.evidence["by_rows"] == rows_win
    assert skew.value == pytest.approx(by_rows if rows_win else by_bytes, rel=1e-6)
    assert skew.value >= 10
    (blowup,) = demo.findings("shuffle-blowup")
    (stage,) = demo.storage.query(
        f"SELECT shuffle_write_bytes_sum AS w, input_bytes_sum + shuffle_read_bytes_sum AS i "
        f"FROM {db}.stage_completed_dedup WHERE app_id = '{demo.apps['shuffle-blowup']}' "
        f"AND stage_id = {blowup.stage_id}"
    )
    assert blowup.value == pytest.approx(stage["w"] / stage["i"], rel=1e-6)
    assert 10 <= blowup.value < 100
    (tiny,) = demo.findings("tiny-partitions")
    assert tiny.explanation.startswith("5200 tasks with a median of ")
    (files,) = demo.findings("small-files")
    assert "150 files" in files.explanation


def test_no_event_was_lost_between_the_listener_and_clickhouse(demo: Demo) -> None:
    db = demo.storage.database
    gaps = demo.storage.query(f"SELECT app_id, received, max_seq, missing FROM {db}.seq_gaps")
    assert sorted(g["app_id"] for g in gaps) == sorted(demo.apps.values())
    assert all(g["missing"] == 0 and g["received"] == g["max_seq"] for g in gaps), gaps
    total = sum(int(g["received"]) for g in gaps)  # type: ignore[call-overload]
    assert f"{total} events from {len(JOBS)} applications" in demo.stdout
    drops = demo.storage.query(f"SELECT count() AS n FROM {db}.listener_health_dedup WHERE events_dropped > 0")
    assert drops == [{"n": 0}]


def _run(storage: Storage, sql: str, app: str) -> tuple[list[str], list[dict[str, object]]]:
    variables = {"cluster": ["demo"], "app": app, "user": ["(none)", "root"], "team": ["(none)"], "table": ""}
    final = expand(interpolate(sql, variables), *WINDOW, interval_ms=60_000)
    rows = storage.query(final)
    if rows:
        return list(rows[0]), rows
    return [str(r["name"]) for r in storage.query(f"DESCRIBE TABLE ({final})")], rows


def test_every_panel_query_runs_on_the_real_data(demo: Demo) -> None:
    cfg = GrafanaConfig(database=demo.storage.database)
    ran = 0
    for board in all_dashboards(cfg):
        for title, sql in panel_queries(board):
            columns, _ = _run(demo.storage, sql, demo.apps["skewed-join"])
            assert set(COLUMNS.get(sql.strip(), ())) <= set(columns), (board["uid"], title, columns)
            ran += 1
    assert ran >= 20


@pytest.mark.parametrize("rule", RULE_IDS)
def test_every_alert_query_runs_on_the_real_data(demo: Demo, rule: str) -> None:
    cfg = GrafanaConfig(database=demo.storage.database, thresholds=DEMO_THRESHOLDS)
    columns, rows = _run(demo.storage, alert_query(rule, cfg), demo.apps["skewed-join"])
    assert columns == [*LABEL_COLUMNS, "value"]
    assert len(rows) == sum(1 for job in EXPECTED for fired, _ in EXPECTED[job] if fired == rule)
    assert {str(r["app_id"]) for r in rows} <= set(demo.apps.values())


def _findings_command(demo: Demo, *args: str) -> subprocess.CompletedProcess[str]:
    """``sparktap findings`` over the demo's store, with the demo's thresholds (through the environment)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")}
    env["SPARKTAP_CLICKHOUSE__URL"] = f"chdb://{demo.output / 'chdb'}"
    defaults = type(DEMO_THRESHOLDS)()
    for group, values in DEMO_THRESHOLDS.model_dump().items():
        for name, value in values.items():
            if value != getattr(getattr(defaults, group), name):
                env[f"SPARKTAP_ALERTS__THRESHOLDS__{group.upper()}__{name.upper()}"] = str(value)
    return subprocess.run(
        [sys.executable, "-m", "sparktap", "findings", "--since", "3650d", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_findings_command_lists_what_detection_returns_and_gates_on_severity(demo: Demo) -> None:
    """``sparktap findings`` opens the store itself: this module's storage lets go of it meanwhile (chDB: one
    process per directory)."""
    import json

    from sparktap.detection.findings import finding_row

    expected = demo.all_findings()
    demo.storage.close()
    try:
        as_json = _findings_command(demo, "--format", "json")
        table = _findings_command(demo)
        warning = _findings_command(demo, "--min-severity", "warning", "--fail-on", "warning", "--format", "json")
        healthy = _findings_command(demo, "--app", demo.apps["healthy"], "--fail-on", "info")
        skewed = _findings_command(demo, "--app", demo.apps["skewed-join"], "--fail-on", "critical", "--format", "json")
    finally:
        demo.storage = open_storage(parse_storage_url(f"chdb://{demo.output / 'chdb'}"))
    assert as_json.returncode == 0, as_json.stderr
    listed = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [f["key"] for f in listed] == [f.key for f in expected] and len(listed) >= 5
    # small_files' table trend reads the 30 days up to the pass's range end: the command's range ends now, this
    # module's pass at WINDOW's end, so only the command's explanation may carry "; N files a day over …"
    assert [
        (f["rule"], f["severity"], re.sub(r"; \d+ files a day over .*$", "", f["explanation"])) for f in listed
    ] == [(f.rule, f.severity, f.explanation) for f in expected]
    # the table is the demo's: one line per finding, the application first
    assert table.returncode == 0 and len(table.stdout.splitlines()) == 2 + len(expected)
    assert table.stdout.splitlines()[0].split() == ["application", "rule", "severity", "where", "finding"]
    for f in expected:
        where = finding_row(f)[2]
        assert re.search(
            rf"\({re.escape(f.app_id)}\)\s+{f.rule}\s+{f.severity}\s+{re.escape(where)}\s+"
            rf"{re.escape(f.explanation)}(; \d+ files a day over .*)?$",  # the trend: as above
            table.stdout,
            re.M,
        ), f.key
    # exit status 3 when a finding at or above --fail-on exists
    assert warning.returncode == 3 and {json.loads(line)["severity"] for line in warning.stdout.splitlines()} == {
        "warning",
        "critical",
    }
    assert healthy.returncode == 0 and healthy.stdout == "" and "no findings at or above info" in healthy.stderr
    assert skewed.returncode == 3 and ("data_skew", "critical") in {
        (json.loads(line)["rule"], json.loads(line)["severity"]) for line in skewed.stdout.splitlines()
    }
