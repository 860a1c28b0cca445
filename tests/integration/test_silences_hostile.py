"""Silences and the CLI's terminal output against hostile input (issue 41 items 9, 10 and 12), on chDB and (the
audit table) clickhouse-server 18.16:

- a silence whose application glob matches every name (``*``, ``**``, ``?*``, ``*?*``) and names no rule is refused in
  one line, exit 2, unless ``--all`` is given;
- its author is the OS account (not ``$USER``), an ``--author`` name recorded beside it;
- ``--for`` with a 400-digit number is one line, exit 2 (it was an unhandled OverflowError);
- every finding a silence keeps quiet gets one audit row (which silence, which finding, when), once while it stays
  muted;
- a Spark Connect user id and a silence reason holding ESC, BEL, CR and newlines reach ``sparktap findings`` and
  ``sparktap silence list`` as visible escapes, never as control characters; ``--format json`` stays exact JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from sparktap.cli import cli
from sparktap.detection.alerter import Alerter
from sparktap.detection.settings import AlertSettings
from sparktap.detection.silences import SilenceStore, os_user
from sparktap.schemas.ddl import SILENCED_TABLE
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.receiver import Receiver
from tests.support import detection_samples as samples
from tests.support import sample_app
from tests.support.detection import Clock, load

pytestmark = pytest.mark.integration

T0 = sample_app.BASE_TIME_MS
HOSTILE_USER = "bob\x1b]0;owned\x07\r\nrule  critical  forged row"
HOSTILE_REASON = "known\x1b[2J\x1b[1;1H\x07\rforged\x9b31m"
CONTROL = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\n"}


def hostile(app: sample_app.App) -> sample_app.App:
    app.events = [
        e.model_copy(update={"user_id": HOSTILE_USER}) if e.event_type == "job_start" else e for e in app.events
    ]
    return app


@pytest.fixture(scope="module")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = Path(tmp_path_factory.mktemp("silences")) / "chdb"
    with open_storage(StorageTarget(kind="chdb", path=directory, database="sparktap")) as storage:
        storage.ensure_schema()
        load(storage, [hostile(samples.skewed_join()), samples.tiny_tasks()])
    yield directory


def sparktap(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "sparktap", *args],
        env={**os.environ, "SPARKTAP_CLICKHOUSE__URL": f"chdb://{directory}", "USER": "mallory", "LOGNAME": "mallory"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_match_everything_glob_a_huge_for_and_the_author(chdb_dir: Path) -> None:
    for glob in ("*", "**", "?*", "*?*"):
        done = sparktap(chdb_dir, "silence", "add", "--app-name", glob, "--reason", "noise")
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == (
            f'error: a silence needs --rule or an --app-name glob that does not match every name (app_name="{glob}" '
            "matches every name): it would hide every alert; narrow it, or add --all to silence everything on "
            "purpose\n"
        ), glob
    huge = "9" * 400
    done = sparktap(chdb_dir, "silence", "add", "--rule", "data_skew", "--for", f"{huge}d", "--reason", "x")
    assert done.returncode == 2
    assert done.stderr == f"error: --for '{'9' * 30}…99999d' is too long a duration: the number is too large\n"
    done = sparktap(chdb_dir, "silence", "add", "--rule", "data_skew", "--for", "400d", "--reason", "x")
    assert done.returncode == 2 and done.stderr == (
        'error: --for "400d" is longer than a silence may last (366d); give a shorter time and add another silence '
        "when it ends\n"
    )
    done = sparktap(chdb_dir, "silence", "add", "--app-name", "app-[^x]ail-1", "--rule", "data_skew", "--reason", "x")
    assert done.returncode == 2 and "--app-name 'app-[^x]ail-1': the class at position 5 starts with '^'" in done.stderr

    done = sparktap(chdb_dir, "silence", "add", "--all", "--for", "1m", "--reason", "maintenance", "--author", "alice")
    assert done.returncode == 0, done.stderr
    me = os_user()
    assert me != "mallory" and done.stdout.endswith(f" by {me} (as alice)\n")  # $USER is not an identity
    assert done.stdout.startswith("silence ") and ": everything until " in done.stdout
    listed = sparktap(chdb_dir, "silence", "list", "--format", "json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["created_by"], row["app_name"], row["rule"]) == (f"{me} (as alice)", "", "")
    assert sparktap(chdb_dir, "silence", "expire", row["id"]).returncode == 0


def test_terminal_output_escapes_control_characters(chdb_dir: Path) -> None:
    runner = CliRunner()
    url = f"chdb://{chdb_dir}"
    with open_storage(StorageTarget(kind="chdb", path=chdb_dir, database="sparktap")) as storage:
        made = SilenceStore.of(storage).add(rule="small_partitions", duration="2h", reason=HOSTILE_REASON)
    listed = runner.invoke(cli, ["silence", "list", "--storage-url", url])
    assert listed.exit_code == 0, listed.output
    assert not CONTROL & set(listed.output)
    lines = listed.output.splitlines()
    assert len(lines) == 3  # headers, rule, one silence: no forged row
    assert lines[2].startswith(made.id) and lines[2].endswith("known\\x1b[2J\\x1b[1;1H\\x07\\x0dforged\\x9b31m")
    as_json = runner.invoke(cli, ["silence", "list", "--storage-url", url, "--format", "json"])
    assert json.loads(as_json.output)["reason"] == HOSTILE_REASON  # exact, escaped by JSON itself

    found = runner.invoke(cli, ["findings", "--since", "3d", "--min-severity", "info", "--storage-url", url])
    assert found.exit_code == 0, found.output
    assert not CONTROL & set(found.output)
    escaped = "bob\\x1b]0;owned\\x07\\x0d\\x0arule  critical  forged row"
    rows = [line for line in found.output.splitlines()[2:]]
    assert rows and all(line.startswith("skewed-join ") == (escaped in line) for line in rows)
    assert sum(1 for line in rows if line.startswith("skewed-join ")) >= 2  # data skew and its time skew
    assert not any(line.startswith("rule") for line in rows)  # the forged row is inside its cell
    as_json = runner.invoke(cli, ["findings", "--since", "3d", "--storage-url", url, "--format", "json"])
    users = {json.loads(line)["user"] for line in as_json.output.splitlines()}
    assert HOSTILE_USER in users
    with open_storage(StorageTarget(kind="chdb", path=chdb_dir, database="sparktap")) as storage:
        SilenceStore.of(storage).expire(made.id)


def _alerter_settings(receiver: Receiver, tmp_path: Path) -> AlertSettings:
    return AlertSettings(
        webhook_url=SecretStr(receiver.url("hook")),
        min_severity="info",
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
    )


def audit_rows(storage: Storage) -> list[dict[str, object]]:
    return storage.query(
        f"SELECT silence_id, finding_key, rule, app_name, muted_at_ms FROM {storage.database}.{SILENCED_TABLE} "  # noqa: S608
        "ORDER BY finding_key, muted_at_ms"
    )


def check_audit(storage: Storage, receiver: Receiver, tmp_path: Path) -> None:
    clock = Clock(T0 + 60_000)
    silences = SilenceStore.of(storage, clock)
    quiet = silences.add(rule="small_partitions", app_name="tiny-*", duration="1h", reason="known")
    alerter = Alerter.from_storage(storage, _alerter_settings(receiver, tmp_path), clock=clock)
    first = alerter.evaluate()
    assert first.silenced == 1
    key = "small_partitions|prod-eu|app-tiny-tasks|1|stage=1.0"
    assert key not in {m["key"] for m in receiver.take()["hook"]}
    assert audit_rows(storage) == [
        {"silence_id": quiet.id, "finding_key": key, "rule": "small_partitions", "app_name": "tiny-tasks",
         "muted_at_ms": T0 + 60_000}
    ]  # fmt: skip
    clock.ms += 60_000
    assert alerter.evaluate().silenced == 1
    assert len(audit_rows(storage)) == 1  # still muted by the same silence: one row, not one per pass
    silences.expire(quiet.id)
    clock.ms += 60_000
    assert alerter.evaluate().silenced == 0
    assert [m["key"] for m in receiver.take()["hook"]] == [key]
    assert len(audit_rows(storage)) == 1


def test_every_muted_finding_has_an_audit_row_on_chdb(tmp_path: Path, receiver: Receiver) -> None:
    with open_storage(StorageTarget(kind="chdb", path=tmp_path / "chdb", database="audit")) as storage:
        storage.ensure_schema()
        load(storage, [samples.tiny_tasks(), samples.skewed_join()])
        check_audit(storage, receiver, tmp_path)


def test_every_muted_finding_has_an_audit_row_on_clickhouse_server(
    server_storage: Storage, receiver: Receiver, tmp_path: Path
) -> None:
    server_storage.ensure_schema()
    load(server_storage, [samples.tiny_tasks(), samples.skewed_join()])
    check_audit(server_storage, receiver, tmp_path)
