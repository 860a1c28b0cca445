"""``sparktap alert`` as a process: one evaluation with ``--once`` against a chDB directory, and the one-line error
when another process holds that directory (in embedded mode the collector owns the store and runs the alerter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparktap.collector.storage import open_storage
from sparktap.collector.storage.target import StorageTarget
from tests.fixtures.receiver import Receiver
from tests.support import detection_samples as samples
from tests.support.detection import load

pytestmark = pytest.mark.integration


def _alert(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktap", "alert", "--once"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_alert_once_and_a_held_store(tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811
    directory = tmp_path / "chdb"
    target = StorageTarget(kind="chdb", path=directory, database="sparktap")
    env = {
        "SPARKTAP_CLICKHOUSE__URL": f"chdb://{directory}",
        "SPARKTAP_ALERTS__WEBHOOK_URL": receiver.url("hook"),
        "SPARKTAP_ALERTS__STATE_PATH": str(tmp_path / "state.json"),
        "SPARKTAP_ALERTS__LOOKBACK_SECONDS": str(10 * 365 * 86400),
        "SPARKTAP_ALERTS__MIN_SEVERITY": "critical",
    }
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(storage, [samples.skewed_join()])
        held = _alert(env)
    finally:
        storage.close()
    assert held.returncode == 2, held.stderr
    line = held.stderr.strip().splitlines()[-1]  # chDB itself may print its lock error before ours
    assert line.startswith("error: cannot open chDB store") and "collector process owns the store" in line
    assert "Traceback" not in held.stderr

    done = _alert(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2 finding(s); sent 2 alert(s) and 0 resolve(s); 0 failed"
    assert sorted(m["finding"]["rule"] for m in receiver.take()["hook"]) == ["data_skew", "task_time_skew"]
    assert json.loads((tmp_path / "state.json").read_text())["version"] == 1
    assert "s3cr3t" not in done.stderr + done.stdout
