"""Who pays (issue 41, item 8), on chDB and the 18.16 server: a team tag a Spark user set moves no cost where the
platform's team mapping owns the cluster, a Spark Connect server's cost goes to its Connect users by their task time,
and a cluster priced 0 or not priced is flagged (``--strict``: exit 3).

The applications (every core-second costs 0.001 at the default 3.6 per core-hour; memory is free):

- ``app-connect`` on ``shared-1``, run by the Connect server's OS user ``spark``, tagged ``ml``: 4 cores for 100 s
  = 400 core-s; task run time alice 18 s, bob 9 s, none (the server's own) 9 s → alice 200, bob 100, spark 100.
- ``app-forged`` on ``prod-eu``, mallory's, tagged ``payments`` (the forgery): 2 cores × 100 s = 200 core-s, and
  prod-eu is priced 0.
- ``app-carol`` on ``pay-1``, carol's, tagged ``ml``: 1 core × 300 s = 300 core-s; pay-1 has no price of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktap.detection.cost import cost_rows, price_warnings
from sparktap.detection.prices import CostSettings
from sparktap.detection.teams import TeamRule
from sparktap.store import Storage
from tests.fixtures.clickhouse import ClickHouseServer
from tests.support.cost_samples import executor
from tests.support.detection import WINDOW, load
from tests.support.sample_app import BASE_TIME_MS, App

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
S = 1_000
T0 = BASE_TIME_MS
CLUSTERS = {"prod-eu": {"core_hour": 0}, "shared-1": {"core_hour": 3.6}}
PRICES = CostSettings(core_hour=3.6, clusters=CLUSTERS)
TEAMS = [
    {"cluster": "pay-*", "team": "payments"},
    {"cluster": "prod-*", "team": "data"},
    {"cluster": "shared-*", "user": ["alice", "bob"], "trust_tag": True},
]
RULES = tuple(TeamRule.model_validate(r) for r in TEAMS)


def _app(app_id: str, cluster: str, user: str, team: str, cores: int, seconds: int) -> App:
    app = App(app_id, app_name=f"{app_id}-job", cluster=cluster, start_ms=T0, properties={})
    app.emit("app_start", T0, properties={}, user=user, tags={"team": team})
    executor(app, "1", T0, cores, 1024, 0)
    return app


def apps() -> list[App]:
    connect = _app("app-connect", "shared-1", "spark", "ml", 4, 100)
    for stage, user, task_ms in ((1, "alice", 2_000), (2, "bob", 1_000), (3, "", 1_000)):
        connect.stage(stage, T0 + 50 * S, tasks=10, task_ms=task_ms, duration_ms=10 * S, user_id=user)
    connect.end(T0 + 100 * S)
    forged = _app("app-forged", "prod-eu", "mallory", "payments", 2, 100)
    forged.stage(1, T0 + 50 * S, tasks=10, task_ms=1_000, duration_ms=10 * S)
    forged.end(T0 + 100 * S)
    carol = _app("app-carol", "pay-1", "carol", "ml", 1, 300)
    carol.stage(1, T0 + 50 * S, tasks=10, task_ms=1_000, duration_ms=10 * S)
    carol.end(T0 + 300 * S)
    return [connect, forged, carol]


def _costs(storage: Storage, by: str, teams: tuple[TeamRule, ...] | None = None) -> dict[str, tuple[int, float]]:
    rows = cost_rows(
        storage.query, by, *WINDOW, prices=PRICES, database=storage.database, version=storage.version(), teams=teams
    )
    return {r.key: (r.applications, round(r.core_hours * 3600, 6), round(r.cost, 9)) for r in rows}


def test_connect_users_pay_their_share_and_a_forged_tag_moves_nothing(storage: Storage) -> None:
    storage.ensure_schema()
    load(storage, apps())
    # by user: the Connect server's 400 core-s split 2:1:1 by task run time; the OS user keeps the server's own
    assert _costs(storage, "user") == {
        "carol": (1, 300.0, 0.3),
        "alice": (1, 200.0, 0.2),
        "spark": (1, 100.0, 0.1),
        "bob": (1, 100.0, 0.1),
        "mallory": (1, 200.0, 0.0),  # prod-eu is priced 0 (flagged below)
    }
    # by team with the mapping: mallory's "payments" tag is shown nowhere as an owner; the shared cluster trusts
    # the tag for alice's and bob's work only; the server's own share is unmapped
    assert _costs(storage, "team", RULES) == {
        "payments": (1, 300.0, 0.3),
        "ml": (1, 300.0, 0.3),
        "(unmapped)": (1, 100.0, 0.1),
        "data": (1, 200.0, 0.0),
    }
    # without a mapping: the tags as set (a single-team install), the forged tag included
    assert _costs(storage, "team") == {"ml": (2, 700.0, 0.7), "payments": (1, 200.0, 0.0)}
    # day by day (one day here): the same split, each row with its UTC day
    daily = cost_rows(
        storage.query, "team", *WINDOW, prices=PRICES, database=storage.database, version=storage.version(),
        teams=RULES, per_day=True,
    )  # fmt: skip
    day = dt.datetime.fromtimestamp(T0 / 1000, dt.UTC).date().isoformat()
    assert {(r.day, r.key): round(r.cost, 9) for r in daily} == {
        (day, "payments"): 0.3,
        (day, "ml"): 0.3,
        (day, "(unmapped)"): 0.1,
        (day, "data"): 0.0,
    }
    warnings = price_warnings(
        storage.query, *WINDOW, prices=PRICES, database=storage.database, version=storage.version()
    )
    assert [(w.cluster, w.problem, w.core_hours, w.core_hour_price) for w in warnings] == [
        ("pay-1", "missing", 300 / 3600, 3.6),
        ("prod-eu", "zero", 200 / 3600, 0.0),
    ]


def test_cost_cli_flags_unpriced_clusters_and_says_when_tags_are_trusted(
    clickhouse_server: ClickHouseServer, server_storage: Storage
) -> None:
    server_storage.ensure_schema()
    load(server_storage, apps())
    env = {**os.environ, "SPARKTAP_COST__CORE_HOUR": "3.6", "SPARKTAP_COST__CLUSTERS": json.dumps(CLUSTERS)}
    env.pop("SPARKTAP_ALERTS__ROUTING_PATH", None)
    url = clickhouse_server.url(server_storage.database)

    def cost(*args: str, teams: bool = True) -> subprocess.CompletedProcess[str]:
        mapped = {"SPARKTAP_COST__TEAMS": json.dumps(TEAMS)} if teams else {}
        return subprocess.run(
            [sys.executable, "-m", "sparktap", "cost", "--since", "7d", "--storage-url", url, *args],
            env={**env, **mapped},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    flagged = [
        'warning: cluster="pay-1" used 0.08 core-h but it has no price of its own in SPARKTAP_COST__CLUSTERS: the '
        "default 3.6 USD per core-hour was used; set its price in SPARKTAP_COST__CLUSTERS "
        '(\'{"<cluster>": {"core_hour": …}}\')',
        'warning: cluster="prod-eu" used 0.06 core-h but its core-hour price is 0, so its cost shows as 0; set its '
        'price in SPARKTAP_COST__CLUSTERS (\'{"<cluster>": {"core_hour": …}}\')',
    ]
    done = cost("--by", "team", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == flagged
    out = json.loads(done.stdout)
    assert [(r["key"], r["applications"], r["cost_rounded"]) for r in out["rows"]] == [
        ("ml", 1, "0.30"),
        ("payments", 1, "0.30"),
        ("(unmapped)", 1, "0.10"),
        ("data", 1, "0.00"),
    ]
    assert [(w["cluster"], w["problem"]) for w in out["price_warnings"]] == [("pay-1", "missing"), ("prod-eu", "zero")]
    assert math.isclose(out["price_warnings"][1]["core_hours"], 200 / 3600)
    strict = cost("--by", "user", "--strict")
    assert strict.returncode == 3 and strict.stderr.splitlines() == flagged
    table = [line.split() for line in strict.stdout.splitlines()]
    assert [row[:2] + row[-1:] for row in table[2:]] == [
        ["carol", "1", "0.30"],
        ["alice", "1", "0.20"],
        ["bob", "1", "0.10"],  # equal cost and core-hours: by name
        ["spark", "1", "0.10"],
        ["mallory", "1", "0.00"],
        ["total", "5", "0.70"],
    ]
    trusted = cost("--by", "team", teams=False)
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert trusted.stderr.splitlines() == [
        "warning: no team mapping (teams: in the routing file, SPARKTAP_COST__TEAMS): user-set team tags decide "
        "routing, silences and cost; see docs/security.md",
        *flagged,
    ]
    assert [line.split()[0] for line in trusted.stdout.splitlines()[2:]] == ["ml", "payments", "total"]
    every = json.dumps({c: {"core_hour": 1} for c in ("prod-eu", "pay-1", "shared-1")})
    priced = subprocess.run(
        [sys.executable, "-m", "sparktap", "cost", "--since", "7d", "--storage-url", url, "--strict"],
        env={**env, "SPARKTAP_COST__CLUSTERS": every},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert priced.returncode == 0 and "cluster=" not in priced.stderr, priced.stderr[-2000:]
