"""One application, one copy; every skipped or empty log gets a line (issue 39, docs/import.md): real event logs
(one written by Spark ``local[2]``), ``sparktap import`` run as its own process into chDB.

- a copy of an imported log under another name (a re-run of a test, a copied log) is skipped with one line naming
  the file it was imported from, on every run, and the store keeps one copy of its rows; the same file again is a
  no-op, as before;
- an empty file and a fragment (a log's lines without its application start and environment) each get one line;
- the exit status is 1 whenever a log was skipped (the documented 0/1 contract).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparktap.store import open_storage
from sparktap.store.target import parse_storage_url
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import eventlog_conf
from tests.fixtures.listener import clear_listener_properties
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.timeout(900)

NO_APPLICATION = (
    "no application in it: neither a SparkListenerApplicationStart nor a SparkListenerEnvironmentUpdate (empty, or a "
    "fragment of a rolled log: import its eventlog_v2_* directory)"
)


@dataclass
class Log:
    data: bytes
    app_id: str
    tasks: int


@pytest.fixture(scope="module")
def log(spark_sessions: SparkSessions, tmp_path_factory: pytest.TempPathFactory) -> Log:
    from tests.apps.history_logs import small

    directory = tmp_path_factory.mktemp("written")
    clear_listener_properties()
    try:
        spark = spark_sessions.fresh({**eventlog_conf(directory), "spark.app.name": "history-copies"})
        small(spark)
        app_id = spark.sparkContext.applicationId
    finally:
        spark_sessions.stop()
    data = (directory / app_id).read_bytes()
    return Log(data, app_id, data.count(b'"Event":"SparkListenerTaskEnd"'))


def run_import(logs: Path, store: Path, checkpoint: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own command
        [sys.executable, "-m", "sparktap", "import", str(logs), "--storage-url", f"chdb://{store}", "--checkpoint",
         str(checkpoint), "--cluster", "copies"],
        cwd=logs.parent, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def counts(store: Path, app_id: str) -> tuple[int, int, int]:
    """(app_start rows, task_end rows, task_end rows after deduplication) of the application."""
    with open_storage(parse_storage_url(f"chdb://{store}")) as storage:

        def one(sql: str) -> int:
            return int(next(iter(storage.query(sql)[0].values())))

        where = f"WHERE app_id = '{app_id}'"
        return (
            one(f"SELECT count() FROM {storage.qualified('app_start')} FINAL {where}"),
            one(f"SELECT count() FROM {storage.qualified('task_end')} {where}"),
            one(f"SELECT count() FROM {storage.qualified('task_end_dedup')} {where}"),
        )


def test_a_copy_is_skipped_with_a_line_and_stored_once(log: Log, tmp_path: Path) -> None:
    logs, store, ck = tmp_path / "logs", tmp_path / "chdb", tmp_path / "ck.json"
    logs.mkdir()
    (logs / log.app_id).write_bytes(log.data)
    first = run_import(logs, store, ck)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.splitlines()[0].startswith("imported 1 logs: 1 applications, ")

    shutil.copy(logs / log.app_id, logs / "copy-of-it")
    copied = f'skipped: logs/copy-of-it: app_id="{log.app_id}" app_attempt="" is already imported from file="logs/'
    for _ in range(2):  # said on every run: the copy is never checkpointed
        again = run_import(logs, store, ck)
        assert again.returncode == 1, again.stderr[-3000:]
        lines = again.stdout.splitlines()
        assert lines[0].startswith("imported 0 logs: 0 applications, 0 events"), lines
        assert "unchanged since the last import (nothing to send): 1 logs" in lines
        assert [line for line in lines if line.startswith("skipped")] == [
            f'{copied}{log.app_id}": one application, one copy (not imported; remove the copy, or import it into '
            "another store)"
        ]
    assert counts(store, log.app_id) == (1, log.tasks, log.tasks)  # one copy of its rows, none replaced

    (logs / "copy-of-it").unlink()  # the same file again: a no-op, as before
    same = run_import(logs, store, ck)
    assert same.returncode == 0 and "unchanged since the last import (nothing to send): 1 logs" in same.stdout


def test_empty_logs_and_fragments_get_a_line(log: Log, tmp_path: Path) -> None:
    logs, store, ck = tmp_path / "logs", tmp_path / "chdb", tmp_path / "ck.json"
    logs.mkdir()
    (logs / "empty").write_bytes(b"")
    lines = log.data.splitlines(keepends=True)
    fragment = [
        line for line in lines if b"SparkListenerApplicationStart" not in line and b"EnvironmentUpdate" not in line
    ]
    assert len(fragment) == len(lines) - 2
    (logs / "fragment").write_bytes(b"".join(fragment))
    run = run_import(logs, store, ck)
    assert run.returncode == 1, run.stderr[-3000:]
    out = run.stdout.splitlines()
    assert out[0].startswith("imported 0 logs: 0 applications, 0 events"), out
    assert [line for line in out if line.startswith("skipped")] == [
        f"skipped: logs/empty: {NO_APPLICATION}",
        f"skipped: logs/fragment: {NO_APPLICATION}",
    ]


def test_engine_spark_keeps_one_copy_in_a_task_and_names_copies_across_tasks(
    log: Log, clickhouse_server: ClickHouseServer, tmp_path: Path
) -> None:
    """``--engine spark`` with two tasks: two copies under the log's own name (two directories named on the command
    line) go to one task, which imports one and skips the other; a copy under another name lands in the other task,
    so both import it, and the summary names it (exit 1). Run again, the copy that was skipped is skipped again,
    against the checkpoint's other logs (every task knows their application attempts)."""
    logs, ck = tmp_path / "logs", tmp_path / "ck.json"
    for where in ("a", "b"):
        (logs / where).mkdir(parents=True)
        (logs / where / log.app_id).write_bytes(log.data)
    (logs / "a" / "renamed").write_bytes(log.data)
    database = random_database("copies")
    command = [sys.executable, "-m", "sparktap", "import", str(logs / "a"), str(logs / "b"), "--engine", "spark",
               "--master", "local[2]",
               "--partitions", "2", "--storage-url", clickhouse_server.url(database), "--checkpoint", str(ck),
               "--cluster", "copies"]  # fmt: skip
    app = f'app_id="{log.app_id}" app_attempt=""'
    uri = logs.as_uri()
    skipped = (
        f'skipped: {uri}/b/{log.app_id}: {app} is already imported from file="{uri}/a/{log.app_id}": one application, '
        "one copy"
    )
    try:
        for run in range(2):
            done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
            assert done.returncode == 1, done.stdout + done.stderr[-3000:]
            problems = [line for line in done.stdout.splitlines() if line.startswith(("skipped", "imported twice"))]
            if run == 0:
                assert done.stdout.startswith("imported 2 logs: 1 applications, "), done.stdout
                assert [p.split(" (")[0] for p in problems] == [
                    skipped,
                    f'imported twice: {uri}/a/renamed: {app} was also imported from file="{uri}/a/{log.app_id}" by '
                    "another task of this run: one application, one copy",
                ], problems
            else:
                assert done.stdout.startswith("imported 0 logs: 0 applications, 0 events"), done.stdout
                assert [p.split(" (")[0] for p in problems] == [skipped], problems
    finally:
        drop_database(clickhouse_server, database)
