"""Follow mode end to end: ``sparktap import --follow`` on a History Server-style directory; a real Spark application
without the listener writes its log there (``<app>.inprogress``, renamed when it ends); its events reach ClickHouse,
detection runs, and its findings reach chat (the local HTTP receiver standing in for a webhook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktap.local.ports import free_port, wait_until
from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import ROOT, eventlog_conf
from tests.fixtures.listener import clear_listener_properties
from tests.fixtures.receiver import SECRET, Receiver
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.timeout(600)  # a Spark application, the follower, an alerter pass: slow on a loaded machine


def no_floors_env() -> dict[str, str]:
    """No time-lost floors and one-byte byte floors: on an application this small the rules fire (as documented)."""
    from sparktap.detection.thresholds import Thresholds

    env = {}
    for group, values in Thresholds().model_dump().items():
        if isinstance(values, dict) and "min_time_lost_ms" in values:
            prefix = f"SPARKTAP_ALERTS__THRESHOLDS__{group.upper()}__"
            env[prefix + "MIN_TIME_LOST_MS"] = "0"
            env[prefix + "CRITICAL_MIN_TIME_LOST_MS"] = "0"
    env["SPARKTAP_ALERTS__THRESHOLDS__DATA_SKEW__MIN_MAX_BYTES"] = "1"
    env["SPARKTAP_ALERTS__THRESHOLDS__SKEW_NOT_FIXED__MIN_PARTITION_BYTES"] = "1"
    return env


def test_a_new_application_in_the_followed_directory_reaches_storage_detection_and_chat(
    spark_sessions: SparkSessions, clickhouse_server: ClickHouseServer, receiver: Receiver, tmp_path: Path
) -> None:
    from tests.apps.history_logs import aqe

    hs_dir = tmp_path / "spark-history"
    hs_dir.mkdir()
    database = random_database("sparktap_follow_chat")
    url = clickhouse_server.url(database)
    port = free_port()
    out = (tmp_path / "follow.out").open("w")
    follower = subprocess.Popen(
        [sys.executable, "-m", "sparktap", "import", str(hs_dir), "--follow", "--interval", "0.3",
         "--storage-url", url, "--checkpoint", str(tmp_path / "ck.json"), "--cluster", "followed",
         "--metrics-port", str(port), "--metrics-host", "127.0.0.1"],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    storage = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)

    def count(table: str, app: str, dedup: bool = True) -> int:
        view = f"{table}_dedup" if dedup else table
        try:
            return int(storage.query(f"SELECT count() AS n FROM {view} WHERE app_id = '{app}'")[0]["n"])
        except Exception:  # noqa: BLE001 - the follower creates the schema at its first look
            return -1

    try:
        clear_listener_properties()
        spark = spark_sessions.fresh({**eventlog_conf(hs_dir), "spark.app.name": "followed-no-listener"})
        try:
            aqe(spark)
            app = spark.sparkContext.applicationId
        finally:
            spark_sessions.stop()
        final_log = hs_dir / app
        assert final_log.is_file() and not (hs_dir / f"{app}.inprogress").exists()
        expected_tasks = sum(1 for line in final_log.read_bytes().splitlines() if b'"SparkListenerTaskEnd"' in line)
        wait_until(
            lambda: count("app_end", app) == 1 and count("task_end", app) == expected_tasks,
            90,
            "the followed application's events in ClickHouse",
            interval=0.3,
        )
        # the log was read while in progress, then again once renamed: nothing was sent twice
        for table in ("task_end", "stage_completed", "job_end", "app_start"):
            assert count(table, app, dedup=False) == count(table, app), table
        env = {
            **os.environ,
            **no_floors_env(),
            "SPARKTAP_CLICKHOUSE__URL": url,
            "SPARKTAP_ALERTS__WEBHOOK_URL": receiver.url("hook"),
            "SPARKTAP_ALERTS__STATE_PATH": str(tmp_path / "alerts.json"),
            "SPARKTAP_ALERTS__LOOKBACK_SECONDS": str(86400),
        }
        alert = subprocess.run(
            [sys.executable, "-m", "sparktap", "alert", "--once"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert alert.returncode == 0, alert.stdout + alert.stderr
        summary = alert.stdout.strip().splitlines()[-1]
        sent = int(summary.split("; sent ", 1)[1].split(" ", 1)[0])
        assert sent >= 1 and summary.endswith(f"sent {sent} alert(s) and 0 resolve(s); 0 failed"), summary
        messages = receiver.take().get("hook", [])
        assert len(messages) == sent
        for message in messages:
            assert app in str(message), message
            assert SECRET not in str(message)
    finally:
        follower.terminate()
        follower.wait(60)
        out.close()
        storage.close()
        drop_database(clickhouse_server, database)
    log = (tmp_path / "follow.out").read_text()
    assert follower.returncode == 0, log
    assert log.splitlines()[-1] == "stopped following", log
    assert "Traceback" not in log
