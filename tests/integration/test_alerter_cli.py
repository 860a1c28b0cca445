"""``sparktap alert`` as a process: one evaluation with ``--once`` against a chDB directory, and the one-line error
when another process holds that directory (in embedded mode the collector owns the store and runs the alerter)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from sparktap.store.target import StorageTarget
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


def test_a_kill_after_7_of_10_sends_sends_only_the_3_others_after_the_restart(
    tmp_path: Path,
    receiver: Receiver,  # noqa: F811
) -> None:
    """The state is saved after each delivery: SIGKILL while the 8th message is on its way (the webhook holds it),
    and the next run sends exactly the 3 not yet delivered, none of the 7 again (it re-sent all 7 before)."""
    directory = tmp_path / "chdb"
    storage = open_storage(StorageTarget(kind="chdb", path=directory, database="sparktap"))
    try:
        storage.ensure_schema()
        skewed = [samples.skewed_join(app_id=f"app-skew-{i}") for i in range(3)]  # 3 findings each
        load(storage, [*skewed, samples.running_failures()])  # and 1
    finally:
        storage.close()
    env = {
        **os.environ,
        "SPARKTAP_CLICKHOUSE__URL": f"chdb://{directory}",
        "SPARKTAP_ALERTS__WEBHOOK_URL": receiver.url("hook"),
        "SPARKTAP_ALERTS__STATE_PATH": str(tmp_path / "state.json"),
        "SPARKTAP_ALERTS__LOOKBACK_SECONDS": str(10 * 365 * 86400),
        "SPARKTAP_ALERTS__MIN_SEVERITY": "warning",
    }
    receiver.hold_after["hook"] = 7
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "sparktap", "alert", "--once"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_until(lambda: receiver.held >= 1 or first.poll() is not None, 240, "the 8th message held by the webhook")
        first.send_signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    before = [m["key"] for m in receiver.take()["hook"]]
    assert len(before) == 7
    receiver.hold_after.clear()
    receiver.release.set()

    done = _alert({k: v for k, v in env.items() if k.startswith("SPARKTAP_")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "10 finding(s); sent 3 alert(s) and 0 resolve(s); 0 failed"
    after = [m["key"] for m in receiver.take()["hook"]]
    assert len(after) == 3 and not set(after) & set(before) and len(set(before) | set(after)) == 10
