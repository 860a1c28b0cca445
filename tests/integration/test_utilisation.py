"""Utilisation and cost SQL (issue 25) on real ClickHouse (chDB and the Debian clickhouse-server 18.16) over
applications whose executor lifetimes and task run times give hand-computable figures (``cost_samples.py``), and
``sparktap cost`` as a process over the server: its figures equal the hand computation to the cent."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection.cost import cost_rows, money
from sparktap.detection.macros import expand
from sparktap.detection.prices import CostSettings
from sparktap.detection.sql import SqlContext
from sparktap.detection.utilisation import USAGE_COLUMNS, Level, usage_query
from sparktap.store import Storage
from tests.fixtures.clickhouse import ClickHouseServer
from tests.support import cost_samples
from tests.support.detection import WINDOW, load

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PRICES = CostSettings(core_hour=0.05, gib_hour=0.01, clusters={"prod-eu": {"core_hour": 0.06, "gib_hour": 0.012}})
S = 1_000


def usage(storage: Storage, level: Level) -> dict[tuple[str, int], dict[str, Any]]:
    ctx = SqlContext(storage.database, storage.version())
    rows = storage.query(expand(usage_query(ctx, level, PRICES), *WINDOW))
    assert all(list(r) == list(USAGE_COLUMNS) for r in rows)
    return {(str(r["app_id"]), int(r["id"])): r for r in rows}


def test_allocated_busy_and_idle_core_time_per_level(storage: Storage) -> None:
    storage.ensure_schema()
    load(storage, cost_samples.costed_apps())

    apps = usage(storage, "app")
    assert {k: (r["allocated_core_ms"], r["busy_core_ms"], r["idle_core_ms"]) for k, r in apps.items()} == {
        ("app-cost-a", -1): (720 * S, 36 * S, 684 * S),  # 4 cores x 60 s + 4 x 120 s (open until app_end)
        ("app-cost-b", -1): (120 * S, 9 * S, 111 * S),
        ("app-cost-c", -1): (57_600 * S, 3_600 * S, 54_000 * S),  # 2 x 8 cores x 3,600 s
    }
    assert {k: r["allocated_gib_ms"] for k, r in apps.items()} == {
        ("app-cost-a", -1): 810 * S,  # 4.5 GiB x (60 s + 120 s)
        ("app-cost-b", -1): 142.5 * S,  # 2.375 GiB x 60 s
        ("app-cost-c", -1): 64_800 * S,  # 2 x 9 GiB x 3,600 s
    }
    a = apps[("app-cost-a", -1)]
    assert (a["user"], a["team"], a["cost_centre"], a["app_name"], a["executors"], a["idle_share"], a["running"]) == (
        "alice",
        "data",
        "cc-data",
        "daily-report",
        2,
        0.95,
        0,
    )
    # a: 0.2 core-h x 0.06 + 0.225 GiB-h x 0.012 (prod-eu) = 0.0147; c: 16 x 0.05 + 18 x 0.01 (default) = 0.98
    assert math.isclose(float(a["cost"]), 0.0147) and math.isclose(float(apps[("app-cost-c", -1)]["cost"]), 0.98)

    stages = usage(storage, "stage")
    # stage 1 of app-cost-a ran +20 s .. +60 s with both executors (8 cores): 320 core-s held, 36 used
    assert (stages[("app-cost-a", 1)]["allocated_core_ms"], stages[("app-cost-a", 1)]["busy_core_ms"]) == (
        320 * S,
        36 * S,
    )
    # app-cost-b's stage ran +20 s .. +50 s on its 2-core executor
    assert stages[("app-cost-b", 1)]["allocated_core_ms"] == 60 * S
    jobs, sqls = usage(storage, "job"), usage(storage, "sql")
    assert set(jobs) == {("app-cost-a", 1)} and set(sqls) == {("app-cost-a", 1)}
    # job 1: +15 s .. +65 s, 8 cores → 400 core-s; SQL execution 1: +12 s .. +68 s, 8 cores → 448 core-s
    assert (jobs[("app-cost-a", 1)]["allocated_core_ms"], jobs[("app-cost-a", 1)]["busy_core_ms"]) == (400 * S, 36 * S)
    assert (sqls[("app-cost-a", 1)]["allocated_core_ms"], sqls[("app-cost-a", 1)]["name"]) == (448 * S, "daily report")

    by_team = cost_rows(
        storage.query, "team", *WINDOW, prices=PRICES, database=storage.database, version=storage.version()
    )
    # data: a 0.0147 + b (1/30 core-h x 0.06 + 0.0395833 GiB-h x 0.012 = 0.002475) = 0.017175
    assert [(r.key, r.applications, round(r.core_hours, 6), round(r.gib_hours, 6), money(r.cost)) for r in by_team] == [
        ("ml", 1, 16.0, 18.0, "0.98"),
        ("data", 2, round(840 / 3600, 6), round(952.5 / 3600, 6), "0.02"),
    ]


def test_cost_cli_by_app_as_json_and_table(clickhouse_server: ClickHouseServer, server_storage: Storage) -> None:
    server_storage.ensure_schema()
    load(server_storage, cost_samples.costed_apps())
    env = {
        **os.environ,
        "SPARKTAP_COST__CORE_HOUR": "0.05",
        "SPARKTAP_COST__GIB_HOUR": "0.01",
        "SPARKTAP_COST__CLUSTERS": json.dumps({"prod-eu": {"core_hour": 60, "gib_hour": 1.2}}),
        "SPARKTAP_COST__CURRENCY": "EUR",
    }
    url = clickhouse_server.url(server_storage.database)

    def cost(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sparktap", "cost", "--since", "7d", "--storage-url", url, *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # By hand from the stored lifetimes, prod-eu at 60 per core-h and 1.2 per GiB-h, prod-us at the defaults:
    # daily-report 0.2 core-h x 60 + 0.225 GiB-h x 1.2 = 12.27; hourly-load 1/30 x 60 + 0.0395833 x 1.2 = 2.0475;
    # train-model 16 x 0.05 + 18 x 0.01 = 0.98. Team data = 14.3175, ml = 0.98; total 15.2975.
    done = cost("--by", "team", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert [(r["key"], r["applications"], r["cost_rounded"]) for r in out["rows"]] == [
        ("data", 2, "14.32"),
        ("ml", 1, "0.98"),
    ]
    assert math.isclose(out["rows"][0]["cost"], 14.3175) and math.isclose(out["rows"][1]["cost"], 0.98)
    assert (out["by"], out["since"], out["currency"], out["total_cost"]) == ("team", "7d", "EUR", "15.30")
    apps = json.loads(cost("--by", "app", "--format", "json").stdout)
    assert [(r["key"], r["cost_rounded"]) for r in apps["rows"]] == [
        ("daily-report", "12.27"),
        ("hourly-load", "2.05"),
        ("train-model", "0.98"),
    ]
    table = cost("--by", "user")
    assert table.returncode == 0, table.stderr[-2000:]
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["user", "apps", "core-h", "busy", "core-h", "idle", "GiB-h", "cost", "(EUR)"]
    assert lines[2].split() == ["alice", "2", "0.23", "0.01", "95%", "0.26", "14.32"]
    assert lines[3].split() == ["bob", "1", "16.00", "1.00", "94%", "18.00", "0.98"]
    assert lines[4].split() == ["total", "3", "15.30"]
    us = cost("--by", "user", "--cluster", "prod-us", "--format", "json")
    assert us.returncode == 0, us.stderr[-2000:]
    assert [(r["key"], r["applications"], r["cost_rounded"]) for r in json.loads(us.stdout)["rows"]] == [
        ("bob", 1, "0.98")
    ]
    # --json: the old spelling, hidden from --help, still gives the same document with a deprecation line
    old = cost("--by", "team", "--json")
    assert old.returncode == 0 and json.loads(old.stdout) == out
    assert old.stderr.splitlines() == [
        "warning: --json is deprecated and will be removed; use --format json",
        # no team mapping: the tags decide (issue 41); prod-us has usage and no price of its own
        "warning: no team mapping (teams: in the routing file, SPARKTAP_COST__TEAMS): user-set team tags decide "
        "routing, silences and cost; see docs/security.md",
        'warning: cluster="prod-us" used 16.00 core-h but it has no price of its own in SPARKTAP_COST__CLUSTERS: the '
        "default 0.05 EUR per core-hour was used; set its price in SPARKTAP_COST__CLUSTERS "
        '(\'{"<cluster>": {"core_hour": …}}\')',
    ]
    helped = cost("--help")
    assert "--format [table|json]" in helped.stdout and "--json" not in helped.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "sparktap", "cost", "--since", "7x"],
        env={**env, "SPARKTAP_COST__GIB_HOUR": "-1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert wrong.stderr.strip().splitlines()[-1].startswith("Error: Invalid value for --since: --since '7x'")


def day_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat()


BEFORE, ON = day_of(cost_samples.MIDNIGHT - 1), day_of(cost_samples.MIDNIGHT)


def test_cost_by_day_splits_an_application_across_midnight(storage: Storage) -> None:
    """By day, app-cost-night (23:50 to 00:09 UTC) counts on both days with what its executors held on each (the
    busy core-time in proportion); the other three applications run on the second day only."""
    storage.ensure_schema()
    load(storage, [*cost_samples.costed_apps(), cost_samples.midnight_app()])
    window = (cost_samples.MIDNIGHT - 3_600_000, cost_samples.T0 + 2 * 3_600_000)
    rows = cost_rows(storage.query, "day", *window, prices=PRICES, database=storage.database, version=storage.version())
    # the day before: 30 core-min (0.5 core-h x 0.06) + 33 GiB-min (0.55 GiB-h x 0.012) = 0.0366, 3 of the 6 busy
    # core-min; on the day: night 0.5 x 0.06 + 0.525 x 0.012 = 0.0363, with a 0.0147, b 0.002475, c 0.98 = 1.033475
    assert [(r.key, r.applications, round(r.core_hours, 6), round(r.busy_core_hours, 6), round(r.gib_hours, 6))
            for r in rows] == [
        (BEFORE, 1, 0.5, 0.05, 0.55),
        (ON, 4, round(0.5 + 840 / 3600 + 16, 6), round(0.05 + 45 / 3600 + 1, 6), round(0.525 + 952.5 / 3600 + 18, 6)),
    ]  # fmt: skip
    assert math.isclose(rows[0].cost, 0.0366) and math.isclose(rows[1].cost, 1.033475)
    db, version = storage.database, storage.version()
    per_team = cost_rows(storage.query, "team", *window, prices=PRICES, database=db, version=version, per_day=True)
    assert [(r.day, r.key, money(r.cost)) for r in per_team] == [
        (BEFORE, "night", "0.04"),
        (ON, "ml", "0.98"),
        (ON, "night", "0.04"),
        (ON, "data", "0.02"),
    ]
    assert math.isclose(sum(r.cost for r in per_team), 0.0366 + 1.033475)


def test_cost_cli_by_day(clickhouse_server: ClickHouseServer, server_storage: Storage) -> None:
    server_storage.ensure_schema()
    load(server_storage, [*cost_samples.costed_apps(), cost_samples.midnight_app()])
    env = {**os.environ, "SPARKTAP_COST__CORE_HOUR": "0.05", "SPARKTAP_COST__GIB_HOUR": "0.01",
           "SPARKTAP_COST__CLUSTERS": json.dumps({"prod-eu": {"core_hour": 60, "gib_hour": 1.2}})}  # fmt: skip
    url = clickhouse_server.url(server_storage.database)

    def cost(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "sparktap", "cost", "--since", "7d", "--storage-url", url, *args],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    # prod-eu at 60 per core-h and 1.2 per GiB-h: night 0.5 x 60 + 0.55 x 1.2 = 30.66 the day before, 30 + 0.525 x 1.2
    # = 30.63 on the day, with daily-report 12.27, hourly-load 2.0475 and train-model 0.98 (prod-us) = 45.9275
    out = json.loads(cost("--by", "day", "--format", "json"))
    assert [(r["key"], r["applications"], r["cost_rounded"]) for r in out["rows"]] == [
        (BEFORE, 1, "30.66"),
        (ON, 4, "45.93"),
    ]
    assert (out["by"], out["per_day"], out["total_cost"]) == ("day", False, "76.59")
    table = cost("--by", "team", "--per-day").splitlines()
    assert table[0].split() == ["day", "team", "apps", "core-h", "busy", "core-h", "idle", "GiB-h", "cost", "(USD)"]
    assert [line.split() for line in table[2:]] == [
        [BEFORE, "night", "1", "0.50", "0.05", "90%", "0.55", "30.66"],
        [ON, "night", "1", "0.50", "0.05", "90%", "0.53", "30.63"],
        [ON, "data", "2", "0.23", "0.01", "95%", "0.26", "14.32"],
        [ON, "ml", "1", "16.00", "1.00", "94%", "18.00", "0.98"],
        ["total", "5", "76.59"],
    ]


def test_report_has_the_utilisation_and_memory_section(chdb_storage: Storage) -> None:
    from sparktap.report.collect import collect
    from sparktap.report.render import render

    storage = chdb_storage
    storage.ensure_schema()
    apps = cost_samples.costed_apps()
    a = apps[0]
    cost_samples.metrics(a, "1", cost_samples.T0 + 69 * S, 1_500 * 2**20, 100 * 2**20)
    cost_samples.metrics(a, "2", cost_samples.T0 + 129 * S, 700 * 2**20, 50 * 2**20)
    load(storage, apps)
    report = collect(storage.query, "app-cost-a", database=storage.database, version=storage.version())
    use = report.utilisation
    assert use is not None
    assert (use.allocated_core_ms, use.busy_core_ms, use.allocated_gib_ms, use.executors, use.oom_removals) == (
        720 * S,
        36 * S,
        810 * S,
        2,
        0,
    )
    assert [(s.label, s.allocated_core_ms, s.busy_core_ms) for s in use.stages] == [
        ("1.0 stage 1 at job.py:11", 320 * S, 36 * S)
    ]
    assert [(m.executor_id, m.heap_bytes, m.requested_bytes, m.removal_class) for m in use.memory] == [
        ("1", 1_500 * 2**20, 4096 * 2**20, "killed"),
        ("2", 700 * 2**20, 4096 * 2**20, ""),
    ]
    html = render(report)
    assert '<section id="utilisation"><h2>Utilisation and memory</h2>' in html
    assert 'id="chart-core-time"' in html and 'id="chart-memory"' in html
    assert "<tr><th>idle</th><td>684 core-s (95%)</td></tr>" in html
    assert "<td>1</td><td>1.5 GiB</td><td>100.0 MiB</td><td>4.0 GiB</td><td>39%</td><td>killed</td>" in html
