"""Utilisation and cost SQL (issue 25) on real ClickHouse (chDB and the Debian clickhouse-server 18.16) over
applications whose executor lifetimes and task run times give hand-computable figures (``cost_samples.py``), and
``sparktap cost`` as a process over the server: its figures equal the hand computation to the cent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparktap.collector.storage import Storage
from sparktap.detection.cost import cost_rows, money
from sparktap.detection.macros import expand
from sparktap.detection.prices import CostSettings
from sparktap.detection.sql import SqlContext
from sparktap.detection.utilisation import USAGE_COLUMNS, Level, usage_query
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
    a = apps[("app-cost-a", -1)]
    assert (a["user"], a["app_name"], a["executors"], a["idle_share"], a["running"]) == (
        "alice",
        "daily-report",
        2,
        0.95,
        0,
    )
    # cores only (no memory request in these events): 0.2 core-h x 0.06 (prod-eu), 16 core-h x 0.05 (default)
    assert (money(float(a["cost"])), money(float(apps[("app-cost-c", -1)]["cost"]))) == ("0.01", "0.80")

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

    by_user = cost_rows(
        storage.query, "user", *WINDOW, prices=PRICES, database=storage.database, version=storage.version()
    )
    assert [(r.key, r.applications, round(r.core_hours, 6), money(r.cost)) for r in by_user] == [
        ("bob", 1, 16.0, "0.80"),
        ("alice", 2, round(840 / 3600, 6), "0.01"),  # (720 + 120) core-s x 0.06 / 3600 = 0.014
    ]


def test_cost_cli_by_app_as_json_and_table(clickhouse_server: ClickHouseServer, server_storage: Storage) -> None:
    server_storage.ensure_schema()
    load(server_storage, cost_samples.costed_apps())
    env = {
        **os.environ,
        "SPARKTAP_COST__CORE_HOUR": "0.05",
        "SPARKTAP_COST__CLUSTERS": json.dumps({"prod-eu": {"core_hour": 60}}),
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

    done = cost("--by", "app", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    # prod-eu at 60 per core-hour: daily-report 0.2 core-h = 12.00, hourly-load 1/30 core-h = 2.00;
    # train-model (prod-us, the default 0.05) 16 core-h = 0.80
    assert [(r["key"], r["cost_rounded"]) for r in out["rows"]] == [
        ("daily-report", "12.00"),
        ("hourly-load", "2.00"),
        ("train-model", "0.80"),
    ]
    assert (out["by"], out["currency"], out["total_cost"]) == ("app", "EUR", "14.80")
    table = cost("--by", "user")
    assert table.returncode == 0, table.stderr[-2000:]
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["user", "apps", "core-h", "busy", "core-h", "idle", "GiB-h", "cost", "(EUR)"]
    assert lines[2].split() == ["alice", "2", "0.23", "0.01", "95%", "0.00", "14.00"]
    assert lines[3].split() == ["bob", "1", "16.00", "1.00", "94%", "0.00", "0.80"]
    assert lines[4].split() == ["total", "3", "14.80"]
    us = cost("--by", "user", "--cluster", "prod-us", "--json")
    assert us.returncode == 0, us.stderr[-2000:]
    assert [(r["key"], r["applications"], r["cost_rounded"]) for r in json.loads(us.stdout)["rows"]] == [
        ("bob", 1, "0.80")
    ]
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
